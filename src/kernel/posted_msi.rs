//! The Linux posted-MSI notification handler (arch/x86/kernel/irq.c, v6.10 on) and the
//! trait every PIR-handling variant implements.
//!
//! In posted mode every device MSI aimed at a CPU sets a bit in that CPU's PIR and at
//! most one notification interrupt (vector 0xeb) is sent until the handler clears ON.
//! The handler demultiplexes: it harvests PIR and calls each pending vector's handler.

use std::future::Future;
use std::pin::Pin;

use super::ops::CpuPort;
use sim_core::Vector;

/// Linux FIRST_EXTERNAL_VECTOR: the lowest vector a device may use.
pub const FIRST_EXTERNAL_VECTOR: u8 = 0x20;
/// Linux POSTED_MSI_NOTIFICATION_VECTOR, which is also FIRST_SYSTEM_VECTOR when posted
/// MSI is configured (arch/x86/include/asm/irq_vectors.h). PIR bits at or above it are
/// not dispatched as device vectors.
pub const POSTED_MSI_NOTIFICATION_VECTOR: Vector = Vector(0xeb);
/// Linux MAX_POSTED_MSI_COALESCING_LOOP.
pub const DEFAULT_MAX_LOOPS: u32 = 3;

/// A boxed, single-threaded handler run.
pub type HandlerFuture = Pin<Box<dyn Future<Output = ()>>>;

/// A way of handling the posted-MSI notification.
///
/// Implement this to try your own variant: write `run` as straight-line async code
/// against [`CpuPort`], awaiting one operation per hardware access, and pass it to the
/// system builder. The engine, the explorer and the native stress driver all run it.
///
/// A handler is a description, not a place to keep state: the explorer re-runs it
/// from its start to reach any point and relies on it doing the same thing given the
/// same results, and its worker threads share it, hence `Send + Sync`.
pub trait PirHandler: Send + Sync {
    /// Stable name used in scenarios, reports and the CLI.
    fn name(&self) -> &str;
    /// True for variants that are wrong on purpose; every output that uses one says so.
    fn is_broken(&self) -> bool {
        false
    }
    /// One execution of the notification handler, from after IDT entry to before
    /// `irq_exit`. It must EOI the notification vector exactly once.
    fn run(&self, cpu: CpuPort) -> HandlerFuture;
}

/// How many harvest rounds the handler may do before clearing ON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopBound {
    /// Linux's `MAX_POSTED_MSI_COALESCING_LOOP`: the loop runs at most `n - 1` times,
    /// because the count includes the final harvest after clearing ON.
    Max(u32),
    /// Loop for as long as a harvest finds something.
    Unbounded,
}

impl LoopBound {
    /// 0 means unbounded, as the `coalesce-loops` experiment and scenarios spell it.
    pub fn from_config(max_loops: u32) -> LoopBound {
        if max_loops == 0 {
            LoopBound::Unbounded
        } else {
            LoopBound::Max(max_loops)
        }
    }

    /// Whether round `i` (1-based, as the kernel's `++i`) of the loop may run.
    pub fn allows(self, i: u32) -> bool {
        match self {
            LoopBound::Max(n) => i < n,
            LoopBound::Unbounded => true,
        }
    }
}

/// Calls the handler of every vector set in `pir_copy`, from FIRST_EXTERNAL_VECTOR up to
/// (not including) the notification vector, in ascending order as
/// `for_each_set_bit_from` does.
pub async fn dispatch_pending(cpu: &CpuPort, pir_copy: [u64; 4]) {
    for (word, bits) in pir_copy.iter().enumerate() {
        let mut bits = *bits;
        while bits != 0 {
            let vector = (word * 64) as u32 + bits.trailing_zeros();
            bits &= bits - 1;
            if vector < FIRST_EXTERNAL_VECTOR as u32 {
                continue;
            }
            if vector >= POSTED_MSI_NOTIFICATION_VECTOR.0 as u32 {
                return;
            }
            cpu.handle_vector(Vector(vector as u8)).await;
        }
    }
}

/// Mainline `handle_pending_pir`: copy all four words with plain loads, exchange only
/// the non-zero ones, then dispatch. Returns whether anything was pending.
pub async fn handle_pending_pir_copy_then_xchg(cpu: &CpuPort) -> bool {
    let mut pir_copy = [0u64; 4];
    for (word, slot) in pir_copy.iter_mut().enumerate() {
        *slot = cpu.load_pir(word).await;
    }
    let mut handled = false;
    for (word, slot) in pir_copy.iter_mut().enumerate() {
        if *slot == 0 {
            continue;
        }
        // The exchange returns whatever is there now, including posts that landed
        // after the load above.
        *slot = cpu.xchg_pir(word, 0).await;
        handled = true;
    }
    if handled {
        dispatch_pending(cpu, pir_copy).await;
    }
    handled
}

/// The `while (++i < MAX_LOOPS)` loop: harvest rounds while a harvest finds something.
pub async fn coalescing_loop<F, Fut>(cpu: &CpuPort, loops: LoopBound, harvest: &F)
where
    F: Fn(CpuPort) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut i = 1;
    while loops.allows(i) {
        if !harvest(cpu.clone()).await {
            break;
        }
        i += 1;
    }
}

/// Mainline's structure around any harvest function: the coalescing loop, clear ON
/// last (to keep the coalescing window open as long as possible), harvest once more
/// (a post that raced with the clear set PIR without notifying), EOI.
pub async fn mainline_skeleton<F, Fut>(cpu: CpuPort, loops: LoopBound, harvest: F)
where
    F: Fn(CpuPort) -> Fut,
    Fut: Future<Output = bool>,
{
    coalescing_loop(&cpu, loops, &harvest).await;
    cpu.clear_on().await;
    harvest(cpu.clone()).await;
    cpu.eoi().await;
}

/// `copy-then-xchg`: the handler as merged in Linux v6.10.
#[derive(Clone, Copy, Debug)]
pub struct CopyThenXchg {
    /// How many harvest rounds before clearing ON (Linux MAX_LOOPS).
    pub loops: LoopBound,
}

impl Default for CopyThenXchg {
    fn default() -> Self {
        CopyThenXchg {
            loops: LoopBound::Max(DEFAULT_MAX_LOOPS),
        }
    }
}

impl PirHandler for CopyThenXchg {
    fn name(&self) -> &str {
        "copy-then-xchg"
    }

    fn run(&self, cpu: CpuPort) -> HandlerFuture {
        Box::pin(mainline_skeleton(cpu, self.loops, |cpu| async move {
            handle_pending_pir_copy_then_xchg(&cpu).await
        }))
    }
}

/// Names accepted wherever a variant is chosen by name. `no-final-recheck` and
/// `xchg-word0` are broken on purpose; `plain-clear-on` is broken on purpose under
/// x86-TSO only.
pub const VARIANT_NAMES: &[&str] = &[
    "copy-then-xchg",
    "rfc",
    "interleaved",
    "per-word-dispatch",
    "no-final-recheck",
    "xchg-word0",
    "kvm-clear-on-first",
    "plain-clear-on",
    "plain-clear-on-mfence",
];

/// Builds a built-in variant by name, or `None` if the name is unknown.
pub fn variant_by_name(name: &str, max_loops: u32) -> Option<Box<dyn PirHandler>> {
    use super::variants::*;
    let loops = LoopBound::from_config(max_loops);
    Some(match name {
        "copy-then-xchg" => Box::new(CopyThenXchg { loops }),
        "rfc" => Box::new(Rfc { loops }),
        "interleaved" => Box::new(Interleaved { loops }),
        "per-word-dispatch" => Box::new(PerWordDispatch { loops }),
        "no-final-recheck" => Box::new(NoFinalRecheck { loops }),
        "xchg-word0" => Box::new(XchgWord0 { loops }),
        "kvm-clear-on-first" => Box::new(KvmClearOnFirst),
        "plain-clear-on" => Box::new(PlainClearOn {
            loops,
            mfence: false,
        }),
        "plain-clear-on-mfence" => Box::new(PlainClearOn {
            loops,
            mfence: true,
        }),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::ops::CpuOp;
    use crate::kernel::uncontended::run_uncontended;

    /// The operations of one uncontended run; the handler must leave ON clear.
    fn run_alone(handler: &dyn PirHandler, pir: [u64; 4]) -> Vec<CpuOp> {
        let run = run_uncontended(handler, pir);
        assert!(!run.on, "handler must leave ON clear");
        run.ops
    }

    #[test]
    fn dispatch_covers_exactly_the_device_vectors_0x20_to_below_the_notification_vector() {
        // 0x1f is a system-reserved vector and 0xeb is the notification vector itself:
        // neither is a device's. 0x20 and 0xea are the first and last device vectors.
        let mut pir = [0u64; 4];
        for v in [0x1fu32, 0x20, 0xea, 0xeb] {
            pir[(v / 64) as usize] |= 1 << (v % 64);
        }
        let run = run_uncontended(&CopyThenXchg::default(), pir);
        assert_eq!(run.handled, vec![0x20, 0xea]);
    }

    #[test]
    fn copy_then_xchg_follows_mainline_sequence() {
        let mut pir = [0u64; 4];
        pir[0] = 1 << 0x21;
        pir[2] = 1 << (0x90 - 128);
        let ops = run_alone(&CopyThenXchg::default(), pir);
        use CpuOp::*;
        let expected = vec![
            LoadPir { word: 0 },
            LoadPir { word: 1 },
            LoadPir { word: 2 },
            LoadPir { word: 3 },
            XchgPir { word: 0, value: 0 },
            XchgPir { word: 2, value: 0 },
            HandleVector(Vector(0x21)),
            HandleVector(Vector(0x90)),
            // second loop round finds nothing: four loads, no write
            LoadPir { word: 0 },
            LoadPir { word: 1 },
            LoadPir { word: 2 },
            LoadPir { word: 3 },
            ClearOn,
            LoadPir { word: 0 },
            LoadPir { word: 1 },
            LoadPir { word: 2 },
            LoadPir { word: 3 },
            Eoi,
        ];
        assert_eq!(ops, expected);
    }

    #[test]
    fn max_loops_one_goes_straight_to_clear_on() {
        let h = CopyThenXchg {
            loops: LoopBound::Max(1),
        };
        let ops = run_alone(&h, [1 << 0x30, 0, 0, 0]);
        assert_eq!(ops[0], CpuOp::ClearOn);
        assert!(ops.contains(&CpuOp::HandleVector(Vector(0x30))));
        assert_eq!(*ops.last().unwrap(), CpuOp::Eoi);
    }

    #[test]
    fn system_vectors_and_low_bits_are_not_dispatched() {
        let mut pir = [0u64; 4];
        pir[0] = 1 << 5; // below FIRST_EXTERNAL_VECTOR
        pir[3] = (1 << (0xeb - 192)) | (1 << (0xea - 192));
        let ops = run_alone(&CopyThenXchg::default(), pir);
        let handled: Vec<_> = ops
            .iter()
            .filter_map(|o| match o {
                CpuOp::HandleVector(v) => Some(v.0),
                _ => None,
            })
            .collect();
        assert_eq!(handled, vec![0xea]);
    }

    #[test]
    fn unknown_variant_name_is_none() {
        for name in VARIANT_NAMES {
            assert_eq!(variant_by_name(name, 3).unwrap().name(), *name);
        }
        assert!(variant_by_name("copy_then_xchg", 3).is_none());
        assert_eq!(LoopBound::from_config(0), LoopBound::Unbounded);
    }
}

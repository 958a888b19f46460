//! The other ways of draining PIR that were proposed or argued over for Linux's
//! posted-MSI handler (DESIGN.md 4.2), each a separate readable implementation.
//!
//! They share only what is truly the same: the loop bound, the dispatch of a word's
//! pending vectors, and the mainline skeleton (loop, clear ON, harvest once more, EOI)
//! where a variant keeps it. Nothing here has a cost: every difference in time comes
//! from the operations each variant performs on the descriptor line.

use super::ops::CpuPort;
use super::posted_msi::{
    coalescing_loop, dispatch_pending, handle_pending_pir_copy_then_xchg, mainline_skeleton,
    HandlerFuture, LoopBound, PirHandler,
};

/// Four plain loads; whether any PIR word is non-zero.
async fn pir_pending(cpu: &CpuPort) -> bool {
    let mut any = false;
    for word in 0..4 {
        any |= cpu.load_pir(word).await != 0;
    }
    any
}

/// `rfc`: the first posted-MSI RFC (Nov 2023). Exchange all four words without
/// looking first, dispatch, and loop while a re-read shows PIR pending; clear ON; if a
/// re-read shows PIR pending, harvest once more. The RFC's `while (i++ < MAX)` runs
/// up to MAX_LOOPS harvests before clearing ON (mainline's runs MAX_LOOPS - 1).
#[derive(Clone, Copy, Debug)]
pub struct Rfc {
    /// How many harvest rounds before clearing ON.
    pub loops: LoopBound,
}

async fn harvest_all_unconditionally(cpu: &CpuPort) -> bool {
    let mut copy = [0u64; 4];
    for (word, slot) in copy.iter_mut().enumerate() {
        *slot = cpu.xchg_pir(word, 0).await;
    }
    let any = copy.iter().any(|w| *w != 0);
    if any {
        dispatch_pending(cpu, copy).await;
    }
    any
}

impl PirHandler for Rfc {
    fn name(&self) -> &str {
        "rfc"
    }

    fn run(&self, cpu: CpuPort) -> HandlerFuture {
        let loops = self.loops;
        Box::pin(async move {
            // `while (i++ < MAX)`: round i (1-based) runs while i - 1 < MAX.
            let mut i = 1;
            while loops.allows(i - 1) {
                harvest_all_unconditionally(&cpu).await;
                i += 1;
                if !pir_pending(&cpu).await {
                    break;
                }
            }
            cpu.clear_on().await;
            if pir_pending(&cpu).await {
                harvest_all_unconditionally(&cpu).await;
            }
            cpu.eoi().await;
        })
    }
}

/// `interleaved`: Peter Zijlstra's proposal (seed 000, 2023-11-15), whole: per word,
/// load it and, if non-zero, exchange it at once, so loads and locked exchanges
/// alternate; dispatch after all four words. His loop harvests, and clears ON once a
/// harvest finds nothing or `++loops > MAX_LOOPS`, then harvests once more: with
/// MAX_LOOPS 3 at saturation that is four harvests before clearing ON, the "one loop
/// too many" tglx pointed out.
#[derive(Clone, Copy, Debug)]
pub struct Interleaved {
    /// How many harvest rounds before clearing ON.
    pub loops: LoopBound,
}

async fn harvest_interleaved(cpu: CpuPort) -> bool {
    let mut copy = [0u64; 4];
    let mut handled = false;
    for (word, slot) in copy.iter_mut().enumerate() {
        if cpu.load_pir(word).await != 0 {
            *slot = cpu.xchg_pir(word, 0).await;
            handled = true;
        }
    }
    if handled {
        dispatch_pending(&cpu, copy).await;
    }
    handled
}

impl PirHandler for Interleaved {
    fn name(&self) -> &str {
        "interleaved"
    }

    fn run(&self, cpu: CpuPort) -> HandlerFuture {
        let loops = self.loops;
        Box::pin(async move {
            let mut rounds = 0u32;
            let mut done = false;
            loop {
                let handled = harvest_interleaved(cpu.clone()).await;
                if done {
                    break;
                }
                // `!handled || ++loops > MAX_LOOPS`: the count moves only when the
                // harvest found something.
                let over = handled && {
                    rounds += 1;
                    match loops {
                        LoopBound::Max(n) => rounds > n,
                        LoopBound::Unbounded => false,
                    }
                };
                if !handled || over {
                    cpu.clear_on().await;
                    done = true;
                }
            }
            cpu.eoi().await;
        })
    }
}

/// `per-word-dispatch`: per word, if non-zero exchange it and run that word's handlers
/// at once; no copy of the whole PIR.
#[derive(Clone, Copy, Debug)]
pub struct PerWordDispatch {
    /// How many harvest rounds before clearing ON.
    pub loops: LoopBound,
}

async fn harvest_per_word(cpu: CpuPort) -> bool {
    let mut handled = false;
    for word in 0..4 {
        if cpu.load_pir(word).await == 0 {
            continue;
        }
        let bits = cpu.xchg_pir(word, 0).await;
        handled = true;
        let mut one_word = [0u64; 4];
        one_word[word] = bits;
        dispatch_pending(&cpu, one_word).await;
    }
    handled
}

impl PirHandler for PerWordDispatch {
    fn name(&self) -> &str {
        "per-word-dispatch"
    }

    fn run(&self, cpu: CpuPort) -> HandlerFuture {
        Box::pin(mainline_skeleton(cpu, self.loops, harvest_per_word))
    }
}

/// `no-final-recheck`: BROKEN ON PURPOSE. Mainline without the harvest after clearing
/// ON: a post landing between the last harvest and the clear sets PIR while ON is
/// still set, so it sends no notification, and nothing looks at PIR again until some
/// later post notifies.
#[derive(Clone, Copy, Debug)]
pub struct NoFinalRecheck {
    /// How many harvest rounds before clearing ON.
    pub loops: LoopBound,
}

impl PirHandler for NoFinalRecheck {
    fn name(&self) -> &str {
        "no-final-recheck"
    }

    fn is_broken(&self) -> bool {
        true
    }

    fn run(&self, cpu: CpuPort) -> HandlerFuture {
        let loops = self.loops;
        Box::pin(async move {
            let harvest =
                |cpu: CpuPort| async move { handle_pending_pir_copy_then_xchg(&cpu).await };
            coalescing_loop(&cpu, loops, &harvest).await;
            cpu.clear_on().await;
            // The missing final harvest is the bug.
            cpu.eoi().await;
        })
    }
}

/// `plain-clear-on`: BROKEN ON PURPOSE, but only where stores are buffered. Mainline
/// with ON cleared by a plain store instead of `pi_clear_on`'s locked `btr`. Under
/// sequential consistency it is mainline. On x86 the store waits in the store buffer
/// while the final harvest's plain loads read PIR. A post can land in that window: it
/// finds ON still set in memory, so it does not notify. The buffered clear then lands,
/// and the vector sits in PIR with ON clear and no notification to come.
#[derive(Clone, Copy, Debug)]
pub struct PlainClearOn {
    /// How many harvest rounds before clearing ON.
    pub loops: LoopBound,
    /// Whether an `mfence` follows the plain store (the repair: the final harvest's
    /// loads cannot pass it).
    pub mfence: bool,
}

impl PirHandler for PlainClearOn {
    fn name(&self) -> &str {
        if self.mfence {
            "plain-clear-on-mfence"
        } else {
            "plain-clear-on"
        }
    }

    fn is_broken(&self) -> bool {
        !self.mfence
    }

    fn run(&self, cpu: CpuPort) -> HandlerFuture {
        let (loops, mfence) = (self.loops, self.mfence);
        Box::pin(async move {
            let harvest =
                |cpu: CpuPort| async move { handle_pending_pir_copy_then_xchg(&cpu).await };
            coalescing_loop(&cpu, loops, &harvest).await;
            cpu.store_clear_on().await;
            if mfence {
                cpu.mfence().await;
            }
            harvest(cpu.clone()).await;
            cpu.eoi().await;
        })
    }
}

/// `xchg-word0`: BROKEN ON PURPOSE, a bug an early draft had. The exchange always
/// targets word 0 instead of word i: bits in words 1-3 are dispatched from a stale
/// copy of word 0 and never cleared, and word 0 is emptied without being dispatched.
#[derive(Clone, Copy, Debug)]
pub struct XchgWord0 {
    /// How many harvest rounds before clearing ON.
    pub loops: LoopBound,
}

async fn harvest_xchg_word0(cpu: CpuPort) -> bool {
    let mut copy = [0u64; 4];
    for (word, slot) in copy.iter_mut().enumerate() {
        *slot = cpu.load_pir(word).await;
    }
    let mut handled = false;
    for slot in copy.iter_mut() {
        if *slot == 0 {
            continue;
        }
        *slot = cpu.xchg_pir(0, 0).await; // the bug: word 0, not word i
        handled = true;
    }
    if handled {
        dispatch_pending(&cpu, copy).await;
    }
    handled
}

impl PirHandler for XchgWord0 {
    fn name(&self) -> &str {
        "xchg-word0"
    }

    fn is_broken(&self) -> bool {
        true
    }

    fn run(&self, cpu: CpuPort) -> HandlerFuture {
        Box::pin(mainline_skeleton(cpu, self.loops, harvest_xchg_word0))
    }
}

/// `kvm-clear-on-first`: the order of KVM's `vmx_sync_pir_to_irr` applied to the host
/// handler: test-and-clear ON first, then (if it was set) harvest PIR once, dispatch,
/// EOI. A post after the clear notifies again instead of being coalesced.
#[derive(Clone, Copy, Debug, Default)]
pub struct KvmClearOnFirst;

impl PirHandler for KvmClearOnFirst {
    fn name(&self) -> &str {
        "kvm-clear-on-first"
    }

    fn run(&self, cpu: CpuPort) -> HandlerFuture {
        Box::pin(async move {
            if cpu.test_and_clear_on().await {
                handle_pending_pir_copy_then_xchg(&cpu).await;
            }
            cpu.eoi().await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::ops::CpuOp;
    use crate::kernel::uncontended::run_uncontended;
    use sim_core::Vector;

    /// Runs `h` uncontended; returns (ops, handled vectors, PIR afterwards).
    fn run_alone(h: &dyn PirHandler, pir: [u64; 4]) -> (Vec<CpuOp>, Vec<u8>, [u64; 4]) {
        let run = run_uncontended(h, pir);
        let eois = run.ops.iter().filter(|o| **o == CpuOp::Eoi).count();
        assert_eq!(eois, 1, "{}: one EOI", h.name());
        (run.ops, run.handled, run.pir)
    }

    fn pir_with(vectors: &[u8]) -> [u64; 4] {
        let mut pir = [0u64; 4];
        for v in vectors {
            pir[Vector(*v).word()] |= Vector(*v).bit();
        }
        pir
    }

    const ALL_WORDS: [u8; 4] = [0x21, 0x61, 0xa1, 0xe1];

    #[test]
    fn correct_variants_handle_every_vector_once_and_empty_pir() {
        let loops = LoopBound::Max(3);
        let handlers: Vec<Box<dyn PirHandler>> = vec![
            Box::new(Rfc { loops }),
            Box::new(Interleaved { loops }),
            Box::new(PerWordDispatch { loops }),
            Box::new(KvmClearOnFirst),
            Box::new(NoFinalRecheck { loops }), // broken only under concurrency
        ];
        for h in &handlers {
            let (_, handled, pir) = run_alone(h.as_ref(), pir_with(&ALL_WORDS));
            assert_eq!(handled, ALL_WORDS.to_vec(), "{}", h.name());
            assert_eq!(pir, [0; 4], "{}", h.name());
        }
    }

    #[test]
    fn rfc_exchanges_without_loading_first() {
        let (ops, _, _) = run_alone(
            &Rfc {
                loops: LoopBound::Max(3),
            },
            pir_with(&[0x21]),
        );
        assert!(matches!(ops[0], CpuOp::XchgPir { word: 0, .. }));
        assert!(matches!(ops[3], CpuOp::XchgPir { word: 3, .. }));
    }

    #[test]
    fn interleaved_alternates_load_and_xchg() {
        let (ops, _, _) = run_alone(
            &Interleaved {
                loops: LoopBound::Max(3),
            },
            pir_with(&[0x21, 0x61]),
        );
        assert_eq!(
            &ops[..4],
            &[
                CpuOp::LoadPir { word: 0 },
                CpuOp::XchgPir { word: 0, value: 0 },
                CpuOp::LoadPir { word: 1 },
                CpuOp::XchgPir { word: 1, value: 0 },
            ]
        );
    }

    #[test]
    fn per_word_dispatch_runs_a_words_handlers_before_the_next_word() {
        let (ops, _, _) = run_alone(
            &PerWordDispatch {
                loops: LoopBound::Max(3),
            },
            pir_with(&[0x21, 0x61]),
        );
        let first_handler = ops
            .iter()
            .position(|o| matches!(o, CpuOp::HandleVector(_)))
            .unwrap();
        let second_load = ops
            .iter()
            .position(|o| *o == CpuOp::LoadPir { word: 1 })
            .unwrap();
        assert!(first_handler < second_load);
    }

    #[test]
    fn xchg_word0_strands_upper_words_even_alone() {
        let (_, handled, pir) = run_alone(
            &XchgWord0 {
                loops: LoopBound::Max(3),
            },
            pir_with(&[0x61]),
        );
        assert_eq!(pir[1], Vector(0x61).bit(), "word 1 is never cleared");
        assert!(
            !handled.contains(&0x61),
            "and its vector is never dispatched"
        );
        assert!(XchgWord0 {
            loops: LoopBound::Max(3)
        }
        .is_broken());
    }

    #[test]
    fn kvm_order_clears_on_before_touching_pir() {
        let (ops, handled, _) = run_alone(&KvmClearOnFirst, pir_with(&[0x30]));
        assert_eq!(ops[0], CpuOp::TestAndClearOn);
        assert_eq!(handled, vec![0x30]);
    }
}

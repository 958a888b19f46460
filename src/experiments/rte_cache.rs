//! `rte-cache`: what keeping a shadow of the redirection entry's low word saves when a
//! driver masks and unmasks an IOAPIC pin (seed 001: IA-64's IOSAPIC, where the patch
//! took `enable_irq` "from ~4000 cycles per call ... down to around 260 cycles").
//!
//! One IOAPIC in a [`System`], pin 5 unmasked, nothing asserting it. Rows, each a
//! `chip` and a `trigger`, with both drivers:
//! - `x86-io-apic`, `edge` (platform `generic`): Linux's `mask_ioapic_irq`, which ends
//!   with a dummy read (`io_apic_sync`), and `unmask_ioapic_irq`
//!   ([`crate::kernel::ioapic_driver`]);
//! - `ia64-iosapic`, `level` (platform `ia64-zx1`, the DP83820's level interrupt):
//!   2.6.3 `iosapic.c`'s `mask_irq` and `unmask_irq`, no sync read, and its
//!   `iosapic_set_affinity` (the delivery-mode and destination path the patch also
//!   changed; [`crate::kernel::iosapic`]).
//!
//! Each call runs as a thread task on CPU 0 ([`System::run_ioapic`]). Keys: `driver`
//! (`"read-modify-write"` or `"shadowed"`), `unmask_cycles`, `mask_cycles`, the
//! register accesses behind them, and for the IA-64 rows `set_affinity_cycles`.
//! Cycles are the simulated time each call took at the platform's CPU clock, the
//! accesses priced by `costs.ioapic` (an uncached window read dominates); model
//! output, not hardware.

use serde::Serialize;

use super::{ExperimentCtx, ExperimentOutput};
use crate::kernel::ioapic_driver::{mask_irq, unmask_irq, RteDriver};
use crate::kernel::iosapic::{
    chip_mask, chip_unmask, disable_irq_nosync, enable_irq, set_affinity, IoapicChipKind, PinFlow,
    PinSetup, PinTrigger,
};
use crate::system::ioapic::IoapicPinConfig;
use crate::system::{DeliveryMode, Scenario, System};
use apic_sim::IoapicAccess;
use sim_core::{Duration, Freq, SimTime};

/// The pin both drivers work on.
pub const PIN: u8 = 5;
/// Seed 001's machine, for the IA-64 rows.
pub const IA64_PLATFORM: &str = "ia64-zx1";
/// The (chip, trigger) pairs, in row order.
pub const CHIPS: [(IoapicChipKind, PinTrigger); 2] = [
    (IoapicChipKind::X86IoApic, PinTrigger::Edge),
    (IoapicChipKind::Ia64Iosapic, PinTrigger::Level),
];

/// One driver.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// `"read-modify-write"` or `"shadowed"`.
    pub driver: &'static str,
    /// `unmask_irq`, core cycles.
    pub unmask_cycles: u64,
    /// `mask_irq` including its `io_apic_sync` read, core cycles.
    pub mask_cycles: u64,
    /// Window reads (uncached) in `unmask_irq`.
    pub unmask_window_reads: u32,
    /// Window reads in `mask_irq` (the sync read included).
    pub mask_window_reads: u32,
    /// Posted writes (index and window) in `unmask_irq`.
    pub unmask_posted_writes: u32,
    /// Posted writes in `mask_irq`.
    pub mask_posted_writes: u32,
    /// `"x86-io-apic"` or `"ia64-iosapic"`.
    pub chip: &'static str,
    /// `"edge"` or `"level"`.
    pub trigger: &'static str,
    /// The platform profile the row ran on.
    pub platform: String,
    /// IA-64 `iosapic_set_affinity` (lowest-priority delivery to another CPU), core
    /// cycles; null on x86 rows.
    pub set_affinity_cycles: Option<u64>,
    /// Window reads in `iosapic_set_affinity`; null on x86 rows.
    pub set_affinity_window_reads: Option<u32>,
    /// IA-64 `enable_irq` of the disabled level interrupt (the descriptor's work and
    /// the chip's unmask), core cycles: seed 001's figure. Null on x86 rows.
    pub enable_irq_cycles: Option<u64>,
}

fn posted(a: &IoapicAccess) -> u32 {
    a.index_writes + a.window_writes + a.eoi_writes
}

fn minus(a: IoapicAccess, b: IoapicAccess) -> IoapicAccess {
    IoapicAccess {
        index_writes: a.index_writes - b.index_writes,
        window_reads: a.window_reads - b.window_reads,
        window_writes: a.window_writes - b.window_writes,
        eoi_writes: a.eoi_writes - b.eoi_writes,
    }
}

/// The scenario of x86's edge pin: one CPU, pin 5 with `driver`, no load, no flow.
pub fn scenario(driver: RteDriver, seed: u64) -> Scenario {
    chip_scenario(IoapicChipKind::X86IoApic, PinTrigger::Edge, driver, seed)
}

/// The scenario of a (chip, trigger) row: one CPU, pin 5 with `driver`, no load, no
/// flow; the IA-64 rows on [`IA64_PLATFORM`].
pub fn chip_scenario(
    chip: IoapicChipKind,
    trigger: PinTrigger,
    driver: RteDriver,
    seed: u64,
) -> Scenario {
    let mut sc = Scenario::builder()
        .name(format!(
            "rte-cache {} {} {}",
            chip.as_str(),
            trigger.as_str(),
            driver.as_str()
        ))
        .seed(seed)
        .duration_us(1000.0)
        .mode(DeliveryMode::Remapped)
        .cpus(2)
        .ioapic_pin(IoapicPinConfig {
            name: "pin5".into(),
            pin: PIN,
            cpu: 0,
            arrival: None,
            pulse_ns: 100.0,
            driver,
            hold_ns: 0.0,
            uio: false,
            trigger,
            chip,
            flow: PinFlow::MaskRte,
        })
        .into_unvalidated();
    if chip == IoapicChipKind::Ia64Iosapic {
        sc.platform = Some(IA64_PLATFORM.into());
    }
    sc
}

/// Runs one call on CPU 0 of `sys` to its return: its time and accesses.
fn timed_call<F>(
    sys: &mut System,
    call: impl FnOnce(crate::kernel::ioapic_driver::IoapicPort) -> F,
) -> (Duration, IoapicAccess)
where
    F: std::future::Future<Output = ()> + 'static,
{
    let (start, before) = (sys.now(), sys.ioapic_accesses());
    sys.run_ioapic(0, call).expect("CPU 0 is idle");
    let limit = start + Duration::from_ms(10);
    let done = sys.run_until(limit, |s| !s.task_running(0));
    assert!(done, "a mask or unmask returns within 10 ms");
    let end: SimTime = sys.now();
    (end.since(start), minus(sys.ioapic_accesses(), before))
}

/// The row of one driver in `sc` (from [`scenario`] or [`chip_scenario`], perhaps
/// with other costs).
pub fn point(driver: RteDriver, sc: &Scenario) -> Row {
    let mut sys = System::new(sc).expect("the experiment's scenario is valid");
    let freq = Freq::from_mhz(sc.costs.cpu.freq_mhz).expect("validated clock");
    let pin = &sc.ioapic_pins[0];
    let setup = PinSetup {
        driver,
        chip: pin.chip,
        flow: pin.flow,
        trigger: pin.trigger,
    };
    let chip = sys.ioapic_chip(PIN).expect("pin 5 is programmed");
    let (mask_t, mask, unmask_t, unmask) = match pin.chip {
        IoapicChipKind::X86IoApic => {
            let c = chip.clone();
            let (mt, m) = timed_call(&mut sys, move |io| mask_irq(io, c, driver));
            let c = chip.clone();
            let (ut, u) = timed_call(&mut sys, move |io| unmask_irq(io, c, driver));
            (mt, m, ut, u)
        }
        IoapicChipKind::Ia64Iosapic => {
            let c = chip.clone();
            let (mt, m) = timed_call(&mut sys, move |io| async move {
                chip_mask(&io, &c, setup).await
            });
            let c = chip.clone();
            let (ut, u) = timed_call(&mut sys, move |io| async move {
                chip_unmask(&io, &c, setup).await
            });
            (mt, m, ut, u)
        }
    };
    let affinity = (pin.chip == IoapicChipKind::Ia64Iosapic).then(|| {
        let c = chip.clone();
        let dest = sc.apic_id_of(1) as u8;
        timed_call(&mut sys, move |io| async move {
            set_affinity(&io, &c, driver, dest, true).await
        })
    });
    let enable = (pin.chip == IoapicChipKind::Ia64Iosapic).then(|| {
        let c = chip.clone();
        let _ = timed_call(&mut sys, move |io| async move {
            disable_irq_nosync(&io, &c, setup).await
        });
        let c = chip.clone();
        timed_call(&mut sys, move |io| async move {
            enable_irq(&io, &c, setup).await
        })
        .0
    });
    Row {
        driver: driver.as_str(),
        enable_irq_cycles: enable.map(|t| freq.cycles_in(t)),
        unmask_cycles: freq.cycles_in(unmask_t),
        mask_cycles: freq.cycles_in(mask_t),
        unmask_window_reads: unmask.window_reads,
        mask_window_reads: mask.window_reads,
        unmask_posted_writes: posted(&unmask),
        mask_posted_writes: posted(&mask),
        chip: pin.chip.as_str(),
        trigger: pin.trigger.as_str(),
        platform: sc
            .platform
            .clone()
            .unwrap_or_else(|| crate::platform::DEFAULT_PLATFORM.into()),
        set_affinity_cycles: affinity.map(|(t, _)| freq.cycles_in(t)),
        set_affinity_window_reads: affinity.map(|(_, a)| a.window_reads),
    }
}

/// Runs the experiment (deterministic; the seed is recorded only).
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Checks `--platform` and `--set` against every point.
pub fn check(ctx: &ExperimentCtx) -> Result<(), String> {
    ctx.check_points(&scenarios(ctx))
}

/// Every point's scenario, in row order.
pub fn scenarios(ctx: &ExperimentCtx) -> Vec<Scenario> {
    CHIPS
        .iter()
        .flat_map(|&(c, t)| RteDriver::ALL.map(|d| chip_scenario(c, t, d, ctx.seed)))
        .collect()
}

/// Runs the experiment in `ctx` (seed, platform, overrides).
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    let mut rows = Vec::new();
    let mut shown = Vec::new();
    for (chip, trigger) in CHIPS {
        for d in RteDriver::ALL {
            let mut sc = ctx.prepared(&chip_scenario(chip, trigger, d, ctx.seed));
            if let Some(p) = &ctx.platform {
                sc.platform = Some(p.clone());
            }
            if d == RteDriver::ALL[0] {
                shown.push((chip, sc.costs.ioapic, sc.costs.cpu.freq_mhz));
            }
            rows.push(point(d, &sc));
        }
    }
    let mut out = ExperimentOutput::new("rte-cache", ctx.seed, &rows);
    for (chip, io, mhz) in shown {
        out.notes.push(format!(
            "{}: window read {} ns (uncached), index/window write {} ns (posted), CPU {mhz} MHz; {}",
            chip.as_str(),
            io.window_read_ns,
            io.window_write_ns,
            match chip {
                IoapicChipKind::X86IoApic =>
                    "mask ends with Linux's io_apic_sync read in both drivers",
                IoapicChipKind::Ia64Iosapic =>
                    "no sync read; enable_irq is unmask_irq plus the descriptor's lock (costs.ioapic.irq_desc_cycles)",
            }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shadow_saves_one_uncached_read_per_operation() {
        let sc = scenario(RteDriver::Shadowed, 1);
        let rmw = point(RteDriver::ReadModifyWrite, &sc);
        let sh = point(RteDriver::Shadowed, &sc);
        assert_eq!(rmw.unmask_window_reads, sh.unmask_window_reads + 1);
        assert_eq!(rmw.mask_window_reads, sh.mask_window_reads + 1);
        let read = Freq::from_mhz(sc.costs.cpu.freq_mhz)
            .unwrap()
            .cycles_in(Duration::from_ns_f64(sc.costs.ioapic.window_read_ns));
        assert_eq!(rmw.unmask_cycles, sh.unmask_cycles + read);
        assert_eq!(rmw.mask_cycles, sh.mask_cycles + read);
        // Default costs: 2 GHz, 50 ns posted writes, 700 ns reads.
        assert_eq!((sh.unmask_cycles, sh.mask_cycles), (200, 1600));
        assert_eq!((rmw.unmask_cycles, rmw.mask_cycles), (1600, 3000));
    }

    #[test]
    fn ia64_rows_have_no_sync_read_and_the_patch_removes_every_read() {
        let rows = run(1).rows;
        let ia64: Vec<_> = rows
            .iter()
            .filter(|r| r["chip"] == "ia64-iosapic")
            .collect();
        assert_eq!(ia64.len(), 2);
        for r in &ia64 {
            assert_eq!(r["trigger"], "level");
            assert_eq!(r["platform"], IA64_PLATFORM);
            let reads = |k: &str| r[k].as_u64().unwrap();
            let n = (r["driver"] == "read-modify-write") as u64;
            assert_eq!(
                (
                    reads("mask_window_reads"),
                    reads("unmask_window_reads"),
                    reads("set_affinity_window_reads")
                ),
                (n, n, n),
                "{r}"
            );
        }
        let cycles = |d: &str, k: &str| {
            ia64.iter().find(|r| r["driver"] == d).unwrap()[k]
                .as_u64()
                .unwrap()
        };
        for k in ["unmask_cycles", "mask_cycles", "set_affinity_cycles"] {
            assert!(
                cycles("read-modify-write", k) > cycles("shadowed", k),
                "{k}"
            );
        }
        assert!(rows
            .iter()
            .filter(|r| r["chip"] == "x86-io-apic")
            .all(|r| r["set_affinity_cycles"].is_null()));
    }
}

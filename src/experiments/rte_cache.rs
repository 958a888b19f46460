//! `rte-cache`: what keeping a shadow of the redirection entry's low word saves when a
//! driver masks and unmasks an IOAPIC pin.
//!
//! One IOAPIC in a [`System`], pin 5 programmed edge-triggered and unmasked, nothing
//! asserting it. Each driver of [`crate::kernel::ioapic_driver`] masks the pin (Linux
//! `mask_ioapic_irq`, which ends with a dummy read, `io_apic_sync`) and unmasks it
//! again, each as a thread task on CPU 0 ([`System::run_ioapic`]). Rows: `driver`
//! (`"read-modify-write"` or `"shadowed"`), `unmask_cycles`, `mask_cycles`, and the
//! register accesses behind them. Cycles are the simulated time each call took at the
//! platform's CPU clock, the accesses priced by `costs.ioapic` (an uncached window
//! read dominates); model output, not hardware.

use serde::Serialize;

use super::{ExperimentCtx, ExperimentOutput};
use crate::kernel::ioapic_driver::{mask_irq, unmask_irq, RteDriver};
use crate::system::ioapic::IoapicPinConfig;
use crate::system::{DeliveryMode, Scenario, System};
use apic_sim::IoapicAccess;
use sim_core::{Duration, Freq, SimTime};

/// The pin both drivers work on.
pub const PIN: u8 = 5;

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

/// The scenario: one CPU, pin 5 with `driver`, no load, no flow.
pub fn scenario(driver: RteDriver, seed: u64) -> Scenario {
    Scenario::builder()
        .name(format!("rte-cache {}", driver.as_str()))
        .seed(seed)
        .duration_us(1000.0)
        .mode(DeliveryMode::Remapped)
        .cpus(1)
        .ioapic_pin(IoapicPinConfig {
            name: "pin5".into(),
            pin: PIN,
            cpu: 0,
            arrival: None,
            pulse_ns: 100.0,
            driver,
            hold_ns: 0.0,
            uio: false,
        })
        .into_unvalidated()
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

/// The row of one driver in `sc` (from [`scenario`], perhaps with other costs).
pub fn point(driver: RteDriver, sc: &Scenario) -> Row {
    let mut sys = System::new(sc).expect("the experiment's scenario is valid");
    let freq = Freq::from_mhz(sc.costs.cpu.freq_mhz).expect("validated clock");
    let chip = sys.ioapic_chip(PIN).expect("pin 5 is programmed");
    let c = chip.clone();
    let (mask_t, mask) = timed_call(&mut sys, move |io| mask_irq(io, c, driver));
    let (unmask_t, unmask) = timed_call(&mut sys, move |io| unmask_irq(io, chip, driver));
    Row {
        driver: driver.as_str(),
        unmask_cycles: freq.cycles_in(unmask_t),
        mask_cycles: freq.cycles_in(mask_t),
        unmask_window_reads: unmask.window_reads,
        mask_window_reads: mask.window_reads,
        unmask_posted_writes: posted(&unmask),
        mask_posted_writes: posted(&mask),
    }
}

/// Runs the experiment (deterministic; the seed is recorded only).
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Checks `--platform` and `--set` against the scenario.
pub fn check(ctx: &ExperimentCtx) -> Result<(), String> {
    ctx.check(&scenario(RteDriver::Shadowed, ctx.seed))
}

/// Runs the experiment in `ctx` (seed, platform, overrides).
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    let mut rows = Vec::new();
    let mut shown = None;
    for d in RteDriver::ALL {
        let sc = ctx.prepared(&scenario(d, ctx.seed));
        shown.get_or_insert((sc.costs.ioapic, sc.costs.cpu.freq_mhz));
        rows.push(point(d, &sc));
    }
    let mut out = ExperimentOutput::new("rte-cache", ctx.seed, &rows);
    if let Some((io, mhz)) = shown {
        out.notes.push(format!(
            "costs: window read {} ns (uncached), index/window write {} ns (posted), CPU {mhz} MHz; \
             mask ends with Linux's io_apic_sync read in both drivers",
            io.window_read_ns, io.window_write_ns,
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
}

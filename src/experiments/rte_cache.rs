//! `rte-cache`: what keeping a shadow of the redirection entry's low word saves when a
//! driver masks and unmasks an IOAPIC pin.
//!
//! One IOAPIC, pin 5 programmed edge-triggered and unmasked. Each driver of
//! [`crate::kernel::ioapic_driver`] masks the pin (Linux `mask_ioapic_irq`, which ends
//! with a dummy read, `io_apic_sync`) and unmasks it again. Rows: `driver`
//! (`"read-modify-write"` or `"shadowed"`), `unmask_cycles`, `mask_cycles`, and the
//! register accesses behind them. Cycles are the accesses' costs from
//! [`IoapicCosts`] (an uncached window read dominates) at the CPU clock of
//! [`CpuCosts`]; model output, not hardware.

use std::rc::Rc;

use apic_sim::{IoapicAccess, IoapicCosts};
use serde::Serialize;
use sim_core::{Freq, Vector};

use super::{ExperimentCtx, ExperimentOutput};
use crate::kernel::ioapic_driver::{
    ioapic_with_edge_pin, mask_irq, run_now, unmask_irq, IoapicChipData, RteDriver,
};
use crate::system::CpuCosts;

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

/// The row of one driver under `ioapic` and `cpu` costs.
pub fn point(driver: RteDriver, ioapic: &IoapicCosts, cpu: &CpuCosts) -> Row {
    let freq = Freq::from_mhz(cpu.freq_mhz).expect("CPU clock above 0 MHz");
    let (mut io, entry) = ioapic_with_edge_pin(Vector(0x41), PIN);
    let chip = IoapicChipData::new(PIN, entry);
    let c = Rc::clone(&chip);
    let mask = run_now(&mut io, ioapic, move |p| mask_irq(p, c, driver));
    assert!(io.entry(PIN).expect("pin exists").masked());
    let unmask = run_now(&mut io, ioapic, move |p| unmask_irq(p, chip, driver));
    assert_eq!(io.entry(PIN).expect("pin exists"), entry);
    Row {
        driver: driver.as_str(),
        unmask_cycles: freq.cycles_in(unmask.time),
        mask_cycles: freq.cycles_in(mask.time),
        unmask_window_reads: unmask.access.window_reads,
        mask_window_reads: mask.access.window_reads,
        unmask_posted_writes: posted(&unmask.access),
        mask_posted_writes: posted(&mask.access),
    }
}

/// Runs the experiment (deterministic; the seed is recorded only).
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Runs the experiment in `ctx`.
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    // The CPU clock comes from the platform (and --set costs.cpu.*); the IOAPIC's
    // register costs are its own table.
    let cpu = ctx
        .costs(crate::platform::DEFAULT_PLATFORM)
        .expect("overrides were checked")
        .cpu;
    let io = IoapicCosts::default();
    let rows: Vec<Row> = RteDriver::ALL
        .iter()
        .map(|&d| point(d, &io, &cpu))
        .collect();
    let mut out = ExperimentOutput::new("rte-cache", ctx.seed, &rows);
    out.notes.push(format!(
        "costs: window read {} ns (uncached), index/window write {} ns (posted), CPU {} MHz; \
         mask ends with Linux's io_apic_sync read in both drivers",
        io.window_read.as_ns_f64(),
        io.window_write.as_ns_f64(),
        cpu.freq_mhz
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shadow_saves_one_uncached_read_per_operation() {
        let (io, cpu) = (IoapicCosts::default(), CpuCosts::default());
        let rmw = point(RteDriver::ReadModifyWrite, &io, &cpu);
        let sh = point(RteDriver::Shadowed, &io, &cpu);
        assert_eq!(rmw.unmask_window_reads, sh.unmask_window_reads + 1);
        assert_eq!(rmw.mask_window_reads, sh.mask_window_reads + 1);
        let read = Freq::from_mhz(cpu.freq_mhz)
            .unwrap()
            .cycles_in(io.window_read);
        assert_eq!(rmw.unmask_cycles, sh.unmask_cycles + read);
        assert_eq!(rmw.mask_cycles, sh.mask_cycles + read);
        // Default costs: 2 GHz, 50 ns posted writes, 700 ns reads.
        assert_eq!((sh.unmask_cycles, sh.mask_cycles), (200, 1600));
        assert_eq!((rmw.unmask_cycles, rmw.mask_cycles), (1600, 3000));
    }
}

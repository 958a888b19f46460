//! `ioapic-mask`: edge interrupts lost while a user-space-driver-like flow holds the
//! pin masked. Every point is a [`System`](crate::System) run with one IOAPIC pin
//! (`[[ioapic_pins]]`, see `system::ioapic`).
//!
//! ```text
//!  device ──edge pulses (Poisson)──▶ IOAPIC pin 1 (edge) ──message──▶ LAPIC ──▶ CPU 0
//!                                        ▲ mask / unmask (driver accesses)
//!  CPU 0: hardirq: entry, EOI, irq flow, mask_irq, notify, exit
//!         user thread (woken): wake-up, "handle" for hold, syscall: unmask_irq
//! ```
//!
//! A device raises edge interrupts at a rate. The kernel's hardirq handler, like
//! UIO's or VFIO's INTx handler, acknowledges the interrupt (EOI first, as
//! `handle_edge_irq` does), masks the pin in the IOAPIC with one of the drivers of
//! [`crate::kernel::ioapic_driver`] and wakes a user thread; the thread handles the
//! event (the swept hold time), then unmasks the pin through a system call. While the
//! entry is masked the IOAPIC keeps no state for an edge: every assertion in that
//! window is lost, and the run's ledger drops it as `lost_while_masked`.
//!
//! Two flows, each a row `flow` (seed 001's thread argues over exactly this):
//! - `mask-rte`: the hardirq masks the redirection entry itself (the irq chip's
//!   `irq_mask`, as with `IRQ_DISABLE_UNLAZY`): every edge while masked is lost;
//! - `lazy-disable`: the hardirq calls `disable_irq_nosync`, which for an edge pin
//!   only marks the interrupt disabled; an edge that arrives then is recorded as
//!   IRQ_PENDING (the second one masks the entry for real), and the thread's
//!   `enable_irq` replays it with a self-IPI: nothing is lost, edges while disabled
//!   are served together by the replay (`merged`).
//!
//! Every assertion ends in exactly one place of the run's MSI balance: handled (two
//! edges whose messages meet in one IRR bit are served by one run and also counted
//! in `merged`), dropped with a typed reason, or pending at the end.

use std::collections::BTreeMap;

use devices::ArrivalProcess;
use serde::Serialize;

use super::{ExperimentCtx, ExperimentOutput};
use crate::kernel::ioapic_driver::RteDriver;
use crate::kernel::iosapic::{IoapicChipKind, PinFlow, PinTrigger};
use crate::report::Report;
use crate::system::ioapic::IoapicPinConfig;
use crate::system::{DeliveryMode, Scenario};

/// The device's IOAPIC input.
pub const PIN: u8 = 1;
/// Hold times of the experiment's rows, microseconds.
pub const HOLD_US: &[f64] = &[0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0];
/// The device's mean assertion rate in the experiment, per second.
pub const RATE_PER_S: f64 = 100_000.0;
/// Simulated time per row, microseconds (about 10,000 assertions at the rate above).
pub const DURATION_US: f64 = 100_000.0;

/// The scenario of one row of the `mask-rte` flow: one CPU, the pin aimed at it, its
/// flow with `driver`.
pub fn scenario(seed: u64, hold_us: f64, driver: RteDriver) -> Scenario {
    flow_scenario(seed, hold_us, driver, PinFlow::MaskRte)
}

/// The scenario of one row of `flow`.
pub fn flow_scenario(seed: u64, hold_us: f64, driver: RteDriver, flow: PinFlow) -> Scenario {
    Scenario::builder()
        .name(format!(
            "ioapic-mask {} {} hold {hold_us} us",
            flow.as_str(),
            driver.as_str()
        ))
        .seed(seed)
        .duration_us(DURATION_US)
        .mode(DeliveryMode::Remapped)
        .cpus(1)
        .ioapic_pin(IoapicPinConfig {
            name: "uio0".into(),
            pin: PIN,
            cpu: 0,
            arrival: Some(ArrivalProcess::Poisson {
                rate_per_s: RATE_PER_S,
            }),
            pulse_ns: 100.0,
            driver,
            hold_ns: hold_us * 1e3,
            uio: true,
            trigger: PinTrigger::Edge,
            chip: IoapicChipKind::X86IoApic,
            flow,
        })
        .into_unvalidated()
}

/// One row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// `"read-modify-write"` or `"shadowed"`.
    pub driver: &'static str,
    /// `"mask-rte"` or `"lazy-disable"`.
    pub flow: &'static str,
    /// Replays of interrupts that arrived while disabled (`enable_irq`'s self-IPIs).
    pub replays: u64,
    /// How long the user thread handles an event before unmasking, us.
    pub hold_us: f64,
    /// Edges the device raised.
    pub asserted: u64,
    /// Edges a handler served (merged ones included).
    pub delivered: u64,
    /// Edges lost because the entry was masked.
    pub lost_while_masked: u64,
    /// Edges lost for any other reason.
    pub lost_other: u64,
    /// Edges that met another in one IRR bit.
    pub merged: u64,
    /// Edges still on their way at the end.
    pub pending: u64,
    /// asserted = delivered + lost + pending.
    pub balanced: bool,
    /// lost_while_masked / asserted.
    pub lost_frac: f64,
    /// Fraction of the run the entry was masked.
    pub masked_frac: f64,
    /// Lost edges by reason.
    pub dropped: BTreeMap<String, u64>,
}

/// The row of a run.
pub fn row(driver: RteDriver, hold_us: f64, r: &Report) -> Row {
    flow_row(driver, PinFlow::MaskRte, hold_us, r)
}

/// The row of a run of `flow`.
pub fn flow_row(driver: RteDriver, flow: PinFlow, hold_us: f64, r: &Report) -> Row {
    let pin = &r.ioapic[0];
    let lost_while_masked = r
        .msis
        .dropped
        .get("lost_while_masked")
        .copied()
        .unwrap_or(0);
    let lost: u64 = r.msis.dropped.values().sum();
    Row {
        driver: driver.as_str(),
        flow: flow.as_str(),
        replays: pin.replays,
        hold_us,
        asserted: pin.asserted,
        delivered: r.msis.handled,
        lost_while_masked,
        lost_other: lost - lost_while_masked,
        merged: r.msis.merged,
        pending: r.msis.pending,
        balanced: r.msis.balanced && r.msis.generated == pin.asserted,
        lost_frac: lost_while_masked as f64 / pin.asserted.max(1) as f64,
        masked_frac: pin.masked_frac,
        dropped: r.msis.dropped.clone(),
    }
}

/// Runs the experiment with `seed`.
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Checks `--platform` and `--set` against every point.
pub fn check(ctx: &ExperimentCtx) -> Result<(), String> {
    ctx.check_points(&scenarios(ctx))
}

/// Every point's scenario, in row order.
pub fn scenarios(ctx: &ExperimentCtx) -> Vec<Scenario> {
    let mut all = Vec::new();
    for flow in PinFlow::ALL {
        for driver in RteDriver::ALL {
            for &hold in HOLD_US {
                all.push(flow_scenario(ctx.seed, hold, driver, flow));
            }
        }
    }
    all
}

/// Runs the experiment in `ctx` (seed, platform, overrides, optional trace).
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    let mut rows = Vec::new();
    for flow in PinFlow::ALL {
        for driver in RteDriver::ALL {
            for &hold in HOLD_US {
                let r = ctx.run_point(&flow_scenario(ctx.seed, hold, driver, flow));
                rows.push(flow_row(driver, flow, hold, &r));
            }
        }
    }
    let mut out = ExperimentOutput::new("ioapic-mask", ctx.seed, &rows);
    out.notes.push(format!(
        "edge pin, Poisson assertions at {RATE_PER_S} /s for {DURATION_US} us; a user thread \
         handles each event for hold_us, then re-enables the interrupt. mask-rte: the hardirq \
         masks the entry and an edge while masked is lost (the IOAPIC keeps no pending state \
         for edge); lazy-disable: disable_irq_nosync / enable_irq, edges while disabled are \
         held as IRQ_PENDING and replayed (merged), none lost"
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::ioapic::PinChange;
    use crate::system::{SimEvent, System};
    use proptest::prelude::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Edges asserted while the entry was masked and the line low, from the pin's
    /// changes in order: what the IOAPIC must have lost.
    fn reference_masked_losses(trace: &[PinChange]) -> u64 {
        let (mut masked, mut high, mut lost) = (false, false, 0u64);
        for &ev in trace {
            match ev {
                PinChange::Asserted => {
                    if masked && !high {
                        lost += 1;
                    }
                    high = true;
                }
                PinChange::Deasserted => high = false,
                PinChange::Masked => masked = true,
                PinChange::Unmasked => masked = false,
            }
        }
        lost
    }

    fn traced(sc: &Scenario) -> (Report, Vec<PinChange>) {
        let log = Rc::new(RefCell::new(Vec::new()));
        let sink = Rc::clone(&log);
        let mut sys = System::new(sc).unwrap_or_else(|e| panic!("{e}"));
        sys.set_observer(Box::new(move |e: &SimEvent<'_>| {
            if let SimEvent::IoapicPin { change, .. } = *e {
                sink.borrow_mut().push(change);
            }
        }));
        sys.run_to_end();
        let r = sys.report();
        let t = log.borrow().clone();
        (r, t)
    }

    #[test]
    fn losses_grow_with_hold_time_and_balance_always_holds() {
        let mut last = 0;
        for &hold in HOLD_US {
            let mut sc = scenario(3, hold, RteDriver::Shadowed);
            sc.duration_us = 20_000.0;
            let r = System::run_scenario(&sc).unwrap();
            let row = row(RteDriver::Shadowed, hold, &r);
            assert!(row.balanced, "{row:?}");
            assert!(row.lost_while_masked >= last, "hold {hold}: {row:?}");
            assert!(
                row.lost_while_masked > 0,
                "the pin is masked for microseconds"
            );
            let p = &r.ioapic[0];
            // Every mask comes from a hardirq (one may find the entry still masked by
            // the one before: a message already in flight), and every mask but the
            // last is undone by the reader.
            assert!(p.masks > 0 && p.masks <= p.handler_runs + 1, "{p:?}");
            assert!(p.unmasks == p.masks || p.unmasks + 1 == p.masks, "{p:?}");
            last = row.lost_while_masked;
        }
    }

    #[test]
    fn a_run_is_a_function_of_its_scenario() {
        let mut sc = scenario(9, 5.0, RteDriver::ReadModifyWrite);
        sc.duration_us = 5_000.0;
        let strip = |r: Report| {
            let mut v = serde_json::to_value(r).unwrap();
            v["wall_time_s"] = 0.into();
            v
        };
        assert_eq!(
            strip(System::run_scenario(&sc).unwrap()),
            strip(System::run_scenario(&sc).unwrap())
        );
        let mut bad = sc.clone();
        bad.ioapic_pins[0].hold_ns = -1.0;
        let e = System::new(&bad).err().unwrap().to_string();
        assert!(e.contains("ioapic_pins[0].hold_ns"), "{e}");
        let mut bad = sc;
        bad.ioapic_pins[0].arrival = Some(ArrivalProcess::Poisson { rate_per_s: 0.0 });
        let e = System::new(&bad).err().unwrap().to_string();
        assert!(e.contains("ioapic_pins[0].arrival"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn every_loss_while_masked_is_reported(
            seed in any::<u64>(),
            rate in 1e4f64..2e6,
            hold_ns in 0f64..40_000.0,
            rmw in any::<bool>(),
            pulse in 10f64..2_000.0,
        ) {
            let driver = if rmw { RteDriver::ReadModifyWrite } else { RteDriver::Shadowed };
            let mut sc = scenario(seed, 0.0, driver);
            sc.duration_us = 2_000.0;
            let p = &mut sc.ioapic_pins[0];
            p.hold_ns = hold_ns;
            p.arrival = Some(ArrivalProcess::Poisson { rate_per_s: rate });
            p.pulse_ns = pulse;
            let (r, trace) = traced(&sc);
            let row = row(driver, 0.0, &r);
            prop_assert!(row.balanced, "seed {}: {:?}", seed, row);
            prop_assert_eq!(row.lost_while_masked, reference_masked_losses(&trace));
            prop_assert_eq!(
                row.asserted,
                trace.iter().filter(|e| **e == PinChange::Asserted).count() as u64
            );
        }
    }
}

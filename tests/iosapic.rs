//! The IA-64 IOSAPIC flows and level pins inside `System`: every assertion ends
//! handled, dropped with a reason, or pending, whatever the flow, the trigger and
//! the timing; the lazy disable loses nothing; a level line is served by the
//! driver's acknowledgement of its device.

use irqsim::devices::ArrivalProcess;
use irqsim::kernel::ioapic_driver::RteDriver;
use irqsim::kernel::iosapic::{IoapicChipKind, PinFlow, PinTrigger};
use irqsim::report::Report;
use irqsim::system::ioapic::IoapicPinConfig;
use irqsim::system::DeliveryMode;
use irqsim::{Scenario, System};
use proptest::prelude::*;

fn pin_scenario(
    seed: u64,
    rate: f64,
    hold_ns: f64,
    trigger: PinTrigger,
    chip: IoapicChipKind,
    flow: PinFlow,
    driver: RteDriver,
) -> Scenario {
    Scenario::builder()
        .name("iosapic")
        .seed(seed)
        .duration_us(3000.0)
        .mode(DeliveryMode::Remapped)
        .cpus(1)
        .ioapic_pin(IoapicPinConfig {
            name: "nic".into(),
            pin: 3,
            cpu: 0,
            arrival: Some(ArrivalProcess::Poisson { rate_per_s: rate }),
            pulse_ns: 100.0,
            driver,
            hold_ns,
            uio: true,
            trigger,
            chip,
            flow,
        })
        .into_unvalidated()
}

fn run(sc: &Scenario) -> Report {
    System::run_scenario(sc).unwrap_or_else(|e| panic!("{e}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn every_assertion_is_accounted_for_in_every_flow(
        seed in any::<u64>(),
        rate in 1e4f64..1e6,
        hold_ns in 0f64..30_000.0,
        level in any::<bool>(),
        ia64 in any::<bool>(),
        lazy in any::<bool>(),
        rmw in any::<bool>(),
    ) {
        let trigger = if level { PinTrigger::Level } else { PinTrigger::Edge };
        let chip = if ia64 { IoapicChipKind::Ia64Iosapic } else { IoapicChipKind::X86IoApic };
        let flow = if lazy { PinFlow::LazyDisable } else { PinFlow::MaskRte };
        let driver = if rmw { RteDriver::ReadModifyWrite } else { RteDriver::Shadowed };
        let r = run(&pin_scenario(seed, rate, hold_ns, trigger, chip, flow, driver));
        let pin = &r.ioapic[0];
        prop_assert!(r.msis.balanced, "seed {}: {:?}", seed, r.msis);
        prop_assert_eq!(r.msis.generated, pin.asserted, "seed {}", seed);
        prop_assert!(pin.handler_runs > 0, "seed {}", seed);
        // Only a masked edge entry loses an interrupt.
        let lost = r.msis.dropped.get("lost_while_masked").copied().unwrap_or(0);
        if level || lazy {
            prop_assert_eq!(lost, 0, "seed {}: {:?}", seed, r.msis.dropped);
        }
        // The entry starts unmasked: every unmask undoes a mask.
        prop_assert!(pin.unmasks <= pin.masks, "seed {}: {:?}", seed, pin);
    }
}

#[test]
fn the_lazy_disable_replays_what_arrived_while_disabled() {
    let sc = |flow| {
        pin_scenario(
            7,
            200_000.0,
            20_000.0,
            PinTrigger::Edge,
            IoapicChipKind::Ia64Iosapic,
            flow,
            RteDriver::Shadowed,
        )
    };
    let (mask, lazy) = (run(&sc(PinFlow::MaskRte)), run(&sc(PinFlow::LazyDisable)));
    let lost = |r: &Report| {
        r.msis
            .dropped
            .get("lost_while_masked")
            .copied()
            .unwrap_or(0)
    };
    assert!(lost(&mask) > 100, "{:?}", mask.msis);
    assert_eq!(lost(&lazy), 0, "{:?}", lazy.msis);
    let p = &lazy.ioapic[0];
    assert!(p.replays > 0, "{p:?}");
    // Edges held as IRQ_PENDING are served together by the replay.
    assert!(lazy.msis.merged > mask.msis.merged, "{:?}", lazy.msis);
    assert_eq!(p.flow, "lazy-disable");
}

#[test]
fn a_level_line_waits_while_masked_and_its_ack_serves_every_event() {
    let r = run(&pin_scenario(
        3,
        300_000.0,
        10_000.0,
        PinTrigger::Level,
        IoapicChipKind::Ia64Iosapic,
        PinFlow::LazyDisable,
        RteDriver::ReadModifyWrite,
    ));
    let p = &r.ioapic[0];
    assert_eq!((p.trigger, p.chip), ("level", "ia64-iosapic"));
    assert!(r.msis.balanced, "{:?}", r.msis);
    assert!(r.msis.dropped.is_empty(), "{:?}", r.msis.dropped);
    // Events while the line was high never made an interrupt of their own.
    assert!(r.msis.merged > 0 && p.handler_runs < p.asserted, "{p:?}");
    // A level disable masks the entry; nothing is replayed (the line stays asserted).
    assert!(p.masks > 0 && p.replays == 0, "{p:?}");
}

/// Flow steps issued by an algorithm of your own (not a pin's hardirq or reader) have
/// no pin to act on: they do nothing, and nothing panics.
#[test]
fn flow_steps_outside_a_pins_flow_are_no_ops() {
    use irqsim::kernel::ioapic_driver::PinHostOp;
    let mut sc = pin_scenario(
        1,
        1e4,
        0.0,
        PinTrigger::Level,
        IoapicChipKind::Ia64Iosapic,
        PinFlow::LazyDisable,
        RteDriver::Shadowed,
    );
    sc.ioapic_pins[0].uio = false;
    sc.ioapic_pins[0].arrival = None;
    let mut sys = System::new(&sc).unwrap();
    sys.run_ioapic(0, |io| async move {
        for op in [
            PinHostOp::Notify,
            PinHostOp::WaitEvent,
            PinHostOp::AckDevice,
            PinHostOp::DescStatus,
            PinHostOp::DescEnter,
            PinHostOp::DescEnable(9),
        ] {
            assert_eq!(io.run(op).await, 0, "{op:?}");
        }
    })
    .unwrap();
    sys.run_to_end();
    assert!(!sys.task_running(0));
    assert!(sys.report().msis.balanced);
}

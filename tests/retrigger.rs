//! The IRQ core retriggering a posted MSI (`irq_retrigger()`), before and after Linux
//! commit 0edc78b82bea: the posted chip's ack without an EOI leaves the vector in
//! service, and every vector of its priority class and below waits in IRR for good.

use irqsim::kernel::retrigger::PostedMsiAck;
use irqsim::system::retrigger::RetriggerConfig;
use irqsim::system::DeliveryMode;
use irqsim::{Report, Scenario, System};

fn stall_scenario(ack: PostedMsiAck) -> Scenario {
    let text = irqsim::scenarios::embedded("retrigger-stall").expect("embedded");
    let mut sc = Scenario::from_toml_str(text, "retrigger-stall").unwrap();
    sc.posted_msi_ack = ack;
    sc
}

fn run(sc: &Scenario) -> Report {
    System::run_scenario(sc).unwrap_or_else(|e| panic!("seed {}: {e}", sc.seed))
}

fn pending_on(r: &Report, vector: &str) -> u64 {
    r.cpu[0].pending_by_vector.get(vector).copied().unwrap_or(0)
}

#[test]
fn before_the_fix_a_retriggered_posted_vector_blocks_its_class_for_good() {
    let sc = stall_scenario(PostedMsiAck::MoveIrqOnly);
    let r = run(&sc);
    assert!(r.msis.balanced, "{:?}", r.msis);
    let t = r.retriggers.as_ref().expect("a retriggers report");
    assert_eq!(t.posted_msi_ack, "move-irq-only");
    assert_eq!((t.sent, t.arrived, t.taken_posted), (1, 1, 1));
    assert_eq!((t.acked_with_eoi, t.acked_without_eoi), (0, 1));
    assert_eq!(t.stale_isr.len(), 1, "{t:?}");
    assert_eq!(t.stale_isr[0].vectors, vec!["0x21".to_string()]);
    assert_eq!(t.stale_isr[0].blocked_class, 2);
    // The pin (0x22, class 2) asserts at 100 k/s: about 70 edges after 300 us. Each
    // waits in IRR, where the report places it, and none is handled.
    let pin_vector = &r.ioapic[0].vector;
    assert_eq!(pin_vector, "0x22");
    let stuck = pending_on(&r, pin_vector);
    assert!(stuck >= 40, "{stuck} pin interrupts pending: {:?}", r.msis);
    assert_eq!(r.msis.pending_where.irr, stuck);
    // The posted device is not blocked: its notifications (0xeb) outrank class 2.
    assert!(
        pending_on(&r, "0x21") <= 2,
        "{:?}",
        r.cpu[0].pending_by_vector
    );
    assert!(r.devices[0].msis_raised > 900);
}

#[test]
fn after_the_fix_the_retriggered_vector_is_eoid_and_nothing_waits() {
    let sc = stall_scenario(PostedMsiAck::EoiIfInactive);
    let r = run(&sc);
    assert!(r.msis.balanced);
    let t = r.retriggers.as_ref().expect("a retriggers report");
    assert_eq!((t.acked_with_eoi, t.acked_without_eoi), (1, 0));
    assert!(t.stale_isr.is_empty(), "{t:?}");
    assert_eq!(r.msis.pending_where.irr, 0, "{:?}", r.msis);
    assert_eq!(pending_on(&r, "0x22"), 0);
    // The same pin edges are all handled, against about 70 waiting before the fix.
    let before = run(&stall_scenario(PostedMsiAck::MoveIrqOnly));
    assert!(r.msis.handled >= before.msis.handled + 40);
    // The pin (no UIO: the plain edge handler) counts a handler run per edge taken:
    // every edge after the fix, none after the retrigger before it.
    let pin = &r.ioapic[0];
    assert!(
        pin.handler_runs > 0 && pin.handler_runs <= pin.asserted,
        "{pin:?}"
    );
    assert!(
        before.ioapic[0].handler_runs + 40 <= pin.handler_runs,
        "{:?} vs {pin:?}",
        before.ioapic[0]
    );
}

#[test]
fn the_stall_starts_at_the_retrigger_not_before() {
    // A retrigger at the very end leaves the pin handled for the whole run before it.
    let mut sc = stall_scenario(PostedMsiAck::MoveIrqOnly);
    sc.retriggers[0].at_us = sc.duration_us;
    let r = run(&sc);
    assert_eq!(pending_on(&r, "0x22"), 0);
    // The IPI is still in flight at the end: sent, not arrived.
    let t = r.retriggers.as_ref().unwrap();
    assert_eq!((t.sent, t.arrived), (1, 0));
    assert!(t.stale_isr.is_empty());
}

#[test]
fn a_second_retrigger_waits_behind_the_stale_bit_of_its_own_vector() {
    let mut sc = stall_scenario(PostedMsiAck::MoveIrqOnly);
    for at_us in [500.0, 600.0] {
        sc.retriggers.push(RetriggerConfig {
            cpu: 0,
            vector: 0x21,
            at_us,
        });
    }
    let r = run(&sc);
    let t = r.retriggers.as_ref().unwrap();
    // The first is taken; the second sits in IRR (same class as the stale bit); the
    // third merges with it.
    assert_eq!((t.arrived, t.taken_posted, t.merged), (3, 1, 1));
}

#[test]
fn remapped_mode_acks_with_an_eoi_whatever_the_posted_chip_does() {
    let mut sc = stall_scenario(PostedMsiAck::MoveIrqOnly);
    sc.mode = DeliveryMode::Remapped;
    let r = run(&sc);
    let t = r.retriggers.as_ref().unwrap();
    assert_eq!(t.taken_posted, 0);
    assert!(t.stale_isr.is_empty());
    assert_eq!(pending_on(&r, "0x22"), 0);
    assert!(r.msis.balanced);
}

#[test]
fn retrigger_fields_are_checked_by_name() {
    type Spoil = fn(&mut Scenario);
    let cases: [(&str, Spoil); 5] = [
        ("retriggers[0].cpu", |sc| sc.retriggers[0].cpu = 3),
        ("retriggers[0].vector", |sc| sc.retriggers[0].vector = 0x10),
        ("retriggers[0].at_us", |sc| sc.retriggers[0].at_us = 5000.0),
        ("retriggers[0].at_us", |sc| {
            sc.retriggers[0].at_us = f64::NAN
        }),
        ("retriggers[0].vector", |sc| sc.retriggers[0].vector = 0x30),
    ];
    for (field, spoil) in cases {
        let mut sc = stall_scenario(PostedMsiAck::MoveIrqOnly);
        spoil(&mut sc);
        let err = System::new(&sc).err().expect("refused");
        assert_eq!(err.field(), Some(field), "{err}");
    }
    // An unregistered vector's message lists the vectors that have handlers.
    let mut sc = stall_scenario(PostedMsiAck::MoveIrqOnly);
    sc.retriggers[0].vector = 0x30;
    let msg = System::new(&sc).err().unwrap().to_string();
    assert!(msg.contains("0x21, 0x22"), "{msg}");
    // The ack's spelling is checked by serde.
    let text = irqsim::scenarios::embedded("retrigger-stall")
        .unwrap()
        .replace("\"move-irq-only\"", "\"never\"");
    let msg = Scenario::from_toml_str(&text, "x.toml")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("move-irq-only") && msg.contains("eoi-if-inactive"),
        "{msg}"
    );
}

//! The IOAPIC edge-while-masked loss as a property: over random mask, unmask, assert,
//! de-assert and EOI sequences, every assertion is delivered, left pending (level), merged
//! into one already asserted, or reported lost. A loss is never silent.

use irqsim::apic_sim::{
    DeliveryMode, DestMode, Ioapic, PinOutcome, Polarity, RedirectionEntry, TriggerMode,
};
use irqsim::sim_core::Vector;
use proptest::prelude::*;

/// Pins 0 and 1 are edge-triggered, 2 and 3 level-triggered; pin p uses vector 0x30+p.
const PINS: u8 = 4;

fn is_level(pin: u8) -> bool {
    pin >= 2
}

fn vector_of(pin: u8) -> Vector {
    Vector(0x30 + pin)
}

#[derive(Clone, Debug)]
enum Op {
    Assert(u8),
    Deassert(u8),
    Mask(u8),
    Unmask(u8),
    /// The EOI broadcast for this pin's vector (after the CPU handled it).
    Eoi(u8),
}

fn op() -> impl Strategy<Value = Op> {
    let pin = 0..PINS;
    prop_oneof![
        4 => pin.clone().prop_map(Op::Assert),
        2 => pin.clone().prop_map(Op::Deassert),
        2 => pin.clone().prop_map(Op::Mask),
        2 => pin.clone().prop_map(Op::Unmask),
        2 => pin.prop_map(Op::Eoi),
    ]
}

/// What the test expects of each pin, kept from the datasheet rules independently of
/// the model.
#[derive(Clone, Copy, Default, Debug)]
struct PinRef {
    asserted: bool,
    masked: bool,
    remote_irr: bool,
}

/// Every edge assertion (a rising edge) ends in exactly one of these.
#[derive(Default, Debug)]
struct EdgeLedger {
    rising: u32,
    delivered: u32,
    reported_lost: u32,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_assertion_is_delivered_pending_merged_or_reported_lost(
        initially_masked in prop::collection::vec(any::<bool>(), PINS as usize),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let mut io = Ioapic::new(1, PINS).unwrap();
        let mut pins = [PinRef::default(); PINS as usize];
        for pin in 0..PINS {
            let trigger = if is_level(pin) { TriggerMode::Level } else { TriggerMode::Edge };
            let masked = initially_masked[pin as usize];
            let entry = RedirectionEntry::new(
                vector_of(pin), DeliveryMode::Fixed, DestMode::Physical, trigger,
                Polarity::ActiveHigh, masked, 0,
            );
            let w = io.write_entry(pin, entry).unwrap();
            prop_assert!(w.delivered.is_empty());
            pins[pin as usize].masked = masked;
        }
        let mut edges = EdgeLedger::default();
        for (t, op) in ops.iter().enumerate() {
            match *op {
                Op::Assert(pin) => {
                    let p = &mut pins[pin as usize];
                    let outcome = io.assert_pin(pin, true).unwrap();
                    let was = std::mem::replace(&mut p.asserted, true);
                    if is_level(pin) {
                        let expect = if p.masked {
                            PinOutcome::PendingUntilUnmask
                        } else if p.remote_irr {
                            PinOutcome::BlockedRemoteIrr
                        } else {
                            p.remote_irr = true;
                            prop_assert!(matches!(outcome, PinOutcome::Delivered(m)
                                if m.vector == vector_of(pin)), "step {}: {:?}", t, outcome);
                            continue;
                        };
                        prop_assert_eq!(outcome, expect, "step {}", t);
                    } else if was {
                        prop_assert_eq!(outcome, PinOutcome::NoEdge, "step {}", t);
                    } else {
                        edges.rising += 1;
                        match outcome {
                            PinOutcome::LostWhileMasked => {
                                prop_assert!(p.masked, "step {}: lost while unmasked", t);
                                edges.reported_lost += 1;
                            }
                            PinOutcome::Delivered(m) => {
                                prop_assert!(!p.masked, "step {}: delivered while masked", t);
                                prop_assert_eq!(m.vector, vector_of(pin));
                                edges.delivered += 1;
                            }
                            other => prop_assert!(false, "step {}: rising edge gave {:?}", t, other),
                        }
                    }
                }
                Op::Deassert(pin) => {
                    prop_assert_eq!(io.assert_pin(pin, false).unwrap(), PinOutcome::Deasserted);
                    pins[pin as usize].asserted = false;
                }
                Op::Mask(pin) | Op::Unmask(pin) => {
                    let masked = matches!(op, Op::Mask(_));
                    let shadow = io.entry(pin).unwrap().low();
                    let w = io.set_masked(pin, shadow, masked).unwrap();
                    let p = &mut pins[pin as usize];
                    p.masked = masked;
                    // Only a level pin still asserted, unmasked, with Remote IRR clear
                    // is sent on unmask; an edge pin has nothing pending to send.
                    let sends = !masked && is_level(pin) && p.asserted && !p.remote_irr;
                    prop_assert_eq!(w.delivered.len(), usize::from(sends), "step {}", t);
                    if sends {
                        prop_assert_eq!(w.delivered[0].0, pin);
                        p.remote_irr = true;
                    }
                }
                Op::Eoi(pin) => {
                    let out = io.eoi(vector_of(pin));
                    let p = &mut pins[pin as usize];
                    prop_assert_eq!(out.cleared, u32::from(p.remote_irr), "step {}", t);
                    let resend = p.remote_irr && p.asserted && !p.masked;
                    p.remote_irr = resend;
                    prop_assert_eq!(out.redelivered.len(), usize::from(resend), "step {}", t);
                }
            }
            // Nothing silent: each rising edge was delivered or reported lost.
            prop_assert_eq!(edges.rising, edges.delivered + edges.reported_lost);
            for pin in 0..PINS {
                let e = io.entry(pin).unwrap();
                prop_assert_eq!(e.masked(), pins[pin as usize].masked);
                prop_assert_eq!(e.remote_irr(), pins[pin as usize].remote_irr, "pin {}", pin);
            }
        }
    }
}

#[test]
fn an_edge_asserted_while_masked_is_reported_and_not_resent_on_unmask() {
    let mut io = Ioapic::new(0, 1).unwrap();
    let entry = RedirectionEntry::new(
        Vector(0x40),
        DeliveryMode::Fixed,
        DestMode::Physical,
        TriggerMode::Edge,
        Polarity::ActiveHigh,
        true,
        0,
    );
    let _ = io.write_entry(0, entry).unwrap();
    assert_eq!(io.assert_pin(0, true), Ok(PinOutcome::LostWhileMasked));
    let shadow = io.entry(0).unwrap().low();
    let w = io.set_masked(0, shadow, false).unwrap();
    assert!(w.delivered.is_empty(), "the IOAPIC keeps no pending edge");
}

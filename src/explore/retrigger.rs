//! The retrigger path in the explorer: the IRQ core's `irq_retrigger()` as an actor
//! that raises a posted device's vector in the APIC itself, and that vector's entry
//! through the IDT running the posted chip's flow
//! ([`crate::kernel::retrigger::handle_edge_posted`]).
//!
//! The APIC holds one such vector besides the notification vector: requested (IRR)
//! and in service (ISR). It delivers the highest class first and nothing whose class
//! is not above the highest in service, so a device vector waits while the
//! notification is requested or in service, and the notification (class 0xe) is
//! never blocked by it. An entry must EOI exactly once ([`Invariant::EoiMatchesEntry`]):
//! one that returns with the vector still in service leaves the processor priority at
//! the vector's class for good, and no vector of that class or below is delivered
//! again. The device handler it calls serves no PIR bit, so it is not counted as a
//! handled post.

use sim_core::Vector;

use super::model::{narrate, Invariant, Run, StepNote, Violation, World};
use crate::engine::Coroutine;
use crate::kernel::retrigger::{handle_edge_posted, PostedMsiAck};
use crate::kernel::{CpuOp, CpuPort, PirHandler};

/// The coroutine of an entry: the notification handler, or the posted chip's flow for
/// a retriggered vector (`posted_msi_handler_active` is false there: the notification
/// handler runs with interrupts off, so no IDT entry nests inside it).
pub(crate) fn entry_coroutine(
    handler: &dyn PirHandler,
    retriggered: Option<(Vector, PostedMsiAck)>,
) -> Coroutine<CpuOp, u64> {
    match retriggered {
        None => Coroutine::from_boxed(|port| handler.run(CpuPort::new(port))),
        Some((vector, ack)) => Coroutine::new(move |port| async move {
            handle_edge_posted(&CpuPort::new(port), vector, ack, false).await
        }),
    }
}

impl World {
    /// The retrigger IPI reaches the APIC: the device vector is requested (a second
    /// one merges with a request still pending).
    pub fn retrigger_arrives(&mut self, vector: Vector) -> StepNote {
        let merged = std::mem::replace(&mut self.device_irr, true);
        StepNote::lazy(|| {
            format!(
                "irq_retrigger: IPI of {vector} {}",
                if merged {
                    "merges into pending IRR"
                } else {
                    "sets IRR"
                }
            )
        })
    }

    /// Whether the APIC delivers the retriggered vector now: requested, not in
    /// service, no notification requested or in service (it outranks the vector),
    /// and no entry running.
    pub fn can_deliver_retriggered(&self) -> bool {
        self.device_irr && !self.device_isr && !self.irr && !self.isr && self.run.is_none()
    }

    /// The CPU takes the retriggered vector through the IDT.
    pub fn deliver_retriggered(&mut self, vector: Vector) -> StepNote {
        assert!(
            self.can_deliver_retriggered(),
            "deliver_retriggered() while delivery is not possible"
        );
        self.device_irr = false;
        self.device_isr = true;
        self.run = Some(Run {
            retriggered: Some(vector),
            ..Run::starting()
        });
        StepNote::lazy(|| {
            format!("deliver {vector} through the IDT: IRR->ISR, the posted chip's handle_edge_irq")
        })
    }

    /// The EOI of a retriggered entry: the vector leaves service.
    pub(super) fn eoi_retriggered(&mut self, vector: Vector) -> Result<String, Violation> {
        let in_service = self.device_isr;
        let run = self.run.as_mut().expect("EOI with an entry running");
        run.eois += 1;
        if run.eois > 1 || !in_service {
            return Err(Violation::new(
                Invariant::EoiMatchesEntry,
                format!(
                    "EOI number {} of the IDT entry of {vector}, with {vector} {}",
                    run.eois,
                    if in_service {
                        "in service"
                    } else {
                        "no longer in service"
                    }
                ),
            ));
        }
        self.device_isr = false;
        Ok(narrate(|| format!("EOI ({vector} leaves service)")))
    }

    /// Why a retriggered entry that returned with `eois` EOIs is wrong, if it is.
    pub(super) fn retriggered_return(vector: Vector, eois: u8) -> Result<(), Violation> {
        if eois == 1 {
            return Ok(());
        }
        Err(Violation::new(
            Invariant::EoiMatchesEntry,
            format!(
                "the IDT entry of retriggered {vector} returned after {eois} EOIs, not 1: {vector} stays in service, so no vector up to {:#04x} is delivered to this CPU again",
                (vector.0 | 0x0f)
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V21: Vector = Vector(0x21);

    #[test]
    fn the_notification_outranks_a_retriggered_vector_and_is_not_blocked_by_it() {
        let mut w = World::new();
        w.retrigger_arrives(V21);
        w.irr = true;
        assert!(
            !w.can_deliver_retriggered(),
            "0xeb requested: it goes first"
        );
        w.irr = false;
        w.isr = true;
        assert!(!w.can_deliver_retriggered(), "0xeb in service");
        w.isr = false;
        assert!(w.can_deliver_retriggered());
        w.deliver_retriggered(V21);
        assert!(w.device_isr && !w.device_irr);
        // A stale device bit never blocks the notification (class 0xe > class 2).
        w.run = None;
        w.irr = true;
        assert!(w.can_deliver());
    }

    #[test]
    fn a_second_retrigger_merges_and_waits_while_the_first_is_in_service() {
        let mut w = World::new();
        assert!(w.retrigger_arrives(V21).0.contains("sets IRR"));
        assert!(w.retrigger_arrives(V21).0.contains("merges"));
        w.deliver_retriggered(V21);
        w.run = None;
        w.retrigger_arrives(V21);
        assert!(!w.can_deliver_retriggered(), "same vector in service");
    }

    #[test]
    fn a_retriggered_entry_must_eoi_exactly_once() {
        assert!(World::retriggered_return(V21, 1).is_ok());
        for eois in [0, 2] {
            let v = World::retriggered_return(V21, eois).unwrap_err();
            assert_eq!(v.invariant, Invariant::EoiMatchesEntry);
        }
        let mut w = World::new();
        w.retrigger_arrives(V21);
        w.deliver_retriggered(V21);
        assert!(w.eoi_retriggered(V21).is_ok());
        assert!(!w.device_isr);
        let second = w.eoi_retriggered(V21).unwrap_err();
        assert!(second.detail.contains("no longer in service"), "{second}");
    }
}

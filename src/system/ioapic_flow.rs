//! The parts of an IOAPIC pin's flow beyond register accesses: level lines (held
//! high by the device until its driver acknowledges it), the irq descriptor of
//! `__do_IRQ` / `disable_irq_nosync` / `enable_irq` (IRQ_DISABLED, IRQ_PENDING,
//! IRQ_INPROGRESS, IRQ_REPLAY and the depth), and the replay self-IPI. The
//! algorithms that drive them are in [`crate::kernel::iosapic`].

use apic_sim::{InterruptMessage, PinOutcome};
use sim_core::{Duration, SimTime};

use super::cpu::{CpuState, HandlerRef};
use super::ioapic::PinChange;
use super::ledger::MsiToken;
use super::{Event, SimEvent, System};
use crate::engine::Priority;
use crate::kernel::ioapic_driver::PinHostOp;
use crate::kernel::iosapic::{DESC_DISABLED, DESC_INPROGRESS, DESC_PENDING, DESC_REPLAY};

impl System {
    /// The device of level pin `pin` (index in `ioapic_pins`) has an event: it raises
    /// its line if it was low; if the line is already high the event waits in the
    /// device for the driver's acknowledgement.
    pub(super) fn on_level_assert(&mut self, now: SimTime, pin: u16) {
        let host = self.ioapic_mut();
        let p = &mut host.pins[pin as usize];
        p.asserted += 1;
        let (input, source, high) = (p.pin, p.source, p.level_high);
        let next = p.arrival.as_ref().map(|a| now + a.next_gap(&mut p.rng));
        let token = self.new_msi(now, source);
        if high {
            self.ioapic_mut().pins[pin as usize]
                .level_riders
                .push(token);
            self.ledger.ioapic_level += 1;
        } else {
            let host = self.ioapic_mut();
            host.pins[pin as usize].level_high = true;
            let outcome = host.io.assert_pin(input, true).expect("validated pin");
            self.emit(|| SimEvent::IoapicPin {
                t: now,
                pin: input,
                change: PinChange::Asserted,
            });
            match outcome {
                PinOutcome::Delivered(msg) => self.send_pin_message(now, msg, Some(token)),
                PinOutcome::PendingUntilUnmask | PinOutcome::BlockedRemoteIrr => {
                    self.ioapic_mut().pins[pin as usize].level_undelivered = Some(token);
                    self.ledger.ioapic_level += 1;
                }
                PinOutcome::ReservedDeliveryMode => {
                    self.drop_msi(now, token, "reserved_delivery_mode")
                }
                other => unreachable!("a level entry answered {other:?} to a rising line"),
            }
        }
        if let Some(at) = next {
            self.queue
                .schedule(at, Priority::DEVICE, Event::IoapicAssert { pin });
        }
    }

    /// A register access (an unmask, an EOI) made the IOAPIC send `msg` for a level
    /// line still high: it carries the assertion that raised the line if that one was
    /// not delivered yet, else no new event (the handler it starts finds none).
    pub(super) fn deliver_level(&mut self, now: SimTime, input: u8, msg: InterruptMessage) {
        let host = self.ioapic_mut();
        let token = host.by_pin[input as usize]
            .and_then(|i| host.pins[i as usize].level_undelivered.take());
        if token.is_some() {
            self.ledger.ioapic_level -= 1;
        }
        self.send_pin_message(now, msg, token);
    }

    pub(super) fn send_pin_message(
        &mut self,
        now: SimTime,
        msg: InterruptMessage,
        msi: Option<MsiToken>,
    ) {
        let latency = Duration::from_ns_f64(self.costs.ioapic.message_latency_ns);
        let cpu = self
            .apic_index
            .get(u64::from(msg.destination))
            .expect("entries are programmed at this machine's APIC IDs");
        if msi.is_some() {
            self.ledger.fabric += 1;
        }
        let msi = msi.map(|token| self.parked.msis.park(token));
        self.queue.schedule(
            now + latency,
            Priority::APIC,
            Event::ApicMessage {
                cpu,
                vector: msg.vector,
                level: false,
                msi,
            },
        );
    }

    /// The pin a flow step of `cpu` is about: its hardirq's, else its reader's; none
    /// for an algorithm of `System::run_ioapic` (a step without a pin does nothing).
    pub(super) fn flow_pin(&self, cpu: u32) -> Option<u16> {
        let c = &self.cpus[cpu as usize];
        if let CpuState::Running(v) = c.state {
            if let HandlerRef::IoapicPin(p) = c.handler_of(v) {
                return Some(p);
            }
        }
        match c.task.as_ref().map(|t| t.kind) {
            Some(super::cpu::TaskKind::IoapicThread(p)) => Some(p),
            _ => None,
        }
    }

    /// Applies a flow step when it completes; returns its value.
    pub(super) fn complete_flow_op(&mut self, now: SimTime, cpu: u32, op: PinHostOp) -> u64 {
        let pin = match op {
            PinHostOp::DescDisable(input)
            | PinHostOp::DescEnable(input)
            | PinHostOp::Resend(input) => self.ioapic_mut().by_pin[input as usize],
            PinHostOp::DescStatus
            | PinHostOp::DescEnter
            | PinHostOp::DescAgain
            | PinHostOp::DescExit
            | PinHostOp::AckDevice => self.flow_pin(cpu),
            // The rest change nothing here (their effects are elsewhere).
            _ => None,
        };
        // No pin (an input of no scenario pin, or a `run_ioapic` algorithm): nothing
        // to change.
        let Some(pin) = pin else {
            return 0;
        };
        let p = &mut self.ioapic_mut().pins[pin as usize];
        let st = &mut p.desc_status;
        match op {
            PinHostOp::DescStatus => *st as u64,
            PinHostOp::DescEnter => {
                *st &= !DESC_REPLAY;
                *st |= DESC_PENDING;
                if *st & (DESC_DISABLED | DESC_INPROGRESS) == 0 {
                    *st &= !DESC_PENDING;
                    *st |= DESC_INPROGRESS;
                    1
                } else {
                    0
                }
            }
            PinHostOp::DescAgain => {
                let again = *st & DESC_PENDING != 0;
                *st &= !DESC_PENDING;
                again as u64
            }
            PinHostOp::DescExit => {
                *st &= !DESC_INPROGRESS;
                0
            }
            PinHostOp::DescDisable(_) => {
                p.desc_depth += 1;
                if p.desc_depth == 1 {
                    *st |= DESC_DISABLED;
                    1
                } else {
                    0
                }
            }
            PinHostOp::DescEnable(_) => {
                // An enable without a disable is a driver bug Linux warns about; it
                // changes nothing.
                if p.desc_depth == 0 {
                    return 0;
                }
                p.desc_depth -= 1;
                if p.desc_depth > 0 {
                    return 0;
                }
                *st &= !DESC_DISABLED;
                let mut r = 1;
                if *st & (DESC_PENDING | DESC_REPLAY) == DESC_PENDING {
                    *st |= DESC_REPLAY;
                    r |= 2;
                }
                r
            }
            PinHostOp::Resend(_) => {
                p.replays += 1;
                let (target, vector) = (p.cpu, p.vector);
                let flight = Duration::from_ns_f64(self.costs.apic.ipi_latency_ns);
                self.queue.schedule(
                    now + flight,
                    Priority::APIC,
                    Event::ApicMessage {
                        cpu: target,
                        vector,
                        level: false,
                        msi: None,
                    },
                );
                0
            }
            PinHostOp::AckDevice => {
                if !p.level_high {
                    return 0;
                }
                p.level_high = false;
                let input = p.pin;
                let undelivered = p.level_undelivered.take();
                let riders = p.level_riders.take();
                let host = self.ioapic_mut();
                let _ = host.io.assert_pin(input, false);
                if let Some(t) = undelivered {
                    self.ledger.ioapic_level -= 1;
                    self.ledger.served_without_interrupt(t);
                }
                self.ledger.ioapic_level -= riders.len();
                self.ledger.bag_served_without_interrupt(riders);
                self.emit(|| SimEvent::IoapicPin {
                    t: now,
                    pin: input,
                    change: PinChange::Deasserted,
                });
                0
            }
            _ => unreachable!("no pin for {op:?} above"),
        }
    }
}

//! x2APIC local APIC and I/O APIC, as pure state machines.
//!
//! Sources: Intel SDM Vol. 3A chapter 11 ("Advanced Programmable Interrupt Controller
//! (APIC)"; section numbers as in the 2023+ editions, older editions number the same
//! chapter 10); the Intel 82093AA I/O APIC datasheet; Linux `io_apic.c` for the access
//! patterns a kernel uses.
//!
//! Nothing here reads a clock or owns a queue: methods take `now` where time matters
//! and return outcomes and effects as values; the root engine turns them into events.
//! Guest misbehaviour (an illegal vector, a write to a read-only register, reserved
//! bits) is part of the model and comes back as a fault effect or an ESR bit, never as
//! an `Err` or a panic; [`ApicError`] is only for bad configuration and API misuse.
//!
//! ```text
//!  device pin --assert_pin--> Ioapic --InterruptMessage--+
//!                               ^                        |  ApicTopology::resolve*
//!                               | eoi(vector)            v
//!  wrmsr(ICR) --SendIpi--> ApicTopology --> LocalApic::receive / accept --> IRR
//!                                            deliverable / acknowledge --> ISR
//!                                            wrmsr(EOI) --Eoi{broadcast}--+
//! ```
//!
//! Modelled:
//! - [`lapic`]: IRR/ISR/TMR, TPR/PPR priority classes, acceptance of fixed interrupts
//!   (merging into a pending IRR bit), INTA, EOI with the level EOI broadcast and its
//!   suppression (SVR bit 12), software disable, ESR and the error interrupt, delivery
//!   modes on reception (fixed, lowest priority, NMI, SMI, INIT reset, SIPI in
//!   wait-for-SIPI), local LVT sources.
//! - [`msr`]: the x2APIC MSR map (0x800-0x8FF) with #GP for absent, read-only,
//!   write-only and reserved-bit accesses; IA32_TSC_DEADLINE.
//! - [`icr`]: ICR fields, the SDM's valid-combination rules, SELF_IPI, x2APIC cluster
//!   logical IDs, destination resolution (physical, logical cluster, broadcast,
//!   shorthands) over an indexed [`ApicTopology`], lowest-priority arbitration.
//! - [`timer`]: one-shot, periodic and TSC-deadline modes, divide configuration,
//!   current count computed from `now`.
//! - [`ioapic`]: redirection entries, IOREGSEL/IOWIN and the EOI register, edge/level
//!   pins, mask, Remote IRR, access accounting and costs.
//! - [`config`]: clocks and the LAPIC cost table.
//!
//! Not modelled: xAPIC (MMIO) mode, IA32_APIC_BASE and mode switches, the
//! hardware-disabled state; xAPIC flat/cluster logical modes; lowest-priority IPIs
//! (reserved in the x2APIC ICR); ExtINT and the 8259; APIC virtualization (APICv,
//! posted interrupts live in pid-model/iommu-sim); NMI/SMI blocking in the core; IOAPIC
//! pin polarity, delivery status, remappable RTE format, IOSAPIC.

pub mod config;
pub mod gic;
pub mod icr;
pub mod ioapic;
pub mod lapic;
pub mod msr;
pub mod timer;

pub use config::{LapicConfig, LapicCosts};
pub use icr::{
    ipi_from_icr, logical_id, pick_lowest_priority, ApicTopology, DeliveryMode, DestMode, Icr,
    IpiDropReason, IpiMessage, Shorthand, TriggerMode, BROADCAST_DEST,
};
pub use ioapic::{
    InterruptMessage, Ioapic, IoapicAccess, IoapicCosts, IoapicEoi, IoapicWrite, PinOutcome,
    Polarity, RedirectionEntry,
};
pub use lapic::{
    AcceptOutcome, DeliveryOutcome, EoiOutcome, IgnoreReason, LocalApic, LvtSource, RejectReason,
};
pub use msr::{ApicEffect, ApicEffects, MsrRead};
pub use timer::{ApicTimer, TimerMode};

/// Bad configuration or API misuse. Guest misbehaviour is never reported here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApicError {
    /// A configuration field out of range.
    #[error("invalid configuration: {field} = {value}; allowed: {allowed}")]
    InvalidConfig {
        field: &'static str,
        value: String,
        allowed: &'static str,
    },
    /// Two APICs were given the same x2APIC ID.
    #[error("duplicate x2APIC ID {id:#x}: every APIC needs a unique ID")]
    DuplicateApicId { id: u32 },
    /// 0xFFFF_FFFF is the broadcast destination and cannot be an APIC's ID.
    #[error("x2APIC ID {id:#x} is reserved (broadcast); allowed: 0..=0xfffffffe")]
    ReservedApicId { id: u32 },
    /// An IOAPIC pin number past the redirection table.
    #[error("IOAPIC pin {pin} does not exist; allowed: 0..{pins}")]
    NoSuchPin { pin: u8, pins: u8 },
}

#[cfg(test)]
mod tests {
    use super::*;
    use sim_core::{ApicId, SimTime, Vector};

    /// A level-triggered IOAPIC interrupt makes the full round trip: pin, message,
    /// routing, IRR, INTA, EOI broadcast, Remote IRR cleared; and a logical-cluster
    /// IPI reaches exactly the CPUs of its bitmap.
    #[test]
    fn level_interrupt_round_trip_and_cluster_ipi() {
        let ids = [0u32, 1, 2, 16, 17].map(ApicId);
        let topo = ApicTopology::new(ids).unwrap();
        let mut apics: Vec<LocalApic> = ids.iter().map(|&id| LocalApic::new(id)).collect();
        let idx = |id: ApicId| ids.iter().position(|&x| x == id).unwrap();

        let mut io = Ioapic::new(0, 24).unwrap();
        let rte = RedirectionEntry::new(
            Vector(0x41),
            DeliveryMode::Fixed,
            DestMode::Physical,
            TriggerMode::Level,
            Polarity::ActiveLow,
            false,
            16,
        );
        let _ = io.write_entry(9, rte).unwrap();
        let PinOutcome::Delivered(msg) = io.assert_pin(9, true).unwrap() else {
            panic!()
        };
        let mut targets = Vec::new();
        topo.resolve_dest_into(msg.dest_mode, msg.destination, &mut targets);
        assert_eq!(targets, [ApicId(16)]);
        let cpu = &mut apics[idx(targets[0])];
        let out = cpu.receive(msg.mode, msg.vector, msg.trigger);
        assert_eq!(out, DeliveryOutcome::Fixed(AcceptOutcome::Accepted));
        assert_eq!(cpu.acknowledge(), Some(Vector(0x41)));
        let _ = io.assert_pin(9, false); // the handler silenced the device
        let fx = cpu.wrmsr(SimTime(0), msr::MSR_EOI, 0);
        let Some(ApicEffect::Eoi(EoiOutcome {
            broadcast: Some(v), ..
        })) = fx.iter().next()
        else {
            panic!("{fx:?}")
        };
        let eoi = io.eoi(*v);
        assert_eq!((eoi.cleared, eoi.redelivered.len()), (1, 0));

        // One ICR write in cluster mode reaches APICs 16 and 17.
        let dest = logical_id(ApicId(16)) | logical_id(ApicId(17));
        let icr = Icr::encode(
            Vector(0xfb),
            DeliveryMode::Fixed,
            DestMode::Logical,
            TriggerMode::Edge,
            Shorthand::None,
            dest,
        );
        let fx = apics[0].wrmsr(SimTime(0), msr::MSR_ICR, icr.0);
        let Some(ApicEffect::SendIpi(ipi)) = fx.iter().next().copied() else {
            panic!("{fx:?}")
        };
        for id in topo.resolve(&ipi) {
            assert_eq!(
                apics[idx(id)].receive_ipi(&ipi),
                DeliveryOutcome::Fixed(AcceptOutcome::Accepted)
            );
        }
        let pending: Vec<u32> = apics
            .iter()
            .filter(|a| a.irr().contains(Vector(0xfb)))
            .map(|a| a.id().0)
            .collect();
        assert_eq!(pending, [16, 17]);
    }
}

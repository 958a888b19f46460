//! x2APIC local APIC and IOAPIC redirection table, as pure state machines.
//!
//! Sources: Intel SDM Vol. 3A chapter 11 ("Advanced Programmable Interrupt Controller
//! (APIC)"), section numbers as in the 2023+ editions (older editions number the same
//! chapter 10); the Intel 82093AA I/O APIC datasheet for the IOAPIC.
//!
//! Nothing here reads a clock or owns a queue: methods take `now` where time matters
//! and return outcomes and effects as values; the root engine turns them into events.
//! Guest misbehaviour (an illegal vector, a write to a read-only register) is part of
//! the model and comes back as a fault effect or an ESR bit, never as an `Err`;
//! [`ApicError`] is only for bad configuration and API misuse.

pub mod config;
pub mod icr;
pub mod lapic;
pub mod msr;
pub mod timer;

pub use config::{LapicConfig, LapicCosts};
pub use icr::{
    ipi_from_icr, logical_id, pick_lowest_priority, ApicTopology, DeliveryMode, DestMode, Icr,
    IpiDropReason, IpiMessage, Shorthand, TriggerMode, BROADCAST_DEST,
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
}

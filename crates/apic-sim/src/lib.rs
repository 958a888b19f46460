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

pub mod lapic;

pub use lapic::{AcceptOutcome, EoiOutcome, LocalApic, RejectReason};

/// Bad configuration or API misuse. Guest misbehaviour is never reported here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApicError {
    /// Placeholder variant until configuration validation lands.
    #[error("invalid configuration: {field} = {value}: {allowed}")]
    InvalidConfig {
        field: &'static str,
        value: String,
        allowed: &'static str,
    },
}

//! IOMMU models for irqsim: the interrupt side of Intel VT-d (remapping and posting).
//! SMMUv3 will sit beside it in `smmuv3/`.
//!
//! Every type here is a pure state machine (DESIGN.md section 2): methods take `now` and
//! an input, update state, and return an outcome carrying its cost in simulated time.
//! Nothing reads a clock, owns a queue or schedules an event; the root engine does.
//!
//! # Modelled
//! - The 128-bit interrupt remapping table entry in both formats, bit for bit
//!   ([`vtd::Irte`], VT-d spec 9.10 and 9.11), including the reserved fields.
//! - The MSI address/data formats: remappable (VT-d 5.1.2.2) and compatibility
//!   (Intel SDM Vol. 3A 11.11), with handle, SHV and subhandle ([`vtd::msi`]).
//! - The remapping decision ([`vtd::InterruptRemapper`]): request checks, index
//!   against the table size, present bit, reserved bits, source-id verification
//!   (SVT/SQ), compatibility-format blocking, remapped delivery or posting, in the
//!   order of VT-d 5.1.4. Device or guest misbehaviour ends in a
//!   [`vtd::RemapAction::Blocked`] with a fault reason, never an `Err`.
//! - The interrupt entry cache ([`vtd::Iec`]): fully associative, deterministic LRU,
//!   stale entries survive a table write until software invalidates them.
//! - Fault recording ([`vtd::FaultLog`]): a bounded set of fault recording registers
//!   with an overflow flag, FPD suppression, and per-reason totals that never lose a
//!   fault.
//! - The two shared resources an interrupt crosses ([`vtd::fabric`]): the IOMMU's
//!   remapping pipeline and the system agent's interrupt-message path to the LAPICs,
//!   each a FIFO with occupancy and counters.
//!
//! # Not modelled (yet)
//! - The posted-interrupt descriptor update itself (PIR/ON/SN, notification): that is
//!   `pid-model`'s job; [`vtd::RemapAction::Post`] hands over the PDA and vector, and
//!   [`vtd::InterruptRemapper::record_posting_fault`] records its faults.
//! - The register interface (IRTA_REG, GCMD/GSTS, FECTL/FEDATA/FEADDR), the queued
//!   invalidation queue and its latency, and the fault event interrupt. Configuration
//!   is a [`vtd::RemapConfig`] value; invalidations are direct method calls.
//! - DMA remapping (second-level / first-level translation, IOTLB), PASID, AMD-Vi.
//! - Level-triggered bookkeeping (EOI broadcast to IOAPICs) and IOAPIC-originated
//!   requests' vector/trigger consistency checks (VT-d 5.1.5.1).
//! - SMMUv3 (planned under `smmuv3/`).
//!
//! **Architecture invariant:** nothing in this crate knows time except through the
//! `now` arguments it is given, and it depends on no other irqsim component.

pub mod lru;
pub mod smmuv3;
pub mod vtd;

mod error;
pub use error::IommuError;

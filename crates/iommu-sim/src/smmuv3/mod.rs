//! Arm SMMUv3: the Command queue with CMD_SYNC completion, and the translation of
//! device transactions (including MSIs headed for the GIC ITS).
//!
//! Source: Arm IHI 0070 ("Arm System Memory Management Unit Architecture Specification,
//! SMMU architecture version 3"); section numbers in the files refer to it.
//!
//! - [`queue`]: circular queue indexes with wrap flags (3.5.1) and a reference ring.
//! - [`cmd`]: command opcodes, field layouts, encode/decode, command errors (ch. 4).
//! - [`cmdq`]: the SMMU consuming the Command queue: per-opcode costs, invalidation
//!   completion, CMD_SYNC with MSI write / CONS update / SEV (4.7.3).
//! - [`regs`]: register offsets, SMMU_IDR0 features, and Linux's choice of how to wait
//!   for CMD_SYNC ([`SyncPollMode::linux`]).
//! - [`translate`]: stream table, STEs, stage 1 contexts, configuration cache and
//!   IOTLB, faults as event records (ch. 5, 7.3).
//! - [`device`]: [`Smmu`], the two halves together.
//!
//! Everything is a pure state machine: methods take `now` and return outcomes with
//! their costs and effects; the root engine schedules them. A driver or device doing
//! something wrong on the bus (illegal command, unmapped IOVA, bad StreamID) is a
//! modelled outcome; [`SmmuError`] is only for configuration and API misuse.
//!
//! A host issuing an unmap, as the root engine wires it (the Linux insertion
//! algorithm that decides *what* to write lives in the root crate, `kernel::smmu`):
//!
//! ```
//! use iommu_sim::smmuv3::*;
//! use sim_core::SimTime;
//!
//! let mut smmu = Smmu::new(&SmmuConfig::default()).unwrap();
//! let q = smmu.cmdq.geometry();
//! let prod = QueuePtr(0);
//! smmu.cmdq.write_entry(prod, Command::tlbi_nh_va(1, 0x5000).encode());
//! let sync_at = q.inc(prod, 1);
//! let msi_addr = smmu.cmdq.entry_addr(sync_at); // Linux points the MSI at the slot
//! smmu.cmdq.write_entry(sync_at, Command::Sync { cs: SyncSignal::Irq, msi_addr, msi_data: 0 }.encode());
//! smmu.cmdq.write_prod(SimTime::ZERO, q.inc(prod, 2).0).unwrap();
//!
//! let mut now = SimTime::ZERO;
//! while let Some(start) = smmu.next_consume(now) {
//!     now = start.done_at;
//!     let out = smmu.complete_consume(now).unwrap();
//!     if let ConsumeEffect::Sync(SyncCompletion::MsiWrite { addr, data, visible_at, .. }) = out.effect {
//!         // The engine applies the write when it becomes visible; the polling CPU then
//!         // sees the slot's first word turn to 0.
//!         assert!(visible_at > now);
//!         smmu.cmdq.write_memory32(addr, data);
//!     }
//! }
//! assert_eq!(smmu.cmdq.entry_word0(sync_at), 0);
//! ```

pub mod cmd;
pub mod cmdq;
pub mod device;
mod error;
pub mod queue;
pub mod regs;
pub mod translate;

pub use crate::lru::{CacheCounters, LruCache};
pub use cmd::{Command, CommandError, Invalidation, SyncSignal};
pub use cmdq::{
    CmdqConfig, CmdqCosts, CmdqCounters, CommandQueue, ConsumeEffect, ConsumeOutcome, ConsumeStart,
    SyncCompletion, ENTRIES_PER_LINE,
};
pub use device::{Smmu, SmmuConfig};
pub use error::SmmuError;
pub use queue::{CircularQueue, QueueGeometry, QueuePtr, MAX_QUEUE_LOG2};
pub use regs::{SmmuFeatures, SyncPollMode};
pub use translate::{
    DmaRequest, EventId, EventRecord, Perm, Ste, TranslateConfig, TranslateCosts,
    TranslateCounters, TranslateOutcome, TranslateResult, Translator, PAGE_SIZE,
};

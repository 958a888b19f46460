//! Intel VT-d interrupt remapping and posting.
//!
//! - [`irte`]: the 128-bit table entry, both formats (spec 9.10, 9.11).
//! - [`msi`]: remappable and compatibility MSI formats (spec 5.1.2, SDM 11.11).
//! - [`fault`]: fault reasons (spec 5.1.4) and the fault recording registers.
//! - [`iec`]: the interrupt entry cache.
//! - [`remap`]: the remapping decision, its costs and counters.
//! - [`fabric`]: the remapping pipeline and the interrupt-message fabric as FIFO
//!   resources.
//!
//! A typical wiring in the root engine, per MSI write at `now`:
//!
//! ```
//! use iommu_sim::vtd::*;
//! use sim_core::{SimTime, Vector};
//!
//! let mut ir = InterruptRemapper::new(RemapConfig::default()).unwrap();
//! let mut pipe = RemapPipeline::new();
//! let mut fabric = InterruptMessageFabric::new(&FabricCosts::default()).unwrap();
//! ir.modify_irte(5, Irte::remapped(RemappedIrte {
//!     vector: Vector(0x40), dest: 3, dest_mode_logical: false, redirection_hint: false,
//!     level_triggered: false, delivery_mode: DeliveryMode::Fixed, fpd: false,
//!     source: SourceCheck::exact(0x0100),
//! })).unwrap();
//!
//! let now = SimTime(0);
//! let out = ir.remap(now, &msi::encode_remappable(5, false, 0), 0x0100);
//! let decided = pipe.submit(now, out.cost);
//! match out.action {
//!     RemapAction::Deliver { dest, vector, .. } => {
//!         let at_lapic = fabric.submit(decided);
//!         assert!(at_lapic > decided);
//!         assert_eq!((dest.0, vector), (3, Vector(0x40)));
//!     }
//!     RemapAction::Post { .. } => { /* pid-model updates the PID at `decided`; a
//!                                      notification, if any, goes through `fabric` */ }
//!     RemapAction::Blocked { .. } => { /* dropped with a reason */ }
//! }
//! ```

pub mod fabric;
pub mod fault;
pub mod iec;
pub mod irte;
pub mod msi;
pub mod remap;

pub use fabric::{
    DeliveryScope, FabricCosts, FifoCounters, InterruptMessageFabric, MessageTiming, RemapPipeline,
};
pub use fault::{FaultCounts, FaultDisposition, FaultLog, FaultReason, FaultRecord, PerReason};
pub use iec::{Iec, IecCounters};
pub use irte::{DeliveryMode, Irte, IrteFormat, PostedIrte, RemappedIrte, SourceCheck, Sq, Svt};
pub use msi::MsiRequest;
pub use remap::{
    InterruptRemapper, RemapAction, RemapConfig, RemapCosts, RemapCounters, RemapOutcome,
};

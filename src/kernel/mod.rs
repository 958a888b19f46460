//! Linux interrupt-path algorithms, written once against [`ops::CpuPort`] and run by
//! the timed engine (and, later, the explorer and native drivers).

pub mod baseline;
pub mod migration;
pub mod nic_tx;
pub mod ops;
pub mod posted_msi;
pub mod retrigger;
pub mod smmu;
pub mod sn;
pub mod uncontended;
pub mod variants;

pub use ops::{CpuOp, CpuPort, PirWord};
pub use posted_msi::{
    CopyThenXchg, HandlerFuture, LoopBound, PirHandler, DEFAULT_MAX_LOOPS,
    POSTED_MSI_NOTIFICATION_VECTOR, VARIANT_NAMES,
};
pub mod ioapic_driver;
pub mod iosapic;
pub mod ipi;
pub mod tlb_2011;

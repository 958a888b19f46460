//! MSI sources and the arrival processes that drive them.
//!
//! Devices are pure state machines: they are told `now`, draw from the random stream
//! the engine hands them, and return the MSIs they raise and when they next act.
//!
//! Modelled: a DSA-like work queue in open loop (fixed or Poisson completions).
//! Not yet modelled: NVMe, NIC, VMD, DSA submission and queue depth.

pub mod arrival;
pub mod dsa;

pub use arrival::ArrivalProcess;
pub use dsa::{
    DsaCosts, DsaCounters, DsaOp, DsaQueue, DsaWorkQueue, DsaWqConfig, DsaWqCounters, RaisedMsi,
    SubmitOutcome, WqMode,
};

/// Bad device configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DeviceError {
    #[error("{field} = {value} is not allowed: expected {allowed}")]
    InvalidParameter {
        field: String,
        value: String,
        allowed: String,
    },
}

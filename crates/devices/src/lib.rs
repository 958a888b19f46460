//! MSI sources and the arrival processes that drive them.
//!
//! Devices are pure state machines: they are told `now`, draw from the random stream
//! the engine hands them, and return the MSIs they raise and when they next act. None
//! owns a clock or a queue. The shape every device follows:
//! - inputs (`submit`, `rx_packet`, `transmit`, `reap`, `poll`, `unmask_irq`) change
//!   state at `now`; afterwards the engine asks `next_event()` again;
//! - `advance(now, ..)` performs everything due up to `now`, appends what happened
//!   (MSIs, drops) to a caller's `Vec`, and returns the next wake-up (`Option<SimTime>`);
//! - counters are plain `Copy` structs; `check_conservation()` asserts the device's
//!   balance (every command, packet and MSI in exactly one place, drops by reason).
//!
//! Modules:
//! - [`arrival`], [`dist`], [`trace`]: arrival processes shared by every device (fixed,
//!   Poisson, on/off periods, bursts, CSV trace replay) and the distributions they use;
//! - [`dsa`]: DSA work queues;
//! - [`nvme`]: NVMe drives (queue pairs, MSI-X per CQ, coalescing, latency, IOPS ceiling);
//! - [`nic`]: NIC queue pairs (RX/TX rings, interrupt throttling, the device side of NAPI);
//! - [`vmd`]: VMD domains (Linux's vector assignment, remap and bypass);
//! - [`affinity`]: Linux managed-affinity spreading and x86 effective-CPU choice.
//!
//! An NVMe drive behind VMD, its queue interrupts spread like Linux, driven in a few
//! lines (the root's engine does the same with CPU costs and the interrupt path between):
//!
//! ```
//! use devices::*;
//! use rand::SeedableRng;
//! use sim_core::SimTime;
//!
//! let mut rng = rand::rngs::StdRng::seed_from_u64(1);
//! // 4 CPUs; the drive's vectors are admin + 2 I/O queues (NVMe: pre_vectors = 1).
//! let node = NodeCpus::flat(4);
//! let affd = IrqAffinity { pre_vectors: 1, ..IrqAffinity::default() };
//! let masks = irq_create_affinity_masks(3, &affd, &node)?;
//! let targets = VectorMatrix::new(node.len()).place(&masks);
//! assert_eq!(targets.len(), 3);
//! // VMD in remap mode: each of the drive's MSI-X vectors gets a VMD vector.
//! let mut vmd = VmdDomain::new(VmdConfig::default(), 0.0, "vmd")?;
//! for irq in 0..3 {
//!     vmd.assign(ChildIrq { child: 0, irq }, ChildClass::Nvme)?;
//! }
//! let platform = NvmeDriveCosts::default();
//! let mut drive = NvmeDrive::new(NvmeConfig { queues: 2, ..NvmeConfig::default() }, &platform, "nvme")?;
//! // A closed loop keeping 4 commands in flight on I/O queue 0.
//! for tag in 0..4 {
//!     let _ = drive.submit(SimTime::ZERO, 0, tag, &mut rng);
//! }
//! let (mut writes, mut done) = (Vec::new(), Vec::new());
//! let mut tag = 4;
//! while let Some(t) = drive.next_event() {
//!     if t > SimTime(100_000_000) {
//!         break; // 100 us
//!     }
//!     writes.clear();
//!     drive.advance(t, &mut writes);
//!     for w in &writes {
//!         // Host memory sees each completion entry as soon as it is written here; the
//!         // root's engine lands it when the root port's ordered stream delivers it.
//!         let m = match w {
//!             NvmeWrite::Completion { qid, .. } => {
//!                 drive.land(*qid);
//!                 continue;
//!             }
//!             NvmeWrite::Msi(m) => m,
//!         };
//!         // Linux numbering: I/O queue q is the drive's MSI-X vector q + 1.
//!         let child = ChildIrq { child: 0, irq: m.vector as u32 + 1 };
//!         let VmdRoute::Vector { vector, .. } = vmd.child_msi(m.at, child) else {
//!             unreachable!("remap mode")
//!         };
//!         // VMD's handler calls every child handler registered on its vector.
//!         for c in vmd.dispatch(vector).to_vec() {
//!             if c.irq == 0 {
//!                 continue; // the admin queue's handler finds nothing
//!             }
//!             done.clear();
//!             drive.reap(c.irq as u16 - 1, u32::MAX, &mut done);
//!             for _ in &done {
//!                 let _ = drive.submit(t, c.irq as u16 - 1, tag, &mut rng);
//!                 tag += 1;
//!             }
//!         }
//!     }
//! }
//! drive.check_conservation();
//! vmd.check_conservation();
//! assert!(drive.totals().reaped > 50);
//! # Ok::<(), devices::DeviceError>(())
//! ```

pub mod affinity;
pub mod arrival;
pub mod dist;
pub mod dsa;
pub mod nic;
pub mod nvme;
pub mod trace;
pub mod vmd;

pub use affinity::{
    cpu_to_queue, group_cpus_evenly, irq_create_affinity_masks, spread_queues, Affinity,
    AffinityMask, IrqAffinity, NodeCpus, SpreadMemo, VectorMatrix,
};
pub use arrival::{ArrivalGenerator, ArrivalProcess, ArrivalSpec, Spacing};
pub use dist::Dist;
pub use dsa::{
    DsaCosts, DsaCounters, DsaOp, DsaQueue, DsaWorkQueue, DsaWqConfig, DsaWqCounters, RaisedMsi,
    SubmitOutcome, WqMode,
};
pub use nic::{
    NapiConfig, NicConfig, NicCounters, NicEffect, NicQueue, PacketDropReason, PollResult,
    RxOutcome, TxOutcome,
};
pub use nvme::{
    Coalescing, CqEntry, MsiCause, NvmeConfig, NvmeDrive, NvmeDriveCosts, NvmeHostCosts, NvmeMsi,
    NvmeQueueCounters, NvmeSubmitOutcome, NvmeWrite, VectorCoalescing,
};
pub use trace::{TraceArrival, TraceError};
pub use vmd::{ChildClass, ChildIrq, VmdConfig, VmdDomain, VmdMode, VmdRoute, VmdVectorCounters};

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

impl DeviceError {
    /// `field.name = value` is not allowed; `allowed` says what is. Every validator
    /// builds its errors here, so they all name the field the same way.
    pub(crate) fn invalid(
        field: &str,
        name: &str,
        value: impl ToString,
        allowed: impl Into<String>,
    ) -> DeviceError {
        DeviceError::InvalidParameter {
            field: format!("{field}.{name}"),
            value: value.to_string(),
            allowed: allowed.into(),
        }
    }
}

/// Checks host-side costs in CPU cycles: each must be finite and within 0..=1e9 (a
/// second at 1 GHz, far beyond any handler). `field` names the table, `name` the entry.
pub(crate) fn check_cycles(field: &str, costs: &[(&str, f64)]) -> Result<(), DeviceError> {
    match costs
        .iter()
        .find(|(_, v)| !(v.is_finite() && (0.0..=1e9).contains(v)))
    {
        Some((name, v)) => Err(DeviceError::InvalidParameter {
            field: format!("{field}.{name}"),
            value: v.to_string(),
            allowed: "a finite number of cycles in 0..=1e9".into(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_cycle_cost_is_named_with_its_table_and_value() {
        assert_eq!(
            check_cycles("nics[0].napi", &[("poll_cycles", 500.0)]),
            Ok(())
        );
        for bad in [-1.0, f64::NAN, f64::INFINITY, 2e9] {
            let err = check_cycles(
                "nvme[2].host",
                &[("submit_cycles", 10.0), ("reap_entry_cycles", bad)],
            )
            .unwrap_err();
            assert_eq!(
                err,
                DeviceError::InvalidParameter {
                    field: "nvme[2].host.reap_entry_cycles".into(),
                    value: bad.to_string(),
                    allowed: "a finite number of cycles in 0..=1e9".into(),
                }
            );
        }
    }
}

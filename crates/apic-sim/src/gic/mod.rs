//! A minimal GICv3 for the Arm MSI path: the ITS that turns a (DeviceID, EventID)
//! write into an LPI, and the redistributor plus CPU interface that hold it pending
//! until the CPU acknowledges it (ICC_IAR1_EL1) and ends it (ICC_EOIR1_EL1).
//!
//! Source: Arm IHI 0069 ("Arm Generic Interrupt Controller Architecture Specification,
//! GIC architecture version 3 and version 4"): chapter 5 (LPIs and the ITS, its tables
//! and commands), chapter 4 (interrupt handling and prioritization), chapter 12
//! (registers).
//!
//! ```text
//!  device: DMA write of EventID to GITS_TRANSLATER (DeviceID = its StreamID)
//!     │ (translated by the SMMU on the way: iommu-sim smmuv3)
//!     ▼
//!  Its::translate(DeviceID, EventID): device table -> ITT -> (LPI INTID, ICID)
//!                                     collection table -> target CPU
//!     │ Lpi { intid, cpu }            or   Dropped(ItsDropReason)
//!     ▼
//!  Redistributor[cpu].set_pending(intid, &config)  (LPI configuration: priority, enable)
//!     │ signal -> CPU interface
//!     ▼
//!  acknowledge() = ICC_IAR1_EL1 read -> INTID    eoi(intid) = ICC_EOIR1_EL1 write
//! ```
//!
//! Pure state machines: costs are returned, nothing is scheduled. A device writing an
//! EventID nobody mapped is a drop with a reason, never an `Err`; [`GicError`] is for
//! misconfiguration (an INTID that is not an LPI, a collection that does not exist).
//!
//! Not modelled: SPIs/PPIs/SGIs and the distributor, GICv4 virtual LPIs, the ITS command
//! queue itself (CBASER/CWRITER/CREADR; commands are method calls), GITS_TYPER.PTA = 1
//! (collections target redistributors by address), security states and groups other
//! than Non-secure Group 1, the binary point (preemption uses the full priority).

pub mod its;
pub mod redist;

pub use its::{
    Its, ItsConfig, ItsCosts, ItsCounters, ItsDropReason, ItsOutcome, ItsResult, GITS_TRANSLATER,
};
pub use redist::{
    EoiOutcome, GicCpuCosts, LpiConfig, LpiConfigTable, PendOutcome, RedistCounters, Redistributor,
};

use thiserror::Error;

/// The first LPI INTID (IHI 0069 5.1: LPIs are INTIDs 8192 and up).
pub const LPI_BASE: u32 = 8192;
/// The INTID an acknowledge returns when nothing is pending (1023, "spurious").
pub const INTID_SPURIOUS: u32 = 1023;
/// INTIDs 1020-1023 are special and never acknowledged as interrupts.
pub fn is_special_intid(intid: u32) -> bool {
    (1020..=1023).contains(&intid)
}

/// Bad GIC configuration or API misuse.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum GicError {
    /// An INTID below 8192 or beyond the LPI range the configuration allows.
    #[error("INTID {intid} is not an LPI: allowed {LPI_BASE}..{end} (GICD_TYPER.IDbits = {id_bits})", end = 1u64 << .id_bits)]
    NotAnLpi { intid: u32, id_bits: u8 },
    /// A DeviceID at or beyond 2^(GITS_TYPER.Devbits + 1).
    #[error("DeviceID {device_id:#x} is out of range: the ITS supports {bits} DeviceID bits")]
    DeviceIdOutOfRange { device_id: u32, bits: u8 },
    /// An EventID at or beyond the device's ITT size.
    #[error("EventID {event_id} is past the ITT of device {device_id:#x} ({bits} EventID bits)")]
    EventIdOutOfRange {
        device_id: u32,
        event_id: u32,
        bits: u8,
    },
    /// MAPTI/MOVI naming a device without a valid MAPD.
    #[error("device {device_id:#x} is not mapped: issue MAPD first")]
    DeviceNotMapped { device_id: u32 },
    /// An ICID beyond the collections the ITS holds (GITS_TYPER.HCC).
    #[error("ICID {icid} is out of range: the ITS holds {collections} collections")]
    IcidOutOfRange { icid: u16, collections: u16 },
    /// A configuration field out of range.
    #[error("gic config field `{field}` = {value}: allowed {allowed}")]
    InvalidConfig {
        field: &'static str,
        value: u64,
        allowed: &'static str,
    },
    /// A cost-table field that is negative, NaN or infinite.
    #[error("cost field `{table}.{field}` = {value}: must be a finite number >= 0")]
    InvalidCost {
        table: &'static str,
        field: &'static str,
        value: f64,
    },
}

pub(crate) fn check_cost(
    table: &'static str,
    field: &'static str,
    value: f64,
) -> Result<(), GicError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(GicError::InvalidCost {
            table,
            field,
            value,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sim_core::{CpuId, SimTime};

    /// An MSI's full trip through the GIC: ITS translation to an LPI on CPU 1, pending
    /// in its redistributor, acknowledged, EOI'd; a second write while pending merges;
    /// a write for an unmapped event is dropped with a reason.
    #[test]
    fn msi_to_lpi_round_trip() {
        let mut its = Its::new(ItsConfig::default()).unwrap();
        let mut cfg = LpiConfigTable::new(16);
        let mut rd: Vec<Redistributor> = (0..2).map(|c| Redistributor::new(CpuId(c))).collect();
        rd.iter_mut().for_each(|r| r.set_enable_lpis(true));
        its.mapd(0x100, Some(4)).unwrap();
        its.mapc(3, Some(CpuId(1))).unwrap();
        its.mapti(0x100, 2, 8200, 3).unwrap();
        cfg.set(
            8200,
            LpiConfig {
                priority: 0xa0,
                enabled: true,
            },
        )
        .unwrap();

        let out = its.translate(SimTime::ZERO, 0x100, 2);
        let ItsResult::Lpi { intid, cpu } = out.result else {
            panic!("{out:?}")
        };
        assert_eq!((intid, cpu), (8200, CpuId(1)));
        let r = &mut rd[cpu.0 as usize];
        assert_eq!(
            r.set_pending(intid, &cfg),
            PendOutcome::Pending { signal: true }
        );
        let again = its.translate(SimTime::ZERO, 0x100, 2);
        assert!(
            again.cost < out.cost,
            "second translation hits the ITS cache"
        );
        assert_eq!(r.set_pending(intid, &cfg), PendOutcome::Merged);
        assert_eq!(r.acknowledge(), 8200);
        assert_eq!(r.acknowledge(), INTID_SPURIOUS);
        assert_eq!(r.eoi(8200), EoiOutcome::PriorityDropped);
        assert!(matches!(
            its.translate(SimTime::ZERO, 0x100, 5).result,
            ItsResult::Dropped(ItsDropReason::EventNotMapped)
        ));
        assert!(is_special_intid(INTID_SPURIOUS));
    }
}

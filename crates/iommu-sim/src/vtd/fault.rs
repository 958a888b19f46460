//! Interrupt-remapping fault reasons and the fault recording registers.
//!
//! Reason codes 0x20-0x26 are the interrupt-remapping fault conditions of the VT-d
//! spec (5.1.4 "Interrupt-Remapping Fault Conditions"; the same seven strings are
//! Linux's `irq_remap_fault_reasons` in drivers/iommu/intel/dmar.c). 0x27 and 0x28 are
//! the posting conditions the spec lists after them (posted-interrupt descriptor
//! access error; reserved field set in the descriptor). Linux's table stops at 0x26,
//! so those two codes rest on the spec alone.
//!
//! Fault recording (VT-d chapter 7, primary fault logging; registers in 10.4): hardware owns CAP_REG.NFR + 1 fault recording
//! registers (1-256). A fault goes into a free register; when none is free the
//! Primary Fault Overflow flag (FSTS_REG.PFO) is set and the fault is not recorded.
//! An entry with FPD = 1 suppresses recording of faults it causes, but the request is
//! still blocked. [`FaultLog`] models those registers and, so that nothing is lost
//! silently, also keeps per-reason totals split into recorded, suppressed and
//! overflowed.

use crate::IommuError;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use sim_core::SimTime;

/// Why an interrupt request was blocked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultReason {
    /// 0x20: a reserved field is set in the (remappable-format) request.
    RequestReservedField,
    /// 0x21: the interrupt index is beyond the table size programmed in IRTA_REG.
    IndexBeyondTable,
    /// 0x22: the IRTE's Present bit is clear.
    IrteNotPresent,
    /// 0x23: reading the table through IRTA_REG failed.
    TableRootInvalid,
    /// 0x24: a reserved field (or conditionally reserved field) of a present IRTE is set.
    IrteReservedField,
    /// 0x25: compatibility-format request blocked (CFIS clear or EIME set).
    CompatFormatBlocked,
    /// 0x26: source-id verification against SID/SQ/SVT failed.
    SourceIdCheckFailed,
    /// 0x27: accessing the posted-interrupt descriptor at the IRTE's PDA failed.
    PidAccessError,
    /// 0x28: a reserved field of the posted-interrupt descriptor is set.
    PidReservedField,
}

impl FaultReason {
    /// Every reason, in code order.
    pub const ALL: [FaultReason; 9] = [
        FaultReason::RequestReservedField,
        FaultReason::IndexBeyondTable,
        FaultReason::IrteNotPresent,
        FaultReason::TableRootInvalid,
        FaultReason::IrteReservedField,
        FaultReason::CompatFormatBlocked,
        FaultReason::SourceIdCheckFailed,
        FaultReason::PidAccessError,
        FaultReason::PidReservedField,
    ];

    /// The fault reason code the hardware writes into the fault recording register.
    pub const fn code(self) -> u8 {
        0x20 + self.slot() as u8
    }

    /// Position in [`FaultReason::ALL`].
    const fn slot(self) -> usize {
        match self {
            FaultReason::RequestReservedField => 0,
            FaultReason::IndexBeyondTable => 1,
            FaultReason::IrteNotPresent => 2,
            FaultReason::TableRootInvalid => 3,
            FaultReason::IrteReservedField => 4,
            FaultReason::CompatFormatBlocked => 5,
            FaultReason::SourceIdCheckFailed => 6,
            FaultReason::PidAccessError => 7,
            FaultReason::PidReservedField => 8,
        }
    }

    pub fn from_code(code: u8) -> Option<FaultReason> {
        FaultReason::ALL.iter().copied().find(|r| r.code() == code)
    }

    /// Stable snake_case name, used as a JSON key in reports.
    pub const fn name(self) -> &'static str {
        match self {
            FaultReason::RequestReservedField => "request_reserved_field",
            FaultReason::IndexBeyondTable => "index_beyond_table",
            FaultReason::IrteNotPresent => "irte_not_present",
            FaultReason::TableRootInvalid => "table_root_invalid",
            FaultReason::IrteReservedField => "irte_reserved_field",
            FaultReason::CompatFormatBlocked => "compat_format_blocked",
            FaultReason::SourceIdCheckFailed => "source_id_check_failed",
            FaultReason::PidAccessError => "pid_access_error",
            FaultReason::PidReservedField => "pid_reserved_field",
        }
    }
}

impl std::fmt::Display for FaultReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:#04x})", self.name(), self.code())
    }
}

impl Serialize for FaultReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The content of one fault recording register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FaultRecord {
    pub time: SimTime,
    pub reason: FaultReason,
    /// Requester id of the faulting request.
    pub source_id: u16,
    /// Interrupt index (FI field), when the request got far enough to have one.
    pub index: Option<u32>,
}

/// What happened to a fault in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultDisposition {
    /// Written to a fault recording register.
    Recorded,
    /// The IRTE's FPD bit suppressed recording.
    SuppressedByFpd,
    /// All recording registers were full: PFO set, fault not recorded.
    Overflowed,
}

/// One counter per [`FaultReason`]; serializes as a map keyed by [`FaultReason::name`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerReason(pub [u64; 9]);

impl PerReason {
    pub fn get(&self, r: FaultReason) -> u64 {
        self.0[r.slot()]
    }
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    fn bump(&mut self, r: FaultReason) {
        self.0[r.slot()] += 1;
    }
}

impl Serialize for PerReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(FaultReason::ALL.len()))?;
        for r in FaultReason::ALL {
            m.serialize_entry(r.name(), &self.get(r))?;
        }
        m.end()
    }
}

/// Totals per reason. Invariant: `occurred = recorded + suppressed + overflowed`,
/// per reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FaultCounts {
    pub occurred: PerReason,
    pub recorded: PerReason,
    pub suppressed: PerReason,
    pub overflowed: PerReason,
}

/// Default number of fault recording registers: 8 (assumption: CAP_REG.NFR = 7, which
/// is what the `cap 0x8d2078c106f0466` value seen in Xeon DMAR boot logs decodes to;
/// QEMU's model has 1). The spec allows 1-256.
pub const DEFAULT_FAULT_RECORDS: usize = 8;

/// The fault recording registers plus lossless totals.
#[derive(Clone, Debug)]
pub struct FaultLog {
    capacity: usize,
    records: Vec<FaultRecord>,
    overflow: bool,
    counts: FaultCounts,
}

impl Default for FaultLog {
    fn default() -> Self {
        FaultLog::new(DEFAULT_FAULT_RECORDS).expect("default is in range")
    }
}

impl FaultLog {
    /// `capacity` recording registers, 1..=256 (CAP_REG.NFR + 1).
    pub fn new(capacity: usize) -> Result<FaultLog, IommuError> {
        if !(1..=256).contains(&capacity) {
            return Err(IommuError::InvalidFaultRecordCount { value: capacity });
        }
        Ok(FaultLog {
            capacity,
            records: Vec::with_capacity(capacity),
            overflow: false,
            counts: FaultCounts::default(),
        })
    }

    /// Logs a fault. `fpd` is the FPD bit of the IRTE that caused it (false when no
    /// entry was involved).
    pub fn record(&mut self, rec: FaultRecord, fpd: bool) -> FaultDisposition {
        self.counts.occurred.bump(rec.reason);
        let d = if fpd {
            self.counts.suppressed.bump(rec.reason);
            FaultDisposition::SuppressedByFpd
        } else if self.records.len() < self.capacity {
            self.records.push(rec);
            self.counts.recorded.bump(rec.reason);
            FaultDisposition::Recorded
        } else {
            self.overflow = true;
            self.counts.overflowed.bump(rec.reason);
            FaultDisposition::Overflowed
        };
        debug_assert_eq!(
            self.counts.occurred.total(),
            self.counts.recorded.total()
                + self.counts.suppressed.total()
                + self.counts.overflowed.total()
        );
        d
    }

    /// Records currently held in the registers, oldest first.
    pub fn records(&self) -> &[FaultRecord] {
        &self.records
    }
    /// Software services the registers: returns and frees them (clearing each F bit).
    pub fn take_records(&mut self) -> Vec<FaultRecord> {
        std::mem::take(&mut self.records)
    }
    /// FSTS_REG.PFO: a fault was lost from the registers because they were full.
    pub fn overflow(&self) -> bool {
        self.overflow
    }
    /// Software writes 1 to PFO.
    pub fn clear_overflow(&mut self) {
        self.overflow = false;
    }
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    pub fn counts(&self) -> &FaultCounts {
        &self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(reason: FaultReason) -> FaultRecord {
        FaultRecord {
            time: SimTime(5),
            reason,
            source_id: 0x100,
            index: Some(3),
        }
    }

    #[test]
    fn codes_and_names_are_stable() {
        let codes: Vec<u8> = FaultReason::ALL.iter().map(|r| r.code()).collect();
        assert_eq!(codes, (0x20..=0x28).collect::<Vec<u8>>());
        // Each code's name, as the VT-d spec (Table 7.x, interrupt-remapping fault
        // conditions) orders them; reports and scenarios depend on these strings.
        let names: Vec<(u8, &str)> = FaultReason::ALL
            .iter()
            .map(|r| (r.code(), r.name()))
            .collect();
        assert_eq!(
            names,
            [
                (0x20, "request_reserved_field"),
                (0x21, "index_beyond_table"),
                (0x22, "irte_not_present"),
                (0x23, "table_root_invalid"),
                (0x24, "irte_reserved_field"),
                (0x25, "compat_format_blocked"),
                (0x26, "source_id_check_failed"),
                (0x27, "pid_access_error"),
                (0x28, "pid_reserved_field"),
            ]
        );
        for r in FaultReason::ALL {
            assert_eq!(FaultReason::from_code(r.code()), Some(r));
            assert_eq!(r.to_string(), format!("{} ({:#04x})", r.name(), r.code()));
            assert_eq!(
                serde_json::to_string(&r).unwrap(),
                format!("\"{}\"", r.name())
            );
        }
        assert_eq!(
            FaultReason::from_code(0x26),
            Some(FaultReason::SourceIdCheckFailed)
        );
        assert_eq!(FaultReason::from_code(0x30), None);
        assert_eq!(
            serde_json::to_string(&FaultReason::CompatFormatBlocked).unwrap(),
            "\"compat_format_blocked\""
        );
    }

    #[test]
    fn overflow_sets_flag_but_counts_everything() {
        let mut log = FaultLog::new(2).unwrap();
        assert_eq!(
            (log.capacity(), FaultLog::new(256).unwrap().capacity()),
            (2, 256)
        );
        assert_eq!(
            log.record(rec(FaultReason::IrteNotPresent), false),
            FaultDisposition::Recorded
        );
        assert_eq!(
            log.record(rec(FaultReason::IrteNotPresent), false),
            FaultDisposition::Recorded
        );
        assert_eq!(
            log.record(rec(FaultReason::IndexBeyondTable), false),
            FaultDisposition::Overflowed
        );
        assert_eq!(
            log.record(rec(FaultReason::IndexBeyondTable), true),
            FaultDisposition::SuppressedByFpd
        );
        assert!(log.overflow());
        assert_eq!(log.records().len(), 2);
        let c = log.counts();
        assert_eq!(c.occurred.get(FaultReason::IrteNotPresent), 2);
        assert_eq!(c.occurred.get(FaultReason::IndexBeyondTable), 2);
        assert_eq!(c.overflowed.get(FaultReason::IndexBeyondTable), 1);
        assert_eq!(c.suppressed.get(FaultReason::IndexBeyondTable), 1);
        assert_eq!(log.take_records().len(), 2);
        log.clear_overflow();
        assert_eq!(
            log.record(rec(FaultReason::IrteNotPresent), false),
            FaultDisposition::Recorded
        );
        assert!(!log.overflow());
    }

    #[test]
    fn record_count_is_validated() {
        assert_eq!(
            FaultLog::new(0).unwrap_err(),
            IommuError::InvalidFaultRecordCount { value: 0 }
        );
        assert!(FaultLog::new(257).is_err());
        assert!(FaultLog::new(256).is_ok());
    }

    #[test]
    fn counts_serialize_by_name() {
        let mut log = FaultLog::default();
        log.record(rec(FaultReason::SourceIdCheckFailed), false);
        let v = serde_json::to_value(log.counts()).unwrap();
        assert_eq!(v["occurred"]["source_id_check_failed"], 1);
        assert_eq!(v["recorded"]["irte_not_present"], 0);
    }
}

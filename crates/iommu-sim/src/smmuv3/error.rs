//! Configuration and API misuse of the SMMUv3 model. A device or driver misbehaving on
//! the bus (a bad StreamID, an unmapped IOVA, an illegal command in the queue) is a
//! modelled outcome, never this.
//!
//! This is a separate enum from [`crate::IommuError`] only because the two models were
//! written side by side; it converts into it with `?` nowhere yet and can be folded in.

use thiserror::Error;

/// Bad configuration or API misuse, naming the field, the value and what is allowed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SmmuError {
    /// A queue size outside 2^0..=2^19 entries (IHI 0070 3.5.1: "0 <= n <= 19"), or
    /// above what SMMU_IDR1.CMDQS advertises.
    #[error("smmu config field `{field}` = {value}: log2 of the queue size must be in 0..={max} (IHI 0070 3.5.1, SMMU_IDR1)")]
    InvalidQueueSize {
        field: &'static str,
        value: u8,
        max: u8,
    },

    /// A queue base address that is not aligned to the queue's size in bytes, or
    /// wider than the 56-bit SMMU_CMDQ_BASE.ADDR field (IHI 0070 6.3.26).
    #[error(
        "smmu config field `{field}` = {value:#x}: must be aligned to {align} bytes and below 2^56"
    )]
    InvalidBaseAddress {
        field: &'static str,
        value: u64,
        align: u64,
    },

    /// Software wrote a PROD value that puts the queue in one of the inconsistent
    /// states of IHI 0070 3.5.1 (producer ahead of the consumer by more than the queue
    /// size, or behind it). Our producer is the modelled Linux driver, so this is a bug
    /// in the caller.
    #[error("SMMU_CMDQ_PROD write {prod:#x} is inconsistent with CONS {cons:#x} for a 2^{log2} queue (IHI 0070 3.5.1)")]
    InconsistentProd { prod: u32, cons: u32, log2: u8 },

    /// `complete_consume` called while no command is being consumed, or before its
    /// completion time.
    #[error("complete_consume at {now_ps} ps: {why}")]
    NoConsumeDue { now_ps: u64, why: &'static str },

    /// A StreamID at or beyond the configured stream table (2^log2size entries).
    #[error("StreamID {sid:#x} is past the stream table (2^{log2} entries, SMMU_STRTAB_BASE_CFG.LOG2SIZE)")]
    StreamIdOutOfRange { sid: u32, log2: u8 },

    /// A stream table size the model does not support (linear table, 0..=24 bits).
    #[error(
        "smmu config field `stream_table_log2` = {value}: allowed 0..=24 (linear stream table)"
    )]
    InvalidStreamTableSize { value: u8 },

    /// An STE configuration the model cannot represent (stage 2 and nested translation
    /// are not modelled).
    #[error("STE config {config:#05b} for StreamID {sid:#x} is not modelled: use abort (0b000), bypass (0b100) or stage 1 (0b101)")]
    UnsupportedSteConfig { sid: u32, config: u8 },

    /// A page-table operation on a translation context that was never created.
    #[error("translation context {ctx} does not exist; create it with `add_context` first")]
    NoSuchContext { ctx: u32 },

    /// An address not aligned to the 4 KB translation granule.
    #[error("`{field}` = {value:#x}: must be 4 KB aligned (the modelled translation granule)")]
    Unaligned { field: &'static str, value: u64 },

    /// A cache capacity or table-walk depth out of range.
    #[error("smmu config field `{field}` = {value}: allowed {allowed}")]
    InvalidConfig {
        field: &'static str,
        value: u64,
        allowed: &'static str,
    },

    /// A cost-table field that is negative, NaN or infinite.
    #[error("cost field `{table}.{field}` = {value}: must be a finite number of nanoseconds >= 0")]
    InvalidCost {
        table: &'static str,
        field: &'static str,
        value: f64,
    },
}

/// Checks one nanosecond cost field.
pub(crate) fn check_ns(
    table: &'static str,
    field: &'static str,
    value: f64,
) -> Result<(), SmmuError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(SmmuError::InvalidCost {
            table,
            field,
            value,
        })
    }
}

//! The crate's single error type: bad configuration and API misuse only. A device or
//! guest misbehaving is a modelled fault (see [`crate::vtd::FaultReason`]), never this.

use thiserror::Error;

/// Configuration or API misuse, naming the field, the value and what is allowed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum IommuError {
    /// The interrupt remapping table size is not 2^(S+1) for S in 0..=15 (IRTA_REG.S,
    /// VT-d spec 10.4).
    #[error(
        "remap config field `table_entries` = {entries}: must be 2^(S+1) for S in 0..=15 \
         (IRTA_REG.S), i.e. a power of two from 2 to 65536"
    )]
    InvalidTableSize { entries: u32 },

    /// An IRTE index past the end of the configured table.
    #[error("IRTE index {index} is past the interrupt remapping table ({table_entries} entries, valid 0..={max})", max = .table_entries - 1)]
    IrteIndexOutOfRange { index: u32, table_entries: u32 },

    /// A posted-interrupt descriptor address that is not 64-byte aligned (VT-d 9.11:
    /// the IRTE holds only `PDA[63:6]`).
    #[error("posted IRTE field `pda` = {pda:#x}: the descriptor address must be 64-byte aligned")]
    UnalignedPda { pda: u64 },

    /// The number of fault recording registers is outside CAP_REG.NFR + 1 (1..=256,
    /// VT-d spec 10.4.2).
    #[error("remap config field `fault_records` = {value}: allowed 1..=256 (CAP_REG.NFR + 1)")]
    InvalidFaultRecordCount { value: usize },

    /// A cost-table field that is negative, NaN or infinite.
    #[error("cost field `{table}.{field}` = {value}: must be a finite number of nanoseconds >= 0")]
    InvalidCost {
        table: &'static str,
        field: &'static str,
        value: f64,
    },
}

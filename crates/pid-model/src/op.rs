//! The operations an agent issues on a line, and which agent may issue which.

use serde::{Deserialize, Serialize};
use sim_core::Vector;

use crate::desc::{PID_BITS, PID_WORDS};
use crate::mesi::Agent;
use crate::PidError;

/// One access to the line.
///
/// Words are 0..8 and bits 0..512 of the whole line (PIR words 0..4, control word 4,
/// ON = bit 256, SN = bit 257; see [`crate::desc`]). Bit operations both return the old
/// bit: x86 `LOCK BTS/BTR` set CF to it either way; the `Test*` forms exist so traces
/// can tell Linux's `test_and_*_bit` from `set_bit`/`clear_bit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LineOp {
    /// Plain 64-bit load of `word`; returns it.
    Load { word: usize },
    /// Plain (unlocked) 64-bit store. Needs ownership like any write but adds no
    /// locked-operation cost. Meant for set-up, e.g. writing NV/NDST into the control
    /// word before the descriptor is published to the IOMMU; returns nothing.
    Store { word: usize, value: u64 },
    /// Locked exchange (`XCHG`): writes `value`, returns the old word.
    Xchg { word: usize, value: u64 },
    /// `LOCK BTS` (Linux `set_bit`); returns the old bit.
    LockedBitSet { bit: u32 },
    /// `LOCK BTR` (Linux `clear_bit`); returns the old bit.
    LockedBitClear { bit: u32 },
    /// `LOCK BTS` (Linux `test_and_set_bit`); returns the old bit.
    LockedTestAndSet { bit: u32 },
    /// `LOCK BTR` (Linux `test_and_clear_bit`); returns the old bit.
    LockedTestAndClear { bit: u32 },
    /// The IOMMU's atomic 64-byte update
    /// ([`PiDesc::post`](crate::desc::PiDesc::post)). Only an IOMMU agent may issue
    /// it, and an IOMMU issues nothing else.
    IommuPost { vector: Vector, urg: bool },
}

/// Coarse class of a [`LineOp`], which is all the cost table needs besides the
/// [`AccessKind`](crate::mesi::AccessKind).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OpClass {
    Load,
    Store,
    LockedRmw,
    IommuPost,
}

impl LineOp {
    pub fn class(&self) -> OpClass {
        match self {
            LineOp::Load { .. } => OpClass::Load,
            LineOp::Store { .. } => OpClass::Store,
            LineOp::Xchg { .. }
            | LineOp::LockedBitSet { .. }
            | LineOp::LockedBitClear { .. }
            | LineOp::LockedTestAndSet { .. }
            | LineOp::LockedTestAndClear { .. } => OpClass::LockedRmw,
            LineOp::IommuPost { .. } => OpClass::IommuPost,
        }
    }

    /// Whether the access needs the line in M (every write).
    pub fn needs_ownership(&self) -> bool {
        self.class() != OpClass::Load
    }

    /// Whether [`LineOp::validate`] would accept `op` from `agent`, without building
    /// its error: the check every access makes, so it stays a few compares.
    #[inline]
    pub fn is_allowed(&self, agent: Agent) -> bool {
        let (in_range, is_post, dma_ok) = match *self {
            LineOp::Load { word } | LineOp::Store { word, .. } => (word < PID_WORDS, false, true),
            LineOp::Xchg { word, .. } => (word < PID_WORDS, false, false),
            LineOp::LockedBitSet { bit }
            | LineOp::LockedBitClear { bit }
            | LineOp::LockedTestAndSet { bit }
            | LineOp::LockedTestAndClear { bit } => (bit < PID_BITS, false, false),
            LineOp::IommuPost { .. } => (true, true, false),
        };
        // A DMA master reads and writes whole words; it has no locked operations.
        in_range && is_post == agent.is_iommu() && (dma_ok || !agent.is_dma())
    }

    /// Checks word and bit ranges and that only the IOMMU posts (and only posts).
    pub fn validate(&self, agent: Agent) -> Result<(), PidError> {
        if self.is_allowed(agent) {
            return Ok(());
        }
        // `is_allowed` holds the rules; this only names the one broken, a range first.
        match *self {
            LineOp::Load { word } | LineOp::Store { word, .. } | LineOp::Xchg { word, .. }
                if word >= PID_WORDS =>
            {
                Err(PidError::WordOutOfRange { word })
            }
            LineOp::LockedBitSet { bit }
            | LineOp::LockedBitClear { bit }
            | LineOp::LockedTestAndSet { bit }
            | LineOp::LockedTestAndClear { bit }
                if bit >= PID_BITS =>
            {
                Err(PidError::BitOutOfRange { bit })
            }
            _ => Err(PidError::OpNotAllowed {
                agent: agent.to_string(),
                op: format!("{self:?}"),
            }),
        }
    }
}

//! The hardware operations a kernel interrupt path performs, as seen by the algorithm.
//!
//! [`CpuPort`] is the one interface every Linux algorithm in `kernel/` is written
//! against. Each method is one operation; each access to the posted-interrupt
//! descriptor is its own operation, so whoever drives the algorithm (timed engine,
//! explorer, proptest schedule, real atomics) may let hardware act between any two.

use crate::engine::{Call, Port};
use sim_core::Vector;

/// Index of the 64-bit PIR word (0..4) holding vectors 64i..64i+63.
pub type PirWord = usize;

/// One operation requested by a kernel algorithm running on a CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum CpuOp {
    /// Plain 64-bit load of PIR word `word` of this CPU's descriptor.
    LoadPir {
        /// Which of the four PIR words.
        word: PirWord,
    },
    /// Locked exchange of PIR word `word` with `value`; yields the old contents.
    XchgPir {
        /// Which of the four PIR words.
        word: PirWord,
        /// The value written (0 to harvest the word).
        value: u64,
    },
    /// Locked clear of the descriptor's ON bit (`pi_clear_on`).
    ClearOn,
    /// Locked test-and-clear of ON (`pi_test_and_clear_on`, KVM's order); yields the
    /// old bit as 0 or 1.
    TestAndClearOn,
    /// Runs the device handler registered for `vector` (Linux `call_irq_handler`).
    HandleVector(Vector),
    /// One write to the x2APIC EOI register.
    Eoi,
    /// Plain (unlocked) 64-bit store of `value` to PIR word `word`: `WRITE_ONCE`. On
    /// x86 it enters the CPU's store buffer and other agents see it only once it
    /// drains.
    StorePir {
        /// Which of the four PIR words.
        word: PirWord,
        /// The value stored.
        value: u64,
    },
    /// Clearing ON with a plain store instead of a locked `btr`: the ON bit is
    /// written and nothing else (the model does not take up that a real byte store
    /// would also write SN, which shares ON's byte). Buffered like any plain store.
    StoreClearOn,
    /// `mfence`: waits until the store buffer has drained.
    Mfence,
}

impl CpuOp {
    /// The operation's name without its operands, as the engine's diagnostics print it.
    pub fn name(self) -> &'static str {
        match self {
            CpuOp::LoadPir { .. } => "LoadPir",
            CpuOp::XchgPir { .. } => "XchgPir",
            CpuOp::ClearOn => "ClearOn",
            CpuOp::TestAndClearOn => "TestAndClearOn",
            CpuOp::HandleVector(_) => "HandleVector",
            CpuOp::Eoi => "Eoi",
            CpuOp::StorePir { .. } => "StorePir",
            CpuOp::StoreClearOn => "StoreClearOn",
            CpuOp::Mfence => "Mfence",
        }
    }

    /// Whether x86-TSO makes this operation wait until the CPU's store buffer has
    /// drained (SDM Vol. 3A, "Memory Ordering in P6 and More Recent Processor
    /// Families": loads may pass earlier stores to other locations, locked
    /// instructions and `mfence` may not).
    ///
    /// `HandleVector` counts as draining: Linux's flow handler (`handle_edge_irq`)
    /// takes the descriptor's raw spinlock, a locked compare-and-exchange, before the
    /// device handler runs. `Eoi` does not: a WRMSR to the x2APIC EOI register is not
    /// serializing (SDM Vol. 3A, "MSR Access in x2APIC Mode": WRMSR to the APIC
    /// registers has relaxed serializing semantics).
    pub fn drains_store_buffer(self) -> bool {
        match self {
            CpuOp::XchgPir { .. }
            | CpuOp::ClearOn
            | CpuOp::TestAndClearOn
            | CpuOp::HandleVector(_)
            | CpuOp::Mfence => true,
            CpuOp::LoadPir { .. } | CpuOp::Eoi | CpuOp::StorePir { .. } | CpuOp::StoreClearOn => {
                false
            }
        }
    }
}

/// The algorithm's handle on the CPU it runs on.
#[derive(Clone)]
pub struct CpuPort {
    port: Port<CpuOp, u64>,
}

impl CpuPort {
    pub(crate) fn new(port: Port<CpuOp, u64>) -> Self {
        CpuPort { port }
    }

    fn op(&self, op: CpuOp) -> Call<CpuOp, u64> {
        self.port.call(op)
    }

    /// `READ_ONCE(pir[word])`.
    pub async fn load_pir(&self, word: PirWord) -> u64 {
        self.op(CpuOp::LoadPir { word }).await
    }

    /// `arch_xchg(&pir[word], value)`.
    pub async fn xchg_pir(&self, word: PirWord, value: u64) -> u64 {
        self.op(CpuOp::XchgPir { word, value }).await
    }

    /// `pi_clear_on(pid)`.
    pub async fn clear_on(&self) {
        self.op(CpuOp::ClearOn).await;
    }

    /// `pi_test_and_clear_on(pid)`: whether ON was set.
    pub async fn test_and_clear_on(&self) -> bool {
        self.op(CpuOp::TestAndClearOn).await != 0
    }

    /// `call_irq_handler(vector, regs)`.
    pub async fn handle_vector(&self, vector: Vector) {
        self.op(CpuOp::HandleVector(vector)).await;
    }

    /// `apic_eoi()`.
    pub async fn eoi(&self) {
        self.op(CpuOp::Eoi).await;
    }

    /// `WRITE_ONCE(pir[word], value)`: a plain store, which x86 may hold in the store
    /// buffer past later loads.
    pub async fn store_pir(&self, word: PirWord, value: u64) {
        self.op(CpuOp::StorePir { word, value }).await;
    }

    /// ON cleared with a plain store, not `pi_clear_on`'s locked `btr`.
    pub async fn store_clear_on(&self) {
        self.op(CpuOp::StoreClearOn).await;
    }

    /// `mb()` on x86: `mfence`.
    pub async fn mfence(&self) {
        self.op(CpuOp::Mfence).await;
    }
}

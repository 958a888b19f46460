//! A logical CPU as the engine sees it: its local APIC, its posted-interrupt
//! descriptor line, what it is doing, and where its time went.

use apic_sim::LocalApic;
use pid_model::{Agent, PidLine};
use serde::Serialize;
use sim_core::{Duration, Vector};

use crate::engine::Coroutine;
use crate::kernel::CpuOp;

/// What a CPU is doing. Linux runs hardirq handlers with interrupts off, so a CPU takes
/// a new interrupt only from `Idle`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuState {
    Idle,
    /// IDT vectoring and `irq_enter` for this vector are in progress.
    Entering(Vector),
    /// The kernel algorithm for this vector is running (an operation is in flight).
    Running(Vector),
    /// `irq_exit` and IRET are in progress.
    Exiting,
}

/// Where a CPU's busy time went, by category.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CpuTime {
    pub irq_entry: Duration,
    pub irq_exit: Duration,
    /// Device handler bodies plus the generic IRQ flow around each.
    pub handlers: Duration,
    /// Loads and locked operations on the posted-interrupt descriptor.
    pub pid_access: Duration,
    pub eoi: Duration,
}

impl CpuTime {
    pub fn busy(&self) -> Duration {
        self.irq_entry + self.irq_exit + self.handlers + self.pid_access + self.eoi
    }
}

/// Operations a CPU's kernel algorithms performed on its descriptor and APIC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CpuOpCounts {
    pub pir_loads: u64,
    pub pir_xchgs: u64,
    pub on_clears: u64,
    pub eois: u64,
}

impl CpuOpCounts {
    pub fn count(&mut self, op: CpuOp) {
        match op {
            CpuOp::LoadPir { .. } => self.pir_loads += 1,
            CpuOp::XchgPir { .. } => self.pir_xchgs += 1,
            CpuOp::ClearOn | CpuOp::TestAndClearOn => self.on_clears += 1,
            CpuOp::Eoi => self.eois += 1,
            CpuOp::HandleVector(_) => {}
        }
    }
}

const NO_DEVICE: u32 = u32::MAX;

pub struct Cpu {
    pub apic: LocalApic,
    pub pid: PidLine,
    pub agent: Agent,
    pub state: CpuState,
    pub coroutine: Option<Coroutine<CpuOp, u64>>,
    /// The operation whose completion the CPU is waiting for.
    pub op_in_flight: Option<CpuOp>,
    pub time: CpuTime,
    pub interrupts_taken: u64,
    pub handler_calls: u64,
    pub ops: CpuOpCounts,
    /// Which device's handler is registered on each vector of this CPU.
    device_of_vector: [u32; 256],
}

impl Cpu {
    pub fn new(apic: LocalApic, pid: PidLine, agent: Agent) -> Self {
        Cpu {
            apic,
            pid,
            agent,
            state: CpuState::Idle,
            coroutine: None,
            op_in_flight: None,
            time: CpuTime::default(),
            interrupts_taken: 0,
            handler_calls: 0,
            ops: CpuOpCounts::default(),
            device_of_vector: [NO_DEVICE; 256],
        }
    }

    pub fn register_handler(&mut self, vector: Vector, device: u32) {
        self.device_of_vector[vector.0 as usize] = device;
    }

    pub fn device_of(&self, vector: Vector) -> Option<u32> {
        let d = self.device_of_vector[vector.0 as usize];
        (d != NO_DEVICE).then_some(d)
    }
}

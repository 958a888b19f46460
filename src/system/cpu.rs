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
    /// Running a piece of deferred work (a job's submission, a NAPI poll) with
    /// interrupts enabled; interrupts are taken when it ends.
    Deferred(Deferred),
}

/// Work a CPU does outside hardirq context, one indivisible piece at a time: softirq
/// NAPI polls and application (fio job) submissions. Interrupts are taken between
/// pieces, which approximates preemption at the granularity of one piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deferred {
    /// The fio-like job `job` submits one I/O.
    NvmeSubmit { job: u32 },
    /// A NAPI poll of NIC `nic` queue `queue`.
    NapiPoll { nic: u16, queue: u16 },
}

/// Which handler is registered on a vector of a CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HandlerRef {
    #[default]
    None,
    /// A DSA work queue (scenario `devices[i]`).
    Dsa(u32),
    /// An NVMe drive's I/O queue (`nvme_irq`).
    NvmeQueue { drive: u16, queue: u16 },
    /// A VMD domain's vector (`vmd_irq`): runs every child handler on it.
    Vmd { domain: u16, vector: u16 },
    /// A NIC queue's interrupt (schedules NAPI).
    NicQueue { nic: u16, queue: u16 },
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
    /// NAPI polls (softirq).
    pub softirq: Duration,
    /// Application work: the jobs' I/O submissions.
    pub app: Duration,
}

impl CpuTime {
    pub fn busy(&self) -> Duration {
        self.irq_entry
            + self.irq_exit
            + self.handlers
            + self.pid_access
            + self.eoi
            + self.softirq
            + self.app
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
    /// Which handler is registered on each vector of this CPU.
    handler_of_vector: [HandlerRef; 256],
    /// Deferred work waiting for the CPU, oldest first.
    pub deferred: std::collections::VecDeque<Deferred>,
    /// When the activity in progress (if any) ends.
    pub activity_end: sim_core::SimTime,
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
            handler_of_vector: [HandlerRef::None; 256],
            deferred: std::collections::VecDeque::new(),
            activity_end: sim_core::SimTime::ZERO,
        }
    }

    pub fn register_handler(&mut self, vector: Vector, handler: HandlerRef) {
        self.handler_of_vector[vector.0 as usize] = handler;
    }

    pub fn handler_of(&self, vector: Vector) -> HandlerRef {
        self.handler_of_vector[vector.0 as usize]
    }

    /// The lowest device vector (0x21 and up, below `limit`) with no handler.
    pub fn free_vector(&self, limit: u8) -> Option<Vector> {
        (0x21..limit)
            .map(Vector)
            .find(|v| self.handler_of(*v) == HandlerRef::None)
    }
}

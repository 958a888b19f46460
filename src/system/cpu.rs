//! A logical CPU as the engine sees it: its local APIC, its posted-interrupt
//! descriptor line, what it is doing, and where its time went.

use apic_sim::LocalApic;
use pid_model::{Agent, PidLine};
use serde::Serialize;
use sim_core::{Duration, SimTime, Vector};

use crate::engine::{Coroutine, Step};
use crate::kernel::ioapic_driver::IoapicOp;
use crate::kernel::ipi::IpiOp;
use crate::kernel::smmu::SmmuCpuOp;
use crate::kernel::CpuOp;

/// What a CPU is doing. Linux runs hardirq handlers with interrupts off, so a CPU takes
/// a new interrupt only from `Idle`, or from `Spinning` (a task waiting with interrupts
/// enabled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuState {
    /// Nothing to do: the only state in which it takes an interrupt or starts deferred work.
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
    /// The CPU's task (thread context, interrupts enabled) has one operation in
    /// flight; interrupts are taken when it completes, before the next one.
    Task,
    /// The task spins in `csd_lock_wait` with interrupts enabled: an interrupt is
    /// taken at once, and the wait resumes after it.
    Spinning,
    /// The running task waits without using the CPU's time: asleep in WFE (on its
    /// exclusive monitor or for an event), or its thread blocked on a socket or a
    /// full TX ring. An interrupt ends a WFE; it is taken only if the task has
    /// interrupts enabled.
    Waiting,
}

/// A kernel algorithm in progress on a CPU, by the interface it is written against.
pub enum Algorithm {
    /// An interrupt path written against [`crate::kernel::CpuPort`] (PIR demux, edge
    /// MSI, fasteoi).
    Irq(Coroutine<CpuOp, u64>),
    /// A cross-call algorithm written against [`crate::kernel::ipi::IpiPort`]
    /// (`smp_call_function_many`, the call-function interrupt).
    CrossCall(Coroutine<IpiOp, u64>),
    /// The hardirq of an IOAPIC pin's driver, written against
    /// [`crate::kernel::ioapic_driver::IoapicPort`].
    Ioapic(Coroutine<IoapicOp, u32>),
}

/// The next operation an [`Algorithm`] asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelOp {
    /// An operation of an interrupt path.
    Cpu(CpuOp),
    /// An operation of a cross call.
    Ipi(IpiOp),
    /// An IOAPIC access or a step of a pin's flow.
    Ioapic(IoapicOp),
}

impl Algorithm {
    /// Resumes the algorithm with the result of its last operation.
    // Inlined, as `Coroutine::resume` is, so the step reaches the driver in registers.
    #[inline(always)]
    pub fn resume(&mut self, result: Option<u64>) -> Step<KernelOp> {
        match self {
            Algorithm::Irq(co) => co.resume(result).map(KernelOp::Cpu),
            Algorithm::CrossCall(co) => co.resume(result).map(KernelOp::Ipi),
            Algorithm::Ioapic(co) => co.resume(result.map(|v| v as u32)).map(KernelOp::Ioapic),
        }
    }
}

/// An operation in flight: a CPU operation gets its result when it completes; a
/// cross-call operation's result is known when it is issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpInFlight {
    /// An interrupt path's operation, applied when it completes.
    Cpu(CpuOp),
    /// A cross-call operation and the value it yields.
    Ipi(IpiOp, u64),
    /// An IOAPIC access or flow step, applied when it completes.
    Ioapic(IoapicOp),
}

/// The coroutine of a CPU task, by the interface its algorithm is written against.
pub enum TaskCo {
    /// A cross call (`smp_call_function_many`) or an algorithm of `System::run_on`.
    CrossCall(Coroutine<IpiOp, u64>),
    /// An Arm host algorithm around the SMMU: command-queue insertion, a strict-mode
    /// unmap, a NIC's transmit path or its TX-completion poll.
    Smmu(Coroutine<SmmuCpuOp, u64>),
    /// An IOAPIC driver flow in thread context (a UIO reader, a mask or unmask of
    /// `System::run_ioapic`).
    Ioapic(Coroutine<IoapicOp, u32>),
}

/// The next operation a task asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskOp {
    /// A cross-call operation.
    Ipi(IpiOp),
    /// An SMMU host or NIC-driver operation.
    Smmu(SmmuCpuOp),
    /// An IOAPIC access or a step of a pin's flow.
    Ioapic(IoapicOp),
}

impl TaskCo {
    /// Resumes the algorithm with the result of its last operation.
    pub fn resume(&mut self, result: Option<u64>) -> Step<TaskOp> {
        match self {
            TaskCo::CrossCall(co) => co.resume(result).map(TaskOp::Ipi),
            TaskCo::Smmu(co) => co.resume(result).map(TaskOp::Smmu),
            TaskCo::Ioapic(co) => co.resume(result.map(|v| v as u32)).map(TaskOp::Ioapic),
        }
    }
}

/// Whose work a task is (where its outcome is counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    /// One call of a scenario shootdown load (index in `shootdowns`).
    Shootdown(u16),
    /// An algorithm started with `System::run_on`.
    User,
    /// One call of a scenario SMMU load (index in `smmu_loads`) on its CPU `cpu_index`.
    SmmuLoad {
        /// Index of the load.
        load: u16,
        /// Index of the CPU in the load's `cpus`.
        cpu_index: u16,
    },
    /// A sending thread of a transmit load.
    TxThread {
        /// Index of the load in `transmit`.
        load: u16,
        /// Thread number within the load.
        thread: u16,
    },
    /// The user thread of an IOAPIC pin's flow (index in `ioapic_pins`).
    IoapicThread(u16),
    /// The TX-completion NAPI poll of a NIC queue (softirq context).
    TxClean {
        /// Index of the NIC in `nics`.
        nic: u16,
        /// Queue number within the NIC.
        queue: u16,
    },
}

/// Work of a CPU outside hardirq context, run with interrupts enabled unless it
/// masks them: thread context (a shootdown, an SMMU load's call, a sending thread,
/// an algorithm of `System::run_on`) or softirq context (a TX-completion poll, which
/// runs before the thread resumes).
pub struct Task {
    /// The algorithm.
    pub co: TaskCo,
    /// Whose work it is.
    pub kind: TaskKind,
    /// When it started.
    pub started: SimTime,
    /// The operation in flight and, for a cross-call operation, its result.
    pub in_flight: Option<(TaskOp, u64)>,
    /// The result to resume the algorithm with.
    pub resume_with: Option<u64>,
    /// An operation to issue again instead of resuming: a wait an interrupt broke off.
    pub reissue: Option<TaskOp>,
    /// Spinning on the CSD queued for this target, since this time.
    pub spin: Option<(u32, SimTime)>,
    /// Waiting (WFE, a monitored line, the socket's send buffer, a full TX ring, a
    /// UIO read, preemptible user work) in this operation since this time.
    pub wait: Option<(TaskOp, SimTime)>,
    /// `local_irq_save` depth: while above zero the CPU takes no interrupt.
    pub irq_off: u32,
    /// When its first command-queue operation was issued (SMMU loads' latency).
    pub issue_start: Option<SimTime>,
}

impl Task {
    /// A task of `kind` running `co`, started at `now`, on the heap: a CPU keeps
    /// only a pointer to it, so a CPU without one (most CPUs of a large machine)
    /// pays no cache lines for it when an interrupt checks whether it may be taken.
    pub fn new(co: TaskCo, kind: TaskKind, now: SimTime) -> Box<Task> {
        Box::new(Task {
            co,
            kind,
            started: now,
            in_flight: None,
            resume_with: None,
            reissue: None,
            spin: None,
            wait: None,
            irq_off: 0,
            issue_start: None,
        })
    }

    /// The shootdown load whose call this is, if it is one.
    pub fn shootdown_load(&self) -> Option<u16> {
        match self.kind {
            TaskKind::Shootdown(l) => Some(l),
            _ => None,
        }
    }
}

/// Work a CPU does outside hardirq context, one indivisible piece at a time: softirq
/// NAPI polls and application (fio job) submissions. Interrupts are taken between
/// pieces, which approximates preemption at the granularity of one piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deferred {
    /// The fio-like job `job` submits one I/O.
    NvmeSubmit {
        /// Index of the job in the scenario's `jobs`.
        job: u32,
    },
    /// A submitter job writes one replacement descriptor to DSA device `device`.
    DsaSubmit {
        /// Index of the device in the scenario's `devices`.
        device: u32,
    },
    /// The vector cleanup of migration `index` (scenario `migrations`), on the old CPU.
    VectorCleanup {
        /// Index of the migration in the scenario's `migrations`.
        index: u32,
    },
    /// A NAPI poll of NIC `nic` queue `queue`.
    NapiPoll {
        /// Index of the NIC in the scenario's `nics`.
        nic: u16,
        /// Queue number within the NIC.
        queue: u16,
    },
}

/// Which handler is registered on a vector of a CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HandlerRef {
    #[default]
    /// No handler: a call on this vector is spurious.
    None,
    /// A DSA work queue (scenario `devices[i]`).
    Dsa(u32),
    /// An NVMe drive's I/O queue (`nvme_irq`).
    NvmeQueue {
        /// Index of the drive in the scenario's `nvme`.
        drive: u16,
        /// I/O queue number within the drive (0 is the first I/O queue).
        queue: u16,
    },
    /// A VMD domain's vector (`vmd_irq`): runs every child handler on it.
    Vmd {
        /// Index of the domain in the scenario's `vmd`.
        domain: u16,
        /// Index of the VMD's own MSI-X vector (not an x86 vector number).
        vector: u16,
    },
    /// An IOAPIC pin's interrupt (index in the scenario's `ioapic_pins`).
    IoapicPin(u16),
    /// A NIC queue's interrupt (schedules NAPI).
    NicQueue {
        /// Index of the NIC in the scenario's `nics`.
        nic: u16,
        /// Queue number within the NIC.
        queue: u16,
    },
}

/// Where a CPU's busy time went, by category.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CpuTime {
    /// IDT vectoring and `irq_enter`, once per interrupt taken.
    pub irq_entry: Duration,
    /// `irq_exit` and IRET, once per interrupt taken.
    pub irq_exit: Duration,
    /// Device handler bodies plus the generic IRQ flow around each.
    pub handlers: Duration,
    /// Loads and locked operations on the posted-interrupt descriptor.
    pub pid_access: Duration,
    /// EOI writes to the x2APIC.
    pub eoi: Duration,
    /// NAPI polls (softirq).
    pub softirq: Duration,
    /// Application work: the jobs' I/O submissions.
    pub app: Duration,
    /// Cross calls: a shootdown's sender (CSD set-up, fence, ICR writes, spinning for
    /// acknowledgements) and the call-function handler's operations on a target.
    pub cross_call: Duration,
    /// SMMU command-queue work: insertion, CMD_SYNC waits spent polling (not asleep
    /// in WFE), PTE clears.
    pub smmu: Duration,
    /// A NIC's transmit path outside the SMMU: the send path, mapping, descriptor
    /// posts, completion clean-up.
    pub tx: Duration,
}

impl CpuTime {
    /// Total time charged, all categories together.
    pub fn busy(&self) -> Duration {
        self.irq_entry
            + self.irq_exit
            + self.handlers
            + self.pid_access
            + self.eoi
            + self.softirq
            + self.app
            + self.cross_call
            + self.smmu
            + self.tx
    }
}

/// Operations a CPU's kernel algorithms performed on its descriptor and APIC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CpuOpCounts {
    /// Plain loads of PIR words.
    pub pir_loads: u64,
    /// Locked exchanges of PIR words.
    pub pir_xchgs: u64,
    /// Clears and test-and-clears of ON, locked or plain.
    pub on_clears: u64,
    /// EOI writes.
    pub eois: u64,
    /// Plain stores to PIR words.
    pub pir_stores: u64,
    /// `mfence`s.
    pub fences: u64,
}

impl CpuOpCounts {
    /// Counts `op` in its category (`HandleVector` counts nowhere).
    pub fn count(&mut self, op: CpuOp) {
        match op {
            CpuOp::LoadPir { .. } => self.pir_loads += 1,
            CpuOp::XchgPir { .. } => self.pir_xchgs += 1,
            CpuOp::ClearOn | CpuOp::TestAndClearOn | CpuOp::StoreClearOn => self.on_clears += 1,
            CpuOp::Eoi => self.eois += 1,
            CpuOp::StorePir { .. } => self.pir_stores += 1,
            CpuOp::Mfence => self.fences += 1,
            CpuOp::HandleVector(_) => {}
        }
    }
}

/// One simulated CPU: its interrupt hardware, its state and its counters.
///
/// `repr(C)` keeps the declaration order: what almost every event reads (the state,
/// the algorithm and its operation in flight, whether a task masks interrupts, the
/// APIC, whether there is a GIC instead) comes first and shares a few cache lines;
/// counters and what is rarely read come last, and the tasks, the vector-to-handler
/// table (read once per handler call) and the GIC redistributor (Arm only) sit
/// behind pointers. A large machine has a thousand of these, so most events find
/// their CPU out of cache, and each further line an event touches is one more miss.
/// Aligned to a line, so the same fields share a line on every CPU (744 bytes round
/// up to 768): unaligned, a thousand CPUs start at a thousand different offsets and
/// the hot fields straddle one more line on many of them.
#[repr(C, align(64))]
pub struct Cpu {
    /// What the CPU is doing now.
    pub state: CpuState,
    /// When the activity in progress (if any) ends.
    pub activity_end: sim_core::SimTime,
    /// The operation of `coroutine` whose completion the CPU is waiting for.
    pub op_in_flight: Option<OpInFlight>,
    /// The interrupt-context algorithm in progress, from interrupt entry until it
    /// returns.
    pub coroutine: Option<Algorithm>,
    /// Linux's per-CPU `posted_msi_handler_active`: set while the posted-MSI
    /// notification handler runs (read by the posted chip's ack, see
    /// `kernel::retrigger`).
    pub posted_handler_active: bool,
    /// This CPU's identity among the agents sharing descriptor lines.
    pub agent: Agent,
    /// The GICv3 redistributor, on Arm systems (then `apic` is unused). Among the
    /// hot fields: every interrupt check asks first whether there is one.
    pub gic: Option<Box<apic_sim::gic::Redistributor>>,
    /// Thread-context work in progress, suspended while the CPU is in an interrupt
    /// or runs `softirq`.
    pub task: Option<Box<Task>>,
    /// Softirq-context work in progress (a TX-completion poll); it runs before `task`.
    pub softirq: Option<Box<Task>>,
    /// Deferred work waiting for the CPU, oldest first.
    pub deferred: std::collections::VecDeque<Deferred>,
    /// This CPU's local x2APIC.
    pub apic: LocalApic,
    /// This CPU's posted-interrupt descriptor and the MESI state of its line.
    pub pid: PidLine,
    /// Busy time by category.
    pub time: CpuTime,
    /// Interrupts acknowledged from the local APIC.
    pub interrupts_taken: u64,
    /// Device handler calls (`handle_vector`), spurious ones included.
    pub handler_calls: u64,
    /// Descriptor and APIC operations performed by its algorithms.
    pub ops: CpuOpCounts,
    /// Cross-called functions this CPU ran.
    pub funcs_run: u64,
    /// LPIs acknowledged and not yet EOI'd, innermost last.
    pub gic_active: Vec<u32>,
    /// Which handler is registered on each vector of this CPU (2 KiB).
    handler_of_vector: Box<[HandlerRef; 256]>,
}

impl Cpu {
    /// An idle CPU with no handlers registered and zeroed counters.
    pub fn new(apic: LocalApic, pid: PidLine, agent: Agent) -> Self {
        Cpu {
            apic,
            pid,
            agent,
            state: CpuState::Idle,
            coroutine: None,
            op_in_flight: None,
            task: None,
            softirq: None,
            time: CpuTime::default(),
            interrupts_taken: 0,
            handler_calls: 0,
            ops: CpuOpCounts::default(),
            funcs_run: 0,
            handler_of_vector: Box::new([HandlerRef::None; 256]),
            deferred: std::collections::VecDeque::new(),
            activity_end: sim_core::SimTime::ZERO,
            gic: None,
            gic_active: Vec::new(),
            posted_handler_active: false,
        }
    }

    /// Registers `handler` on a free `vector`, or frees it (`HandlerRef::None`).
    pub fn register_handler(&mut self, vector: Vector, handler: HandlerRef) {
        // One handler per vector, as Linux's vector allocator guarantees: callers take
        // a free vector, and validation refuses two devices on one.
        debug_assert!(
            handler == HandlerRef::None || self.handler_of(vector) == HandlerRef::None,
            "vector {vector} already has a handler ({:?})",
            self.handler_of(vector)
        );
        self.handler_of_vector[vector.0 as usize] = handler;
    }

    /// The handler registered on `vector` ([`HandlerRef::None`] if none).
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

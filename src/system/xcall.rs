//! Cross calls inside [`System`]: TLB-shootdown loads, the IPI and CSD operations of
//! the algorithms in [`crate::kernel::ipi`], and the cache lines those share.
//!
//! A shootdown load makes requests at its initiators by an arrival process. An
//! initiator runs `smp_call_function_many(wait = true)` as its CPU's *task*: thread
//! context with interrupts enabled, so the CPU takes interrupts between the task's
//! operations and while it spins in `csd_lock_wait`, and the wait resumes after the
//! handler. A target takes the call-function IPI like any interrupt (it is the
//! highest-priority vector class, so it goes first once the CPU is free) and runs
//! `call_function_interrupt` in hardirq context.
//!
//! | operation | CPU time | effect |
//! |---|---|---|
//! | `WrmsrFence` | `ipi.fence_cycles` | none |
//! | `WriteIcr` | `apic.wrmsr_icr_cycles` | `LocalApic::wrmsr`; each target's APIC gets the IPI `apic.ipi_latency_ns` (+ `interconnect.ipi_cross_socket_extra_ns` across sockets) after the write |
//! | `QueueCsd(t)` | `ipi.csd_setup_cycles` + store to the CSD line + locked exchange on t's queue-head line | CSD locked and on t's queue at issue |
//! | `WaitCsd(t)` | an unlocked CSD: a load of its line / `ipi.ack_poll_overlap`; a locked one: spin (interruptible) until the unlock, then the load that sees it | none |
//! | `Eoi` | `apic.wrmsr_eoi_cycles` | EOI at issue |
//! | `TakeQueue` | locked exchange on the own queue-head line | queue emptied at issue |
//! | `RunCsdFunc(i)` | load of the CSD line + `ipi.func_cycles` | none |
//! | `UnlockCsd(i)` | store to the CSD line | unlocked when it completes |
//!
//! Every line access goes through the one line model ([`pid_model::Line`], priced by
//! `costs.pid_line`, with occupancy: a requester waits while the line is in flight to
//! another). A line is named `csd/S/T` (the CSD sender S keeps for target T, in T's
//! per-CPU area) or `call_single_queue/T`. Accesses are performed when issued (a
//! cross call's lines are private to its sender and target between those points).
//! Not modelled: SMT siblings sharing a private cache (a sibling is another agent of
//! the same socket), the idle-polling shortcut that skips the IPI, lazy-TLB filtering.

use std::collections::BTreeMap;
use std::rc::Rc;

use apic_sim::msr::{MSR_EOI, MSR_ICR};
use apic_sim::{AcceptOutcome, ApicEffect, ApicTopology, DeliveryOutcome, IpiMessage};
use devices::ArrivalProcess;
use hdrhistogram::Histogram;
use pid_model::{Agent, DataLine, LineOp, Words};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sim_core::{ApicId, CpuId, Duration, SimTime, Vector};

use super::cpu::{Algorithm, CpuState, OpInFlight, Task, TaskCo, TaskKind, TaskOp};
use super::scenario::{Arch, Scenario, ScenarioError, MIN_RATE_PER_S};
use super::{CpuActivity, Event, System, LATENCY_MAX_NS};
use crate::engine::{Coroutine, Priority, RngStreams};
use crate::kernel::ipi::{
    call_function_interrupt, smp_call_function_many, ApicMaps, CpuMask, IpiMode, IpiOp, IpiPort,
    ShootdownKernel, CALL_FUNCTION_SINGLE_VECTOR, CALL_FUNCTION_VECTOR,
};
use crate::kernel::tlb_2011::{flush_tlb_others_ipi, slot_of_vector};
use crate::report::LatencySummary;
use crate::topology::Distance;

/// A TLB-shootdown load (scenario `[[shootdowns]]`): every initiator CPU requests
/// `native_flush_tlb_multi` to the targets at `arrival`'s rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShootdownConfig {
    /// Name in reports; empty means `shootdownI`.
    #[serde(default)]
    pub name: String,
    /// The initiating CPUs; each runs its own request stream.
    pub from: Vec<u32>,
    /// Target CPUs. Give this or `target_socket`. An initiator never targets itself.
    #[serde(default)]
    pub targets: Vec<u32>,
    /// Every CPU of this socket is a target.
    #[serde(default)]
    pub target_socket: Option<u32>,
    /// Requests per initiator: `fixed` or `poisson`, as for a device's arrival.
    pub arrival: ArrivalProcess,
    /// `"cluster"` (default), `"physical"` or `"cluster-per-cpu"` (the cluster-mode
    /// send before Linux 2.6.39): Linux's x2APIC IPI driver.
    #[serde(default)]
    pub ipi_mode: IpiMode,
    /// `"smp-call-function-many"` (default, today's) or `"flush-tlb-others-2011"`
    /// (Linux 2.6.38's shared-mask shootdown).
    #[serde(default)]
    pub kernel: ShootdownKernel,
    /// Calls per initiator before its stream stops; unset means no limit.
    #[serde(default)]
    pub calls: Option<u64>,
}

impl ShootdownConfig {
    /// The target CPUs, ascending, before an initiator leaves itself out.
    pub fn target_cpus(&self, sc: &Scenario) -> Vec<u32> {
        match self.target_socket {
            Some(s) => (0..sc.cpus.count)
                .filter(|&c| sc.socket_of(c) as u32 == s)
                .collect(),
            None => {
                let mut t = self.targets.clone();
                t.sort_unstable();
                t.dedup();
                t
            }
        }
    }
}

/// Checks `sc.shootdowns`.
pub(super) fn validate(sc: &Scenario) -> Result<(), ScenarioError> {
    let n = sc.cpus.count;
    for (i, l) in sc.shootdowns.iter().enumerate() {
        let f = |name: &str| format!("shootdowns[{i}].{name}");
        if sc.arch == Arch::Arm {
            return Err(ScenarioError::invalid(
                "shootdowns",
                format!("{} loads with arch = \"arm\"", sc.shootdowns.len()),
                "none on Arm: arm64 broadcasts TLB invalidation with TLBI instructions and sends no IPIs",
            ));
        }
        if l.from.is_empty() {
            return Err(ScenarioError::invalid(
                f("from"),
                "[]",
                "at least one initiating CPU",
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (j, &c) in l.from.iter().enumerate() {
            if c >= n {
                return Err(ScenarioError::invalid(
                    format!("shootdowns[{i}].from[{j}]"),
                    c,
                    format!("a CPU 0..{n}"),
                ));
            }
            if !seen.insert(c) {
                return Err(ScenarioError::invalid(
                    format!("shootdowns[{i}].from[{j}]"),
                    c,
                    "each initiator once",
                ));
            }
        }
        match (l.targets.is_empty(), l.target_socket) {
            (true, None) | (false, Some(_)) => {
                return Err(ScenarioError::invalid(
                    f("targets"),
                    format!("{:?} with target_socket = {:?}", l.targets, l.target_socket),
                    "exactly one of `targets` (a list of CPUs) and `target_socket`",
                ))
            }
            (false, None) => {
                if let Some((j, &c)) = l.targets.iter().enumerate().find(|(_, &c)| c >= n) {
                    return Err(ScenarioError::invalid(
                        format!("shootdowns[{i}].targets[{j}]"),
                        c,
                        format!("a CPU 0..{n}"),
                    ));
                }
            }
            (true, Some(s)) => {
                if s >= sc.cpus.sockets {
                    return Err(ScenarioError::invalid(
                        f("target_socket"),
                        s,
                        format!("a socket 0..{}", sc.cpus.sockets),
                    ));
                }
            }
        }
        // Linux leaves the calling CPU out of the mask it interrupts, and so does the
        // model: an initiator whose only target is itself would time calls that send no
        // IPI and report them as shootdowns of zero latency.
        let targets = l.target_cpus(sc);
        if let Some(&lonely) = l.from.iter().find(|&&c| targets.iter().all(|&t| t == c)) {
            let (field, value) = match l.target_socket {
                Some(s) => (f("target_socket"), format!("{s} (CPUs {targets:?})")),
                None => (f("targets"), format!("{:?}", l.targets)),
            };
            return Err(ScenarioError::invalid(
                field,
                value,
                format!(
                    "a CPU besides each initiator: CPU {lonely} initiates, never interrupts itself, and would have no target"
                ),
            ));
        }
        if l.kernel == ShootdownKernel::FlushTlbOthers2011 && n > super::xcall_2011::MAX_MASK_CPUS {
            return Err(ScenarioError::invalid(
                f("kernel"),
                format!("\"flush-tlb-others-2011\" on {n} CPUs"),
                format!(
                    "at most {} CPUs: the 2.6.38 flush_state keeps its cpumask in one cache line",
                    super::xcall_2011::MAX_MASK_CPUS
                ),
            ));
        }
        l.arrival.validate(&f("arrival"))?;
        if l.arrival.mean_rate_per_s() < MIN_RATE_PER_S {
            return Err(ScenarioError::invalid(
                f("arrival"),
                l.arrival.mean_rate_per_s(),
                format!("a mean rate of at least {MIN_RATE_PER_S} requests per second"),
            ));
        }
        if l.calls == Some(0) {
            return Err(ScenarioError::invalid(
                f("calls"),
                0,
                "at least 1, or unset for no limit",
            ));
        }
    }
    if !sc.shootdowns.is_empty() {
        let old_kernel = sc
            .shootdowns
            .iter()
            .any(|l| l.kernel == ShootdownKernel::FlushTlbOthers2011);
        for (i, d) in sc.devices.iter().enumerate() {
            let v = d.vector as u8;
            if v == CALL_FUNCTION_VECTOR.0 || v == CALL_FUNCTION_SINGLE_VECTOR.0 {
                return Err(ScenarioError::invalid(
                    format!("devices[{i}].vector"),
                    format!("{v:#x}"),
                    "a vector other than 0xfb and 0xfc, Linux's call-function vectors, when the scenario has shootdowns",
                ));
            }
            if old_kernel && slot_of_vector(Vector(v)).is_some() {
                return Err(ScenarioError::invalid(
                    format!("devices[{i}].vector"),
                    format!("{v:#x}"),
                    "a vector outside 0xf0-0xf7, Linux 2.6.38's TLB-invalidate vectors, when a shootdown runs flush-tlb-others-2011",
                ));
            }
        }
    }
    Ok(())
}

/// The CSD one sender keeps for one target.
struct Csd {
    locked: bool,
    /// The sender spins on it.
    spinner: bool,
    line: DataLine,
}

/// A CPU's `call_single_queue`.
struct CallQueue {
    line: DataLine,
    /// Senders whose CSD is queued, in order.
    queued: Vec<u32>,
    /// Senders whose CSD the running handler took, by position.
    taken: Vec<u32>,
}

/// One initiator of a load.
struct Initiator {
    cpu: u32,
    rng: ChaCha8Rng,
    /// Requests not yet started.
    queued: u64,
    requested: u64,
    /// Requests the stream may still make (`None`: unlimited).
    left: Option<u64>,
}

/// A shootdown load at run time.
pub(super) struct Load {
    name: String,
    mode: IpiMode,
    kernel: ShootdownKernel,
    arrival: ArrivalProcess,
    /// Targets before each initiator leaves itself out.
    mask: CpuMask,
    initiators: Vec<Initiator>,
    latency: Histogram<u64>,
    started: u64,
    completed: u64,
    icr_writes: u64,
    phases: SenderPhases,
}

/// Where the initiators' time in this load's calls went, summed over every call
/// (interrupts the initiator took meanwhile excluded), ps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SenderPhases {
    /// Completed calls from start to return, interrupts included (exact; the
    /// latency histogram rounds to 3 significant digits).
    pub calls_ps: u64,
    /// Queueing CSDs: set-up, the CSD's lock word, the target's queue head (for
    /// `flush-tlb-others-2011`: locking and filling `flush_state`, and unlocking it).
    pub queue_csd_ps: u64,
    /// The WRMSR fence before ICR writes, and masking interrupts around them.
    pub fence_ps: u64,
    /// ICR WRMSRs, and the driver's reads of a shared mask it walks (2.6.38's
    /// `flush_cpumask`).
    pub icr_ps: u64,
    /// `csd_lock_wait`: polling and spinning until every target's unlock is seen (for
    /// `flush-tlb-others-2011`: polling `flush_cpumask` until it is empty).
    pub wait_ps: u64,
}

impl SenderPhases {
    fn charge(&mut self, op: IpiOp, d: Duration) {
        let slot = match op {
            IpiOp::QueueCsd(_)
            | IpiOp::FlushStateLock(_)
            | IpiOp::FlushStateFill(_)
            | IpiOp::FlushMaskSet(..)
            | IpiOp::FlushStateUnlock(_) => &mut self.queue_csd_ps,
            IpiOp::WrmsrFence | IpiOp::LocalIrqSave | IpiOp::LocalIrqRestore => &mut self.fence_ps,
            // The driver's walk of a shared mask is part of sending.
            IpiOp::WriteIcr(_) | IpiOp::FlushMaskRead(_) => &mut self.icr_ps,
            IpiOp::WaitCsd(_) | IpiOp::LoadsRetired | IpiOp::FlushMaskPoll(_) | IpiOp::CpuRelax => {
                &mut self.wait_ps
            }
            // Target-side operations never run in a sender's task.
            IpiOp::Eoi
            | IpiOp::TakeQueue
            | IpiOp::RunCsdFunc(_)
            | IpiOp::UnlockCsd(_)
            | IpiOp::FlushMaskTest(_)
            | IpiOp::FlushTlbLocal
            | IpiOp::FlushMaskClear(_) => return,
        };
        *slot += d.as_ps();
    }
}

/// IPI counts across the machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct IpiCounts {
    /// ICR writes (every sender).
    pub icr_writes: u64,
    /// IPIs that reached an APIC (one per target CPU per ICR write).
    pub received: u64,
    /// Fixed IPIs that found their IRR bit already set.
    pub merged: u64,
    /// Fixed IPIs an APIC rejected (illegal vector, software-disabled).
    pub rejected: u64,
    /// ICR writes that sent nothing (an APIC's `IpiNotSent`).
    pub not_sent: u64,
    /// WRMSRs that raised #GP.
    pub general_protection: u64,
    /// Call-function handlers run.
    pub handlers_run: u64,
    /// Cross-called functions run.
    pub funcs_run: u64,
}

/// Cross-call state of a system.
pub(super) struct Xcall {
    pub loads: Vec<Load>,
    /// Per CPU: the (load, initiator) pairs it initiates.
    initiated_by: Vec<Vec<(u16, u16)>>,
    maps: Rc<ApicMaps>,
    apic_topo: ApicTopology,
    /// Per CPU: (socket, core) for IPI distances.
    place: Vec<(u32, u32)>,
    csds: BTreeMap<(u32, u32), Csd>,
    queues: Vec<CallQueue>,
    pub ipis: IpiCounts,
    targets_buf: Vec<ApicId>,
    /// Algorithms started with `System::run_on` that returned.
    pub user_tasks_done: u64,
    /// Per CPU: when its APIC can take the next ICR write.
    icr_free: Vec<SimTime>,
    /// Per CPU: completion times of its independent loads in flight (at most
    /// `costs.cpu.fill_buffers`).
    misses: Vec<std::collections::VecDeque<SimTime>>,
    /// The 2.6.38 `flush_state` lines, by slot.
    pub(super) flush_states: BTreeMap<u8, super::xcall_2011::FlushState>,
}

impl Xcall {
    /// The cross-call state of `sc`'s machine.
    pub(super) fn new(sc: &Scenario, streams: &RngStreams) -> Result<Xcall, ScenarioError> {
        let n = sc.cpus.count;
        let ids: Vec<ApicId> = (0..n).map(|c| ApicId(sc.apic_id_of(c))).collect();
        let apic_topo = ApicTopology::new(ids.iter().copied())
            .map_err(|e| ScenarioError::invalid_from("cpus.apic_ids", e))?;
        let place = (0..n).map(|c| sc.place_of(c)).collect();
        let mut initiated_by = vec![Vec::new(); n as usize];
        let mut loads = Vec::with_capacity(sc.shootdowns.len());
        for (i, l) in sc.shootdowns.iter().enumerate() {
            let name = sc.shootdown_name(i);
            let mut initiators = Vec::with_capacity(l.from.len());
            for (j, &cpu) in l.from.iter().enumerate() {
                initiated_by[cpu as usize].push((i as u16, j as u16));
                initiators.push(Initiator {
                    cpu,
                    rng: streams.stream(&super::stream_names::load_cpu(&name, cpu)),
                    queued: 0,
                    requested: 0,
                    left: l.calls,
                });
            }
            loads.push(Load {
                name,
                mode: l.ipi_mode,
                kernel: l.kernel,
                arrival: l.arrival.clone(),
                mask: CpuMask::from_cpus(n, l.target_cpus(sc).into_iter().map(CpuId)),
                initiators,
                latency: Histogram::new_with_bounds(1, LATENCY_MAX_NS, 3)
                    .expect("static histogram bounds are valid"),
                started: 0,
                completed: 0,
                icr_writes: 0,
                phases: SenderPhases::default(),
            });
        }
        Ok(Xcall {
            loads,
            initiated_by,
            maps: Rc::new(ApicMaps::from_ids(ids)),
            apic_topo,
            place,
            csds: BTreeMap::new(),
            queues: (0..n)
                .map(|c| CallQueue {
                    line: DataLine::with_data(Words::default(), sc.socket_of(c)),
                    queued: Vec::new(),
                    taken: Vec::new(),
                })
                .collect(),
            ipis: IpiCounts::default(),
            targets_buf: Vec::new(),
            user_tasks_done: 0,
            icr_free: vec![SimTime::ZERO; n as usize],
            misses: vec![std::collections::VecDeque::new(); n as usize],
            flush_states: BTreeMap::new(),
        })
    }

    /// Whether a load runs Linux 2.6.38's shootdown (its invalidate vectors then have
    /// their handler).
    pub(super) fn runs_2011(&self) -> bool {
        self.loads
            .iter()
            .any(|l| l.kernel == ShootdownKernel::FlushTlbOthers2011)
    }

    pub(super) fn distance(&self, a: u32, b: u32) -> Distance {
        let (x, y) = (self.place[a as usize], self.place[b as usize]);
        if a == b {
            Distance::SameCpu
        } else if x.0 != y.0 {
            Distance::CrossSocket
        } else if x.1 != y.1 {
            Distance::SameSocket
        } else {
            Distance::SmtSibling
        }
    }
}

/// Whether `vector` is one of Linux's call-function vectors.
pub fn is_call_function_vector(vector: Vector) -> bool {
    vector == CALL_FUNCTION_VECTOR || vector == CALL_FUNCTION_SINGLE_VECTOR
}

/// How an issued cross-call operation proceeds.
pub(super) enum Issued {
    /// It keeps the CPU busy for this long and then yields this value.
    Busy(Duration, u64),
    /// `csd_lock_wait` on a CSD still locked: the task spins on this target.
    Spin(u32),
}

impl System {
    /// Whether CPU `cpu` has a task (a shootdown or a `run_on` algorithm) running.
    pub fn task_running(&self, cpu: u32) -> bool {
        self.cpus[cpu as usize].task.is_some()
    }

    /// CPU `cpu`'s local APIC.
    pub fn apic(&self, cpu: u32) -> &apic_sim::LocalApic {
        &self.cpus[cpu as usize].apic
    }

    /// Schedules every initiator's first request.
    pub(super) fn start_shootdowns(&mut self) {
        let now = self.now();
        for (l, load) in self.xcall.loads.iter_mut().enumerate() {
            for (i, ini) in load.initiators.iter_mut().enumerate() {
                let at = now + load.arrival.next_gap(&mut ini.rng);
                self.queue.schedule(
                    at,
                    Priority::DEVICE,
                    Event::ShootdownRequest {
                        load: l as u16,
                        initiator: i as u16,
                    },
                );
            }
        }
    }

    /// A request reaches an initiator: it queues, and the next one is scheduled.
    pub(super) fn on_shootdown_request(&mut self, now: SimTime, load: u16, initiator: u16) {
        let l = &mut self.xcall.loads[load as usize];
        let ini = &mut l.initiators[initiator as usize];
        ini.queued += 1;
        ini.requested += 1;
        if let Some(left) = ini.left.as_mut() {
            *left -= 1;
        }
        if ini.left != Some(0) {
            let at = now + l.arrival.next_gap(&mut ini.rng);
            self.queue.schedule(
                at,
                Priority::DEVICE,
                Event::ShootdownRequest { load, initiator },
            );
        }
        let cpu = ini.cpu;
        self.try_take_interrupt(now, cpu);
    }

    /// The next queued shootdown of `cpu`'s loads, started as its task. Returns
    /// whether one started.
    pub(super) fn start_queued_shootdown(&mut self, now: SimTime, cpu: u32) -> bool {
        let c = cpu as usize;
        let Some((load, initiator)) = self.xcall.initiated_by[c]
            .iter()
            .copied()
            .find(|&(l, i)| self.xcall.loads[l as usize].initiators[i as usize].queued > 0)
        else {
            return false;
        };
        let l = &mut self.xcall.loads[load as usize];
        l.initiators[initiator as usize].queued -= 1;
        l.started += 1;
        let (maps, mode, mask) = (Rc::clone(&self.xcall.maps), l.mode, l.mask.clone());
        let co = match l.kernel {
            ShootdownKernel::SmpCallFunctionMany => Coroutine::new(move |port| {
                smp_call_function_many(IpiPort::new(port), maps, mode, CpuId(cpu), mask)
            }),
            ShootdownKernel::FlushTlbOthers2011 => Coroutine::new(move |port| {
                flush_tlb_others_ipi(IpiPort::new(port), maps, mode, CpuId(cpu), mask)
            }),
        };
        self.cpus[c].task = Some(Task::new(
            TaskCo::CrossCall(co),
            TaskKind::Shootdown(load),
            now,
        ));
        true
    }

    /// A shootdown call of `load` returned at `now` after starting at `started`.
    pub(super) fn shootdown_done(&mut self, now: SimTime, load: u16, started: SimTime) {
        let l = &mut self.xcall.loads[load as usize];
        l.completed += 1;
        l.phases.calls_ps += now.since(started).as_ps();
        let ns = now.since(started).as_ps().div_ceil(1000);
        l.latency.saturating_record(ns);
    }

    /// Issues a task's cross-call operation: charges it and returns its cost and
    /// value, or `None` when the task starts spinning on a locked CSD.
    pub(super) fn issue_task_ipi_op(
        &mut self,
        now: SimTime,
        cpu: u32,
        op: IpiOp,
    ) -> Option<(Duration, u64)> {
        let c = cpu as usize;
        match self.issue_ipi_op(now, cpu, op) {
            Issued::Busy(cost, value) => {
                let task = self.cpus[c].task.as_ref().expect("running");
                if let Some(load) = task.shootdown_load() {
                    self.xcall.loads[load as usize].phases.charge(op, cost);
                }
                self.cpus[c].time.cross_call += cost;
                self.emit_cpu_span(cpu, now, cost, || CpuActivity::CrossCall { op });
                Some((cost, value))
            }
            Issued::Spin(target) => {
                let task = self.cpus[c].task.as_mut().expect("running");
                task.spin = Some((target, now));
                self.cpus[c].state = CpuState::Spinning;
                self.cpus[c].activity_end = now;
                None
            }
        }
    }

    /// An interrupt breaks off the task's spin: the time so far is charged and the
    /// wait is issued again when the task resumes.
    pub(super) fn break_spin(&mut self, now: SimTime, cpu: u32) {
        let c = cpu as usize;
        let task = self.cpus[c]
            .task
            .as_mut()
            .expect("a spinning CPU has a task");
        let (target, since) = task.spin.take().expect("spinning");
        task.reissue = Some(TaskOp::Ipi(IpiOp::WaitCsd(CpuId(target))));
        let load = task.shootdown_load();
        let spun = now.since(since);
        self.cpus[c].time.cross_call += spun;
        if let Some(load) = load {
            self.xcall.loads[load as usize]
                .phases
                .charge(IpiOp::WaitCsd(CpuId(target)), spun);
        }
        if let Some(csd) = self.xcall.csds.get_mut(&(cpu, target)) {
            csd.spinner = false;
        }
        self.emit_cpu_span(cpu, since, spun, || CpuActivity::CrossCall {
            op: IpiOp::WaitCsd(CpuId(target)),
        });
        self.cpus[c].state = CpuState::Idle;
    }

    /// Interrupt entry done for a call-function vector: the handler's algorithm.
    pub(super) fn call_function_handler(&mut self) -> Algorithm {
        self.xcall.ipis.handlers_run += 1;
        Algorithm::CrossCall(Coroutine::new(|port| {
            call_function_interrupt(IpiPort::new(port))
        }))
    }

    /// A load of `cpu` that misses, costing `latency`, which the core can overlap with
    /// its other independent misses: it waits only for a free fill buffer (the oldest
    /// miss in flight when all are busy); `IpiOp::LoadsRetired` waits for the rest.
    fn independent_load(&mut self, now: SimTime, cpu: u32, latency: Duration) -> Duration {
        let fill_buffers = self.costs.cpu.fill_buffers.max(1) as usize;
        let q = &mut self.xcall.misses[cpu as usize];
        q.retain(|&done| done > now);
        // With every buffer busy, the load takes the one that frees first.
        let start = if q.len() >= fill_buffers {
            let (i, _) = q
                .iter()
                .enumerate()
                .min_by_key(|&(_, &done)| done)
                .expect("full");
            q.remove(i).expect("in range")
        } else {
            now
        };
        q.push_back(start + latency);
        // Issuing the load takes an L1-hit's time; the miss itself runs on.
        start.since(now) + self.freq.cycles_f64(self.costs.pid_line.l1_hit_cycles)
    }

    /// Issues a cross-call operation of `cpu` (task or handler) at `now`.
    fn issue_ipi_op(&mut self, now: SimTime, cpu: u32, op: IpiOp) -> Issued {
        let c = cpu as usize;
        let agent = self.cpus[c].agent;
        let ipi = self.costs.ipi;
        match op {
            IpiOp::WrmsrFence => Issued::Busy(self.freq.cycles_f64(ipi.fence_cycles), 0),
            IpiOp::WriteIcr(icr) => {
                // The write waits until the APIC has handed off the previous message.
                let start = now.max(self.xcall.icr_free[c]);
                let d = start.since(now) + self.costs.apic.msr_time(MSR_ICR, self.freq);
                self.xcall.ipis.icr_writes += 1;
                if let Some(load) = self.cpus[c].task.as_ref().and_then(|t| t.shootdown_load()) {
                    self.xcall.loads[load as usize].icr_writes += 1;
                }
                let fx = self.cpus[c].apic.wrmsr(now, MSR_ICR, icr.0);
                for effect in fx.iter() {
                    match *effect {
                        ApicEffect::SendIpi(msg) => self.send_ipi(cpu, msg, now + d),
                        ApicEffect::IpiNotSent { .. } => self.xcall.ipis.not_sent += 1,
                        ApicEffect::GeneralProtection { .. } => {
                            self.xcall.ipis.general_protection += 1
                        }
                        _ => {}
                    }
                }
                Issued::Busy(d, 0)
            }
            IpiOp::QueueCsd(target) => {
                let t = target.0;
                let home = self.socket_of_cpu(t);
                let csd = self.xcall.csds.entry((cpu, t)).or_insert_with(|| Csd {
                    locked: false,
                    spinner: false,
                    line: DataLine::with_data(Words::default(), home),
                });
                csd.locked = true;
                let lock = LineOp::Store { word: 0, value: 1 };
                let mut d = self.freq.cycles_f64(ipi.csd_setup_cycles);
                d += line_access(&mut csd.line, agent, lock, now, &self.line_prices);
                let q = &mut self.xcall.queues[t as usize];
                let was_empty = q.queued.is_empty();
                q.queued.push(cpu);
                let add = LineOp::Xchg {
                    word: 0,
                    value: cpu as u64 + 1,
                };
                d += line_access(&mut q.line, agent, add, now + d, &self.line_prices);
                Issued::Busy(d, was_empty as u64)
            }
            IpiOp::WaitCsd(target) => {
                let t = target.0;
                let Some(csd) = self.xcall.csds.get_mut(&(cpu, t)) else {
                    return Issued::Busy(Duration::ZERO, 0);
                };
                let poll = LineOp::Load { word: 0 };
                let d = line_access(&mut csd.line, agent, poll, now, &self.line_prices);
                if csd.locked {
                    csd.spinner = true;
                    Issued::Spin(t)
                } else {
                    Issued::Busy(self.independent_load(now, cpu, d), 0)
                }
            }
            IpiOp::LoadsRetired => {
                let q = &mut self.xcall.misses[c];
                let last = q.iter().copied().max().unwrap_or(now);
                q.clear();
                Issued::Busy(last.max(now).since(now), 0)
            }
            IpiOp::LocalIrqSave | IpiOp::LocalIrqRestore => {
                if let Some(task) = self.cpus[c].task.as_mut() {
                    if op == IpiOp::LocalIrqSave {
                        task.irq_off += 1;
                    } else {
                        task.irq_off = task.irq_off.saturating_sub(1);
                    }
                }
                Issued::Busy(self.freq.cycles_f64(ipi.irq_save_cycles), 0)
            }
            IpiOp::CpuRelax => Issued::Busy(self.freq.cycles_f64(ipi.pause_cycles), 0),
            IpiOp::FlushStateLock(_)
            | IpiOp::FlushStateFill(_)
            | IpiOp::FlushMaskSet(..)
            | IpiOp::FlushMaskPoll(_)
            | IpiOp::FlushMaskRead(_)
            | IpiOp::FlushStateUnlock(_)
            | IpiOp::FlushMaskTest(_)
            | IpiOp::FlushTlbLocal
            | IpiOp::FlushMaskClear(_) => self.issue_flush_op(now, cpu, op),
            IpiOp::Eoi => {
                let fx = self.cpus[c].apic.wrmsr(now, MSR_EOI, 0);
                if fx.faulted() {
                    self.xcall.ipis.general_protection += 1;
                }
                self.cpus[c].ops.eois += 1;
                Issued::Busy(self.costs.apic.msr_time(MSR_EOI, self.freq), 0)
            }
            IpiOp::TakeQueue => {
                let q = &mut self.xcall.queues[c];
                q.taken = std::mem::take(&mut q.queued);
                let del = LineOp::Xchg { word: 0, value: 0 };
                let d = line_access(&mut q.line, agent, del, now, &self.line_prices);
                Issued::Busy(d, q.taken.len() as u64)
            }
            IpiOp::RunCsdFunc(i) => {
                let sender = self.xcall.queues[c].taken[i];
                self.xcall.ipis.funcs_run += 1;
                self.cpus[c].funcs_run += 1;
                let csd = self.xcall.csds.get_mut(&(sender, cpu)).expect("queued");
                let read = LineOp::Load { word: 1 };
                let d = line_access(&mut csd.line, agent, read, now, &self.line_prices);
                Issued::Busy(d + self.freq.cycles_f64(ipi.func_cycles), 0)
            }
            IpiOp::UnlockCsd(i) => {
                let sender = self.xcall.queues[c].taken[i];
                let csd = self.xcall.csds.get_mut(&(sender, cpu)).expect("queued");
                let unlock = LineOp::Store { word: 0, value: 0 };
                let d = line_access(&mut csd.line, agent, unlock, now, &self.line_prices);
                Issued::Busy(d, 0)
            }
        }
    }

    /// Effects that land when a cross-call operation completes: an unlock becomes
    /// visible, and a sender spinning on it sees it one load later.
    pub(super) fn complete_ipi_op(&mut self, now: SimTime, cpu: u32, op: IpiOp) {
        if let IpiOp::FlushMaskClear(slot) = op {
            self.complete_flush_clear(cpu, slot);
            return;
        }
        let IpiOp::UnlockCsd(i) = op else { return };
        let sender = self.xcall.queues[cpu as usize].taken[i];
        let csd = self.xcall.csds.get_mut(&(sender, cpu)).expect("queued");
        csd.locked = false;
        if !std::mem::take(&mut csd.spinner) {
            return;
        }
        let s = sender as usize;
        let agent = self.cpus[s].agent;
        let poll = LineOp::Load { word: 0 };
        let seen = now + line_access(&mut csd.line, agent, poll, now, &self.line_prices);
        let task = self.cpus[s].task.as_mut().expect("a spinner has a task");
        let (target, since) = task.spin.take().expect("spinning");
        debug_assert_eq!(target, cpu);
        task.in_flight = Some((TaskOp::Ipi(IpiOp::WaitCsd(CpuId(target))), 0));
        let spun = seen.since(since);
        if let Some(load) = task.shootdown_load() {
            self.xcall.loads[load as usize]
                .phases
                .charge(IpiOp::WaitCsd(CpuId(target)), spun);
        }
        self.cpus[s].time.cross_call += spun;
        self.cpus[s].state = CpuState::Task;
        self.emit_cpu_span(sender, since, spun, || CpuActivity::CrossCall {
            op: IpiOp::WaitCsd(CpuId(target)),
        });
        self.schedule_cpu_step(sender, seen);
    }

    /// Issues a handler's cross-call operation; returns it as in flight, and its cost.
    pub(super) fn start_handler_ipi_op(
        &mut self,
        now: SimTime,
        cpu: u32,
        op: IpiOp,
    ) -> (OpInFlight, Duration) {
        match self.issue_ipi_op(now, cpu, op) {
            Issued::Busy(cost, value) => {
                self.cpus[cpu as usize].time.cross_call += cost;
                self.emit_cpu_span(cpu, now, cost, || CpuActivity::CrossCall { op });
                (OpInFlight::Ipi(op, value), cost)
            }
            Issued::Spin(_) => unreachable!("call_function_interrupt never waits for a CSD"),
        }
    }

    /// Routes an IPI leaving `from`'s APIC at `at` to every APIC it addresses.
    fn send_ipi(&mut self, from: u32, msg: IpiMessage, at: SimTime) {
        let mut targets = std::mem::take(&mut self.xcall.targets_buf);
        targets.clear();
        self.xcall.apic_topo.resolve_into(&msg, &mut targets);
        let mut accepted = at;
        for &id in &targets {
            let cpu = self
                .apic_index
                .get(u64::from(id.0))
                .expect("the APIC topology holds only this machine's IDs");
            let distance = self.xcall.distance(from, cpu);
            let flight = self
                .costs
                .interconnect
                .ipi_flight(&self.costs.apic, distance);
            accepted = accepted.max(at + self.costs.interconnect.icr_accept(distance));
            let msg = self.parked.ipis.park(msg);
            self.queue
                .schedule(at + flight, Priority::APIC, Event::IpiArrive { cpu, msg });
        }
        let free = &mut self.xcall.icr_free[from as usize];
        *free = (*free).max(accepted);
        self.xcall.targets_buf = targets;
    }

    /// An IPI reaches `cpu`'s APIC.
    pub(super) fn on_ipi_arrive(&mut self, now: SimTime, cpu: u32, msg: IpiMessage) {
        self.xcall.ipis.received += 1;
        match self.cpus[cpu as usize].apic.receive_ipi(&msg) {
            DeliveryOutcome::Fixed(AcceptOutcome::AlreadyPending) => self.xcall.ipis.merged += 1,
            DeliveryOutcome::Fixed(AcceptOutcome::Rejected(_)) => self.xcall.ipis.rejected += 1,
            // NMI, INIT, SIPI, SMI change no IRR bit; nothing here sends them.
            _ => {}
        }
        self.try_take_interrupt(now, cpu);
    }

    fn socket_of_cpu(&self, cpu: u32) -> u16 {
        self.xcall.place[cpu as usize].0 as u16
    }

    /// The `shootdowns` and `lines` parts of the report.
    pub(super) fn xcall_report(&self) -> Option<XcallReport> {
        if self.xcall.loads.is_empty() && self.xcall.ipis == IpiCounts::default() {
            return None;
        }
        let loads = self
            .xcall
            .loads
            .iter()
            .map(|l| ShootdownReport {
                name: l.name.clone(),
                ipi_mode: l.mode.as_str(),
                initiators: l.initiators.len() as u32,
                targets: l.mask.weight(),
                requested: l.initiators.iter().map(|i| i.requested).sum(),
                started: l.started,
                completed: l.completed,
                queued: l.initiators.iter().map(|i| i.queued).sum(),
                icr_writes: l.icr_writes,
                sender_phases: l.phases,
                latency_ns: LatencySummary::of(&l.latency),
            })
            .collect();
        let mut lines = BTreeMap::new();
        let mut worst: Vec<NamedLine> = Vec::new();
        let mut add = |kind: &'static str, name: String, line: &DataLine| {
            let agg: &mut LineKindReport = lines.entry(kind).or_default();
            let occ = line.occupancy();
            agg.lines += 1;
            agg.transfers += occ.transfers;
            agg.waits += occ.waits;
            agg.wait_ns += occ.wait_ps as f64 / 1e3;
            for (_, c) in line.all_counters() {
                agg.accesses += c.loads + c.stores_or_rmw;
                agg.misses += c.l1_misses;
                agg.modified_transfers += c.modified_transfers;
            }
            if occ.waits > 0 {
                worst.push(NamedLine {
                    name,
                    waits: occ.waits,
                    wait_ns: occ.wait_ps as f64 / 1e3,
                });
            }
        };
        for (&(s, t), csd) in &self.xcall.csds {
            add("csd", format!("csd/{s}/{t}"), &csd.line);
        }
        for (slot, f) in &self.xcall.flush_states {
            add("flush_state", format!("flush_state/{slot}"), &f.line);
        }
        for (t, q) in self.xcall.queues.iter().enumerate() {
            if q.line.occupancy().transfers > 0 || !q.line.all_counters().is_empty() {
                add(
                    "call_single_queue",
                    format!("call_single_queue/{t}"),
                    &q.line,
                );
            }
        }
        worst.sort_by(|a, b| b.wait_ns.total_cmp(&a.wait_ns).then(a.name.cmp(&b.name)));
        worst.truncate(MOST_WAITED_LINES);
        Some(XcallReport {
            shootdowns: loads,
            ipis: self.xcall.ipis,
            lines,
            most_waited_lines: worst,
        })
    }
}

/// How many lines the report names by their waits.
const MOST_WAITED_LINES: usize = 8;

/// One access to a shared data line by `agent`, issued at `now`: waits while another
/// transfer of the line is in flight, then takes the MESI cost. Returns the time from
/// `now` to the end of the access.
pub(super) fn line_access(
    line: &mut DataLine,
    agent: Agent,
    op: LineOp,
    now: SimTime,
    prices: &pid_model::PricedLineCosts,
) -> Duration {
    let d = line.timed_cost_priced(agent, &op, now, prices);
    let _ = line.perform(agent, op);
    d
}

/// Cross calls in a report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct XcallReport {
    /// One entry per scenario shootdown load.
    pub shootdowns: Vec<ShootdownReport>,
    /// IPI counts of every sender and target.
    pub ipis: IpiCounts,
    /// The shared lines of cross calls, by kind (`csd`, `call_single_queue`,
    /// `flush_state`).
    pub lines: BTreeMap<&'static str, LineKindReport>,
    /// The lines whose requesters waited longest for a transfer in flight, named.
    pub most_waited_lines: Vec<NamedLine>,
}

/// One shootdown load's outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShootdownReport {
    /// The load's name.
    pub name: String,
    /// `"cluster"` or `"physical"`.
    pub ipi_mode: &'static str,
    /// Initiating CPUs.
    pub initiators: u32,
    /// Target CPUs (an initiator among them leaves itself out of its own calls).
    pub targets: u32,
    /// Requests made.
    pub requested: u64,
    /// Calls started.
    pub started: u64,
    /// Calls returned.
    pub completed: u64,
    /// Requests waiting for their initiator (still busy with an earlier call).
    pub queued: u64,
    /// ICR writes of this load's calls.
    pub icr_writes: u64,
    /// The initiators' time in this load's calls, by phase.
    pub sender_phases: SenderPhases,
    /// From a call's start to its return (every target has run the function and
    /// unlocked its CSD), ns.
    pub latency_ns: LatencySummary,
}

/// Counters of the shared lines of one kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LineKindReport {
    /// Lines of this kind that were touched.
    pub lines: u64,
    /// Loads, stores and locked operations.
    pub accesses: u64,
    /// Accesses that missed the requester's private cache.
    pub misses: u64,
    /// Accesses that took the line from another agent's Modified copy.
    pub modified_transfers: u64,
    /// Transfers (accesses that moved the line or its ownership).
    pub transfers: u64,
    /// Transfers that waited for another in flight.
    pub waits: u64,
    /// How long they waited in total, ns.
    pub wait_ns: f64,
}

/// A line named by its identity, with its waits.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NamedLine {
    /// `csd/SENDER/TARGET` or `call_single_queue/CPU`.
    pub name: String,
    /// Transfers that waited for another in flight.
    pub waits: u64,
    /// Their total wait, ns.
    pub wait_ns: f64,
}

//! A small deterministic timed driver for the IPI algorithms: one x2APIC per logical
//! CPU of a [`Topology`], one event queue, and the algorithms of [`super`] running as
//! coroutines on the CPUs that execute them.
//!
//! What each operation costs and when its effect lands:
//!
//! | operation | CPU time | effect |
//! |---|---|---|
//! | `WrmsrFence` | `ipi.fence_cycles` | none |
//! | `WriteIcr` | `apic.wrmsr_icr_cycles` | `LocalApic::wrmsr`; each resolved target receives the IPI `ipi_flight(distance)` after the WRMSR completes |
//! | `QueueCsd(t)` | `ipi.csd_setup_cycles` + line transfer sender↔t | CSD locked and on t's queue at issue |
//! | `WaitCsd(t)` | until the unlock is visible: unlock time + line transfer t→sender (spinning); a CSD already unlocked costs the transfer / `ipi.ack_poll_overlap` | none |
//! | `Eoi` | `apic.wrmsr_eoi_cycles` | `LocalApic::wrmsr(EOI)` at issue |
//! | `TakeQueue` | line transfer from the last enqueuer (own line if empty) | queue emptied at issue |
//! | `RunCsdFunc(i)` | line transfer from the CSD's sender + `ipi.func_cycles` | none |
//! | `UnlockCsd(i)` | line transfer (ownership of the CSD line) | unlock visible when it completes |
//!
//! A CPU takes an interrupt when it is not running anything (idle in a halt state,
//! interrupts enabled) and its APIC has a deliverable vector: INTA, then
//! `cpu.irq_entry_cycles`, the handler of that vector (the call-function handler for
//! [`CALL_FUNCTION_VECTOR`] and [`CALL_FUNCTION_SINGLE_VECTOR`], an EOI alone for any
//! other), then `cpu.irq_exit_cycles`. Hardirq handlers do not nest. A CPU running an
//! algorithm started with [`IpiSim::run_on`] takes no interrupt until it finishes
//! (a simplification: Linux runs the cross-call sender with interrupts enabled).

use std::collections::BTreeMap;
use std::future::Future;
use std::rc::Rc;

use apic_sim::msr::{MSR_EOI, MSR_ICR};
use apic_sim::{
    AcceptOutcome, ApicEffect, ApicTopology, DeliveryOutcome, IpiDropReason, IpiMessage,
    LapicCosts, LocalApic,
};
use serde::{Deserialize, Serialize};
use sim_core::{CpuId, Duration, Freq, SimTime, Vector};

use super::{
    call_function_interrupt, smp_call_function_many, ApicMaps, CpuMask, IpiCosts, IpiMode, IpiOp,
    IpiPort, CALL_FUNCTION_SINGLE_VECTOR, CALL_FUNCTION_VECTOR,
};
use crate::engine::{Coroutine, EventQueue, Priority, Step};
use crate::system::CpuCosts;
use crate::topology::{InterconnectCosts, Topology, TopologyError};

/// Every cost table the IPI driver charges.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IpiSimCosts {
    /// Core clock, interrupt entry and exit (the system's CPU table).
    pub cpu: CpuCosts,
    /// x2APIC register costs; `ipi_latency_ns` is the same-socket IPI flight.
    pub apic: LapicCosts,
    /// Distance-dependent latencies (IPI flight across sockets, cache lines).
    pub interconnect: InterconnectCosts,
    /// Fence, CSD set-up and the cross-called function.
    pub ipi: IpiCosts,
}

impl IpiSimCosts {
    /// Checks the tables the driver needs.
    pub fn validate(&self) -> Result<(), TopologyError> {
        if self.cpu.freq_mhz == 0 {
            return Err(TopologyError::InvalidConfig {
                field: "costs.cpu.freq_mhz",
                value: "0".into(),
                allowed: "a clock above 0 MHz",
            });
        }
        for (field, v) in [
            ("costs.cpu.irq_entry_cycles", self.cpu.irq_entry_cycles),
            ("costs.cpu.irq_exit_cycles", self.cpu.irq_exit_cycles),
            ("costs.apic.ipi_latency_ns", self.apic.ipi_latency_ns),
        ] {
            if !(v.is_finite() && (0.0..=1e12).contains(&v)) {
                return Err(TopologyError::InvalidConfig {
                    field,
                    value: v.to_string(),
                    allowed: "a finite number, 0..=1e12",
                });
            }
        }
        self.interconnect.validate()
    }
}

/// What one algorithm run on one CPU did, from its start until the machine is quiet.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunStats {
    /// ICR writes the algorithm performed.
    pub icr_writes: u32,
    /// From the algorithm's start to its end, core cycles.
    pub sender_cycles: u64,
    /// Time in ICR WRMSRs, core cycles.
    pub sender_send_cycles: u64,
    /// Time in WRMSR fences, core cycles.
    pub sender_fence_cycles: u64,
    /// Time queueing CSDs, core cycles.
    pub sender_enqueue_cycles: u64,
    /// Time spinning in `csd_lock_wait`, core cycles.
    pub sender_wait_cycles: u64,
    /// IPIs that reached an APIC (one per target CPU per ICR write).
    pub ipis_received: u32,
    /// Of those, fixed IPIs that found their IRR bit already set (merged).
    pub ipis_merged: u32,
    /// Fixed IPIs an APIC rejected (illegal vector, software-disabled).
    pub ipis_rejected: u32,
    /// ICR writes that sent nothing, with the APIC's reason.
    #[serde(serialize_with = "reasons_as_names")]
    pub ipis_not_sent: Vec<IpiDropReason>,
    /// WRMSRs that raised #GP.
    pub general_protection: u32,
    /// Interrupt handlers run on any CPU.
    pub handlers_run: u32,
    /// Cross-called functions run on any CPU.
    pub funcs_run: u32,
    /// From the start to the last handler's exit, ns.
    pub quiet_after_ns: f64,
}

/// One `smp_call_function_many` (wait = true) from one CPU to a set of CPUs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallOutcome {
    /// `"physical"` or `"cluster"`.
    pub mode: &'static str,
    /// Target CPUs (the sender excluded).
    pub targets: u32,
    /// Everything the run did.
    #[serde(flatten)]
    pub stats: RunStats,
}

fn reasons_as_names<S: serde::Serializer>(
    reasons: &[IpiDropReason],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(reasons.iter().map(|r| format!("{r:?}")))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// The operation `cpu` is suspended on has completed.
    OpDone { cpu: CpuId },
    /// An IPI reaches `cpu`'s APIC.
    IpiArrive { cpu: CpuId, msg: IpiMessage },
    /// `cpu` finished interrupt entry for `vector`: run its handler.
    EntryDone { cpu: CpuId, vector: Vector },
    /// `cpu` finished interrupt exit.
    ExitDone { cpu: CpuId },
}

/// State of the CSD one sender queued for one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Csd {
    Locked,
    Unlocked(SimTime),
}

#[derive(Default)]
struct CpuSlot {
    /// The algorithm running here, if any.
    co: Option<Coroutine<IpiOp, u64>>,
    /// The operation it is suspended on and the value to resume it with.
    pending: Option<(IpiOp, u64)>,
    /// In a hardirq handler (entry to exit) or running an algorithm.
    busy: bool,
    /// Running a handler (as opposed to an algorithm started by `run_on`).
    in_irq: bool,
    /// `call_single_queue`: senders whose CSD is queued here.
    queue: Vec<CpuId>,
    /// The CPU that last wrote the queue head.
    queue_last_writer: Option<CpuId>,
    /// CSDs taken by the running handler, by position.
    taken: Vec<CpuId>,
    /// Spinning in `csd_lock_wait` for this target, since this time.
    waiting_on: Option<(CpuId, SimTime)>,
}

/// The timed driver. See the module documentation for the cost of each operation.
pub struct IpiSim {
    topo: Topology,
    apic_topo: ApicTopology,
    maps: Rc<ApicMaps>,
    apics: Vec<LocalApic>,
    costs: IpiSimCosts,
    freq: Freq,
    queue: EventQueue<Event>,
    cpus: Vec<CpuSlot>,
    csds: BTreeMap<(CpuId, CpuId), Csd>,
    stats: RunStats,
    runner: Option<(CpuId, SimTime)>,
    /// Cross-called functions run per CPU since the machine was built.
    funcs_run_on: Vec<u32>,
    targets_buf: Vec<sim_core::ApicId>,
}

impl IpiSim {
    /// A machine of `topology` with every APIC software-enabled and idle CPUs.
    pub fn new(topology: Topology, costs: IpiSimCosts) -> Result<IpiSim, TopologyError> {
        costs.validate()?;
        let freq = Freq::from_mhz(costs.cpu.freq_mhz).expect("validated above 0 MHz");
        let apics = topology
            .cpus()
            .iter()
            .map(|c| LocalApic::new(c.apic_id))
            .collect();
        let n = topology.len();
        let cpus = (0..n).map(|_| CpuSlot::default()).collect();
        Ok(IpiSim {
            apic_topo: topology.apic_topology(),
            maps: Rc::new(ApicMaps::new(&topology)),
            topo: topology,
            apics,
            costs,
            freq,
            queue: EventQueue::new(),
            cpus,
            csds: BTreeMap::new(),
            stats: RunStats::default(),
            runner: None,
            funcs_run_on: vec![0; n],
            targets_buf: Vec::new(),
        })
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }
    /// The kernel's per-CPU APIC tables.
    pub fn maps(&self) -> &Rc<ApicMaps> {
        &self.maps
    }
    /// `cpu`'s local APIC.
    pub fn apic(&self, cpu: CpuId) -> &LocalApic {
        &self.apics[cpu.0 as usize]
    }
    /// `cpu`'s local APIC, to set it up (TPR, SVR...) between runs.
    pub fn apic_mut(&mut self, cpu: CpuId) -> &mut LocalApic {
        &mut self.apics[cpu.0 as usize]
    }
    /// Simulated time now.
    pub fn now(&self) -> SimTime {
        self.queue.now()
    }
    /// Cross-called functions `cpu` has run since the machine was built.
    pub fn funcs_run_on(&self, cpu: CpuId) -> u32 {
        self.funcs_run_on[cpu.0 as usize]
    }
    /// The costs in use.
    pub fn costs(&self) -> &IpiSimCosts {
        &self.costs
    }

    /// Runs `smp_call_function_many` from `sender` to `targets` (wait = true) in
    /// `mode`, until every CPU is quiet again. The sender is left out of the targets.
    /// Errors: a sender the machine lacks, a mask sized for another machine.
    pub fn call_function_many(
        &mut self,
        sender: CpuId,
        targets: &CpuMask,
        mode: IpiMode,
    ) -> Result<CallOutcome, TopologyError> {
        let cpus = self.topo.len() as u32;
        if targets.nr_cpus() != cpus {
            return Err(TopologyError::MaskSize {
                mask_cpus: targets.nr_cpus(),
                cpus,
            });
        }
        let maps = Rc::clone(&self.maps);
        let mask = targets.clone();
        let mut counted = targets.clone();
        counted.clear(sender);
        let stats = self.run_on(sender, move |port| {
            smp_call_function_many(port, maps, mode, sender, mask)
        })?;
        Ok(CallOutcome {
            mode: mode.as_str(),
            targets: counted.weight(),
            stats,
        })
    }

    /// Starts `algorithm` on `cpu` now and runs the machine until no event is left.
    /// Error: a CPU the machine lacks.
    pub fn run_on<F>(
        &mut self,
        cpu: CpuId,
        algorithm: impl FnOnce(IpiPort) -> F,
    ) -> Result<RunStats, TopologyError>
    where
        F: Future<Output = ()> + 'static,
    {
        let cpus = self.topo.len() as u32;
        if cpu.0 >= cpus {
            return Err(TopologyError::NoSuchCpu { cpu: cpu.0, cpus });
        }
        // A run ends only when the machine is quiet, so no CPU is busy here.
        assert!(
            !self.cpus[cpu.0 as usize].busy,
            "CPU {} is busy; runs must not overlap",
            cpu.0
        );
        self.stats = RunStats::default();
        let start = self.now();
        self.runner = Some((cpu, start));
        let co = Coroutine::new(|port| algorithm(IpiPort::new(port)));
        let slot = &mut self.cpus[cpu.0 as usize];
        slot.co = Some(co);
        slot.busy = true;
        slot.in_irq = false;
        self.resume(cpu, None);
        while let Some((_, ev)) = self.queue.pop() {
            self.handle(ev);
        }
        self.stats.quiet_after_ns = self.now().since(start).as_ns_f64();
        Ok(std::mem::take(&mut self.stats))
    }

    fn cycles(&self, d: Duration) -> u64 {
        self.freq.cycles_in(d)
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::OpDone { cpu } => {
                let (op, value) = self.cpus[cpu.0 as usize]
                    .pending
                    .take()
                    .expect("an operation was pending");
                self.complete(cpu, op);
                self.resume(cpu, Some(value));
            }
            Event::IpiArrive { cpu, msg } => {
                self.stats.ipis_received += 1;
                match self.apics[cpu.0 as usize].receive_ipi(&msg) {
                    DeliveryOutcome::Fixed(AcceptOutcome::AlreadyPending) => {
                        self.stats.ipis_merged += 1
                    }
                    DeliveryOutcome::Fixed(AcceptOutcome::Rejected(_)) => {
                        self.stats.ipis_rejected += 1
                    }
                    // NMI, INIT, SIPI, SMI change no IRR bit; the model has no core
                    // behaviour for them here (see apic-sim's DeliveryOutcome).
                    _ => {}
                }
                self.try_take_interrupt(cpu);
            }
            Event::EntryDone { cpu, vector } => {
                let co = if vector == CALL_FUNCTION_VECTOR || vector == CALL_FUNCTION_SINGLE_VECTOR
                {
                    Coroutine::new(|port| call_function_interrupt(IpiPort::new(port)))
                } else {
                    // Any other vector: acknowledge it and return.
                    Coroutine::new(|port| async move { IpiPort::new(port).eoi().await })
                };
                self.stats.handlers_run += 1;
                self.cpus[cpu.0 as usize].co = Some(co);
                self.resume(cpu, None);
            }
            Event::ExitDone { cpu } => {
                let slot = &mut self.cpus[cpu.0 as usize];
                slot.busy = false;
                slot.in_irq = false;
                self.try_take_interrupt(cpu);
            }
        }
    }

    /// INTA if `cpu` is idle and its APIC presents a vector.
    fn try_take_interrupt(&mut self, cpu: CpuId) {
        if self.cpus[cpu.0 as usize].busy {
            return;
        }
        let Some(vector) = self.apics[cpu.0 as usize].acknowledge() else {
            return;
        };
        let slot = &mut self.cpus[cpu.0 as usize];
        slot.busy = true;
        slot.in_irq = true;
        let entry = self.freq.cycles_f64(self.costs.cpu.irq_entry_cycles);
        self.queue
            .schedule_in(entry, Priority::CPU, Event::EntryDone { cpu, vector });
    }

    /// Resumes `cpu`'s algorithm and issues its next operation, or finishes it.
    fn resume(&mut self, cpu: CpuId, value: Option<u64>) {
        let step = self.cpus[cpu.0 as usize]
            .co
            .as_mut()
            .expect("a coroutine is running")
            .resume(value);
        match step {
            Step::Request(op) => self.issue(cpu, op),
            Step::Done => {
                let slot = &mut self.cpus[cpu.0 as usize];
                slot.co = None;
                if slot.in_irq {
                    let exit = self.freq.cycles_f64(self.costs.cpu.irq_exit_cycles);
                    self.queue
                        .schedule_in(exit, Priority::CPU, Event::ExitDone { cpu });
                } else {
                    slot.busy = false;
                    if let Some((runner, start)) = self.runner.take() {
                        assert_eq!(runner, cpu, "only the started algorithm ends outside irq");
                        self.stats.sender_cycles = self.cycles(self.now().since(start));
                    }
                    self.try_take_interrupt(cpu);
                }
            }
        }
    }

    fn line(&self, a: CpuId, b: CpuId) -> Duration {
        self.costs
            .interconnect
            .line_transfer(self.topo.distance(a, b))
    }

    /// Starts operation `op` of `cpu` now: applies its effects that happen at issue
    /// and schedules its completion (unless it waits for another CPU).
    fn issue(&mut self, cpu: CpuId, op: IpiOp) {
        let now = self.now();
        let c = cpu.0 as usize;
        let (cost, value) = match op {
            IpiOp::WrmsrFence => {
                let d = self.freq.cycles(self.costs.ipi.fence_cycles as u64);
                self.stats.sender_fence_cycles += self.cycles(d);
                (d, 0)
            }
            IpiOp::WriteIcr(icr) => {
                let d = self.costs.apic.msr_time(MSR_ICR, self.freq);
                self.stats.icr_writes += 1;
                self.stats.sender_send_cycles += self.cycles(d);
                let fx = self.apics[c].wrmsr(now, MSR_ICR, icr.0);
                for effect in fx.iter() {
                    match *effect {
                        ApicEffect::SendIpi(msg) => self.send(cpu, msg, now + d),
                        ApicEffect::IpiNotSent { reason, .. } => {
                            self.stats.ipis_not_sent.push(reason)
                        }
                        ApicEffect::GeneralProtection { .. } => self.stats.general_protection += 1,
                        _ => {}
                    }
                }
                (d, 0)
            }
            IpiOp::QueueCsd(target) => {
                let d = self.freq.cycles(self.costs.ipi.csd_setup_cycles as u64)
                    + self.line(cpu, target);
                self.stats.sender_enqueue_cycles += self.cycles(d);
                let t = &mut self.cpus[target.0 as usize];
                let was_empty = t.queue.is_empty();
                t.queue.push(cpu);
                t.queue_last_writer = Some(cpu);
                self.csds.insert((cpu, target), Csd::Locked);
                (d, was_empty as u64)
            }
            IpiOp::WaitCsd(target) => match self.csds.get(&(cpu, target)) {
                Some(Csd::Unlocked(_)) | None => {
                    let overlap = self.costs.ipi.ack_poll_overlap.max(1) as u64;
                    let d = Duration(self.line(target, cpu).0 / overlap);
                    self.stats.sender_wait_cycles += self.cycles(d);
                    (d, 0)
                }
                Some(Csd::Locked) => {
                    self.cpus[c].waiting_on = Some((target, now));
                    self.cpus[c].pending = Some((op, 0));
                    return;
                }
            },
            IpiOp::Eoi => {
                let d = self.costs.apic.msr_time(MSR_EOI, self.freq);
                let fx = self.apics[c].wrmsr(now, MSR_EOI, 0);
                if fx.faulted() {
                    self.stats.general_protection += 1;
                }
                (d, 0)
            }
            IpiOp::TakeQueue => {
                let slot = &mut self.cpus[c];
                slot.taken = std::mem::take(&mut slot.queue);
                let from = slot.queue_last_writer.unwrap_or(cpu);
                let n = slot.taken.len() as u64;
                (self.line(from, cpu), n)
            }
            IpiOp::RunCsdFunc(i) => {
                let sender = self.cpus[c].taken[i];
                self.stats.funcs_run += 1;
                self.funcs_run_on[c] += 1;
                let d =
                    self.line(sender, cpu) + self.freq.cycles(self.costs.ipi.func_cycles as u64);
                (d, 0)
            }
            IpiOp::UnlockCsd(i) => {
                let sender = self.cpus[c].taken[i];
                (self.line(sender, cpu), 0)
            }
        };
        self.cpus[c].pending = Some((op, value));
        self.queue
            .schedule_in(cost, Priority::CPU, Event::OpDone { cpu });
    }

    /// Effects that land when an operation completes.
    fn complete(&mut self, cpu: CpuId, op: IpiOp) {
        if let IpiOp::UnlockCsd(i) = op {
            let now = self.now();
            let sender = self.cpus[cpu.0 as usize].taken[i];
            self.csds.insert((sender, cpu), Csd::Unlocked(now));
            let s = &mut self.cpus[sender.0 as usize];
            if let Some((target, since)) = s.waiting_on {
                if target == cpu {
                    s.waiting_on = None;
                    let seen = now + self.line(cpu, sender);
                    self.stats.sender_wait_cycles += self.cycles(seen.since(since));
                    self.queue
                        .schedule(seen, Priority::CPU, Event::OpDone { cpu: sender });
                }
            }
        }
    }

    /// Routes an IPI that leaves `from`'s APIC at `at` to every APIC it addresses.
    fn send(&mut self, from: CpuId, msg: IpiMessage, at: SimTime) {
        let mut targets = std::mem::take(&mut self.targets_buf);
        targets.clear();
        self.apic_topo.resolve_into(&msg, &mut targets);
        for &id in &targets {
            let cpu = self
                .topo
                .cpu_of(id)
                .expect("the APIC topology holds only this machine's IDs");
            let flight = self
                .costs
                .interconnect
                .ipi_flight(&self.costs.apic, self.topo.distance(from, cpu));
            self.queue
                .schedule(at + flight, Priority::APIC, Event::IpiArrive { cpu, msg });
        }
        self.targets_buf = targets;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologySpec;

    fn machine() -> IpiSim {
        IpiSim::new(
            Topology::new(TopologySpec::new(2, 20, 2)).unwrap(),
            IpiSimCosts::default(),
        )
        .unwrap()
    }

    #[test]
    fn every_target_runs_the_function_and_the_sender_waits_for_all() {
        let mut sim = machine();
        let socket1 = CpuMask::from_cpus(80, sim.topology().socket_cpus(1));
        for mode in IpiMode::ALL {
            let out = sim.call_function_many(CpuId(0), &socket1, mode).unwrap();
            assert_eq!(out.targets, 40);
            assert_eq!(out.stats.funcs_run, 40);
            assert_eq!(out.stats.handlers_run, 40);
            assert_eq!(out.stats.ipis_received, 40);
            assert!(out.stats.sender_cycles > out.stats.sender_send_cycles);
            // The sender cannot finish before the farthest IPI flew and was handled.
            let c = &sim.costs().clone();
            let floor = sim.freq.cycles_in(
                c.interconnect
                    .ipi_flight(&c.apic, crate::topology::Distance::CrossSocket),
            );
            assert!(out.stats.sender_cycles > floor);
            for t in socket1.iter() {
                assert!(sim.apic(t).isr().is_empty() && sim.apic(t).irr().is_empty());
            }
        }
    }

    #[test]
    fn overlapped_polls_shorten_the_wait_and_widen_the_cluster_gain() {
        let socket1 = |sim: &IpiSim| CpuMask::from_cpus(80, sim.topology().socket_cpus(1));
        let mut costs = IpiSimCosts::default();
        costs.ipi.ack_poll_overlap = 8;
        let topo = || Topology::new(TopologySpec::new(2, 20, 2)).unwrap();
        let mut serial = machine();
        let mut overlapped = IpiSim::new(topo(), costs).unwrap();
        let m = socket1(&serial);
        let s_p = serial
            .call_function_many(CpuId(0), &m, IpiMode::Physical)
            .unwrap();
        let s_c = serial
            .call_function_many(CpuId(0), &m, IpiMode::Cluster)
            .unwrap();
        let o_p = overlapped
            .call_function_many(CpuId(0), &m, IpiMode::Physical)
            .unwrap();
        let o_c = overlapped
            .call_function_many(CpuId(0), &m, IpiMode::Cluster)
            .unwrap();
        assert!(o_p.stats.sender_cycles < s_p.stats.sender_cycles);
        assert!(o_c.stats.sender_cycles < s_c.stats.sender_cycles);
        let gain = |p: &CallOutcome, c: &CallOutcome| {
            p.stats.sender_cycles as f64 / c.stats.sender_cycles as f64
        };
        assert!(gain(&o_p, &o_c) > gain(&s_p, &s_c));
    }

    #[test]
    fn runs_are_deterministic() {
        let run = || {
            let mut sim = machine();
            let m = CpuMask::from_cpus(80, sim.topology().socket_cpus(1).take(16));
            sim.call_function_many(CpuId(0), &m, IpiMode::Cluster)
                .unwrap()
        };
        assert_eq!(run(), run());
    }
}

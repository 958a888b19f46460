//! The SMMUv3 command queue inside [`System`] (`arch = "arm"`): CPUs run Linux's
//! insertion and CMD_SYNC waits ([`crate::kernel::smmu`]) as tasks, the SMMU consumes
//! the ring, and both share the queue's lines through the one line model.
//!
//! ```text
//!  CPU task: issue_cmdlist ── llq CAS, slot writes, valid map, owner_prod/lock ──▶ lines
//!     │  WriteProd (mmio_write_cycles; the SMMU sees it prod_write_latency_ns later)
//!     ▼
//!  SMMU (iommu-sim): fetch slot (a DMA read of its line) ─▶ consume ─▶ CMD_SYNC done
//!     ├─ MSI write into the sync's slot (a DMA write: every copy invalidated, a
//!     │  poller's monitor cleared, its reload priced by the line model)
//!     └─ CONS moves (+ SEV to every CPU)
//! ```
//!
//! Lines (one [`DataLine`] each, named in reports): `cmdq/llq` (the shared prod/cons
//! word), `cmdq/owner_prod+lock`, `cmdq/valid_map/N` (eight 64-bit words each) and
//! `cmdq/slots/N` (four 16-byte commands each; the commands themselves live in the
//! SMMU's ring). CPU accesses are priced when issued (the line model's MESI cost, after
//! waiting for a transfer of the line in flight) and performed when they complete, so
//! racing CPUs see each other's writes in completion order.
//!
//! Waits: `WaitForChange` arms the exclusive monitor on the word's line and sleeps in
//! WFE; `Wfe` sleeps until an event. A sleep ends at the first of: another agent's
//! write to the monitored line, an SEV (a CMD_SYNC completed with SIG_SEV), the arm64
//! event stream tick (every `event_stream_period_us`, multiples of it from time 0), or
//! an interrupt becoming pending (masked or not: WFE wakes on it). Waking costs
//! `wfe_wake_ns`. WFE with an event already registered, or an interrupt already
//! pending, returns at once. Time asleep is not busy time.
//!
//! Not modelled: SMMU translation of the NIC's reads (the IOTLB is not on the TX
//! path), the secondary command queues of CMDQV/ECMDQ.

use hdrhistogram::Histogram;
use iommu_sim::smmuv3::{
    CmdqCounters, ConsumeEffect, QueuePtr, Smmu, SmmuConfig, SmmuFeatures, SyncCompletion,
};
use pid_model::{Agent, DataLine, LineOp, Words};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sim_core::{Duration, SimTime};

use super::cpu::{CpuState, Task, TaskCo, TaskKind, TaskOp};
use super::scenario::{Arch, Scenario, ScenarioError};
pub use super::smmu_costs::{FetchSnoop, IoWriteLands, MsiCompletion, SmmuHostCosts};
use super::task::TaskIssued;
use super::{Event, System, LATENCY_MAX_NS};
use crate::engine::{Coroutine, Priority, RngStreams};
pub use crate::kernel::smmu::CmdqLock;
use crate::kernel::smmu::{
    dma_unmap, issue_sync, CmdqDriver, HostWord, Llq, SmmuCpuOp, SmmuCpuPort,
};
use crate::report::LatencySummary;

/// Scenario `[smmu]`: the SMMU of an `arch = "arm"` system as its driver finds it.
/// Its command-queue timing is the platform's `costs.smmu_cmdq`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SmmuSetup {
    /// SMMU_IDR0.MSI, COHACC and SEV.
    pub features: SmmuFeatures,
    /// Firmware's coherency attribute (IORT / `dma-coherent`), which Linux prefers
    /// over COHACC; unset: the same as COHACC.
    pub firmware_coherent: Option<bool>,
    /// The inverse of Linux's `arm_smmu_v3.disable_msipolling`. Default true.
    pub msi_polling_enabled: bool,
    /// Command-queue size, log2 entries (SMMU_CMDQ_BASE.LOG2SIZE). Default 8; Linux
    /// needs at least 7.
    pub cmdq_log2_entries: u8,
    /// The kernel's command-queue lock: `"andnot-release"` (Linux since 2026, the
    /// default) or `"set-release"` (v5.5 to 2025, which can starve shared waiters).
    pub cmdq_lock: CmdqLock,
}

impl Default for SmmuSetup {
    fn default() -> Self {
        SmmuSetup {
            features: SmmuFeatures::default(),
            firmware_coherent: None,
            msi_polling_enabled: true,
            cmdq_log2_entries: 8,
            cmdq_lock: CmdqLock::default(),
        }
    }
}

impl SmmuSetup {
    /// The SMMU model's configuration, with the platform's queue costs.
    pub fn config(&self, costs: &iommu_sim::smmuv3::CmdqCosts) -> SmmuConfig {
        let mut c = SmmuConfig {
            features: self.features,
            firmware_coherent: self.firmware_coherent,
            msi_polling_enabled: self.msi_polling_enabled,
            ..SmmuConfig::default()
        };
        c.cmdq.log2_entries = self.cmdq_log2_entries;
        c.cmdq.costs = costs.clone();
        c
    }
}

/// What each call of an SMMU load does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SmmuWorkload {
    /// A CMD_SYNC alone (`issue_sync`): "CMD_SYNC on an empty queue".
    SyncOnly,
    /// A strict-mode unmap of one buffer of `pages` 4 KiB pages: PTE clear, one TLBI
    /// per page, one CMD_SYNC.
    Unmap {
        /// Pages per buffer, 1..=4096.
        pages: u32,
    },
}

/// Scenario `[[smmu_loads]]`: CPUs that call Linux's command-queue algorithms in a
/// closed loop, each call in thread context followed by `think_ns` of other work.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmmuLoadConfig {
    /// Name in reports; empty means `smmu_loadI`.
    #[serde(default)]
    pub name: String,
    /// The calling CPUs; each runs its own loop.
    pub cpus: Vec<u32>,
    /// What each call does.
    pub workload: SmmuWorkload,
    /// Time between a call's return and the next call, ns (the rest of a TX
    /// completion per buffer, say). Default 1000: assumption.
    #[serde(default = "default_think_ns")]
    pub think_ns: f64,
    /// Uniform jitter on `think_ns`, as a fraction 0 <= x < 1. Default 0.2.
    #[serde(default = "default_jitter")]
    pub think_jitter: f64,
    /// Calls per CPU before its loop stops; unset means no limit.
    #[serde(default)]
    pub calls: Option<u64>,
    /// Calls that start before this are not measured, us. Default 0.
    #[serde(default)]
    pub warmup_us: f64,
    /// ASID of the unmapped buffers' domain. Default 1.
    #[serde(default = "default_asid")]
    pub asid: u16,
}

fn default_think_ns() -> f64 {
    1000.0
}
fn default_jitter() -> f64 {
    0.2
}
fn default_asid() -> u16 {
    1
}

/// Checks `sc.smmu` and `sc.smmu_loads`.
pub(super) fn validate(sc: &Scenario) -> Result<(), ScenarioError> {
    if sc.arch != Arch::Arm {
        if !sc.smmu_loads.is_empty() {
            return Err(ScenarioError::invalid(
                "smmu_loads",
                format!("{} loads with arch = \"x86\"", sc.smmu_loads.len()),
                "arch = \"arm\": the SMMUv3 command queue is an Arm part",
            ));
        }
        return Ok(());
    }
    sc.smmu
        .config(&sc.costs.smmu_cmdq)
        .validate()
        .map_err(|e| ScenarioError::invalid_from("smmu", e))?;
    if sc.smmu.cmdq_log2_entries < crate::kernel::smmu::MIN_LINUX_QUEUE_LOG2 {
        return Err(ScenarioError::invalid(
            "smmu.cmdq_log2_entries",
            sc.smmu.cmdq_log2_entries,
            "7..=19 (Linux needs room for a 64-command batch and a CMD_SYNC)",
        ));
    }
    let n = sc.cpus.count;
    for (i, l) in sc.smmu_loads.iter().enumerate() {
        let f = |name: &str| format!("smmu_loads[{i}].{name}");
        if l.cpus.is_empty() {
            return Err(ScenarioError::invalid(f("cpus"), "[]", "at least one CPU"));
        }
        for (j, &c) in l.cpus.iter().enumerate() {
            if c >= n {
                return Err(ScenarioError::invalid(
                    format!("smmu_loads[{i}].cpus[{j}]"),
                    c,
                    format!("a CPU 0..{n}"),
                ));
            }
            if l.cpus[..j].contains(&c) {
                // One caller per CPU: a second would share the first's random stream.
                return Err(ScenarioError::invalid(
                    format!("smmu_loads[{i}].cpus[{j}]"),
                    c,
                    "each CPU once",
                ));
            }
        }
        if let SmmuWorkload::Unmap { pages } = l.workload {
            if !(1..=4096).contains(&pages) {
                return Err(ScenarioError::invalid(
                    f("workload.pages"),
                    pages,
                    "1..=4096",
                ));
            }
        }
        if !(l.think_ns.is_finite() && (0.0..=1e12).contains(&l.think_ns)) {
            return Err(ScenarioError::invalid(
                f("think_ns"),
                l.think_ns,
                "0..=1e12 ns",
            ));
        }
        if !(0.0..1.0).contains(&l.think_jitter) {
            return Err(ScenarioError::invalid(
                f("think_jitter"),
                l.think_jitter,
                "0 <= x < 1",
            ));
        }
        if !(l.warmup_us.is_finite() && l.warmup_us >= 0.0 && l.warmup_us < sc.duration_us) {
            return Err(ScenarioError::invalid(
                f("warmup_us"),
                l.warmup_us,
                "0 <= x < duration_us",
            ));
        }
    }
    Ok(())
}

/// One CPU of an SMMU load.
struct LoadCpu {
    cpu: u32,
    rng: ChaCha8Rng,
    queued: u64,
    left: Option<u64>,
    calls: u64,
}

/// One SMMU load's state and counters.
struct SmmuLoad {
    name: String,
    workload: SmmuWorkload,
    think_ns: f64,
    jitter: f64,
    asid: u16,
    warmup: SimTime,
    cpus: Vec<LoadCpu>,
    started: u64,
    completed: u64,
    measured: u64,
    latency: Histogram<u64>,
}

/// A CPU's WFE and monitor state.
#[derive(Clone, Copy, Debug, Default)]
struct WaitState {
    /// The event register (set by an SEV reaching a CPU that is not asleep).
    event: bool,
    /// The line whose exclusive monitor is armed while asleep.
    monitor: Option<usize>,
    /// Asleep in WFE (a timer or a write can wake it).
    asleep: bool,
    /// Invalidates stale wake-ups and ticks.
    generation: u64,
    /// SMMU_CMDQ_CONS as the last `readl` sampled it.
    sampled_cons: u32,
}

/// One shared line of the queue and its name.
struct NamedLine {
    name: String,
    line: DataLine,
}

/// What the CPUs and the SMMU did on the command queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SmmuHostCounters {
    /// Calls that published PROD (owners).
    pub owners: u64,
    /// CAS attempts on llq, and those that found it changed and retried.
    pub llq_cas: u64,
    /// CAS attempts on llq that lost the race.
    pub llq_cas_failed: u64,
    /// Entries into the queue-full wait (its exclusive trylock attempt).
    pub full_waits: u64,
    /// WFE or monitor waits that slept.
    pub sleeps: u64,
    /// Sleeps ended by another agent's write of the monitored line.
    pub wakes_by_monitor: u64,
    /// Sleeps ended by an SEV from the SMMU.
    pub wakes_by_sev: u64,
    /// Sleeps ended by the event-stream tick.
    pub wakes_by_event_stream: u64,
    /// Sleeps ended (or skipped) because an interrupt was pending.
    pub wakes_by_interrupt: u64,
    /// `cpu_relax()` calls.
    pub cpu_relax: u64,
    /// `udelay()` calls and their microseconds.
    pub udelays: u64,
    /// Microseconds of `udelay()`.
    pub udelay_us: u64,
    /// MMIO reads of SMMU_CMDQ_CONS.
    pub cons_reads: u64,
    /// MMIO writes of SMMU_CMDQ_PROD.
    pub prod_writes: u64,
    /// Commands the SMMU refused (the queue stops at an illegal command): a fault of
    /// the issuing software, counted, never a crash.
    pub command_errors: u64,
}

/// The host side of the command queue: shared lines, each CPU's wait state, loads.
pub(super) struct SmmuHost {
    pub drv: CmdqDriver,
    /// The SMMU's identity among the agents sharing lines.
    agent: Agent,
    lines: Vec<NamedLine>,
    valid_base: usize,
    slot_base: usize,
    waits: Vec<WaitState>,
    loads: Vec<SmmuLoad>,
    /// Per CPU, the loads (and the CPU's index in each) it calls for.
    called_by: Vec<Vec<(u16, u16)>>,
    counters: SmmuHostCounters,
    /// Per CPU, when its current `issue_cmdlist` masked interrupts.
    call_start: Vec<Option<SimTime>>,
    /// Every `issue_cmdlist` call by any task (loads and transmit paths), from
    /// masking interrupts to unmasking them, ns.
    calls: Histogram<u64>,
    /// Per CPU, when it issued the PROD write of its current call.
    prod_written: Vec<Option<SimTime>>,
    /// From a CPU's PROD write to its `poll_until_sync` returning, ns.
    poll_windows: Histogram<u64>,
}

/// `llq` lives in word 0 of its line; `owner_prod` and `lock` share the next line.
const LLQ_LINE: usize = 0;
const OWNER_LOCK_LINE: usize = 1;
const WORDS_PER_LINE: u32 = 8;
const SLOTS_PER_LINE: u32 = 4;

impl SmmuHost {
    pub(super) fn new(
        sc: &Scenario,
        smmu: &Smmu,
        streams: &RngStreams,
    ) -> Result<SmmuHost, ScenarioError> {
        let g = smmu.cmdq.geometry();
        let drv = CmdqDriver::new(g, smmu.cmdq.base(), smmu.sync_poll_mode())
            .map_err(|e| ScenarioError::invalid_from("smmu.cmdq_log2_entries", e))?
            .with_lock(sc.smmu.cmdq_lock);
        let mut lines = vec![
            NamedLine {
                name: "cmdq/llq".into(),
                line: DataLine::with_data(Words::default(), 0),
            },
            NamedLine {
                name: "cmdq/owner_prod+lock".into(),
                line: DataLine::with_data(Words::default(), 0),
            },
        ];
        let valid_base = lines.len();
        for i in 0..drv.valid_map_words().div_ceil(WORDS_PER_LINE) {
            lines.push(NamedLine {
                name: format!("cmdq/valid_map/{i}"),
                line: DataLine::with_data(Words::default(), 0),
            });
        }
        let slot_base = lines.len();
        for i in 0..g.entries().div_ceil(SLOTS_PER_LINE) {
            lines.push(NamedLine {
                name: format!("cmdq/slots/{i}"),
                line: DataLine::with_data(Words::default(), 0),
            });
        }
        let mut called_by = vec![Vec::new(); sc.cpus.count as usize];
        let loads = sc
            .smmu_loads
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let name = sc.smmu_load_name(i);
                let cpus = l
                    .cpus
                    .iter()
                    .enumerate()
                    .map(|(j, &cpu)| {
                        called_by[cpu as usize].push((i as u16, j as u16));
                        LoadCpu {
                            cpu,
                            rng: streams.stream(&super::stream_names::load_cpu(&name, cpu)),
                            queued: 0,
                            left: l.calls,
                            calls: 0,
                        }
                    })
                    .collect();
                SmmuLoad {
                    name,
                    workload: l.workload,
                    think_ns: l.think_ns,
                    jitter: l.think_jitter,
                    asid: l.asid,
                    warmup: SimTime::ZERO + Duration::from_ns_f64(l.warmup_us * 1e3),
                    cpus,
                    started: 0,
                    completed: 0,
                    measured: 0,
                    latency: Histogram::new_with_bounds(1, LATENCY_MAX_NS, 3)
                        .expect("static histogram bounds are valid"),
                }
            })
            .collect();
        Ok(SmmuHost {
            drv,
            agent: Agent::dma(0, 0),
            lines,
            valid_base,
            slot_base,
            waits: vec![WaitState::default(); sc.cpus.count as usize],
            loads,
            called_by,
            counters: SmmuHostCounters::default(),
            call_start: vec![None; sc.cpus.count as usize],
            calls: Histogram::new_with_bounds(1, LATENCY_MAX_NS, 3)
                .expect("static histogram bounds are valid"),
            prod_written: vec![None; sc.cpus.count as usize],
            poll_windows: Histogram::new_with_bounds(1, LATENCY_MAX_NS, 3)
                .expect("static histogram bounds are valid"),
        })
    }

    /// The line of `word` and the word's index in it.
    fn place(&self, word: HostWord) -> (usize, usize) {
        let g = self.drv.geometry;
        match word {
            HostWord::Llq => (LLQ_LINE, 0),
            HostWord::OwnerProd => (OWNER_LOCK_LINE, 0),
            HostWord::Lock => (OWNER_LOCK_LINE, 1),
            HostWord::ValidMap(i) => (
                self.valid_base + (i / WORDS_PER_LINE) as usize,
                (i % WORDS_PER_LINE) as usize,
            ),
            HostWord::CmdqSlot(i) => self.slot_place(g.idx(QueuePtr(i))),
        }
    }

    fn slot_place(&self, idx: u32) -> (usize, usize) {
        (
            self.slot_base + (idx / SLOTS_PER_LINE) as usize,
            (idx % SLOTS_PER_LINE * 2) as usize,
        )
    }

    fn peek(&self, word: HostWord, smmu: &Smmu) -> u64 {
        match word {
            HostWord::CmdqSlot(i) => smmu.cmdq.entry_word0(QueuePtr(i)) as u64,
            w => {
                let (l, i) = self.place(w);
                self.lines[l].line.data().0[i]
            }
        }
    }
}

/// The line access an SMMU host operation makes, if any: (word, is a write).
fn line_word_of(op: SmmuCpuOp) -> Option<(HostWord, bool)> {
    Some(match op {
        SmmuCpuOp::Load(w) | SmmuCpuOp::WaitForChange { word: w, .. } => (w, false),
        SmmuCpuOp::Store { word, .. }
        | SmmuCpuOp::Cas { word, .. }
        | SmmuCpuOp::FetchAdd { word, .. }
        | SmmuCpuOp::FetchXor { word, .. } => (word, true),
        SmmuCpuOp::StoreLlqCons(_) | SmmuCpuOp::FetchAndNotProd { .. } => (HostWord::Llq, true),
        SmmuCpuOp::FetchAndNotLock { .. } => (HostWord::Lock, true),
        SmmuCpuOp::WriteEntry { index, .. } => (HostWord::CmdqSlot(index), true),
        _ => return None,
    })
}

/// The line model's class of an access: a load, a plain store, or an atomic.
fn access_op(op: SmmuCpuOp, word: usize, value: u64) -> LineOp {
    match op {
        SmmuCpuOp::Load(_) | SmmuCpuOp::WaitForChange { .. } => LineOp::Load { word },
        SmmuCpuOp::Store { .. } | SmmuCpuOp::StoreLlqCons(_) | SmmuCpuOp::WriteEntry { .. } => {
            LineOp::Store { word, value }
        }
        _ => LineOp::Xchg { word, value },
    }
}

impl System {
    fn host(&mut self) -> &mut SmmuHost {
        &mut self
            .arm
            .as_mut()
            .expect("SMMU host operations run on Arm systems")
            .host
    }

    /// Schedules every SMMU load CPU's first call.
    pub(super) fn start_smmu_loads(&mut self) {
        let Some(arm) = self.arm.as_ref() else { return };
        let mut first = Vec::new();
        for (l, load) in arm.host.loads.iter().enumerate() {
            for j in 0..load.cpus.len() {
                first.push((l as u16, j as u16));
            }
        }
        let now = self.now();
        for (load, cpu_index) in first {
            self.queue.schedule(
                now,
                Priority::DEVICE,
                Event::SmmuCallRequest { load, cpu_index },
            );
        }
    }

    /// A load's CPU wants its next call.
    pub(super) fn on_smmu_call_request(&mut self, now: SimTime, load: u16, cpu_index: u16) {
        let lc = &mut self.host().loads[load as usize].cpus[cpu_index as usize];
        if lc.left == Some(0) {
            return;
        }
        if let Some(left) = lc.left.as_mut() {
            *left -= 1;
        }
        lc.queued += 1;
        let cpu = lc.cpu;
        self.try_take_interrupt(now, cpu);
    }

    /// Starts the next queued SMMU call of `cpu` as its task. Returns whether one
    /// started.
    pub(super) fn start_queued_smmu_call(&mut self, now: SimTime, cpu: u32) -> bool {
        let Some(arm) = self.arm.as_mut() else {
            return false;
        };
        let host = &mut arm.host;
        let Some((load, cpu_index)) = host.called_by[cpu as usize]
            .iter()
            .copied()
            .find(|&(l, j)| host.loads[l as usize].cpus[j as usize].queued > 0)
        else {
            return false;
        };
        let drv = host.drv;
        let l = &mut host.loads[load as usize];
        l.started += 1;
        let (workload, asid) = (l.workload, l.asid);
        let lc = &mut l.cpus[cpu_index as usize];
        lc.queued -= 1;
        let seq = lc.calls;
        lc.calls += 1;
        let co = Coroutine::new(move |port| async move {
            let cpu_port = SmmuCpuPort::new(port);
            match workload {
                SmmuWorkload::SyncOnly => {
                    issue_sync(&cpu_port, &drv).await;
                }
                SmmuWorkload::Unmap { pages } => {
                    let iova = load_iova(cpu, seq, pages);
                    dma_unmap(&cpu_port, &drv, asid, iova, pages).await;
                }
            }
        });
        self.cpus[cpu as usize].task = Some(Task::new(
            TaskCo::Smmu(co),
            TaskKind::SmmuLoad { load, cpu_index },
            now,
        ));
        true
    }

    /// A load's call returned at `now`; its latency counts from `start`.
    pub(super) fn smmu_call_done(
        &mut self,
        now: SimTime,
        load: u16,
        cpu_index: u16,
        start: SimTime,
    ) {
        let host = self.host();
        let l = &mut host.loads[load as usize];
        l.completed += 1;
        if start >= l.warmup {
            l.measured += 1;
            l.latency
                .saturating_record(now.since(start).as_ps().div_ceil(1000).max(1));
        }
        let lc = &mut l.cpus[cpu_index as usize];
        let f = 1.0 + l.jitter * (lc.rng.gen::<f64>() * 2.0 - 1.0);
        let think = Duration::from_ns_f64(l.think_ns * f);
        self.queue.schedule(
            now + think,
            Priority::DEVICE,
            Event::SmmuCallRequest { load, cpu_index },
        );
    }

    /// Issues an SMMU host or NIC-driver operation of the running task.
    pub(super) fn issue_task_smmu_op(
        &mut self,
        now: SimTime,
        cpu: u32,
        op: SmmuCpuOp,
    ) -> TaskIssued {
        if let SmmuCpuOp::Tx(tx) = op {
            return self.issue_tx_op(now, cpu, tx);
        }
        let c = cpu as usize;
        let freq = self.freq;
        let k = self.costs.smmu_host;
        let task = self.active_task(cpu).expect("running");
        if task.issue_start.is_none() && !matches!(op, SmmuCpuOp::ClearPtes { .. }) {
            task.issue_start = Some(now);
        }
        let cost = match op {
            SmmuCpuOp::LocalIrqSave => {
                task.irq_off += 1;
                let host = self.host();
                if host.call_start[c].is_none() {
                    // A new call: a PROD write of an earlier call without a sync
                    // does not start this call's poll window.
                    host.prod_written[c] = None;
                }
                host.call_start[c].get_or_insert(now);
                freq.cycles_f64(k.irq_mask_cycles)
            }
            SmmuCpuOp::LocalIrqRestore => {
                task.irq_off = task.irq_off.saturating_sub(1);
                freq.cycles_f64(k.irq_mask_cycles)
            }
            SmmuCpuOp::CmdlistReturned => {
                // The whole call, waits for space (with interrupts unmasked) included.
                let host = self.host();
                record_since(&mut host.calls, host.call_start[c].take(), now);
                Duration::ZERO
            }
            SmmuCpuOp::WriteProd(_) => {
                self.host().prod_written[c] = Some(now);
                freq.cycles_f64(k.mmio_write_cycles)
            }
            SmmuCpuOp::SyncPolled => {
                let host = self.host();
                record_since(&mut host.poll_windows, host.prod_written[c].take(), now);
                Duration::ZERO
            }
            SmmuCpuOp::ReadCons => {
                let gen = self.host().waits[c].generation;
                self.queue.schedule(
                    now + k.cons_read_sample(),
                    Priority::CPU,
                    Event::SmmuConsSample {
                        cpu,
                        generation: gen,
                    },
                );
                self.host().counters.cons_reads += 1;
                k.cons_read()
            }
            SmmuCpuOp::Wfe => {
                if std::mem::take(&mut self.host().waits[c].event) {
                    freq.cycles_f64(k.cpu_relax_cycles)
                } else {
                    return self.smmu_sleep(now, cpu, op, None);
                }
            }
            SmmuCpuOp::CpuRelax => {
                self.host().counters.cpu_relax += 1;
                freq.cycles_f64(k.cpu_relax_cycles)
            }
            SmmuCpuOp::Udelay(us) => {
                let h = self.host();
                h.counters.udelays += 1;
                h.counters.udelay_us += us as u64;
                Duration::from_us(us as u64)
            }
            SmmuCpuOp::ReadClockNs => Duration::from_ns_f64(k.clock_read_ns),
            SmmuCpuOp::ClearPtes { pages, .. } => {
                Duration::from_ns_f64(k.pte_clear_ns * pages as f64)
            }
            SmmuCpuOp::Tx(_) => unreachable!("handled above"),
            line_op => {
                if let SmmuCpuOp::WaitForChange { .. } = line_op {
                    // sevl; wfe clears the event register before the exclusive load.
                    self.host().waits[c].event = false;
                }
                let (word, _) = line_word_of(line_op).expect("every other op touches a line");
                let agent = self.cpus[c].agent;
                let arm = self.arm.as_mut().expect("arm");
                let (l, w) = arm.host.place(word);
                let line = &mut arm.host.lines[l].line;
                let access = access_op(line_op, w, 0);
                line.timed_cost_priced(agent, &access, now, &self.line_prices)
            }
        };
        self.cpus[c].time.smmu += cost;
        self.emit_cpu_span(cpu, now, cost, || super::CpuActivity::Smmu { op });
        TaskIssued::Busy(cost, 0)
    }

    /// Applies an SMMU host operation at its completion and returns its value, or
    /// `None` when it turned into a wait.
    pub(super) fn complete_task_smmu_op(
        &mut self,
        now: SimTime,
        cpu: u32,
        op: SmmuCpuOp,
    ) -> Option<u64> {
        if let SmmuCpuOp::Tx(tx) = op {
            return Some(self.complete_tx_op(now, cpu, tx));
        }
        let c = cpu as usize;
        let agent = self.cpus[c].agent;
        match op {
            SmmuCpuOp::WriteProd(p) => {
                self.host().counters.prod_writes += 1;
                let at = now + self.costs.smmu_host.prod_write_flight();
                self.queue
                    .schedule(at, Priority::IOMMU, Event::SmmuProdArrive { prod: p });
                return Some(0);
            }
            SmmuCpuOp::ReadCons => return Some(self.host().waits[c].sampled_cons as u64),
            SmmuCpuOp::ReadClockNs => return Some(now.as_ps() / 1000),
            SmmuCpuOp::Wfe
            | SmmuCpuOp::CpuRelax
            | SmmuCpuOp::Udelay(_)
            | SmmuCpuOp::ClearPtes { .. }
            | SmmuCpuOp::SyncPolled
            | SmmuCpuOp::CmdlistReturned
            | SmmuCpuOp::LocalIrqSave
            | SmmuCpuOp::LocalIrqRestore => return Some(0),
            _ => {}
        }
        let (word, write) = line_word_of(op).expect("a line operation");
        let arm = self.arm.as_mut().expect("arm");
        let (host, smmu) = (&mut arm.host, &mut arm.smmu);
        let prev = host.peek(word, smmu);
        let (l, w) = host.place(word);
        let new = match op {
            SmmuCpuOp::Store { value, .. } => value,
            SmmuCpuOp::StoreLlqCons(cons) => Llq::new(Llq(prev).prod(), cons).0,
            SmmuCpuOp::Cas { old, new, .. } => {
                if word == HostWord::Llq {
                    host.counters.llq_cas += 1;
                    host.counters.llq_cas_failed += (prev != old) as u64;
                }
                if word == HostWord::Lock
                    && old == 0
                    && new == crate::kernel::smmu::LOCK_EXCLUSIVE as u64
                {
                    host.counters.full_waits += 1;
                }
                if prev == old {
                    new
                } else {
                    prev
                }
            }
            SmmuCpuOp::FetchAdd { delta, .. } => (prev as u32).wrapping_add(delta as u32) as u64,
            SmmuCpuOp::FetchXor { mask, .. } => prev ^ mask,
            SmmuCpuOp::FetchAndNotProd { mask } => prev & !(mask as u64),
            SmmuCpuOp::FetchAndNotLock { mask } => prev & !(mask as u64),
            SmmuCpuOp::WriteEntry { index, cmd } => {
                smmu.cmdq.write_entry(QueuePtr(index), cmd);
                cmd[0]
            }
            _ => prev,
        };
        let _ = host.lines[l].line.perform(agent, access_op(op, w, new));
        if write {
            self.wake_monitors(now, l, Some(cpu));
        }
        if let SmmuCpuOp::WaitForChange { seen, .. } = op {
            if prev == seen {
                if self.interrupt_pending(cpu) {
                    // WFE with an interrupt pending (masked here) returns at once.
                    self.host().counters.wakes_by_interrupt += 1;
                    return Some(0);
                }
                let _ = self.smmu_sleep(now, cpu, op, Some(l));
                return None;
            }
        }
        // Only the owner clears OWNED.
        if matches!(op, SmmuCpuOp::FetchAndNotProd { .. }) {
            self.host().counters.owners += 1;
        }
        Some(match op {
            SmmuCpuOp::Load(_)
            | SmmuCpuOp::Cas { .. }
            | SmmuCpuOp::FetchAdd { .. }
            | SmmuCpuOp::FetchXor { .. }
            | SmmuCpuOp::FetchAndNotProd { .. }
            | SmmuCpuOp::FetchAndNotLock { .. } => prev,
            _ => 0,
        })
    }

    /// The running task of `cpu` sleeps in WFE on `op` (monitoring line `monitor`),
    /// unless an interrupt is pending, which makes WFE return at once.
    fn smmu_sleep(
        &mut self,
        now: SimTime,
        cpu: u32,
        op: SmmuCpuOp,
        monitor: Option<usize>,
    ) -> TaskIssued {
        let c = cpu as usize;
        if self.interrupt_pending(cpu) {
            self.host().counters.wakes_by_interrupt += 1;
            let cost = self.freq.cycles_f64(self.costs.smmu_host.cpu_relax_cycles);
            self.cpus[c].time.smmu += cost;
            return TaskIssued::Busy(cost, 0);
        }
        let period = Duration::from_ns_f64(self.costs.smmu_host.event_stream_period_us * 1e3)
            .as_ps()
            .max(1);
        let host = self.host();
        host.counters.sleeps += 1;
        let w = &mut host.waits[c];
        w.asleep = true;
        w.generation += 1;
        w.monitor = monitor;
        let generation = w.generation;
        let tick = SimTime((now.as_ps() / period + 1) * period);
        self.queue
            .schedule(tick, Priority::CPU, Event::SmmuTick { cpu, generation });
        self.active_task(cpu).expect("running").wait = Some((TaskOp::Smmu(op), now));
        self.cpus[c].state = CpuState::Waiting;
        self.cpus[c].activity_end = now;
        TaskIssued::Parked
    }

    /// Ends `cpu`'s WFE sleep: it resumes `wfe_wake_ns` later.
    fn smmu_wake(&mut self, now: SimTime, cpu: u32) {
        let c = cpu as usize;
        let wake = Duration::from_ns_f64(self.costs.smmu_host.wfe_wake_ns);
        let w = &mut self.host().waits[c];
        if !w.asleep {
            return;
        }
        w.asleep = false;
        w.monitor = None;
        w.event = false;
        w.generation += 1;
        let generation = w.generation;
        self.queue.schedule(
            now + wake,
            Priority::CPU,
            Event::SmmuWake { cpu, generation },
        );
    }

    /// An interrupt the task will take ends its WFE sleep now.
    pub(super) fn smmu_wait_broken(&mut self, _now: SimTime, cpu: u32) {
        let w = &mut self.host().waits[cpu as usize];
        w.asleep = false;
        w.monitor = None;
        w.generation += 1;
        self.host().counters.wakes_by_interrupt += 1;
    }

    /// An interrupt became pending on `cpu`, which has interrupts masked: a WFE
    /// sleep ends (the interrupt stays pending).
    pub(super) fn smmu_wake_for_interrupt(&mut self, now: SimTime, cpu: u32) {
        let asleep = self
            .arm
            .as_ref()
            .is_some_and(|a| a.host.waits[cpu as usize].asleep);
        if asleep {
            self.host().counters.wakes_by_interrupt += 1;
            self.smmu_wake(now, cpu);
        }
    }

    /// Another agent wrote line `l`: every CPU monitoring it wakes.
    fn wake_monitors(&mut self, now: SimTime, l: usize, except: Option<u32>) {
        let n = self.cpus.len() as u32;
        for cpu in 0..n {
            if Some(cpu) == except {
                continue;
            }
            let w = &self.host().waits[cpu as usize];
            if w.asleep && w.monitor == Some(l) {
                self.host().counters.wakes_by_monitor += 1;
                self.smmu_wake(now, cpu);
            }
        }
    }

    /// A wake-up of `cpu` after `wfe_wake_ns`: its wait returns.
    pub(super) fn on_smmu_wake(&mut self, now: SimTime, cpu: u32, generation: u64) {
        if self.host().waits[cpu as usize].generation != generation {
            return;
        }
        // Waking is busy time; sleeping is not.
        let wake = Duration::from_ns_f64(self.costs.smmu_host.wfe_wake_ns);
        self.cpus[cpu as usize].time.smmu += wake;
        self.end_wait(now, cpu, 0);
    }

    /// The event-stream tick reaches a sleeping CPU.
    pub(super) fn on_smmu_tick(&mut self, now: SimTime, cpu: u32, generation: u64) {
        let w = &self.host().waits[cpu as usize];
        if w.generation == generation && w.asleep {
            self.host().counters.wakes_by_event_stream += 1;
            self.smmu_wake(now, cpu);
        }
    }

    /// The CONS read of `cpu` samples the register.
    pub(super) fn on_smmu_cons_sample(&mut self, cpu: u32, generation: u64) {
        let arm = self.arm.as_mut().expect("arm");
        let w = &mut arm.host.waits[cpu as usize];
        if w.generation == generation {
            w.sampled_cons = arm.smmu.cmdq.read_cons();
        }
    }

    /// The PROD write reaches the SMMU.
    pub(super) fn on_smmu_prod_arrive(&mut self, now: SimTime, prod: u32) {
        let arm = self.arm.as_mut().expect("arm");
        if arm.smmu.cmdq.write_prod(now, prod).is_err() {
            arm.host.counters.command_errors += 1;
            return;
        }
        self.smmu_try_consume(now);
    }

    pub(super) fn smmu_try_consume(&mut self, now: SimTime) {
        let arm = self.arm.as_mut().expect("arm");
        // Only a fetch that happens may claim the line (its transfer occupies it).
        if !arm.smmu.cmdq.can_start(now) {
            return;
        }
        let cons = arm.smmu.cmdq.cons();
        let (l, w) = arm.host.slot_place(arm.smmu.cmdq.geometry().idx(cons));
        let agent = arm.host.agent;
        // A line fetch is a coherent read at the line's home: to the compute die and
        // back, plus the line model's price of the read there (a snoop of the core
        // that wrote the command), whose legs on the die that price already holds.
        let memory_path = if arm.smmu.cmdq.fetches_line() {
            let hop = self.costs.smmu_host.smmu_to_compute_die();
            let read = LineOp::Load { word: w };
            let at_home = arm.host.lines[l].line.timed_cost_priced(
                agent,
                &read,
                now + hop,
                &self.line_prices,
            );
            hop + at_home + hop
        } else {
            Duration::ZERO
        };
        if let Some(start) = arm.smmu.next_consume_with_fetch(now, memory_path) {
            // The SMMU's fetch snoops the slot's line: per `fetch_snoop`, the writer
            // keeps its Modified copy (SnpOnce) or drops to S.
            let line = &mut arm.host.lines[l].line;
            match self.costs.smmu_host.fetch_snoop {
                FetchSnoop::Keep => {
                    let _ = line
                        .snapshot_read(agent, w)
                        .expect("the SMMU is a DMA agent and slots are words of a line");
                }
                FetchSnoop::Share => {
                    let _ = line.perform(agent, LineOp::Load { word: w });
                }
            }
            self.queue
                .schedule(start.done_at, Priority::IOMMU, Event::SmmuConsumeDone);
        }
    }

    /// The command in flight is consumed.
    pub(super) fn on_smmu_consume_done(&mut self, now: SimTime) {
        let arm = self.arm.as_mut().expect("arm");
        let Ok(out) = arm.smmu.complete_consume(now) else {
            return;
        };
        match out.effect {
            ConsumeEffect::Sync(SyncCompletion::MsiWrite {
                addr,
                data,
                visible_at,
                ..
            }) => {
                // The write travels to the line's home, which invalidates every
                // cached copy (the line model's price of the write, holding its legs
                // on the compute die) before it is visible.
                let k = &self.costs.smmu_host;
                let edge = k.smmu_to_compute_die();
                let (at, home_to_smmu) = match arm.smmu.cmdq.slot_at(addr) {
                    Some(slot) => {
                        let arrive = visible_at + edge;
                        let (l, w) = arm.host.slot_place(arm.smmu.cmdq.geometry().idx(slot));
                        let write = LineOp::Store {
                            word: w,
                            value: data as u64,
                        };
                        let written = arrive
                            + arm.host.lines[l].line.timed_cost_priced(
                                arm.host.agent,
                                &write,
                                arrive,
                                &self.line_prices,
                            );
                        (written, edge)
                    }
                    None => {
                        let whole_path = k.core_to_smmu();
                        (visible_at + whole_path, whole_path)
                    }
                };
                self.queue
                    .schedule(at, Priority::IOMMU, Event::SmmuMsiVisible { addr, data });
                // The home agent's completion response travels back to the SMMU.
                let acked = at + home_to_smmu;
                arm.smmu.cmdq.msi_write_acknowledged_at(acked);
                if self.costs.smmu_host.msi_completion == MsiCompletion::Acknowledged {
                    arm.smmu.cmdq.hold_until(acked);
                    self.queue
                        .schedule(acked, Priority::IOMMU, Event::SmmuResume);
                }
            }
            ConsumeEffect::Sync(SyncCompletion::ConsUpdated { sev: true }) => {
                let at = now + self.costs.smmu_host.core_to_smmu();
                self.queue.schedule(at, Priority::IOMMU, Event::SmmuSev);
            }
            ConsumeEffect::Error(_) => self.host().counters.command_errors += 1,
            _ => {}
        }
        if let Some(o) = self.observer.as_deref_mut() {
            o.event(&super::SimEvent::SmmuConsumed {
                t: now,
                index: out.index.0,
                command: out.command,
            });
        }
        self.smmu_try_consume(now);
    }

    /// An SEV from the SMMU reaches the cores: it is delivered to every one of them
    /// (WFE sleepers wake; the others find their event register set).
    pub(super) fn on_smmu_sev(&mut self, now: SimTime) {
        for cpu in 0..self.cpus.len() as u32 {
            let w = &mut self.host().waits[cpu as usize];
            if w.asleep {
                self.host().counters.wakes_by_sev += 1;
                self.smmu_wake(now, cpu);
            } else {
                w.event = true;
            }
        }
    }

    /// The CMD_SYNC's MSI write lands: the slot's line is written by the SMMU.
    pub(super) fn on_smmu_msi_visible(&mut self, now: SimTime, addr: u64, data: u32) {
        let arm = self.arm.as_mut().expect("arm");
        arm.smmu.cmdq.write_memory32(addr, data);
        if let Some(slot) = arm.smmu.cmdq.slot_at(addr) {
            let (l, w) = arm.host.slot_place(arm.smmu.cmdq.geometry().idx(slot));
            let agent = arm.host.agent;
            let _ = arm.host.lines[l].line.perform(
                agent,
                LineOp::Store {
                    word: w,
                    value: data as u64,
                },
            );
            if self.costs.smmu_host.io_write_lands == IoWriteLands::Memory {
                arm.host.lines[l].line.write_back_to_memory();
            }
            self.wake_monitors(now, l, None);
        }
    }

    /// The command queue in a report.
    pub(super) fn smmu_report(&self) -> Option<SmmuHostReport> {
        let arm = self.arm.as_ref()?;
        let host = &arm.host;
        let now = self.now();
        let loads = host
            .loads
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let window = now.since(l.warmup.min(now));
                let oldest = l
                    .cpus
                    .iter()
                    .filter_map(|lc| self.cpus[lc.cpu as usize].task.as_ref())
                    .filter(
                        |t| matches!(t.kind, TaskKind::SmmuLoad { load, .. } if load as usize == i),
                    )
                    .map(|t| now.since(t.started))
                    .max();
                SmmuLoadReport {
                    name: l.name.clone(),
                    workload: l.workload,
                    cpus: l.cpus.len() as u32,
                    started: l.started,
                    completed: l.completed,
                    measured: l.measured,
                    calls_per_sec: if window.as_ps() > 0 {
                        l.measured as f64 / window.as_secs_f64()
                    } else {
                        0.0
                    },
                    latency_ns: LatencySummary::of(&l.latency),
                    in_flight: l.started - l.completed,
                    oldest_in_flight_ns: oldest.map_or(0.0, |d| d.as_ps() as f64 / 1e3),
                }
            })
            .collect();
        let mut lines: Vec<SmmuLineReport> = host
            .lines
            .iter()
            .filter(|n| !n.line.all_counters().is_empty())
            .map(|n| {
                let (mut accesses, mut misses) = (0, 0);
                for (_, c) in n.line.all_counters() {
                    accesses += c.loads + c.stores_or_rmw;
                    misses += c.l1_misses;
                }
                let o = n.line.occupancy();
                SmmuLineReport {
                    name: n.name.clone(),
                    accesses,
                    misses,
                    waits: o.waits,
                    wait_ns: o.wait_ps as f64 / 1e3,
                }
            })
            .collect();
        lines.sort_by(|a, b| b.wait_ns.total_cmp(&a.wait_ns).then(a.name.cmp(&b.name)));
        lines.truncate(MOST_WAITED_LINES);
        Some(SmmuHostReport {
            poll_mode: host.drv.poll.label(),
            cmdq_lock: host.drv.lock.label(),
            call_latency_ns: LatencySummary::of(&host.calls),
            poll_window_ns: LatencySummary::of(&host.poll_windows),
            loads,
            host: host.counters,
            cmdq: *arm.smmu.cmdq.counters(),
            busiest_lines: lines,
        })
    }
}

/// Records `now - start` in whole nanoseconds (rounded up, at least 1), if there is a
/// start.
fn record_since(h: &mut Histogram<u64>, start: Option<SimTime>, now: SimTime) {
    if let Some(start) = start {
        h.saturating_record(now.since(start).as_ps().div_ceil(1000).max(1));
    }
}

/// Whether a wait of `op` is a WFE sleep (as opposed to a blocked thread).
pub(super) fn is_wfe_wait(op: SmmuCpuOp) -> bool {
    matches!(op, SmmuCpuOp::Wfe | SmmuCpuOp::WaitForChange { .. })
}

/// How many lines the report lists.
const MOST_WAITED_LINES: usize = 8;

/// The IOVA a load's call unmaps: one per (CPU, call), so consumed TLBIs can be
/// traced to their issuer.
pub fn load_iova(cpu: u32, seq: u64, pages: u32) -> u64 {
    (cpu as u64) << 40 | ((seq * pages as u64) & ((1 << 28) - 1)) << 12
}

/// The SMMU command queue in a report (`arch = "arm"`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SmmuHostReport {
    /// How CMD_SYNC completion is awaited: "msi", "cons-wfe" or "cons-spin".
    pub poll_mode: &'static str,
    /// The kernel's command-queue lock: "andnot-release" or "set-release".
    pub cmdq_lock: &'static str,
    /// Every `issue_cmdlist` call (loads and transmit paths), from masking
    /// interrupts to unmasking them, ns.
    pub call_latency_ns: LatencySummary,
    /// From a CPU's PROD write to its `arm_smmu_cmdq_poll_until_sync` returning, over
    /// the calls whose CPU wrote PROD (the owners; a call whose sync another CPU
    /// published is not in it). This is the wait seed 004 quotes (280 vs 190 ns).
    pub poll_window_ns: LatencySummary,
    /// One entry per scenario SMMU load.
    pub loads: Vec<SmmuLoadReport>,
    /// What the CPUs did on the queue, every caller together (loads and unmaps of
    /// transmit paths).
    pub host: SmmuHostCounters,
    /// The SMMU's command-queue counters.
    pub cmdq: CmdqCounters,
    /// The queue's shared lines, longest waits first, named.
    pub busiest_lines: Vec<SmmuLineReport>,
}

/// One SMMU load's outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SmmuLoadReport {
    /// The load's name.
    pub name: String,
    /// What each call did.
    pub workload: SmmuWorkload,
    /// Calling CPUs.
    pub cpus: u32,
    /// Calls started.
    pub started: u64,
    /// Calls returned.
    pub completed: u64,
    /// Calls measured (started after the warm-up).
    pub measured: u64,
    /// Measured calls per simulated second since the warm-up, all CPUs.
    pub calls_per_sec: f64,
    /// From a call's first command-queue operation to its return (CMD_SYNC seen
    /// complete), ns.
    pub latency_ns: LatencySummary,
    /// Calls started and not returned when the run ended (`started - completed`).
    pub in_flight: u64,
    /// How long the oldest of them had been running at the end, ns; 0 if none. A
    /// value near the run's length is a call that never returns (a starved lock).
    pub oldest_in_flight_ns: f64,
}

/// A shared line of the queue.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SmmuLineReport {
    /// `cmdq/llq`, `cmdq/owner_prod+lock`, `cmdq/valid_map/N` or `cmdq/slots/N`.
    pub name: String,
    /// Accesses by every agent.
    pub accesses: u64,
    /// Accesses that missed the requester's cache.
    pub misses: u64,
    /// Transfers that waited for another in flight.
    pub waits: u64,
    /// Their total wait, ns.
    pub wait_ns: f64,
}

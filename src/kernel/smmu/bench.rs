//! A timed harness: N CPUs run Linux's unmap (or bare CMD_SYNC) loop against one SMMU
//! model, for the `smmu-cmdsync` experiment.
//!
//! ```text
//!  CPU 0..N: loop { dma_unmap(1 buffer) | issue_sync ; think }     (kernel::smmu)
//!     │ each SmmuCpuOp priced by a small coherence model of the shared lines
//!     │ (llq, owner_prod+lock, valid map, queue slots) and applied at completion
//!     ▼
//!  Smmu (iommu-sim): PROD write arrives -> consume commands -> CMD_SYNC completes
//!     └─ MSI write into the sync's slot (visible after msi_write_ns; wakes the
//!        monitor of the polling CPU)  or  CONS update (+ SEV to every CPU)
//! ```
//!
//! Coherence model of one shared line: a set of CPUs holding it and at most one
//! owner (Modified). A load by a holder costs an L1 hit; otherwise it waits for any
//! transfer in flight and costs a cross-core transfer (or a memory read when no core
//! has it, e.g. after the SMMU's MSI write). A store or atomic by the sole owner costs
//! a local atomic; otherwise it waits for the line, takes ownership (transfer) and
//! serialises later writers behind it. A write by anyone else (or the SMMU) clears the
//! exclusive monitor of CPUs waiting on that line and wakes them, as on Armv8.
//!
//! Events: WFE sleeps end at the first of: an SEV from the SMMU (SIG_SEV), a write
//! to the monitored line, or the arm64 event stream tick (every
//! `event_stream_period_us`, multiples of it from time 0); waking costs
//! `wfe_wake_ns`. An SEV reaching a CPU that is not sleeping sets its event register,
//! so its next plain WFE returns at once.
//!
//! What a CMD_SYNC costs end to end, by mode: MSI polling pays the SMMU's
//! `msi_write_ns` until its write is coherent, the poller's `wfe_wake_ns`, and the
//! poller's reload of the slot's line from memory (`memory_ns`: the write invalidated
//! its copy). CONS polling pays one `mmio_read_ns` per look at CONS, plus the WFE
//! wait for the SEV, or the spin (`cpu_relax` x 9, then `udelay(1, 2, 4...)`).
//!
//! The run is deterministic: per-CPU think-time jitter comes from ChaCha streams keyed
//! by (seed, `"smmu-bench-cpu<i>"`).

use super::{
    dma_unmap, issue_sync, CmdqDriver, HostWord, IssueReport, Llq, SmmuCpuOp, SmmuCpuPort,
};
use crate::engine::{Coroutine, EventQueue, Priority, RngStreams, Step};
use iommu_sim::smmuv3::{
    CmdqCounters, Command, ConsumeEffect, QueuePtr, Smmu, SmmuConfig, SmmuError, SyncCompletion,
    SyncPollMode,
};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sim_core::{Duration, Freq, SimTime};
use std::cell::Cell;
use std::rc::Rc;
use thiserror::Error;

/// Bad harness configuration.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SmmuHostError {
    /// A field of the harness configuration is out of range.
    #[error("smmu bench field `{field}` = {value}: allowed {allowed}")]
    InvalidConfig {
        /// The field's path, e.g. `cpu_costs.memory_ns`.
        field: &'static str,
        /// The value given.
        value: f64,
        /// What the field accepts.
        allowed: &'static str,
    },
    /// The SMMU model's configuration is invalid.
    #[error(transparent)]
    Smmu(#[from] SmmuError),
}

/// CPU-side costs of the SMMU host path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SmmuCpuCosts {
    /// Load of a line this core holds. Core cycles. Default 4: L1D hit on Skylake-SP
    /// (AnandTech 11550, COST-SOURCES.md); Arm Neoverse cores have a 4-cycle L1D too
    /// (assumption that it carries over).
    pub l1_hit_cycles: f64,
    /// Atomic read-modify-write or store on a line this core owns alone. Core cycles.
    /// Default 20: DESIGN.md section 3.
    pub atomic_local_cycles: f64,
    /// Bringing a line another core holds (load, or ownership for a write).
    /// Nanoseconds. Default 55.6 ns: load of a line Modified in another core, same
    /// socket (FD.io CSIT Cascade Lake, Intel MLC c2c); an x86 figure used for lack of
    /// a published Arm one (assumption that a Neoverse mesh is similar).
    pub line_transfer_ns: f64,
    /// Reading a line no core holds (e.g. after the SMMU wrote it). Nanoseconds.
    /// Default 81 ns: local DRAM idle latency (FD.io CSIT Cascade Lake, Intel MLC).
    pub memory_ns: f64,
    /// Issuing the posted MMIO write to SMMU_CMDQ_PROD. Core cycles. Default 100:
    /// DESIGN.md section 3 ("a posted MMIO write costs on the order of a hundred
    /// cycles").
    pub mmio_write_cycles: f64,
    /// From the PROD write's issue until the SMMU sees it. Nanoseconds. Default
    /// 100 ns: assumption, a trip across the on-chip interconnect to the SMMU.
    pub prod_write_latency_ns: f64,
    /// `readl` of SMMU_CMDQ_CONS, round trip; the value is sampled halfway.
    /// Nanoseconds. Default 300 ns: assumption. COST-SOURCES.md gives 700-740 ns for a
    /// read across PCIe Gen5; the SMMU's registers are on-chip, fewer hops.
    pub mmio_read_ns: f64,
    /// Leaving WFE after the event that ends it. Nanoseconds. Default 50 ns:
    /// assumption (clock-gated standby exit).
    pub wfe_wake_ns: f64,
    /// Period of the arm64 architected-timer event stream that bounds every WFE.
    /// Microseconds. Default 100: Linux `ARCH_TIMER_EVT_STREAM_PERIOD_US`.
    pub event_stream_period_us: f64,
    /// One `cpu_relax()` iteration (YIELD plus the loop). Core cycles. Default 10:
    /// assumption.
    pub cpu_relax_cycles: f64,
    /// `ktime_get()`: reading CNTVCT_EL0 and scaling. Nanoseconds. Default 20 ns:
    /// assumption.
    pub clock_read_ns: f64,
    /// io-pgtable clearing one page's PTE (a mostly cached walk and a store).
    /// Nanoseconds per page. Default 100 ns: assumption.
    pub pte_clear_ns: f64,
}

impl Default for SmmuCpuCosts {
    fn default() -> Self {
        SmmuCpuCosts {
            l1_hit_cycles: 4.0,
            atomic_local_cycles: 20.0,
            line_transfer_ns: 55.6,
            memory_ns: 81.0,
            mmio_write_cycles: 100.0,
            prod_write_latency_ns: 100.0,
            mmio_read_ns: 300.0,
            wfe_wake_ns: 50.0,
            event_stream_period_us: 100.0,
            cpu_relax_cycles: 10.0,
            clock_read_ns: 20.0,
            pte_clear_ns: 100.0,
        }
    }
}

impl SmmuCpuCosts {
    /// Checks that every cost is finite and non-negative and the event stream period
    /// is at least 1 us.
    pub fn validate(&self) -> Result<(), SmmuHostError> {
        let fields = [
            ("cpu_costs.l1_hit_cycles", self.l1_hit_cycles),
            ("cpu_costs.atomic_local_cycles", self.atomic_local_cycles),
            ("cpu_costs.line_transfer_ns", self.line_transfer_ns),
            ("cpu_costs.memory_ns", self.memory_ns),
            ("cpu_costs.mmio_write_cycles", self.mmio_write_cycles),
            (
                "cpu_costs.prod_write_latency_ns",
                self.prod_write_latency_ns,
            ),
            ("cpu_costs.mmio_read_ns", self.mmio_read_ns),
            ("cpu_costs.wfe_wake_ns", self.wfe_wake_ns),
            ("cpu_costs.cpu_relax_cycles", self.cpu_relax_cycles),
            ("cpu_costs.clock_read_ns", self.clock_read_ns),
            ("cpu_costs.pte_clear_ns", self.pte_clear_ns),
        ];
        for (field, value) in fields {
            if !(value.is_finite() && value >= 0.0) {
                return Err(SmmuHostError::InvalidConfig {
                    field,
                    value,
                    allowed: "a finite number >= 0",
                });
            }
        }
        let p = self.event_stream_period_us;
        if !(p.is_finite() && p >= 1.0) {
            return Err(SmmuHostError::InvalidConfig {
                field: "cpu_costs.event_stream_period_us",
                value: p,
                allowed: "a finite number of microseconds >= 1",
            });
        }
        Ok(())
    }
}

/// What each CPU does per iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BenchWorkload {
    /// A CMD_SYNC alone (`issue_sync`): on one CPU, "CMD_SYNC on an empty queue".
    SyncOnly,
    /// A strict-mode unmap of one buffer of `pages` 4 KB pages: PTE clear, one TLBI per
    /// page, one CMD_SYNC (1..=4096 pages).
    Unmap {
        /// Pages per buffer, 1..=4096.
        pages: u32,
    },
}

/// The harness configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CmdSyncBenchConfig {
    /// CPUs issuing, 1..=64.
    pub cpus: u32,
    /// What each CPU does per iteration.
    pub workload: BenchWorkload,
    /// The SMMU: features, `msi_polling_enabled`, queue size and costs.
    pub smmu: SmmuConfig,
    /// CPU-side costs of the host path.
    pub cpu_costs: SmmuCpuCosts,
    /// Core clock. Default 2500 MHz: assumption (a Neoverse N1 server part such as
    /// AWS Graviton2 runs at 2.5 GHz).
    pub cpu_mhz: u32,
    /// CPU time between iterations (the rest of the TX completion per buffer: freeing
    /// the skb and the IOVA). Nanoseconds. Default 1000 ns: assumption.
    pub think_ns: f64,
    /// Uniform jitter on `think_ns`, as a fraction (0..1). Default 0.2.
    pub think_jitter: f64,
    /// Seed of the per-CPU think-time jitter streams.
    pub seed: u64,
    /// Simulated run length. Microseconds. Default 2000.
    pub duration_us: f64,
    /// Iterations that start before this are not measured. Microseconds. Default 100.
    pub warmup_us: f64,
    /// Stop after this many iterations per CPU (then run until every CPU finished,
    /// bounded by `duration_us`). None: run for `duration_us`.
    pub ops_per_cpu: Option<u64>,
    /// ASID of the unmapped buffers' domain.
    pub asid: u16,
}

impl Default for CmdSyncBenchConfig {
    fn default() -> Self {
        CmdSyncBenchConfig {
            cpus: 1,
            workload: BenchWorkload::Unmap { pages: 1 },
            smmu: SmmuConfig::default(),
            cpu_costs: SmmuCpuCosts::default(),
            cpu_mhz: 2500,
            think_ns: 1000.0,
            think_jitter: 0.2,
            seed: 1,
            duration_us: 2000.0,
            warmup_us: 100.0,
            ops_per_cpu: None,
            asid: 1,
        }
    }
}

impl CmdSyncBenchConfig {
    /// Checks every field's range, the cost table and the SMMU configuration.
    pub fn validate(&self) -> Result<(), SmmuHostError> {
        let bad = |field, value: f64, allowed| {
            Err(SmmuHostError::InvalidConfig {
                field,
                value,
                allowed,
            })
        };
        if !(1..=64).contains(&self.cpus) {
            return bad("cpus", self.cpus as f64, "1..=64");
        }
        if let BenchWorkload::Unmap { pages } = self.workload {
            if !(1..=4096).contains(&pages) {
                return bad("workload.pages", pages as f64, "1..=4096");
            }
        }
        if self.cpu_mhz == 0 || self.cpu_mhz > 100_000 {
            return bad("cpu_mhz", self.cpu_mhz as f64, "1..=100000");
        }
        if !(self.think_ns.is_finite() && self.think_ns >= 0.0) {
            return bad("think_ns", self.think_ns, "a finite number >= 0");
        }
        if !(0.0..1.0).contains(&self.think_jitter) {
            return bad("think_jitter", self.think_jitter, "0 <= x < 1");
        }
        if !(self.duration_us.is_finite() && self.duration_us > 0.0 && self.duration_us <= 1e7) {
            return bad("duration_us", self.duration_us, "0 < x <= 1e7");
        }
        if !(self.warmup_us.is_finite()
            && self.warmup_us >= 0.0
            && self.warmup_us < self.duration_us)
        {
            return bad("warmup_us", self.warmup_us, "0 <= x < duration_us");
        }
        self.cpu_costs.validate()?;
        self.smmu.validate()?;
        Ok(())
    }
}

/// What the CPUs did, summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HostCounters {
    /// Iterations (unmaps or bare syncs) CPUs started.
    pub iterations_started: u64,
    /// Iterations that returned.
    pub iterations_done: u64,
    /// Calls that published PROD (owners).
    pub owners: u64,
    /// CAS attempts on llq, and how many lost the race.
    pub llq_cas: u64,
    /// CAS attempts on llq that found it changed and retried.
    pub llq_cas_failed: u64,
    /// Entries into the queue-full wait (its exclusive trylock attempt).
    pub full_waits: u64,
    /// WFE or monitor waits that actually slept.
    pub sleeps: u64,
    /// Sleeping CPUs woken because another agent wrote the monitored line.
    pub wakes_by_monitor: u64,
    /// Sleeping CPUs woken by an SEV from the SMMU.
    pub wakes_by_sev: u64,
    /// Sleeping CPUs woken by the event stream tick.
    pub wakes_by_event_stream: u64,
    /// `cpu_relax()` calls.
    pub cpu_relax: u64,
    /// `udelay()` calls.
    pub udelays: u64,
    /// Microseconds of `udelay()`, all calls together.
    pub udelay_us: u64,
    /// MMIO reads of SMMU_CMDQ_CONS.
    pub cons_reads: u64,
    /// MMIO writes of SMMU_CMDQ_PROD.
    pub prod_writes: u64,
    /// Waits that gave up after `POLL_TIMEOUT_NS` (queue full or CMD_SYNC).
    pub timeouts: u64,
}

/// The result of one run.
#[derive(Clone, Debug, Serialize)]
pub struct CmdSyncBenchResult {
    /// How CMD_SYNC completion was awaited.
    pub poll_mode: SyncPollMode,
    /// CPUs that issued.
    pub cpus: u32,
    /// Latency of each measured call (from the first command-queue operation to the
    /// return of `issue_cmdlist` with its CMD_SYNC complete), nanoseconds, in
    /// completion order.
    pub sync_latencies_ns: Vec<f64>,
    /// Iterations completed inside the measurement window.
    pub unmaps: u64,
    /// Length of the measurement window.
    pub window: Duration,
    /// `unmaps` divided by `window`, per second.
    pub unmaps_per_sec: f64,
    /// The SMMU command queue's counters.
    pub cmdq: CmdqCounters,
    /// What the CPUs did, summed.
    pub host: HostCounters,
    /// Events the harness's engine handled.
    pub events: u64,
    /// Simulated time at the end of the run.
    pub end: SimTime,
}

impl CmdSyncBenchResult {
    /// The `p`-quantile (0..=1) of the measured latencies by nearest rank; NaN if none.
    pub fn percentile_ns(&self, p: f64) -> f64 {
        let mut v = self.sync_latencies_ns.clone();
        if v.is_empty() {
            return f64::NAN;
        }
        v.sort_by(f64::total_cmp);
        let rank = (p.clamp(0.0, 1.0) * v.len() as f64).ceil().max(1.0) as usize;
        v[rank - 1]
    }
    /// Median call latency, ns (NaN if none was measured).
    pub fn p50_ns(&self) -> f64 {
        self.percentile_ns(0.5)
    }
    /// 99th-percentile call latency, ns (NaN if none was measured).
    pub fn p99_ns(&self) -> f64 {
        self.percentile_ns(0.99)
    }
}

/// Runs the harness.
pub fn run_cmdsync_bench(config: &CmdSyncBenchConfig) -> Result<CmdSyncBenchResult, SmmuHostError> {
    Ok(Harness::new(config)?.run().0)
}

/// Encodes (cpu, sequence) into the IOVA of an unmapped page, so consumed TLBIs can be
/// traced back to their issuer.
pub fn bench_iova(cpu: usize, seq: u64) -> u64 {
    (cpu as u64) << 40 | (seq & ((1 << 28) - 1)) << 12
}

/// Decodes [`bench_iova`].
pub fn bench_iova_owner(iova: u64) -> (usize, u64) {
    ((iova >> 40) as usize, (iova >> 12) & ((1 << 28) - 1))
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    Start { cpu: usize },
    OpDone { cpu: usize, gen: u64 },
    ConsSample { cpu: usize, gen: u64 },
    Tick { cpu: usize, gen: u64 },
    ProdArrive(u32),
    SmmuDone,
    MsiVisible { addr: u64, data: u32 },
}

#[derive(Clone, Copy, Debug, Default)]
struct Line {
    owner: Option<u8>,
    holders: u64,
    busy_until: SimTime,
    monitors: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    None,
    Op(SmmuCpuOp),
    Sleeping,
    Woken,
}

struct Cpu {
    co: Option<Coroutine<SmmuCpuOp, u64>>,
    report: Rc<Cell<IssueReport>>,
    pending: Pending,
    gen: u64,
    sampled: u64,
    monitor: Option<usize>,
    event_reg: bool,
    iterations: u64,
    iter_start: SimTime,
    issue_start: Option<SimTime>,
    rng: ChaCha8Rng,
}

struct Costs {
    hit: Duration,
    atomic: Duration,
    transfer: Duration,
    memory: Duration,
    mmio_write: Duration,
    prod_latency: Duration,
    mmio_read: Duration,
    wake: Duration,
    tick: u64,
    relax: Duration,
    clock: Duration,
    pte: Duration,
}

/// The harness state; `pub(super)` so the tests of this module can inspect a run.
pub(super) struct Harness {
    cfg: CmdSyncBenchConfig,
    drv: CmdqDriver,
    smmu: Smmu,
    q: EventQueue<Ev>,
    llq: u64,
    owner_prod: u64,
    lock: u32,
    valid: Vec<u64>,
    lines: Vec<Line>,
    valid_line_base: usize,
    slot_line_base: usize,
    cpus: Vec<Cpu>,
    c: Costs,
    warmup: SimTime,
    end: SimTime,
    latencies: Vec<f64>,
    in_window: u64,
    last_done: SimTime,
    host: HostCounters,
    /// Every command the SMMU consumed: Some((cpu, seq)) for a bench TLBI, None else.
    pub(super) consumed: Vec<Option<(usize, u64)>>,
    /// Per CPU, the TLBI sequence numbers it wrote, in order.
    pub(super) written: Vec<Vec<u64>>,
}

impl Harness {
    pub(super) fn new(cfg: &CmdSyncBenchConfig) -> Result<Harness, SmmuHostError> {
        cfg.validate()?;
        let smmu = Smmu::new(&cfg.smmu)?;
        let g = smmu.cmdq.geometry();
        let drv = CmdqDriver::new(g, smmu.cmdq.base(), smmu.sync_poll_mode())?;
        let words = drv.valid_map_words() as usize;
        let valid_lines = words.div_ceil(8);
        let slot_lines = (g.entries() as usize).div_ceil(4);
        let freq = Freq::from_mhz(cfg.cpu_mhz).expect("validated non-zero");
        let k = &cfg.cpu_costs;
        let ns = Duration::from_ns_f64;
        let c = Costs {
            hit: freq.cycles_f64(k.l1_hit_cycles),
            atomic: freq.cycles_f64(k.atomic_local_cycles),
            transfer: ns(k.line_transfer_ns),
            memory: ns(k.memory_ns),
            mmio_write: freq.cycles_f64(k.mmio_write_cycles),
            prod_latency: ns(k.prod_write_latency_ns),
            mmio_read: ns(k.mmio_read_ns),
            wake: ns(k.wfe_wake_ns),
            tick: ns(k.event_stream_period_us * 1000.0).as_ps().max(1),
            relax: freq.cycles_f64(k.cpu_relax_cycles),
            clock: ns(k.clock_read_ns),
            pte: ns(k.pte_clear_ns),
        };
        let streams = RngStreams::new(cfg.seed);
        let cpus = (0..cfg.cpus as usize)
            .map(|i| Cpu {
                co: None,
                report: Rc::new(Cell::new(IssueReport::default())),
                pending: Pending::None,
                gen: 0,
                sampled: 0,
                monitor: None,
                event_reg: false,
                iterations: 0,
                iter_start: SimTime::ZERO,
                issue_start: None,
                rng: streams.stream(&format!("smmu-bench-cpu{i}")),
            })
            .collect();
        let mut q = EventQueue::with_capacity(4 * cfg.cpus as usize + 8);
        for cpu in 0..cfg.cpus as usize {
            q.schedule(SimTime::ZERO, Priority::CPU, Ev::Start { cpu });
        }
        Ok(Harness {
            drv,
            smmu,
            q,
            llq: 0,
            owner_prod: 0,
            lock: 0,
            valid: vec![0; words],
            lines: vec![Line::default(); 2 + valid_lines + slot_lines],
            valid_line_base: 2,
            slot_line_base: 2 + valid_lines,
            cpus,
            c,
            warmup: SimTime::ZERO + Duration::from_ns_f64(cfg.warmup_us * 1000.0),
            end: SimTime::ZERO + Duration::from_ns_f64(cfg.duration_us * 1000.0),
            latencies: Vec::new(),
            in_window: 0,
            last_done: SimTime::ZERO,
            host: HostCounters::default(),
            consumed: Vec::new(),
            written: vec![Vec::new(); cfg.cpus as usize],
            cfg: cfg.clone(),
        })
    }

    fn line_of(&self, w: HostWord) -> usize {
        match w {
            HostWord::Llq => 0,
            HostWord::OwnerProd | HostWord::Lock => 1,
            HostWord::ValidMap(i) => self.valid_line_base + i as usize / 8,
            HostWord::CmdqSlot(i) => self.slot_line_of(i),
        }
    }

    fn slot_line_of(&self, index: u32) -> usize {
        self.slot_line_base + self.smmu.cmdq.geometry().idx(QueuePtr(index)) as usize / 4
    }

    fn read(&self, w: HostWord) -> u64 {
        match w {
            HostWord::Llq => self.llq,
            HostWord::OwnerProd => self.owner_prod,
            HostWord::Lock => self.lock as u64,
            HostWord::ValidMap(i) => self.valid[i as usize],
            HostWord::CmdqSlot(i) => self.smmu.cmdq.entry_word0(QueuePtr(i)) as u64,
        }
    }

    fn write(&mut self, w: HostWord, v: u64) {
        match w {
            HostWord::Llq => self.llq = v,
            HostWord::OwnerProd => self.owner_prod = v,
            HostWord::Lock => self.lock = v as u32,
            HostWord::ValidMap(i) => self.valid[i as usize] = v,
            HostWord::CmdqSlot(_) => unreachable!("slots are written whole, by WriteEntry"),
        }
    }

    /// Prices an access by `cpu` to line `l` issued at `now`, updates the line's
    /// holders, and returns when it completes.
    fn access(&mut self, cpu: usize, l: usize, write: bool, now: SimTime) -> SimTime {
        let me = 1u64 << cpu;
        let c = (self.c.transfer, self.c.memory, self.c.hit, self.c.atomic);
        let line = &mut self.lines[l];
        let holds = line.holders & me != 0;
        if !write {
            if holds {
                return now + c.2;
            }
            let start = now.max(line.busy_until);
            let cost = if line.holders != 0 { c.0 } else { c.1 };
            line.owner = None;
            line.holders |= me;
            return start + cost;
        }
        if line.owner == Some(cpu as u8) && line.holders == me {
            return now + c.3;
        }
        let start = now.max(line.busy_until);
        let cost = if line.holders & !me != 0 {
            c.0
        } else if holds {
            Duration::ZERO
        } else {
            c.1
        };
        let end = start + cost + c.3;
        line.owner = Some(cpu as u8);
        line.holders = me;
        line.busy_until = end;
        end
    }

    /// Another agent wrote line `l` at `now`: clear the monitors of waiting CPUs.
    fn wake_monitors(&mut self, l: usize, except: Option<usize>, now: SimTime) {
        let mut m = self.lines[l].monitors;
        if let Some(e) = except {
            m &= !(1u64 << e);
        }
        while m != 0 {
            let cpu = m.trailing_zeros() as usize;
            m &= m - 1;
            self.host.wakes_by_monitor += 1;
            self.wake(cpu, now);
        }
    }

    fn wake(&mut self, cpu: usize, now: SimTime) {
        let c = &mut self.cpus[cpu];
        if c.pending != Pending::Sleeping {
            return;
        }
        if let Some(l) = c.monitor.take() {
            self.lines[l].monitors &= !(1u64 << cpu);
        }
        c.pending = Pending::Woken;
        c.event_reg = false;
        c.gen += 1;
        let gen = c.gen;
        self.q
            .schedule(now + self.c.wake, Priority::CPU, Ev::OpDone { cpu, gen });
    }

    fn sleep(&mut self, cpu: usize, monitor: Option<usize>, now: SimTime) {
        self.host.sleeps += 1;
        let tick = self.c.tick;
        let c = &mut self.cpus[cpu];
        c.pending = Pending::Sleeping;
        c.gen += 1;
        let gen = c.gen;
        if let Some(l) = monitor {
            c.monitor = Some(l);
            self.lines[l].monitors |= 1u64 << cpu;
        }
        let next_tick = SimTime((now.as_ps() / tick + 1) * tick);
        self.q
            .schedule(next_tick, Priority::CPU, Ev::Tick { cpu, gen });
    }

    fn schedule_done(&mut self, cpu: usize, op: SmmuCpuOp, at: SimTime) {
        let c = &mut self.cpus[cpu];
        c.pending = Pending::Op(op);
        c.gen += 1;
        let gen = c.gen;
        self.q.schedule(at, Priority::CPU, Ev::OpDone { cpu, gen });
    }

    /// The algorithm on `cpu` requests `op` at `now`.
    fn request(&mut self, cpu: usize, op: SmmuCpuOp, now: SimTime) {
        if self.cpus[cpu].issue_start.is_none() && !matches!(op, SmmuCpuOp::ClearPtes { .. }) {
            self.cpus[cpu].issue_start = Some(now);
        }
        let at = match op {
            SmmuCpuOp::Load(w) => {
                let l = self.line_of(w);
                self.access(cpu, l, false, now)
            }
            SmmuCpuOp::WaitForChange { word, .. } => {
                // sevl; wfe clears the event register, then the exclusive load.
                self.cpus[cpu].event_reg = false;
                let l = self.line_of(word);
                self.access(cpu, l, false, now)
            }
            SmmuCpuOp::Store { word, .. }
            | SmmuCpuOp::Cas { word, .. }
            | SmmuCpuOp::FetchAdd { word, .. }
            | SmmuCpuOp::FetchXor { word, .. } => {
                let l = self.line_of(word);
                self.access(cpu, l, true, now)
            }
            SmmuCpuOp::StoreLlqCons(_) | SmmuCpuOp::FetchAndNotProd { .. } => {
                self.access(cpu, 0, true, now)
            }
            SmmuCpuOp::WriteEntry { index, .. } => {
                let l = self.slot_line_of(index);
                self.access(cpu, l, true, now)
            }
            SmmuCpuOp::WriteProd(_) => now + self.c.mmio_write,
            SmmuCpuOp::ReadCons => {
                let gen = self.cpus[cpu].gen + 1;
                let half = Duration(self.c.mmio_read.as_ps() / 2);
                self.q
                    .schedule(now + half, Priority::CPU, Ev::ConsSample { cpu, gen });
                self.host.cons_reads += 1;
                now + self.c.mmio_read
            }
            SmmuCpuOp::Wfe => {
                if std::mem::take(&mut self.cpus[cpu].event_reg) {
                    now + self.c.relax
                } else {
                    self.sleep(cpu, None, now);
                    return;
                }
            }
            SmmuCpuOp::CpuRelax => {
                self.host.cpu_relax += 1;
                now + self.c.relax
            }
            SmmuCpuOp::Udelay(us) => {
                self.host.udelays += 1;
                self.host.udelay_us += us as u64;
                now + Duration::from_us(us as u64)
            }
            SmmuCpuOp::ReadClockNs => now + self.c.clock,
            SmmuCpuOp::ClearPtes { pages, .. } => now + Duration(self.c.pte.as_ps() * pages as u64),
        };
        self.schedule_done(cpu, op, at);
    }

    /// `op` of `cpu` completes at `now`: apply it and produce the algorithm's result;
    /// `None` when the CPU goes to sleep instead.
    fn complete(&mut self, cpu: usize, op: SmmuCpuOp, now: SimTime) -> Option<u64> {
        Some(match op {
            SmmuCpuOp::Load(w) => self.read(w),
            SmmuCpuOp::WaitForChange { word, seen } => {
                if self.read(word) != seen {
                    0
                } else {
                    let l = self.line_of(word);
                    self.sleep(cpu, Some(l), now);
                    return None;
                }
            }
            SmmuCpuOp::Store { word, value } => {
                self.write(word, value);
                let l = self.line_of(word);
                self.wake_monitors(l, Some(cpu), now);
                0
            }
            SmmuCpuOp::StoreLlqCons(cons) => {
                self.llq = Llq::new(Llq(self.llq).prod(), cons).0;
                self.wake_monitors(0, Some(cpu), now);
                0
            }
            SmmuCpuOp::Cas { word, old, new } => {
                let prev = self.read(word);
                if word == HostWord::Llq {
                    self.host.llq_cas += 1;
                    self.host.llq_cas_failed += (prev != old) as u64;
                }
                if word == HostWord::Lock && old == 0 && new == super::LOCK_EXCLUSIVE as u64 {
                    self.host.full_waits += 1;
                }
                if prev == old {
                    self.write(word, new);
                }
                let l = self.line_of(word);
                self.wake_monitors(l, Some(cpu), now);
                prev
            }
            SmmuCpuOp::FetchAdd { word, delta } => {
                let prev = self.read(word);
                self.write(word, (prev as u32).wrapping_add(delta as u32) as u64);
                let l = self.line_of(word);
                self.wake_monitors(l, Some(cpu), now);
                prev
            }
            SmmuCpuOp::FetchXor { word, mask } => {
                let prev = self.read(word);
                self.write(word, prev ^ mask);
                let l = self.line_of(word);
                self.wake_monitors(l, Some(cpu), now);
                prev
            }
            SmmuCpuOp::FetchAndNotProd { mask } => {
                let prev = self.llq;
                self.llq &= !(mask as u64);
                self.wake_monitors(0, Some(cpu), now);
                prev
            }
            SmmuCpuOp::WriteEntry { index, cmd } => {
                if let Ok(Command::TlbiNhVa { addr, .. }) = Command::decode(cmd) {
                    let (owner, seq) = bench_iova_owner(addr);
                    if owner == cpu {
                        self.written[cpu].push(seq);
                    }
                }
                self.smmu.cmdq.write_entry(QueuePtr(index), cmd);
                let l = self.slot_line_of(index);
                self.wake_monitors(l, Some(cpu), now);
                0
            }
            SmmuCpuOp::WriteProd(p) => {
                self.host.prod_writes += 1;
                self.q.schedule(
                    now + self.c.prod_latency,
                    Priority::IOMMU,
                    Ev::ProdArrive(p),
                );
                0
            }
            SmmuCpuOp::ReadCons => self.cpus[cpu].sampled,
            SmmuCpuOp::ReadClockNs => now.as_ps() / 1000,
            SmmuCpuOp::Wfe
            | SmmuCpuOp::CpuRelax
            | SmmuCpuOp::Udelay(_)
            | SmmuCpuOp::ClearPtes { .. } => 0,
        })
    }

    fn resume(&mut self, cpu: usize, resp: Option<u64>, now: SimTime) {
        let step = self.cpus[cpu]
            .co
            .as_mut()
            .expect("a CPU with work has a coroutine")
            .resume(resp);
        match step {
            Step::Request(op) => self.request(cpu, op, now),
            Step::Done => self.finish_iteration(cpu, now),
        }
    }

    fn start_iteration(&mut self, cpu: usize, now: SimTime) {
        let drv = self.drv;
        let asid = self.cfg.asid;
        let workload = self.cfg.workload;
        let c = &mut self.cpus[cpu];
        let seq_base = c.iterations
            * match workload {
                BenchWorkload::Unmap { pages } => pages as u64,
                BenchWorkload::SyncOnly => 0,
            };
        c.iterations += 1;
        c.iter_start = now;
        c.issue_start = None;
        let report = Rc::clone(&c.report);
        c.co = Some(Coroutine::new(move |port| async move {
            let cpu_port = SmmuCpuPort::new(port);
            let r = match workload {
                BenchWorkload::SyncOnly => issue_sync(&cpu_port, &drv).await,
                BenchWorkload::Unmap { pages } => {
                    dma_unmap(&cpu_port, &drv, asid, bench_iova(cpu, seq_base), pages).await
                }
            };
            report.set(r);
        }));
        self.host.iterations_started += 1;
        self.resume(cpu, None, now);
    }

    fn finish_iteration(&mut self, cpu: usize, now: SimTime) {
        self.host.iterations_done += 1;
        self.last_done = now;
        let c = &mut self.cpus[cpu];
        c.co = None;
        c.pending = Pending::None;
        let r = c.report.get();
        self.host.owners += r.owner as u64;
        self.host.timeouts += r.timeouts as u64;
        let issue_start = c.issue_start.unwrap_or(c.iter_start);
        if issue_start >= self.warmup && now <= self.end {
            self.latencies.push(now.since(issue_start).as_ns_f64());
            self.in_window += 1;
        }
        let more = self.cfg.ops_per_cpu.is_none_or(|n| c.iterations < n);
        if more {
            let j = self.cfg.think_jitter;
            let f = 1.0 + j * (c.rng.gen::<f64>() * 2.0 - 1.0);
            let think = Duration::from_ns_f64(self.cfg.think_ns * f);
            self.q
                .schedule(now + think, Priority::CPU, Ev::Start { cpu });
        }
    }

    fn try_consume(&mut self, now: SimTime) {
        if self.smmu.cmdq.is_busy() {
            return;
        }
        let cons = self.smmu.cmdq.cons();
        if let Some(s) = self.smmu.next_consume(now) {
            // The SMMU's read of the slot's line downgrades a writer's copy.
            let l = self.slot_line_of(cons.0);
            self.lines[l].owner = None;
            self.q.schedule(s.done_at, Priority::IOMMU, Ev::SmmuDone);
        }
    }

    fn smmu_done(&mut self, now: SimTime) {
        let out = self
            .smmu
            .complete_consume(now)
            .expect("SmmuDone is scheduled at the command's done_at");
        match out.command {
            Some(Command::TlbiNhVa { addr, .. }) => {
                self.consumed.push(Some(bench_iova_owner(addr)))
            }
            _ => self.consumed.push(None),
        }
        match out.effect {
            ConsumeEffect::Sync(SyncCompletion::MsiWrite {
                addr,
                data,
                visible_at,
                ..
            }) => self
                .q
                .schedule(visible_at, Priority::IOMMU, Ev::MsiVisible { addr, data }),
            ConsumeEffect::Sync(SyncCompletion::ConsUpdated { sev: true }) => {
                for cpu in 0..self.cpus.len() {
                    if self.cpus[cpu].pending == Pending::Sleeping {
                        self.host.wakes_by_sev += 1;
                        self.wake(cpu, now);
                    } else {
                        self.cpus[cpu].event_reg = true;
                    }
                }
            }
            ConsumeEffect::Error(e) => panic!("the Linux model issued an illegal command: {e:?}"),
            _ => {}
        }
        self.try_consume(now);
    }

    pub(super) fn run(mut self) -> (CmdSyncBenchResult, Harness) {
        let bounded = self.cfg.ops_per_cpu.is_some();
        while let Some((now, ev)) = self.q.pop_until(self.end) {
            match ev {
                Ev::Start { cpu } => {
                    if bounded || now < self.end {
                        self.start_iteration(cpu, now);
                    }
                }
                Ev::OpDone { cpu, gen } => {
                    let c = &self.cpus[cpu];
                    if c.gen != gen {
                        continue;
                    }
                    let resp = match c.pending {
                        Pending::Op(op) => self.complete(cpu, op, now),
                        Pending::Woken => Some(0),
                        Pending::None | Pending::Sleeping => None,
                    };
                    if let Some(r) = resp {
                        self.cpus[cpu].pending = Pending::None;
                        self.resume(cpu, Some(r), now);
                    }
                }
                Ev::ConsSample { cpu, gen } => {
                    if self.cpus[cpu].gen == gen {
                        self.cpus[cpu].sampled = self.smmu.cmdq.read_cons() as u64;
                    }
                }
                Ev::Tick { cpu, gen } => {
                    if self.cpus[cpu].gen == gen && self.cpus[cpu].pending == Pending::Sleeping {
                        self.host.wakes_by_event_stream += 1;
                        self.wake(cpu, now);
                    }
                }
                Ev::ProdArrive(p) => {
                    self.smmu
                        .cmdq
                        .write_prod(now, p)
                        .expect("the Linux model keeps PROD consistent");
                    self.try_consume(now);
                }
                Ev::SmmuDone => self.smmu_done(now),
                Ev::MsiVisible { addr, data } => {
                    self.smmu.cmdq.write_memory32(addr, data);
                    if let Some(slot) = self.smmu.cmdq.slot_at(addr) {
                        let l = self.slot_line_of(slot.0);
                        self.lines[l].owner = None;
                        self.lines[l].holders = 0;
                        self.wake_monitors(l, None, now);
                    }
                }
            }
        }
        let end = if bounded {
            self.last_done.max(self.warmup)
        } else {
            self.end
        };
        let window = end.since(self.warmup);
        let result = CmdSyncBenchResult {
            poll_mode: self.drv.poll,
            cpus: self.cfg.cpus,
            sync_latencies_ns: std::mem::take(&mut self.latencies),
            unmaps: self.in_window,
            window,
            unmaps_per_sec: if window.as_ps() > 0 {
                self.in_window as f64 / window.as_secs_f64()
            } else {
                0.0
            },
            cmdq: *self.smmu.cmdq.counters(),
            host: self.host,
            events: self.q.events_popped(),
            end,
        };
        (result, self)
    }

    /// CPUs still inside an iteration.
    #[cfg(test)]
    pub(super) fn busy_cpus(&self) -> usize {
        self.cpus.iter().filter(|c| c.co.is_some()).count()
    }
    #[cfg(test)]
    pub(super) fn smmu(&self) -> &Smmu {
        &self.smmu
    }
    #[cfg(test)]
    pub(super) fn lock_word(&self) -> u32 {
        self.lock
    }
}

#[cfg(test)]
mod tests;

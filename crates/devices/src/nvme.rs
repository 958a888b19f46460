//! An NVMe drive: I/O submission/completion queue pairs, one MSI-X vector per
//! completion queue, interrupt coalescing, a completion-latency distribution and an
//! IOPS ceiling.
//!
//! ```text
//!  host: submit(qid) ──▶ SQ ──▶ media: latency ~ latency_ns ──▶ gate: <= iops_ceiling
//!                                                                   │ post entry
//!  host: reap(qid) ◀── CQ[qid] ◀────────────────────────────────────┘
//!                         │ coalescing per vector (THR+1 entries or TIME x 100 us)
//!                         └──▶ NvmeMsi { vector = qid }
//! ```
//!
//! Service model: every command spends a latency drawn from `latency_ns` (the drive's
//! unloaded completion latency), then passes one gate shared by all queues that lets at
//! most `iops_ceiling` completions a second through, in order of readiness (a token
//! bucket of `iops_burst` tokens, implemented as the generic cell rate algorithm with
//! exact integer times). At low load a command completes after its latency; past the
//! ceiling, commands queue at the gate and the latency grows.
//!
//! Interrupt coalescing follows the Interrupt Coalescing feature (NVMe Base
//! Specification 2.0, Set Features FID 08h): THR, the aggregation threshold, is 0's
//! based (THR = 7 asks for 8 entries); TIME, the aggregation time, is in 100 us units;
//! either at 0 means no coalescing (every entry signals at once, the spec's reset
//! value). Per vector: an MSI is raised when the entries posted since the vector's last
//! MSI and not yet consumed reach THR + 1, or TIME after the first of them was posted.
//! The spec gives FID 08h one THR/TIME for the controller and lets FID 09h (Interrupt
//! Vector Configuration) only disable coalescing per vector; irqsim allows a different
//! THR/TIME per vector ([`VectorCoalescing`]), a superset.
//!
//! Model choices (assumptions):
//! - the CQ head doorbell the host writes after reaping removes the consumed entries
//!   from the aggregation: an entry the host already took is never signalled later (the
//!   spec lets a controller delay an interrupt while the host is processing a vector's
//!   CQ). When nothing unsignalled remains, the aggregation timer is cancelled;
//! - MSI-X messages are edges: entries that were signalled but not reaped (a host that
//!   reaps with a limit) are not signalled again; the host must come back for them;
//! - a queue accepts at most `queue_entries - 1` commands not yet reaped (an SQ holds
//!   entries - 1 commands, and so the CQ can never overflow); one more is
//!   [`NvmeSubmitOutcome::QueueFull`], counted;
//! - the admin queue is not modelled; I/O queue `qid` (0-based) uses MSI-X vector `qid`.
//!   Linux gives the admin queue vector 0 and I/O queue i vector i (1-based): add 1 if
//!   the distinction matters (e.g. for VMD vector assignment).
//!
//! Not modelled: command sizes and read/write mix, SQ arbitration, CQ phase tags,
//! the "interrupt already being processed" delay beyond the doorbell rule above.
//!
//! Driving it (the engine owns time):
//! 1. [`NvmeDrive::submit`] when the host rings an SQ doorbell (after advancing the
//!    drive to that time if an event of its was due earlier: it asserts so);
//! 2. after every input, ask [`NvmeDrive::next_event`] and schedule a wake-up there;
//! 3. at that time call [`NvmeDrive::advance`], which posts entries and returns the
//!    drive's upstream writes in order (completion entries and MSIs; their `at` is when
//!    the drive issued them) and the next wake-up;
//! 4. when a completion entry's write reaches host memory (the root port's ordered
//!    stream delivered it), call [`NvmeDrive::land`]: only landed entries can be reaped;
//! 5. the interrupt handler calls [`NvmeDrive::reap`] (which writes the head doorbell).

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, VecDeque};

use rand::Rng;
use serde::{Deserialize, Serialize};
use sim_core::{Duration, SimTime, PS_PER_S, PS_PER_US};

use crate::dist::Dist;
use crate::DeviceError;

/// Size of a completion queue entry (NVMe Base Specification 2.0, 4.6: 16 bytes).
pub const CQE_BYTES: u32 = 16;

/// Largest aggregation threshold and time: both are 8-bit fields of FID 08h.
pub const COALESCING_FIELD_MAX: u32 = 255;

/// Interrupt coalescing settings of one vector (NVMe 2.0, FID 08h, CDW11).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Coalescing {
    /// THR, bits 7:0: the entries to aggregate before an interrupt, 0's based
    /// (0 = 1 entry, no coalescing). Spec reset value 0.
    pub threshold: u32,
    /// TIME, bits 15:8: the longest delay coalescing may add, in 100 us units
    /// (0 = no delay, no coalescing). Spec reset value 0.
    pub time_100us: u32,
}

impl Coalescing {
    /// The spec's reset value: no coalescing.
    pub const OFF: Coalescing = Coalescing {
        threshold: 0,
        time_100us: 0,
    };

    /// Whether this setting delays any interrupt (both fields non-zero).
    pub fn enabled(&self) -> bool {
        self.threshold > 0 && self.time_100us > 0
    }

    /// Entries that trigger an interrupt at once: THR + 1.
    pub fn entries(&self) -> u32 {
        self.threshold + 1
    }

    /// The aggregation time as a span.
    pub fn window(&self) -> Duration {
        Duration(self.time_100us as u64 * 100 * PS_PER_US)
    }

    fn validate(&self, field: &str) -> Result<(), DeviceError> {
        for (name, v) in [
            ("threshold", self.threshold),
            ("time_100us", self.time_100us),
        ] {
            if v > COALESCING_FIELD_MAX {
                return Err(DeviceError::InvalidParameter {
                    field: format!("{field}.{name}"),
                    value: v.to_string(),
                    allowed: "0..=255 (an 8-bit field of Set Features FID 08h)".into(),
                });
            }
        }
        Ok(())
    }
}

/// Coalescing of one vector that differs from the drive-wide setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorCoalescing {
    /// The MSI-X vector, which is the I/O queue index.
    pub vector: u32,
    pub threshold: u32,
    pub time_100us: u32,
}

/// One drive.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NvmeConfig {
    /// I/O queue pairs, each with its own MSI-X vector. 1..=65535 (the spec's limit).
    pub queues: u32,
    /// Entries of each SQ and CQ. Default 1024: Linux's `nvme` `io_queue_depth` module
    /// parameter (drivers/nvme/host/pci.c). 2..=65536 (CAP.MQES is 16 bits, 0's based).
    pub queue_entries: u32,
    /// Completions per second the drive can deliver in total. Unset: the platform
    /// profile's `costs.nvme.iops_ceiling` (see [`NvmeDriveCosts`]).
    pub iops_ceiling: Option<f64>,
    /// Completions that may pass the ceiling back to back after an idle spell.
    /// Default 1 (assumption: a strict ceiling; no public figure on burst capacity).
    pub iops_burst: u32,
    /// Unloaded completion latency, ns, from SQ doorbell to CQ entry. Unset: a
    /// lognormal with the platform profile's `costs.nvme.latency_mean_ns` and
    /// `costs.nvme.latency_sigma` (see [`NvmeDriveCosts`]).
    pub latency_ns: Option<Dist>,
    /// Coalescing of every vector (FID 08h). Default off, the spec's reset value.
    pub coalescing: Coalescing,
    /// Per-vector exceptions to `coalescing`.
    pub vector_coalescing: Vec<VectorCoalescing>,
}

impl Default for NvmeConfig {
    fn default() -> Self {
        NvmeConfig {
            queues: 1,
            queue_entries: 1024,
            iops_ceiling: None,
            iops_burst: 1,
            latency_ns: None,
            coalescing: Coalescing::OFF,
            vector_coalescing: Vec::new(),
        }
    }
}

impl NvmeConfig {
    /// Checks every field; `field` names the drive for the error.
    pub fn validate(&self, field: &str) -> Result<(), DeviceError> {
        let bad = |name: &str, value: String, allowed: &str| {
            Err(DeviceError::invalid(field, name, value, allowed))
        };
        if !(1..=65_535).contains(&self.queues) {
            return bad("queues", self.queues.to_string(), "1..=65535 I/O queues");
        }
        if !(2..=65_536).contains(&self.queue_entries) {
            return bad(
                "queue_entries",
                self.queue_entries.to_string(),
                "2..=65536 entries",
            );
        }
        if let Some(ceiling) = self.iops_ceiling {
            check_ceiling(&format!("{field}.iops_ceiling"), ceiling)?;
        }
        if !(1..=1_000_000).contains(&self.iops_burst) {
            return bad("iops_burst", self.iops_burst.to_string(), "1..=1000000");
        }
        if let Some(latency) = &self.latency_ns {
            latency.validate(&format!("{field}.latency_ns"))?;
        }
        self.coalescing.validate(&format!("{field}.coalescing"))?;
        let mut seen = BTreeSet::new();
        for (i, v) in self.vector_coalescing.iter().enumerate() {
            let f = format!("{field}.vector_coalescing[{i}]");
            if v.vector >= self.queues {
                return Err(DeviceError::InvalidParameter {
                    field: format!("{f}.vector"),
                    value: v.vector.to_string(),
                    allowed: format!("a vector below queues ({})", self.queues),
                });
            }
            if !seen.insert(v.vector) {
                return Err(DeviceError::InvalidParameter {
                    field: format!("{f}.vector"),
                    value: v.vector.to_string(),
                    allowed: "each vector at most once".into(),
                });
            }
            Coalescing {
                threshold: v.threshold,
                time_100us: v.time_100us,
            }
            .validate(&f)?;
        }
        Ok(())
    }

    /// The coalescing in force on `vector`.
    pub fn coalescing_of(&self, vector: u32) -> Coalescing {
        self.vector_coalescing
            .iter()
            .find(|v| v.vector == vector)
            .map(|v| Coalescing {
                threshold: v.threshold,
                time_100us: v.time_100us,
            })
            .unwrap_or(self.coalescing)
    }
}

fn check_ceiling(field: &str, ceiling: f64) -> Result<(), DeviceError> {
    if ceiling.is_finite() && (1.0..=1e12).contains(&ceiling) {
        Ok(())
    } else {
        Err(DeviceError::InvalidParameter {
            field: field.into(),
            value: ceiling.to_string(),
            allowed: "a finite number of completions per second in 1..=1e12".into(),
        })
    }
}

/// What a drive of the platform is, for every field a scenario's drive leaves unset.
/// The platform profiles give each machine's drive, with sources.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NvmeDriveCosts {
    /// Completions per second the drive can deliver in total. Default (`generic`):
    /// 2.5 M, the Samsung PM1743 random-read ceiling (AnandTech, 2021-12-23).
    pub iops_ceiling: f64,
    /// Mean unloaded completion latency, ns, from SQ doorbell to CQ entry (lognormal).
    /// Default (`generic`): 3,400 ns, the QD1 average of an Optane P5800X (polled
    /// io_uring, 512 B; Jens Axboe, linux-block, Aug 2020).
    pub latency_mean_ns: f64,
    /// Shape of the lognormal latency (sigma of the underlying normal). Default 0.2:
    /// assumption (p99 about 1.6x the median); no public distribution exists.
    pub latency_sigma: f64,
    /// Payload bandwidth of the drive's PCIe link toward the root port, GB/s, after
    /// encoding and TLP framing. Every byte the drive writes upstream (read data, CQEs,
    /// MSIs) crosses it in order. Default (`generic`): 14.4, PCIe 5.0 x4 (32 GT/s x 4
    /// lanes x 128/130 encoding = 15.75 GB/s) with 256-byte payloads that each carry
    /// about 24 bytes of framing and header (assumption).
    pub link_gbytes_per_s: f64,
}

impl Default for NvmeDriveCosts {
    fn default() -> Self {
        NvmeDriveCosts {
            iops_ceiling: 2.5e6,
            latency_mean_ns: 3400.0,
            latency_sigma: 0.2,
            link_gbytes_per_s: 14.4,
        }
    }
}

impl NvmeDriveCosts {
    /// Checks every field; errors name `field` (e.g. `costs.nvme`).
    pub fn validate(&self, field: &str) -> Result<(), DeviceError> {
        check_ceiling(&format!("{field}.iops_ceiling"), self.iops_ceiling)?;
        self.latency()
            .validate(&format!("{field}.latency_mean_ns"))?;
        if !(self.link_gbytes_per_s.is_finite()
            && self.link_gbytes_per_s > 0.0
            && self.link_gbytes_per_s <= 1e6)
        {
            return Err(DeviceError::InvalidParameter {
                field: format!("{field}.link_gbytes_per_s"),
                value: self.link_gbytes_per_s.to_string(),
                allowed: "a bandwidth above 0 and at most 1e6 GB/s".into(),
            });
        }
        Ok(())
    }

    /// The latency distribution these costs describe.
    pub fn latency(&self) -> Dist {
        Dist::LogNormal {
            mean: self.latency_mean_ns,
            sigma: self.latency_sigma,
        }
    }

    /// Time `bytes` take on the drive's link.
    pub fn link_time(&self, bytes: u64) -> Duration {
        Duration::from_ns_f64(bytes as f64 / self.link_gbytes_per_s)
    }
}

/// CPU costs of the host side of an fio-like job (the root prices them). Cycles.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NvmeHostCosts {
    /// Building a command, writing the SQ entry and ringing the doorbell, per I/O.
    /// Assumption: about 100 ns per I/O in total at 10 M IOPS per core with io_uring
    /// (Phoronix, 2021-10-25), ~300 cycles at an assumed 3 GHz, 60 % of it here.
    pub submit_cycles: f64,
    /// Reaping one CQ entry in the interrupt handler and completing the request.
    /// Assumption: the other 40 % of the ~300 cycles above.
    pub reap_entry_cycles: f64,
    /// `nvme_irq`'s fixed cost per call, beyond reaping entries: it is paid even when
    /// the CQ holds nothing new (VMD runs every child handler). Assumption: one
    /// uncached read of the next CQ entry's phase bit plus the call, about 150 cycles.
    pub irq_cycles: f64,
}

impl Default for NvmeHostCosts {
    fn default() -> Self {
        NvmeHostCosts {
            submit_cycles: 180.0,
            reap_entry_cycles: 120.0,
            irq_cycles: 150.0,
        }
    }
}

impl NvmeHostCosts {
    pub fn validate(&self, field: &str) -> Result<(), DeviceError> {
        crate::check_cycles(
            field,
            &[
                ("submit_cycles", self.submit_cycles),
                ("reap_entry_cycles", self.reap_entry_cycles),
                ("irq_cycles", self.irq_cycles),
            ],
        )
    }
}

/// Result of a submission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum NvmeSubmitOutcome {
    /// The command is in the drive; ask [`NvmeDrive::next_event`] again.
    Accepted,
    /// The queue already holds `queue_entries - 1` commands not yet reaped: the command
    /// was not taken. Counted in `rejected_queue_full`.
    QueueFull,
}

/// A completion queue entry as the host reaps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqEntry {
    /// The host's tag for the command (its command identifier).
    pub tag: u64,
    pub submitted_at: SimTime,
    /// When the drive wrote the entry.
    pub posted_at: SimTime,
}

/// Why an MSI was raised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MsiCause {
    /// Coalescing is off on the vector: one MSI per entry.
    Immediate,
    /// THR + 1 unsignalled entries were pending.
    Threshold,
    /// The aggregation time ran out.
    Timer,
}

/// An MSI the drive raised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvmeMsi {
    pub at: SimTime,
    /// MSI-X vector = I/O queue index.
    pub vector: u16,
    /// Entries this MSI signals (posted since the vector's last MSI, not yet consumed).
    pub entries: u32,
    pub cause: MsiCause,
}

/// One upstream write of the drive, in the order the drive issues them: a command's
/// read data and its completion entry, then (unless coalescing holds it) the queue's
/// MSI. PCIe keeps them in this order on the way to host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvmeWrite {
    /// The data of one command and its CQ entry for queue `qid`, written at `at`.
    /// The entry becomes visible to the host when the engine calls
    /// [`NvmeDrive::land`].
    Completion { qid: u16, at: SimTime },
    /// An MSI.
    Msi(NvmeMsi),
}

impl NvmeWrite {
    /// The MSI, if this write is one.
    pub fn msi(&self) -> Option<&NvmeMsi> {
        match self {
            NvmeWrite::Msi(m) => Some(m),
            NvmeWrite::Completion { .. } => None,
        }
    }
}

/// Counters of one queue pair and its vector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NvmeQueueCounters {
    /// Commands accepted.
    pub submitted: u64,
    /// Commands refused because the queue was full.
    pub rejected_queue_full: u64,
    /// Entries posted to the CQ.
    pub completed: u64,
    /// Entries the host reaped.
    pub reaped: u64,
    pub msis: u64,
    pub msis_immediate: u64,
    pub msis_threshold: u64,
    pub msis_timer: u64,
    /// Entries covered by MSIs (sum of [`NvmeMsi::entries`]).
    pub entries_signalled: u64,
    /// Entries the host consumed before any MSI signalled them.
    pub entries_reaped_unsignalled: u64,
}

impl NvmeQueueCounters {
    fn add(&mut self, o: &NvmeQueueCounters) {
        self.submitted += o.submitted;
        self.rejected_queue_full += o.rejected_queue_full;
        self.completed += o.completed;
        self.reaped += o.reaped;
        self.msis += o.msis;
        self.msis_immediate += o.msis_immediate;
        self.msis_threshold += o.msis_threshold;
        self.msis_timer += o.msis_timer;
        self.entries_signalled += o.entries_signalled;
        self.entries_reaped_unsignalled += o.entries_reaped_unsignalled;
    }
}

/// One queue pair's state, in two host cache lines (`repr(C)`, aligned): a system of
/// thousands of queues finds each one out of cache when a command completes or the host
/// reaps, and every further line is one more miss. The first line holds what every
/// access reads (the CQ, the counts, the coalescing state); the second the counters.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
struct QueuePair {
    cq: VecDeque<CqEntry>,
    /// Commands in the media or at the gate.
    in_device: u32,
    /// Oldest CQ entries whose write has reached host memory (through the root port's
    /// ordered write stream, see [`NvmeDrive::land`]); only those can be reaped.
    landed: u32,
    /// Newest CQ entries not yet covered by an MSI.
    unsignalled: u32,
    coalescing: Coalescing,
    /// When the aggregation timer fires, if armed.
    deadline: Option<SimTime>,
    tally: Tally,
}

// The two lines the comment above counts on.
const _: () = assert!(std::mem::size_of::<QueuePair>() == 128);

/// The counters a queue pair keeps. The others of [`NvmeQueueCounters`] follow from
/// these and the queue's contents ([`QueuePair::counters`]), so they cannot disagree and
/// cost no store per command.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    rejected_queue_full: u64,
    reaped: u64,
    msis_immediate: u64,
    msis_threshold: u64,
    msis_timer: u64,
    entries_signalled: u64,
    entries_reaped_unsignalled: u64,
}

impl QueuePair {
    /// Every accepted command is in the device, in the CQ, or reaped; every posted entry
    /// is in the CQ or reaped; every MSI had one cause.
    fn counters(&self) -> NvmeQueueCounters {
        let t = &self.tally;
        let in_cq = self.cq.len() as u64;
        NvmeQueueCounters {
            submitted: self.in_device as u64 + in_cq + t.reaped,
            rejected_queue_full: t.rejected_queue_full,
            completed: in_cq + t.reaped,
            reaped: t.reaped,
            msis: t.msis_immediate + t.msis_threshold + t.msis_timer,
            msis_immediate: t.msis_immediate,
            msis_threshold: t.msis_threshold,
            msis_timer: t.msis_timer,
            entries_signalled: t.entries_signalled,
            entries_reaped_unsignalled: t.entries_reaped_unsignalled,
        }
    }
}

/// A command in the media stage: ordered by (ready time, submission sequence).
type InMedia = Reverse<(SimTime, u64, u16, u64, SimTime)>;

/// An NVMe drive. Getters: [`config`](Self::config), [`queues`](Self::queues),
/// [`outstanding`](Self::outstanding), [`cq_len`](Self::cq_len),
/// [`counters`](Self::counters), [`totals`](Self::totals). Inputs:
/// [`submit`](Self::submit), [`reap`](Self::reap). Time: [`next_event`](Self::next_event),
/// [`advance`](Self::advance).
#[derive(Clone, Debug)]
pub struct NvmeDrive {
    config: NvmeConfig,
    /// The latency distribution in force (the config's, or the platform's).
    latency: Dist,
    queues: Vec<QueuePair>,
    media: BinaryHeap<InMedia>,
    /// Generic cell rate algorithm: theoretical arrival time, increment, tolerance.
    gate_tat: SimTime,
    gate_increment: Duration,
    gate_tolerance: Duration,
    timers: BTreeSet<(SimTime, u16)>,
    seq: u64,
}

impl NvmeDrive {
    /// Validates `config` (errors name `field`) and builds an idle drive; fields the
    /// config leaves unset come from `platform`.
    pub fn new(
        config: NvmeConfig,
        platform: &NvmeDriveCosts,
        field: &str,
    ) -> Result<NvmeDrive, DeviceError> {
        config.validate(field)?;
        let ceiling = config.iops_ceiling.unwrap_or(platform.iops_ceiling);
        check_ceiling(&format!("{field}.iops_ceiling"), ceiling)?;
        let latency = config
            .latency_ns
            .clone()
            .unwrap_or_else(|| platform.latency());
        latency.validate(&format!("{field}.latency_ns"))?;
        let increment = Duration(((PS_PER_S as f64 / ceiling).round() as u64).max(1));
        let queues = (0..config.queues)
            .map(|v| QueuePair {
                in_device: 0,
                cq: VecDeque::new(),
                landed: 0,
                unsignalled: 0,
                deadline: None,
                coalescing: config.coalescing_of(v),
                tally: Tally::default(),
            })
            .collect();
        Ok(NvmeDrive {
            gate_tolerance: Duration(increment.0 * (config.iops_burst as u64 - 1)),
            gate_increment: increment,
            gate_tat: SimTime::ZERO,
            config,
            latency,
            queues,
            media: BinaryHeap::new(),
            timers: BTreeSet::new(),
            seq: 0,
        })
    }

    pub fn config(&self) -> &NvmeConfig {
        &self.config
    }

    /// Number of I/O queue pairs.
    pub fn queues(&self) -> u16 {
        self.queues.len() as u16
    }

    /// Commands of queue `qid` submitted and not yet reaped.
    pub fn outstanding(&self, qid: u16) -> u32 {
        let q = &self.queues[qid as usize];
        q.in_device + q.cq.len() as u32
    }

    /// Entries in CQ `qid` that the host can see (landed): what `nvme_cqe_pending`
    /// would find.
    pub fn cq_len(&self, qid: u16) -> u32 {
        self.queues[qid as usize].landed
    }

    /// Entries the drive wrote to CQ `qid` that have not landed in host memory yet.
    pub fn cq_in_flight(&self, qid: u16) -> u32 {
        let q = &self.queues[qid as usize];
        q.cq.len() as u32 - q.landed
    }

    /// The oldest in-flight entry of CQ `qid` has reached host memory: the root port's
    /// ordered write stream delivered it. From now on the host can reap it.
    ///
    /// # Panics
    /// If no entry of that queue is in flight (the engine landed more than was written).
    pub fn land(&mut self, qid: u16) {
        let q = &mut self.queues[qid as usize];
        assert!(
            (q.landed as usize) < q.cq.len(),
            "NVMe CQ {qid}: landing an entry that was never written"
        );
        q.landed += 1;
    }

    pub fn counters(&self, qid: u16) -> NvmeQueueCounters {
        self.queues[qid as usize].counters()
    }

    /// Counters summed over all queues.
    pub fn totals(&self) -> NvmeQueueCounters {
        let mut t = NvmeQueueCounters::default();
        self.queues.iter().for_each(|q| t.add(&q.counters()));
        t
    }

    /// The host rings SQ `qid`'s doorbell at `now` with one command tagged `tag`.
    /// The command's latency is drawn here, from the drive's random stream.
    ///
    /// # Panics
    /// If `qid` is not below [`queues`](Self::queues), or if an event due before `now`
    /// was not [`advance`](Self::advance)d (the engine's schedule and the drive
    /// disagree).
    pub fn submit<R: Rng + ?Sized>(
        &mut self,
        now: SimTime,
        qid: u16,
        tag: u64,
        rng: &mut R,
    ) -> NvmeSubmitOutcome {
        if let Some(t) = self.next_event() {
            assert!(
                t >= now,
                "NVMe input at {now} while an event due at {t} was not advanced"
            );
        }
        let limit = self.config.queue_entries - 1;
        let latency = Duration::from_ns_f64(self.latency.sample(rng));
        let q = self
            .queues
            .get_mut(qid as usize)
            .unwrap_or_else(|| panic!("NVMe submit to queue {qid}, which does not exist"));
        if q.in_device + q.cq.len() as u32 >= limit {
            q.tally.rejected_queue_full += 1;
            return NvmeSubmitOutcome::QueueFull;
        }
        q.in_device += 1;
        self.seq += 1;
        self.media
            .push(Reverse((now + latency, self.seq, qid, tag, now)));
        NvmeSubmitOutcome::Accepted
    }

    /// When the next command passes the gate, if any is in the media.
    fn next_completion(&self) -> Option<SimTime> {
        let Reverse((ready, ..)) = self.media.peek()?;
        let gate_open = SimTime(self.gate_tat.0.saturating_sub(self.gate_tolerance.0));
        Some((*ready).max(gate_open))
    }

    /// When the drive next needs [`advance`](Self::advance): the next completion or
    /// aggregation timer. `None` when idle.
    pub fn next_event(&self) -> Option<SimTime> {
        let timer = self.timers.first().map(|&(t, _)| t);
        match (self.next_completion(), timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Performs everything due at or before `now`, in time order (a completion before a
    /// timer due at the same instant); appends the writes the drive issues (completion
    /// entries and MSIs, in order) to `out` and returns the next wake-up.
    pub fn advance(&mut self, now: SimTime, out: &mut Vec<NvmeWrite>) -> Option<SimTime> {
        loop {
            let completion = self.next_completion().filter(|t| *t <= now);
            let timer = self.timers.first().copied().filter(|(t, _)| *t <= now);
            match (completion, timer) {
                (Some(c), Some((t, _))) if c <= t => self.complete_one(c, out),
                (Some(c), None) => self.complete_one(c, out),
                (_, Some((t, v))) => self.fire_timer(t, v, out),
                (None, None) => break,
            }
        }
        self.next_event()
    }

    fn complete_one(&mut self, at: SimTime, out: &mut Vec<NvmeWrite>) {
        let Reverse((_, _, qid, tag, submitted_at)) = self.media.pop().expect("a ready command");
        self.gate_tat = self.gate_tat.max(at) + self.gate_increment;
        let q = &mut self.queues[qid as usize];
        q.in_device -= 1;
        q.cq.push_back(CqEntry {
            tag,
            submitted_at,
            posted_at: at,
        });
        q.unsignalled += 1;
        out.push(NvmeWrite::Completion { qid, at });
        let c = q.coalescing;
        if !c.enabled() {
            self.signal(qid, at, MsiCause::Immediate, out);
        } else if q.unsignalled >= c.entries() {
            self.signal(qid, at, MsiCause::Threshold, out);
        } else if q.deadline.is_none() {
            let deadline = at + c.window();
            q.deadline = Some(deadline);
            self.timers.insert((deadline, qid));
        }
    }

    fn fire_timer(&mut self, at: SimTime, qid: u16, out: &mut Vec<NvmeWrite>) {
        self.timers.remove(&(at, qid));
        let q = &mut self.queues[qid as usize];
        q.deadline = None;
        assert!(
            q.unsignalled > 0,
            "an armed timer always has entries to signal"
        );
        self.signal(qid, at, MsiCause::Timer, out);
    }

    fn signal(&mut self, qid: u16, at: SimTime, cause: MsiCause, out: &mut Vec<NvmeWrite>) {
        let q = &mut self.queues[qid as usize];
        let entries = q.unsignalled;
        q.unsignalled = 0;
        if let Some(d) = q.deadline.take() {
            self.timers.remove(&(d, qid));
        }
        let c = &mut q.tally;
        c.entries_signalled += entries as u64;
        match cause {
            MsiCause::Immediate => c.msis_immediate += 1,
            MsiCause::Threshold => c.msis_threshold += 1,
            MsiCause::Timer => c.msis_timer += 1,
        }
        out.push(NvmeWrite::Msi(NvmeMsi {
            at,
            vector: qid,
            entries,
            cause,
        }));
    }

    /// The host takes up to `max` landed entries from CQ `qid`, oldest first, appends
    /// them to `out`, and writes the CQ head doorbell; returns how many it took.
    /// Consumed entries that no MSI had signalled leave the aggregation (see the module
    /// docs).
    ///
    /// # Panics
    /// If `qid` is not below [`queues`](Self::queues).
    pub fn reap(&mut self, qid: u16, max: u32, out: &mut Vec<CqEntry>) -> u32 {
        let q = self
            .queues
            .get_mut(qid as usize)
            .unwrap_or_else(|| panic!("NVMe reap from queue {qid}, which does not exist"));
        let n = (max as usize).min(q.landed as usize);
        out.extend(q.cq.drain(..n));
        q.landed -= n as u32;
        q.tally.reaped += n as u64;
        let remaining = q.cq.len() as u32;
        if q.unsignalled > remaining {
            q.tally.entries_reaped_unsignalled += (q.unsignalled - remaining) as u64;
            q.unsignalled = remaining;
        }
        if q.unsignalled == 0 {
            if let Some(d) = q.deadline.take() {
                self.timers.remove(&(d, qid));
            }
        }
        n as u32
    }

    /// Asserts the drive's conservation laws: per queue, every posted entry is signalled,
    /// consumed unsignalled, or still waiting for its MSI; the media holds every command
    /// the queues count as in the device; timers match the queues. (That every accepted
    /// command is in the device, in the CQ or reaped holds by construction: the
    /// submitted count is that sum, see `QueuePair::counters`.)
    pub fn check_conservation(&self) {
        let mut in_device = 0u64;
        for (i, q) in self.queues.iter().enumerate() {
            let c = q.counters();
            assert_eq!(
                c.completed,
                c.entries_signalled + c.entries_reaped_unsignalled + q.unsignalled as u64,
                "queue {i}: posted = signalled + consumed unsignalled + awaiting an MSI"
            );
            assert!(q.unsignalled as usize <= q.cq.len(), "queue {i}");
            assert!(
                q.landed as usize <= q.cq.len(),
                "queue {i}: landed <= written"
            );
            assert_eq!(
                q.deadline.is_some(),
                q.unsignalled > 0 && q.coalescing.enabled(),
                "queue {i}: a timer is armed exactly while entries await a coalesced MSI"
            );
            if let Some(d) = q.deadline {
                assert!(self.timers.contains(&(d, i as u16)), "queue {i}");
            }
            in_device += q.in_device as u64;
        }
        assert_eq!(
            in_device,
            self.media.len() as u64,
            "media holds every in-device command"
        );
        assert_eq!(
            self.timers.len(),
            self.queues.iter().filter(|q| q.deadline.is_some()).count()
        );
    }
}

#[cfg(test)]
#[path = "nvme_tests.rs"]
mod tests;

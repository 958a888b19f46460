//! The SMMU's side of the Command queue: the ring in memory, PROD and CONS, and the
//! consumer that executes commands one at a time with a cost per opcode.
//!
//! ```text
//!  CPU: write_entry(slot) ... write_prod(PROD) ──▶ [ring in memory, 16 B per entry]
//!                                                       │ next_consume(now): fetch the
//!                                                       ▼ line, decode, start the command
//!                                         complete_consume(at done_at): CONS += 1, effect
//!   effects: Invalidate(..)  ·  Sync(MsiWrite | ConsUpdated{sev} | WiredIrq)  ·  Error
//! ```
//!
//! Semantics (IHI 0070):
//! - Commands are consumed in order (3.5.1). CONS moves past a command when it is
//!   consumed; an invalidation is *consumed* when the SMMU has taken it on, but it is
//!   *complete* only later, when every TLB or configuration cache concerned has dropped
//!   the entries. The model gives each invalidation a background completion time.
//! - CMD_SYNC completes when every earlier command has completed, and later commands do
//!   not begin until it has (4.7.3). Its completion is observable before CONS passes
//!   it; then it signals per its ComplSignal: SIG_IRQ writes MSIData to MSIAddress (an
//!   MSI, if SMMU_IDR0.MSI, and the address is not zero), SIG_SEV sends a WFE wake-up
//!   event (only if SMMU_IDR0.SEV), SIG_NONE nothing.
//! - An illegal command stops the queue: CONS stays on it, SMMU_CMDQ_CONS.ERR holds the
//!   reason and SMMU_GERROR.CMDQ_ERR is active until software acknowledges it (having
//!   replaced the entry; Linux turns it into a CMD_SYNC).
//! - PROD may only move forward by whole entries and never past CONS by more than the
//!   queue size (3.5.1, 6.3.27). A full queue makes the *producer* wait: the ring has
//!   no way to drop a command, and [`CommandQueue::write_prod`] refuses an overrun.
//!
//! The model owns the ring's memory for convenience: the host writes entries with
//! [`CommandQueue::write_entry`], and an MSI that a CMD_SYNC aims at its own slot (what
//! Linux does) lands there through [`CommandQueue::write_memory32`], applied by the
//! engine when the write becomes visible.
//!
//! Not modelled: the Secure and Enhanced Command queues, CMD_SYNC completion by wired
//! interrupt beyond flagging it, command fetch aborts, ATS invalidation timeouts, a WFE
//! wake-up event when the queue leaves the full state (IHI 0070 does not require one;
//! only CMD_SYNC's SIG_SEV is modelled).

use super::cmd::{Command, CommandError, Invalidation, SyncSignal};
use super::error::{check_ns, SmmuError};
use super::queue::{QueueGeometry, QueuePtr, MAX_QUEUE_LOG2};
use super::regs::{SmmuFeatures, CMDQ_CONS_ERR_SHIFT, CMDQ_ENTRY_BYTES};
use serde::{Deserialize, Serialize};
use sim_core::{Duration, SimTime};

/// Commands per 64-byte line: the unit in which the SMMU fetches the ring.
pub const ENTRIES_PER_LINE: u32 = 4;

/// Time the SMMU spends on each kind of command. None of these is published for a
/// real SMMU; the defaults are assumptions built from published memory latencies.
/// As a plausibility anchor, a 4 KB `iommu_unmap` (page-table update, TLB invalidation
/// and sync through an SMMUv2's registers) took 1.854 us on a Qualcomm SM8150 (Linux
/// commit "iommu/arm-smmu: Optimize ->tlb_flush_walk() for qcom implementation").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CmdqCosts {
    /// The SMMU's own part of reading one 64-byte line of the ring (up to four
    /// commands): issuing the read and taking the data in. Nanoseconds. Default 4 ns:
    /// assumption, a few cycles of a ~1 GHz SMMU clock. Where the line is (a core's
    /// cache, the LLC, DRAM) and the trip to it are the memory system's: an engine
    /// adds them with [`CommandQueue::next_consume_with_fetch`].
    pub fetch_line_ns: f64,
    /// Decoding one command and dispatching it. Nanoseconds. Default 4 ns: assumption,
    /// a few cycles of a ~1 GHz SMMU clock.
    pub decode_ns: f64,
    /// Taking on a CMD_TLBI_NH_VA (or another single-address TLBI: VAA, EL2_VA,
    /// S2_IPA): the TCU looks it up and forwards it to the TLBs. Nanoseconds. Default
    /// 20 ns: assumption.
    pub tlbi_va_ns: f64,
    /// Taking on a CMD_TLBI_NH_ASID. Nanoseconds. Default 20 ns: assumption.
    pub tlbi_asid_ns: f64,
    /// Taking on a CMD_TLBI_NH_ALL or CMD_TLBI_NSNH_ALL. Nanoseconds. Default 40 ns:
    /// assumption (a whole-TLB flash invalidate is cheap to issue; its completion is
    /// `invalidation_complete_ns`).
    pub tlbi_all_ns: f64,
    /// Taking on a CMD_CFGI_STE (or CFGI_CD). Nanoseconds. Default 20 ns: assumption.
    pub cfgi_ste_ns: f64,
    /// Taking on CMD_CFGI_ALL or another ranged CFGI. Nanoseconds. Default 40 ns:
    /// assumption.
    pub cfgi_all_ns: f64,
    /// Any other command (prefetch, ATC_INV, PRI_RESP, RESUME...). Nanoseconds.
    /// Default 10 ns: assumption.
    pub other_ns: f64,
    /// From consuming an invalidation until it is complete in every TLB or
    /// configuration cache: in a distributed SMMU (Arm MMU-600/700) the TCU forwards it
    /// to each TBU over DTI and waits for their acknowledgements. A CMD_SYNC waits for
    /// the latest of these. Nanoseconds. Default 250 ns: assumption, about four
    /// interconnect round trips of a cross-core line transfer (55.6 ns, FD.io CSIT
    /// Cascade Lake MLC c2c).
    pub invalidation_complete_ns: f64,
    /// The CMD_SYNC's own work once everything before it is complete (draining the
    /// TBUs' sync handshake, forming the completion signal). Nanoseconds. Default
    /// 40 ns: assumption.
    pub sync_ns: f64,
    /// The SMMU's own part of a CMD_SYNC's MSI write: forming it and issuing it.
    /// Nanoseconds. Default 4 ns: assumption, a few SMMU cycles. The trip to the
    /// line's home and the invalidation of cached copies are the memory system's: the
    /// engine adds them after `visible_at`'s SMMU-side instant.
    pub msi_write_ns: f64,
}

impl Default for CmdqCosts {
    fn default() -> Self {
        CmdqCosts {
            fetch_line_ns: 4.0,
            decode_ns: 4.0,
            tlbi_va_ns: 20.0,
            tlbi_asid_ns: 20.0,
            tlbi_all_ns: 40.0,
            cfgi_ste_ns: 20.0,
            cfgi_all_ns: 40.0,
            other_ns: 10.0,
            invalidation_complete_ns: 250.0,
            sync_ns: 40.0,
            msi_write_ns: 4.0,
        }
    }
}

impl CmdqCosts {
    /// Every field must be a finite, non-negative number of nanoseconds.
    pub fn validate(&self) -> Result<(), SmmuError> {
        let t = "cmdq_costs";
        check_ns(t, "fetch_line_ns", self.fetch_line_ns)?;
        check_ns(t, "decode_ns", self.decode_ns)?;
        check_ns(t, "tlbi_va_ns", self.tlbi_va_ns)?;
        check_ns(t, "tlbi_asid_ns", self.tlbi_asid_ns)?;
        check_ns(t, "tlbi_all_ns", self.tlbi_all_ns)?;
        check_ns(t, "cfgi_ste_ns", self.cfgi_ste_ns)?;
        check_ns(t, "cfgi_all_ns", self.cfgi_all_ns)?;
        check_ns(t, "other_ns", self.other_ns)?;
        check_ns(t, "invalidation_complete_ns", self.invalidation_complete_ns)?;
        check_ns(t, "sync_ns", self.sync_ns)?;
        check_ns(t, "msi_write_ns", self.msi_write_ns)
    }
}

/// How the Command queue is set up (SMMU_CMDQ_BASE and SMMU_IDR1.CMDQS).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CmdqConfig {
    /// SMMU_CMDQ_BASE.LOG2SIZE. Default 8 (256 entries): assumption; Linux asks for
    /// as many as SMMU_IDR1.CMDQS allows within its allocation cap, and refuses fewer
    /// than 128 (its batch of 64 plus a sync must fit).
    pub log2_entries: u8,
    /// SMMU_IDR1.CMDQS, the implementation's maximum. Default 19, the architectural
    /// maximum.
    pub max_log2_entries: u8,
    /// Physical address of the ring (SMMU_CMDQ_BASE.ADDR), aligned to the queue size
    /// in bytes and at least 32 bytes. Default 0x8000_0000: assumption.
    pub base: u64,
    pub costs: CmdqCosts,
}

impl Default for CmdqConfig {
    fn default() -> Self {
        CmdqConfig {
            log2_entries: 8,
            max_log2_entries: MAX_QUEUE_LOG2,
            base: 0x8000_0000,
            costs: CmdqCosts::default(),
        }
    }
}

impl CmdqConfig {
    pub fn validate(&self) -> Result<(), SmmuError> {
        if self.max_log2_entries > MAX_QUEUE_LOG2 {
            return Err(SmmuError::InvalidQueueSize {
                field: "max_log2_entries",
                value: self.max_log2_entries,
                max: MAX_QUEUE_LOG2,
            });
        }
        if self.log2_entries > self.max_log2_entries {
            return Err(SmmuError::InvalidQueueSize {
                field: "log2_entries",
                value: self.log2_entries,
                max: self.max_log2_entries,
            });
        }
        let align = (CMDQ_ENTRY_BYTES << self.log2_entries).max(32);
        // `align` is a power of two.
        if self.base & (align - 1) != 0 || self.base >= 1 << 56 {
            return Err(SmmuError::InvalidBaseAddress {
                field: "base",
                value: self.base,
                align,
            });
        }
        self.costs.validate()
    }
}

/// A command the consumer has started.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ConsumeStart {
    /// Position of the command (index and wrap flag).
    pub index: QueuePtr,
    /// Its opcode (0 if the entry holds garbage).
    pub opcode: u8,
    /// When [`CommandQueue::complete_consume`] is due.
    pub done_at: SimTime,
}

/// How a CMD_SYNC's completion is signalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SyncCompletion {
    /// SIG_IRQ with MSIs: a 32-bit write of `data` to `addr`, visible at `visible_at`.
    /// `queue_slot` is set when the address is a slot of this ring (Linux's MSI
    /// polling); apply it with [`CommandQueue::write_memory32`] at `visible_at`.
    MsiWrite {
        addr: u64,
        data: u32,
        visible_at: SimTime,
        queue_slot: Option<QueuePtr>,
    },
    /// Only CONS moved past the CMD_SYNC; `sev`: a WFE wake-up event went to every PE
    /// (SIG_SEV with SMMU_IDR0.SEV).
    ConsUpdated { sev: bool },
    /// SIG_IRQ without MSI support: the wired CMD_SYNC interrupt pulses.
    WiredIrq,
}

/// What consuming one command did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ConsumeEffect {
    /// Nothing outside the queue.
    None,
    /// Caches to invalidate (the TLB/config model applies it).
    Invalidate(Invalidation),
    /// A CMD_SYNC completed.
    Sync(SyncCompletion),
    /// The command was illegal: the queue is stopped at it.
    Error(CommandError),
}

/// Result of [`CommandQueue::complete_consume`].
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ConsumeOutcome {
    pub index: QueuePtr,
    /// The decoded command (None for an illegal entry).
    pub command: Option<Command>,
    /// SMMU_CMDQ_CONS.RD after the command (unchanged on an error).
    pub cons: QueuePtr,
    pub effect: ConsumeEffect,
}

/// Counters snapshot. `consumed = tlbi + cfgi + sync + other`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CmdqCounters {
    pub prod_writes: u64,
    pub consumed: u64,
    pub tlbi: u64,
    pub cfgi: u64,
    pub sync: u64,
    pub other: u64,
    /// Illegal commands met (each stops the queue until acknowledged).
    pub errors: u64,
    pub msi_writes: u64,
    pub sev_events: u64,
    pub wired_irqs: u64,
    /// 64-byte lines read from the ring.
    pub line_fetches: u64,
    /// PROD writes after which the queue was full.
    pub full_after_prod: u64,
    /// Largest number of entries waiting between CONS and PROD.
    pub max_pending: u32,
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    index: QueuePtr,
    decoded: Result<Command, CommandError>,
    done_at: SimTime,
}

#[derive(Clone, Copy, Debug)]
struct Costs {
    fetch_line: Duration,
    decode: Duration,
    tlbi_va: Duration,
    tlbi_asid: Duration,
    tlbi_all: Duration,
    cfgi_ste: Duration,
    cfgi_all: Duration,
    other: Duration,
    inval_complete: Duration,
    sync: Duration,
    msi_write: Duration,
}

impl Costs {
    fn new(c: &CmdqCosts) -> Costs {
        let d = Duration::from_ns_f64;
        Costs {
            fetch_line: d(c.fetch_line_ns),
            decode: d(c.decode_ns),
            tlbi_va: d(c.tlbi_va_ns),
            tlbi_asid: d(c.tlbi_asid_ns),
            tlbi_all: d(c.tlbi_all_ns),
            cfgi_ste: d(c.cfgi_ste_ns),
            cfgi_all: d(c.cfgi_all_ns),
            other: d(c.other_ns),
            inval_complete: d(c.invalidation_complete_ns),
            sync: d(c.sync_ns),
            msi_write: d(c.msi_write_ns),
        }
    }

    /// Occupancy of the consumer for a command that is not a CMD_SYNC.
    fn issue(&self, cmd: &Command) -> Duration {
        match cmd {
            Command::TlbiNhVa { .. } => self.tlbi_va,
            Command::TlbiNhAsid { .. } => self.tlbi_asid,
            Command::TlbiNhAll { .. } | Command::TlbiNsnhAll => self.tlbi_all,
            Command::CfgiSte { .. } => self.cfgi_ste,
            Command::CfgiSteRange { .. } => self.cfgi_all,
            Command::Sync { .. } => self.sync,
            Command::Other { .. } => self.other,
        }
    }
}

/// The Command queue of one SMMU (Non-secure programming interface).
///
/// - Host side: [`write_entry`](Self::write_entry), [`write_prod`](Self::write_prod),
///   [`read_cons`](Self::read_cons), [`entry_word0`](Self::entry_word0),
///   [`acknowledge_error`](Self::acknowledge_error).
/// - SMMU side, driven by the engine: [`next_consume`](Self::next_consume) whenever the
///   consumer may be idle (after a PROD write and after each completion), then
///   [`complete_consume`](Self::complete_consume) at the returned `done_at`.
/// - Memory: [`write_memory32`](Self::write_memory32) for MSI writes into the ring.
#[derive(Clone, Debug)]
pub struct CommandQueue {
    geometry: QueueGeometry,
    base: u64,
    ring: Vec<[u64; 2]>,
    prod: QueuePtr,
    cons: QueuePtr,
    error: Option<CommandError>,
    in_flight: Option<InFlight>,
    /// Entries from CONS onwards already fetched into the SMMU.
    prefetched: u32,
    /// Latest completion time of consumed invalidations.
    outstanding_until: SimTime,
    /// When the SMMU has the write responses of every CMD_SYNC MSI issued so far: a
    /// later CMD_SYNC completes no earlier (IHI 0070 4.7.3, "CMD_SYNCs complete in
    /// order. The MSI writes of any prior CMD_SYNC are ... visible").
    msi_acked_until: SimTime,
    /// The consumer takes no new command before this instant (see
    /// [`hold_until`](CommandQueue::hold_until)).
    held_until: SimTime,
    features: SmmuFeatures,
    costs: Costs,
    counters: CmdqCounters,
}

impl CommandQueue {
    pub fn new(config: &CmdqConfig, features: SmmuFeatures) -> Result<CommandQueue, SmmuError> {
        config.validate()?;
        let geometry = QueueGeometry::new(config.log2_entries)?;
        Ok(CommandQueue {
            geometry,
            base: config.base,
            ring: vec![[0; 2]; geometry.entries() as usize],
            prod: QueuePtr(0),
            cons: QueuePtr(0),
            error: None,
            in_flight: None,
            prefetched: 0,
            outstanding_until: SimTime::ZERO,
            msi_acked_until: SimTime::ZERO,
            held_until: SimTime::ZERO,
            features,
            costs: Costs::new(&config.costs),
            counters: CmdqCounters::default(),
        })
    }

    // ---- getters ----

    pub fn geometry(&self) -> QueueGeometry {
        self.geometry
    }
    pub fn features(&self) -> SmmuFeatures {
        self.features
    }
    pub fn base(&self) -> u64 {
        self.base
    }
    /// SMMU_CMDQ_PROD as last written.
    pub fn prod(&self) -> QueuePtr {
        self.prod
    }
    /// SMMU_CMDQ_CONS.RD.
    pub fn cons(&self) -> QueuePtr {
        self.cons
    }
    /// Entries between CONS and PROD (including one being consumed).
    pub fn pending(&self) -> u32 {
        self.geometry.used(self.prod, self.cons)
    }
    pub fn is_full(&self) -> bool {
        self.geometry.is_full(self.prod, self.cons)
    }
    /// Whether a command is being consumed.
    pub fn is_busy(&self) -> bool {
        self.in_flight.is_some()
    }
    /// The active command error (SMMU_GERROR.CMDQ_ERR), if any.
    pub fn error(&self) -> Option<CommandError> {
        self.error
    }
    /// When the in-flight command completes.
    pub fn busy_until(&self) -> Option<SimTime> {
        self.in_flight.map(|f| f.done_at)
    }
    pub fn counters(&self) -> &CmdqCounters {
        &self.counters
    }

    // ---- memory ----

    /// Physical address of the slot at `at`.
    pub fn entry_addr(&self, at: QueuePtr) -> u64 {
        self.base + self.geometry.idx(at) as u64 * CMDQ_ENTRY_BYTES
    }
    /// The slot (index, wrap 0) holding physical address `addr`, if inside the ring.
    pub fn slot_at(&self, addr: u64) -> Option<QueuePtr> {
        let size = CMDQ_ENTRY_BYTES * self.geometry.entries() as u64;
        (addr >= self.base && addr < self.base + size)
            .then(|| QueuePtr(((addr - self.base) / CMDQ_ENTRY_BYTES) as u32))
    }
    /// A CPU store of a whole command into the ring.
    pub fn write_entry(&mut self, at: QueuePtr, words: [u64; 2]) {
        let i = self.geometry.idx(at) as usize;
        self.ring[i] = words;
    }
    pub fn entry(&self, at: QueuePtr) -> [u64; 2] {
        self.ring[self.geometry.idx(at) as usize]
    }
    /// The first 32-bit word of a slot: what Linux's MSI polling reads.
    pub fn entry_word0(&self, at: QueuePtr) -> u32 {
        self.entry(at)[0] as u32
    }
    /// A 32-bit write to physical memory (an MSI); applied only if `addr` is a word of
    /// the ring. Returns whether it landed here.
    pub fn write_memory32(&mut self, addr: u64, data: u32) -> bool {
        let Some(slot) = self.slot_at(addr & !3) else {
            return false;
        };
        let off = (addr & !3) % CMDQ_ENTRY_BYTES;
        let i = slot.0 as usize;
        let (word, shift) = ((off / 8) as usize, (off % 8) * 8);
        let w = &mut self.ring[i][word];
        *w = (*w & !(0xffff_ffffu64 << shift)) | (data as u64) << shift;
        true
    }

    // ---- registers ----

    /// SMMU_CMDQ_PROD write. Bits above the wrap flag are ignored (6.3.27). The new
    /// value must add zero or more entries and keep the queue consistent with CONS
    /// (3.5.1); anything else is a driver bug and an error.
    pub fn write_prod(&mut self, _now: SimTime, value: u32) -> Result<(), SmmuError> {
        let g = self.geometry;
        let new = g.clean(QueuePtr(value));
        let grows = g.is_consistent(new, self.cons)
            && g.used(new, self.cons) >= g.used(self.prod, self.cons);
        if !grows {
            return Err(SmmuError::InconsistentProd {
                prod: value,
                cons: self.cons.0,
                log2: g.log2(),
            });
        }
        self.prod = new;
        let c = &mut self.counters;
        c.prod_writes += 1;
        let pending = g.used(new, self.cons);
        c.max_pending = c.max_pending.max(pending);
        if g.is_full(new, self.cons) {
            c.full_after_prod += 1;
        }
        Ok(())
    }

    /// SMMU_CMDQ_PROD read.
    pub fn read_prod(&self) -> u32 {
        self.prod.0
    }

    /// SMMU_CMDQ_CONS read: RD and RD_WRAP, and ERR in bits \[30:24\] while a command
    /// error is active.
    pub fn read_cons(&self) -> u32 {
        let err = self
            .error
            .map_or(0, |e| (e.code() as u32) << CMDQ_CONS_ERR_SHIFT);
        self.cons.0 | err
    }

    /// Software has handled the command error (rewritten the entry at CONS and
    /// acknowledged SMMU_GERROR.CMDQ_ERR through GERRORN): the queue resumes at CONS.
    pub fn acknowledge_error(&mut self) {
        self.error = None;
        self.prefetched = 0;
    }

    // ---- consumer ----

    /// The write response of a CMD_SYNC's MSI reaches the SMMU at `at`: from then the
    /// write is visible in its Shareability domain. A later CMD_SYNC does not complete
    /// before every earlier one's MSI write is (IHI 0070 4.7.3).
    pub fn msi_write_acknowledged_at(&mut self, at: SimTime) {
        self.msi_acked_until = self.msi_acked_until.max(at);
    }

    /// The consumer starts no command before `at`: an implementation that treats a
    /// CMD_SYNC as complete only once its own MSI write is acknowledged holds the
    /// commands after it until then (4.7.3: later commands "do not begin processing
    /// until the CMD_SYNC completes").
    pub fn hold_until(&mut self, at: SimTime) {
        self.held_until = self.held_until.max(at);
    }

    /// Starts consuming the command at CONS if the consumer is idle, the queue is not
    /// stopped by an error, and PROD is ahead. Returns when it will be done.
    pub fn next_consume(&mut self, now: SimTime) -> Option<ConsumeStart> {
        self.next_consume_with_fetch(now, Duration::ZERO)
    }

    /// Whether [`next_consume`](Self::next_consume) at `now` would start a command:
    /// the consumer is idle and not held, no error stops the queue, and PROD is ahead.
    /// An engine asks this before pricing a line fetch, so that it books the memory
    /// system only for a read that happens.
    pub fn can_start(&self, now: SimTime) -> bool {
        self.in_flight.is_none()
            && self.error.is_none()
            && self.pending() > 0
            && now >= self.held_until
    }

    /// Whether the next command needs a new line of the ring read (none of the last
    /// line's commands are left).
    pub fn fetches_line(&self) -> bool {
        self.prefetched == 0
    }

    /// [`next_consume`](Self::next_consume), with `memory_path` added to a line fetch:
    /// the memory system's part of the read (the trip to the line and the snoop of
    /// whoever holds it), which the engine prices with its coherence model.
    pub fn next_consume_with_fetch(
        &mut self,
        now: SimTime,
        memory_path: Duration,
    ) -> Option<ConsumeStart> {
        if !self.can_start(now) {
            return None;
        }
        let g = self.geometry;
        let mut t = now;
        if self.prefetched == 0 {
            let to_line_end = ENTRIES_PER_LINE - g.idx(self.cons) % ENTRIES_PER_LINE;
            self.prefetched = to_line_end.min(self.pending());
            self.counters.line_fetches += 1;
            t += self.costs.fetch_line + memory_path;
        }
        self.prefetched -= 1;
        t += self.costs.decode;
        let words = self.entry(self.cons);
        let decoded = Command::decode(words);
        let done_at = match &decoded {
            Err(_) => t,
            // Its own work may overlap the wait for earlier MSI writes' responses.
            Ok(Command::Sync { .. }) => {
                (t.max(self.outstanding_until) + self.costs.sync).max(self.msi_acked_until)
            }
            Ok(cmd) => {
                let done = t + self.costs.issue(cmd);
                if cmd.invalidation().is_some() {
                    let complete = done + self.costs.inval_complete;
                    self.outstanding_until = self.outstanding_until.max(complete);
                }
                done
            }
        };
        self.in_flight = Some(InFlight {
            index: self.cons,
            decoded,
            done_at,
        });
        Some(ConsumeStart {
            index: self.cons,
            opcode: words[0] as u8,
            done_at,
        })
    }

    /// Finishes the command started by [`next_consume`](Self::next_consume). Call at
    /// its `done_at` (or later); earlier, or with nothing in flight, is an API error.
    pub fn complete_consume(&mut self, now: SimTime) -> Result<ConsumeOutcome, SmmuError> {
        let f = match self.in_flight {
            None => {
                return Err(SmmuError::NoConsumeDue {
                    now_ps: now.as_ps(),
                    why: "no command is being consumed",
                })
            }
            Some(f) if now < f.done_at => {
                return Err(SmmuError::NoConsumeDue {
                    now_ps: now.as_ps(),
                    why: "the command in flight is not done yet",
                })
            }
            Some(f) => f,
        };
        self.in_flight = None;
        let cmd = match f.decoded {
            Err(e) => {
                self.error = Some(e);
                self.prefetched = 0;
                self.counters.errors += 1;
                return Ok(ConsumeOutcome {
                    index: f.index,
                    command: None,
                    cons: self.cons,
                    effect: ConsumeEffect::Error(e),
                });
            }
            Ok(cmd) => cmd,
        };
        self.cons = self.geometry.inc(self.cons, 1);
        let c = &mut self.counters;
        c.consumed += 1;
        let effect = match cmd {
            Command::Sync {
                cs,
                msi_addr,
                msi_data,
            } => {
                c.sync += 1;
                ConsumeEffect::Sync(self.signal(now, cs, msi_addr, msi_data))
            }
            other => match other.invalidation() {
                Some(inv) => {
                    if matches!(
                        inv,
                        Invalidation::Ste { .. }
                            | Invalidation::SteRange { .. }
                            | Invalidation::AllSte
                    ) {
                        c.cfgi += 1;
                    } else {
                        c.tlbi += 1;
                    }
                    ConsumeEffect::Invalidate(inv)
                }
                None => {
                    c.other += 1;
                    ConsumeEffect::None
                }
            },
        };
        Ok(ConsumeOutcome {
            index: f.index,
            command: Some(cmd),
            cons: self.cons,
            effect,
        })
    }

    fn signal(&mut self, now: SimTime, cs: SyncSignal, addr: u64, data: u32) -> SyncCompletion {
        match cs {
            SyncSignal::Irq if self.features.msi && addr != 0 => {
                self.counters.msi_writes += 1;
                SyncCompletion::MsiWrite {
                    addr,
                    data,
                    visible_at: now + self.costs.msi_write,
                    queue_slot: self.slot_at(addr),
                }
            }
            SyncSignal::Irq if !self.features.msi => {
                self.counters.wired_irqs += 1;
                SyncCompletion::WiredIrq
            }
            SyncSignal::Sev if self.features.sev => {
                self.counters.sev_events += 1;
                SyncCompletion::ConsUpdated { sev: true }
            }
            _ => SyncCompletion::ConsUpdated { sev: false },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(log2: u8, features: SmmuFeatures) -> CommandQueue {
        let cfg = CmdqConfig {
            log2_entries: log2,
            ..CmdqConfig::default()
        };
        CommandQueue::new(&cfg, features).unwrap()
    }

    fn ns(x: u64) -> Duration {
        Duration::from_ns(x)
    }

    /// Every cost field is checked, and a bad one is named.
    #[test]
    fn each_cost_field_is_validated_by_name() {
        let tree = serde_json::to_value(CmdqCosts::default()).unwrap();
        let fields: Vec<String> = tree.as_object().unwrap().keys().cloned().collect();
        assert_eq!(fields.len(), 11);
        for field in fields {
            let mut t = tree.clone();
            t[&field] = serde_json::json!(-1.0);
            let costs: CmdqCosts = serde_json::from_value(t).unwrap();
            let err = costs.validate().unwrap_err();
            assert!(
                matches!(err, SmmuError::InvalidCost { table: "cmdq_costs", field: f, .. } if f == field),
                "{field}: {err:?}"
            );
            let cfg = CmdqConfig {
                costs,
                ..CmdqConfig::default()
            };
            assert!(
                cfg.validate().is_err(),
                "the queue checks its costs: {field}"
            );
        }
        assert!(CmdqCosts::default().validate().is_ok());
        let nan = CmdqCosts {
            sync_ns: f64::NAN,
            ..CmdqCosts::default()
        };
        assert!(matches!(
            nan.validate(),
            Err(SmmuError::InvalidCost {
                field: "sync_ns",
                ..
            })
        ));
    }

    #[test]
    fn queue_size_and_base_limits() {
        let ok = CmdqConfig::default();
        assert!(ok.validate().is_ok());
        let at_max = CmdqConfig {
            log2_entries: 19,
            max_log2_entries: 19,
            base: 1 << 30,
            ..ok.clone()
        };
        assert!(at_max.validate().is_ok(), "16 MiB ring aligned to 1 GiB");
        let e = CmdqConfig {
            max_log2_entries: 20,
            ..ok.clone()
        }
        .validate()
        .unwrap_err();
        assert!(
            matches!(
                e,
                SmmuError::InvalidQueueSize {
                    field: "max_log2_entries",
                    value: 20,
                    max: 19
                }
            ),
            "{e:?}"
        );
        let e = CmdqConfig {
            log2_entries: 9,
            max_log2_entries: 8,
            ..ok.clone()
        }
        .validate()
        .unwrap_err();
        assert!(
            matches!(
                e,
                SmmuError::InvalidQueueSize {
                    field: "log2_entries",
                    value: 9,
                    max: 8
                }
            ),
            "{e:?}"
        );
        assert!(CmdqConfig {
            log2_entries: 8,
            max_log2_entries: 8,
            ..ok.clone()
        }
        .validate()
        .is_ok());
        // 256 entries of 16 bytes: the base must be 4 KiB aligned and below 2^56.
        let e = CmdqConfig {
            base: 0x8000_0800,
            ..ok.clone()
        }
        .validate()
        .unwrap_err();
        assert!(
            matches!(
                e,
                SmmuError::InvalidBaseAddress {
                    field: "base",
                    align: 4096,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(CmdqConfig {
            base: 0x8000_1000,
            ..ok.clone()
        }
        .validate()
        .is_ok());
        assert!(CmdqConfig {
            base: 1 << 56,
            ..ok
        }
        .validate()
        .is_err());
    }

    /// Runs the consumer until idle, returning every outcome with its time.
    fn drain(cq: &mut CommandQueue, mut now: SimTime) -> Vec<(SimTime, ConsumeOutcome)> {
        let mut out = Vec::new();
        while let Some(s) = cq.next_consume(now) {
            now = s.done_at;
            out.push((now, cq.complete_consume(now).unwrap()));
        }
        out
    }

    #[test]
    fn sync_waits_for_earlier_invalidations_and_writes_its_own_slot() {
        let mut cq = q(3, SmmuFeatures::default());
        let c = CmdqCosts::default();
        cq.write_entry(QueuePtr(0), Command::tlbi_nh_va(1, 0x1000).encode());
        let sync_at = QueuePtr(1);
        let msi_addr = cq.entry_addr(sync_at);
        cq.write_entry(
            sync_at,
            Command::Sync {
                cs: SyncSignal::Irq,
                msi_addr,
                msi_data: 0,
            }
            .encode(),
        );
        assert_ne!(cq.entry_word0(sync_at), 0);
        cq.write_prod(SimTime::ZERO, 2).unwrap();
        let out = drain(&mut cq, SimTime::ZERO);
        assert_eq!(out.len(), 2);
        // One line fetch covers both commands.
        assert_eq!(cq.counters().line_fetches, 1);
        let tlbi_done = Duration::from_ns_f64(c.fetch_line_ns + c.decode_ns + c.tlbi_va_ns);
        assert_eq!(out[0].0, SimTime::ZERO + tlbi_done);
        // The sync completes after the invalidation completes, not merely after it was
        // consumed.
        let sync_done = SimTime::ZERO
            + tlbi_done
            + Duration::from_ns_f64(c.invalidation_complete_ns + c.sync_ns);
        assert_eq!(out[1].0, sync_done);
        let ConsumeEffect::Sync(SyncCompletion::MsiWrite {
            addr,
            data,
            visible_at,
            queue_slot,
        }) = out[1].1.effect
        else {
            panic!("{:?}", out[1].1)
        };
        assert_eq!((addr, data, queue_slot), (msi_addr, 0, Some(QueuePtr(1))));
        assert_eq!(visible_at, sync_done + ns(4));
        // The engine applies the write when it becomes visible.
        assert!(cq.write_memory32(addr, data));
        assert_eq!(cq.entry_word0(sync_at), 0);
        assert_eq!(cq.read_cons(), 2);
        assert!(matches!(
            out[0].1.effect,
            ConsumeEffect::Invalidate(Invalidation::Va { asid: 1, .. })
        ));
    }

    /// Two CMD_SYNCs with MSIs, back to back in one line, the first consumed: the
    /// queue and the instant the first completed.
    fn first_of_two_msi_syncs_done() -> (CommandQueue, SimTime) {
        let mut cq = two_msi_syncs();
        let first = cq.next_consume(SimTime::ZERO).unwrap().done_at;
        let _ = cq.complete_consume(first).unwrap();
        (cq, first)
    }

    /// Two CMD_SYNCs with MSIs, back to back in one line.
    fn two_msi_syncs() -> CommandQueue {
        let mut cq = q(3, SmmuFeatures::default());
        for i in 0..2 {
            let at = QueuePtr(i);
            let sync = Command::Sync {
                cs: SyncSignal::Irq,
                msi_addr: cq.entry_addr(at),
                msi_data: 0,
            };
            cq.write_entry(at, sync.encode());
        }
        cq.write_prod(SimTime::ZERO, 2).unwrap();
        cq
    }

    #[test]
    fn a_sync_does_not_complete_before_an_earlier_syncs_msi_write_is_acknowledged() {
        let c = CmdqCosts::default();
        let step = Duration::from_ns_f64(c.decode_ns + c.sync_ns);
        // Nothing acknowledged late: the second sync follows the first at its own pace.
        let (mut free, first) = first_of_two_msi_syncs_done();
        assert_eq!(free.next_consume(first).unwrap().done_at, first + step);
        // The first MSI's response comes back 500 ns after it completed: the second
        // sync's own work overlaps the wait, and it completes when the response lands.
        let (mut cq, first) = first_of_two_msi_syncs_done();
        cq.msi_write_acknowledged_at(first + ns(500));
        let second = cq.next_consume(first).unwrap().done_at;
        assert_eq!(second, first + ns(500));
        // An acknowledgement earlier than the sync's own work changes nothing.
        let (mut early, first) = first_of_two_msi_syncs_done();
        early.msi_write_acknowledged_at(first + ns(1));
        assert_eq!(early.next_consume(first).unwrap().done_at, first + step);
    }

    #[test]
    fn a_held_consumer_starts_nothing_until_the_hold_ends() {
        let c = CmdqCosts::default();
        let (mut cq, first) = first_of_two_msi_syncs_done();
        let until = first + ns(300);
        cq.hold_until(until);
        cq.hold_until(first + ns(100)); // an earlier hold does not shorten it
        assert!(!cq.can_start(first) && !cq.can_start(first + ns(299)));
        assert!(cq.can_start(until));
        assert!(cq.next_consume(first).is_none());
        assert!(cq.next_consume(first + ns(299)).is_none());
        let s = cq.next_consume(until).unwrap();
        assert_eq!(s.index, QueuePtr(1));
        assert_eq!(
            s.done_at,
            until + Duration::from_ns_f64(c.decode_ns + c.sync_ns)
        );
    }

    #[test]
    fn sev_only_with_the_feature_and_wired_irq_without_msi() {
        for (sev, expect) in [(true, true), (false, false)] {
            let mut cq = q(
                2,
                SmmuFeatures {
                    sev,
                    ..SmmuFeatures::default()
                },
            );
            let sync = Command::Sync {
                cs: SyncSignal::Sev,
                msi_addr: 0,
                msi_data: 0,
            };
            cq.write_entry(QueuePtr(0), sync.encode());
            cq.write_prod(SimTime::ZERO, 1).unwrap();
            let out = drain(&mut cq, SimTime::ZERO);
            assert_eq!(
                out[0].1.effect,
                ConsumeEffect::Sync(SyncCompletion::ConsUpdated { sev: expect })
            );
        }
        let mut cq = q(
            2,
            SmmuFeatures {
                msi: false,
                ..SmmuFeatures::default()
            },
        );
        let irq = Command::Sync {
            cs: SyncSignal::Irq,
            msi_addr: 0x1000,
            msi_data: 0,
        };
        cq.write_entry(QueuePtr(0), irq.encode());
        cq.write_prod(SimTime::ZERO, 1).unwrap();
        let out = drain(&mut cq, SimTime::ZERO);
        assert_eq!(
            out[0].1.effect,
            ConsumeEffect::Sync(SyncCompletion::WiredIrq)
        );
    }

    #[test]
    fn illegal_command_stops_the_queue_until_acknowledged() {
        let mut cq = q(2, SmmuFeatures::default());
        cq.write_entry(QueuePtr(0), [0x07, 0]);
        cq.write_entry(QueuePtr(1), Command::TlbiNsnhAll.encode());
        cq.write_prod(SimTime::ZERO, 2).unwrap();
        assert_eq!(cq.error(), None);
        let out = drain(&mut cq, SimTime::ZERO);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].1.effect, ConsumeEffect::Error(CommandError::Illegal));
        assert_eq!(cq.error(), Some(CommandError::Illegal));
        assert_eq!(cq.read_cons(), 1 << 24);
        assert!(cq.next_consume(SimTime(1_000_000)).is_none());
        // Linux's recovery: overwrite the bad entry with a CMD_SYNC, acknowledge.
        let sync = Command::Sync {
            cs: SyncSignal::None,
            msi_addr: 0,
            msi_data: 0,
        };
        cq.write_entry(QueuePtr(0), sync.encode());
        cq.acknowledge_error();
        assert_eq!(cq.error(), None);
        let out = drain(&mut cq, SimTime(1_000_000));
        assert_eq!(out.len(), 2);
        assert_eq!(cq.read_cons(), 2);
    }

    #[test]
    fn prod_cannot_overrun_cons_or_move_back() {
        let mut cq = q(2, SmmuFeatures::default());
        assert!(!cq.is_full() && !cq.is_busy());
        cq.write_prod(SimTime::ZERO, 3).unwrap();
        assert!(!cq.is_full(), "3 of 4 entries");
        cq.write_prod(SimTime::ZERO, 4).unwrap(); // full: idx 0, wrap 1
        assert_eq!(cq.prod(), QueuePtr(4));
        assert!(cq.is_full());
        assert_eq!(cq.counters().full_after_prod, 1);
        assert!(matches!(
            cq.write_prod(SimTime::ZERO, 5),
            Err(SmmuError::InconsistentProd { .. })
        ));
        assert!(cq.write_prod(SimTime::ZERO, 3).is_err());
        assert!(cq.complete_consume(SimTime::ZERO).is_err());
        let started = cq
            .next_consume(SimTime::ZERO)
            .expect("a command to consume");
        assert!(cq.is_busy());
        assert_eq!(cq.busy_until(), Some(started.done_at));
    }

    /// The ring is `entries` slots of 16 bytes from the base; a 32-bit write lands in
    /// the half of the word it addresses and nowhere else.
    #[test]
    fn ring_memory_by_address() {
        let mut cq = q(3, SmmuFeatures::default()); // 8 slots
        let base = cq.base();
        assert_eq!(cq.slot_at(base), Some(QueuePtr(0)));
        assert_eq!(cq.slot_at(base + 16 * 7 + 15), Some(QueuePtr(7)));
        assert_eq!(cq.slot_at(base + 16 * 8), None);
        assert_eq!(cq.slot_at(base - 1), None);
        assert_eq!(
            cq.entry_addr(QueuePtr(8 + 3)),
            base + 48,
            "the wrap flag is not an address"
        );
        let old = [0x1111_1111_2222_2222, 0x3333_3333_4444_4444];
        cq.write_entry(QueuePtr(2), old);
        assert!(cq.write_memory32(base + 32 + 4, 0xdead_beef));
        assert_eq!(cq.entry(QueuePtr(2)), [0xdead_beef_2222_2222, old[1]]);
        assert!(cq.write_memory32(base + 32 + 8, 0xcafe_f00d));
        assert_eq!(cq.entry(QueuePtr(2))[1], 0x3333_3333_cafe_f00d);
        assert!(
            cq.write_memory32(base + 32 + 13, 0x0bad_0bad),
            "bits 1:0 are ignored"
        );
        assert_eq!(cq.entry(QueuePtr(2))[1], 0x0bad_0bad_cafe_f00d);
        assert!(cq.write_memory32(base, 7));
        assert_eq!(cq.entry_word0(QueuePtr(0)), 7);
        assert!(!cq.write_memory32(base + 16 * 8, 1));
        assert_eq!(cq.entry(QueuePtr(1)), [0, 0], "neighbours untouched");
        assert_eq!(cq.entry(QueuePtr(3)), [0, 0]);
    }

    /// The consumer reads one 64-byte line (4 commands) at a time, from CONS to the
    /// line's end, and pays the fetch once per line; commands cannot complete early;
    /// each kind is counted once.
    #[test]
    fn line_fetches_completion_time_and_counters() {
        let c = Costs::new(&CmdqCosts::default());
        let mut cq = q(4, SmmuFeatures::default());
        let sync_irq = |addr| Command::Sync {
            cs: SyncSignal::Irq,
            msi_addr: addr,
            msi_data: 1,
        };
        let cmds = [
            Command::TlbiNhAsid { vmid: 0, asid: 1 },
            Command::CfgiSte { sid: 3, leaf: true },
            Command::Other { opcode: 0x01 },
            sync_irq(0),
            sync_irq(0x4000),
            Command::TlbiNsnhAll,
        ];
        for (k, cmd) in cmds.iter().enumerate() {
            cq.write_entry(QueuePtr(2 + k as u32), cmd.encode());
        }
        // CONS starts at 2: first run the two empty slots through a fake start.
        cq.write_prod(SimTime::ZERO, 2).unwrap();
        assert_eq!(cq.read_prod(), 2);
        cq.write_entry(QueuePtr(0), Command::TlbiNsnhAll.encode());
        cq.write_entry(QueuePtr(1), Command::TlbiNsnhAll.encode());
        let _ = drain(&mut cq, SimTime::ZERO);
        assert_eq!(cq.counters().line_fetches, 1);
        cq.write_prod(SimTime::ZERO, 8).unwrap();
        assert_eq!(
            (
                cq.read_prod(),
                cq.counters().prod_writes,
                cq.counters().max_pending
            ),
            (8, 2, 6)
        );
        let now = SimTime(1_000_000_000);
        let first = cq.next_consume(now).unwrap();
        // Slot 2 ends the first line: a fresh line fetch before it.
        assert_eq!(
            first.done_at,
            now + c.fetch_line + c.decode + c.issue(&cmds[0])
        );
        assert!(cq.complete_consume(SimTime(first.done_at.0 - 1)).is_err());
        let _ = cq.complete_consume(first.done_at).unwrap();
        let _ = drain(&mut cq, first.done_at);
        let n = cq.counters();
        // Lines: slots 0-3 (fetched at CONS 0 and again at CONS 2 after the queue ran
        // dry) and 4-7.
        assert_eq!(n.line_fetches, 3);
        assert_eq!(
            (n.consumed, n.tlbi, n.cfgi, n.other, n.sync),
            (8, 4, 1, 1, 2)
        );
        assert_eq!(
            (n.msi_writes, n.wired_irqs, n.sev_events),
            (1, 0, 0),
            "MSIAddress 0 sends no MSI"
        );
    }

    /// The consumer fetches a line only when none of the last line's commands are left,
    /// and the memory system's part of a fetch is added to that command alone.
    #[test]
    fn only_a_line_fetch_pays_the_memory_path() {
        let c = Costs::new(&CmdqCosts::default());
        let mut cq = q(4, SmmuFeatures::default());
        for k in 0..6 {
            cq.write_entry(QueuePtr(k), Command::TlbiNsnhAll.encode());
        }
        cq.write_prod(SimTime::ZERO, 6).unwrap();
        let path = ns(333);
        let mut now = SimTime::ZERO;
        let mut fetched = Vec::new();
        loop {
            let fetches = cq.fetches_line();
            let Some(start) = cq.next_consume_with_fetch(now, path) else {
                break;
            };
            let fetch = if fetches {
                c.fetch_line + path
            } else {
                Duration::ZERO
            };
            assert_eq!(
                start.done_at,
                now + fetch + c.decode + c.issue(&Command::TlbiNsnhAll)
            );
            fetched.push(fetches);
            now = start.done_at;
            let _ = cq.complete_consume(now).unwrap();
        }
        // Slots 0-3 are one line, 4-5 the next.
        assert_eq!(fetched, [true, false, false, false, true, false]);
        assert_eq!(cq.counters().line_fetches, 2);
        assert!(cq.fetches_line(), "the second line is used up");
    }

    /// Sixteen commands from slot 0 are four 64-byte lines; each completion signal and
    /// each command error is counted once.
    #[test]
    fn lines_of_four_and_signal_counters() {
        let mut cq = q(4, SmmuFeatures::default());
        for k in 0..16 {
            cq.write_entry(QueuePtr(k), Command::TlbiNsnhAll.encode());
        }
        cq.write_prod(SimTime::ZERO, 16).unwrap();
        let _ = drain(&mut cq, SimTime::ZERO);
        assert_eq!(cq.counters().line_fetches, 4);

        let sync = |cs| Command::Sync {
            cs,
            msi_addr: 0x1000,
            msi_data: 0,
        };
        let no_msi = SmmuFeatures {
            msi: false,
            ..SmmuFeatures::default()
        };
        let mut cq = q(3, no_msi);
        cq.write_entry(QueuePtr(0), sync(SyncSignal::Irq).encode());
        cq.write_entry(QueuePtr(1), sync(SyncSignal::Sev).encode());
        cq.write_entry(QueuePtr(2), sync(SyncSignal::Sev).encode());
        cq.write_entry(QueuePtr(3), [0x07, 0]);
        cq.write_prod(SimTime::ZERO, 4).unwrap();
        let _ = drain(&mut cq, SimTime::ZERO);
        let c = cq.counters();
        assert_eq!(
            (c.wired_irqs, c.sev_events, c.msi_writes, c.errors),
            (1, 2, 0, 1)
        );
    }

    #[test]
    fn the_queue_keeps_its_configuration() {
        let features = SmmuFeatures {
            msi: false,
            cohacc: true,
            sev: false,
        };
        let cfg = CmdqConfig {
            base: 0x1234_0000,
            ..CmdqConfig::default()
        };
        let cq = CommandQueue::new(&cfg, features).unwrap();
        assert_eq!((cq.features(), cq.base()), (features, 0x1234_0000));
    }

    proptest! {
        /// A producer that waits whenever the queue lacks space, against a consumer
        /// run at random moments: every command comes out once, in order; no PROD
        /// write is ever refused; each CMD_SYNC completes no earlier than every
        /// invalidation before it has completed; wrap-around many times over.
        #[test]
        fn producer_waits_never_loses_and_sync_orders(
            log2 in 1u8..5,
            batches in prop::collection::vec((1u32..6, any::<bool>(), 0u64..400), 1..60),
        ) {
            let mut cq = q(log2, SmmuFeatures::default());
            let g = cq.geometry();
            let c = CmdqCosts::default();
            let mut now = SimTime::ZERO;
            let mut prod = QueuePtr(0);
            let mut sent: Vec<u64> = Vec::new();
            let mut got: Vec<u64> = Vec::new();
            let mut last_inval_consumed = SimTime::ZERO;
            let mut seq = 0u64;
            let mut waits = 0u64;
            let step = |cq: &mut CommandQueue, now: SimTime, got: &mut Vec<u64>, last: &mut SimTime|
                -> Result<Option<SimTime>, TestCaseError> {
                if let Some(t) = cq.busy_until() {
                    if t > now { return Ok(Some(t)); }
                    let out = cq.complete_consume(now).unwrap();
                    match out.command.unwrap() {
                        // `t` is when the command was done (the engine may call later).
                        Command::TlbiNhVa { addr, .. } => { got.push(addr >> 12); *last = t; }
                        Command::Sync { .. } => {
                            let earliest = *last + Duration::from_ns_f64(c.invalidation_complete_ns + c.sync_ns);
                            prop_assert!(t >= earliest || *last == SimTime::ZERO);
                        }
                        other => prop_assert!(false, "unexpected {:?}", other),
                    }
                }
                Ok(cq.next_consume(now).map(|s| s.done_at))
            };
            for (n, sync, gap) in batches {
                let need = n + sync as u32;
                prop_assume!(need <= g.entries());
                // Wait (advance time, letting the SMMU consume) until there is space.
                while !g.has_space(prod, cq.cons(), need) {
                    waits += 1;
                    match step(&mut cq, now, &mut got, &mut last_inval_consumed)? {
                        Some(t) => now = now.max(t),
                        None => prop_assert!(
                            g.has_space(prod, cq.cons(), need),
                            "a queue without space must have work in flight"
                        ),
                    }
                }
                for i in 0..n {
                    seq += 1;
                    cq.write_entry(g.inc(prod, i), Command::tlbi_nh_va(1, seq << 12).encode());
                    sent.push(seq);
                }
                if sync {
                    let s = Command::Sync { cs: SyncSignal::Sev, msi_addr: 0, msi_data: 0 };
                    cq.write_entry(g.inc(prod, n), s.encode());
                }
                prod = g.inc(prod, need);
                prop_assert!(cq.write_prod(now, prod.0).is_ok());
                now += Duration::from_ns(gap);
                let _ = step(&mut cq, now, &mut got, &mut last_inval_consumed)?;
            }
            // Drain.
            loop {
                match step(&mut cq, now, &mut got, &mut last_inval_consumed)? {
                    Some(t) => now = t.max(now),
                    None if cq.busy_until().is_none() => break,
                    None => {}
                }
            }
            prop_assert_eq!(got, sent);
            prop_assert_eq!(cq.pending(), 0);
            let _ = waits;
        }
    }
}

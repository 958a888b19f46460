//! Stream table, stage 1 translation with a configuration cache and an IOTLB, and
//! translation faults as event records.
//!
//! The order of checks follows the SMMU's translation flow (IHI 0070 3.3 and the event
//! conditions of 7.3):
//!
//! 1. StreamID >= 2^SMMU_STRTAB_BASE_CFG.LOG2SIZE: C_BAD_STREAMID (0x02).
//! 2. Configuration cache lookup; on a miss fetch the STE and its CD. An abort on the
//!    STE fetch: F_STE_FETCH (0x03).
//! 3. STE.V == 0, or STE.Config one of the reserved values 0b001-0b011: C_BAD_STE
//!    (0x04).
//! 4. STE.Config == 0b000 (abort): the transaction is terminated with no event;
//!    0b100 (bypass): the address passes through.
//! 5. Stage 1 (0b101): IOTLB lookup tagged by the CD's ASID; on a miss a table walk of
//!    `walk_levels` dependent reads. No valid leaf: F_TRANSLATION (0x10). A write to a
//!    read-only page: F_PERMISSION (0x13). Faulting translations are not cached.
//!
//! Faults terminate the transaction (no stall model) and are recorded in the Event
//! queue if it has room; when it is full the record is discarded and the queue's
//! overflow flag set (3.5.3, 7.4). Per-event totals count every fault, recorded or not,
//! so the balance of a run never loses one.
//!
//! Software changes mappings with [`Translator::map`] / [`Translator::unmap`] (what
//! io-pgtable does to the tables in memory) and STEs with [`Translator::set_ste`]. The
//! caches are *not* coherent with those writes: a stale IOTLB entry keeps translating an
//! unmapped page, and a stale configuration keeps the old STE, until a consumed
//! CMD_TLBI_* / CMD_CFGI_* reaches [`Translator::apply`]. That window is why Linux
//! issues a TLBI and a CMD_SYNC per unmap.
//!
//! Why the IOTLB matters: Farshin et al., "Overcoming the IOTLB wall for
//! multi-100-Gbps Linux-based networking" (PeerJ CS 2023) measure up to 20% lower
//! throughput at 200 Gbit/s from IOTLB misses (COST-SOURCES.md); each miss here costs a
//! full walk, since walk caches are not modelled.
//!
//! Not modelled: stage 2 and nested translation, substreams (PASID) and CD tables
//! beyond one CD per STE, 2-level stream tables, ATS/PRI, the stall model, HTTU,
//! translation walk caches, page sizes other than 4 KB, block mappings.

use super::cmd::Invalidation;
use super::error::{check_ns, SmmuError};
use crate::lru::{CacheCounters, LruCache};
use serde::{Deserialize, Serialize};
use sim_core::{Duration, SimTime};
use std::collections::{BTreeMap, VecDeque};

/// STE word 0, V (bit 0): the entry is valid (IHI 0070 5.2).
pub const STE_V: u64 = 1;
/// STE word 0, Config (bits \[3:1\]).
pub const STE_CONFIG_SHIFT: u32 = 1;
pub const STE_CONFIG_MASK: u64 = 0b111;
/// STE.Config = 0b000: abort all transactions, no event.
pub const STE_CONFIG_ABORT: u8 = 0b000;
/// STE.Config = 0b100: stage 1 and stage 2 bypass.
pub const STE_CONFIG_BYPASS: u8 = 0b100;
/// STE.Config = 0b101: stage 1 translate, stage 2 bypass.
pub const STE_CONFIG_S1_TRANS: u8 = 0b101;
/// STE.Config = 0b110: stage 2 translate only (not modelled).
pub const STE_CONFIG_S2_TRANS: u8 = 0b110;
/// STE.Config = 0b111: nested (not modelled).
pub const STE_CONFIG_NESTED: u8 = 0b111;

/// The translation granule: 4 KB.
pub const PAGE_SHIFT: u32 = 12;
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;

/// Event record types the model produces (IHI 0070 7.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventId {
    /// C_BAD_STREAMID, 0x02: StreamID out of range of the stream table.
    CBadStreamId,
    /// F_STE_FETCH, 0x03: external abort fetching the STE.
    FSteFetch,
    /// C_BAD_STE, 0x04: STE invalid (V == 0) or with an illegal configuration.
    CBadSte,
    /// F_TRANSLATION, 0x10: no valid translation for the input address.
    FTranslation,
    /// F_PERMISSION, 0x13: the translation forbids the access.
    FPermission,
}

impl EventId {
    /// The event number in the record's bits \[7:0\].
    pub fn code(self) -> u8 {
        match self {
            EventId::CBadStreamId => 0x02,
            EventId::FSteFetch => 0x03,
            EventId::CBadSte => 0x04,
            EventId::FTranslation => 0x10,
            EventId::FPermission => 0x13,
        }
    }
    /// The name the spec (and Linux's log) uses.
    pub fn name(self) -> &'static str {
        match self {
            EventId::CBadStreamId => "C_BAD_STREAMID",
            EventId::FSteFetch => "F_STE_FETCH",
            EventId::CBadSte => "C_BAD_STE",
            EventId::FTranslation => "F_TRANSLATION",
            EventId::FPermission => "F_PERMISSION",
        }
    }
}

/// One Stream Table Entry, reduced to the fields modelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ste {
    /// STE.V.
    pub valid: bool,
    /// STE.Config, raw 3 bits (reserved values are representable, to model C_BAD_STE).
    pub config: u8,
    /// The translation context (the CD that STE.S1ContextPtr points at) for stage 1.
    pub context: u32,
}

impl Ste {
    /// An all-zero STE: what an unwritten stream table slot holds.
    pub const INVALID: Ste = Ste {
        valid: false,
        config: 0,
        context: 0,
    };
    pub fn abort() -> Ste {
        Ste {
            valid: true,
            config: STE_CONFIG_ABORT,
            context: 0,
        }
    }
    pub fn bypass() -> Ste {
        Ste {
            valid: true,
            config: STE_CONFIG_BYPASS,
            context: 0,
        }
    }
    pub fn stage1(context: u32) -> Ste {
        Ste {
            valid: true,
            config: STE_CONFIG_S1_TRANS,
            context,
        }
    }
    /// STE word 0's V and Config bits.
    pub fn word0(&self) -> u64 {
        (if self.valid { STE_V } else { 0 })
            | ((self.config as u64) & STE_CONFIG_MASK) << STE_CONFIG_SHIFT
    }
}

/// Access permissions of a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Perm {
    pub read: bool,
    pub write: bool,
}

impl Perm {
    pub const RW: Perm = Perm {
        read: true,
        write: true,
    };
    pub const RO: Perm = Perm {
        read: true,
        write: false,
    };
    pub const WO: Perm = Perm {
        read: false,
        write: true,
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pte {
    pa_page: u64,
    perm: Perm,
}

#[derive(Clone, Debug)]
struct Context {
    asid: u16,
    pages: BTreeMap<u64, Pte>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SteSlot {
    Entry(Ste),
    /// The STE's memory returns an external abort (to model F_STE_FETCH).
    FetchAbort,
}

/// What the configuration cache holds for a StreamID: the STE and its CD's ASID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CachedConfig {
    ste: Ste,
    asid: u16,
}

/// A transaction from a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct DmaRequest {
    pub stream_id: u32,
    /// Input address (IOVA).
    pub iova: u64,
    pub write: bool,
}

/// What happened to one transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TranslateResult {
    /// Translated by stage 1.
    Translated { pa: u64, tlb_hit: bool },
    /// STE bypass: the output address is the input address.
    Bypassed { pa: u64 },
    /// STE.Config = abort: terminated, no event (IHI 0070 5.2, Config 0b000).
    Aborted,
    /// Terminated with a fault; `recorded` says whether the Event queue took the record.
    Fault { event: EventId, recorded: bool },
}

/// Result of [`Translator::translate`].
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TranslateOutcome {
    /// Time the SMMU spends on the transaction.
    pub cost: Duration,
    pub result: TranslateResult,
}

/// One record in the Event queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct EventRecord {
    pub event: EventId,
    pub stream_id: u32,
    pub input_addr: u64,
    pub write: bool,
    pub at: SimTime,
}

/// Latencies of the translation path. Unpublished for real SMMUs; defaults are
/// assumptions built from the published DRAM latency.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TranslateCosts {
    /// Configuration (STE + CD) found in the configuration cache. Nanoseconds.
    /// Default 3 ns: assumption, an on-chip lookup of a few cycles.
    pub config_cache_hit_ns: f64,
    /// Configuration cache miss: fetch the STE, then the CD it points at, two
    /// dependent reads. Nanoseconds. Default 162 ns: 2 x 81 ns local DRAM idle latency
    /// (FD.io CSIT "Calibration Data - Cascadelake", Intel MLC, COST-SOURCES.md).
    pub config_fetch_ns: f64,
    /// IOTLB hit. Nanoseconds. Default 5 ns: assumption, a TBU TLB lookup.
    pub iotlb_hit_ns: f64,
    /// One level of a table walk after an IOTLB miss: one dependent descriptor read.
    /// Nanoseconds. Default 81 ns: local DRAM idle latency (same source); walk caches
    /// are not modelled, so a miss pays every level. Farshin et al. (PeerJ CS 2023)
    /// show what such misses cost at 200 Gbit/s.
    pub walk_level_ns: f64,
    /// Terminating a faulting transaction and forming its event record. Nanoseconds.
    /// Default 10 ns: assumption.
    pub fault_ns: f64,
}

impl Default for TranslateCosts {
    fn default() -> Self {
        TranslateCosts {
            config_cache_hit_ns: 3.0,
            config_fetch_ns: 162.0,
            iotlb_hit_ns: 5.0,
            walk_level_ns: 81.0,
            fault_ns: 10.0,
        }
    }
}

impl TranslateCosts {
    pub fn validate(&self) -> Result<(), SmmuError> {
        let t = "translate_costs";
        check_ns(t, "config_cache_hit_ns", self.config_cache_hit_ns)?;
        check_ns(t, "config_fetch_ns", self.config_fetch_ns)?;
        check_ns(t, "iotlb_hit_ns", self.iotlb_hit_ns)?;
        check_ns(t, "walk_level_ns", self.walk_level_ns)?;
        check_ns(t, "fault_ns", self.fault_ns)
    }
}

/// How the translation side is set up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TranslateConfig {
    /// SMMU_STRTAB_BASE_CFG.LOG2SIZE of a linear stream table, 0..=24. Default 16:
    /// a 16-bit PCIe requester ID space.
    pub stream_table_log2: u8,
    /// Levels of a stage 1 walk, 1..=4. Default 4: VMSAv8-64 with a 4 KB granule and a
    /// 48-bit input address walks levels 0-3.
    pub walk_levels: u8,
    /// Configuration cache entries. Default 64: assumption (implementation defined).
    pub config_cache_entries: usize,
    /// IOTLB entries. Default 128: assumption (implementation defined; Arm MMU-600
    /// makes TBU TLB sizes a build option).
    pub iotlb_entries: usize,
    /// log2 of the Event queue entries, 0..=19. Default 7 (128): assumption.
    pub event_queue_log2: u8,
    pub costs: TranslateCosts,
}

impl Default for TranslateConfig {
    fn default() -> Self {
        TranslateConfig {
            stream_table_log2: 16,
            walk_levels: 4,
            config_cache_entries: 64,
            iotlb_entries: 128,
            event_queue_log2: 7,
            costs: TranslateCosts::default(),
        }
    }
}

impl TranslateConfig {
    pub fn validate(&self) -> Result<(), SmmuError> {
        if self.stream_table_log2 > 24 {
            return Err(SmmuError::InvalidStreamTableSize {
                value: self.stream_table_log2,
            });
        }
        if !(1..=4).contains(&self.walk_levels) {
            return Err(SmmuError::InvalidConfig {
                field: "walk_levels",
                value: self.walk_levels as u64,
                allowed: "1..=4",
            });
        }
        if self.event_queue_log2 > super::queue::MAX_QUEUE_LOG2 {
            return Err(SmmuError::InvalidQueueSize {
                field: "event_queue_log2",
                value: self.event_queue_log2,
                max: super::queue::MAX_QUEUE_LOG2,
            });
        }
        self.costs.validate()
    }
}

/// Counters snapshot. `requests = translated + bypassed + aborted + faults`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TranslateCounters {
    pub requests: u64,
    pub translated: u64,
    pub bypassed: u64,
    pub aborted: u64,
    pub faults: u64,
    /// Faults by event type (recorded or not).
    pub faults_by_event: BTreeMap<EventId, u64>,
    /// Event records discarded because the Event queue was full.
    pub events_discarded: u64,
    pub walks: u64,
    pub config_cache: CacheCounters,
    pub iotlb: CacheCounters,
}

#[derive(Clone, Copy, Debug)]
struct CostsPs {
    config_hit: Duration,
    config_fetch: Duration,
    iotlb_hit: Duration,
    walk: Duration,
    fault: Duration,
}

/// The translation side of one SMMU: stream table, contexts, caches, Event queue.
#[derive(Clone, Debug)]
pub struct Translator {
    config: TranslateConfig,
    costs: CostsPs,
    stream_table: BTreeMap<u32, SteSlot>,
    contexts: BTreeMap<u32, Context>,
    config_cache: LruCache<u32, CachedConfig>,
    iotlb: LruCache<(u16, u64), Pte>,
    events: VecDeque<EventRecord>,
    event_overflow: bool,
    counters: TranslateCounters,
}

impl Translator {
    pub fn new(config: TranslateConfig) -> Result<Translator, SmmuError> {
        config.validate()?;
        let c = &config.costs;
        let d = Duration::from_ns_f64;
        let costs = CostsPs {
            config_hit: d(c.config_cache_hit_ns),
            config_fetch: d(c.config_fetch_ns),
            iotlb_hit: d(c.iotlb_hit_ns),
            walk: d(c.walk_level_ns * config.walk_levels as f64),
            fault: d(c.fault_ns),
        };
        Ok(Translator {
            costs,
            config_cache: LruCache::new(config.config_cache_entries),
            iotlb: LruCache::new(config.iotlb_entries),
            config,
            stream_table: BTreeMap::new(),
            contexts: BTreeMap::new(),
            events: VecDeque::new(),
            event_overflow: false,
            counters: TranslateCounters::default(),
        })
    }

    fn check_sid(&self, sid: u32) -> Result<(), SmmuError> {
        let log2 = self.config.stream_table_log2;
        if (sid as u64) >> log2 != 0 {
            return Err(SmmuError::StreamIdOutOfRange { sid, log2 });
        }
        Ok(())
    }

    /// Writes the STE of `sid` in memory. Stage 2 and nested configurations are
    /// refused (not modelled); reserved configurations are accepted so that they can
    /// fault with C_BAD_STE. Cached copies stay until a CMD_CFGI.
    pub fn set_ste(&mut self, sid: u32, ste: Ste) -> Result<(), SmmuError> {
        self.check_sid(sid)?;
        if ste.config == STE_CONFIG_S2_TRANS || ste.config == STE_CONFIG_NESTED {
            return Err(SmmuError::UnsupportedSteConfig {
                sid,
                config: ste.config,
            });
        }
        if ste.valid
            && ste.config == STE_CONFIG_S1_TRANS
            && !self.contexts.contains_key(&ste.context)
        {
            return Err(SmmuError::NoSuchContext { ctx: ste.context });
        }
        self.stream_table.insert(sid, SteSlot::Entry(ste));
        Ok(())
    }

    /// Makes the memory behind the STE of `sid` return an external abort.
    pub fn poison_ste(&mut self, sid: u32) -> Result<(), SmmuError> {
        self.check_sid(sid)?;
        self.stream_table.insert(sid, SteSlot::FetchAbort);
        Ok(())
    }

    /// Creates translation context `ctx` (a CD) with `asid` and an empty page table.
    pub fn add_context(&mut self, ctx: u32, asid: u16) {
        self.contexts.insert(
            ctx,
            Context {
                asid,
                pages: BTreeMap::new(),
            },
        );
    }

    /// Maps the 4 KB page at `iova` to `pa` (a page-table write; no cache is touched).
    pub fn map(&mut self, ctx: u32, iova: u64, pa: u64, perm: Perm) -> Result<(), SmmuError> {
        for (field, v) in [("iova", iova), ("pa", pa)] {
            if v % PAGE_SIZE != 0 {
                return Err(SmmuError::Unaligned { field, value: v });
            }
        }
        let c = self
            .contexts
            .get_mut(&ctx)
            .ok_or(SmmuError::NoSuchContext { ctx })?;
        c.pages.insert(
            iova >> PAGE_SHIFT,
            Pte {
                pa_page: pa >> PAGE_SHIFT,
                perm,
            },
        );
        Ok(())
    }

    /// Clears the PTE of the page at `iova`; returns whether it was mapped. The IOTLB
    /// keeps any cached copy until a TLBI for it is consumed.
    pub fn unmap(&mut self, ctx: u32, iova: u64) -> Result<bool, SmmuError> {
        let c = self
            .contexts
            .get_mut(&ctx)
            .ok_or(SmmuError::NoSuchContext { ctx })?;
        Ok(c.pages.remove(&(iova >> PAGE_SHIFT)).is_some())
    }

    /// The ASID of context `ctx`.
    pub fn context_asid(&self, ctx: u32) -> Option<u16> {
        self.contexts.get(&ctx).map(|c| c.asid)
    }

    /// Applies a consumed invalidation command to the caches.
    pub fn apply(&mut self, inv: &Invalidation) {
        match *inv {
            Invalidation::Va { asid, addr, pages } => {
                let first = addr >> PAGE_SHIFT;
                let last = first.saturating_add(pages.max(1) - 1);
                self.iotlb.invalidate_range((asid, first)..=(asid, last));
            }
            Invalidation::Asid { asid } => {
                self.iotlb.invalidate_range((asid, 0)..=(asid, u64::MAX));
            }
            Invalidation::AllTlb => self.iotlb.clear(),
            Invalidation::Ste { sid } => {
                self.config_cache.invalidate(sid);
            }
            Invalidation::SteRange { first, last } => {
                self.config_cache.invalidate_range(first..=last);
            }
            Invalidation::AllSte => self.config_cache.clear(),
        }
    }

    fn fault(
        &mut self,
        now: SimTime,
        req: &DmaRequest,
        event: EventId,
        cost: Duration,
    ) -> TranslateOutcome {
        self.counters.faults += 1;
        *self.counters.faults_by_event.entry(event).or_insert(0) += 1;
        let cap = 1usize << self.config.event_queue_log2;
        let recorded = self.events.len() < cap;
        if recorded {
            self.events.push_back(EventRecord {
                event,
                stream_id: req.stream_id,
                input_addr: req.iova,
                write: req.write,
                at: now,
            });
        } else {
            self.event_overflow = true;
            self.counters.events_discarded += 1;
        }
        TranslateOutcome {
            cost: cost + self.costs.fault,
            result: TranslateResult::Fault { event, recorded },
        }
    }

    /// Translates one transaction arriving at `now`.
    pub fn translate(&mut self, now: SimTime, req: DmaRequest) -> TranslateOutcome {
        let c = self.costs;
        self.counters.requests += 1;
        if (req.stream_id as u64) >> self.config.stream_table_log2 != 0 {
            return self.fault(now, &req, EventId::CBadStreamId, Duration::ZERO);
        }
        let mut cost;
        let cfg = match self.config_cache.lookup(req.stream_id) {
            Some(cfg) => {
                cost = c.config_hit;
                cfg
            }
            None => {
                cost = c.config_fetch;
                let ste = match self.stream_table.get(&req.stream_id) {
                    Some(SteSlot::FetchAbort) => {
                        return self.fault(now, &req, EventId::FSteFetch, cost)
                    }
                    Some(SteSlot::Entry(ste)) => *ste,
                    None => Ste::INVALID,
                };
                let cfg_ok = ste.valid
                    && matches!(
                        ste.config,
                        STE_CONFIG_ABORT | STE_CONFIG_BYPASS | STE_CONFIG_S1_TRANS
                    );
                if !cfg_ok {
                    return self.fault(now, &req, EventId::CBadSte, cost);
                }
                let asid = if ste.config == STE_CONFIG_S1_TRANS {
                    self.contexts[&ste.context].asid
                } else {
                    0
                };
                let cfg = CachedConfig { ste, asid };
                self.config_cache.fill(req.stream_id, cfg);
                cfg
            }
        };
        match cfg.ste.config {
            STE_CONFIG_ABORT => {
                self.counters.aborted += 1;
                return TranslateOutcome {
                    cost,
                    result: TranslateResult::Aborted,
                };
            }
            STE_CONFIG_BYPASS => {
                self.counters.bypassed += 1;
                return TranslateOutcome {
                    cost,
                    result: TranslateResult::Bypassed { pa: req.iova },
                };
            }
            _ => {}
        }
        let page = req.iova >> PAGE_SHIFT;
        let key = (cfg.asid, page);
        let (pte, tlb_hit) = match self.iotlb.lookup(key) {
            Some(pte) => {
                cost += c.iotlb_hit;
                (Some(pte), true)
            }
            None => {
                self.counters.walks += 1;
                cost += c.walk;
                let pte = self
                    .contexts
                    .get(&cfg.ste.context)
                    .and_then(|ctx| ctx.pages.get(&page).copied());
                (pte, false)
            }
        };
        let Some(pte) = pte else {
            return self.fault(now, &req, EventId::FTranslation, cost);
        };
        if !tlb_hit {
            self.iotlb.fill(key, pte);
        }
        let allowed = if req.write {
            pte.perm.write
        } else {
            pte.perm.read
        };
        if !allowed {
            return self.fault(now, &req, EventId::FPermission, cost);
        }
        self.counters.translated += 1;
        TranslateOutcome {
            cost,
            result: TranslateResult::Translated {
                pa: pte.pa_page << PAGE_SHIFT | (req.iova & (PAGE_SIZE - 1)),
                tlb_hit,
            },
        }
    }

    /// Software consumes the oldest event record.
    pub fn pop_event(&mut self) -> Option<EventRecord> {
        self.events.pop_front()
    }
    /// Records waiting in the Event queue.
    pub fn events(&self) -> impl Iterator<Item = &EventRecord> {
        self.events.iter()
    }
    /// Whether a record was discarded for lack of room since the last
    /// [`acknowledge_overflow`](Self::acknowledge_overflow).
    pub fn event_overflow(&self) -> bool {
        self.event_overflow
    }
    pub fn acknowledge_overflow(&mut self) {
        self.event_overflow = false;
    }
    /// Whether the IOTLB holds a translation for (`asid`, page of `iova`).
    pub fn iotlb_contains(&self, asid: u16, iova: u64) -> bool {
        self.iotlb.contains((asid, iova >> PAGE_SHIFT))
    }
    pub fn counters(&self) -> TranslateCounters {
        let mut c = self.counters.clone();
        c.config_cache = *self.config_cache.counters();
        c.iotlb = *self.iotlb.counters();
        c
    }
    pub fn config(&self) -> &TranslateConfig {
        &self.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(sid: u32, iova: u64, write: bool) -> DmaRequest {
        DmaRequest {
            stream_id: sid,
            iova,
            write,
        }
    }

    fn setup() -> Translator {
        let mut t = Translator::new(TranslateConfig {
            stream_table_log2: 8,
            event_queue_log2: 1,
            ..TranslateConfig::default()
        })
        .unwrap();
        t.add_context(1, 7);
        t.map(1, 0x1000, 0xa000, Perm::RW).unwrap();
        t.map(1, 0x2000, 0xb000, Perm::RO).unwrap();
        t.set_ste(3, Ste::stage1(1)).unwrap();
        t
    }

    #[test]
    fn miss_then_hit_costs_and_addresses() {
        let mut t = setup();
        let c = TranslateCosts::default();
        let first = t.translate(SimTime::ZERO, req(3, 0x1234, true));
        assert_eq!(
            first.result,
            TranslateResult::Translated {
                pa: 0xa234,
                tlb_hit: false
            }
        );
        assert_eq!(
            first.cost,
            Duration::from_ns_f64(c.config_fetch_ns + 4.0 * c.walk_level_ns)
        );
        let second = t.translate(SimTime::ZERO, req(3, 0x1ff8, false));
        assert_eq!(
            second.result,
            TranslateResult::Translated {
                pa: 0xaff8,
                tlb_hit: true
            }
        );
        assert_eq!(
            second.cost,
            Duration::from_ns_f64(c.config_cache_hit_ns + c.iotlb_hit_ns)
        );
    }

    #[test]
    fn faults_in_spec_order_with_event_codes() {
        let mut t = setup();
        let r =
            |t: &mut Translator, sid, iova, w| t.translate(SimTime::ZERO, req(sid, iova, w)).result;
        let fault = |event, recorded| TranslateResult::Fault { event, recorded };
        assert_eq!(
            r(&mut t, 0x100, 0x1000, false),
            fault(EventId::CBadStreamId, true)
        );
        assert_eq!(r(&mut t, 4, 0x1000, false), fault(EventId::CBadSte, true));
        // Event queue of 2 entries is now full: the next fault is counted, not recorded.
        assert_eq!(
            r(&mut t, 3, 0x9000, false),
            fault(EventId::FTranslation, false)
        );
        assert!(t.event_overflow());
        assert_eq!(t.pop_event().unwrap().event.code(), 0x02);
        assert_eq!(
            r(&mut t, 3, 0x2000, true),
            fault(EventId::FPermission, true)
        );
        t.poison_ste(5).unwrap();
        assert_eq!(r(&mut t, 5, 0, false), fault(EventId::FSteFetch, false));
        t.set_ste(
            6,
            Ste {
                valid: true,
                config: 0b010,
                context: 0,
            },
        )
        .unwrap();
        assert_eq!(r(&mut t, 6, 0, false), fault(EventId::CBadSte, false));
        t.set_ste(7, Ste::abort()).unwrap();
        assert_eq!(r(&mut t, 7, 0, false), TranslateResult::Aborted);
        t.set_ste(8, Ste::bypass()).unwrap();
        assert_eq!(
            r(&mut t, 8, 0x42, false),
            TranslateResult::Bypassed { pa: 0x42 }
        );
        let c = t.counters();
        assert_eq!(c.requests, c.translated + c.bypassed + c.aborted + c.faults);
        assert_eq!(c.faults, 6);
        assert_eq!(c.events_discarded, 3);
        assert_eq!(c.faults_by_event[&EventId::CBadSte], 2);
        assert_eq!(EventId::FPermission.name(), "F_PERMISSION");
    }

    /// What software reads of the Event queue: the records in order, the overflow flag
    /// until acknowledged; and the context's ASID and the configuration as given.
    #[test]
    fn event_queue_records_overflow_and_getters() {
        let mut t = setup();
        assert_eq!(t.context_asid(1), Some(7));
        assert_eq!(t.context_asid(2), None);
        assert_eq!(t.config().event_queue_log2, 1);
        assert!(!t.event_overflow());
        let at = SimTime(5_000);
        let _ = t.translate(at, req(3, 0x9000, true));
        let _ = t.translate(at, req(4, 0x1000, false));
        let records: Vec<_> = t
            .events()
            .map(|e| (e.event, e.stream_id, e.input_addr, e.write, e.at))
            .collect();
        assert_eq!(
            records,
            vec![
                (EventId::FTranslation, 3, 0x9000, true, at),
                (EventId::CBadSte, 4, 0x1000, false, at),
            ]
        );
        let _ = t.translate(at, req(4, 0, false));
        assert!(t.event_overflow());
        t.acknowledge_overflow();
        assert!(!t.event_overflow());
        assert_eq!(
            t.events().count(),
            2,
            "acknowledging does not drain the queue"
        );
    }

    /// Walks happen on IOTLB misses only; a VA invalidation of N pages removes those N
    /// pages and no more.
    #[test]
    fn walks_counts_and_a_va_range_of_pages() {
        let mut t = setup();
        t.map(1, 0x3000, 0xc000, Perm::RW).unwrap();
        for iova in [0x1000, 0x2000, 0x3000, 0x1000, 0x2000] {
            let _ = t.translate(SimTime::ZERO, req(3, iova, false));
        }
        let c = t.counters();
        assert_eq!((c.walks, c.translated, c.requests), (3, 5, 5));
        t.apply(&Invalidation::Va {
            asid: 7,
            addr: 0x1000,
            pages: 2,
        });
        assert!(!t.iotlb_contains(7, 0x1000) && !t.iotlb_contains(7, 0x2000));
        assert!(
            t.iotlb_contains(7, 0x3000),
            "the third page is outside the range"
        );
        t.apply(&Invalidation::Va {
            asid: 7,
            addr: 0x3000,
            pages: 0,
        });
        assert!(!t.iotlb_contains(7, 0x3000), "0 pages means the one page");
    }

    #[test]
    fn stale_tlb_and_config_until_invalidated() {
        let mut t = setup();
        let _ = t.translate(SimTime::ZERO, req(3, 0x1000, false));
        assert!(t.unmap(1, 0x1000).unwrap());
        // Unmapped in memory, still translating through the IOTLB.
        assert!(matches!(
            t.translate(SimTime::ZERO, req(3, 0x1000, false)).result,
            TranslateResult::Translated { tlb_hit: true, .. }
        ));
        t.apply(&Invalidation::Va {
            asid: 7,
            addr: 0x1000,
            pages: 1,
        });
        assert!(!t.iotlb_contains(7, 0x1000));
        assert!(matches!(
            t.translate(SimTime::ZERO, req(3, 0x1000, false)).result,
            TranslateResult::Fault {
                event: EventId::FTranslation,
                ..
            }
        ));
        // STE rewritten to abort: the cached stage 1 config stays until CFGI_STE.
        t.set_ste(3, Ste::abort()).unwrap();
        assert!(matches!(
            t.translate(SimTime::ZERO, req(3, 0x2000, false)).result,
            TranslateResult::Translated { .. }
        ));
        t.apply(&Invalidation::Ste { sid: 3 });
        assert_eq!(
            t.translate(SimTime::ZERO, req(3, 0x2000, false)).result,
            TranslateResult::Aborted
        );
    }

    #[test]
    fn config_errors_are_typed() {
        let mut t = setup();
        assert!(matches!(
            t.set_ste(0x100, Ste::bypass()),
            Err(SmmuError::StreamIdOutOfRange {
                sid: 0x100,
                log2: 8
            })
        ));
        assert!(matches!(
            t.set_ste(
                1,
                Ste {
                    valid: true,
                    config: STE_CONFIG_S2_TRANS,
                    context: 0
                }
            ),
            Err(SmmuError::UnsupportedSteConfig { .. })
        ));
        assert!(matches!(
            t.set_ste(1, Ste::stage1(9)),
            Err(SmmuError::NoSuchContext { ctx: 9 })
        ));
        assert!(matches!(
            t.map(1, 0x1001, 0, Perm::RW),
            Err(SmmuError::Unaligned { field: "iova", .. })
        ));
        assert!(TranslateConfig {
            walk_levels: 0,
            ..TranslateConfig::default()
        }
        .validate()
        .is_err());
        let bad = TranslateConfig {
            costs: TranslateCosts {
                walk_level_ns: f64::NAN,
                ..TranslateCosts::default()
            },
            ..TranslateConfig::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(SmmuError::InvalidCost {
                field: "walk_level_ns",
                ..
            })
        ));
        assert_eq!(Ste::stage1(0).word0(), 0b1011);
        let invalid = Ste {
            valid: false,
            ..Ste::stage1(0)
        };
        // Boundaries of the translation config: 2^24 STEs and 2^19 event records are
        // the largest; walks of 1 to 4 levels.
        let ok = TranslateConfig::default();
        for good in [
            TranslateConfig {
                stream_table_log2: 24,
                ..ok.clone()
            },
            TranslateConfig {
                event_queue_log2: 19,
                ..ok.clone()
            },
            TranslateConfig {
                walk_levels: 1,
                ..ok.clone()
            },
            TranslateConfig {
                walk_levels: 4,
                ..ok.clone()
            },
        ] {
            assert!(good.validate().is_ok(), "{good:?}");
        }
        assert!(matches!(
            TranslateConfig {
                stream_table_log2: 25,
                ..ok.clone()
            }
            .validate(),
            Err(SmmuError::InvalidStreamTableSize { value: 25 })
        ));
        assert!(matches!(
            TranslateConfig {
                event_queue_log2: 20,
                ..ok.clone()
            }
            .validate(),
            Err(SmmuError::InvalidQueueSize {
                field: "event_queue_log2",
                ..
            })
        ));
        for bad in [0, 5] {
            assert!(TranslateConfig {
                walk_levels: bad,
                ..ok.clone()
            }
            .validate()
            .is_err());
        }
        assert_eq!(invalid.word0(), 0b1010, "V (bit 0) clear, Config kept");
    }
}

//! MESI model of one 64-byte cache line shared by coherent agents: the line holding a
//! posted-interrupt descriptor ([`PidLine`]), and every other line the simulator shares
//! between agents (a cross-call's CSD and queue head, an SMMU queue's words), which hold
//! plain [`Words`].
//!
//! Agents are the private caches of CPU cores and the IOMMU (a coherent agent in the
//! uncore). [`Line`] keeps the line's data, which agents hold it in which state, and
//! per-agent counters. Its API is split so a simulator can charge time when an access
//! is issued and apply it when it completes:
//!
//! - getters: [`PidLine::desc`], [`PidLine::state`], [`PidLine::holders`],
//!   [`PidLine::residence`], [`PidLine::counters`], [`PidLine::all_counters`],
//!   [`PidLine::transitions`], [`PidLine::all_transitions`];
//! - pure queries: [`PidLine::classify`] (what kind of access `op` would be now) and
//!   [`PidLine::cost`] (its latency, derived from `classify`);
//! - the one input: [`PidLine::perform`], which applies the access (classified by the
//!   same `classify`) and returns the value it read and the access kind;
//! - [`PidLine::check_invariants`] for tests and debug builds;
//! - occupancy: [`Line::occupy`] serialises transfers, so a second requester waits
//!   while a transfer of the line is in flight ([`Line::occupancy`] counts the waits).
//!
//! State is sparse: `holders` lists only agents holding the line (in M, E or S) and
//! the counter tables list only agents that ever touched it, so no operation scans all
//! CPUs. A descriptor is normally touched by one core and one IOMMU, a few more after
//! an affinity change, so these lists stay tiny and a linear search is the fastest map.

use std::fmt;

use serde::{Deserialize, Serialize};
use sim_core::{CpuId, Duration, Freq, SimTime, Vector};

use crate::costs::{LineCosts, PricedLineCosts};
use crate::desc::{PiDesc, PostResult, PID_WORDS};
use crate::PidError;

pub use crate::op::{LineOp, OpClass};

/// What a [`Line`] holds: eight 64-bit words, and for a posted-interrupt descriptor
/// the IOMMU's posting update.
pub trait LineData: Clone + fmt::Debug + PartialEq {
    /// Word `i` (0..8).
    fn word(&self, i: usize) -> u64;
    /// Sets word `i` (0..8).
    fn set_word(&mut self, i: usize, value: u64);
    /// Sets or clears bit `bit` (0..512); returns its old value.
    fn set_bit(&mut self, bit: u32, value: bool) -> bool {
        let (w, mask) = ((bit / 64) as usize, 1u64 << (bit % 64));
        let old = self.word(w);
        self.set_word(w, if value { old | mask } else { old & !mask });
        old & mask != 0
    }
    /// Whether the IOMMU posts into lines of this type ([`LineOp::IommuPost`]).
    const POSTABLE: bool = false;
    /// The IOMMU's posting update; only called when [`Self::POSTABLE`].
    fn post(&mut self, vector: Vector, urg: bool) -> PostResult {
        let _ = (vector, urg);
        unreachable!("validated: only postable lines take IommuPost")
    }
}

impl LineData for PiDesc {
    fn word(&self, i: usize) -> u64 {
        PiDesc::word(self, i)
    }
    fn set_word(&mut self, i: usize, value: u64) {
        PiDesc::set_word(self, i, value)
    }
    fn set_bit(&mut self, bit: u32, value: bool) -> bool {
        PiDesc::set_bit(self, bit, value)
    }
    const POSTABLE: bool = true;
    fn post(&mut self, vector: Vector, urg: bool) -> PostResult {
        PiDesc::post(self, vector, urg)
    }
}

/// A line of plain data: eight words with no hardware meaning of their own (a CSD,
/// a queue head, an SMMU queue's producer word).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Words(pub [u64; PID_WORDS]);

impl LineData for Words {
    fn word(&self, i: usize) -> u64 {
        self.0[i]
    }
    fn set_word(&mut self, i: usize, value: u64) {
        self.0[i] = value;
    }
}

/// A line of plain [`Words`].
pub type DataLine = Line<Words>;
/// The line of a posted-interrupt descriptor.
pub type PidLine = Line<PiDesc>;

/// Waits of requesters that found a transfer of the line in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Occupancy {
    /// Transfers that started after another transfer of the line ended.
    pub waits: u64,
    /// Total time those requesters waited, ps.
    pub wait_ps: u64,
    /// Transfers claimed through [`Line::occupy`].
    pub transfers: u64,
}

/// A coherent agent that may cache the line.
///
/// A core's `socket` must be the same every time that core is named: agents compare by
/// all their fields, and [`PidLine::check_invariants`] reports one CPU seen with two
/// sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Agent {
    /// The private cache hierarchy (L1/L2) of the core running logical CPU `cpu`.
    Core { cpu: CpuId, socket: u16 },
    /// The IOMMU (remapping unit) of a socket.
    Iommu { socket: u16 },
    /// A DMA master on a socket's I/O fabric that reads and writes lines without
    /// caching them: an SMMU fetching commands or writing a CMD_SYNC's completion, a
    /// device reading descriptors. `id` tells such agents apart in counters.
    Dma { id: u16, socket: u16 },
}

impl Agent {
    pub fn core(cpu: u32, socket: u16) -> Agent {
        Agent::Core {
            cpu: CpuId(cpu),
            socket,
        }
    }
    pub fn iommu(socket: u16) -> Agent {
        Agent::Iommu { socket }
    }
    pub fn dma(id: u16, socket: u16) -> Agent {
        Agent::Dma { id, socket }
    }
    pub fn socket(self) -> u16 {
        match self {
            Agent::Core { socket, .. } | Agent::Iommu { socket } | Agent::Dma { socket, .. } => {
                socket
            }
        }
    }
    pub fn is_iommu(self) -> bool {
        matches!(self, Agent::Iommu { .. })
    }
    pub fn is_dma(self) -> bool {
        matches!(self, Agent::Dma { .. })
    }
    /// An agent that keeps no copy of a line it touches (the IOMMU, a DMA master).
    pub fn is_uncached(self) -> bool {
        !matches!(self, Agent::Core { .. })
    }
}

impl fmt::Display for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Agent::Core { cpu, socket } => write!(f, "cpu{} (socket {socket})", cpu.0),
            Agent::Iommu { socket } => write!(f, "iommu (socket {socket})"),
            Agent::Dma { id, socket } => write!(f, "dma{id} (socket {socket})"),
        }
    }
}

/// MESI state of the line in one agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mesi {
    M,
    E,
    S,
    I,
}

impl Mesi {
    /// All states, in the order of [`Mesi::index`].
    pub const ALL: [Mesi; 4] = [Mesi::M, Mesi::E, Mesi::S, Mesi::I];

    /// Row/column of this state in a [`TransitionCounts`] matrix (M=0, E=1, S=2, I=3).
    pub fn index(self) -> usize {
        self as usize
    }
    /// M or E: the only holder, may write (E after a silent upgrade).
    pub fn is_owned(self) -> bool {
        matches!(self, Mesi::M | Mesi::E)
    }
}

/// Where the line's data lives while no agent holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Residence {
    /// Only in DRAM of the home socket: never touched, or written by an I/O agent
    /// whose write the home agent did not allocate in the LLC.
    Memory,
    /// In the LLC of the home socket (after the IOMMU's write-back).
    Llc,
}

/// How an access was served, from the requester's point of view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AccessKind {
    // The discriminants index `PricedLineCosts`' table: keep `AccessKind::ALL` in step.
    /// The requester already held the line in a sufficient state (any of M/E/S for a
    /// load, M/E for a write; E -> M is silent).
    L1Hit,
    /// Write with the line in S; all other sharers are on the requester's socket.
    Upgrade,
    /// Write with the line in S; some other sharer is on another socket.
    UpgradeOtherSocket,
    /// Nobody held it; data in the LLC of the home socket, requester on that socket.
    LlcHit,
    /// Nobody held it; data in the home socket's LLC, requester on another socket.
    RemoteLlcOtherSocket,
    /// Nobody ever touched it (cold); DRAM on the requester's socket.
    Memory,
    /// Cold; DRAM of another socket.
    RemoteMemory,
    /// Other agents held clean copies (E/S); a load found one on its own socket, or a
    /// write had to invalidate copies only on its own socket.
    RemoteCleanSameSocket,
    /// Other agents held clean copies; a load found none on its own socket, or a write
    /// had to invalidate a copy on another socket.
    RemoteCleanOtherSocket,
    /// Another agent on the requester's socket held it Modified.
    RemoteModifiedSameSocket,
    /// An agent on another socket held it Modified.
    RemoteModifiedOtherSocket,
}

impl AccessKind {
    /// Every kind, in declaration order (`kind as usize` is its index here).
    pub const ALL: [AccessKind; 11] = [
        AccessKind::L1Hit,
        AccessKind::Upgrade,
        AccessKind::UpgradeOtherSocket,
        AccessKind::LlcHit,
        AccessKind::RemoteLlcOtherSocket,
        AccessKind::Memory,
        AccessKind::RemoteMemory,
        AccessKind::RemoteCleanSameSocket,
        AccessKind::RemoteCleanOtherSocket,
        AccessKind::RemoteModifiedSameSocket,
        AccessKind::RemoteModifiedOtherSocket,
    ];
}

impl OpClass {
    /// Every class, in declaration order (`class as usize` is its index here).
    pub const ALL: [OpClass; 4] = [
        OpClass::Load,
        OpClass::Store,
        OpClass::LockedRmw,
        OpClass::IommuPost,
    ];
}

/// What an access returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OpValue {
    /// Plain store.
    None,
    /// Loaded word, or the old word of an exchange.
    Word(u64),
    /// Old value of the bit of a locked bit operation.
    Bit(bool),
    /// Outcome of an IOMMU post.
    Post(PostResult),
}

/// Outcome of [`PidLine::perform`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[must_use]
pub struct OpResult {
    pub kind: AccessKind,
    pub value: OpValue,
    /// The requester's state before the access.
    pub from: Mesi,
    /// The requester's state after the access (always I for the IOMMU).
    pub to: Mesi,
}

impl OpResult {
    pub fn word(&self) -> Option<u64> {
        match self.value {
            OpValue::Word(w) => Some(w),
            _ => None,
        }
    }
    pub fn bit(&self) -> Option<bool> {
        match self.value {
            OpValue::Bit(b) => Some(b),
            _ => None,
        }
    }
    pub fn post(&self) -> Option<PostResult> {
        match self.value {
            OpValue::Post(p) => Some(p),
            _ => None,
        }
    }
}

/// Per-agent event counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AgentCounters {
    /// [`LineOp::Load`]s issued.
    pub loads: u64,
    /// Every other op issued (stores, locked RMWs, IOMMU posts).
    pub stores_or_rmw: u64,
    /// Accesses not served as [`AccessKind::L1Hit`] (upgrades included; every IOMMU
    /// post counts, as the IOMMU keeps no copy).
    pub l1_misses: u64,
    /// Requests for ownership: writes that found the line in S (upgrade) or I.
    pub rfos: u64,
    /// Times another agent's access took this agent's copy to I.
    pub invalidations_received: u64,
    /// Times this agent obtained the line while another agent held it Modified.
    pub modified_transfers: u64,
}

/// Counts of state changes of one agent: `0[from.index()][to.index()]`.
///
/// The requester of an access records one entry per access, so hits land on the
/// diagonal (a load hit in S counts S -> S). The IOMMU records I -> M and M -> I for
/// each post (ownership, then write-back). Every other agent records an entry only when
/// its state changes (M -> S on a snoop, X -> I on an invalidation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TransitionCounts(pub [[u64; 4]; 4]);

impl TransitionCounts {
    pub fn get(&self, from: Mesi, to: Mesi) -> u64 {
        self.0[from.index()][to.index()]
    }
    pub fn total(&self) -> u64 {
        self.0.iter().flatten().sum()
    }
    fn record(&mut self, from: Mesi, to: Mesi) {
        self.0[from.index()][to.index()] += 1;
    }
}

/// One cache line, its coherence state across agents, counters and occupancy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
// In declaration order: what every operation reads (the data, the holders, where the
// line lives, when it is free) comes first, and the counters last. A simulator keeps
// one descriptor line per CPU, thousands of them.
#[repr(C)]
pub struct Line<D> {
    desc: D,
    /// Agents holding the line in M, E or S (never I); each at most once.
    holders: Vec<(Agent, Mesi)>,
    /// When the transfer in flight ends (no transfer: any time in the past).
    busy_until: SimTime,
    home_socket: u16,
    residence: Residence,
    occupancy: Occupancy,
    counters: Vec<(Agent, AgentCounters)>,
    transitions: Vec<(Agent, TransitionCounts)>,
}

impl PidLine {
    /// A zeroed descriptor homed on `home_socket`, cold (in DRAM), held by nobody.
    pub fn new(home_socket: u16) -> PidLine {
        PidLine::with_desc(PiDesc::ZERO, home_socket)
    }

    /// A line holding `desc`, cold, held by nobody. This is how a simulator sets up
    /// NV/NDST before time starts; use [`LineOp::Store`] to change them in simulated
    /// time.
    pub fn with_desc(desc: PiDesc, home_socket: u16) -> PidLine {
        Line::with_data(desc, home_socket)
    }

    /// The descriptor.
    pub fn desc(&self) -> &PiDesc {
        &self.desc
    }
}

impl<D: LineData> Line<D> {
    /// A line holding `data`, homed on `home_socket`, cold (in DRAM), held by nobody.
    pub fn with_data(data: D, home_socket: u16) -> Line<D> {
        Line {
            desc: data,
            home_socket,
            holders: Vec::new(),
            residence: Residence::Memory,
            counters: Vec::new(),
            transitions: Vec::new(),
            busy_until: SimTime::ZERO,
            occupancy: Occupancy::default(),
        }
    }

    /// The line's current data.
    pub fn data(&self) -> &D {
        &self.desc
    }

    /// When the transfer of the line now in flight (if any) ends.
    pub fn busy_until(&self) -> SimTime {
        self.busy_until
    }

    /// Claims the line for a transfer requested at `now` that takes `cost` once it
    /// starts, and returns when it starts: at `now`, or when the transfer already in
    /// flight ends (a line moves between caches one transfer at a time). Callers pass
    /// only accesses that move the line or its ownership; an L1 hit does not occupy it.
    pub fn occupy(&mut self, now: SimTime, cost: Duration) -> SimTime {
        let start = now.max(self.busy_until);
        if start > now {
            self.occupancy.waits += 1;
            self.occupancy.wait_ps += start.since(now).as_ps();
        }
        self.occupancy.transfers += 1;
        self.busy_until = start + cost;
        start
    }

    /// Waits on this line so far.
    pub fn occupancy(&self) -> Occupancy {
        self.occupancy
    }
    pub fn home_socket(&self) -> u16 {
        self.home_socket
    }
    /// Where the data lives when nobody holds it.
    pub fn residence(&self) -> Residence {
        self.residence
    }
    /// The home agent sends the line to DRAM without keeping it in the LLC, as it does
    /// with a non-allocating write from an I/O agent: the next miss is a memory read.
    /// Only when no agent holds it (after an uncached agent's write, nobody does);
    /// otherwise nothing changes and `false` is returned.
    pub fn write_back_to_memory(&mut self) -> bool {
        if !self.holders.is_empty() {
            return false;
        }
        self.residence = Residence::Memory;
        true
    }
    /// Agents holding the line, each with its state (never I).
    pub fn holders(&self) -> &[(Agent, Mesi)] {
        &self.holders
    }
    /// `agent`'s state (I if it does not hold the line).
    pub fn state(&self, agent: Agent) -> Mesi {
        self.holders
            .iter()
            .find(|(a, _)| *a == agent)
            .map_or(Mesi::I, |(_, s)| *s)
    }
    /// `agent`'s counters (all zero if it never touched the line).
    pub fn counters(&self, agent: Agent) -> AgentCounters {
        self.counters
            .iter()
            .find(|(a, _)| *a == agent)
            .map_or_else(AgentCounters::default, |(_, c)| *c)
    }
    /// Counters of every agent that touched the line, in order of first touch.
    pub fn all_counters(&self) -> &[(Agent, AgentCounters)] {
        &self.counters
    }
    /// `agent`'s transition counts (all zero if it never touched the line).
    pub fn transitions(&self, agent: Agent) -> TransitionCounts {
        self.transitions
            .iter()
            .find(|(a, _)| *a == agent)
            .map_or_else(TransitionCounts::default, |(_, t)| *t)
    }
    /// Transition counts of every agent that touched the line, in order of first touch.
    pub fn all_transitions(&self) -> &[(Agent, TransitionCounts)] {
        &self.transitions
    }

    /// The kind of access `op` by `agent` would be in the current state. Both
    /// [`Self::cost`] and [`Self::perform`] use this, so they always agree.
    #[inline(always)]
    pub fn classify(&self, agent: Agent, op: &LineOp) -> AccessKind {
        self.classify_from(agent, self.state(agent), op)
    }

    /// [`Self::classify`] given `agent`'s current state `from`.
    // This, `classify`, `timed_cost_priced` and `perform` are forced inline: a
    // simulation calls them on every line access. Where the caller names the operation
    // (the IOMMU's post, the cross-call lock, queue and poll accesses) the
    // classification folds down to the states that operation can meet; elsewhere the
    // call and its spills go. LLVM's own inliner left them as calls; inlined,
    // cachegrind counts 799.7 -> 760.4 instructions per `default` event and
    // 781.6 -> 760.2 per `nvme-posted` one.
    #[inline(always)]
    fn classify_from(&self, agent: Agent, from: Mesi, op: &LineOp) -> AccessKind {
        let own = op.needs_ownership();
        let sock = agent.socket();
        match (from, own) {
            (Mesi::M | Mesi::E, _) | (Mesi::S, false) => return AccessKind::L1Hit,
            (Mesi::S, true) => {
                let far = self
                    .holders
                    .iter()
                    .any(|(a, _)| *a != agent && a.socket() != sock);
                return if far {
                    AccessKind::UpgradeOtherSocket
                } else {
                    AccessKind::Upgrade
                };
            }
            (Mesi::I, _) => {}
        }
        let mut modified_at = None;
        let mut clean_same = false;
        let mut clean_other = false;
        for (a, s) in self.holders.iter().filter(|(a, _)| *a != agent) {
            match s {
                Mesi::M => modified_at = Some(a.socket()),
                Mesi::E | Mesi::S if a.socket() == sock => clean_same = true,
                Mesi::E | Mesi::S => clean_other = true,
                Mesi::I => {}
            }
        }
        if let Some(s) = modified_at {
            return if s == sock {
                AccessKind::RemoteModifiedSameSocket
            } else {
                AccessKind::RemoteModifiedOtherSocket
            };
        }
        if clean_same || clean_other {
            // A load takes the nearest copy; a write must reach every copy.
            let far = if own { clean_other } else { !clean_same };
            return if far {
                AccessKind::RemoteCleanOtherSocket
            } else {
                AccessKind::RemoteCleanSameSocket
            };
        }
        let local = sock == self.home_socket;
        match (self.residence, local) {
            (Residence::Llc, true) => AccessKind::LlcHit,
            (Residence::Llc, false) => AccessKind::RemoteLlcOtherSocket,
            (Residence::Memory, true) => AccessKind::Memory,
            (Residence::Memory, false) => AccessKind::RemoteMemory,
        }
    }

    /// Latency of `op` by `agent` if issued now. Pure. `cpu_freq` is the requesting
    /// core's clock (ignored for the IOMMU).
    ///
    /// # Panics
    /// If `op` is invalid for `agent` (see [`LineOp::validate`]).
    pub fn cost(&self, agent: Agent, op: &LineOp, costs: &LineCosts, cpu_freq: Freq) -> Duration {
        if !self.op_allowed(agent, op) {
            self.refuse("Line::cost", agent, op);
        }
        costs.access_cost(self.classify(agent, op), op.class(), cpu_freq)
    }

    /// [`Line::cost`] with the prices of one core clock already worked out.
    pub fn cost_priced(&self, agent: Agent, op: &LineOp, prices: &PricedLineCosts) -> Duration {
        if !self.op_allowed(agent, op) {
            self.refuse("Line::cost", agent, op);
        }
        prices.get(self.classify(agent, op), op.class())
    }

    /// [`Line::timed_cost`] with the prices of one core clock already worked out (a
    /// simulation prices every access at the same clock, so it converts nanoseconds
    /// and cycles to picoseconds once, when it is built).
    #[inline(always)]
    pub fn timed_cost_priced(
        &mut self,
        agent: Agent,
        op: &LineOp,
        at: SimTime,
        prices: &PricedLineCosts,
    ) -> Duration {
        let kind = self.classify(agent, op);
        let cost = prices.get(kind, op.class());
        if kind == AccessKind::L1Hit {
            cost
        } else {
            self.occupy(at, cost).since(at) + cost
        }
    }

    /// How long `op` by `agent`, requested at `at`, takes from then to its end: its
    /// [`cost`](Self::cost), after waiting for a transfer of the line in flight
    /// ([`occupy`](Self::occupy), which it claims) unless it hits the requester's own
    /// copy. Does not perform it.
    pub fn timed_cost(
        &mut self,
        agent: Agent,
        op: &LineOp,
        at: SimTime,
        costs: &LineCosts,
        cpu_freq: Freq,
    ) -> Duration {
        let kind = self.classify(agent, op);
        let cost = costs.access_cost(kind, op.class(), cpu_freq);
        if kind == AccessKind::L1Hit {
            cost
        } else {
            self.occupy(at, cost).since(at) + cost
        }
    }

    /// Applies `op` by `agent`: coherence transitions of every affected agent, the data
    /// effect, counters and transition counts.
    ///
    /// # Panics
    /// If `op` is invalid for `agent` (see [`LineOp::validate`]); callers taking ops
    /// from user input should call `validate` first.
    #[inline(always)]
    pub fn perform(&mut self, agent: Agent, op: LineOp) -> OpResult {
        if !self.op_allowed(agent, &op) {
            self.refuse("Line::perform", agent, &op);
        }
        let from = self.state(agent);
        let kind = self.classify_from(agent, from, &op);
        let own = op.needs_ownership();
        // The requester's counters and transitions, found once (both lists are kept
        // in the same order of first touch).
        let me = self.stats_slot(agent);

        let mut got_modified = false;
        let mut invalidated = false;
        let to = if own {
            // Every other copy goes to I; a Modified one supplies the data first.
            let mut i = 0;
            while i < self.holders.len() {
                let (a, s) = self.holders[i];
                if a == agent {
                    i += 1;
                    continue;
                }
                got_modified |= s == Mesi::M;
                invalidated = true;
                self.holders.swap_remove(i);
                let other = self.stats_slot(a);
                self.transitions[other].1.record(s, Mesi::I);
                self.counters[other].1.invalidations_received += 1;
            }
            if agent.is_uncached() {
                // Ownership, the update, then the write-back into the home LLC; the
                // IOMMU or DMA master keeps no copy, and every other copy went to I
                // above.
                debug_assert!(self.holders.is_empty());
                let t = &mut self.transitions[me].1;
                t.record(Mesi::I, Mesi::M);
                t.record(Mesi::M, Mesi::I);
                Mesi::I
            } else {
                self.set_holder(agent, Mesi::M);
                self.transitions[me].1.record(from, Mesi::M);
                Mesi::M
            }
        } else if from == Mesi::I {
            // Read miss: an owner keeps a shared copy (M writes back), and the
            // requester gets S if anyone else holds the line, else E.
            let mut shared = false;
            for idx in 0..self.holders.len() {
                let (a, s) = self.holders[idx];
                shared = true;
                if s.is_owned() {
                    got_modified |= s == Mesi::M;
                    self.holders[idx].1 = Mesi::S;
                    let other = self.stats_slot(a);
                    self.transitions[other].1.record(s, Mesi::S);
                }
            }
            if agent.is_dma() {
                // A DMA read snoops the data out (an owner keeps a shared copy, as
                // above) and caches nothing.
                self.transitions[me].1.record(Mesi::I, Mesi::I);
                Mesi::I
            } else {
                let to = if shared { Mesi::S } else { Mesi::E };
                self.holders.push((agent, to));
                self.transitions[me].1.record(Mesi::I, to);
                to
            }
        } else {
            self.transitions[me].1.record(from, from);
            from
        };
        debug_assert!(!invalidated || own);
        self.residence = Residence::Llc;

        let value = self.apply_data(op);

        let c = &mut self.counters[me].1;
        if op.class() == OpClass::Load {
            c.loads += 1;
        } else {
            c.stores_or_rmw += 1;
        }
        if kind != AccessKind::L1Hit {
            c.l1_misses += 1;
        }
        if own && matches!(from, Mesi::S | Mesi::I) {
            c.rfos += 1;
        }
        if got_modified {
            c.modified_transfers += 1;
        }

        debug_assert_eq!(self.check_invariants(), Ok(()));
        OpResult {
            kind,
            value,
            from,
            to,
        }
    }

    /// A DMA master's snapshot read of `word`: AMBA's ReadOnce, which the home node
    /// serves with SnpOnce, a snoop the holder answers without changing its state
    /// (AMBA CHI, SnpOnce: "preferably without changing the state of the cache line at
    /// the Snoopee"; ACE ReadOnce: the line "is not cached locally", PassDirty stays
    /// deasserted). So a core holding the line Modified supplies the data and stays
    /// its owner: its next store is a hit, not an upgrade, unlike after
    /// [`perform`](Self::perform)'s `Load`, which leaves it Shared. The read does not
    /// allocate: where the data lives when nobody holds it is unchanged. It costs what
    /// a `Load` by the same agent costs ([`timed_cost`](Self::timed_cost)).
    pub fn snapshot_read(&mut self, agent: Agent, word: usize) -> Result<OpResult, PidError> {
        if !agent.is_dma() {
            return Err(PidError::SnapshotNotDma {
                agent: agent.to_string(),
            });
        }
        let op = LineOp::Load { word };
        self.validate_op(agent, &op)?;
        let kind = self.classify(agent, &op);
        let got_modified = self.holders.iter().any(|(_, s)| *s == Mesi::M);
        let me = self.stats_slot(agent);
        self.transitions[me].1.record(Mesi::I, Mesi::I);
        let value = self.apply_data(op);
        let c = &mut self.counters[me].1;
        c.loads += 1;
        c.l1_misses += 1;
        if got_modified {
            c.modified_transfers += 1;
        }
        debug_assert_eq!(self.check_invariants(), Ok(()));
        Ok(OpResult {
            kind,
            value,
            from: Mesi::I,
            to: Mesi::I,
        })
    }

    /// Whether [`Line::validate_op`] would accept `op` from `agent`; the check on every
    /// access, which leaves building the error to the panic.
    #[inline]
    fn op_allowed(&self, agent: Agent, op: &LineOp) -> bool {
        op.is_allowed(agent) && (D::POSTABLE || !matches!(op, LineOp::IommuPost { .. }))
    }

    /// Panics with `validate_op`'s error for an access `op_allowed` refused.
    #[cold]
    #[inline(never)]
    fn refuse(&self, caller: &str, agent: Agent, op: &LineOp) -> ! {
        match self.validate_op(agent, op) {
            Err(e) => panic!("{caller}: {e}"),
            Ok(()) => unreachable!("{caller}: op_allowed and validate_op disagree on {op:?}"),
        }
    }

    /// [`LineOp::validate`], and that only a descriptor line is posted into.
    pub fn validate_op(&self, agent: Agent, op: &LineOp) -> Result<(), PidError> {
        op.validate(agent)?;
        if matches!(op, LineOp::IommuPost { .. }) && !D::POSTABLE {
            return Err(PidError::OpNotAllowed {
                agent: agent.to_string(),
                op: format!("{op:?} on a line that holds no descriptor"),
            });
        }
        Ok(())
    }

    fn apply_data(&mut self, op: LineOp) -> OpValue {
        let d = &mut self.desc;
        match op {
            LineOp::Load { word } => OpValue::Word(d.word(word)),
            LineOp::Store { word, value } => {
                d.set_word(word, value);
                OpValue::None
            }
            LineOp::Xchg { word, value } => {
                let old = d.word(word);
                d.set_word(word, value);
                OpValue::Word(old)
            }
            LineOp::LockedBitSet { bit } | LineOp::LockedTestAndSet { bit } => {
                OpValue::Bit(d.set_bit(bit, true))
            }
            LineOp::LockedBitClear { bit } | LineOp::LockedTestAndClear { bit } => {
                OpValue::Bit(d.set_bit(bit, false))
            }
            LineOp::IommuPost { vector, urg } => OpValue::Post(d.post(vector, urg)),
        }
    }

    fn set_holder(&mut self, agent: Agent, state: Mesi) {
        match self.holders.iter_mut().find(|(a, _)| *a == agent) {
            Some(entry) => entry.1 = state,
            None => self.holders.push((agent, state)),
        }
    }

    /// Where `agent`'s counters and transition counts sit (the same index in both
    /// lists), adding zeroed ones on its first touch.
    fn stats_slot(&mut self, agent: Agent) -> usize {
        match self.counters.iter().position(|(a, _)| *a == agent) {
            Some(i) => i,
            None => {
                self.counters.push((agent, AgentCounters::default()));
                self.transitions.push((agent, TransitionCounts::default()));
                self.counters.len() - 1
            }
        }
    }

    /// Coherence invariants that must hold between operations:
    /// - no holder is recorded in I, and each agent is listed at most once;
    /// - at most one agent holds the line in M or E, and then nobody else holds it;
    /// - the IOMMU and DMA masters never hold the line;
    /// - one CPU is never named with two different sockets;
    /// - counters and transition counts list the same agents in the same order.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut owners = 0;
        for (i, (a, s)) in self.holders.iter().enumerate() {
            if *s == Mesi::I {
                return Err(format!("{a} listed as a holder in I"));
            }
            if a.is_uncached() {
                return Err(format!("{a} holds the line ({s:?}) between operations"));
            }
            if self.holders[..i].iter().any(|(b, _)| b == a) {
                return Err(format!("{a} listed twice among holders"));
            }
            if s.is_owned() {
                owners += 1;
            }
        }
        if owners > 1 || (owners == 1 && self.holders.len() > 1) {
            return Err(format!(
                "an M/E copy coexists with other copies: {:?}",
                self.holders
            ));
        }
        if self.counters.len() != self.transitions.len()
            || self
                .counters
                .iter()
                .zip(&self.transitions)
                .any(|((a, _), (b, _))| a != b)
        {
            return Err("counters and transition counts name different agents".into());
        }
        for (i, (a, _)) in self.counters.iter().enumerate() {
            if let Agent::Core { cpu, socket } = a {
                let clash = self.counters[..i].iter().any(|(b, _)| {
                    matches!(b, Agent::Core { cpu: c, socket: s } if c == cpu && s != socket)
                });
                if clash {
                    return Err(format!("cpu{} named with two different sockets", cpu.0));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(unused_must_use)]
mod tests {
    use super::*;
    use crate::desc::{ON_BIT, PID_BITS, SN_BIT};

    #[test]
    fn a_plain_line_sets_and_clears_one_bit_and_returns_its_old_value() {
        let mut w = Words([0; PID_WORDS]);
        assert!(!LineData::set_bit(&mut w, 200, true));
        assert_eq!(w.0[3], 1 << 8, "bit 200 is word 3, bit 8");
        assert!(LineData::set_bit(&mut w, 200, true), "already set");
        assert!(!LineData::set_bit(&mut w, 201, true));
        assert_eq!(w.0[3], 0b11 << 8);
        assert!(LineData::set_bit(&mut w, 200, false));
        assert_eq!(w.0[3], 0b10 << 8, "clearing one bit keeps its neighbour");
        assert!(!LineData::set_bit(&mut w, 200, false), "already clear");
        assert_eq!(w.0[3], 0b10 << 8);
        assert_eq!(w.0.iter().filter(|&&x| x != 0).count(), 1);
    }

    const C0: Agent = Agent::Core {
        cpu: CpuId(0),
        socket: 0,
    };
    const C1: Agent = Agent::Core {
        cpu: CpuId(1),
        socket: 0,
    };
    const C2: Agent = Agent::Core {
        cpu: CpuId(2),
        socket: 1,
    };
    const IO: Agent = Agent::Iommu { socket: 0 };

    fn f() -> Freq {
        Freq::from_mhz(2000).unwrap()
    }

    fn post(v: u8) -> LineOp {
        LineOp::IommuPost {
            vector: Vector(v),
            urg: false,
        }
    }

    /// Every kind of operation, with word and bit indices on both sides of their range.
    fn ops_around_the_ranges() -> Vec<LineOp> {
        let mut ops = vec![post(0x40)];
        for word in [0, PID_WORDS - 1, PID_WORDS, usize::MAX] {
            ops.push(LineOp::Load { word });
            ops.push(LineOp::Store { word, value: 1 });
            ops.push(LineOp::Xchg { word, value: 1 });
        }
        for bit in [0, ON_BIT, PID_BITS - 1, PID_BITS, u32::MAX] {
            ops.push(LineOp::LockedBitSet { bit });
            ops.push(LineOp::LockedBitClear { bit });
            ops.push(LineOp::LockedTestAndSet { bit });
            ops.push(LineOp::LockedTestAndClear { bit });
        }
        ops
    }

    #[test]
    fn the_fast_check_accepts_exactly_what_validate_accepts_and_refusals_carry_an_error() {
        let dma = Agent::dma(3, 0);
        let mut refused = 0;
        for op in ops_around_the_ranges() {
            for agent in [C0, C2, IO, dma] {
                // Written from the rules, not from either implementation.
                let in_range = match op {
                    LineOp::Load { word }
                    | LineOp::Store { word, .. }
                    | LineOp::Xchg { word, .. } => word < PID_WORDS,
                    LineOp::IommuPost { .. } => true,
                    LineOp::LockedBitSet { bit }
                    | LineOp::LockedBitClear { bit }
                    | LineOp::LockedTestAndSet { bit }
                    | LineOp::LockedTestAndClear { bit } => bit < PID_BITS,
                };
                let is_post = matches!(op, LineOp::IommuPost { .. });
                let plain = matches!(op, LineOp::Load { .. } | LineOp::Store { .. });
                let expected = in_range && is_post == (agent == IO) && (agent != dma || plain);
                assert_eq!(op.is_allowed(agent), expected, "{op:?} by {agent}");
                assert_eq!(op.validate(agent).is_ok(), expected, "{op:?} by {agent}");
                let line = PidLine::new(0);
                assert_eq!(line.op_allowed(agent, &op), expected, "{op:?} by {agent}");
                // A line without a descriptor refuses every post as well.
                let plain_line = DataLine::with_data(Words([0; PID_WORDS]), 0);
                let on_plain = expected && !is_post;
                assert_eq!(
                    plain_line.op_allowed(agent, &op),
                    on_plain,
                    "{op:?} by {agent}"
                );
                assert_eq!(plain_line.validate_op(agent, &op).is_ok(), on_plain);
                refused += usize::from(!expected);
            }
        }
        assert!(
            refused > 40,
            "the grid must exercise refusals, got {refused}"
        );
    }

    #[test]
    #[should_panic(expected = "Line::perform: ")]
    fn performing_a_refused_operation_panics_with_the_validation_error() {
        let mut line = PidLine::new(0);
        line.perform(C0, LineOp::Load { word: PID_WORDS });
    }

    /// Runs `op`, checking that `cost` (before) matches the performed kind.
    fn run(line: &mut PidLine, agent: Agent, op: LineOp) -> OpResult {
        let costs = LineCosts::default();
        let predicted = line.cost(agent, &op, &costs, f());
        let r = line.perform(agent, op);
        assert_eq!(predicted, costs.access_cost(r.kind, op.class(), f()));
        line.check_invariants().unwrap();
        r
    }

    #[test]
    fn a_second_requester_waits_for_the_transfer_in_flight() {
        let mut l = DataLine::with_data(Words::default(), 0);
        let t0 = SimTime::ZERO + Duration::from_ns(100);
        let cost = Duration::from_ns(50);
        assert_eq!(
            l.busy_until(),
            SimTime::ZERO,
            "a cold line has nothing in flight"
        );
        assert_eq!(l.occupy(t0, cost), t0);
        assert_eq!(l.busy_until(), t0 + cost);
        // Issued 20 ns into the first transfer: starts when it ends.
        let t1 = t0 + Duration::from_ns(20);
        assert_eq!(l.occupy(t1, cost), t0 + cost);
        assert_eq!(
            l.busy_until(),
            t0 + cost + cost,
            "the queued transfer ends last"
        );
        // Issued after both: no wait.
        let t2 = t0 + Duration::from_ns(500);
        assert_eq!(l.occupy(t2, cost), t2);
        assert_eq!(l.busy_until(), t2 + cost);
        let o = l.occupancy();
        assert_eq!((o.transfers, o.waits), (3, 1));
        assert_eq!(o.wait_ps, Duration::from_ns(30).as_ps());
    }

    /// An SMMU reading the command a core wrote takes the data without keeping a copy
    /// (the writer drops to S); its completion write invalidates every copy, so the
    /// poller's next load misses.
    #[test]
    fn a_dma_master_snoops_and_invalidates_but_keeps_no_copy() {
        let dma = Agent::dma(7, 0);
        let mut l = DataLine::with_data(Words::default(), 0);
        let _ = l.perform(C0, LineOp::Store { word: 0, value: 5 });
        let r = l.perform(dma, LineOp::Load { word: 0 });
        assert_eq!(
            (r.kind, r.word()),
            (AccessKind::RemoteModifiedSameSocket, Some(5))
        );
        assert_eq!((l.state(C0), l.state(dma)), (Mesi::S, Mesi::I));
        let _ = l.perform(C1, LineOp::Load { word: 0 });
        let _ = l.perform(dma, LineOp::Store { word: 0, value: 0 });
        assert_eq!(
            (l.state(C0), l.state(C1), l.state(dma)),
            (Mesi::I, Mesi::I, Mesi::I)
        );
        assert_eq!(l.counters(C1).invalidations_received, 1);
        let r = l.perform(C1, LineOp::Load { word: 0 });
        assert_eq!((r.kind, r.word()), (AccessKind::LlcHit, Some(0)));
        l.check_invariants().unwrap();
        // No locked operations and no posts from a DMA master.
        assert!(l
            .validate_op(dma, &LineOp::Xchg { word: 0, value: 1 })
            .is_err());
        assert!(l.validate_op(dma, &post(0x40)).is_err());
    }

    /// A snapshot read (ReadOnce/SnpOnce) takes the writer's data and leaves it the
    /// owner, so the writer's next store hits, where a snooping `Load` leaves it an
    /// upgrade.
    #[test]
    fn a_snapshot_read_leaves_the_writer_its_modified_copy() {
        let dma = Agent::dma(7, 0);
        let costs = LineCosts::default();
        let mut l = DataLine::with_data(Words::default(), 0);
        let _ = l.perform(C0, LineOp::Store { word: 2, value: 5 });
        let load = LineOp::Load { word: 2 };
        let priced = l.cost(dma, &load, &costs, f());
        let r = l.snapshot_read(dma, 2).unwrap();
        assert_eq!(
            (r.kind, r.word(), r.from, r.to),
            (
                AccessKind::RemoteModifiedSameSocket,
                Some(5),
                Mesi::I,
                Mesi::I
            )
        );
        assert_eq!(priced, costs.access_cost(r.kind, OpClass::Load, f()));
        assert_eq!(l.holders(), &[(C0, Mesi::M)]);
        let store = LineOp::Store { word: 3, value: 1 };
        assert_eq!(l.classify(C0, &store), AccessKind::L1Hit);
        let c = l.counters(dma);
        assert_eq!((c.loads, c.l1_misses, c.modified_transfers), (1, 1, 1));
        assert_eq!(l.transitions(dma).get(Mesi::I, Mesi::I), 1);
        assert_eq!(l.transitions(C0).total(), 1, "only C0's own I -> M");
        // The same read as a snooping load demotes the writer.
        let _ = l.perform(dma, load);
        assert_eq!(l.state(C0), Mesi::S);
        assert_eq!(l.classify(C0, &store), AccessKind::Upgrade);
        // It does not allocate: a line nobody holds stays where it was.
        let _ = l.perform(dma, LineOp::Store { word: 0, value: 0 });
        assert!(l.write_back_to_memory());
        let r = l.snapshot_read(dma, 0).unwrap();
        assert_eq!((r.kind, r.word()), (AccessKind::Memory, Some(0)));
        assert_eq!(l.residence(), Residence::Memory);
        assert!(l.holders().is_empty());
        // Only a DMA master reads this way, and only words of the line.
        assert!(matches!(
            l.snapshot_read(C1, 0),
            Err(PidError::SnapshotNotDma { .. })
        ));
        assert!(matches!(
            l.snapshot_read(IO, 0),
            Err(PidError::SnapshotNotDma { .. })
        ));
        assert_eq!(
            l.snapshot_read(dma, PID_WORDS),
            Err(PidError::WordOutOfRange { word: PID_WORDS })
        );
        l.check_invariants().unwrap();
    }

    #[test]
    fn a_timed_miss_waits_for_the_transfer_in_flight_and_a_hit_does_not() {
        let costs = LineCosts::default();
        let f = Freq::from_mhz(2000).unwrap();
        let mut l = DataLine::with_data(Words::default(), 0);
        let load = LineOp::Load { word: 0 };
        let t0 = SimTime::ZERO;
        let first = l.timed_cost(C0, &load, t0, &costs, f);
        assert_eq!(first, l.cost(C0, &load, &costs, f));
        // C1's miss requested at once waits for C0's transfer to end.
        let second = l.timed_cost(C1, &load, t0, &costs, f);
        assert_eq!(second, first + l.cost(C1, &load, &costs, f));
        let _ = l.perform(C0, load);
        assert_eq!(
            l.timed_cost(C0, &load, t0, &costs, f),
            costs.access_cost(AccessKind::L1Hit, OpClass::Load, f)
        );
    }

    #[test]
    fn a_non_allocating_io_write_sends_the_next_load_to_memory() {
        let dma = Agent::dma(7, 0);
        let mut l = DataLine::with_data(Words::default(), 0);
        let _ = l.perform(C0, LineOp::Load { word: 0 });
        assert!(!l.write_back_to_memory(), "a core still holds it");
        let _ = l.perform(dma, LineOp::Store { word: 0, value: 9 });
        assert!(l.write_back_to_memory());
        let r = l.perform(C0, LineOp::Load { word: 0 });
        assert_eq!((r.kind, r.word()), (AccessKind::Memory, Some(9)));
        l.check_invariants().unwrap();
    }

    #[test]
    fn a_plain_line_keeps_words_and_refuses_posts() {
        let mut l = DataLine::with_data(Words::default(), 1);
        let _ = l.perform(C0, LineOp::Store { word: 3, value: 7 });
        let r = l.perform(C2, LineOp::LockedTestAndSet { bit: 64 * 3 + 3 });
        assert_eq!(r.bit(), Some(false));
        assert_eq!(r.kind, AccessKind::RemoteModifiedOtherSocket);
        assert_eq!(l.data().0[3], 7 | 8);
        assert!(l.validate_op(IO, &post(0x40)).is_err());
        assert!(PidLine::new(0).validate_op(IO, &post(0x40)).is_ok());
    }

    #[test]
    fn first_load_is_cold_then_exclusive() {
        let mut l = PidLine::with_desc(PiDesc::new(Vector(0xeb), 4), 0);
        let r = run(&mut l, C0, LineOp::Load { word: 4 });
        assert_eq!(r.kind, AccessKind::Memory);
        assert_eq!(r.word(), Some(l.desc().control()));
        assert_eq!((r.from, r.to), (Mesi::I, Mesi::E));
        assert_eq!(l.state(C0), Mesi::E);
        assert_eq!(l.residence(), Residence::Llc);
        // Cold from the other socket is remote memory.
        let mut l = PidLine::new(0);
        assert_eq!(
            run(&mut l, C2, LineOp::Load { word: 0 }).kind,
            AccessKind::RemoteMemory
        );
    }

    #[test]
    fn load_after_iommu_post_misses_in_llc() {
        let mut l = PidLine::with_desc(PiDesc::new(Vector(0xeb), 0), 0);
        let p = run(&mut l, IO, post(0x40)).post().unwrap();
        assert!(p.notification.is_some());
        assert!(l.holders().is_empty());
        assert_eq!(l.residence(), Residence::Llc);
        let r = run(&mut l, C0, LineOp::Load { word: 1 });
        assert_eq!(r.kind, AccessKind::LlcHit);
        assert_eq!(r.word(), Some(1));
        assert_eq!(l.state(C0), Mesi::E);
        // From the other socket the same line is a remote LLC hit.
        let mut l2 = PidLine::new(0);
        run(&mut l2, IO, post(0x40));
        assert_eq!(
            run(&mut l2, C2, LineOp::Load { word: 1 }).kind,
            AccessKind::RemoteLlcOtherSocket
        );
    }

    #[test]
    fn load_then_xchg_is_a_hit_and_a_silent_upgrade() {
        let mut l = PidLine::new(0);
        run(&mut l, IO, post(0x41));
        run(&mut l, C0, LineOp::Load { word: 1 });
        let r = run(&mut l, C0, LineOp::Xchg { word: 1, value: 0 });
        assert_eq!(r.kind, AccessKind::L1Hit);
        assert_eq!(r.word(), Some(1 << 1));
        assert_eq!((r.from, r.to), (Mesi::E, Mesi::M));
        assert_eq!(l.desc().pir_word(1), 0);
        let c = l.counters(C0);
        assert_eq!(
            (c.loads, c.stores_or_rmw, c.l1_misses, c.rfos),
            (1, 1, 1, 0)
        );
        let t = l.transitions(C0);
        assert_eq!(t.get(Mesi::I, Mesi::E), 1);
        assert_eq!(t.get(Mesi::E, Mesi::M), 1);
        // The locked op on an owned line costs L1 hit + locked extra: 24 cycles.
        let cost = l.cost(
            C0,
            &LineOp::LockedBitClear { bit: ON_BIT },
            &LineCosts::default(),
            f(),
        );
        assert_eq!(cost, f().cycles(24));
    }

    #[test]
    fn sharing_then_xchg_invalidates_the_other_sharer() {
        let mut l = PidLine::new(0);
        run(&mut l, IO, post(0x20));
        assert_eq!(
            run(&mut l, C0, LineOp::Load { word: 0 }).kind,
            AccessKind::LlcHit
        );
        let r = run(&mut l, C1, LineOp::Load { word: 0 });
        assert_eq!(r.kind, AccessKind::RemoteCleanSameSocket);
        assert_eq!((l.state(C0), l.state(C1)), (Mesi::S, Mesi::S));
        assert_eq!(l.transitions(C0).get(Mesi::E, Mesi::S), 1);
        // A load hit in S.
        assert_eq!(
            run(&mut l, C0, LineOp::Load { word: 0 }).kind,
            AccessKind::L1Hit
        );
        let r = run(&mut l, C0, LineOp::Xchg { word: 0, value: 0 });
        assert_eq!(r.kind, AccessKind::Upgrade);
        assert_eq!(r.word(), Some(1 << 32));
        assert_eq!((l.state(C0), l.state(C1)), (Mesi::M, Mesi::I));
        assert_eq!(l.counters(C0).rfos, 1);
        assert_eq!(l.counters(C1).invalidations_received, 1);
        assert_eq!(l.transitions(C1).get(Mesi::S, Mesi::I), 1);
        assert_eq!(l.transitions(C0).get(Mesi::S, Mesi::S), 1);
        // Upgrade cost: upgrade_s_to_m_ns + locked extra.
        let costs = LineCosts::default();
        assert_eq!(
            costs.access_cost(AccessKind::Upgrade, OpClass::LockedRmw, f()),
            Duration::from_ns(40) + f().cycles(20)
        );
    }

    /// Two loads from two cores leave both listed as sharers; a post by the IOMMU
    /// then empties the list (both go to I, the IOMMU keeps nothing), and each
    /// transition is counted once where it happened and nowhere else.
    #[test]
    fn holders_and_transition_counts_follow_each_access() {
        let mut l = PidLine::new(1);
        assert_eq!(l.home_socket(), 1);
        assert_eq!(PidLine::new(0).home_socket(), 0);
        assert!(l.holders().is_empty());
        run(&mut l, C0, LineOp::Load { word: 0 });
        assert_eq!(l.holders(), &[(C0, Mesi::E)]);
        run(&mut l, C1, LineOp::Load { word: 0 });
        let mut holders = l.holders().to_vec();
        holders.sort_by_key(|(a, _)| format!("{a}"));
        assert_eq!(holders, vec![(C0, Mesi::S), (C1, Mesi::S)]);
        run(&mut l, IO, post(0x40));
        assert!(l.holders().is_empty());
        let c0 = l.transitions(C0);
        assert_eq!(c0.get(Mesi::I, Mesi::E), 1);
        assert_eq!(c0.get(Mesi::E, Mesi::S), 1);
        assert_eq!(c0.get(Mesi::S, Mesi::I), 1);
        assert_eq!(c0.get(Mesi::I, Mesi::M), 0);
        assert_eq!(c0.total(), 3);
        let io = l.transitions(IO);
        assert_eq!((io.get(Mesi::I, Mesi::M), io.get(Mesi::M, Mesi::I)), (1, 1));
        assert_eq!(io.get(Mesi::S, Mesi::I), 0);
        assert_eq!(io.total(), 2);
    }

    #[test]
    fn upgrade_with_a_sharer_on_the_other_socket() {
        let mut l = PidLine::new(0);
        run(&mut l, C0, LineOp::Load { word: 0 });
        assert_eq!(
            run(&mut l, C2, LineOp::Load { word: 0 }).kind,
            AccessKind::RemoteCleanOtherSocket
        );
        assert_eq!(
            l.classify(C0, &LineOp::LockedBitSet { bit: SN_BIT }),
            AccessKind::UpgradeOtherSocket
        );
        // An RFO from a third core on socket 0 must reach the copy on socket 1.
        assert_eq!(
            l.classify(C1, &LineOp::LockedBitSet { bit: SN_BIT }),
            AccessKind::RemoteCleanOtherSocket
        );
        // ...but a load by that core finds a copy on its own socket.
        assert_eq!(
            l.classify(C1, &LineOp::Load { word: 0 }),
            AccessKind::RemoteCleanSameSocket
        );
    }

    #[test]
    fn modified_on_socket_0_loaded_from_socket_1() {
        let mut l = PidLine::new(0);
        run(
            &mut l,
            C0,
            LineOp::Store {
                word: 4,
                value: 0xeb << 16,
            },
        );
        assert_eq!(l.state(C0), Mesi::M);
        let r = run(&mut l, C2, LineOp::Load { word: 4 });
        assert_eq!(r.kind, AccessKind::RemoteModifiedOtherSocket);
        assert_eq!(r.word(), Some(0xeb << 16));
        assert_eq!((l.state(C0), l.state(C2)), (Mesi::S, Mesi::S));
        assert_eq!(l.counters(C2).modified_transfers, 1);
        assert_eq!(l.counters(C0).invalidations_received, 0);
        assert_eq!(l.transitions(C0).get(Mesi::M, Mesi::S), 1);
        // Same socket: RemoteModifiedSameSocket.
        let mut l = PidLine::new(0);
        run(&mut l, C0, LineOp::Xchg { word: 0, value: 5 });
        assert_eq!(
            run(&mut l, C1, LineOp::Xchg { word: 0, value: 6 }).kind,
            AccessKind::RemoteModifiedSameSocket
        );
        assert_eq!((l.state(C0), l.state(C1)), (Mesi::I, Mesi::M));
        assert_eq!(l.counters(C1).modified_transfers, 1);
        assert_eq!(l.counters(C1).rfos, 1);
    }

    #[test]
    fn iommu_post_after_core_modified() {
        let mut l = PidLine::with_desc(PiDesc::new(Vector(0xeb), 7), 0);
        run(&mut l, C0, LineOp::LockedBitClear { bit: ON_BIT });
        assert_eq!(l.state(C0), Mesi::M);
        let r = run(&mut l, IO, post(0x80));
        assert_eq!(r.kind, AccessKind::RemoteModifiedSameSocket);
        assert_eq!((r.from, r.to), (Mesi::I, Mesi::I));
        assert_eq!(
            r.post().unwrap().notification.map(|n| (n.nv, n.ndst)),
            Some((Vector(0xeb), 7))
        );
        assert!(l.holders().is_empty());
        assert_eq!(l.state(IO), Mesi::I);
        let io = l.counters(IO);
        assert_eq!(io.modified_transfers, 1);
        assert_eq!((io.stores_or_rmw, io.l1_misses, io.rfos), (1, 1, 1));
        assert_eq!(l.counters(C0).invalidations_received, 1);
        assert_eq!(l.transitions(C0).get(Mesi::M, Mesi::I), 1);
        let t = l.transitions(IO);
        assert_eq!((t.get(Mesi::I, Mesi::M), t.get(Mesi::M, Mesi::I)), (1, 1));
        // Cost: iommu_post_occupancy_ns + iommu_snoop_modified_ns, independent of the core clock.
        let mut again = PidLine::new(0);
        again.perform(C0, LineOp::Xchg { word: 0, value: 0 });
        assert_eq!(
            again.cost(IO, &post(0x21), &LineCosts::default(), f()),
            Duration::from_ps(205_600)
        );
    }

    #[test]
    fn second_post_merges_and_does_not_notify() {
        let mut l = PidLine::with_desc(PiDesc::new(Vector(0xeb), 0), 0);
        assert!(run(&mut l, IO, post(0x30))
            .post()
            .unwrap()
            .notification
            .is_some());
        let p = run(&mut l, IO, post(0x30)).post().unwrap();
        assert!(p.already_pending && p.on_before && p.notification.is_none());
        // Core clears ON with a test-and-clear and reads the old bit.
        let r = run(&mut l, C0, LineOp::LockedTestAndClear { bit: ON_BIT });
        assert_eq!(r.bit(), Some(true));
        assert_eq!(r.kind, AccessKind::LlcHit);
        assert!(!l.desc().on());
        let r = run(&mut l, C0, LineOp::LockedTestAndSet { bit: SN_BIT });
        assert_eq!((r.bit(), r.kind), (Some(false), AccessKind::L1Hit));
        // With SN set a non-urgent post stays silent; an urgent one notifies.
        assert!(run(&mut l, IO, post(0x31))
            .post()
            .unwrap()
            .notification
            .is_none());
        l.perform(C0, LineOp::LockedBitClear { bit: ON_BIT });
        let p = run(
            &mut l,
            IO,
            LineOp::IommuPost {
                vector: Vector(0x32),
                urg: true,
            },
        );
        assert!(p.post().unwrap().notification.is_some());
    }

    #[test]
    fn affinity_change_two_cores_on_one_descriptor() {
        let mut l = PidLine::with_desc(PiDesc::new(Vector(0xeb), 0), 0);
        run(&mut l, IO, post(0x50));
        // Old CPU harvests, new CPU then reads the same line and clears ON.
        run(&mut l, C0, LineOp::Load { word: 1 });
        run(&mut l, C0, LineOp::Xchg { word: 1, value: 0 });
        let r = run(&mut l, C2, LineOp::Load { word: 1 });
        assert_eq!(r.kind, AccessKind::RemoteModifiedOtherSocket);
        assert_eq!(r.word(), Some(0));
        let r = run(&mut l, C2, LineOp::LockedBitClear { bit: ON_BIT });
        assert_eq!(r.kind, AccessKind::UpgradeOtherSocket);
        assert_eq!(l.state(C0), Mesi::I);
        assert_eq!(l.all_counters().len(), 3);
        assert_eq!(l.all_transitions().len(), 3);
    }

    #[test]
    fn invalid_ops_are_rejected() {
        assert_eq!(
            LineOp::Load { word: 8 }.validate(C0),
            Err(PidError::WordOutOfRange { word: 8 })
        );
        assert_eq!(
            LineOp::LockedBitSet { bit: 512 }.validate(C0),
            Err(PidError::BitOutOfRange { bit: 512 })
        );
        assert!(post(0x20).validate(C0).is_err());
        assert!(LineOp::Load { word: 0 }.validate(IO).is_err());
        assert!(post(0x20).validate(IO).is_ok());
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn perform_panics_on_a_bad_word() {
        PidLine::new(0).perform(C0, LineOp::Xchg { word: 9, value: 0 });
    }

    #[test]
    fn invariant_checker_catches_broken_states() {
        let mut l = PidLine::new(0);
        l.holders = vec![(C0, Mesi::M), (C1, Mesi::S)];
        assert!(l.check_invariants().is_err());
        l.holders = vec![(C0, Mesi::E), (C1, Mesi::E)];
        assert!(l.check_invariants().is_err());
        l.holders = vec![(IO, Mesi::S)];
        assert!(l.check_invariants().is_err());
        l.holders = vec![(C0, Mesi::S), (C0, Mesi::S)];
        assert!(l.check_invariants().is_err());
        l.holders = vec![(C0, Mesi::S), (C1, Mesi::S)];
        assert!(l.check_invariants().is_ok());
        l.counters = vec![
            (C0, AgentCounters::default()),
            (Agent::core(0, 1), AgentCounters::default()),
        ];
        assert!(l.check_invariants().is_err());
    }
}

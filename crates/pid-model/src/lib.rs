//! The 64-byte posted-interrupt descriptor (PID) and the MESI model of a shared cache
//! line that the descriptor and every other shared line use.
//!
//! - [`desc`]: [`PiDesc`], the descriptor's bit layout (Intel VT-d 5.2.3 / 9.12, Linux
//!   `posted_intr.h`) and [`PiDesc::post`], the IOMMU's atomic posting update that sets
//!   PIR\[vector\] and decides whether to send a notification.
//! - [`mesi`]: [`Line`], one 64-byte line shared by coherent agents, generic over its
//!   data: [`PidLine`] holds a descriptor, [`DataLine`] plain [`Words`] (every other
//!   line the simulator shares: cross-call CSDs and queue heads). Agents are CPU cores
//!   (each core's private cache) and the IOMMU (a coherent agent in the uncore): per-agent
//!   MESI states, the data, per-agent counters, transition counts, and occupancy (one
//!   transfer of a line at a time). [`PidLine::cost`] says what an
//!   access would cost now; [`PidLine::perform`] applies it. Both classify the access
//!   with the same [`PidLine::classify`].
//! - [`costs`]: [`LineCosts`], the latency of each kind of access, every default cited.
//!
//! ```text
//!   core 0 L1/L2 ─┐                    ┌─ LLC of the home socket ── DRAM
//!   core 1 L1/L2 ─┼── caching agent ───┤
//!   IOMMU (uncore)┘   (snoops, RFOs)   └─ other socket (UPI)
//! ```
//!
//! **Architecture invariant:** components here are pure state machines: no clock, no
//! queue, no global state. The simulator charges [`PidLine::cost`] when an access is
//! issued and calls [`PidLine::perform`] when it completes; each CPU's descriptor is its
//! own [`PidLine`].
//!
//! # Modelled
//! - MESI per agent with the usual transitions: load hits in M/E/S; a load miss gets E
//!   when nobody else holds the line, otherwise S (an M holder writes back and keeps S,
//!   an E holder drops to S); a write needs M: silent from E, an upgrade from S that
//!   invalidates the other sharers, a request-for-ownership from I that invalidates
//!   every other copy (taking the data from an M holder).
//! - The IOMMU's post as one indivisible access: it takes ownership (invalidating every
//!   core copy, pulling the data from an M holder), performs the read-modify-write and
//!   writes the line back into the home socket's LLC. Afterwards no agent holds it.
//! - Where the data comes from on a miss (own socket, other socket, LLC, DRAM when the
//!   line was never touched), which selects the cost.
//! - Any number of cores on any number of sockets touching one descriptor (e.g. after an
//!   affinity change), and one IOMMU per socket.
//!
//! # Not modelled
//! - Eviction and capacity/conflict misses: a copy leaves a cache only by invalidation.
//! - L2 vs L1 inside a core (a core's private hierarchy is one agent), prefetching,
//!   false sharing with neighbouring lines, store buffers and memory ordering.
//! - Contention and queueing: concurrent requests to the line are serialised by the
//!   simulator's ordering of `perform` calls; each access's cost is independent of the
//!   others in flight.
//! - Snoop-filter/directory details, the F/O states of MESIF/MOESI, and where exactly the
//!   IOMMU's write-back lands beyond "the home socket's LLC".
//! - Faults on descriptor access (a misaligned or unreachable PDA is the IOMMU model's
//!   business; [`is_pid_aligned`] helps it check).

pub mod costs;
pub mod desc;
pub mod mesi;
pub mod op;

pub use costs::{LineCosts, PricedLineCosts};
pub use desc::{is_pid_aligned, Notification, PiDesc, PostResult, PID_ALIGN};
pub use mesi::{
    AccessKind, Agent, AgentCounters, DataLine, Line, LineData, LineOp, Mesi, Occupancy, OpClass,
    OpResult, OpValue, PidLine, Residence, TransitionCounts, Words,
};

/// Configuration and API-misuse errors of this crate.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PidError {
    /// A cost-table field is negative, NaN or infinite.
    #[error("cost field `{field}` is {value}; it must be a finite number >= 0")]
    InvalidCost { field: &'static str, value: f64 },
    /// A word index past the 8-word line.
    #[error("descriptor word {word} is out of range; allowed 0..8")]
    WordOutOfRange { word: usize },
    /// A bit index past the 512-bit line.
    #[error("descriptor bit {bit} is out of range; allowed 0..512")]
    BitOutOfRange { bit: u32 },
    /// An operation the agent cannot issue: only an IOMMU posts, and it only posts.
    #[error("{agent} cannot issue {op}: only an IOMMU issues IommuPost, and nothing else")]
    OpNotAllowed { agent: String, op: String },
    /// A snapshot read ([`Line::snapshot_read`]) by an agent that is not a DMA master.
    #[error("{agent} cannot issue a snapshot read: only a DMA master reads without caching or snooping ownership away")]
    SnapshotNotDma { agent: String },
}

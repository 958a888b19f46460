//! Race tools for the posted-interrupt protocol: an exhaustive interleaving explorer,
//! timed schedules for property tests, and a native stress driver on real atomics.
//!
//! Clearing ON races with the IOMMU's posts, and SN and URG change what gets notified.
//! These tools run a handler variant's own code (any [`PirHandler`], built-in or your
//! own) against hardware actors and check the invariants of [`model::Invariant`] at
//! every step and at quiescence.
//!
//! ```text
//!   iommu ─────post v──▶┐                      ┌──▶ apic: IRR ─deliver─▶ handler entry
//!   iommu-urg ─post v──▶┤  PID: PIR ON SN ─────┤ notification            │ one step per
//!   sn-cpu ─set/clear──▶┘        ▲             │ (ON 0->1, SN=0 or URG)  │ PID access,
//!                                └─────────────┴──── load/xchg/clear ON ─┘ handle, EOI
//! ```
//!
//! - [`explore`]: every ordering of the actors' atomic steps within the bounds of an
//!   [`ExploreConfig`], duplicate states pruned, breadth first so a counterexample is a
//!   shortest one. Granularity: each handler access to the descriptor line is one step
//!   (handler calls and EOI are steps too but touch no descriptor memory); each IOMMU
//!   post is one step, the indivisible 64-byte update the hardware performs.
//! - [`timed`]: one schedule (post times, vectors, SN changes, operation costs) run on
//!   the engine's event queue with the same invariants; the proptest suite generates
//!   these.
//! - [`native`]: the same handler code on real atomics across threads.
//! - [`cli`]: `irqsim explore`.
//!
//! ```
//! use irqsim::explore::{explore, ExploreConfig, ExploreResult};
//! use irqsim::kernel::posted_msi::variant_by_name;
//!
//! let config = ExploreConfig::with_counts(2, 2);
//! let good = explore(variant_by_name("copy-then-xchg", 3).unwrap().as_ref(), &config);
//! assert_eq!(good.result, ExploreResult::Pass);
//! let broken = explore(variant_by_name("no-final-recheck", 3).unwrap().as_ref(), &config);
//! assert!(matches!(broken.result, ExploreResult::Fail(_)));
//! ```

pub mod cli;
mod frontier;
pub mod migration;
pub mod model;
pub mod native;
mod pack;
mod por;
mod retrigger;
mod search;
mod sn;
pub mod timed;
mod trace;

use std::fmt;

use serde::{Serialize, Serializer};
use sim_core::Vector;

use crate::kernel::posted_msi::{variant_by_name, FIRST_EXTERNAL_VECTOR};
use crate::kernel::retrigger::PostedMsiAck;
use crate::kernel::sn::{sn_software_by_name, SnSoftware, SN_SOFTWARE_NAMES};
use crate::kernel::{PirHandler, POSTED_MSI_NOTIFICATION_VECTOR, VARIANT_NAMES};
pub use migration::MigrationCleanup;
pub use model::{Invariant, MemoryModel, Snapshot, Violation};
pub use search::{DEFAULT_POST_VECTORS, DEFAULT_URG_VECTORS};

/// Bounds and actors of one exploration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExploreConfig {
    /// Vectors the IOMMU posts for the non-urgent device, in this order (one atomic
    /// step each).
    #[serde(serialize_with = "hex_vectors")]
    pub posts: Vec<Vector>,
    /// Vectors posted through an IRTE with URG set (a second device), in order. They
    /// notify even while SN is set.
    #[serde(serialize_with = "hex_vectors")]
    pub urg_posts: Vec<Vector>,
    /// When not empty, each non-urgent post picks its vector from this set, the search
    /// branching on every choice (as the SPIN model's posts do), and `posts` gives only
    /// their number. Mixing vectors of one PIR word with another's finds word-confusion
    /// bugs that a fixed list can hide.
    #[serde(serialize_with = "hex_vectors")]
    pub post_choices: Vec<Vector>,
    /// Handler entries the APIC may start.
    pub entries: u32,
    /// SN changes by another CPU: set, clear, set, ... starting from SN = 0.
    pub sn_toggles: u32,
    /// Whether the CPU that clears SN then rechecks PIR and notifies if needed (the
    /// correct protocol; see [`model`]). Turn it off to watch the loss it prevents.
    pub sn_recheck: bool,
    /// Most context switches away from a running handler on one path (`None`:
    /// unbounded).
    pub preemption_bound: Option<u32>,
    /// Most operations one handler entry may perform before it counts as not
    /// terminating.
    pub max_handler_ops: u32,
    /// Most distinct states before the search gives up as incomplete.
    pub max_states: u64,
    /// How the handler CPU's stores reach the descriptor: sequential consistency
    /// (default) or x86-TSO with a store buffer (see [`model`]).
    pub memory_model: MemoryModel,
    /// Times the IRQ core retriggers `retrigger_vector` (an IPI of the vector itself,
    /// taken through the IDT; see `explore::retrigger`). 0: never.
    pub retriggers: u32,
    /// The posted device vector a retrigger raises.
    #[serde(serialize_with = "hex_vector")]
    pub retrigger_vector: Vector,
    /// The posted chip's `irq_ack` a retriggered entry runs.
    pub posted_msi_ack: PostedMsiAck,
    /// Migrates the IRTE of the first non-urgent vector to another CPU while its
    /// posts are in flight, the old CPU's cleanup checking pending as given (see
    /// [`migration`]). `None`: no migration.
    pub migration: Option<MigrationCleanup>,
    /// A shipped SN sequence to run as the SN actor, by name (`recheck`,
    /// `no-recheck`; see [`crate::kernel::sn`]), in place of the built-in one-step
    /// protocol. A sequence of your own goes to [`explore_with_sn`].
    pub sn_software: Option<String>,
    /// Identify states by what decides their future (default), so that states that
    /// differ only in counts nothing reads are explored once: see
    /// `World::hash_behaviour`. Verdicts, the invariant a counterexample breaks and
    /// its length are those of the full search (`tests/explore_reduction.rs` compares
    /// them); only the state counts shrink. `false` explores every distinct state.
    pub reduce: bool,
    /// Partial-order reduction by sleep sets (default; see `explore::por`): of two
    /// independent steps enabled together, only one order is taken. It drops steps,
    /// never states: distinct states, verdicts and counterexample lengths are those of
    /// the search without it (`tests/explore_reduction.rs`). Off under a preemption
    /// bound, where the two orders use different numbers of preemptions.
    pub partial_order: bool,
    /// Threads that expand states, 0 for every core (the default). The search and
    /// its report are the same for any number: see `explore::search::batch`.
    pub threads: u32,
}

fn hex_vector<S: Serializer>(v: &Vector, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.to_string())
}

fn hex_vectors<S: Serializer>(v: &[Vector], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|v| v.to_string()))
}

/// Default number of non-urgent posts.
///
/// Default bounds of `irqsim explore` and [`ExploreConfig::default`]: with them every
/// built-in variant explores in about a second or less (`rfc`, the largest, has 90,723
/// distinct states, 154,411 without the reduction).
pub const DEFAULT_POSTS: u32 = 4;
/// Default number of handler entries.
pub const DEFAULT_ENTRIES: u32 = 3;
/// Default number of SN changes.
pub const DEFAULT_SN_TOGGLES: u32 = 2;
/// Default number of urgent posts.
pub const DEFAULT_URG_POSTS: u32 = 1;
/// Default bound on one handler entry's operations.
pub const DEFAULT_MAX_HANDLER_OPS: u32 = 1_000;
/// Default bound on distinct states (16 bytes each in the visited set, and a few
/// hundred while in the frontier).
pub const DEFAULT_MAX_STATES: u64 = 4_000_000;

impl Default for ExploreConfig {
    /// The default bounds: [`DEFAULT_POSTS`] posts, [`DEFAULT_URG_POSTS`] urgent post,
    /// [`DEFAULT_ENTRIES`] entries, [`DEFAULT_SN_TOGGLES`] SN changes, no preemption
    /// bound.
    fn default() -> Self {
        ExploreConfig::with_counts(DEFAULT_POSTS, DEFAULT_ENTRIES)
            .urgent(DEFAULT_URG_POSTS)
            .sn_toggles(DEFAULT_SN_TOGGLES)
    }
}

impl ExploreConfig {
    /// `posts` non-urgent posts using [`DEFAULT_POST_VECTORS`] in order (repeating),
    /// `entries` handler entries, no SN changes, no urgent posts, no preemption bound.
    pub fn with_counts(posts: u32, entries: u32) -> ExploreConfig {
        ExploreConfig {
            posts: cycle(&DEFAULT_POST_VECTORS, posts),
            urg_posts: Vec::new(),
            post_choices: Vec::new(),
            entries,
            sn_toggles: 0,
            sn_recheck: true,
            preemption_bound: None,
            max_handler_ops: DEFAULT_MAX_HANDLER_OPS,
            max_states: DEFAULT_MAX_STATES,
            memory_model: MemoryModel::Sc,
            retriggers: 0,
            retrigger_vector: DEFAULT_POST_VECTORS[0],
            posted_msi_ack: PostedMsiAck::default(),
            migration: None,
            sn_software: None,
            reduce: true,
            partial_order: true,
            threads: 0,
        }
    }

    /// Migrates the first non-urgent vector's IRTE, the cleanup checking as `cleanup`.
    pub fn migrate(mut self, cleanup: MigrationCleanup) -> ExploreConfig {
        self.migration = Some(cleanup);
        self
    }

    /// The vector a migration moves: the first non-urgent vector.
    pub fn migrated_vector(&self) -> Option<Vector> {
        self.migration?;
        self.post_choices.first().or(self.posts.first()).copied()
    }

    /// `n` retriggers of `vector`, acked by `ack`.
    pub fn retriggers(mut self, n: u32, vector: Vector, ack: PostedMsiAck) -> ExploreConfig {
        self.retriggers = n;
        self.retrigger_vector = vector;
        self.posted_msi_ack = ack;
        self
    }

    /// Sets the memory model.
    pub fn memory_model(mut self, model: MemoryModel) -> ExploreConfig {
        self.memory_model = model;
        self
    }

    /// Turns the partial-order reduction on (the default) or off
    /// ([`ExploreConfig::partial_order`]).
    pub fn partial_order(mut self, on: bool) -> ExploreConfig {
        self.partial_order = on;
        self
    }

    /// Turns the state reduction on (the default) or off ([`ExploreConfig::reduce`]).
    pub fn reduce(mut self, on: bool) -> ExploreConfig {
        self.reduce = on;
        self
    }

    /// Sets `n` urgent posts using [`DEFAULT_URG_VECTORS`] in order.
    pub fn urgent(mut self, n: u32) -> ExploreConfig {
        self.urg_posts = cycle(&DEFAULT_URG_VECTORS, n);
        self
    }

    /// Lets each non-urgent post pick its vector from `set` (see
    /// [`post_choices`](Self::post_choices)); the number of posts stays.
    pub fn any_of(mut self, set: Vec<Vector>) -> ExploreConfig {
        self.post_choices = set;
        self
    }

    /// Posts these vectors in order, repeated to the current number of posts.
    pub fn post_vectors(mut self, vectors: &[Vector]) -> ExploreConfig {
        self.posts = cycle(vectors, self.posts.len() as u32);
        self
    }

    /// Sets the most distinct states before the search gives up.
    pub fn max_states(mut self, n: u64) -> ExploreConfig {
        self.max_states = n;
        self
    }

    /// Sets the number of SN changes.
    pub fn sn_toggles(mut self, n: u32) -> ExploreConfig {
        self.sn_toggles = n;
        self
    }

    /// Sets the preemption bound.
    pub fn preemption_bound(mut self, bound: Option<u32>) -> ExploreConfig {
        self.preemption_bound = bound;
        self
    }

    /// Checks the bounds: device vectors only (0x20 up to, not including, the
    /// notification vector), at most [`MAX_POSTS`] posts per stream and SN changes, at
    /// least one handler entry, and at least one operation per handler entry.
    pub fn validate(&self) -> Result<(), ExploreError> {
        // The length first, so the pairwise repeat check sees at most 16 vectors.
        if self.post_choices.len() > MAX_POST_CHOICES {
            return Err(ExploreError::Bound {
                field: "post_choices",
                value: self.post_choices.len() as u64,
                allowed: format!("at most {MAX_POST_CHOICES} vectors"),
            });
        }
        for (i, v) in self.post_choices.iter().enumerate() {
            if self.post_choices[..i].contains(v) {
                return Err(ExploreError::Bound {
                    field: "post_choices",
                    value: u64::from(v.0),
                    allowed: "each vector once".into(),
                });
            }
        }
        if self.max_states == 0 {
            return Err(ExploreError::Bound {
                field: "max_states",
                value: 0,
                allowed: "at least 1".into(),
            });
        }
        for (field, list) in [
            ("posts", &self.posts),
            ("urg_posts", &self.urg_posts),
            ("post_choices", &self.post_choices),
        ] {
            if list.len() > MAX_POSTS as usize {
                return Err(ExploreError::Bound {
                    field,
                    value: list.len() as u64,
                    allowed: format!("at most {MAX_POSTS}"),
                });
            }
            if let Some(v) = list.iter().find(|v| !is_device_vector(**v)) {
                return Err(ExploreError::Bound {
                    field,
                    value: u64::from(v.0),
                    allowed: format!(
                        "device vectors {:#04x}..{:#04x}",
                        FIRST_EXTERNAL_VECTOR, POSTED_MSI_NOTIFICATION_VECTOR.0
                    ),
                });
            }
        }
        if self.retriggers > MAX_POSTS {
            return Err(ExploreError::Bound {
                field: "retriggers",
                value: u64::from(self.retriggers),
                allowed: format!("at most {MAX_POSTS}"),
            });
        }
        if !is_device_vector(self.retrigger_vector) {
            return Err(ExploreError::Bound {
                field: "retrigger_vector",
                value: u64::from(self.retrigger_vector.0),
                allowed: format!(
                    "device vectors {:#04x}..{:#04x}",
                    FIRST_EXTERNAL_VECTOR, POSTED_MSI_NOTIFICATION_VECTOR.0
                ),
            });
        }
        if self.sn_toggles > MAX_POSTS {
            return Err(ExploreError::Bound {
                field: "sn_toggles",
                value: u64::from(self.sn_toggles),
                allowed: format!("at most {MAX_POSTS}"),
            });
        }
        if self.entries == 0 {
            return Err(ExploreError::Bound {
                field: "entries",
                value: 0,
                allowed: "at least 1: with no handler entry the variant never runs, every \
                          post stays in PIR, and the search would pass without checking it"
                    .into(),
            });
        }
        if self.max_handler_ops == 0 {
            return Err(ExploreError::Bound {
                field: "max_handler_ops",
                value: 0,
                allowed: "at least 1".into(),
            });
        }
        Ok(())
    }
}

/// Most posts per stream, and most SN changes, an exploration accepts.
pub const MAX_POSTS: u32 = 64;

/// Most vectors a post may choose from: the search branches on each at every post.
pub const MAX_POST_CHOICES: usize = 16;

pub(crate) fn is_device_vector(v: Vector) -> bool {
    v.0 >= FIRST_EXTERNAL_VECTOR && v < POSTED_MSI_NOTIFICATION_VECTOR
}

fn cycle(vectors: &[Vector], n: u32) -> Vec<Vector> {
    vectors.iter().copied().cycle().take(n as usize).collect()
}

/// Bad input to the explorer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExploreError {
    /// No built-in variant has this name.
    #[error("unknown variant {name:?}: expected one of {}", VARIANT_NAMES.join(", "))]
    UnknownVariant {
        /// The name given.
        name: String,
    },
    /// No shipped SN sequence has this name.
    #[error("unknown SN software {name:?}: expected one of {}", SN_SOFTWARE_NAMES.join(", "))]
    UnknownSnSoftware {
        /// The name given.
        name: String,
    },
    /// A bound is out of range.
    #[error("`{field}` is {value}; allowed: {allowed}")]
    Bound {
        /// The [`ExploreConfig`] field.
        field: &'static str,
        /// Its value (for a vector list, the offending vector).
        value: u64,
        /// What is allowed.
        allowed: String,
    },
}

/// One numbered step of a counterexample: who did what, and the descriptor and APIC
/// fields after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TraceStep {
    /// Step number, from 1.
    pub n: u32,
    /// `iommu`, `iommu-urg`, `sn-cpu`, `apic`, `handler`, `store-buffer`, `irq-core`
    /// (a retrigger IPI) or `apic-idt` (a retriggered vector taken through the IDT).
    pub actor: String,
    /// What it did, in words.
    pub action: String,
    /// The descriptor and APIC fields after the step.
    pub after: Snapshot,
}

/// A shortest path to a violated invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Counterexample {
    /// The invariant that failed.
    pub invariant: Invariant,
    /// Why, in words.
    pub detail: String,
    /// The invariant failed once nothing could move any more (rather than during the
    /// last step).
    pub at_quiescence: bool,
    /// The steps from the initial state, in order.
    pub steps: Vec<TraceStep>,
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "counterexample, {} steps:", self.steps.len())?;
        for s in &self.steps {
            writeln!(f, "{:>4}. {:<9} {}", s.n, s.actor, s.action)?;
            writeln!(f, "      {:<9} -> {}", "", s.after)?;
        }
        let when = if self.at_quiescence {
            "at quiescence (no actor can move)".to_string()
        } else {
            format!("at step {}", self.steps.len())
        };
        write!(
            f,
            "invariant violated {when}: {}: {}",
            self.invariant, self.detail
        )
    }
}

/// How an exploration ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum ExploreResult {
    /// Every invariant held on every explored path.
    Pass,
    /// An invariant failed; the counterexample is a shortest path to it.
    Fail(Box<Counterexample>),
    /// The state limit was reached first: no verdict.
    Incomplete {
        /// What limit, in words.
        reason: String,
    },
}

/// What an exploration did and found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExploreReport {
    /// [`PirHandler::name`] of the handler explored.
    pub variant: String,
    /// The variant says it is wrong on purpose ([`PirHandler::is_broken`]).
    pub broken_on_purpose: bool,
    /// The bounds explored.
    pub config: ExploreConfig,
    /// Steps taken (states generated, duplicates included).
    pub states_explored: u64,
    /// Distinct states seen.
    pub distinct_states: u64,
    /// Individual invariant evaluations.
    pub invariants_checked: u64,
    /// Longest path explored, in steps.
    pub max_depth: u64,
    /// Steps the partial-order reduction did not take: each would have led, by an
    /// order of independent steps already taken, to a state reached anyway.
    pub steps_slept: u64,
    /// States taken from the queue again: to take steps that were asleep on every
    /// earlier path to them but not on a later one (sleep sets with a visited table),
    /// or, under a preemption bound, reached again with fewer preemptions.
    pub states_reopened: u64,
    /// The most states waiting to be expanded at once (the breadth-first frontier).
    pub peak_frontier_states: u64,
    /// The most bytes the frontier held at once: its states are kept serialized
    /// (see `frontier.rs`), so this is the search's largest memory use after the
    /// visited set.
    pub peak_frontier_bytes: u64,
    /// Wall-clock time of the search, seconds (the only field that differs between
    /// two identical runs).
    pub wall_time_s: f64,
    /// `states_explored` per wall-clock second (differs between runs, as
    /// `wall_time_s` does).
    pub states_per_s: f64,
    /// The verdict.
    pub result: ExploreResult,
}

impl ExploreReport {
    /// Whether every invariant held (and the search finished).
    pub fn passed(&self) -> bool {
        self.result == ExploreResult::Pass
    }

    /// The counterexample, if an invariant failed.
    pub fn counterexample(&self) -> Option<&Counterexample> {
        match &self.result {
            ExploreResult::Fail(c) => Some(c),
            _ => None,
        }
    }

    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report serializes")
    }
}

impl fmt::Display for ExploreReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match &self.result {
            ExploreResult::Pass => "PASS: every invariant holds within the bounds".to_string(),
            ExploreResult::Fail(c) => format!("FAIL: {} violated", c.invariant),
            ExploreResult::Incomplete { reason } => format!("INCOMPLETE: {reason}"),
        };
        let broken = if self.broken_on_purpose {
            " (broken on purpose)"
        } else {
            ""
        };
        writeln!(f, "variant {}{broken}: {verdict}", self.variant)?;
        let c = &self.config;
        let list = |v: &[Vector]| {
            v.iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        };
        writeln!(
            f,
            "  bounds: posts [{}], urgent posts [{}], {} entries, {} SN toggles{}, \
             preemption bound {}, memory model {}{}",
            if c.post_choices.is_empty() {
                list(&c.posts)
            } else {
                format!("{} x any of {}", c.posts.len(), list(&c.post_choices))
            },
            list(&c.urg_posts),
            c.entries,
            c.sn_toggles,
            if c.sn_recheck || c.sn_toggles < 2 {
                ""
            } else {
                " (no recheck)"
            },
            c.preemption_bound
                .map_or_else(|| "none".to_string(), |b| b.to_string()),
            c.memory_model,
            match c.migration {
                Some(cleanup) => format!(
                    ", migration of {} (cleanup checks {})",
                    c.migrated_vector()
                        .map_or("nothing".into(), |v| v.to_string()),
                    cleanup.name()
                ),
                None => String::new(),
            } + &c
                .sn_software
                .as_ref()
                .map_or(String::new(), |n| format!(", SN software {n}"))
                + &if c.retriggers > 0 {
                    format!(
                        ", {} retriggers of {} (ack {})",
                        c.retriggers,
                        c.retrigger_vector,
                        c.posted_msi_ack.label()
                    )
                } else {
                    String::new()
                },
        )?;
        writeln!(
            f,
            "  steps taken (states_explored) {}, distinct states {}, invariants checked {}, \
             max depth {}, wall time {:.3} s ({:.0} steps/s)",
            self.states_explored,
            self.distinct_states,
            self.invariants_checked,
            self.max_depth,
            self.wall_time_s,
            self.states_per_s
        )?;
        if c.partial_order && c.preemption_bound.is_none() {
            writeln!(
                f,
                "  sleep sets: {} steps slept, {} states reopened",
                self.steps_slept, self.states_reopened
            )?;
        }
        if let ExploreResult::Fail(c) = &self.result {
            writeln!(f, "{c}")?;
        }
        Ok(())
    }
}

/// Explores every interleaving of `handler` with the actors and bounds of `config`.
///
/// `handler` is any [`PirHandler`]: a built-in variant or your own, written against
/// [`crate::kernel::CpuPort`]. It must be deterministic (the same operation results
/// give the same operations), since the explorer re-runs it to reach each state.
///
/// # Panics
/// If `config` fails [`ExploreConfig::validate`].
pub fn explore(handler: &dyn PirHandler, config: &ExploreConfig) -> ExploreReport {
    if let Err(e) = config.validate() {
        panic!("invalid exploration bounds: {e}");
    }
    search::explore(handler, None, config)
}

/// [`explore`] with `sn` as the SN actor: each of its operations is one step, and it
/// makes `config.sn_toggles` SN changes (see [`crate::kernel::sn::SnSoftware`]).
pub fn explore_with_sn(
    handler: &dyn PirHandler,
    sn: &dyn SnSoftware,
    config: &ExploreConfig,
) -> ExploreReport {
    if let Err(e) = config.validate() {
        panic!("invalid exploration bounds: {e}");
    }
    search::explore(handler, Some(sn), config)
}

/// [`explore`] for a built-in variant chosen by name.
pub fn explore_variant(
    name: &str,
    max_loops: u32,
    config: &ExploreConfig,
) -> Result<ExploreReport, ExploreError> {
    config.validate()?;
    let handler = variant_by_name(name, max_loops).ok_or_else(|| ExploreError::UnknownVariant {
        name: name.to_string(),
    })?;
    let sn = match &config.sn_software {
        Some(name) => Some(
            sn_software_by_name(name)
                .ok_or_else(|| ExploreError::UnknownSnSoftware { name: name.clone() })?,
        ),
        None => None,
    };
    Ok(search::explore(handler.as_ref(), sn.as_deref(), config))
}

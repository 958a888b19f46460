//! Parameter sweeps: a base scenario, axes over any of its fields, and every point of
//! their cartesian product run in parallel, on one machine or split into shards over
//! many.
//!
//! A sweep file (TOML):
//!
//! ```toml
//! name = "posted rate"            # optional, free text
//! seed = 1                        # the sweep seed; default: the base scenario's
//! seeds = "per-point"             # or "same": every point runs with the sweep seed
//! base = "default"                # an embedded scenario, or a file relative to this
//!                                 # one; or a [base] table in scenario format
//!
//! [set]                           # optional: fixed changes to the base
//! duration_us = 1000
//!
//! [[axes]]
//! field = "mode"
//! values = ["posted", "remapped"]
//!
//! [[axes]]
//! field = "devices[*].arrival.rate_per_s"   # [*]: every device; [N]: device N
//! range = { from = 2.5e5, to = 4e6, points = 5, log = true }
//! ```
//!
//! An axis gives `values = [...]` (any TOML values, tables included) or
//! `range = { from, to, step }` (`to` included when a step lands on it; integers stay
//! integers) or `range = { from, to, points, log }`. A field path names any scenario
//! field: `max_loops`, `costs.fabric.message_occupancy_ns`,
//! `devices[0].closed_loop.inflight`. Setting a field under an unset optional table
//! (such as `closed_loop` of an open-loop device) creates that table with its defaults;
//! the point must still validate. An axis over `seed` overrides the derived seed.
//!
//! Points are numbered from 0 with the first axis varying slowest. With
//! `seeds = "per-point"` each point's seed is a hash of the sweep seed and its
//! (field, value) pairs ([`point_seed`]), so results do not depend on thread count,
//! shard, run order or the order axes are listed in. Every point is built and
//! validated before any runs.
//!
//! Output ([`run_to_dir`]): `points.jsonl`, one [`PointRecord`] per line in point
//! order, with the full report; `points.csv`, the coordinates and [`Metrics`] of each
//! point; `sweep.json`, the definition and the shard. `--shard K/N` runs the points
//! `i` with `i mod N = K - 1`; [`merge_dirs`] joins shards and checks that they come
//! from the same sweep (the fingerprint in every line) and that no point is missing or
//! doubled.

mod cli;
mod merge;
mod output;
pub mod path;
mod progress;
mod run;
mod spec;

pub use cli::{cli_merge, cli_sweep, MergeArgs, SweepArgs};
pub use merge::{merge_dirs, MergeSummary};
pub use output::{Metrics, PointRecord, CSV_FILE, JSONL_FILE, MANIFEST_FILE};
pub use progress::human_duration;
pub use run::{
    default_threads, run_points, run_to_dir, ProgressMode, RunOptions, Shard, SweepSummary,
};
pub use spec::{canonical, coords_text, point_seed, Axis, Point, SeedMode, Sweep, MAX_POINTS};

/// Everything that can go wrong with a sweep, naming the axis, field, point or file.
///
/// Fields: `axis` is 1-based as listed in the file; `field` is the axis's field path;
/// `point` is a 0-based point index and `coords` its `field = value` list; `message`
/// says what is wrong and what is allowed.
#[allow(missing_docs)] // the fields are described above, once for all variants
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// A file could not be read.
    #[error("cannot read {path}: {message}")]
    Io { path: String, message: String },
    /// An output could not be written.
    #[error("cannot write {path}: {message}")]
    Write { path: String, message: String },
    /// The sweep file is not valid TOML or has unknown or missing keys.
    #[error("sweep {origin} is not a valid sweep file: {message}")]
    Parse { origin: String, message: String },
    /// The base scenario could not be found or parsed.
    #[error("sweep base {base}: {message}")]
    Base { base: String, message: String },
    /// The field path is malformed or names no scenario field.
    #[error("axis {axis} (`{field}`): {message}")]
    Field {
        axis: usize,
        field: String,
        message: String,
    },
    /// The field exists but does not take this value (wrong type, unknown name).
    #[error("axis {axis} (`{field}`): value {value} is rejected: {message}")]
    Value {
        axis: usize,
        field: String,
        value: String,
        message: String,
    },
    /// An axis with no values.
    #[error("axis {axis} (`{field}`) has no values")]
    EmptyAxis { axis: usize, field: String },
    /// An axis that lists a value twice.
    #[error("axis {axis} (`{field}`) lists the value {value} twice")]
    DuplicateValue {
        axis: usize,
        field: String,
        value: String,
    },
    /// Two axes over the same field.
    #[error("axes {first} and {second} both set `{field}`")]
    DuplicateAxis {
        field: String,
        first: usize,
        second: usize,
    },
    /// A `range` that is malformed or goes nowhere.
    #[error("axis {axis} (`{field}`): bad range: {message}")]
    BadRange {
        axis: usize,
        field: String,
        message: String,
    },
    /// The product of the axis lengths is above [`MAX_POINTS`].
    #[error("the sweep has more than {max} points ({axes} values); split it into sweeps of fewer points")]
    TooManyPoints {
        max: usize,
        /// Each axis with its number of values.
        axes: String,
    },
    /// A point's values together do not form a scenario.
    #[error("point {point} ({coords}) is not a scenario: {message}")]
    PointRejected {
        point: usize,
        coords: String,
        message: String,
    },
    /// A point's scenario fails validation (the [`crate::ScenarioError`] text).
    #[error("point {point} ({coords}) is invalid{}: {message}", axis.as_deref().unwrap_or(""))]
    PointInvalid {
        point: usize,
        coords: String,
        /// Which axis set the offending field, when one did.
        axis: Option<String>,
        message: String,
    },
    /// A point's run failed or panicked.
    #[error("point {point} ({coords}) failed: {message}")]
    PointFailed {
        point: usize,
        coords: String,
        message: String,
    },
    /// A `--shard` that is not K/N with 1 <= K <= N.
    #[error("bad shard {spec:?}: {message}")]
    BadShard { spec: String, message: String },
    /// A bad command-line option.
    #[error("{0}")]
    Options(String),
    /// Shard outputs that do not fit together.
    #[error("merge: {0}")]
    Merge(String),
    /// The plot could not be drawn.
    #[error("plot: {0}")]
    Plot(String),
}

//! Running a sweep's points on a pool of scoped threads.
//!
//! Workers take the next point from one atomic counter, build its scenario, run it,
//! and serialize its line themselves; nothing else is shared while a point runs. The
//! calling thread receives finished points over a channel, emits them in point order
//! and reports progress.
//!
//! With more than one worker, the points run heaviest first (longest processing time
//! first), so the last point to finish is a light one and no worker idles at the end
//! while another runs the heaviest point alone. A point's weight is the events of a
//! short pilot run of its scenario ([`PILOT_SHARE`] of its duration), scaled up: what
//! makes a point heavy (its rates, its delivery mode, its devices) shows in the events
//! it handles, and no formula over the scenario's fields would know them all. The
//! order changes no result: each point has its own seed and the outputs are emitted
//! in point order.

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::output::{self, AtomicFile, Metrics, PointRecord, CSV_FILE, JSONL_FILE, MANIFEST_FILE};
use super::path::{self, FieldPath};
use super::{coords_text, Sweep, SweepError};
use crate::System;

/// One of N disjoint shares of a sweep: shard K (1-based) holds the points `i` with
/// `i mod N = K - 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// This shard, 1..=n.
    pub k: usize,
    /// Number of shards.
    pub n: usize,
}

impl Shard {
    /// The whole sweep, `1/1`.
    pub const WHOLE: Shard = Shard { k: 1, n: 1 };

    /// Shard `k` of `n`; 1 <= k <= n.
    pub fn new(k: usize, n: usize) -> Result<Shard, SweepError> {
        if n == 0 || k == 0 || k > n {
            return Err(SweepError::BadShard {
                spec: format!("{k}/{n}"),
                message: "expected K/N with 1 <= K <= N".into(),
            });
        }
        Ok(Shard { k, n })
    }

    /// Whether point `point` belongs to this shard.
    pub fn contains(&self, point: usize) -> bool {
        point % self.n == self.k - 1
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

impl FromStr for Shard {
    type Err = SweepError;
    fn from_str(s: &str) -> Result<Shard, SweepError> {
        let bad = |message: &str| SweepError::BadShard {
            spec: s.into(),
            message: message.into(),
        };
        let (k, n) = s
            .split_once('/')
            .ok_or_else(|| bad("expected K/N, e.g. 2/8"))?;
        let k = k.trim().parse().map_err(|_| bad("K is not a number"))?;
        let n = n.trim().parse().map_err(|_| bad("N is not a number"))?;
        Shard::new(k, n).map_err(|_| bad("expected K/N with 1 <= K <= N"))
    }
}

/// Whether to report progress on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    /// A bar when stderr is a terminal; otherwise a line every 30 s.
    Auto,
    /// Nothing.
    Quiet,
}

/// How to run a sweep.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Worker threads (at least 1).
    pub threads: usize,
    /// The share of the points to run.
    pub shard: Shard,
    /// Progress on stderr or not.
    pub progress: ProgressMode,
    /// Report paths (e.g. `iommu.fabric_mean_wait_ns`) copied into each point's
    /// `metrics` as extra columns.
    pub extra_metrics: Vec<String>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            threads: default_threads(),
            shard: Shard::WHOLE,
            progress: ProgressMode::Auto,
            extra_metrics: Vec::new(),
        }
    }
}

/// All cores.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct SweepSummary {
    /// The shard's points, in point order, with `report` dropped (`null`).
    pub records: Vec<PointRecord>,
    /// Threads used (at most one per point).
    pub threads: usize,
    /// Wall-clock seconds of the whole run.
    pub wall_s: f64,
    /// Wall-clock seconds the workers spent running points, summed over points: over
    /// `wall_s`, how many workers were busy on average (at most `threads`).
    pub points_busy_s: f64,
    /// Wall-clock seconds of the pilot runs that ordered the points (0 on one thread).
    pub pilot_s: f64,
}

/// Runs the points of `opts.shard` and hands each finished point, in point order, to
/// `emit` together with its JSON line. Points must have been checked
/// ([`Sweep::check_all`]); an invalid one is an error here too. Stops at the first
/// error, after the points already running finish.
pub fn run_points(
    sweep: &Sweep,
    opts: &RunOptions,
    mut emit: impl FnMut(&PointRecord, &str) -> Result<(), SweepError>,
) -> Result<SweepSummary, SweepError> {
    if opts.threads == 0 {
        return Err(SweepError::Options("--threads must be at least 1".into()));
    }
    let extra = opts
        .extra_metrics
        .iter()
        .map(|p| {
            FieldPath::parse(p)
                .map(|fp| (p.clone(), fp))
                .map_err(SweepError::Options)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let todo: Vec<usize> = (0..sweep.len())
        .filter(|i| opts.shard.contains(*i))
        .collect();
    let threads = opts.threads.min(todo.len()).max(1);
    let fingerprint = sweep.fingerprint();
    let started = Instant::now();
    // Slots of `todo`, in the order workers take them.
    let (order, pilot_s) = if threads > 1 {
        let order = heaviest_first(&pilot_weights(sweep, &todo, threads));
        (order, started.elapsed().as_secs_f64())
    } else {
        ((0..todo.len()).collect(), 0.0)
    };
    let mut points_busy_s = 0.0;
    let mut progress = super::progress::Progress::new(todo.len(), opts.progress);

    let next = AtomicUsize::new(0);
    let abort = AtomicBool::new(false);
    type Finished = (usize, f64, Result<(PointRecord, String), SweepError>);
    let (tx, rx) = mpsc::channel::<Finished>();
    let mut records = Vec::with_capacity(todo.len());
    let mut first_error: Option<(usize, SweepError)> = None;

    std::thread::scope(|s| {
        for _ in 0..threads {
            let tx = tx.clone();
            let (todo, order, next, abort, fingerprint, extra) =
                (&todo, &order, &next, &abort, &fingerprint, &extra);
            s.spawn(move || loop {
                if abort.load(Ordering::Relaxed) {
                    break;
                }
                let Some(&slot) = order.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    break;
                };
                let point = todo[slot];
                let running = Instant::now();
                let result = run_one(sweep, fingerprint, point, extra);
                if tx
                    .send((slot, running.elapsed().as_secs_f64(), result))
                    .is_err()
                {
                    break;
                }
            });
        }
        drop(tx);

        let mut pending: BTreeMap<usize, (PointRecord, String)> = BTreeMap::new();
        let mut next_emit = 0;
        let mut done = 0;
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok((slot, busy_s, Ok(rec))) => {
                    done += 1;
                    points_busy_s += busy_s;
                    pending.insert(slot, rec);
                    while let Some((mut rec, line)) = pending.remove(&next_emit) {
                        next_emit += 1;
                        if first_error.is_none() {
                            if let Err(e) = emit(&rec, &line) {
                                first_error = Some((rec.point, e));
                                abort.store(true, Ordering::Relaxed);
                            }
                        }
                        rec.report = Value::Null;
                        records.push(rec);
                    }
                    progress.update(done);
                }
                Ok((slot, _, Err(e))) => {
                    let point = todo[slot];
                    if first_error.as_ref().is_none_or(|(p, _)| point < *p) {
                        first_error = Some((point, e));
                    }
                    abort.store(true, Ordering::Relaxed);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => progress.update(done),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
    });
    progress.finish();
    if let Some((_, e)) = first_error {
        return Err(e);
    }
    Ok(SweepSummary {
        records,
        threads,
        wall_s: started.elapsed().as_secs_f64(),
        points_busy_s,
        pilot_s,
    })
}

/// The share of a point's simulated duration its pilot runs to weigh it.
pub const PILOT_SHARE: f64 = 0.01;

/// Each point's expected work: the events of a pilot run over [`PILOT_SHARE`] of its
/// duration, scaled to the whole duration. Pilots run on `threads` workers. A point
/// that cannot be built or panics weighs nothing here; its real run reports why.
fn pilot_weights(sweep: &Sweep, todo: &[usize], threads: usize) -> Vec<f64> {
    let next = AtomicUsize::new(0);
    let mut weights = vec![0.0; todo.len()];
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut weighed = Vec::new();
                    loop {
                        let slot = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&point) = todo.get(slot) else {
                            return weighed;
                        };
                        let weight = catch_unwind(AssertUnwindSafe(|| pilot_weight(sweep, point)))
                            .unwrap_or(0.0);
                        weighed.push((slot, weight));
                    }
                })
            })
            .collect();
        for worker in workers {
            for (slot, weight) in worker.join().unwrap_or_default() {
                weights[slot] = weight;
            }
        }
    });
    weights
}

fn pilot_weight(sweep: &Sweep, point: usize) -> f64 {
    let Ok(p) = sweep.point(point) else {
        return 0.0;
    };
    let Ok(mut sys) = System::new(&p.scenario) else {
        return 0.0;
    };
    let span = sim_core::Duration::from_secs_f64(p.scenario.duration_us * 1e-6 * PILOT_SHARE);
    sys.run_for(span);
    sys.events() as f64 / PILOT_SHARE
}

/// Slots by descending weight; equal weights keep their point order.
fn heaviest_first(weights: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]).then(a.cmp(&b)));
    order
}

fn run_one(
    sweep: &Sweep,
    fingerprint: &str,
    index: usize,
    extra: &[(String, FieldPath)],
) -> Result<(PointRecord, String), SweepError> {
    let p = sweep.point(index)?;
    let failed = |message: String| SweepError::PointFailed {
        point: index,
        coords: coords_text(&p.coords),
        message,
    };
    let report = match catch_unwind(AssertUnwindSafe(|| System::run_scenario(&p.scenario))) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Err(failed(e.to_string())),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            return Err(failed(format!("the simulation panicked: {msg}")));
        }
    };
    let mut metrics = Metrics::from_report(&report).to_map();
    let report = serde_json::to_value(&report).expect("a Report serializes");
    for (name, fp) in extra {
        let v = path::get(&report, fp)
            .filter(|v| !v.is_object() && !v.is_array())
            .ok_or_else(|| {
                failed(format!(
                    "the report has no single value at `{name}` (use a path such as `iommu.fabric_mean_wait_ns` or `cpu[0].busy_frac`)"
                ))
            })?;
        metrics.insert(name.clone(), v.clone());
    }
    let rec = PointRecord {
        sweep: fingerprint.to_string(),
        sweep_seed: sweep.seed,
        point: index,
        points_total: sweep.len(),
        coords: p.coords,
        seed: p.seed,
        metrics,
        report,
    };
    let line = serde_json::to_string(&rec).expect("a record serializes");
    Ok((rec, line))
}

/// Checks every point, runs the shard's points, and writes `points.jsonl`,
/// `points.csv` and `sweep.json` to `out` (created if missing). Files from an earlier
/// run there are removed first, and each file appears only once complete.
pub fn run_to_dir(
    sweep: &Sweep,
    opts: &RunOptions,
    out: &Path,
) -> Result<SweepSummary, SweepError> {
    sweep.check_all()?;
    std::fs::create_dir_all(out).map_err(|e| output::write_error(out, e))?;
    for f in [JSONL_FILE, CSV_FILE, MANIFEST_FILE] {
        let p = out.join(f);
        if p.exists() {
            std::fs::remove_file(&p).map_err(|e| output::write_error(&p, e))?;
        }
    }
    let mut jsonl = AtomicFile::create(&out.join(JSONL_FILE))?;
    let mut csv = AtomicFile::create(&out.join(CSV_FILE))?;
    let mut header = false;
    let summary = run_points(sweep, opts, |rec, line| {
        jsonl.line(line)?;
        if !header {
            csv.line(&output::csv_header(rec))?;
            header = true;
        }
        csv.line(&output::csv_row(rec))
    })?;
    jsonl.commit()?;
    csv.commit()?;
    output::write_json(
        &out.join(MANIFEST_FILE),
        &output::manifest(sweep, opts.shard, summary.records.len()),
    )?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_partition() {
        assert_eq!("2/3".parse::<Shard>().unwrap(), Shard { k: 2, n: 3 });
        for bad in ["0/3", "4/3", "1/0", "a/3", "3", "1/x"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        let shards: Vec<Shard> = (1..=3).map(|k| Shard::new(k, 3).unwrap()).collect();
        for i in 0..20 {
            assert_eq!(shards.iter().filter(|s| s.contains(i)).count(), 1);
        }
    }

    #[test]
    fn heavier_points_go_first_and_ties_keep_point_order() {
        assert_eq!(
            heaviest_first(&[1.0, 5.0, 1.0, 9.0, 0.0]),
            vec![3, 1, 0, 2, 4]
        );
        assert!(heaviest_first(&[]).is_empty());
    }

    #[test]
    fn a_pilot_weighs_a_busier_point_more() {
        let sweep: Sweep = crate::sweep::Sweep::from_toml_str(
            r#"
            name = "w"
            seed = 3
            base = "default"
            [set]
            duration_us = 2000
            [[axes]]
            field = "devices[*].arrival.rate_per_s"
            values = [1e5, 2e6, 4e5]
            "#,
            "w.toml",
            Path::new("."),
        )
        .unwrap();
        let weights = pilot_weights(&sweep, &[0, 1, 2], 2);
        assert!(weights.iter().all(|&w| w > 0.0), "{weights:?}");
        assert_eq!(heaviest_first(&weights), vec![1, 2, 0], "{weights:?}");
        // Only the shard's points are weighed, by slot.
        assert_eq!(pilot_weights(&sweep, &[2], 1).len(), 1);
    }
}

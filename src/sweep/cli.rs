//! The `irqsim sweep` and `irqsim merge` commands, for main.rs to mount.

use std::io::Write;
use std::path::PathBuf;

use super::output::{value_as_f64, Metrics, PointRecord, CSV_FILE, JSONL_FILE};
use super::path::{self, FieldPath};
use super::{
    coords_text, default_threads, human_duration, merge_dirs, run_to_dir, ProgressMode, RunOptions,
    Shard, Sweep, SweepError,
};

/// `irqsim sweep SWEEP.toml`: run every point of a sweep (or one shard of it) in
/// parallel and write points.jsonl, points.csv and sweep.json.
#[derive(clap::Args, Clone, Debug)]
pub struct SweepArgs {
    /// Sweep file (TOML): `seed`, `base` (scenario name, file or `[base]` table), `[[axes]]`.
    pub sweep: PathBuf,
    /// Output directory (created if missing); earlier outputs there are replaced.
    #[arg(long, default_value = "sweep-out", value_name = "DIR")]
    pub out: PathBuf,
    /// Worker threads [default: all cores].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Run only shard K of N (1-based): points i with i mod N = K-1. Join shards with `irqsim merge`.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<Shard>,
    /// Override the sweep seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Draw --y against the first axis, one series per value of the other axes, as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Metric to plot: a column of points.csv, or a report path such as
    /// `iommu.fabric_mean_wait_ns` (then also added as a column).
    #[arg(long, default_value = "handled_per_s", value_name = "METRIC")]
    pub y: String,
    /// Check the sweep and list the shard's points and seeds without running them.
    #[arg(long)]
    pub dry_run: bool,
    /// No progress and no summary.
    #[arg(long)]
    pub quiet: bool,
}

/// `irqsim merge DIR... --out DIR`: join the outputs of a sweep's shards.
#[derive(clap::Args, Clone, Debug)]
pub struct MergeArgs {
    /// Shard outputs: directories written by `irqsim sweep --shard`, or points.jsonl files.
    #[arg(required = true, value_name = "DIR")]
    pub inputs: Vec<PathBuf>,
    /// Directory for the merged points.jsonl, points.csv and sweep.json.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Accept missing points (a sweep still running, a failed shard).
    #[arg(long)]
    pub partial: bool,
    /// Draw --y against the first axis as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Metric to plot: a column of points.csv or a report path.
    #[arg(long, default_value = "handled_per_s", value_name = "METRIC")]
    pub y: String,
    /// No summary.
    #[arg(long)]
    pub quiet: bool,
}

/// Runs `irqsim sweep`; the error is a message for stderr.
pub fn cli_sweep(args: SweepArgs) -> Result<(), String> {
    sweep_command(args).map_err(|e| e.to_string())
}

/// Runs `irqsim merge`; the error is a message for stderr.
pub fn cli_merge(args: MergeArgs) -> Result<(), String> {
    merge_command(args).map_err(|e| e.to_string())
}

fn sweep_command(args: SweepArgs) -> Result<(), SweepError> {
    let mut sweep = Sweep::load(&args.sweep)?;
    if let Some(seed) = args.seed {
        sweep.seed = seed;
    }
    let shard = args.shard.unwrap_or(Shard::WHOLE);
    // Checked before --dry-run, so a dry run refuses what the real run would.
    if args.threads == Some(0) {
        return Err(SweepError::Options(
            "--threads 0 is not allowed: expected at least 1".into(),
        ));
    }
    if args.dry_run {
        return dry_run(&sweep, shard);
    }
    let threads = args.threads.unwrap_or_else(default_threads);
    let is_metric = Metrics::names().contains(&args.y);
    if args.plot.is_some() && !is_metric {
        FieldPath::parse(&args.y).map_err(|e| {
            SweepError::Options(format!(
                "--y {}: not a metric ({}) and {e}",
                args.y,
                Metrics::names().join(", ")
            ))
        })?;
    }
    let opts = RunOptions {
        threads,
        shard,
        progress: if args.quiet {
            ProgressMode::Quiet
        } else {
            ProgressMode::Auto
        },
        extra_metrics: if args.plot.is_some() && !is_metric {
            vec![args.y.clone()]
        } else {
            Vec::new()
        },
    };
    let summary = run_to_dir(&sweep, &opts, &args.out)?;
    if !args.quiet {
        println!(
            "sweep{}: {} of {} points (shard {shard}) in {} on {} thread{} -> {}, {}",
            if sweep.name.is_empty() {
                String::new()
            } else {
                format!(" {:?}", sweep.name)
            },
            summary.records.len(),
            sweep.len(),
            human_duration(summary.wall_s),
            summary.threads,
            if summary.threads == 1 { "" } else { "s" },
            args.out.join(JSONL_FILE).display(),
            args.out.join(CSV_FILE).display(),
        );
        println!(
            "  points ran {} in all: {:.2} of {} thread{} busy on average{}",
            human_duration(summary.points_busy_s),
            summary.points_busy_s / summary.wall_s.max(1e-9),
            summary.threads,
            if summary.threads == 1 { "" } else { "s" },
            if summary.pilot_s > 0.0 {
                format!(
                    " (heaviest first, ordered by pilot runs that took {})",
                    human_duration(summary.pilot_s)
                )
            } else {
                String::new()
            }
        );
    }
    if let Some(plot) = &args.plot {
        crate::plot::plot_sweep(&summary.records, &args.y, plot).map_err(SweepError::Plot)?;
        if !args.quiet {
            println!("plot: {}", plot.display());
        }
    }
    Ok(())
}

fn dry_run(sweep: &Sweep, shard: Shard) -> Result<(), SweepError> {
    sweep.check_all()?;
    let mine: Vec<usize> = (0..sweep.len()).filter(|i| shard.contains(*i)).collect();
    println!(
        "sweep {}: {} points, fingerprint {}, seed {} ({}); shard {shard} has {}",
        if sweep.name.is_empty() {
            "(unnamed)"
        } else {
            &sweep.name
        },
        sweep.len(),
        sweep.fingerprint(),
        sweep.seed,
        sweep.seeds.as_str(),
        mine.len()
    );
    // check_all built and validated every point; listing them needs only their seeds.
    let list = || -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for i in mine {
            let (seed, coords) = sweep.seed_and_coords(i);
            writeln!(
                out,
                "point {i:>5}  seed {seed:>20}  {}",
                coords_text(&coords)
            )?;
        }
        out.flush()
    };
    match list() {
        // A reader such as `head` that stops early is not an error.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(SweepError::Options(format!("writing the point list: {e}")))
        }
        _ => Ok(()),
    }
}

fn merge_command(args: MergeArgs) -> Result<(), SweepError> {
    let summary = merge_dirs(&args.inputs, &args.out, args.partial)?;
    if !args.quiet {
        println!(
            "merge: {} of {} points from {} inputs{} -> {}, {}",
            summary.records.len(),
            summary.points_total,
            args.inputs.len(),
            if summary.missing.is_empty() {
                String::new()
            } else {
                format!(" ({} missing)", summary.missing.len())
            },
            args.out.join(JSONL_FILE).display(),
            args.out.join(CSV_FILE).display(),
        );
    }
    if let Some(plot) = &args.plot {
        let mut records = summary.records;
        if !records.iter().all(|r| r.metrics.contains_key(&args.y)) {
            add_report_metric(&mut records, &args.out.join(JSONL_FILE), &args.y)?;
        }
        crate::plot::plot_sweep(&records, &args.y, plot).map_err(SweepError::Plot)?;
        if !args.quiet {
            println!("plot: {}", plot.display());
        }
    }
    Ok(())
}

/// Copies the report value at `name` from the merged lines into each record's metrics.
fn add_report_metric(
    records: &mut [PointRecord],
    jsonl: &std::path::Path,
    name: &str,
) -> Result<(), SweepError> {
    let fp = FieldPath::parse(name).map_err(|e| {
        SweepError::Options(format!(
            "--y {name}: not a metric ({}) and {e}",
            Metrics::names().join(", ")
        ))
    })?;
    let text = std::fs::read_to_string(jsonl).map_err(|e| SweepError::Io {
        path: jsonl.display().to_string(),
        message: e.to_string(),
    })?;
    for (rec, line) in records.iter_mut().zip(text.lines()) {
        let full: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| SweepError::Merge(format!("{}: {e}", jsonl.display())))?;
        let v = path::get(&full["report"], &fp)
            .filter(|v| value_as_f64(v).is_some())
            .ok_or_else(|| {
                SweepError::Options(format!(
                    "--y {name}: neither a metric ({}) nor a numeric report field",
                    Metrics::names().join(", ")
                ))
            })?;
        rec.metrics.insert(name.to_string(), v.clone());
    }
    Ok(())
}

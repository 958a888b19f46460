//! What a sweep writes: one JSON line per point, a CSV of coordinates and headline
//! metrics, and a manifest.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Shard, Sweep, SweepError};
use crate::report::MODEL_NOTE;
use crate::Report;

/// One line per point, in point order.
pub const JSONL_FILE: &str = "points.jsonl";
/// Coordinates and metrics, one row per point.
pub const CSV_FILE: &str = "points.csv";
/// The sweep definition, its fingerprint and the shard.
pub const MANIFEST_FILE: &str = "sweep.json";

/// One point's result: a line of `points.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointRecord {
    /// The sweep's fingerprint ([`Sweep::fingerprint`]); equal in every line of one sweep.
    pub sweep: String,
    /// The sweep seed the point seeds derive from.
    pub sweep_seed: u64,
    /// The point's index, 0-based.
    pub point: usize,
    /// Points in the whole sweep (all shards).
    pub points_total: usize,
    /// Field path -> value, in axis order.
    pub coords: Map<String, Value>,
    /// The seed the point ran with.
    pub seed: u64,
    /// Headline numbers ([`Metrics`]) plus any extra report paths asked for.
    pub metrics: Map<String, Value>,
    /// The full report (`null` where a caller dropped it to save memory).
    #[serde(default)]
    pub report: Value,
}

impl PointRecord {
    /// The record with `report.wall_time_s` removed: equal for equal runs.
    pub fn without_wall_clock(&self) -> PointRecord {
        let mut r = self.clone();
        if let Some(obj) = r.report.as_object_mut() {
            obj.remove("wall_time_s");
        }
        r
    }

    /// A numeric metric by name.
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics.get(name).and_then(value_as_f64)
    }
}

/// A number, or a boolean as 0/1.
pub(crate) fn value_as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Bool(b) => Some(*b as u8 as f64),
        _ => None,
    }
}

/// The headline numbers of a report. Counts are over the whole run; "per MSI" means
/// per generated MSI.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Handled MSIs per simulated second.
    pub handled_per_s: f64,
    /// MSIs the devices raised.
    pub msis_generated: u64,
    /// MSIs whose handler ran.
    pub msis_handled: u64,
    /// MSIs still on their way at the end.
    pub msis_pending: u64,
    /// Dropped MSIs, all reasons together.
    pub msis_dropped: u64,
    /// MSIs that found their vector already pending and merged with it.
    pub msis_merged: u64,
    /// generated == handled + pending + dropped.
    pub msis_balanced: bool,
    /// Interrupt entries on all CPUs.
    pub interrupts_taken: u64,
    /// Interrupt entries per MSI.
    pub interrupts_per_msi: f64,
    /// Posted-interrupt notifications the IOMMU sent.
    pub notifications_sent: u64,
    /// Posts that set PIR without a notification.
    pub notifications_suppressed: u64,
    /// Notifications per MSI.
    pub notifications_per_msi: f64,
    /// Median latency from an MSI being raised to its handler starting.
    pub latency_p50_ns: f64,
    /// 99th percentile of that latency.
    pub latency_p99_ns: f64,
    /// Mean of that latency.
    pub latency_mean_ns: f64,
    /// Mean over CPUs of the busy fraction.
    pub cpu_busy_frac_mean: f64,
    /// Events the engine handled.
    pub events: u64,
}

impl Metrics {
    /// The metrics of a report.
    pub fn from_report(r: &Report) -> Metrics {
        let generated = r.msis.generated.max(1) as f64;
        let busy = if r.cpu.is_empty() {
            0.0
        } else {
            r.cpu.iter().map(|c| c.busy_frac).sum::<f64>() / r.cpu.len() as f64
        };
        Metrics {
            handled_per_s: r.handled_per_s,
            msis_generated: r.msis.generated,
            msis_handled: r.msis.handled,
            msis_pending: r.msis.pending,
            msis_dropped: r.msis.dropped.values().sum(),
            msis_merged: r.msis.merged,
            msis_balanced: r.msis.balanced,
            interrupts_taken: r.interrupts_taken,
            interrupts_per_msi: r.interrupts_taken as f64 / generated,
            notifications_sent: r.notifications.sent,
            notifications_suppressed: r.notifications.suppressed,
            notifications_per_msi: r.notifications.sent as f64 / generated,
            latency_p50_ns: r.latency_ns.p50,
            latency_p99_ns: r.latency_ns.p99,
            latency_mean_ns: r.latency_ns.mean,
            cpu_busy_frac_mean: busy,
            events: r.events,
        }
    }

    /// The metric names, in column order.
    pub fn names() -> Vec<String> {
        Metrics::default().to_map().keys().cloned().collect()
    }

    /// As a JSON object, in field order.
    pub fn to_map(&self) -> Map<String, Value> {
        match serde_json::to_value(self).expect("metrics serialize") {
            Value::Object(m) => m,
            _ => unreachable!("a struct serializes to an object"),
        }
    }
}

/// The manifest written next to the points.
pub(crate) fn manifest(sweep: &Sweep, shard: Shard, shard_points: usize) -> Value {
    serde_json::json!({
        "name": sweep.name,
        "fingerprint": sweep.fingerprint(),
        "seed": sweep.seed,
        "seeds": sweep.seeds.as_str(),
        "points_total": sweep.len(),
        "shard": shard.to_string(),
        "shard_points": shard_points,
        "axes": sweep.axes_json(),
        "base": sweep.base_tree(),
        "note": MODEL_NOTE,
    })
}

/// The CSV header for records shaped like `r`.
pub(crate) fn csv_header(r: &PointRecord) -> String {
    let mut cols = vec!["point".to_string(), "seed".to_string()];
    cols.extend(r.coords.keys().cloned());
    cols.extend(r.metrics.keys().cloned());
    cols.iter()
        .map(|c| csv_field(c))
        .collect::<Vec<_>>()
        .join(",")
}

/// One CSV row; wall-clock time is left out so equal runs give equal files.
pub(crate) fn csv_row(r: &PointRecord) -> String {
    let mut cells = vec![r.point.to_string(), r.seed.to_string()];
    cells.extend(r.coords.values().map(csv_value));
    cells.extend(r.metrics.values().map(csv_value));
    cells.join(",")
}

fn csv_value(v: &Value) -> String {
    match v {
        Value::String(s) => csv_field(s),
        Value::Number(_) | Value::Bool(_) => v.to_string(),
        Value::Null => String::new(),
        other => csv_field(&other.to_string()),
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Writes a file through a temporary name and a rename, so a reader never sees half of
/// it and a failed run leaves no file that looks complete.
pub(crate) struct AtomicFile {
    tmp: std::path::PathBuf,
    path: std::path::PathBuf,
    out: std::io::BufWriter<std::fs::File>,
}

impl AtomicFile {
    pub(crate) fn create(path: &Path) -> Result<AtomicFile, SweepError> {
        let tmp = path.with_extension(format!(
            "{}.tmp",
            path.extension().and_then(|e| e.to_str()).unwrap_or("")
        ));
        let file = std::fs::File::create(&tmp).map_err(|e| write_error(&tmp, e))?;
        Ok(AtomicFile {
            tmp,
            path: path.to_path_buf(),
            out: std::io::BufWriter::new(file),
        })
    }

    pub(crate) fn line(&mut self, text: &str) -> Result<(), SweepError> {
        self.out
            .write_all(text.as_bytes())
            .and_then(|_| self.out.write_all(b"\n"))
            .map_err(|e| write_error(&self.tmp, e))
    }

    pub(crate) fn commit(mut self) -> Result<(), SweepError> {
        self.out.flush().map_err(|e| write_error(&self.tmp, e))?;
        std::fs::rename(&self.tmp, &self.path).map_err(|e| write_error(&self.path, e))
    }
}

pub(crate) fn write_error(path: &Path, e: impl std::fmt::Display) -> SweepError {
    SweepError::Write {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Writes `value` as pretty JSON to `path` through a temporary file.
pub(crate) fn write_json(path: &Path, value: &Value) -> Result<(), SweepError> {
    let mut f = AtomicFile::create(path)?;
    f.line(&serde_json::to_string_pretty(value).expect("JSON serializes"))?;
    f.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_only_what_needs_it() {
        assert_eq!(
            csv_field("devices[*].arrival.rate_per_s"),
            "devices[*].arrival.rate_per_s"
        );
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
        assert_eq!(
            csv_value(&serde_json::json!({"kind": "fixed"})),
            "\"{\"\"kind\"\":\"\"fixed\"\"}\""
        );
    }

    #[test]
    fn metric_names_are_the_struct_fields_in_order() {
        // The CSV columns users' scripts read, in the order of the struct's fields.
        assert_eq!(
            Metrics::names(),
            [
                "handled_per_s",
                "msis_generated",
                "msis_handled",
                "msis_pending",
                "msis_dropped",
                "msis_merged",
                "msis_balanced",
                "interrupts_taken",
                "interrupts_per_msi",
                "notifications_sent",
                "notifications_suppressed",
                "notifications_per_msi",
                "latency_p50_ns",
                "latency_p99_ns",
                "latency_mean_ns",
                "cpu_busy_frac_mean",
                "events",
            ]
        );
    }
}

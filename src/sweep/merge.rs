//! Joining the outputs of a sweep's shards.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::output::{self, AtomicFile, PointRecord, CSV_FILE, JSONL_FILE, MANIFEST_FILE};
use super::SweepError;

/// What a merge produced.
#[derive(Clone, Debug)]
pub struct MergeSummary {
    /// Every point found, in point order, with `report` dropped (`null`).
    pub records: Vec<PointRecord>,
    /// Points in the whole sweep.
    pub points_total: usize,
    /// Points of the sweep that no input had (empty unless partial merges are allowed).
    pub missing: Vec<usize>,
}

struct Found {
    record: PointRecord,
    line: String,
    source: String,
}

/// Reads `points.jsonl` from each input (a directory written by a sweep, or a `.jsonl`
/// file), checks that every line comes from the same sweep, that no point appears
/// twice and, unless `allow_partial`, that none is missing; then writes the points in
/// order to `out` as `points.jsonl`, `points.csv` and `sweep.json`.
pub fn merge_dirs(
    inputs: &[PathBuf],
    out: &Path,
    allow_partial: bool,
) -> Result<MergeSummary, SweepError> {
    if inputs.is_empty() {
        return Err(SweepError::Merge("no inputs given".into()));
    }
    for (i, a) in inputs.iter().enumerate() {
        let same = |b: &PathBuf| match (a.canonicalize(), b.canonicalize()) {
            (Ok(x), Ok(y)) => x == y,
            _ => a == b,
        };
        if inputs[..i].iter().any(same) {
            return Err(SweepError::Merge(format!("{} is given twice", a.display())));
        }
    }
    let mut by_point: BTreeMap<usize, Found> = BTreeMap::new();
    let mut identity: Option<(String, usize, String)> = None;
    let mut manifest: Option<Value> = None;
    for input in inputs {
        let (file, manifest_path) = if input.is_dir() {
            (input.join(JSONL_FILE), Some(input.join(MANIFEST_FILE)))
        } else {
            (input.clone(), None)
        };
        let text = std::fs::read_to_string(&file).map_err(|e| SweepError::Io {
            path: file.display().to_string(),
            message: if input.is_dir() && e.kind() == std::io::ErrorKind::NotFound {
                format!("{e} (did that shard finish?)")
            } else {
                e.to_string()
            },
        })?;
        if manifest.is_none() {
            if let Some(m) = manifest_path.filter(|p| p.is_file()) {
                manifest = std::fs::read_to_string(&m)
                    .ok()
                    .and_then(|t| serde_json::from_str(&t).ok());
            }
        }
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let source = format!("{} line {}", file.display(), n + 1);
            let record: PointRecord = serde_json::from_str(line).map_err(|e| {
                SweepError::Merge(format!("{source} is not a sweep point line: {e}"))
            })?;
            match &identity {
                None => {
                    identity = Some((record.sweep.clone(), record.points_total, source.clone()))
                }
                Some((fp, total, first)) => {
                    if *fp != record.sweep || *total != record.points_total {
                        return Err(SweepError::Merge(format!(
                            "{source} is from sweep {} ({} points) but {first} is from sweep {fp} ({total} points): the inputs come from different sweep definitions (seed, base scenario or axes differ)",
                            record.sweep, record.points_total
                        )));
                    }
                }
            }
            if record.point >= record.points_total {
                return Err(SweepError::Merge(format!(
                    "{source}: point {} is past the end of a {}-point sweep",
                    record.point, record.points_total
                )));
            }
            if let Some(prev) = by_point.get(&record.point) {
                return Err(SweepError::Merge(format!(
                    "point {} is in both {} and {source}: were shards run twice or with different N?",
                    record.point, prev.source
                )));
            }
            by_point.insert(
                record.point,
                Found {
                    line: line.to_string(),
                    source,
                    record,
                },
            );
        }
    }
    let Some((fingerprint, total, _)) = identity else {
        return Err(SweepError::Merge("the inputs hold no points".into()));
    };
    if let Some(m) = &manifest {
        if m["fingerprint"].as_str().is_some_and(|f| f != fingerprint) {
            return Err(SweepError::Merge(format!(
                "the manifest says sweep {} but the points are from sweep {fingerprint}",
                m["fingerprint"]
            )));
        }
    }
    let missing: Vec<usize> = (0..total).filter(|i| !by_point.contains_key(i)).collect();
    if !missing.is_empty() && !allow_partial {
        let shown: Vec<String> = missing.iter().take(10).map(|i| i.to_string()).collect();
        return Err(SweepError::Merge(format!(
            "{} of {total} points are missing (points {}{}); merge every shard, or pass --partial",
            missing.len(),
            shown.join(", "),
            if missing.len() > 10 { ", ..." } else { "" }
        )));
    }

    std::fs::create_dir_all(out).map_err(|e| output::write_error(out, e))?;
    let mut jsonl = AtomicFile::create(&out.join(JSONL_FILE))?;
    let mut csv = AtomicFile::create(&out.join(CSV_FILE))?;
    let mut records = Vec::with_capacity(by_point.len());
    for (i, f) in by_point.into_values().enumerate() {
        jsonl.line(&f.line)?;
        if i == 0 {
            csv.line(&output::csv_header(&f.record))?;
        }
        csv.line(&output::csv_row(&f.record))?;
        let mut r = f.record;
        r.report = Value::Null;
        records.push(r);
    }
    jsonl.commit()?;
    csv.commit()?;
    let mut m = manifest.unwrap_or_else(|| {
        serde_json::json!({
            "fingerprint": fingerprint,
            "seed": records[0].sweep_seed,
            "points_total": total,
            "axes": records[0].coords.keys().collect::<Vec<_>>(),
        })
    });
    m["shard"] = Value::from("merged");
    m["shard_points"] = Value::from(records.len());
    m["merged_from"] = Value::from(
        inputs
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>(),
    );
    m["missing_points"] = Value::from(missing.len());
    output::write_json(&out.join(MANIFEST_FILE), &m)?;
    Ok(MergeSummary {
        records,
        points_total: total,
        missing,
    })
}

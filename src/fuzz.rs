//! Hostile inputs for the three readers a user feeds files to: scenario TOML, the CSV
//! arrival traces, and the `points.jsonl` shards `irqsim merge` joins.
//!
//! Each `*_case` function takes raw bytes, as a fuzzer produces them, and runs them
//! through the same path the CLI does: parse, validate and, for a valid scenario, a
//! run bounded by [`CASE_SIM_TIME_US`] of simulated time and [`CASE_MAX_EVENTS`]
//! events. Errors are outcomes, not failures: what must never happen is a panic, an
//! unbalanced MSI ledger, or a case that does not finish. `tests/fuzz.rs` drives these
//! with proptest (with its own memory and time bounds) and `fuzz/` with cargo-fuzz.
//!
//! The mutators turn a valid document into a hostile one from a stream of choices,
//! so that proptest and libFuzzer explore the same neighbourhood: [`mutate_toml`]
//! changes one field at a time (a value of another type, an extreme number, a
//! deleted key, an unknown key, a duplicated array element), [`mutate_bytes`] edits
//! the text itself.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sim_core::{Duration, SimTime};

use crate::system::{Scenario, System};

/// Simulated time a valid fuzz scenario runs for at most, microseconds.
pub const CASE_SIM_TIME_US: f64 = 200.0;
/// Events a valid fuzz scenario handles at most.
pub const CASE_MAX_EVENTS: u64 = 2_000_000;

/// What one case did.
#[derive(Clone, Debug, PartialEq)]
pub enum CaseOutcome {
    /// The input was refused with a typed error; its message.
    Rejected(String),
    /// A scenario ran within the bounds.
    Ran {
        /// Events handled.
        events: u64,
        /// MSIs raised.
        msis_generated: u64,
        /// The report's MSI balance held: handled + pending + dropped = generated.
        balanced: bool,
    },
    /// A trace or a merge input was accepted.
    Accepted {
        /// Timestamps in the trace, or points merged.
        items: usize,
    },
}

/// Parses `bytes` as a scenario, validates it and, if valid, runs it within the
/// bounds. Relative paths in it (traces) resolve against `base_dir`.
pub fn scenario_case(bytes: &[u8], base_dir: &Path) -> CaseOutcome {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return CaseOutcome::Rejected("not UTF-8".into());
    };
    let origin = base_dir.join("fuzz.toml");
    let sc = match Scenario::from_toml_str(text, &origin.display().to_string()) {
        Ok(sc) => sc,
        Err(e) => return CaseOutcome::Rejected(e.to_string()),
    };
    let mut sys = match System::new(&sc) {
        Ok(s) => s,
        Err(e) => return CaseOutcome::Rejected(e.to_string()),
    };
    let horizon = sc.duration_us.min(CASE_SIM_TIME_US);
    let limit = SimTime::ZERO + Duration::from_ns_f64(horizon * 1e3);
    sys.run_until(limit, |s| s.events() >= CASE_MAX_EVENTS);
    let r = sys.report();
    CaseOutcome::Ran {
        events: sys.events(),
        msis_generated: r.msis.generated,
        balanced: r.msis.balanced,
    }
}

/// Parses `bytes` as a CSV arrival trace (both with and without rebasing).
pub fn trace_case(bytes: &[u8]) -> CaseOutcome {
    let file = Path::new("fuzz.csv");
    let mut items = 0;
    for rebase in [false, true] {
        match devices::trace::TraceArrival::read(file, bytes, rebase) {
            Ok(t) => items = t.len(),
            Err(e) => return CaseOutcome::Rejected(e.to_string()),
        }
    }
    CaseOutcome::Accepted { items }
}

static MERGE_CASE: AtomicU64 = AtomicU64::new(0);

/// Writes each of `shards` as the `points.jsonl` of its own directory under a fresh
/// directory in `scratch`, merges them as `irqsim merge` does (partial merges
/// allowed, so that a merge of valid points is accepted), and removes what it wrote.
pub fn merge_case(shards: &[&[u8]], scratch: &Path) -> CaseOutcome {
    let n = MERGE_CASE.fetch_add(1, Ordering::Relaxed);
    let root = scratch.join(format!("irqsim-fuzz-merge-{}-{n}", std::process::id()));
    let outcome = merge_in(shards, &root);
    let _ = std::fs::remove_dir_all(&root);
    outcome
}

fn merge_in(shards: &[&[u8]], root: &Path) -> CaseOutcome {
    let mut inputs: Vec<PathBuf> = Vec::new();
    for (i, bytes) in shards.iter().enumerate() {
        let dir = root.join(format!("shard{i}"));
        if let Err(e) = std::fs::create_dir_all(&dir)
            .and_then(|_| std::fs::write(dir.join(crate::sweep::JSONL_FILE), bytes))
        {
            return CaseOutcome::Rejected(format!("scratch directory: {e}"));
        }
        inputs.push(dir);
    }
    match crate::sweep::merge_dirs(&inputs, &root.join("merged"), true) {
        Ok(m) => CaseOutcome::Accepted {
            items: m.records.len(),
        },
        Err(e) => CaseOutcome::Rejected(e.to_string()),
    }
}

/// A stream of choices: the mutators' only source of randomness.
struct Choices<'a> {
    words: &'a [u64],
    at: usize,
}

impl Choices<'_> {
    fn next(&mut self, below: usize) -> usize {
        let w = self.words.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        if below == 0 {
            0
        } else {
            (w % below as u64) as usize
        }
    }
}

/// Integers that sit on the edges validation must catch.
const EDGE_INTEGERS: [i64; 9] = [
    0,
    -1,
    1,
    255,
    65_536,
    1 << 32,
    (1 << 53) + 1,
    i64::MAX,
    i64::MIN,
];
/// Floats likewise; TOML spells the last three `nan`, `inf`, `-inf`.
const EDGE_FLOATS: [f64; 8] = [
    0.0,
    -0.0,
    -1.0,
    1e-300,
    1e300,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
];
/// Strings: empty, a NUL, paths a trace field must not follow blindly, a long one.
fn edge_string(i: usize) -> String {
    match i {
        0 => String::new(),
        1 => "\0".into(),
        2 => "/dev/zero".into(),
        3 => "../../../../etc/passwd".into(),
        4 => "x".repeat(100_000),
        _ => "\u{202e}posted".into(),
    }
}
const EDGE_STRINGS: usize = 6;

/// Mutations [`mutate_toml`] can apply to one field.
const MUTATIONS: usize = 9;

/// Applies up to four field-level mutations, chosen by `choices`, to the TOML
/// document `doc`, and returns the new document (or `doc` unchanged if it does not
/// parse). Keys are mutated where they are, so most results are one field away from
/// a valid scenario.
pub fn mutate_toml(doc: &str, choices: &[u64]) -> String {
    let Ok(table) = doc.parse::<toml::Table>() else {
        return doc.to_string();
    };
    let mut root = toml::Value::Table(table);
    let mut c = Choices {
        words: choices,
        at: 0,
    };
    let rounds = 1 + c.next(4);
    for _ in 0..rounds {
        let mut paths = Vec::new();
        collect_paths(&root, &mut Vec::new(), &mut paths);
        if paths.is_empty() {
            break;
        }
        let path = &paths[c.next(paths.len())];
        let kind = c.next(MUTATIONS);
        let value = c.next(EDGE_INTEGERS.len().max(EDGE_FLOATS.len()).max(EDGE_STRINGS));
        apply(&mut root, path, kind, value);
    }
    toml::to_string(&root).unwrap_or_else(|_| doc.to_string())
}

#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

fn collect_paths(v: &toml::Value, at: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match v {
        toml::Value::Table(t) => {
            for (k, child) in t {
                at.push(Step::Key(k.clone()));
                out.push(at.clone());
                collect_paths(child, at, out);
                at.pop();
            }
        }
        toml::Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                at.push(Step::Index(i));
                out.push(at.clone());
                collect_paths(child, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn apply(root: &mut toml::Value, path: &[Step], kind: usize, value: usize) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    let mut parent = root;
    for step in parent_path {
        let next = match (step, parent) {
            (Step::Key(k), toml::Value::Table(t)) => t.get_mut(k),
            (Step::Index(i), toml::Value::Array(a)) => a.get_mut(*i),
            _ => None,
        };
        match next {
            Some(n) => parent = n,
            None => return,
        }
    }
    let replacement = match kind {
        0 => Some(toml::Value::Integer(
            EDGE_INTEGERS[value % EDGE_INTEGERS.len()],
        )),
        1 => Some(toml::Value::Float(EDGE_FLOATS[value % EDGE_FLOATS.len()])),
        2 => Some(toml::Value::String(edge_string(value % EDGE_STRINGS))),
        3 => Some(toml::Value::Boolean(value % 2 == 0)),
        4 => Some(toml::Value::Array(Vec::new())),
        5 => Some(toml::Value::Table(toml::Table::new())),
        _ => None,
    };
    match (last, parent) {
        (Step::Key(k), toml::Value::Table(t)) => match (kind, replacement) {
            (_, Some(r)) => {
                t.insert(k.clone(), r);
            }
            (6, _) => {
                t.remove(k);
            }
            (7, _) => {
                // An unknown key next to a known one: `deny_unknown_fields` must name it.
                let copy = t.get(k).cloned().unwrap_or(toml::Value::Integer(0));
                t.insert(format!("{k}_"), copy);
            }
            _ => scale(t.get_mut(k), value),
        },
        (Step::Index(i), toml::Value::Array(a)) => match (kind, replacement) {
            (_, Some(r)) if *i < a.len() => a[*i] = r,
            (6, _) if *i < a.len() => {
                a.remove(*i);
            }
            (7, _) if *i < a.len() => {
                // Many copies of one element: duplicate vectors, CPUs or devices.
                let copy = a[*i].clone();
                let n = [1, 7, 300][value % 3];
                a.extend(std::iter::repeat_n(copy, n));
            }
            _ => scale(a.get_mut(*i), value),
        },
        _ => {}
    }
}

/// Multiplies a number by a factor: halving or doubling mostly stays valid (and
/// runs), the others mostly leave validation's ranges.
fn scale(v: Option<&mut toml::Value>, value: usize) {
    const FACTORS: [f64; 7] = [0.5, 2.0, 0.0, -1.0, 1e-9, 1e6, 1e12];
    let f = FACTORS[value % FACTORS.len()];
    match v {
        Some(toml::Value::Integer(i)) => {
            *i = (*i as f64 * f).clamp(i64::MIN as f64, i64::MAX as f64) as i64
        }
        Some(toml::Value::Float(x)) => *x *= f,
        _ => {}
    }
}

/// Applies up to four byte-level edits, chosen by `choices`, to `doc`: a byte
/// replaced, a range deleted, bytes inserted, or a range duplicated.
pub fn mutate_bytes(doc: &[u8], choices: &[u64]) -> Vec<u8> {
    let mut out = doc.to_vec();
    let mut c = Choices {
        words: choices,
        at: 0,
    };
    let rounds = 1 + c.next(4);
    for _ in 0..rounds {
        let at = c.next(out.len() + 1);
        let len = 1 + c.next(16);
        match c.next(4) {
            0 if at < out.len() => out[at] = c.next(256) as u8,
            1 => {
                let end = (at + len).min(out.len());
                out.drain(at..end);
            }
            2 => {
                let bytes: Vec<u8> = (0..len).map(|_| c.next(256) as u8).collect();
                out.splice(at..at, bytes);
            }
            _ => {
                let end = (at + len).min(out.len());
                let copy = out[at..end].to_vec();
                out.splice(at..at, copy);
            }
        }
    }
    out
}

/// Two lines of a valid two-point sweep, as a shard's `points.jsonl` holds them: the
/// seed the merge mutators start from.
pub fn valid_points_jsonl() -> String {
    (0..2)
        .map(|point| {
            serde_json::json!({
                "sweep": "0123456789abcdef",
                "sweep_seed": 7,
                "point": point,
                "points_total": 2,
                "coords": { "devices[0].arrival.rate_per_s": 1000.0 * (point + 1) as f64 },
                "seed": 100 + point,
                "metrics": { "latency_p50_ns": 1200.5, "msis_handled": 10 },
                "report": null,
            })
            .to_string()
                + "\n"
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_scenario_runs_within_the_bounds_and_balances() {
        let doc = crate::scenarios::embedded("default").unwrap();
        match scenario_case(doc.as_bytes(), Path::new(".")) {
            CaseOutcome::Ran {
                events,
                msis_generated,
                balanced,
            } => {
                assert!(balanced);
                assert!(msis_generated > 0 && events > msis_generated);
                assert!(events <= CASE_MAX_EVENTS + 1);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_mutated_field_is_refused_by_name() {
        let doc = "duration_us = 100.0\n[cpus]\ncount = 2\n";
        // Choices: one round; the path `cpus.count` (second of cpus, cpus.count,
        // duration_us: keys are sorted); an integer; -1.
        let bad = mutate_toml(doc, &[0, 1, 0, 1]);
        assert!(bad.contains("count = -1"), "{bad}");
        match scenario_case(bad.as_bytes(), Path::new(".")) {
            CaseOutcome::Rejected(msg) => assert!(msg.contains("cpus.count"), "{msg}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn byte_edits_stay_in_bounds_and_change_the_text() {
        let doc = b"abcdef";
        for seed in 0..200u64 {
            let words: Vec<u64> = (0..20)
                .map(|i| seed.wrapping_mul(0x9e37_79b9) ^ i)
                .collect();
            let out = mutate_bytes(doc, &words);
            assert!(out.len() <= doc.len() + 4 * 16);
        }
        assert_ne!(mutate_bytes(doc, &[0, 2, 0, 1]), doc.to_vec());
    }

    #[test]
    fn the_valid_points_merge_and_a_bad_line_is_named() {
        let scratch = std::env::temp_dir();
        let good = valid_points_jsonl();
        assert_eq!(
            merge_case(&[good.as_bytes()], &scratch),
            CaseOutcome::Accepted { items: 2 }
        );
        match merge_case(&[b"{\"sweep\": 1}\n"], &scratch) {
            CaseOutcome::Rejected(msg) => assert!(msg.contains("line 1"), "{msg}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_trace_is_read_or_refused_with_its_line() {
        assert_eq!(
            trace_case(b"1000\n1500\n"),
            CaseOutcome::Accepted { items: 2 }
        );
        match trace_case(b"1000\nnot a time\n") {
            CaseOutcome::Rejected(msg) => assert!(msg.contains("fuzz.csv:2"), "{msg}"),
            other => panic!("{other:?}"),
        }
    }
}

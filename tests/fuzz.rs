//! Fuzzing the readers of user files with proptest: scenario TOML (valid documents
//! mutated field by field and byte by byte, and raw bytes), CSV arrival traces, and
//! `irqsim merge` shards. Each case must not panic, must finish within
//! [`CASE_WALL_BOUND`], and must allocate at most [`CASE_MEMORY_BOUND`] at its peak
//! (measured by the counting allocator below). A failing case is printed whole.
//!
//! `IRQSIM_FUZZ_CASES=N` sets the cases per input kind (default [`DEFAULT_CASES`]);
//! see the README for longer campaigns and the cargo-fuzz targets.

use std::alloc::{GlobalAlloc, Layout, System as SystemAlloc};
use std::cell::RefCell;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use irqsim::fuzz::{
    merge_case, mutate_bytes, mutate_toml, scenario_case, trace_case, valid_points_jsonl,
    CaseOutcome,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Bytes live now and the most live since the last reset.
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

struct Counting;

// SAFETY: every call forwards to the system allocator with the caller's layout; the
// counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { SystemAlloc.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { SystemAlloc.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { SystemAlloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let grow = new_size - layout.size();
                let now = LIVE.fetch_add(grow, Ordering::Relaxed) + grow;
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Peak heap a single case may add to what was live before it.
const CASE_MEMORY_BOUND: usize = 512 << 20;
/// Wall time a single case may take (a bound on hangs, not a speed measurement).
const CASE_WALL_BOUND: Duration = Duration::from_secs(30);
const DEFAULT_CASES: u32 = 2000;

fn cases() -> u32 {
    std::env::var("IRQSIM_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

/// Runs `case`, checks the time and memory bounds, and returns its outcome and the
/// heap it used at its peak.
fn bounded(
    what: &str,
    input: &[u8],
    case: impl FnOnce() -> CaseOutcome,
) -> Result<(CaseOutcome, usize), TestCaseError> {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let started = Instant::now();
    let outcome = case();
    let took = started.elapsed();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    let shown = String::from_utf8_lossy(&input[..input.len().min(4000)]).into_owned();
    prop_assert!(
        took < CASE_WALL_BOUND,
        "{what} case took {took:?}:\n{shown}"
    );
    prop_assert!(
        peak < CASE_MEMORY_BOUND,
        "{what} case peaked at {peak} bytes:\n{shown}"
    );
    if let CaseOutcome::Ran { balanced, .. } = outcome {
        prop_assert!(
            balanced,
            "{what} case left the MSI ledger unbalanced:\n{shown}"
        );
    }
    Ok((outcome, peak))
}

#[derive(Default)]
struct Tally {
    rejected: u32,
    accepted: u32,
    peak: usize,
}

impl Tally {
    fn add(&mut self, (o, peak): &(CaseOutcome, usize)) {
        match o {
            CaseOutcome::Rejected(_) => self.rejected += 1,
            _ => self.accepted += 1,
        }
        self.peak = self.peak.max(*peak);
    }
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// Scenario mutations: (seed document, field-level choices, byte-level choices or
/// none, raw bytes instead).
fn scenario_inputs() -> impl Strategy<Value = Vec<u8>> {
    let docs: Vec<&'static str> = irqsim::scenarios::EMBEDDED.iter().map(|e| e.1).collect();
    let n = docs.len();
    let words = || prop::collection::vec(any::<u64>(), 0..24);
    prop_oneof![
        6 => (0..n, words()).prop_map({
            let docs = docs.clone();
            move |(d, w)| mutate_toml(docs[d], &w).into_bytes()
        }),
        2 => (0..n, words()).prop_map({
            let docs = docs.clone();
            move |(d, w)| mutate_bytes(docs[d].as_bytes(), &w)
        }),
        1 => prop::collection::vec(any::<u8>(), 0..600),
    ]
}

fn trace_inputs() -> impl Strategy<Value = Vec<u8>> {
    let seed = b"timestamp_ns,device\n1000\n1500,nvme0\n  2000  \n\n# a comment\n2500\n".to_vec();
    let words = prop::collection::vec(any::<u64>(), 0..24);
    prop_oneof![
        3 => words.prop_map(move |w| mutate_bytes(&seed, &w)),
        1 => "[0-9eE.+ ,#\\-\n]{0,200}".prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..400),
    ]
}

fn merge_inputs() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let good = valid_points_jsonl();
    let words = prop::collection::vec(any::<u64>(), 0..24);
    prop::collection::vec(
        prop_oneof![
            3 => words.prop_map({
                let good = good.clone();
                move |w| mutate_bytes(good.as_bytes(), &w)
            }),
            1 => Just(good.clone().into_bytes()),
            1 => prop::collection::vec(any::<u8>(), 0..300),
        ],
        1..4,
    )
}

/// Runs `n` cases of `inputs` through `case` under the bounds, prints the tally, and
/// checks that some inputs were accepted and some refused (the mutators stay near
/// valid inputs without copying them).
fn campaign<S: Strategy>(
    what: &str,
    n: u32,
    inputs: S,
    input_bytes: impl Fn(&S::Value) -> Vec<u8>,
    case: impl Fn(&S::Value) -> CaseOutcome,
) {
    let tally = RefCell::new(Tally::default());
    runner(n)
        .run(&inputs, |input| {
            let r = bounded(what, &input_bytes(&input), || case(&input))?;
            tally.borrow_mut().add(&r);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let t = tally.into_inner();
    eprintln!(
        "{what}: {n} cases, {} accepted, {} refused, peak heap {} KiB",
        t.accepted,
        t.rejected,
        t.peak >> 10
    );
    assert!(
        t.accepted > 0 && t.rejected > 0,
        "{what}: accepted {} refused {}",
        t.accepted,
        t.rejected
    );
}

#[test]
fn hostile_inputs_never_panic_hang_or_blow_up() {
    let n = cases();
    let scratch = std::env::temp_dir();
    let base = Path::new(env!("CARGO_MANIFEST_DIR"));
    campaign("scenario", n, scenario_inputs(), Vec::clone, |b| {
        scenario_case(b, base)
    });
    campaign("trace", n, trace_inputs(), Vec::clone, |b| trace_case(b));
    campaign(
        "merge",
        n,
        merge_inputs(),
        |shards| shards.join(&b"\n--- next shard ---\n"[..]),
        |shards| {
            let refs: Vec<&[u8]> = shards.iter().map(|s| s.as_slice()).collect();
            merge_case(&refs, &scratch)
        },
    );
}

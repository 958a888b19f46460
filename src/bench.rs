//! `irqsim bench`: throughput of the engine alone and of whole scenarios.
//!
//! The engine benchmark is the classic "ping" model a user would write to measure any
//! discrete-event core: N entities, each with one pending event; handling an event
//! schedules that entity's next one at now + a uniform random delay in [1, 1000] ns
//! drawn from a seeded ChaCha8 stream (one draw per event). The same work is also run
//! on a plain `BinaryHeap` loop, with the same draws, so the two compare in one run.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use sim_core::{Duration, SimTime};

use crate::engine::{EventQueue, Priority};
use crate::system::event_mix::{EventKind, EventMix};
use crate::{Scenario, System};

/// How the binary that took a measurement was built: figures from a build with debug
/// assertions, or from a profile-guided one, are not comparable with a plain release
/// build's, so every benchmark result says which it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BuildInfo {
    /// Debug assertions compiled in (the `checked` and dev profiles): the MESI
    /// invariant runs after every line access, so such a build is slower than release.
    pub debug_assertions: bool,
    /// The training set of `scripts/pgo-build.sh` ("all" or "bench") when this binary
    /// is its profile-guided build; `None` for a plain build.
    pub profile_guided: Option<&'static str>,
}

impl BuildInfo {
    /// The build of the running code. `scripts/pgo-build.sh` sets
    /// `IRQSIM_PGO_TRAINING` for its optimised build; cargo tracks the variable, so a
    /// later plain build in the same target directory drops the mark.
    pub const fn current() -> Self {
        BuildInfo {
            debug_assertions: cfg!(debug_assertions),
            profile_guided: option_env!("IRQSIM_PGO_TRAINING"),
        }
    }
}

/// One line for the text output.
impl std::fmt::Display for BuildInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.debug_assertions {
            "debug assertions on (slower than a release build)"
        } else {
            "release"
        })?;
        match self.profile_guided {
            Some(training) => write!(
                f,
                ", profile-guided (scripts/pgo-build.sh, TRAIN={training})"
            ),
            None => Ok(()),
        }
    }
}

/// One engine-benchmark measurement.
#[derive(Clone, Debug, Serialize)]
pub struct EngineBench {
    /// "irqsim" (the engine's queue) or "binary-heap" (a plain loop).
    pub engine: &'static str,
    /// Entities, each with one event pending at all times (the queue's size).
    pub pending: u64,
    /// Events handled in the timed loop.
    pub events: u64,
    /// Wall-clock time of the timed loop, s.
    pub seconds: f64,
    /// Events handled per wall-clock second.
    pub events_per_sec: f64,
    /// Wall-clock ns per event handled.
    pub ns_per_event: f64,
    /// Simulated time reached (identical for both engines: same draws, same order).
    pub final_time_ps: u64,
    /// The build that measured it.
    pub build: BuildInfo,
}

impl EngineBench {
    /// A measurement of `events` handled in `seconds` with `pending` events queued,
    /// reaching simulated time `end` (ps), by this build. Public so that a harness
    /// timing another engine (`compare/nexosim-ping`) reports in the same form.
    pub fn new(engine: &'static str, pending: u64, events: u64, seconds: f64, end: u64) -> Self {
        EngineBench {
            engine,
            pending,
            events,
            seconds,
            events_per_sec: events as f64 / seconds.max(1e-12),
            ns_per_event: seconds * 1e9 / events.max(1) as f64,
            final_time_ps: end,
            build: BuildInfo::current(),
        }
    }
}

fn delay(rng: &mut ChaCha8Rng) -> u64 {
    rng.gen_range(1..=1000u64) * 1000
}

/// Most pending events `irqsim bench engine` accepts: 1e7 entries, a few hundred MB
/// across the two queues, well within a small machine.
pub const MAX_PENDING: u64 = 10_000_000;

/// The ping model on irqsim's event queue.
pub fn ping_irqsim(pending: u64, events: u64, seed: u64) -> EngineBench {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut q = EventQueue::with_capacity(pending as usize);
    for e in 0..pending {
        q.schedule(SimTime(delay(&mut rng)), Priority::CPU, e);
    }
    let start = Instant::now();
    for _ in 0..events {
        let (_, e) = q.pop().expect("every handled event schedules one");
        q.schedule_in(Duration(delay(&mut rng)), Priority::CPU, e);
    }
    let secs = start.elapsed().as_secs_f64();
    EngineBench::new("irqsim", pending, events, secs, q.now().0)
}

/// The same model on a plain `BinaryHeap` keyed by (time, insertion sequence).
pub fn ping_binary_heap(pending: u64, events: u64, seed: u64) -> EngineBench {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut heap = BinaryHeap::with_capacity(pending as usize);
    let mut seq = 0u64;
    for e in 0..pending {
        heap.push(Reverse((delay(&mut rng), seq, e)));
        seq += 1;
    }
    let start = Instant::now();
    let mut now = 0;
    for _ in 0..events {
        let Reverse((t, _, e)) = heap.pop().expect("every handled event schedules one");
        now = t;
        heap.push(Reverse((t + delay(&mut rng), seq, e)));
        seq += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    EngineBench::new("binary-heap", pending, events, secs, now)
}

/// One whole-scenario measurement. With several rounds, every figure but the lists of
/// rounds is that of the median round (see [`bench_scenario_rounds`]).
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioBench {
    /// The scenario's name.
    pub scenario: String,
    /// Simulated time run, us.
    pub sim_time_us: f64,
    /// Wall-clock time of building the system from the scenario (validation, affinity,
    /// tables), s; not part of `wall_seconds`.
    pub build_seconds: f64,
    /// Wall-clock time of the run (building excluded), s.
    pub wall_seconds: f64,
    /// Events the engine handled.
    pub events: u64,
    /// MSIs raised.
    pub msis: u64,
    /// Events handled per wall-clock second.
    pub events_per_sec: f64,
    /// Simulated MSIs per wall-clock second.
    pub msis_per_sec: f64,
    /// Events handled per MSI raised.
    pub events_per_msi: f64,
    /// Peak resident memory of the process (VmHWM), bytes; 0 where /proc is missing.
    pub peak_rss_bytes: u64,
    /// Wall-clock ns per event of the timed run.
    pub ns_per_event: f64,
    /// The engine's pending events, averaged over every event of an untimed run of the
    /// same scenario (sampled before each event is handled).
    pub mean_pending: f64,
    /// The plain `BinaryHeap` ping loop at `mean_pending` pending events, run in the same
    /// process right after the scenario: the floor a whole model's event could cost.
    /// `None` when the comparison was not asked for.
    pub heap: Option<EngineBench>,
    /// `ns_per_event` over the heap loop's ns per event.
    pub ratio_to_heap: Option<f64>,
    /// The events of the untimed run (the one that measures `mean_pending`) by kind,
    /// the most frequent first: where the run's time goes. `None` when the heap
    /// comparison was not asked for. Diagnostic names of this version's event loop.
    pub event_mix: Option<Vec<EventMixRow>>,
    /// Rounds run: each builds and runs the scenario, then runs the heap loop if asked.
    pub rounds: Vec<BenchRound>,
    /// Least and greatest `ns_per_event` over the rounds.
    pub ns_per_event_range: [f64; 2],
    /// Least and greatest `ratio_to_heap` over the rounds.
    pub ratio_to_heap_range: Option<[f64; 2]>,
    /// The build that measured it.
    pub build: BuildInfo,
    /// When the median round ran for less than [`STEADY_ROUND_SECONDS`] of wall clock:
    /// a simulated duration, us, that would make a round take about
    /// [`SUGGESTED_ROUND_SECONDS`] at the speed measured (`--duration-us`). `None` when
    /// the rounds were long enough.
    pub suggested_duration_us: Option<f64>,
}

/// A round shorter than this, in wall-clock seconds, is as much the host's timer, its
/// page faults and its caches warming up as the model's steady state, and one preempted
/// millisecond moves it by a large share: the bench then suggests a longer duration.
pub const STEADY_ROUND_SECONDS: f64 = 0.1;

/// The wall-clock length of a round, s, that a suggested duration aims at.
pub const SUGGESTED_ROUND_SECONDS: f64 = 0.25;

/// The simulated duration, us, that would make a run of `sim_time_us` that took
/// `wall_seconds` take [`SUGGESTED_ROUND_SECONDS`], to two significant figures and
/// within the scenario's limit; `None` when the run took [`STEADY_ROUND_SECONDS`] or
/// more, or measured nothing.
pub fn suggested_duration_us(sim_time_us: f64, wall_seconds: f64) -> Option<f64> {
    if wall_seconds >= STEADY_ROUND_SECONDS || sim_time_us <= 0.0 || wall_seconds <= 0.0 {
        return None;
    }
    let wanted = sim_time_us * SUGGESTED_ROUND_SECONDS / wall_seconds;
    // Below 10 us the step is a negative power of ten: divide by its exact inverse, so
    // that 13 steps of 0.001 print as 0.013 and not 0.013000000000000001.
    let exponent = wanted.log10().floor() as i32 - 1;
    let rounded = if exponent >= 0 {
        let step = 10f64.powi(exponent);
        (wanted / step).ceil() * step
    } else {
        let per_unit = 10f64.powi(-exponent);
        (wanted * per_unit).ceil() / per_unit
    };
    Some(rounded.min(crate::system::scenario::MAX_DURATION_US))
}

/// The figures of one round of [`bench_scenario_rounds`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct BenchRound {
    /// Wall-clock time of the scenario's run, s.
    pub wall_seconds: f64,
    /// Wall-clock ns per event of the scenario's run.
    pub ns_per_event: f64,
    /// The heap loop's ns per event, when it ran.
    pub heap_ns_per_event: Option<f64>,
    /// `ns_per_event` over `heap_ns_per_event`.
    pub ratio_to_heap: Option<f64>,
}

/// Events the heap comparison handles: as many as the scenario did, within bounds that
/// keep it steady (at least a million) and short (at most twenty million).
const HEAP_EVENTS_MIN: u64 = 1_000_000;
const HEAP_EVENTS_MAX: u64 = 20_000_000;

/// The mean number of pending events over a run of `scenario`, sampled as each event is
/// about to be handled. This is its own run, so the timed one carries no sampling.
pub fn mean_pending(scenario: &Scenario) -> Result<f64, crate::ScenarioError> {
    Ok(untimed_pass(scenario)?.0)
}

/// One untimed run of `scenario`, stepped event by event: the mean number of pending
/// events (sampled as each event is about to be handled, only where an event is due
/// within the run, i.e. where a pop happens), the kinds of the events handled, and the
/// MSIs raised.
fn untimed_pass(scenario: &Scenario) -> Result<(f64, EventMix, u64), crate::ScenarioError> {
    let mut sys = System::new(scenario)?;
    let end = sys.end_of_scenario();
    let (mut sum, mut samples) = (0u128, 0u64);
    let mut mix = EventMix::default();
    loop {
        // The queue's length just before the pop, counted only when a pop happens.
        let pending = sys.pending_events();
        let Some(kind) = sys.step_until(end) else {
            break;
        };
        sum += pending as u128;
        samples += 1;
        mix.add(kind);
    }
    let mean = if samples == 0 {
        0.0
    } else {
        sum as f64 / samples as f64
    };
    Ok((mean, mix, sys.msis_generated()))
}

/// One kind of event in a [`ScenarioBench`]'s event mix.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct EventMixRow {
    /// The event and, for a CPU step, what the CPU was doing.
    #[serde(flatten)]
    pub kind: EventKind,
    /// Events of this kind in the untimed run.
    pub count: u64,
    /// `count` over the MSIs raised in that run.
    pub per_msi: f64,
    /// `count` over all events of that run.
    pub share: f64,
}

/// Runs `scenario` once and measures it; with `against_heap`, also measures its mean
/// pending count (a second, untimed run) and the plain heap loop at that count.
pub fn bench_scenario(
    scenario: &Scenario,
    against_heap: bool,
) -> Result<ScenarioBench, crate::ScenarioError> {
    bench_scenario_rounds(scenario, against_heap, 1)
}

/// One timed run of the scenario, built afresh.
struct ModelRun {
    build_seconds: f64,
    wall_seconds: f64,
    events: u64,
    msis: u64,
    sim_time_us: f64,
}

fn run_model(scenario: &Scenario) -> Result<ModelRun, crate::ScenarioError> {
    let building = Instant::now();
    let mut sys = System::new(scenario)?;
    let build_seconds = building.elapsed().as_secs_f64();
    let start = Instant::now();
    sys.run_to_end();
    let wall_seconds = start.elapsed().as_secs_f64();
    Ok(ModelRun {
        build_seconds,
        wall_seconds,
        events: sys.events(),
        msis: sys.msis_generated(),
        sim_time_us: sys.now().as_ns_f64() / 1e3,
    })
}

/// Like [`bench_scenario`], in `rounds` rounds (at least one): each builds and runs the
/// scenario, then, with `against_heap`, runs the heap loop at once, so that the two
/// figures of a round meet the host in the same mood. The mean pending count is measured
/// once, as the runs are identical. The figures reported are those of the median round,
/// ranked by its ratio to the heap loop (by its ns per event without the loop); with an
/// even count, the lower of the two middle rounds. On a shared host whose speed drifts
/// from one second to the next, the ratio within a round is steadier than either time.
pub fn bench_scenario_rounds(
    scenario: &Scenario,
    against_heap: bool,
    rounds: u32,
) -> Result<ScenarioBench, crate::ScenarioError> {
    let rounds = rounds.max(1);
    let first = run_model(scenario)?;
    // Taken before any heap loop runs: the scenario's own high-water mark.
    let peak_rss_bytes = peak_rss_bytes();
    let (heap_setup, event_mix) = if against_heap {
        let (mean, mix, msis) = untimed_pass(scenario)?;
        let pending = (mean.round() as u64).max(1);
        let heap_events = first.events.clamp(HEAP_EVENTS_MIN, HEAP_EVENTS_MAX);
        let total = mix.total().max(1) as f64;
        let msis = msis.max(1) as f64;
        let rows = mix
            .entries()
            .into_iter()
            .map(|(kind, count)| EventMixRow {
                kind,
                count,
                per_msi: count as f64 / msis,
                share: count as f64 / total,
            })
            .collect();
        (Some((mean, pending, heap_events)), Some(rows))
    } else {
        (None, None)
    };
    let mut runs = Vec::with_capacity(rounds as usize);
    // Lazily, so each round's model run is followed at once by its heap loop.
    for run in std::iter::once(Ok(first)).chain((1..rounds).map(|_| run_model(scenario))) {
        let run = run?;
        let heap =
            heap_setup.map(|(_, pending, events)| ping_binary_heap(pending, events, scenario.seed));
        runs.push((run, heap));
    }
    let figures: Vec<BenchRound> = runs
        .iter()
        .map(|(run, heap)| {
            let ns_per_event = run.wall_seconds * 1e9 / run.events.max(1) as f64;
            BenchRound {
                wall_seconds: run.wall_seconds,
                ns_per_event,
                heap_ns_per_event: heap.as_ref().map(|h| h.ns_per_event),
                ratio_to_heap: heap
                    .as_ref()
                    .map(|h| ns_per_event / h.ns_per_event.max(1e-12)),
            }
        })
        .collect();
    let rank = |r: &BenchRound| r.ratio_to_heap.unwrap_or(r.ns_per_event);
    let mut order: Vec<usize> = (0..figures.len()).collect();
    order.sort_by(|&a, &b| rank(&figures[a]).total_cmp(&rank(&figures[b])));
    let median = order[(order.len() - 1) / 2];
    let range = |xs: &mut dyn Iterator<Item = f64>| {
        xs.fold([f64::INFINITY, f64::NEG_INFINITY], |[lo, hi], x| {
            [lo.min(x), hi.max(x)]
        })
    };
    let ns_per_event_range = range(&mut figures.iter().map(|r| r.ns_per_event));
    let ratio_to_heap_range =
        against_heap.then(|| range(&mut figures.iter().filter_map(|r| r.ratio_to_heap)));
    let (run, heap) = runs.swap_remove(median);
    let secs = run.wall_seconds;
    Ok(ScenarioBench {
        scenario: scenario.name.clone(),
        sim_time_us: run.sim_time_us,
        build_seconds: run.build_seconds,
        wall_seconds: secs,
        events: run.events,
        msis: run.msis,
        events_per_sec: run.events as f64 / secs.max(1e-12),
        msis_per_sec: run.msis as f64 / secs.max(1e-12),
        events_per_msi: run.events as f64 / run.msis.max(1) as f64,
        peak_rss_bytes,
        ns_per_event: figures[median].ns_per_event,
        mean_pending: heap_setup.map_or(0.0, |(mean, ..)| mean),
        heap,
        ratio_to_heap: figures[median].ratio_to_heap,
        event_mix,
        rounds: figures,
        ns_per_event_range,
        ratio_to_heap_range,
        build: BuildInfo::current(),
        suggested_duration_us: suggested_duration_us(run.sim_time_us, secs),
    })
}

/// The process's peak resident set (Linux VmHWM).
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded default scenario, shortened to `duration_us`.
    fn default_for_us(duration_us: f64) -> Scenario {
        let mut sc =
            Scenario::from_toml_str(crate::scenarios::embedded("default").unwrap(), "d").unwrap();
        sc.duration_us = duration_us;
        sc
    }

    #[test]
    fn both_engines_reach_the_same_simulated_time() {
        let a = ping_irqsim(100, 10_000, 3);
        let b = ping_binary_heap(100, 10_000, 3);
        assert_eq!(a.final_time_ps, b.final_time_ps);
        assert_eq!(a.events, 10_000);
    }

    #[test]
    fn mean_pending_is_the_queue_length_seen_by_each_event() {
        let sc = default_for_us(300.0);
        let mean = mean_pending(&sc).unwrap();
        // Stepped by hand: the length just before each event of the run is popped.
        let mut sys = System::new(&sc).unwrap();
        let mut lengths = Vec::new();
        while sys
            .next_event_time()
            .is_some_and(|t| t <= sys.end_of_scenario())
        {
            lengths.push(sys.pending_events() as f64);
            sys.step();
        }
        let by_hand = lengths.iter().sum::<f64>() / lengths.len() as f64;
        assert!(lengths.len() > 1000, "{} events", lengths.len());
        assert_eq!(mean, by_hand);
        // Something is always due next while the run lasts.
        assert!(mean >= 1.0, "mean pending {mean}");
    }

    #[test]
    fn the_heap_comparison_runs_at_the_measured_pending_count() {
        let sc = default_for_us(200.0);
        let b = bench_scenario(&sc, true).unwrap();
        let heap = b.heap.expect("asked for");
        assert_eq!(heap.pending, (b.mean_pending.round() as u64).max(1));
        assert_eq!(
            heap.events,
            b.events.clamp(HEAP_EVENTS_MIN, HEAP_EVENTS_MAX)
        );
        assert!(b.ratio_to_heap.unwrap() > 0.0);
        let without = bench_scenario(&sc, false).unwrap();
        assert!(without.heap.is_none() && without.event_mix.is_none());
    }

    #[test]
    fn the_event_mix_accounts_for_every_event_of_the_run() {
        let mut sc =
            Scenario::from_toml_str(crate::scenarios::embedded("nvme-posted").unwrap(), "n")
                .unwrap();
        sc.duration_us = 500.0;
        let b = bench_scenario(&sc, true).unwrap();
        let mix = b.event_mix.expect("measured with the heap comparison");
        let counted: u64 = mix.iter().map(|r| r.count).sum();
        assert_eq!(
            counted, b.events,
            "the untimed run is the timed one, event for event"
        );
        assert!(mix.windows(2).all(|w| w[0].count >= w[1].count));
        let share: f64 = mix.iter().map(|r| r.share).sum();
        assert!((share - 1.0).abs() < 1e-9, "shares sum to {share}");
        let per_msi: f64 = mix.iter().map(|r| r.per_msi).sum();
        assert!((per_msi - b.events_per_msi).abs() < 1e-9);
        assert!(mix
            .iter()
            .any(|r| r.kind.event == "CpuStep" && r.kind.activity == Some("LoadPir")));
    }

    #[test]
    fn several_rounds_report_the_median_round_and_the_range() {
        let sc = default_for_us(100.0);
        let b = bench_scenario_rounds(&sc, true, 3).unwrap();
        assert_eq!(b.rounds.len(), 3);
        let mut ratios: Vec<f64> = b.rounds.iter().map(|r| r.ratio_to_heap.unwrap()).collect();
        ratios.sort_by(f64::total_cmp);
        assert_eq!(b.ratio_to_heap, Some(ratios[1]));
        assert_eq!(b.ratio_to_heap_range, Some([ratios[0], ratios[2]]));
        // Every top-level figure comes from that one round, so they agree with each other.
        let chosen = b
            .rounds
            .iter()
            .find(|r| r.ratio_to_heap == b.ratio_to_heap)
            .unwrap();
        assert_eq!(b.ns_per_event, chosen.ns_per_event);
        assert_eq!(b.wall_seconds, chosen.wall_seconds);
        assert_eq!(
            b.heap.as_ref().map(|h| h.ns_per_event),
            chosen.heap_ns_per_event
        );
        assert_eq!(b.events_per_sec, b.events as f64 / b.wall_seconds);

        // Without the loop, rounds rank by their own time; of four, the lower middle.
        let alone = bench_scenario_rounds(&sc, false, 4).unwrap();
        let mut times: Vec<f64> = alone.rounds.iter().map(|r| r.ns_per_event).collect();
        times.sort_by(f64::total_cmp);
        assert_eq!(alone.ns_per_event, times[1]);
        assert_eq!(alone.ns_per_event_range, [times[0], times[3]]);
        assert!(alone.heap.is_none() && alone.ratio_to_heap_range.is_none());
        assert!(alone.rounds.iter().all(|r| r.heap_ns_per_event.is_none()));
        // Every round ran the same simulation.
        assert_eq!(alone.events, b.events);
    }

    #[test]
    fn a_short_round_gets_a_duration_that_would_take_the_suggested_time() {
        // 2 ms simulated in 3 ms of wall clock: 0.25 s would take 166,667 us, shown as
        // 170,000 (two significant figures, rounded up so the round is not shorter).
        assert_eq!(suggested_duration_us(2000.0, 0.003), Some(170_000.0));
        // Long enough already, at the threshold or past it.
        assert_eq!(suggested_duration_us(2000.0, STEADY_ROUND_SECONDS), None);
        assert_eq!(suggested_duration_us(10_000.0, 0.99), None);
        // Nothing measured: no suggestion rather than an infinite one.
        assert_eq!(suggested_duration_us(2000.0, 0.0), None);
        assert_eq!(suggested_duration_us(0.0, 0.003), None);
        // Never past what a scenario may ask for.
        assert_eq!(
            suggested_duration_us(3.0e9, 0.001),
            Some(crate::system::scenario::MAX_DURATION_US)
        );
        // A scenario so heavy that 0.25 s covers a few microseconds gets a short, clean
        // figure, rounded up: 1 us in 99.9 ms -> 2.6 us (from 2.503); 0.5 us in 96 ms ->
        // 1.4 us (from 1.302).
        assert_eq!(suggested_duration_us(1.0, 0.0999), Some(2.6));
        assert_eq!(suggested_duration_us(0.5, 0.096), Some(1.4));
        assert_eq!(
            suggested_duration_us(0.05, 0.096).map(|us| us.to_string()),
            Some("0.14".into())
        );
        // The suggestion, run at the measured speed, takes at least the target.
        for (sim, wall) in [(1.0, 1e-6), (37.0, 0.0123), (5e5, 0.0999)] {
            let us = suggested_duration_us(sim, wall).unwrap();
            let wall_then = us / sim * wall;
            assert!(
                (SUGGESTED_ROUND_SECONDS..SUGGESTED_ROUND_SECONDS * 1.11).contains(&wall_then),
                "{sim} us in {wall} s -> {us} us, {wall_then} s"
            );
        }
    }

    #[test]
    fn the_bench_reports_its_suggestion_from_the_median_round() {
        // Whether a suggestion is due depends on the host's speed; which round it comes
        // from does not: the median's, like every other top-level figure.
        let sc = default_for_us(100.0);
        let b = bench_scenario_rounds(&sc, false, 3).unwrap();
        assert_eq!(
            b.suggested_duration_us,
            suggested_duration_us(b.sim_time_us, b.wall_seconds)
        );
        assert_eq!(b.sim_time_us, 100.0);
    }
}

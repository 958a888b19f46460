//! The search's driver: breadth-first, a batch of queued states at a time, in three
//! phases. Worker threads expand the batch's states, thread `t` taking states `t`,
//! `t + threads`, ... (decode, enabled steps, each step, the sleep sets, the
//! fingerprint and the encoding of each new state). Then the visited set admits the
//! new states, its shards cut into one range per thread. Then the calling thread
//! walks the batch in queue order: counts, nodes, and the queue entries of the states
//! admitted.
//!
//! The result is the sequential search's, whatever the number of threads: a state's
//! expansion reads only the state and its queue entry, never the visited set; the
//! states of a batch were all queued before any of their successors, so handling the
//! batch's successors after the whole batch puts them in the queue in the order one
//! state at a time would; each shard admits its states in queue order, and a state's
//! admission depends only on its own shard; and the last walk counts and stops (at
//! the first violation, or past `max_states`) in queue order, using the invariant
//! checks each step made, as counted by the worker that made it.

use std::ops::Range;

use super::super::frontier::ByteQueue;
use super::super::pack::{unpack_all, Pack};
use super::super::por::{sleep_bit, Footprint};
use super::{
    counterexample, initial_state, Actor, Admission, ByteSink, Explorer, Fingerprint, Node,
    ShardMut, State, Visited, ROOT, VISITED_SHARDS,
};
use crate::explore::model::{quiet, Violation};
use crate::explore::{Counterexample, ExploreConfig, ExploreReport, ExploreResult};
use crate::kernel::sn::SnSoftware;
use crate::kernel::PirHandler;

/// Queued states expanded per batch, shared among the threads: enough that starting
/// them is negligible (a state takes a few microseconds), few enough that a batch's
/// successors, duplicates included, take a few megabytes. It does not depend on the
/// number of threads, so neither do the frontier's peaks in the report.
const BATCH: usize = 8192;

/// A queue entry's header: node index (or [`ROOT`]), preemptions used, depth, steps
/// asleep, steps to take (`u32::MAX`: all, a first expansion).
type Header = (u32, u32, u32, u32, u32);

/// A queued state taken for expansion: its header and where its bytes are.
struct Parent {
    header: Header,
    bytes: Range<usize>,
}

/// What expanding one state produced, step by step in the order the sequential
/// search takes them.
enum Event {
    /// A step asleep in this state: not taken.
    Slept,
    /// A step taken: who, with how many preemptions, the steps asleep after it, the
    /// invariant checks it made, and where it led.
    Step {
        actor: Actor,
        preemptions: u32,
        asleep: u32,
        checks: u64,
        outcome: Outcome,
    },
}

enum Outcome {
    /// A state (its fingerprint and encoded bytes) with no violation.
    Next {
        fingerprint: Fingerprint,
        bytes: Range<usize>,
    },
    /// The step broke an invariant, at once or at the quiescence it reached.
    Violation {
        violation: Violation,
        at_quiescence: bool,
    },
}

/// One thread's share of a batch: the events of its parents (those of its `i`-th
/// parent end at `ends[i]`), and the encoded successor states. A worker stops at its
/// first violation, so `ends` may be shorter than its list of parents.
#[derive(Default)]
struct Expanded {
    events: Vec<Event>,
    ends: Vec<usize>,
    bytes: Vec<u8>,
}

impl Expanded {
    fn clear(&mut self) {
        self.events.clear();
        self.ends.clear();
        self.bytes.clear();
    }
}

/// How states are told apart and which reductions are on.
#[derive(Clone, Copy)]
struct Mode {
    reduce: bool,
    keep_last: bool,
    sleeping: bool,
    bound: Option<u32>,
}

/// Expands `parents` (bytes in `input`) into `out`.
fn expand<'p>(
    ex: &mut Explorer<'_>,
    mode: Mode,
    parents: impl Iterator<Item = &'p Parent>,
    input: &[u8],
    out: &mut Expanded,
) {
    // Nothing reads a searched step's notes; a counterexample is replayed with them.
    let _quiet = quiet();
    let mut sink = ByteSink::default();
    let mut footprints: Vec<(u32, Footprint)> = Vec::new();
    // Every step's successor and notes, reused so that a step allocates nothing new.
    let mut scratch: Option<State> = None;
    let mut notes = Vec::new();
    for parent in parents {
        let (_, preemptions, _, asleep, to_take) = parent.header;
        let state: State =
            unpack_all(&input[parent.bytes.clone()]).expect("a queued state decodes");
        let enabled = ex.enabled(&state);
        if mode.sleeping {
            footprints.clear();
            footprints.extend(
                enabled
                    .iter()
                    .map(|&a| (sleep_bit(a), ex.footprint(&state, a))),
            );
        }
        // Steps taken from this state so far, for their later siblings' sleep sets.
        let mut taken = 0u32;
        for (i, &actor) in enabled.iter().enumerate() {
            let bit = sleep_bit(actor);
            if bit & to_take == 0 {
                continue;
            }
            if asleep & bit != 0 {
                out.events.push(Event::Slept);
                continue;
            }
            let preempts = state.last_was_handler
                && !matches!(actor, Actor::Handler | Actor::StoreBuffer)
                && state.world.run.is_some();
            let p = preemptions + u32::from(preempts);
            if mode.bound.is_some_and(|b| p > b) {
                continue;
            }
            let before = ex.checks;
            let next = scratch.get_or_insert_with(|| state.clone());
            next.assign_from(&state);
            notes.clear();
            let mut violation = ex
                .apply_into(&state, actor, next, &mut notes)
                .map(|v| (v, false));
            if violation.is_none() && ex.enabled(next).is_empty() {
                if let Err(v) = next.world.check_quiescent(&mut ex.checks) {
                    violation = Some((v, true));
                }
            }
            // Asleep after this step: what was asleep or taken here before it, and
            // commutes with it.
            let mut next_asleep = 0;
            if mode.sleeping {
                let this = footprints[i].1;
                for &(other, fp) in &footprints {
                    if (asleep | taken) & other != 0 && fp.independent(&this) {
                        next_asleep |= other;
                    }
                }
                taken |= bit;
            }
            let outcome = match violation {
                Some((violation, at_quiescence)) => Outcome::Violation {
                    violation,
                    at_quiescence,
                },
                None => {
                    let start = out.bytes.len();
                    next.pack(&mut out.bytes);
                    let fingerprint = if mode.reduce {
                        next.fingerprint(&mut sink, true, mode.keep_last)
                    } else {
                        State::fingerprint_packed(&out.bytes[start..], mode.keep_last)
                    };
                    Outcome::Next {
                        fingerprint,
                        bytes: start..out.bytes.len(),
                    }
                }
            };
            let failed = matches!(outcome, Outcome::Violation { .. });
            out.events.push(Event::Step {
                actor,
                preemptions: p,
                asleep: next_asleep,
                checks: ex.checks - before,
                outcome,
            });
            if failed {
                // The merge stops here: nothing after it is read.
                return;
            }
        }
        out.ends.push(out.events.len());
    }
}

/// One parent's events: parent `parent` of the batch was expanded into output
/// `output`, and these are its events there.
struct Span {
    parent: usize,
    output: usize,
    events: Range<usize>,
}

/// Each parent's events in queue order, parent `i` having been expanded into output
/// `i % stride`, up to the first parent whose expansion stopped at a violation.
fn spans_in_order(parents: usize, stride: usize, outputs: &[Expanded]) -> Vec<Span> {
    let mut from = vec![0usize; stride];
    let mut spans = Vec::with_capacity(parents);
    for parent in 0..parents {
        let (output, local) = (parent % stride, parent / stride);
        let out = &outputs[output];
        let end = out.ends.get(local).copied();
        let to = end.unwrap_or(out.events.len());
        spans.push(Span {
            parent,
            output,
            events: from[output]..to,
        });
        from[output] = to;
        if end.is_none() {
            // Its worker stopped here, at a violation the merge stops at.
            break;
        }
    }
    spans
}

/// Which of `parts` contiguous ranges of the visited set's shards `fp` falls in.
fn admission_part(fp: Fingerprint, parts: usize) -> usize {
    Visited::shard(fp) * parts / VISITED_SHARDS
}

/// Admits the batch's new states into `visited`, in merge order up to its first
/// violation: the shards are cut into one contiguous range per thread, and each
/// thread admits, in order, the states of its range. Returns each range's
/// admissions in that order; the merge reads them back by the same ranges. A state
/// past the point where the merge stops (`max_states`) may be admitted, and the
/// search ends there.
fn admit_batch(
    visited: &mut Visited,
    outputs: &[Expanded],
    spans: &[Span],
    threads: usize,
) -> Vec<Vec<Admission>> {
    let mut requests: Vec<(Fingerprint, u32, u32)> = Vec::new();
    'events: for span in spans {
        for event in &outputs[span.output].events[span.events.clone()] {
            if let Event::Step {
                preemptions,
                asleep,
                outcome,
                ..
            } = event
            {
                match outcome {
                    Outcome::Next { fingerprint, .. } => {
                        requests.push((*fingerprint, *preemptions, *asleep));
                    }
                    Outcome::Violation { .. } => break 'events,
                }
            }
        }
    }
    let parts = threads.clamp(1, VISITED_SHARDS);
    let mut shards = visited.shards_mut();
    let mut ranges: Vec<&mut [ShardMut<'_>]> = Vec::with_capacity(parts);
    let mut rest: &mut [ShardMut<'_>] = &mut shards;
    for part in 0..parts {
        // Shards s with s * parts / VISITED_SHARDS == part.
        let end = ((part + 1) * VISITED_SHARDS).div_ceil(parts);
        let (range, tail) = rest.split_at_mut(end - (VISITED_SHARDS - rest.len()));
        ranges.push(range);
        rest = tail;
    }
    let requests = &requests;
    let admit_range = |part: usize, range: &mut [ShardMut<'_>]| {
        let base = (part * VISITED_SHARDS).div_ceil(parts);
        requests
            .iter()
            .filter(|(fp, ..)| admission_part(*fp, parts) == part)
            .map(|&(fp, p, asleep)| range[Visited::shard(fp) - base].admit(fp, p, asleep))
            .collect::<Vec<Admission>>()
    };
    if parts == 1 || requests.len() < 64 {
        return ranges
            .into_iter()
            .enumerate()
            .map(|(part, range)| admit_range(part, range))
            .collect();
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = ranges
            .into_iter()
            .enumerate()
            .map(|(part, range)| scope.spawn(move || admit_range(part, range)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("an admitting thread does not panic"))
            .collect()
    })
}

/// How many threads a search uses: `requested`, or with 0 every core.
pub(crate) fn threads_for(requested: u32) -> usize {
    match requested {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n as usize,
    }
}

/// The breadth-first search (see the module docs).
pub(crate) fn explore(
    handler: &dyn PirHandler,
    sn_software: Option<&dyn SnSoftware>,
    config: &ExploreConfig,
) -> ExploreReport {
    let started = std::time::Instant::now();
    let threads = threads_for(config.threads);
    let mut ex = Explorer::new(handler, sn_software, config);
    let mut workers: Vec<Explorer<'_>> = (1..threads)
        .map(|_| Explorer::new(handler, sn_software, config))
        .collect();
    let initial = initial_state(sn_software, config);
    let bounded = config.preemption_bound.is_some();
    let sleeping = config.partial_order && !bounded;
    let mode = Mode {
        reduce: config.reduce,
        keep_last: bounded || (!config.reduce && !sleeping),
        sleeping,
        bound: config.preemption_bound,
    };
    let mut sink = ByteSink::default();
    let mut visited = Visited::new(bounded, sleeping);
    visited.admit(
        initial.fingerprint(&mut sink, mode.reduce, mode.keep_last),
        0,
        0,
    );
    // Distinct states as the sequential search counts them: the visited set may also
    // hold states of a batch admitted past the point where the search stopped.
    let mut distinct = visited.len();
    let mut nodes: Vec<Node> = Vec::new();
    let mut frontier = ByteQueue::new();
    let mut initial_bytes = Vec::new();
    initial.pack(&mut initial_bytes);
    frontier.push_framed(&(ROOT, 0u32, 0u32, 0u32, u32::MAX), &initial_bytes);
    let mut explored: u64 = 1;
    // Invariant checks, as each step's worker counted them, in merge order (the
    // calling thread's own explorer also counts what it expands, so not that).
    let mut checks: u64 = 0;
    let mut slept: u64 = 0;
    let mut reopened: u64 = 0;
    let mut max_depth = 0;
    let mut result = ExploreResult::Pass;
    let mut input = Vec::new();
    let mut parents: Vec<Parent> = Vec::new();
    let mut outputs: Vec<Expanded> = (0..threads).map(|_| Expanded::default()).collect();

    'search: while frontier.waiting() > 0 {
        input.clear();
        parents.clear();
        let take = frontier.waiting().min(BATCH);
        for _ in 0..take {
            let start = input.len();
            let header: Header = frontier.pop_framed(&mut input).expect("waiting");
            parents.push(Parent {
                header,
                bytes: start..input.len(),
            });
        }
        // The batch is still the search's to expand: it counts as queued.
        frontier.observe_taken(parents.len(), input.len());
        // Thread t expands parents t, t + threads, ...: neighbours in the queue cost
        // alike, so the shares are even.
        // A batch too small to share is expanded by the calling thread alone.
        let stride = if parents.len() < 2 * threads {
            1
        } else {
            threads
        };
        let strided = |t: usize| parents.iter().skip(t).step_by(stride);
        outputs.iter_mut().for_each(Expanded::clear);
        if stride == 1 {
            expand(&mut ex, mode, parents.iter(), &input, &mut outputs[0]);
        } else {
            let (own, others) = outputs.split_first_mut().expect("one output per thread");
            let input = &input;
            std::thread::scope(|scope| {
                for (t, (worker, out)) in workers.iter_mut().zip(others).enumerate() {
                    let mine = strided(t + 1);
                    scope.spawn(move || expand(worker, mode, mine, input, out));
                }
                expand(&mut ex, mode, strided(0), input, own);
            });
        }
        let spans = spans_in_order(parents.len(), stride, &outputs);
        // Admissions, in merge order within each shard, each shard in one thread.
        let admissions = admit_batch(&mut visited, &outputs, &spans, threads);
        let mut cursors = vec![0usize; admissions.len()];
        let mut admitted_new = 0usize;
        for span in &spans {
            let parent = &parents[span.parent];
            let out = &outputs[span.output];
            {
                let (id, _, depth, _, to_take) = parent.header;
                if to_take == u32::MAX {
                    // A state's first expansion; a reopened one is at least as deep.
                    max_depth = max_depth.max(depth);
                }
                for event in &out.events[span.events.clone()] {
                    let Event::Step {
                        actor,
                        preemptions,
                        asleep,
                        checks: step_checks,
                        outcome,
                    } = event
                    else {
                        slept += 1;
                        continue;
                    };
                    explored += 1;
                    checks += step_checks;
                    let (fingerprint, bytes) = match outcome {
                        Outcome::Violation {
                            violation,
                            at_quiescence,
                        } => {
                            result = ExploreResult::Fail(Box::new(counterexample(
                                &ex,
                                &initial,
                                &nodes,
                                id,
                                *actor,
                                violation.clone(),
                                *at_quiescence,
                            )));
                            break 'search;
                        }
                        Outcome::Next { fingerprint, bytes } => (*fingerprint, bytes),
                    };
                    let part = admission_part(fingerprint, admissions.len());
                    let admission = admissions[part][cursors[part]];
                    cursors[part] += 1;
                    let (next_take, next_asleep) = match admission {
                        Admission::Known => continue,
                        Admission::New => {
                            admitted_new += 1;
                            distinct += 1;
                            (u32::MAX, *asleep)
                        }
                        Admission::Reopen { woken, asleep } => {
                            reopened += 1;
                            (woken, asleep)
                        }
                    };
                    if distinct as u64 > config.max_states {
                        result = ExploreResult::Incomplete {
                            reason: format!(
                                "more than {} distinct states; lower the bounds or raise \
                                 max_states",
                                config.max_states
                            ),
                        };
                        break 'search;
                    }
                    nodes.push(Node {
                        parent: id,
                        actor: *actor,
                    });
                    let nid = u32::try_from(nodes.len() - 1).expect("fewer than 2^32 nodes");
                    let header = (nid, *preemptions, depth + 1, next_asleep, next_take);
                    frontier.push_framed(&header, &out.bytes[bytes.clone()]);
                }
            }
        }
        visited.add_new(admitted_new);
    }
    if result == ExploreResult::Pass && ex.enabled(&initial).is_empty() {
        if let Err(v) = initial.world.check_quiescent(&mut checks) {
            result = ExploreResult::Fail(Box::new(Counterexample {
                invariant: v.invariant,
                detail: v.detail,
                at_quiescence: true,
                steps: Vec::new(),
            }));
        }
    }
    let wall_time_s = started.elapsed().as_secs_f64();
    ExploreReport {
        variant: handler.name().to_string(),
        broken_on_purpose: handler.is_broken(),
        config: config.clone(),
        states_explored: explored,
        distinct_states: distinct as u64,
        invariants_checked: checks,
        max_depth: u64::from(max_depth),
        steps_slept: slept,
        states_reopened: reopened,
        peak_frontier_states: frontier.peak_len() as u64,
        peak_frontier_bytes: frontier.peak_bytes() as u64,
        wall_time_s,
        states_per_s: explored as f64 / wall_time_s.max(1e-9),
        result,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explore::{MemoryModel, MigrationCleanup};
    use crate::kernel::posted_msi::variant_by_name;
    use crate::kernel::sn::sn_software_by_name;
    use sim_core::Vector;

    /// The report with its two wall-clock fields zeroed.
    fn run(name: &str, sn: Option<&str>, config: &ExploreConfig, threads: u32) -> ExploreReport {
        let h = variant_by_name(name, 3).unwrap();
        let sw = sn.map(|n| sn_software_by_name(n).unwrap());
        let mut c = config.clone();
        c.threads = threads;
        let mut r = explore(h.as_ref(), sw.as_deref(), &c);
        r.wall_time_s = 0.0;
        r.states_per_s = 0.0;
        r.config.threads = 0;
        r
    }

    #[test]
    fn every_number_of_threads_gives_the_same_report() {
        let base = ExploreConfig::default();
        let cases: Vec<(&str, Option<&str>, ExploreConfig)> = vec![
            // Passes, large enough for several batches.
            ("rfc", None, base.clone()),
            // Fails, at once and at quiescence, under each memory model.
            ("no-final-recheck", None, base.clone()),
            (
                "plain-clear-on",
                None,
                base.clone().memory_model(MemoryModel::Tso),
            ),
            ("copy-then-xchg", Some("no-recheck"), base.clone()),
            (
                "copy-then-xchg",
                None,
                base.clone().migrate(MigrationCleanup::IrrOnly),
            ),
            // Stops past max_states, in the middle of a batch.
            ("rfc", None, base.clone().max_states(20_011)),
            // A preemption bound (states reopened with fewer preemptions).
            ("rfc", None, base.clone().preemption_bound(Some(1))),
            ("rfc", None, {
                let mut c = ExploreConfig::with_counts(3, 3)
                    .sn_toggles(2)
                    .any_of(vec![Vector(0x21), Vector(0x61)]);
                c.partial_order = false;
                c
            }),
        ];
        for (name, sn, config) in &cases {
            let one = run(name, *sn, config, 1);
            assert!(one.states_explored > 20, "{name}: {one}");
            for threads in [2, 3, 7] {
                assert_eq!(
                    run(name, *sn, config, threads),
                    one,
                    "{name} {sn:?} with {threads} threads"
                );
            }
        }
    }
}

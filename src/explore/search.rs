//! Breadth-first enumeration of every interleaving of the handler's atomic steps with
//! the hardware actors' steps, with duplicate states pruned.
//!
//! Coroutines cannot be cloned, so the search is stateless in the model-checking sense:
//! a state records the results its handler entry has been given so far, and taking the
//! handler's next step re-runs the variant's own coroutine from its start with those
//! results ([`advance_handler`]). Everything else in a state is plain data
//! ([`super::model::World`] plus each actor's progress).
//!
//! Breadth-first order makes the first violation found one with the fewest steps.
//! Visited states are kept as 128-bit fingerprints (two independent 64-bit hashes of
//! the whole state, handler results included), each with the fewest preemptions it was
//! reached with: a state reached again with no fewer preemptions is pruned, one reached
//! with fewer is explored again, since more of its future fits in the bound. The map
//! is only looked up, never iterated, so its order never reaches a result.

use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Instant;

use sim_core::Vector;

use super::model::{Invariant, StepNote, Violation, World};
use super::retrigger::entry_coroutine;
use super::sn::advance_sn;
use super::{Counterexample, ExploreConfig, ExploreReport, ExploreResult, TraceStep};
use crate::engine::Step;
use crate::kernel::retrigger::PostedMsiAck;
use crate::kernel::sn::{SnOp, SnSoftware};
use crate::kernel::{CpuOp, PirHandler};

/// Who takes a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Actor {
    /// The handler performs the operation it is suspended on.
    Handler,
    /// The IOMMU performs the next post of the non-urgent device: with vector choices,
    /// the one at this index of [`ExploreConfig::post_choices`].
    Iommu(u8),
    /// The IOMMU performs the next post of the device whose IRTE has URG set.
    IommuUrg,
    /// The other CPU's next SN step.
    SnCpu,
    /// The APIC delivers the pending notification and the handler starts.
    Apic,
    /// The handler CPU's store buffer writes its oldest store (x86-TSO).
    StoreBuffer,
    /// The IRQ core's next retrigger: an IPI of the device vector itself.
    IrqCore,
    /// The APIC delivers the retriggered vector and its IDT entry starts.
    ApicIdt,
    /// The IOMMU updates a descriptor with the post whose IRTE it fetched.
    IommuSwap,
    /// The CPU changing the interrupt's affinity takes its next step.
    Migration,
}

impl Actor {
    fn name(self) -> &'static str {
        match self {
            Actor::Handler => "handler",
            Actor::Iommu(_) => "iommu",
            Actor::IommuUrg => "iommu-urg",
            Actor::SnCpu => "sn-cpu",
            Actor::Apic => "apic",
            Actor::StoreBuffer => "store-buffer",
            Actor::IrqCore => "irq-core",
            Actor::ApicIdt => "apic-idt",
            Actor::IommuSwap => "iommu-swap",
            Actor::Migration => "migration",
        }
    }
}

/// One step of the SN-changing CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SnStep {
    Set,
    Clear,
    Recheck,
}

fn sn_program(config: &ExploreConfig) -> Vec<SnStep> {
    let mut p = Vec::new();
    for i in 0..config.sn_toggles {
        if i % 2 == 0 {
            p.push(SnStep::Set);
        } else {
            p.push(SnStep::Clear);
            if config.sn_recheck {
                p.push(SnStep::Recheck);
            }
        }
    }
    p
}

/// A state of the search: the world and how far each hardware actor has got.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    world: World,
    next_post: u16,
    next_urg: u16,
    sn_step: u16,
    retriggers_sent: u16,
    /// A user's SN software: the results it has been given, and the operation it is
    /// suspended on (`None` once it has returned).
    sn_results: Vec<u64>,
    sn_next: Option<SnOp>,
    /// The previous step was the handler's (so switching away from it now preempts).
    last_was_handler: bool,
}

impl State {
    fn fingerprint(&self) -> u128 {
        let half = |salt: u64| {
            let mut h = DefaultHasher::new();
            salt.hash(&mut h);
            self.hash(&mut h);
            h.finish()
        };
        (u128::from(half(0x9e37_79b9_7f4a_7c15)) << 64) | u128::from(half(0xc2b2_ae3d_27d4_eb4f))
    }
}

/// Re-runs `handler` from its start with `results` (the last one answering
/// `performed`) and returns where it stops next. Fails if the handler does not ask for
/// the same operation again: the explorer relies on handlers being deterministic.
fn advance_handler(
    handler: &dyn PirHandler,
    entry: Option<(Vector, PostedMsiAck)>,
    results: &[u64],
    performed: CpuOp,
) -> Result<Step<CpuOp>, Violation> {
    let mut co = entry_coroutine(handler, entry);
    let mut step = co.resume(None);
    let (last, earlier) = results.split_last().expect("at least one result");
    for r in earlier {
        if step == Step::Done {
            break;
        }
        step = co.resume(Some(*r));
    }
    if step != Step::Request(performed) {
        return Err(Violation {
            invariant: Invariant::HandlerContract,
            detail: format!(
                "handler is not deterministic: given the same results it asked for {step:?} \
                 where it had asked for {performed:?}"
            ),
        });
    }
    Ok(co.resume(Some(*last)))
}

/// Starts a fresh entry (of `handler`, or the IDT flow of a retriggered vector) and
/// returns its first suspension.
fn start_handler(handler: &dyn PirHandler, entry: Option<(Vector, PostedMsiAck)>) -> Step<CpuOp> {
    entry_coroutine(handler, entry).resume(None)
}

struct Explorer<'a> {
    handler: &'a dyn PirHandler,
    sn_software: Option<&'a dyn SnSoftware>,
    config: &'a ExploreConfig,
    sn: Vec<SnStep>,
    checks: u64,
}

/// What applying one step produced: the state after it (after the failing part, if it
/// failed), what it did, and whether an invariant failed.
struct Applied {
    state: State,
    notes: Vec<StepNote>,
    violation: Option<Violation>,
}

impl Explorer<'_> {
    fn enabled(&self, s: &State) -> Vec<Actor> {
        let w = &s.world;
        let mut out = Vec::with_capacity(5);
        if w.handler_can_step() {
            out.push(Actor::Handler);
        }
        if !w.store_buffer.is_empty() {
            out.push(Actor::StoreBuffer);
        }
        if (s.next_post as usize) < self.config.posts.len() && w.fetched.is_none() {
            let choices = self.config.post_choices.len().max(1);
            // At most MAX_POST_CHOICES (validated), so the index fits.
            out.extend((0..choices).map(|k| Actor::Iommu(k as u8)));
        }
        if (s.next_urg as usize) < self.config.urg_posts.len() {
            out.push(Actor::IommuUrg);
        }
        if self.sn_software.is_some() {
            if s.sn_next.is_some() {
                out.push(Actor::SnCpu);
            }
        } else if (s.sn_step as usize) < self.sn.len() {
            out.push(Actor::SnCpu);
        }
        if w.can_deliver() && w.entries < self.config.entries {
            out.push(Actor::Apic);
        }
        if u32::from(s.retriggers_sent) < self.config.retriggers {
            out.push(Actor::IrqCore);
        }
        if w.can_deliver_retriggered() {
            out.push(Actor::ApicIdt);
        }
        if w.fetched.is_some() {
            out.push(Actor::IommuSwap);
        }
        if w.migration_can_step() {
            out.push(Actor::Migration);
        }
        out
    }

    fn apply(&mut self, s: &State, actor: Actor) -> Applied {
        let mut n = s.clone();
        let mut notes = Vec::new();
        let r = self.step(&mut n, actor, &mut notes);
        // The store buffer is the handler CPU's own hardware: draining it neither
        // preempts the handler nor resumes it.
        n.last_was_handler = match actor {
            Actor::Handler => true,
            Actor::StoreBuffer => s.last_was_handler,
            _ => false,
        };
        Applied {
            state: n,
            notes,
            violation: r.err(),
        }
    }

    fn step(
        &mut self,
        n: &mut State,
        actor: Actor,
        notes: &mut Vec<StepNote>,
    ) -> Result<(), Violation> {
        let checks = &mut self.checks;
        let max_ops = self.config.max_handler_ops;
        match actor {
            Actor::Handler => {
                let op = n.world.run.as_ref().expect("handler enabled").pending;
                let (_, note) = n.world.handler_op(op, checks)?;
                notes.push(note);
                let run = n.world.run.as_ref().expect("still running");
                let entry = run.retriggered.map(|v| (v, self.config.posted_msi_ack));
                let step = advance_handler(self.handler, entry, &run.results, op)?;
                if let Some(note) = n.world.handler_next(step, max_ops, checks)? {
                    notes.push(note);
                }
            }
            Actor::Iommu(_) | Actor::IommuUrg => {
                let (list, idx, urg) = if actor == Actor::IommuUrg {
                    (&self.config.urg_posts, &mut n.next_urg, true)
                } else {
                    (&self.config.posts, &mut n.next_post, false)
                };
                let vector = match actor {
                    Actor::Iommu(k) if !self.config.post_choices.is_empty() => {
                        self.config.post_choices[usize::from(k)]
                    }
                    _ => list[*idx as usize],
                };
                *idx += 1;
                if !urg && n.world.migrated == Some(vector) {
                    // A post of the migrating vector: the IRTE fetch now, the
                    // descriptor update as a step of its own.
                    notes.push(n.world.fetch_irte(vector));
                } else {
                    let (sent, note) = n.world.post(vector, urg, checks)?;
                    notes.push(note);
                    if sent {
                        notes.push(n.world.notification_arrives());
                    }
                }
            }
            Actor::IommuSwap => {
                let (sent, note) = n.world.swap_fetched(checks)?;
                notes.push(note);
                if sent {
                    notes.push(n.world.notification_arrives());
                }
            }
            Actor::Migration => notes.push(n.world.migration_step()),
            Actor::SnCpu if self.sn_software.is_some() => {
                let sw = self.sn_software.expect("guarded");
                let op = n.sn_next.expect("enabled only while it runs");
                let (result, sent, note) = n.world.sn_op(op, checks)?;
                notes.push(note);
                if sent {
                    notes.push(n.world.notification_arrives());
                }
                n.sn_results.push(result);
                n.sn_next = match advance_sn(sw, self.config.sn_toggles, &n.sn_results, Some(op))? {
                    Step::Request(next) => Some(next),
                    Step::Done => None,
                };
                n.world.set_sn_running(n.sn_next.is_some());
            }
            Actor::SnCpu => {
                let step = self.sn[n.sn_step as usize];
                n.sn_step += 1;
                match step {
                    SnStep::Set => notes.push(n.world.set_sn(true, false, checks)?),
                    SnStep::Clear => {
                        let recheck = self.config.sn_recheck;
                        notes.push(n.world.set_sn(false, recheck, checks)?);
                    }
                    SnStep::Recheck => {
                        let (sent, note) = n.world.sn_recheck();
                        notes.push(note);
                        if sent {
                            notes.push(n.world.notification_arrives());
                        }
                    }
                }
            }
            Actor::StoreBuffer => notes.extend(n.world.drain_one(checks)?),
            Actor::Apic => {
                notes.push(n.world.deliver());
                let step = start_handler(self.handler, None);
                if let Some(note) = n.world.handler_next(step, max_ops, checks)? {
                    notes.push(note);
                }
            }
            Actor::IrqCore => {
                n.retriggers_sent += 1;
                notes.push(n.world.retrigger_arrives(self.config.retrigger_vector));
            }
            Actor::ApicIdt => {
                let vector = self.config.retrigger_vector;
                notes.push(n.world.deliver_retriggered(vector));
                let step = start_handler(self.handler, Some((vector, self.config.posted_msi_ack)));
                if let Some(note) = n.world.handler_next(step, max_ops, checks)? {
                    notes.push(note);
                }
            }
        }
        n.world.check_nothing_lost(checks)
    }
}

/// A node of the search tree, kept to rebuild the path to a violation.
#[derive(Clone, Copy)]
struct Node {
    parent: u32,
    actor: Actor,
}

const ROOT: u32 = u32::MAX;

pub(crate) fn explore(
    handler: &dyn PirHandler,
    sn_software: Option<&dyn SnSoftware>,
    config: &ExploreConfig,
) -> ExploreReport {
    let started = Instant::now();
    let mut ex = Explorer {
        handler,
        sn_software,
        config,
        sn: sn_program(config),
        checks: 0,
    };
    let mut world = World::with_memory_model(config.memory_model);
    if let Some(cleanup) = config.migration {
        world.migrated = config.migrated_vector();
        world.cleanup = cleanup;
    }
    let sn_next = match sn_software {
        Some(sw) => match advance_sn(sw, config.sn_toggles, &[], None) {
            Ok(Step::Request(op)) => Some(op),
            _ => None,
        },
        None => None,
    };
    world.set_sn_running(sn_next.is_some());
    let initial = State {
        sn_results: Vec::new(),
        sn_next,
        world,
        next_post: 0,
        next_urg: 0,
        sn_step: 0,
        retriggers_sent: 0,
        last_was_handler: false,
    };
    let mut visited: HashMap<u128, u32> = HashMap::new();
    visited.insert(initial.fingerprint(), 0);
    let mut nodes: Vec<Node> = Vec::new();
    // (node index or ROOT, preemptions used, depth, state)
    let mut frontier: VecDeque<(u32, u32, u32, State)> = VecDeque::new();
    frontier.push_back((ROOT, 0, 0, initial.clone()));
    let mut explored: u64 = 1;
    let mut max_depth = 0;
    let mut result = ExploreResult::Pass;
    let fail = |ex: &Explorer<'_>, nodes: &[Node], id, actor, v, quiet| {
        ExploreResult::Fail(Box::new(counterexample(
            ex, &initial, nodes, id, actor, v, quiet,
        )))
    };

    'search: while let Some((id, preemptions, depth, state)) = frontier.pop_front() {
        max_depth = max_depth.max(depth);
        for actor in ex.enabled(&state) {
            let preempts = state.last_was_handler
                && !matches!(actor, Actor::Handler | Actor::StoreBuffer)
                && state.world.run.is_some();
            let p = preemptions + u32::from(preempts);
            if config.preemption_bound.is_some_and(|b| p > b) {
                continue;
            }
            explored += 1;
            let applied = ex.apply(&state, actor);
            if let Some(violation) = applied.violation {
                result = fail(&ex, &nodes, id, actor, violation, false);
                break 'search;
            }
            let next = applied.state;
            if ex.enabled(&next).is_empty() {
                if let Err(violation) = next.world.check_quiescent(&mut ex.checks) {
                    result = fail(&ex, &nodes, id, actor, violation, true);
                    break 'search;
                }
            }
            let fp = next.fingerprint();
            match visited.get_mut(&fp) {
                Some(best) if *best <= p => continue,
                Some(best) => *best = p,
                None => {
                    visited.insert(fp, p);
                }
            }
            if visited.len() as u64 > config.max_states {
                result = ExploreResult::Incomplete {
                    reason: format!(
                        "more than {} distinct states; lower the bounds or raise max_states",
                        config.max_states
                    ),
                };
                break 'search;
            }
            nodes.push(Node { parent: id, actor });
            let nid = u32::try_from(nodes.len() - 1).expect("fewer than 2^32 nodes");
            frontier.push_back((nid, p, depth + 1, next));
        }
    }
    if result == ExploreResult::Pass && ex.enabled(&initial).is_empty() {
        if let Err(v) = initial.world.check_quiescent(&mut ex.checks) {
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
        distinct_states: visited.len() as u64,
        invariants_checked: ex.checks,
        max_depth: u64::from(max_depth),
        wall_time_s,
        states_per_s: explored as f64 / wall_time_s.max(1e-9),
        result,
    }
}

/// Rebuilds the path from the root to the step by `actor` from node `parent`, replays
/// it to record what each step did, and attaches the violation.
fn counterexample(
    ex: &Explorer<'_>,
    initial: &State,
    nodes: &[Node],
    parent: u32,
    actor: Actor,
    violation: Violation,
    at_quiescence: bool,
) -> Counterexample {
    let mut path = vec![actor];
    let mut cur = parent;
    while cur != ROOT {
        let n = nodes[cur as usize];
        path.push(n.actor);
        cur = n.parent;
    }
    path.reverse();
    // Replay with a private checker so the report's counts are unaffected.
    let mut replay = Explorer {
        handler: ex.handler,
        sn_software: ex.sn_software,
        config: ex.config,
        sn: ex.sn.clone(),
        checks: 0,
    };
    let mut state = initial.clone();
    let mut steps = Vec::with_capacity(path.len());
    for (i, a) in path.iter().enumerate() {
        let attempted = match (&state.world.run, a) {
            (Some(run), Actor::Handler) => Some(StepNote(op_text(run.pending))),
            _ => None,
        };
        let mut applied = replay.apply(&state, *a);
        if applied.notes.is_empty() {
            applied.notes.extend(attempted);
        }
        steps.push(trace_step(i + 1, *a, &applied.notes, &applied.state));
        state = applied.state;
    }
    Counterexample {
        invariant: violation.invariant,
        detail: violation.detail,
        at_quiescence,
        steps,
    }
}

/// An operation in words, for a step that failed before it could say what it returned.
fn op_text(op: CpuOp) -> String {
    match op {
        CpuOp::LoadPir { word } => format!("load PIR[{word}]"),
        CpuOp::XchgPir { word, value } => format!("xchg PIR[{word}] <- {value:#x}"),
        CpuOp::ClearOn => "clear ON".into(),
        CpuOp::TestAndClearOn => "test-and-clear ON".into(),
        CpuOp::HandleVector(v) => format!("handle vector {v}"),
        CpuOp::Eoi => "EOI".into(),
        CpuOp::StorePir { word, value } => format!("store PIR[{word}] <- {value:#x}"),
        CpuOp::StoreClearOn => "store ON=0".into(),
        CpuOp::Mfence => "mfence".into(),
    }
}

fn trace_step(n: usize, actor: Actor, notes: &[StepNote], state: &State) -> TraceStep {
    let text: Vec<&str> = notes.iter().map(|s| s.0.as_str()).collect();
    TraceStep {
        n: n as u32,
        actor: actor.name().to_string(),
        action: if text.is_empty() {
            "(no effect)".to_string()
        } else {
            text.join("; ")
        },
        after: state.world.snapshot(),
    }
}

/// Default vectors of the non-urgent posts, used in order: word 0, word 1, word 0
/// again (a repeat can merge), then words 2 and 3.
pub const DEFAULT_POST_VECTORS: [Vector; 6] = [
    Vector(0x21),
    Vector(0x61),
    Vector(0x21),
    Vector(0xa1),
    Vector(0x22),
    Vector(0xe1),
];

/// Default vectors of the urgent posts.
pub const DEFAULT_URG_VECTORS: [Vector; 3] = [Vector(0x41), Vector(0x81), Vector(0x42)];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::posted_msi::variant_by_name;

    #[test]
    fn sn_program_alternates_and_rechecks_after_each_clear() {
        let c = ExploreConfig::with_counts(1, 1).sn_toggles(3);
        assert_eq!(
            sn_program(&c),
            vec![SnStep::Set, SnStep::Clear, SnStep::Recheck, SnStep::Set]
        );
    }

    #[test]
    fn replay_reaches_the_same_point() {
        let h = variant_by_name("copy-then-xchg", 3).unwrap();
        assert_eq!(
            start_handler(h.as_ref(), None),
            Step::Request(CpuOp::LoadPir { word: 0 })
        );
        let step = advance_handler(h.as_ref(), None, &[1 << 0x21], CpuOp::LoadPir { word: 0 });
        assert_eq!(step.unwrap(), Step::Request(CpuOp::LoadPir { word: 1 }));
        // A result history that does not match the recorded operation is rejected.
        let err = advance_handler(h.as_ref(), None, &[0, 0], CpuOp::ClearOn).unwrap_err();
        assert_eq!(err.invariant, Invariant::HandlerContract);
    }

    #[test]
    fn equal_states_share_a_fingerprint_and_differing_ones_do_not() {
        let s = State {
            world: World::new(),
            next_post: 0,
            next_urg: 0,
            sn_step: 0,
            retriggers_sent: 0,
            sn_results: Vec::new(),
            sn_next: None,
            last_was_handler: false,
        };
        let mut t = s.clone();
        assert_eq!(s.fingerprint(), t.fingerprint());
        t.next_post = 1;
        assert_ne!(s.fingerprint(), t.fingerprint());
        let mut u = s.clone();
        u.retriggers_sent = 1;
        assert_ne!(s.fingerprint(), u.fingerprint());
    }

    #[test]
    fn a_retriggered_entry_replays_the_posted_chips_flow() {
        use crate::kernel::retrigger::PostedMsiAck;
        let h = variant_by_name("copy-then-xchg", 3).unwrap();
        let entry = Some((Vector(0x21), PostedMsiAck::EoiIfInactive));
        assert_eq!(start_handler(h.as_ref(), entry), Step::Request(CpuOp::Eoi));
        let step = advance_handler(h.as_ref(), entry, &[0], CpuOp::Eoi).unwrap();
        assert_eq!(step, Step::Request(CpuOp::HandleVector(Vector(0x21))));
        let before = Some((Vector(0x21), PostedMsiAck::MoveIrqOnly));
        assert_eq!(
            start_handler(h.as_ref(), before),
            Step::Request(CpuOp::HandleVector(Vector(0x21)))
        );
    }

    #[test]
    fn nothing_to_do_is_a_pass_with_one_state() {
        let h = variant_by_name("rfc", 3).unwrap();
        let r = explore(h.as_ref(), None, &ExploreConfig::with_counts(0, 1));
        assert_eq!(r.result, ExploreResult::Pass);
        assert_eq!((r.states_explored, r.distinct_states), (1, 1));
    }
}

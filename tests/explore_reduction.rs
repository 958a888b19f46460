//! The explorer's reductions against the full search (`reduce(false)`,
//! `partial_order(false)`): on every shipped variant, under both memory models and with
//! each extra actor, the verdict, the invariant a counterexample breaks, where it
//! breaks and the counterexample's length must be the full search's.
//! - The state reduction (`ExploreConfig::reduce`) may only lower the number of
//!   distinct states.
//! - The partial-order reduction (`ExploreConfig::partial_order`, sleep sets) drops
//!   steps, never states: a passing search reaches exactly the distinct states, and
//!   the depth, of the same search without it, in no more steps.

use irqsim::explore::{
    explore_variant, explore_with_sn, ExploreConfig, ExploreReport, ExploreResult, MemoryModel,
};
use irqsim::kernel::migration::MigrationCleanup;
use irqsim::kernel::posted_msi::variant_by_name;
use irqsim::kernel::retrigger::PostedMsiAck;
use irqsim::kernel::sn::sn_software_by_name;
use irqsim::kernel::{DEFAULT_MAX_LOOPS, VARIANT_NAMES};
use proptest::prelude::*;
use sim_core::Vector;

/// What must not change: pass, incomplete, or the failure's invariant, whether it was
/// found at quiescence, and its number of steps.
fn verdict(r: &ExploreReport) -> String {
    match &r.result {
        ExploreResult::Pass => "pass".into(),
        ExploreResult::Incomplete { .. } => "incomplete".into(),
        ExploreResult::Fail(c) => format!(
            "fail {:?} quiescence={} steps={}",
            c.invariant,
            c.at_quiescence,
            c.steps.len()
        ),
    }
}

fn compare(name: &str, config: &ExploreConfig) -> (u64, u64) {
    let run = |reduce: bool, partial_order: bool| {
        let c = config.clone().reduce(reduce).partial_order(partial_order);
        explore_variant(name, DEFAULT_MAX_LOOPS, &c).unwrap()
    };
    compare_runs(&format!("{name} {config:?}"), run)
}

/// Runs the full search and each reduction through `run(reduce, partial_order)`, and
/// returns the distinct states of the full search and of the state reduction.
fn compare_runs(label: &str, run: impl Fn(bool, bool) -> ExploreReport) -> (u64, u64) {
    let full = run(false, false);
    let reduced = run(true, false);
    assert_eq!(
        verdict(&full),
        verdict(&reduced),
        "{label}\nfull: {full}\nreduced: {reduced}"
    );
    assert!(
        reduced.distinct_states <= full.distinct_states,
        "{label}: {} reduced vs {} full",
        reduced.distinct_states,
        full.distinct_states
    );
    for (without, reduce) in [(&full, false), (&reduced, true)] {
        let slept = run(reduce, true);
        assert_eq!(
            verdict(without),
            verdict(&slept),
            "{label}, reduce {reduce}\nwithout sleep sets: {without}\nwith: {slept}"
        );
        if !without.passed() {
            continue;
        }
        // Without the state reduction the full search also tells apart states that
        // differ only in whether the handler took the last step, which sleep sets
        // must identify; nothing reads it without a preemption bound.
        if reduce || without.config.preemption_bound.is_some() {
            assert_eq!(slept.distinct_states, without.distinct_states, "{label}");
        } else {
            assert!(slept.distinct_states <= without.distinct_states, "{label}");
        }
        assert_eq!(
            slept.max_depth, without.max_depth,
            "{label}, reduce {reduce}"
        );
        assert!(
            slept.states_explored <= without.states_explored,
            "{label}, reduce {reduce}: {} steps with sleep sets, {} without",
            slept.states_explored,
            without.states_explored
        );
    }
    (full.distinct_states, reduced.distinct_states)
}

fn small() -> ExploreConfig {
    ExploreConfig::with_counts(3, 2).urgent(1).sn_toggles(2)
}

#[test]
fn every_variant_gets_the_same_verdict_under_both_memory_models() {
    for name in VARIANT_NAMES {
        for model in [MemoryModel::Sc, MemoryModel::Tso] {
            compare(name, &small().memory_model(model));
        }
    }
}

#[test]
fn the_default_bounds_give_the_same_verdicts_with_fewer_states() {
    for name in ["copy-then-xchg", "rfc", "no-final-recheck", "xchg-word0"] {
        let (full, reduced) = compare(name, &ExploreConfig::default());
        if name == "copy-then-xchg" {
            // The full search's count is the one the README and the SPIN comparison
            // quote; the reduction must actually merge states.
            assert_eq!(full, 74_054);
            assert!(reduced < full, "{reduced} vs {full}");
        }
    }
}

#[test]
fn retriggers_migrations_and_sn_changes_keep_their_verdicts() {
    let v21 = Vector(0x21);
    for name in ["copy-then-xchg", "rfc", "no-final-recheck"] {
        for ack in [PostedMsiAck::MoveIrqOnly, PostedMsiAck::EoiIfInactive] {
            compare(name, &small().retriggers(1, v21, ack));
        }
        for cleanup in [MigrationCleanup::IrrOnly, MigrationCleanup::IrrAndPir] {
            compare(name, &small().migrate(cleanup));
        }
        let mut no_recheck = small();
        no_recheck.sn_recheck = false;
        compare(name, &no_recheck);
        compare(name, &small().preemption_bound(Some(1)));
        compare(
            name,
            &small().any_of(vec![Vector(0x21), Vector(0x61), Vector(0x22)]),
        );
    }
}

#[test]
fn user_sn_software_keeps_its_verdicts() {
    for sn in ["recheck", "no-recheck"] {
        for name in ["copy-then-xchg", "rfc"] {
            let handler = variant_by_name(name, DEFAULT_MAX_LOOPS).unwrap();
            let software = sn_software_by_name(sn).unwrap();
            let run = |reduce: bool, partial_order: bool| {
                let c = small().reduce(reduce).partial_order(partial_order);
                explore_with_sn(handler.as_ref(), software.as_ref(), &c)
            };
            compare_runs(&format!("{name} with {sn}"), run);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random small bounds, variants and actors: the reduction never changes a verdict.
    #[test]
    fn random_bounds_keep_their_verdicts(
        variant in 0..VARIANT_NAMES.len(),
        posts in 0u32..4,
        entries in 1u32..3,
        urg in 0u32..2,
        toggles in 0u32..3,
        tso in any::<bool>(),
        bound in prop::option::of(0u32..3),
        retrigger in any::<bool>(),
        migrate in any::<bool>(),
    ) {
        let mut c = ExploreConfig::with_counts(posts, entries)
            .urgent(urg)
            .sn_toggles(toggles)
            .preemption_bound(bound)
            .memory_model(if tso { MemoryModel::Tso } else { MemoryModel::Sc });
        if retrigger {
            c = c.retriggers(1, Vector(0x21), PostedMsiAck::MoveIrqOnly);
        }
        if migrate && posts > 0 {
            c = c.migrate(MigrationCleanup::IrrOnly);
        }
        compare(VARIANT_NAMES[variant], &c);
    }
}

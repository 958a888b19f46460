//! The exhaustive explorer on every built-in variant, and on handlers that are not in
//! the repository, fed to it through the public API only.

use irqsim::explore::{
    explore, explore_variant, ExploreConfig, ExploreError, ExploreResult, Invariant, MemoryModel,
};
use irqsim::kernel::posted_msi::{dispatch_pending, variant_by_name};
use irqsim::kernel::{CpuPort, HandlerFuture, PirHandler, DEFAULT_MAX_LOOPS, VARIANT_NAMES};

const CORRECT: [&str; 4] = ["copy-then-xchg", "rfc", "interleaved", "per-word-dispatch"];
const BROKEN: [&str; 2] = ["no-final-recheck", "xchg-word0"];

#[test]
fn correct_variants_pass_and_broken_ones_fail_with_the_default_bounds() {
    let config = ExploreConfig::default();
    for name in VARIANT_NAMES {
        let r = explore_variant(name, DEFAULT_MAX_LOOPS, &config).unwrap();
        assert!(r.distinct_states > 0 && r.invariants_checked > 0, "{name}");
        if CORRECT.contains(name) {
            assert!(r.passed(), "{r}");
            assert!(r.states_explored >= r.distinct_states, "{name}");
        } else if BROKEN.contains(name) {
            assert!(r.broken_on_purpose, "{name}");
            let c = r.counterexample().unwrap_or_else(|| panic!("{r}"));
            assert!(!c.steps.is_empty(), "{name}");
            assert!(
                c.steps
                    .iter()
                    .enumerate()
                    .all(|(i, s)| s.n as usize == i + 1),
                "{name}: steps are numbered 1.."
            );
        } else if name.starts_with("plain-clear-on") {
            // Correct under sequential consistency, the default; see the TSO tests.
            assert!(r.passed(), "{r}");
        } else {
            // kvm-clear-on-first: what the explorer finds, kept so a change shows up.
            // Clearing ON first means every post after the clear notifies again, so
            // nothing is stranded; the cost is extra notifications, not lost ones.
            assert_eq!(*name, "kvm-clear-on-first");
            assert!(r.passed(), "{r}");
        }
    }
}

#[test]
fn no_final_recheck_counterexample_is_the_post_between_last_harvest_and_clear_on() {
    let r = explore_variant(
        "no-final-recheck",
        DEFAULT_MAX_LOOPS,
        &ExploreConfig::with_counts(2, 2),
    )
    .unwrap();
    let c = r.counterexample().unwrap();
    assert_eq!(c.invariant, Invariant::NothingLost);
    // Found as soon as the handler returns: nothing will look at PIR again.
    assert!(!c.at_quiescence);
    let n = c.steps.len();
    // ... iommu posts the second vector while ON is still set, then the handler clears
    // ON and returns without looking at PIR again.
    assert_eq!(c.steps[n - 3].actor, "iommu", "{r}");
    assert!(c.steps[n - 3].action.contains("coalesced"), "{r}");
    assert_eq!(c.steps[n - 2].action, "clear ON", "{r}");
    assert!(c.steps[n - 1].action.starts_with("EOI"), "{r}");
    let last = c.steps[n - 1].after;
    assert!(!last.on && !last.sn && !last.irr && !last.isr);
    assert_eq!(last.pir[1], 1 << (0x61 - 64), "0x61 stranded");
    // Shortest: post, deliver, one full copy-then-xchg round (4 loads, xchg,
    // handler), the empty round's 4 loads, the racing post, clear ON, EOI.
    assert_eq!(n, 15, "{r}");
}

#[test]
fn preemption_bound_zero_hides_the_race_and_one_finds_it() {
    let base = ExploreConfig::with_counts(2, 2);
    let h = variant_by_name("no-final-recheck", DEFAULT_MAX_LOOPS).unwrap();
    let r0 = explore(h.as_ref(), &base.clone().preemption_bound(Some(0)));
    assert!(r0.passed(), "{r0}");
    let r1 = explore(h.as_ref(), &base.preemption_bound(Some(1)));
    assert!(!r1.passed(), "{r1}");
    assert!(r0.distinct_states < r1.distinct_states);
}

#[test]
fn without_the_sn_owners_recheck_even_mainline_loses_a_suppressed_post() {
    let mut c = ExploreConfig::with_counts(2, 2).sn_toggles(2);
    let h = variant_by_name("copy-then-xchg", DEFAULT_MAX_LOOPS).unwrap();
    assert!(explore(h.as_ref(), &c).passed());
    c.sn_recheck = false;
    let r = explore(h.as_ref(), &c);
    let cx = r.counterexample().unwrap_or_else(|| panic!("{r}"));
    assert_eq!(cx.invariant, Invariant::NothingLost);
    assert!(
        cx.steps.iter().any(|s| s.action.contains("suppressed")),
        "{r}"
    );
}

#[test]
fn urgent_posts_notify_through_sn() {
    // SN set for good (one toggle), one urgent post: it must still be delivered.
    let c = ExploreConfig::with_counts(0, 1).sn_toggles(1).urgent(1);
    for name in CORRECT {
        let r = explore_variant(name, DEFAULT_MAX_LOOPS, &c).unwrap();
        assert!(r.passed(), "{r}");
    }
}

#[test]
fn bad_bounds_and_names_are_errors_not_panics() {
    let mut c = ExploreConfig::with_counts(1, 1);
    c.posts[0] = irqsim::sim_core::Vector(0xec);
    let e = explore_variant("rfc", 3, &c).unwrap_err();
    assert!(
        matches!(e, ExploreError::Bound { field: "posts", .. }),
        "{e}"
    );
    assert!(e.to_string().contains("0xeb"), "{e}");
    let e = explore_variant("nope", 3, &ExploreConfig::default()).unwrap_err();
    assert!(e.to_string().contains("copy-then-xchg"), "{e}");
}

#[test]
fn report_serializes_with_verdict_counts_and_trace() {
    let r = explore_variant("xchg-word0", 3, &ExploreConfig::with_counts(2, 2)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(v["result"]["verdict"], "fail");
    assert_eq!(v["result"]["invariant"], "nothing-lost");
    assert_eq!(v["config"]["posts"], serde_json::json!(["0x21", "0x61"]));
    let step = &v["result"]["steps"][0];
    assert_eq!(step["n"], 1);
    assert_eq!(step["actor"], "iommu");
    assert_eq!(step["after"]["pir"][0], "0x200000000");
    for key in [
        "states_explored",
        "distinct_states",
        "invariants_checked",
        "wall_time_s",
    ] {
        assert!(v[key].is_number(), "{key}");
    }
}

// ---------------------------------------------------------------------------------
// Handlers that are not in the repository.

/// Mainline's shape, but after clearing ON it rechecks only PIR word 0: a post to a
/// higher word that lands between the last harvest and the clear is stranded.
struct RecheckWordZeroOnly;

impl PirHandler for RecheckWordZeroOnly {
    fn name(&self) -> &str {
        "recheck-word0-only"
    }

    fn run(&self, cpu: CpuPort) -> HandlerFuture {
        Box::pin(async move {
            harvest_all(&cpu).await;
            cpu.clear_on().await;
            let w0 = cpu.load_pir(0).await;
            if w0 != 0 {
                let bits = cpu.xchg_pir(0, 0).await;
                dispatch_pending(&cpu, [bits, 0, 0, 0]).await;
            }
            cpu.eoi().await;
        })
    }
}

/// Exchanges every word once and dispatches what it got.
async fn harvest_all(cpu: &CpuPort) -> bool {
    let mut got = [0u64; 4];
    for (word, slot) in got.iter_mut().enumerate() {
        *slot = cpu.xchg_pir(word, 0).await;
    }
    let any = got.iter().any(|w| *w != 0);
    if any {
        dispatch_pending(cpu, got).await;
    }
    any
}

/// A correct handler of my own: harvest until empty, clear ON, harvest until empty.
struct DrainTwice;

impl PirHandler for DrainTwice {
    fn name(&self) -> &str {
        "drain-twice"
    }

    fn run(&self, cpu: CpuPort) -> HandlerFuture {
        Box::pin(async move {
            while harvest_all(&cpu).await {}
            cpu.clear_on().await;
            while harvest_all(&cpu).await {}
            cpu.eoi().await;
        })
    }
}

/// Forgets the EOI when it found nothing to do.
struct SkipsEoiWhenEmpty;

impl PirHandler for SkipsEoiWhenEmpty {
    fn name(&self) -> &str {
        "skips-eoi-when-empty"
    }

    fn run(&self, cpu: CpuPort) -> HandlerFuture {
        Box::pin(async move {
            cpu.clear_on().await;
            if harvest_all(&cpu).await {
                cpu.eoi().await;
            }
        })
    }
}

#[test]
fn a_broken_handler_outside_the_repository_is_caught() {
    let r = explore(&RecheckWordZeroOnly, &ExploreConfig::default());
    let c = r.counterexample().unwrap_or_else(|| panic!("{r}"));
    assert_eq!(c.invariant, Invariant::NothingLost, "{r}");
    assert_eq!(r.variant, "recheck-word0-only");
    assert!(!r.broken_on_purpose);
}

#[test]
fn a_correct_handler_outside_the_repository_passes() {
    let r = explore(&DrainTwice, &ExploreConfig::default());
    assert!(r.passed(), "{r}");
}

#[test]
fn a_missing_eoi_is_caught_as_an_eoi_mismatch() {
    // Its first entry always finds a post (the notification came from one), so only
    // a later, empty entry skips the EOI: that needs a second notification.
    let r = explore(&SkipsEoiWhenEmpty, &ExploreConfig::default());
    let c = r.counterexample().unwrap_or_else(|| panic!("{r}"));
    assert_eq!(c.invariant, Invariant::EoiMatchesEntry, "{r}");
    assert!(matches!(r.result, ExploreResult::Fail(_)));
}

#[test]
fn a_plain_store_clearing_on_passes_under_sc_and_loses_a_post_under_tso() {
    let sc = ExploreConfig::default();
    let tso = ExploreConfig::default().memory_model(MemoryModel::Tso);
    let r = explore_variant("plain-clear-on", DEFAULT_MAX_LOOPS, &sc).unwrap();
    assert!(r.passed(), "{r}");
    let r = explore_variant("plain-clear-on", DEFAULT_MAX_LOOPS, &tso).unwrap();
    let c = r.counterexample().unwrap_or_else(|| panic!("{r}"));
    assert_eq!(c.invariant, Invariant::NothingLost, "{r}");
    // The clear sat in the store buffer while a post found ON still set and coalesced;
    // the loss shows when the buffer finally writes ON=0.
    let store = c
        .steps
        .iter()
        .position(|s| s.action.contains("store ON=0 (into the store buffer)"));
    let coalesced = c
        .steps
        .iter()
        .rposition(|s| s.actor == "iommu" && s.action.contains("coalesced"));
    let last = c.steps.last().unwrap();
    assert!(store.is_some() && coalesced > store, "{r}");
    assert_eq!(last.actor, "store-buffer", "{r}");
    assert!(!last.after.on && last.after.pir != [0; 4], "{r}");
    assert_eq!(last.after.buffered, 0);
}

#[test]
fn every_correct_variant_and_the_fenced_repair_pass_under_tso() {
    let tso = ExploreConfig::default().memory_model(MemoryModel::Tso);
    for name in CORRECT
        .iter()
        .chain(&["kvm-clear-on-first", "plain-clear-on-mfence"])
    {
        let sc = explore_variant(name, DEFAULT_MAX_LOOPS, &ExploreConfig::default()).unwrap();
        let r = explore_variant(name, DEFAULT_MAX_LOOPS, &tso).unwrap();
        assert!(r.passed(), "{r}");
        if !name.starts_with("plain-clear-on") {
            // No plain store, so nothing is ever buffered: the same state space.
            assert_eq!(r.distinct_states, sc.distinct_states, "{name}");
        }
    }
    // The broken-on-purpose ones stay broken.
    for name in BROKEN {
        let r = explore_variant(name, DEFAULT_MAX_LOOPS, &tso).unwrap();
        assert!(!r.passed(), "{r}");
    }
}

/// The retrigger bug (fixed by Linux 0edc78b82bea): a posted vector raised through
/// the IDT by `irq_retrigger()` runs the posted chip's ack, which wrote no EOI.
#[test]
fn a_retriggered_vector_without_an_eoi_is_found_and_the_fix_passes() {
    use irqsim::kernel::retrigger::PostedMsiAck;
    use sim_core::Vector;
    let small = ExploreConfig::with_counts(2, 2);
    for name in CORRECT {
        let before = small
            .clone()
            .retriggers(1, Vector(0x21), PostedMsiAck::MoveIrqOnly);
        let r = explore_variant(name, DEFAULT_MAX_LOOPS, &before).unwrap();
        let c = r.counterexample().unwrap_or_else(|| panic!("{r}"));
        assert_eq!(c.invariant, Invariant::EoiMatchesEntry, "{name}");
        assert!(c.detail.contains("0x21 stays in service"), "{}", c.detail);
        let actors: Vec<&str> = c.steps.iter().map(|s| s.actor.as_str()).collect();
        assert_eq!(actors, ["irq-core", "apic-idt", "handler"], "{name}: {c}");
        assert!(c.steps[1].after.device_isr && !c.steps[1].after.device_irr);
        assert!(
            c.steps[2].after.device_isr,
            "still in service when it returns"
        );

        let fixed = small
            .clone()
            .retriggers(2, Vector(0x21), PostedMsiAck::EoiIfInactive);
        let r = explore_variant(name, DEFAULT_MAX_LOOPS, &fixed).unwrap();
        assert!(r.passed(), "{r}");
        // Retriggers add interleavings: more states than without them.
        let plain = explore_variant(name, DEFAULT_MAX_LOOPS, &small).unwrap();
        assert!(r.distinct_states > plain.distinct_states, "{name}");
    }
}

/// IRTE migration (Linux ce0a92871179): the old CPU's vector cleanup must look in
/// its PIR, where a post remapped with the old entry can still sit.
#[test]
fn a_migration_whose_cleanup_checks_only_irr_loses_the_msi_left_in_the_old_pir() {
    use irqsim::explore::MigrationCleanup;
    let small = ExploreConfig::with_counts(2, 2);
    for name in CORRECT {
        let broken = small.clone().migrate(MigrationCleanup::IrrOnly);
        let r = explore_variant(name, DEFAULT_MAX_LOOPS, &broken).unwrap();
        let c = r.counterexample().unwrap_or_else(|| panic!("{r}"));
        assert_eq!(c.invariant, Invariant::NothingLost, "{name}");
        assert!(
            c.detail.contains("after the vector cleanup freed it"),
            "{}",
            c.detail
        );
        let freed = c
            .steps
            .iter()
            .find(|s| s.actor == "migration" && s.action.contains("freed"))
            .unwrap_or_else(|| panic!("{c}"));
        assert!(freed.action.contains("PIR bit still set"), "{c}");
        // The post that stays behind went through the old entry: fetch, then update.
        let fetch = c.steps.iter().position(|s| s.actor == "iommu").unwrap();
        assert_eq!(c.steps[fetch + 1].actor, "iommu-swap", "{c}");

        let fixed = small.clone().migrate(MigrationCleanup::IrrAndPir);
        let r = explore_variant(name, DEFAULT_MAX_LOOPS, &fixed).unwrap();
        assert!(r.passed(), "{r}");
    }
}

/// The SN side as a coroutine (`kernel::sn`): the shipped sequences, and two written
/// here that the explorer must reject.
mod sn_software {
    use super::*;
    use irqsim::explore::explore_with_sn;
    use irqsim::kernel::sn::{SnFuture, SnPort, SnSoftware};
    use sim_core::Vector;

    fn small() -> ExploreConfig {
        ExploreConfig::with_counts(2, 2).sn_toggles(2)
    }

    #[test]
    fn the_shipped_recheck_passes_and_no_recheck_loses_a_suppressed_post() {
        for name in CORRECT {
            let mut c = small();
            c.sn_software = Some("recheck".into());
            let r = explore_variant(name, DEFAULT_MAX_LOOPS, &c).unwrap();
            assert!(r.passed(), "{r}");
            c.sn_software = Some("no-recheck".into());
            let r = explore_variant(name, DEFAULT_MAX_LOOPS, &c).unwrap();
            let cx = r.counterexample().unwrap_or_else(|| panic!("{r}"));
            assert_eq!(cx.invariant, Invariant::NothingLost);
            let actors: Vec<&str> = cx.steps.iter().map(|s| s.actor.as_str()).collect();
            assert_eq!(actors, ["sn-cpu", "iommu", "sn-cpu"], "{cx}");
        }
        let mut c = small();
        c.sn_software = Some("nope".into());
        assert!(matches!(
            explore_variant("rfc", DEFAULT_MAX_LOOPS, &c),
            Err(ExploreError::UnknownSnSoftware { .. })
        ));
    }

    /// Rechecks PIR word 0 only.
    struct WordZeroRecheck;
    impl SnSoftware for WordZeroRecheck {
        fn name(&self) -> &str {
            "word-zero-recheck"
        }
        fn run(&self, cpu: SnPort, toggles: u32) -> SnFuture {
            Box::pin(async move {
                for i in 0..toggles {
                    if i % 2 == 0 {
                        cpu.set_sn().await;
                    } else {
                        cpu.clear_sn().await;
                        if cpu.load_pir(0).await != 0 && !cpu.test_and_set_on().await {
                            cpu.send_notification().await;
                        }
                    }
                }
            })
        }
    }

    /// Sets ON after the clear but never sends the notification it owes.
    struct SilentRecheck;
    impl SnSoftware for SilentRecheck {
        fn name(&self) -> &str {
            "silent-recheck"
        }
        fn run(&self, cpu: SnPort, _toggles: u32) -> SnFuture {
            Box::pin(async move {
                cpu.set_sn().await;
                cpu.clear_sn().await;
                let mut pending = false;
                for w in 0..4 {
                    pending |= cpu.load_pir(w).await != 0;
                }
                if pending {
                    cpu.test_and_set_on().await;
                }
            })
        }
    }

    #[test]
    fn sequences_written_outside_the_project_are_checked() {
        let h = variant_by_name("copy-then-xchg", DEFAULT_MAX_LOOPS).unwrap();
        // Vectors in word 0 only: the short recheck is enough.
        let word0 = small().post_vectors(&[Vector(0x21)]);
        assert!(explore_with_sn(h.as_ref(), &WordZeroRecheck, &word0).passed());
        // A vector in word 1 (0x61) suppressed by SN is never rechecked.
        let word1 = small().post_vectors(&[Vector(0x61)]);
        let r = explore_with_sn(h.as_ref(), &WordZeroRecheck, &word1);
        let c = r.counterexample().unwrap_or_else(|| panic!("{r}"));
        assert_eq!(c.invariant, Invariant::NothingLost);
        assert!(c.detail.contains("0x61"), "{}", c.detail);
        // ON set with no notification: every later post coalesces into nothing.
        let r = explore_with_sn(h.as_ref(), &SilentRecheck, &word0);
        let c = r.counterexample().unwrap_or_else(|| panic!("{r}"));
        assert_eq!(c.invariant, Invariant::NothingLost, "{c}");
        assert!(
            c.steps
                .iter()
                .any(|s| s.action.contains("test-and-set ON -> 0")),
            "{c}"
        );
    }
}

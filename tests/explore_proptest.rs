//! Property tests: arbitrary timed schedules through the timed driver with every
//! invariant on, shrinking of a failing schedule, regressions kept as literal tests,
//! and a state-machine test of the descriptor plus the IOMMU against a small
//! reference model.

use std::collections::BTreeSet;

use irqsim::explore::timed::{minimize, run_timed, OpCosts, SnChange, TimedPost, TimedSchedule};
use irqsim::explore::Invariant;
use irqsim::iommu_sim::vtd::{
    msi::encode_remappable, InterruptRemapper, Irte, PostedIrte, RemapAction, RemapConfig,
    SourceCheck,
};
use irqsim::kernel::posted_msi::variant_by_name;
use irqsim::kernel::PirHandler;
use std::sync::Arc;

fn handler(name: &str, max_loops: u32) -> Arc<dyn PirHandler> {
    variant_by_name(name, max_loops).unwrap().into()
}
use irqsim::pid_model::desc::{ON_BIT, SN_BIT};
use irqsim::pid_model::{Agent, LineOp, PiDesc, PidLine};
use irqsim::sim_core::{SimTime, Vector};
use proptest::prelude::*;
use proptest::test_runner::{
    Config, FileFailurePersistence, RngAlgorithm, TestCaseError, TestRng, TestRunner,
};

const CORRECT: [&str; 4] = ["copy-then-xchg", "rfc", "interleaved", "per-word-dispatch"];
/// A few vectors over three PIR words, with repeats likely so posts can merge.
const VECTORS: [u8; 5] = [0x21, 0x22, 0x61, 0xa1, 0xe1];

fn post_strategy() -> impl Strategy<Value = TimedPost> {
    (0u64..3_000, 0..VECTORS.len(), prop::bool::weighted(0.15)).prop_map(|(at_ns, i, urg)| {
        TimedPost {
            at_ns,
            vector: Vector(VECTORS[i]),
            urg,
        }
    })
}

fn costs_strategy() -> impl Strategy<Value = OpCosts> {
    (
        (0u64..300, 0u64..40, 0u64..80, 0u64..400),
        (0u64..40, 0u64..200, 0u64..300, 0u64..100),
    )
        .prop_map(
            |(
                (entry_ns, load_ns, locked_ns, handle_ns),
                (eoi_ns, exit_ns, notify_ns, recheck_ns),
            )| {
                OpCosts {
                    entry_ns,
                    load_ns,
                    locked_ns,
                    handle_ns,
                    eoi_ns,
                    exit_ns,
                    notify_ns,
                    recheck_ns,
                }
            },
        )
}

/// SN changes by another CPU. Each is independent (setting SN twice, or clearing it
/// while clear, is allowed and harmless), so shrinking can drop any one of them.
fn sn_strategy() -> impl Strategy<Value = Vec<SnChange>> {
    prop::collection::vec(
        (0u64..3_000, any::<bool>()).prop_map(|(at_ns, set)| SnChange { at_ns, set }),
        0..4,
    )
}

/// Costs come first in the tuple so they shrink first (towards zero, which makes the
/// timeline simple), then posts, then SN changes: proptest shrinks a tuple's parts in
/// order, and removing a post or an SN change is easiest once the rest is small.
fn schedule_strategy() -> impl Strategy<Value = TimedSchedule> {
    (
        costs_strategy(),
        prop::collection::vec(post_strategy(), 1..8),
        sn_strategy(),
    )
        .prop_map(|(costs, posts, sn_changes)| TimedSchedule {
            posts,
            sn_changes,
            costs,
        })
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // tests/explore_proptest.proptest-regressions, beside this file.
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(96))]

    /// Every correct variant keeps every invariant on every generated schedule.
    #[test]
    fn correct_variants_hold_every_invariant_on_any_schedule(
        schedule in schedule_strategy(),
        variant in 0..CORRECT.len(),
        max_loops in 0u32..4,
    ) {
        let h: Arc<dyn PirHandler> = variant_by_name(CORRECT[variant], max_loops).unwrap().into();
        let run = run_timed(&h, &schedule);
        prop_assert!(run.passed(), "{}:\n{}", CORRECT[variant], run);
        prop_assert!(run.handled <= schedule.posts.len() as u64);
        let last_sn = schedule.sn_changes.iter().max_by_key(|c| c.at_ns);
        if last_sn.is_none_or(|c| !c.set) {
            // SN ends clear, so nothing is parked: something was handled.
            prop_assert!(run.handled > 0, "nothing handled:\n{}", run);
        }
    }

    /// The KVM order, explored the same way (its exhaustive verdict is a pass too).
    #[test]
    fn kvm_clear_on_first_holds_every_invariant_on_any_schedule(schedule in schedule_strategy()) {
        let h: Arc<dyn PirHandler> = variant_by_name("kvm-clear-on-first", 3).unwrap().into();
        let run = run_timed(&h, &schedule);
        prop_assert!(run.passed(), "{}", run);
    }
}

/// Runs the property "no invariant fails" for `variant` with a fixed seed; returns
/// the minimal failing schedule proptest shrank to, if any case failed.
fn shrunk_failure(variant: &str, cases: u32) -> Option<TimedSchedule> {
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let h: Arc<dyn PirHandler> = variant_by_name(variant, 3).unwrap().into();
    let result = runner.run(&schedule_strategy(), |schedule| {
        let run = run_timed(&h, &schedule);
        if run.passed() {
            Ok(())
        } else {
            Err(TestCaseError::fail(run.to_string()))
        }
    });
    match result {
        Ok(()) => None,
        Err(proptest::test_runner::TestError::Fail(_, schedule)) => Some(schedule),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn broken_variants_fail_and_shrink_to_a_minimal_schedule() {
    for variant in ["no-final-recheck", "xchg-word0"] {
        let shrunk = shrunk_failure(variant, 512)
            .unwrap_or_else(|| panic!("{variant}: no failing schedule found"));
        let h: Arc<dyn PirHandler> = variant_by_name(variant, 3).unwrap().into();
        // proptest's shrinking ends in a local minimum; `minimize` finishes the job.
        let s = minimize(&h, &shrunk);
        let run = run_timed(&h, &s);
        assert!(!run.passed());
        assert!(s.posts.len() <= shrunk.posts.len());
        assert!(s.sn_changes.is_empty(), "{variant}: {s:?}");
        // One post strands xchg-word0's word-1 vector. no-final-recheck needs one post
        // to start the handler and one in its window, plus (at the times this seed
        // finds) one more whose handler call stretches the run until the window.
        let most = if variant == "xchg-word0" { 1 } else { 3 };
        assert!(s.posts.len() <= most, "{variant}: {s:?}\n{run}");
        for i in 0..s.posts.len() {
            let mut t = s.clone();
            t.posts.remove(i);
            assert!(run_timed(&h, &t).passed(), "{variant}: 1-minimal");
        }
    }
}

// Regressions: minimal failing schedules, kept literally.

fn post(at_ns: u64, vector: u8) -> TimedPost {
    TimedPost {
        at_ns,
        vector: Vector(vector),
        urg: false,
    }
}

const ZERO_COSTS: OpCosts = OpCosts {
    entry_ns: 0,
    load_ns: 0,
    locked_ns: 0,
    handle_ns: 0,
    eoi_ns: 0,
    exit_ns: 0,
    notify_ns: 0,
    recheck_ns: 0,
};

/// xchg-word0 strands any vector above 63 even without a race: one post suffices.
#[test]
fn regression_xchg_word0_single_post_to_word_one() {
    let s = TimedSchedule {
        posts: vec![post(0, 0x61)],
        sn_changes: vec![],
        costs: ZERO_COSTS,
    };
    let run = run_timed(&handler("xchg-word0", 3), &s);
    let v = run.violation.expect("caught");
    assert_eq!(v.violation.invariant, Invariant::NothingLost);
    for name in CORRECT {
        assert!(run_timed(&handler(name, 3), &s).passed());
    }
}

/// no-final-recheck: a second post lands after the last empty harvest round and
/// before ON is cleared. Only locked operations cost time here: the first round's
/// exchange completes at 10 ns, the empty round's loads at 10 ns, the clear of ON at
/// 20 ns; the post at 15 ns falls in between.
#[test]
fn regression_no_final_recheck_post_during_clear_on() {
    let s = TimedSchedule {
        posts: vec![post(0, 0x21), post(15, 0x21)],
        sn_changes: vec![],
        costs: OpCosts {
            locked_ns: 10,
            ..ZERO_COSTS
        },
    };
    let run = run_timed(&handler("no-final-recheck", 3), &s);
    let v = run.violation.as_ref().expect("caught");
    assert_eq!(v.violation.invariant, Invariant::NothingLost, "{run}");
    for name in CORRECT {
        let run = run_timed(&handler(name, 3), &s);
        assert!(run.passed(), "{name}:\n{run}");
    }
}

/// SN set, a post suppressed under it, SN cleared: the clearing CPU's recheck must
/// notify, and the post is handled.
#[test]
fn regression_post_suppressed_by_sn_is_delivered_after_the_clear() {
    let s = TimedSchedule {
        posts: vec![post(5, 0xa1)],
        sn_changes: vec![
            SnChange {
                at_ns: 0,
                set: true,
            },
            SnChange {
                at_ns: 10,
                set: false,
            },
        ],
        costs: ZERO_COSTS,
    };
    for name in CORRECT {
        let run = run_timed(&handler(name, 3), &s);
        assert!(run.passed(), "{name}:\n{run}");
        assert_eq!(run.handled, 1, "{name}");
    }
}

// ---------------------------------------------------------------------------------
// State machine: the PID line plus the IOMMU's remapper, against a reference model.

/// Handles 0..4 are posted IRTEs; handle 3 has URG set.
const IRTES: [(u8, bool); 4] = [(0x21, false), (0x61, false), (0xe1, false), (0x41, true)];
const PDA: u64 = 0x1_0000_0000;

#[derive(Clone, Debug)]
enum Transition {
    /// A device writes an MSI with this IRTE handle.
    Msi(u16),
    SetSn,
    ClearSn,
    /// The CPU exchanges a PIR word with 0.
    Xchg(usize),
    ClearOn,
    TestAndClearOn,
}

fn transition() -> impl Strategy<Value = Transition> {
    prop_oneof![
        4 => (0u16..4).prop_map(Transition::Msi),
        1 => Just(Transition::SetSn),
        1 => Just(Transition::ClearSn),
        2 => (0usize..4).prop_map(Transition::Xchg),
        1 => Just(Transition::ClearOn),
        1 => Just(Transition::TestAndClearOn),
    ]
}

/// The reference: pending vectors as a set, ON and SN as booleans, a notification
/// count, written from the VT-d rule without looking at pid-model.
#[derive(Default)]
struct Reference {
    pending: BTreeSet<u8>,
    on: bool,
    sn: bool,
    notifications: u32,
}

impl Reference {
    fn post(&mut self, vector: u8, urg: bool) -> bool {
        self.pending.insert(vector);
        let notify = !self.on && (urg || !self.sn);
        if notify {
            self.on = true;
            self.notifications += 1;
        }
        notify
    }
    fn xchg(&mut self, word: usize) -> u64 {
        let mut out = 0;
        self.pending.retain(|v| {
            let in_word = usize::from(*v / 64) == word;
            if in_word {
                out |= 1u64 << (v % 64);
            }
            !in_word
        });
        out
    }
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn pid_and_iommu_match_the_reference_model(
        steps in prop::collection::vec(transition(), 1..60),
    ) {
        let mut remapper = InterruptRemapper::new(RemapConfig {
            table_entries: 16,
            ..RemapConfig::default()
        })
        .unwrap();
        for (i, (vector, urg)) in IRTES.iter().enumerate() {
            let irte = Irte::posted(PostedIrte {
                vector: Vector(*vector),
                pda: PDA,
                urg: *urg,
                fpd: false,
                source: SourceCheck::NONE,
            })
            .unwrap();
            remapper.set_irte(i as u32, irte).unwrap();
        }
        let cpu = Agent::core(0, 0);
        let iommu = Agent::iommu(0);
        let mut line = PidLine::with_desc(PiDesc::new(Vector(0xeb), 0), 0);
        let mut reference = Reference::default();
        let mut notifications = 0;
        for (t, step) in steps.iter().enumerate() {
            match step {
                Transition::Msi(handle) => {
                    let out = remapper.remap(SimTime::ZERO, &encode_remappable(*handle, false, 0), 0);
                    let RemapAction::Post { pda, vector, urg, .. } = out.action else {
                        panic!("posted IRTE remapped to {:?}", out.action);
                    };
                    prop_assert_eq!(pda, PDA);
                    let r = line
                        .perform(iommu, LineOp::IommuPost { vector, urg })
                        .post()
                        .unwrap();
                    let expect = reference.post(vector.0, urg);
                    prop_assert_eq!(r.notification.is_some(), expect, "step {}", t);
                    notifications += u32::from(r.notification.is_some());
                }
                Transition::SetSn | Transition::ClearSn => {
                    let set = matches!(step, Transition::SetSn);
                    let op = if set {
                        LineOp::LockedBitSet { bit: SN_BIT }
                    } else {
                        LineOp::LockedBitClear { bit: SN_BIT }
                    };
                    let _ = line.perform(cpu, op);
                    reference.sn = set;
                }
                Transition::Xchg(word) => {
                    let got = line
                        .perform(cpu, LineOp::Xchg { word: *word, value: 0 })
                        .word()
                        .unwrap();
                    prop_assert_eq!(got, reference.xchg(*word), "step {}", t);
                }
                Transition::ClearOn => {
                    let _ = line.perform(cpu, LineOp::LockedBitClear { bit: ON_BIT });
                    reference.on = false;
                }
                Transition::TestAndClearOn => {
                    let was = line
                        .perform(cpu, LineOp::LockedTestAndClear { bit: ON_BIT })
                        .bit()
                        .unwrap();
                    prop_assert_eq!(was, reference.on, "step {}", t);
                    reference.on = false;
                }
            }
            // After every transition the line agrees with the reference.
            let d = line.desc();
            let pending: BTreeSet<u8> = d.pir().iter().map(|v| v.0).collect();
            prop_assert_eq!(&pending, &reference.pending, "step {}", t);
            prop_assert_eq!(d.on(), reference.on, "step {}", t);
            prop_assert_eq!(d.sn(), reference.sn, "step {}", t);
            prop_assert_eq!(notifications, reference.notifications);
            prop_assert_eq!(d.nv(), Vector(0xeb), "a post never changes NV");
            prop_assert!(!d.reserved_bits_set());
        }
    }
}

/// The timed schedules run on the system itself: its report counts the injected posts
/// as MSIs, and the handler ran on its CPU 0.
#[test]
fn timed_schedules_run_on_the_system() {
    use irqsim::explore::timed::timed_scenario;
    use irqsim::system::System;
    let s = TimedSchedule {
        posts: vec![post(0, 0x21), post(15, 0x61)],
        sn_changes: vec![],
        costs: OpCosts::default(),
    };
    let run = run_timed(&handler("copy-then-xchg", 3), &s);
    assert!(run.passed(), "{run}");
    assert_eq!(run.handled, 2);
    assert!(run.log.iter().any(|l| l.contains("iommu")), "{run}");
    // The same machine by hand: two posts, both handled, the balance closed.
    let mut sys = System::for_injection(
        &timed_scenario(&s.costs),
        variant_by_name("copy-then-xchg", 3).unwrap(),
    )
    .unwrap();
    for p in &s.posts {
        sys.inject_post(
            SimTime::ZERO + irqsim::sim_core::Duration::from_ns(p.at_ns),
            0,
            p.vector,
            false,
        )
        .unwrap();
    }
    while sys.step().is_some() {}
    let r = sys.report();
    assert_eq!((r.msis.generated, r.msis.handled), (2, 2), "{:?}", r.msis);
    assert!(r.msis.balanced);
    assert_eq!(r.cpu[0].interrupts_taken as u32, run.entries);
}

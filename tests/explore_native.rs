//! The handler variants' own code on real atomics: poster threads set a PIR bit and
//! then test-and-set ON; this thread handles. Bounded by post counts and by time, so
//! the whole file runs in a few seconds on two cores.

use std::sync::Mutex;
use std::time::Duration;

use irqsim::explore::native::{run_native, NativeConfig, NativeReport};
use irqsim::kernel::posted_msi::variant_by_name;
use irqsim::sim_core::Vector;

fn config() -> NativeConfig {
    NativeConfig {
        rounds: 10_000,
        time_limit: Duration::from_millis(300),
        ..NativeConfig::default()
    }
}

/// The tests of this file run one at a time: run side by side on two cores, their
/// threads would only time-slice, and a descheduled handler thread sees no race.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run_with(name: &str, config: &NativeConfig) -> NativeReport {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let h = variant_by_name(name, 3).unwrap();
    run_native(h.as_ref(), config)
}

fn run(name: &str) -> NativeReport {
    run_with(name, &config())
}

fn assert_consistent(r: &NativeReport) {
    assert!(r.posts > 0 && r.rounds > 0, "{r:?}");
    assert!(r.merged <= r.posts, "{r:?}");
    assert!(r.notifications >= 1, "{r:?}");
    assert_eq!(
        r.handler_entries, r.notifications,
        "one entry per notification"
    );
    assert!(r.elapsed_s < 5.0, "bounded: {r:?}");
}

#[test]
fn correct_variants_lose_nothing_on_real_atomics() {
    for name in [
        "copy-then-xchg",
        "rfc",
        "interleaved",
        "per-word-dispatch",
        "kvm-clear-on-first",
        "plain-clear-on-mfence",
    ] {
        let r = run(name);
        assert_consistent(&r);
        assert!(r.nothing_lost(), "{name}: {r:?}");
        // Exactly one handler call per interrupt that set its PIR bit.
        assert_eq!(r.handled, r.posts - r.merged, "{name}: {r:?}");
    }
}

#[test]
fn xchg_word0_is_caught_on_real_atomics() {
    // Its bug needs no race: any post above vector 63 is never cleared from PIR.
    let r = run("xchg-word0");
    assert_consistent(&r);
    assert!(!r.nothing_lost(), "{r:?}");
}

#[test]
fn no_final_recheck_is_counted_whatever_the_timing() {
    // Whether its window (between the last harvest and the clear of ON) is hit depends
    // on the host's timing, so only the accounting is asserted: every interrupt is
    // handled or found stranded at the end of its round.
    let r = run("no-final-recheck");
    assert_consistent(&r);
    assert_eq!(r.handled + r.stranded_vectors, r.posts - r.merged, "{r:?}");
    assert_eq!(r.lost, r.stranded_vectors, "{r:?}");
    eprintln!(
        "no-final-recheck on real atomics: {} rounds, {} posts, {} stranded rounds",
        r.rounds, r.posts, r.stranded_rounds
    );
}

#[test]
fn one_poster_one_post_per_round_matches_exactly() {
    let r = run_with(
        "copy-then-xchg",
        &NativeConfig {
            posters: 1,
            rounds: 500,
            posts_per_round: 1,
            max_pause_spins: 0,
            ..config()
        },
    );
    assert!(r.nothing_lost(), "{r:?}");
    // Alone, every round's post notifies and is handled by its own entry.
    assert_eq!(
        (r.merged, r.notifications, r.handled),
        (0, r.posts, r.posts)
    );
}

/// Posts to PIR word 0 only, at short pauses: the final harvest reads word 0 first,
/// right after the plain store of ON=0, so that is where the store buffer's window is.
fn word0_race_config() -> NativeConfig {
    NativeConfig {
        rounds: 50_000_000,
        time_limit: Duration::from_secs(20),
        max_pause_spins: 64,
        vectors: vec![Vector(0x21), Vector(0x22), Vector(0x23)],
        stop_on_loss: true,
        ..NativeConfig::default()
    }
}

#[test]
fn plain_clear_on_loses_an_interrupt_on_real_x86_stores() {
    // The loss needs x86's store-to-load reordering: the plain store of ON=0 still
    // sits in this core's store buffer while the final harvest reads PIR word 0 as
    // empty, a poster sets the bit and finds ON still set, so nobody is notified.
    // The driver makes the store and the next load back to back (native.rs), and the
    // run stops at the first round that strands a vector.
    let r = run_with("plain-clear-on", &word0_race_config());
    assert_eq!(r.handled + r.stranded_vectors, r.posts - r.merged, "{r:?}");
    assert!(
        r.stranded_rounds >= 1 && r.lost >= 1,
        "no loss in {} rounds ({:.1} s): {r:?}",
        r.rounds,
        r.elapsed_s
    );
    eprintln!(
        "plain-clear-on on real atomics: first loss after {} rounds, {:.2} s",
        r.rounds, r.elapsed_s
    );
}

#[test]
fn the_mfence_repair_loses_nothing_where_plain_clear_on_does() {
    // A round count, not a time: a loaded machine runs fewer rounds a second (713 in
    // 2 s once, with other builds running), and the evidence is in the rounds. The
    // time limit only guards against a hang; plain-clear-on loses within a few hundred.
    let r = run_with(
        "plain-clear-on-mfence",
        &NativeConfig {
            rounds: 2_000,
            time_limit: Duration::from_secs(120),
            ..word0_race_config()
        },
    );
    assert!(r.nothing_lost(), "{r:?}");
    assert!(!r.stopped_by_time && r.rounds == 2_000, "{r:?}");
}

//! PIR-handling variants in the timed engine: costs come from the operations, never
//! from a variant's name, and the experiments built on them behave as the mechanism
//! says they must.

use irqsim::experiments::{coalesce_loops, pir_variants};
use irqsim::kernel::posted_msi::{handle_pending_pir_copy_then_xchg, mainline_skeleton};
use irqsim::kernel::{CpuPort, HandlerFuture, LoopBound, PirHandler};
use irqsim::System;

/// The mainline handler under another name, written from the public helpers.
struct Renamed;

impl PirHandler for Renamed {
    fn name(&self) -> &str {
        "my-mainline-copy"
    }
    fn run(&self, cpu: CpuPort) -> HandlerFuture {
        Box::pin(mainline_skeleton(
            cpu,
            LoopBound::Max(3),
            |cpu| async move { handle_pending_pir_copy_then_xchg(&cpu).await },
        ))
    }
}

#[test]
fn no_cost_depends_on_the_variant_name() {
    for inflight in [4, 64] {
        let sc = pir_variants::scenario("copy-then-xchg", &[0x21, 0x61, 0xa1, 0xe1], inflight, 3);
        let builtin = System::run_scenario(&sc).unwrap();
        let mut sys = System::with_handler(&sc, Box::new(Renamed)).unwrap();
        sys.run_to_end();
        let mine = sys.report();
        assert_eq!(mine.variant, "my-mainline-copy");
        let strip = |r: &irqsim::Report| {
            let mut r = r.without_wall_clock();
            r.variant = String::new();
            serde_json::to_string(&r).unwrap()
        };
        assert_eq!(strip(&builtin), strip(&mine), "inflight {inflight}");
    }
}

#[test]
fn pir_variants_rows_follow_the_mechanism() {
    let out = pir_variants::run(1);
    let rows = &out.rows;
    assert_eq!(
        rows.len(),
        pir_variants::VARIANTS.len()
            * pir_variants::CASES.len()
            * pir_variants::TOTAL_INFLIGHT.len()
    );
    for key in [
        "variant",
        "vectors",
        "irq_rate_mps",
        "notifications_per_irq",
        "cpu_l1d_misses_per_notification",
        "xchg_per_notification",
    ] {
        assert!(rows.iter().all(|r| r.get(key).is_some()), "missing {key}");
    }
    let row = |variant: &str, vectors: u64, inflight: u64| {
        rows.iter()
            .find(|r| {
                r["variant"] == variant && r["vectors"] == vectors && r["inflight"] == inflight
            })
            .unwrap()
    };
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap();
    // rfc exchanges all four words every round; mainline exchanges only non-empty ones.
    let rfc = row("rfc", 1, 4);
    let mainline = row("copy-then-xchg", 1, 4);
    assert!(f(rfc, "xchg_per_notification") >= 4.0);
    assert!(f(mainline, "xchg_per_notification") < f(rfc, "xchg_per_notification"));
    // The baseline takes one interrupt per handler call and touches no descriptor.
    let base = row("remapped", 4, 64);
    assert_eq!(f(base, "notifications_per_irq"), 1.0);
    assert_eq!(f(base, "xchg_per_notification"), 0.0);
    // With four vectors posted mode coalesces: fewer entries than handler calls.
    assert!(f(row("copy-then-xchg", 4, 64), "notifications_per_irq") < 0.5);
    // Only the broken variant is flagged, and the output says so.
    for r in rows {
        assert_eq!(r["broken"] == true, r["variant"] == "no-final-recheck");
    }
    assert!(out
        .notes
        .iter()
        .any(|n| n.contains("no-final-recheck") && n.contains("BROKEN")));
}

#[test]
fn more_coalescing_loops_mean_fewer_notifications_at_a_high_rate() {
    let out = coalesce_loops::run(1);
    let high = *coalesce_loops::RATES_MPS.last().unwrap();
    let notif = |loops: u64| {
        out.rows
            .iter()
            .find(|r| r["max_loops"] == loops && r["rate_mps"].as_f64() == Some(high))
            .unwrap()["notifications_per_msi"]
            .as_f64()
            .unwrap()
    };
    assert!(notif(8) < notif(1));
    assert!(
        notif(0) <= notif(8),
        "unbounded {} vs 8 {}",
        notif(0),
        notif(8)
    );
    assert_eq!(
        out.rows.len(),
        coalesce_loops::MAX_LOOPS.len() * coalesce_loops::RATES_MPS.len()
    );
}

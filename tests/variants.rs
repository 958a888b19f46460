//! PIR-handling variants in the timed engine: costs come from the operations, never
//! from a variant's name, and the experiments built on them behave as the mechanism
//! says they must.

mod common;

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
    for devices in [1, 2] {
        let mut sc = pir_variants::scenario("copy-then-xchg", devices, 3);
        sc.duration_us = 300.0;
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
        assert_eq!(strip(&builtin), strip(&mine), "{devices} DSA devices");
    }
}

#[test]
fn pir_variants_rows_follow_the_mechanism() {
    let out = pir_variants::run(1);
    let rows = &out.rows;
    assert_eq!(
        rows.len(),
        pir_variants::VARIANTS.len() + pir_variants::TWO_DEVICE_VARIANTS.len()
    );
    for key in [
        "variant",
        "dsa_devices",
        "irq_rate_mps",
        "handler_calls_mps",
        "notifications_per_irq",
        "cpu_l1d_misses_per_notification",
    ] {
        assert!(rows.iter().all(|r| r.get(key).is_some()), "missing {key}");
    }
    let row = |variant: &str, devices: u64| {
        rows.iter()
            .find(|r| r["variant"] == variant && r["dsa_devices"] == devices)
            .unwrap()
    };
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap();
    // rfc exchanges all four words every round; mainline exchanges only non-empty ones.
    let rfc = row("rfc", 1);
    let mainline = row("copy-then-xchg", 1);
    assert!(f(rfc, "xchg_per_notification") >= 4.0);
    assert!(f(mainline, "xchg_per_notification") < f(rfc, "xchg_per_notification"));
    // The baseline touches no descriptor; each of its interrupts serves its MSIs.
    let base = row("remapped", 2);
    assert_eq!(f(base, "xchg_per_notification"), 0.0);
    assert!(f(base, "handler_calls_mps") <= f(base, "irq_rate_mps"));
    // Posted mode coalesces: far fewer notifications than MSIs.
    assert!(f(row("copy-then-xchg", 2), "notifications_per_irq") < 0.1);
    // A plain ON clear is mainline's work in a sequentially consistent System; the
    // fence adds CPU time, never a harvested MSI.
    let plain = row("plain-clear-on", 1);
    let fenced = row("plain-clear-on-mfence", 1);
    assert_eq!(
        f(plain, "xchg_per_notification"),
        f(mainline, "xchg_per_notification")
    );
    assert!(f(fenced, "irq_rate_mps") <= f(plain, "irq_rate_mps") * 1.001);
    // Only the broken variants are flagged, and the output says so for each.
    let broken = ["no-final-recheck", "xchg-word0", "plain-clear-on"];
    for r in rows {
        let name = r["variant"].as_str().unwrap();
        assert_eq!(r["broken"] == true, broken.contains(&name), "{r}");
    }
    for b in broken {
        assert!(
            out.notes
                .iter()
                .any(|n| n.contains(b) && n.contains("BROKEN")),
            "{b}"
        );
    }
}

#[test]
fn more_coalescing_loops_mean_fewer_notifications_at_saturation() {
    let out = coalesce_loops::run(1);
    for variant in coalesce_loops::VARIANTS {
        let notif = |loops: u64| {
            out.rows
                .iter()
                .find(|r| r["max_loops"] == loops && r["variant"] == *variant)
                .unwrap()["notifications_per_msi"]
                .as_f64()
                .unwrap()
        };
        assert!(notif(8) < notif(1), "{variant}");
        assert!(
            notif(0) <= notif(8),
            "{variant}: unbounded {} vs 8 {}",
            notif(0),
            notif(8)
        );
    }
    assert_eq!(
        out.rows.len(),
        coalesce_loops::MAX_LOOPS.len() * coalesce_loops::VARIANTS.len()
    );
}

/// The plain-store variants run in the timed system too: one plain ON clear and, for
/// the repair, one `mfence` per notification, each charged from the cost table.
#[test]
fn plain_store_variants_run_in_the_system_with_their_fence_priced() {
    let run = |variant: &str, mfence_cycles: f64| {
        let mut sc = common::dsa_scenario("posted", 2e6, 2, 200.0, 7);
        sc.variant = variant.into();
        sc.costs.cpu.mfence_cycles = mfence_cycles;
        let r = irqsim::System::run_scenario(&sc).unwrap();
        assert!(r.msis.balanced, "{variant}: {:?}", r.msis);
        r
    };
    let plain = run("plain-clear-on", 33.0);
    let c = &plain.cpu[0];
    assert_eq!(c.fences, 0);
    // One ON clear per notification (the last entry may still be running at the end).
    assert!(
        c.on_clears > 0 && c.interrupts_taken - c.on_clears <= 1,
        "{c:?}"
    );
    let fenced = run("plain-clear-on-mfence", 33.0);
    let slow = run("plain-clear-on-mfence", 1033.0);
    let (f, s) = (&fenced.cpu[0], &slow.cpu[0]);
    assert!(f.fences > 0 && f.interrupts_taken - f.fences <= 1, "{f:?}");
    // At 2 GHz, 1000 more cycles per fence are 500 ns more of descriptor time each
    // (the schedules differ once a fence is slower, so per fence of that run).
    let per_fence = |c: &irqsim::report::CpuReport| c.pid_access_ns / c.fences as f64;
    assert!(
        per_fence(s) - per_fence(f) > 400.0,
        "{} vs {}",
        per_fence(s),
        per_fence(f)
    );
}

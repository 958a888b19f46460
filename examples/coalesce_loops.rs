//! How MAX_POSTED_MSI_COALESCING_LOOP trades notifications for latency.
//!
//! - one CPU, four DSA queues (Poisson), posted MSI, mainline handler;
//! - MAX_LOOPS 1..8 and unbounded (0), at a moderate and a high rate.
//!
//! ```text
//!  notification ─▶ [harvest]x(MAX_LOOPS-1 while PIR non-empty) ─▶ clear ON ─▶ harvest ─▶ EOI
//! ```
//!
//! Run with `cargo run --release --example coalesce_loops`. Figures come from the model.

use irqsim::experiments::coalesce_loops;

fn main() {
    let out = coalesce_loops::run(1);
    print!("{}", out.to_table());
    // More loops can only keep ON set longer, so notifications per MSI never rise
    // much as MAX_LOOPS grows at the high rate.
    let high: Vec<&serde_json::Value> = out
        .rows
        .iter()
        .filter(|r| r["rate_mps"].as_f64() == coalesce_loops::RATES_MPS.last().copied())
        .collect();
    let first = high.first().unwrap()["notifications_per_msi"]
        .as_f64()
        .unwrap();
    let unbounded = high.last().unwrap()["notifications_per_msi"]
        .as_f64()
        .unwrap();
    assert!(
        unbounded < first,
        "unbounded {unbounded} vs MAX_LOOPS=1 {first}"
    );
}

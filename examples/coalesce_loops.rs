//! How MAX_POSTED_MSI_COALESCING_LOOP trades notifications for latency.
//!
//! - seed 000's DSA test 1 at saturation: one WQ of 512 B fills kept full, one vector
//!   on one CPU, posted MSI, the RFC's handler and mainline;
//! - MAX_LOOPS 1..6, 8 and unbounded (0).
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
    // More loops keep ON set longer at saturation, so the mainline handler sends fewer
    // notifications per MSI unbounded than with MAX_LOOPS 1.
    let high: Vec<&serde_json::Value> = out
        .rows
        .iter()
        .filter(|r| r["variant"] == "copy-then-xchg")
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

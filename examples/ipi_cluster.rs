//! Seed 003's microbenchmark: `flush_tlb_others()` from a CPU of socket 0 to the 20
//! logical CPUs of socket 1 on Westmere-EX (4 sockets x 10 cores x 2 threads), before
//! and after the x2APIC cluster patch, with Linux 2.6.38's shootdown and today's.
//!
//! ```text
//!  socket 0                     socket 1 (IDs 0x20-0x33)
//!  CPU 0 ──ICR x20 (before) / x2 (after)──▶ cluster 2 [16 CPUs]  cluster 3 [4]
//!        ◀──── polls flush_state; each target clears its bit (LOCK BTR, one line) ────
//! ```
//!
//! Run with `cargo run --release --example ipi_cluster`. Figures come from the model.

use irqsim::experiments::ipi_cluster;

fn main() {
    let out = ipi_cluster::run(1);
    print!("{}", out.to_table());
    let row = |kernel: &str, mode: &str| {
        out.rows
            .iter()
            .find(|r| r["set"] == "socket1" && r["kernel"] == kernel && r["mode"] == mode)
            .unwrap_or_else(|| panic!("no row {kernel} {mode}"))
    };
    let cycles = |r: &serde_json::Value, k: &str| r[k].as_u64().unwrap();
    let (pre, post) = (
        row("flush-tlb-others-2011", "cluster-per-cpu"),
        row("flush-tlb-others-2011", "cluster"),
    );
    // "2 batches of grouped IPI's vs 20 serialized (at least the sending part)".
    assert_eq!(
        (cycles(pre, "icr_writes"), cycles(post, "icr_writes")),
        (20, 2)
    );
    assert!(cycles(post, "sender_cycles") < cycles(pre, "sender_cycles"));
    println!(
        "2.6.38 flush_tlb_others, per-CPU send / per-cluster send: {:.2}x (seed 003: 3x)",
        cycles(pre, "sender_cycles") as f64 / cycles(post, "sender_cycles") as f64
    );
    // Today's call pays a CSD per target on top of the IPIs.
    let today = row("smp-call-function-many", "cluster");
    assert!(cycles(today, "sender_enqueue_cycles") > cycles(post, "sender_enqueue_cycles"));
}

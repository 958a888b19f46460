//! A TLB-shootdown-like cross call from socket 0 to socket 1, x2APIC physical vs
//! cluster mode.
//!
//! - 2 sockets × 20 cores × 2 threads, x2APIC IDs packed as firmware assigns them;
//! - the sender (CPU 0) queues a call per target, sends the IPIs, and spins until
//!   every target has run the function and acknowledged;
//! - physical mode writes ICR once per target, cluster mode once per x2APIC cluster.
//!
//! ```text
//!  socket 0                     socket 1 (IDs 0x40-0x67)
//!  CPU 0 ──ICR──▶ fabric ──▶ cluster 4 [16 CPUs]  cluster 5 [16]  cluster 6 [8]
//!        ◀──────── csd_unlock seen (cache line, cross socket) ────────────────
//! ```
//!
//! Run with `cargo run --release --example ipi_cluster`. Figures come from the model.

use irqsim::experiments::ipi_cluster;

fn main() {
    let out = ipi_cluster::run(1);
    print!("{}", out.to_table());
    let row = |set: &str, mode: &str, targets: u64| {
        out.rows
            .iter()
            .find(|r| r["set"] == set && r["mode"] == mode && r["targets"] == targets)
            .unwrap_or_else(|| panic!("no row {set} {mode} {targets}"))
    };
    let (phys, clus) = (
        row("socket1", "physical", 40),
        row("socket1", "cluster", 40),
    );
    // One ICR write per target vs one per cluster (socket 1 spans three clusters).
    assert_eq!(phys["icr_writes"], 40);
    assert_eq!(clus["icr_writes"], 3);
    let cycles = |r: &serde_json::Value, k: &str| r[k].as_u64().unwrap();
    assert!(cycles(clus, "sender_send_cycles") < cycles(phys, "sender_send_cycles"));
    assert!(cycles(clus, "sender_cycles") < cycles(phys, "sender_cycles"));
    // With one target both modes write ICR once.
    assert_eq!(
        cycles(row("sweep", "physical", 1), "icr_writes"),
        cycles(row("sweep", "cluster", 1), "icr_writes")
    );
}

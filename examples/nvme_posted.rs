//! Seed 000's NVMe test: four Gen5 drives on one x16 stack of a Sapphire Rapids
//! socket, fio-like jobs (8 per drive, iodepth 64), posted MSI on and off.
//!
//! ```text
//!  jobs (CPU i) ─submit─▶ nvme d ─[CQE][MSI]─▶ root port d ─▶ IOMMU ─┬─ posted: PID(cpu), retires at the update
//!                                                   ▲                 └─ remapped: socket's delivery path (shared),
//!                                                   └── later CQEs wait behind the MSI      retires when handed over
//! ```
//!
//! Run with `cargo run --release --example nvme_posted`. Figures come from the model.

use irqsim::experiments::{nvme_posted, ExperimentCtx};
use irqsim::{DeliveryMode, System};

fn main() {
    let ctx = ExperimentCtx::new(1);
    let mut iops = Vec::new();
    for mode in [DeliveryMode::Posted, DeliveryMode::Remapped] {
        let r = System::run_scenario(&nvme_posted::scenario(mode, 4, 1, &ctx)).unwrap();
        let t = &r.io.nvme_total;
        println!(
            "{:>8}: {:.2} M IOPS, {:.3} interrupts/IO, p99 {:.1} us",
            mode.as_str(),
            t.iops / 1e6,
            r.interrupts_taken as f64 / t.reaped.max(1) as f64,
            t.latency_us.p99
        );
        assert!(r.msis.balanced);
        assert_eq!(
            t.submitted,
            t.reaped + t.outstanding,
            "every I/O accounted for"
        );
        iops.push(t.iops);
    }
    // The remapped MSIs hold each drive's port while the socket's delivery path is
    // busy; posted ones retire at the descriptor update.
    assert!(
        iops[0] > iops[1],
        "posted {} vs remapped {}",
        iops[0],
        iops[1]
    );
    println!("(model output, seed 1)");
}

//! Posted vs remapped MSI delivery on one CPU, at one offered rate.
//!
//! - four DSA work queues, each on its own vector, all aimed at CPU 0;
//! - posted mode: every MSI sets a PIR bit; one notification per ON 0->1 transition;
//! - remapped mode: every MSI is an interrupt of its own vector.
//!
//! ```text
//!  dsa-wq0..3 ──MSI──▶ IOMMU ──posted──▶ PID(CPU0) ──ON 0→1──▶ notify 0xeb ──▶ CPU0 demux
//!                           └─remapped─▶ fabric ──▶ LAPIC IRR(0x21..0x24) ──▶ CPU0, one IRQ each
//! ```
//!
//! Run with `cargo run --release --example posted_vs_remapped [RATE_MPS]`.
//! The figures come from the model and its cost tables, not from hardware.

use irqsim::experiments::posted_vs_remapped::scenario;
use irqsim::{DeliveryMode, System};

fn main() {
    let rate_mps: f64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("RATE_MPS must be a number"))
        .unwrap_or(3.0);
    let posted = System::run_scenario(&scenario(DeliveryMode::Posted, rate_mps, 1)).unwrap();
    let remapped = System::run_scenario(&scenario(DeliveryMode::Remapped, rate_mps, 1)).unwrap();
    for r in [&posted, &remapped] {
        println!(
            "{:>8}: handled {:.2} M/s, {:.3} interrupts per MSI, CPU busy {:.0}%, p99 {:.0} ns",
            r.mode,
            r.handled_per_s / 1e6,
            r.interrupts_taken as f64 / r.msis.generated as f64,
            r.cpu[0].busy_frac * 100.0,
            r.latency_ns.p99
        );
        assert!(r.msis.balanced, "every MSI is accounted for");
    }
    // Posted mode never takes more interrupts than remapped mode for the same MSIs.
    assert!(
        posted.interrupts_taken as f64 / posted.msis.generated as f64
            <= remapped.interrupts_taken as f64 / remapped.msis.generated as f64
    );
    println!("(figures from the irqsim model, seed 1)");
}

//! Four NVMe drives near their IOPS ceiling, with posted MSI on and off.
//!
//! ```text
//!  jobs (CPU i) ─submit─▶ nvme d queue q ─MSI─▶ IOMMU ─┬─ posted: PID(cpu) ─ON 0→1─▶ 0xeb ─▶ demux ─▶ nvme_irq
//!                                                      └─ remapped: ─▶ vector ─▶ nvme_irq
//! ```
//!
//! Run with `cargo run --release --example nvme_posted`. Figures come from the model.

use irqsim::experiments::nvme_posted;
use irqsim::{DeliveryMode, System};

fn main() {
    for mode in [DeliveryMode::Posted, DeliveryMode::Remapped] {
        let r = System::run_scenario(&nvme_posted::scenario(mode, 16, 1)).unwrap();
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
    }
    println!("(model output, seed 1)");
}

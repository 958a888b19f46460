//! One NIC RX queue with NAPI and interrupt throttling.
//!
//! ```text
//!  packets ─▶ RX ring ─(ITR)─▶ MSI ─▶ hardirq: napi_schedule ─▶ softirq poll (≤64) ─┬─ under budget: unmask
//!                                                                                  └─ at budget: poll again
//! ```
//!
//! Run with `cargo run --release --example nic_napi`. Figures come from the model.

use irqsim::experiments::nic_napi;
use irqsim::System;

fn main() {
    for itr_us in nic_napi::ITR_US {
        let r = System::run_scenario(&nic_napi::scenario(*itr_us, 1.0, 1)).unwrap();
        let q = &r.io.nics[0];
        println!(
            "ITR {itr_us:>2} us at 1 Mpps: {:.3} interrupts/packet, p99 {:.1} us, {} dropped",
            q.interrupts_per_packet, q.latency_us.p99, q.packets_dropped
        );
        assert!(r.msis.balanced);
        assert!(
            q.rx_polled + q.packets_dropped <= q.rx_packets,
            "no packet appears from nowhere"
        );
        if *itr_us > 0 {
            // Throttling: at most one interrupt per ITR interval.
            let max = r.sim_time_ns / 1e3 / *itr_us as f64 + 1.0;
            assert!(
                q.interrupts as f64 <= max,
                "{} interrupts > {max}",
                q.interrupts
            );
        }
    }
    println!("(model output, seed 1)");
}

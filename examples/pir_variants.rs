//! Every PIR-draining variant, plus one of your own, on one CPU fed by closed-loop
//! DSA work queues.
//!
//! - `pir-variants` experiment rows for the built-in variants;
//! - a user variant ("two-pass") written against the public `PirHandler` trait and run
//!   through the timed engine with `System::with_handler`, without changing irqsim.
//!
//! ```text
//!  dsa0 wq (closed loop) ──record, MSI──▶ IOMMU ──post──▶ PID line ◀── loads/xchg ── CPU0 handler
//!        ▲                                                              │ reap + resubmit
//!        └──────────────────────────── portal write ────────────────────┘
//! ```
//!
//! Run with `cargo run --release --example pir_variants`. Figures come from the model.

use irqsim::experiments::pir_variants;
use irqsim::kernel::posted_msi::{dispatch_pending, HandlerFuture, PirHandler};
use irqsim::kernel::CpuPort;
use irqsim::System;

/// A variant of our own: harvest with exchanges only (no loads), twice, then clear ON
/// and harvest once more, then EOI.
struct TwoPass;

impl PirHandler for TwoPass {
    fn name(&self) -> &str {
        "two-pass"
    }

    fn run(&self, cpu: CpuPort) -> HandlerFuture {
        Box::pin(async move {
            for _ in 0..2 {
                let mut copy = [0u64; 4];
                for (word, slot) in copy.iter_mut().enumerate() {
                    *slot = cpu.xchg_pir(word, 0).await;
                }
                dispatch_pending(&cpu, copy).await;
            }
            cpu.clear_on().await;
            let mut copy = [0u64; 4];
            for (word, slot) in copy.iter_mut().enumerate() {
                *slot = cpu.xchg_pir(word, 0).await;
            }
            dispatch_pending(&cpu, copy).await;
            cpu.eoi().await;
        })
    }
}

fn main() {
    let out = pir_variants::run(1);
    print!("{}", out.to_table());

    let scenario = pir_variants::scenario("copy-then-xchg", 2, 1);
    let mut sys = System::with_handler(&scenario, Box::new(TwoPass)).unwrap();
    sys.run_to_end();
    let r = sys.report();
    println!(
        "two-pass (user variant): {:.3} M handler calls/s, {:.2} xchg per notification, balanced: {}",
        r.cpu[0].handler_calls as f64 / (r.sim_time_ns * 1e-9) / 1e6,
        r.cpu[0].pir_xchgs as f64 / r.cpu[0].interrupts_taken.max(1) as f64,
        r.msis.balanced
    );
    assert_eq!(r.variant, "two-pass");
    assert!(r.msis.balanced);
    assert!(r.msis.handled > 0);
}

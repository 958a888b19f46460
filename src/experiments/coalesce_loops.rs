//! `coalesce-loops`: Linux's MAX_POSTED_MSI_COALESCING_LOOP from 1 to 8 and unbounded,
//! with the mainline handler, at a moderate and a high offered rate (the
//! posted-vs-remapped setup: one CPU, four DSA queues, Poisson arrivals).

use serde::Serialize;

use super::posted_vs_remapped;
use super::{ExperimentCtx, ExperimentOutput};
use crate::DeliveryMode;

/// MAX_LOOPS values; 0 means unbounded.
pub const MAX_LOOPS: &[u32] = &[1, 2, 3, 4, 5, 6, 7, 8, 0];
/// Offered aggregate rates, M MSIs/s: moderate, then high (near the model's
/// saturation with default costs).
pub const RATES_MPS: &[f64] = &[2.0, 5.0];

/// One point: a MAX_LOOPS value at an offered rate.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// MAX_POSTED_MSI_COALESCING_LOOP; 0 means unbounded.
    pub max_loops: u32,
    /// Offered aggregate MSI rate, millions per second.
    pub rate_mps: f64,
    /// MSIs handled per simulated second, millions.
    pub handled_mps: f64,
    /// Posted-interrupt notifications per generated MSI.
    pub notifications_per_msi: f64,
    /// 99th-percentile MSI latency (raised to handler start), ns.
    pub p99_latency_ns: f64,
    /// Median MSI latency (raised to handler start), ns.
    pub p50_latency_ns: f64,
    /// Fraction of simulated time CPU 0 was busy (0 to 1).
    pub cpu_busy_frac: f64,
}

/// Runs the experiment with `seed`.
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Runs the experiment in `ctx` (seed, optional trace).
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    let seed = ctx.seed;
    let mut rows = Vec::new();
    for &rate in RATES_MPS {
        for &max_loops in MAX_LOOPS {
            let mut sc = posted_vs_remapped::scenario(DeliveryMode::Posted, rate, seed);
            sc.max_loops = max_loops;
            sc.name = format!("coalesce-loops max_loops={max_loops} {rate} M/s");
            let r = ctx.run_point(&sc);
            rows.push(Row {
                max_loops,
                rate_mps: rate,
                handled_mps: r.handled_per_s / 1e6,
                notifications_per_msi: r.notifications.sent as f64 / r.msis.generated.max(1) as f64,
                p99_latency_ns: r.latency_ns.p99,
                p50_latency_ns: r.latency_ns.p50,
                cpu_busy_frac: r.cpu[0].busy_frac,
            });
        }
    }
    ExperimentOutput::new("coalesce-loops", seed, &rows)
}

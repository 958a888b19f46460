//! `coalesce-loops`: MAX_POSTED_MSI_COALESCING_LOOP on seed 000's saturated DSA test.
//!
//! The setup is `pir-variants` test 1 (one WQ of 512-byte memory fills kept full, one
//! vector, its interrupt on one CPU) at saturation, for MAX_LOOPS 1, 2, 3, 4, 5, 6, 8
//! and unbounded (0). The posted-MSI RFC's MaxLoop table (Nov 2023) was measured with
//! the RFC's own handler, so the `rfc` rows are the ones to set beside it; the
//! mainline handler's rows follow.

use serde::Serialize;

use super::pir_variants;
use super::{ExperimentCtx, ExperimentOutput};
use crate::Scenario;

/// MAX_LOOPS values; 0 means unbounded.
pub const MAX_LOOPS: &[u32] = &[1, 2, 3, 4, 5, 6, 8, 0];
/// Handlers compared: the one the RFC's table was measured with, then mainline.
pub const VARIANTS: &[&str] = &["rfc", "copy-then-xchg"];

/// One point: a handler with a MAX_LOOPS value.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// MAX_POSTED_MSI_COALESCING_LOOP; 0 means unbounded.
    pub max_loops: u32,
    /// Completed descriptors (= MSIs) per second, millions.
    pub irq_rate_mps: f64,
    /// Posted-interrupt notifications per MSI.
    pub notifications_per_msi: f64,
    /// 99th-percentile MSI latency (raised to handler start), ns, over the whole run.
    pub p99_latency_ns: f64,
    /// The notification handler.
    pub variant: String,
    /// Device-handler invocations per second, millions.
    pub handler_calls_mps: f64,
    /// Fraction of the measured time the interrupt CPU was busy.
    pub cpu_busy_frac: f64,
}

/// The scenario of one point.
pub fn scenario(variant: &str, max_loops: u32, seed: u64) -> Scenario {
    let mut sc = pir_variants::scenario(variant, 1, seed);
    sc.max_loops = max_loops;
    sc.name = format!("coalesce-loops {variant} max_loops={max_loops}");
    sc
}

/// Checks `--platform` and `--set` against every point.
pub fn check(ctx: &ExperimentCtx) -> Result<(), String> {
    ctx.check_points(&scenarios(ctx))
}

/// Every point's scenario, in row order.
pub fn scenarios(ctx: &ExperimentCtx) -> Vec<Scenario> {
    VARIANTS
        .iter()
        .flat_map(|v| MAX_LOOPS.iter().map(|&l| scenario(v, l, ctx.seed)))
        .collect()
}

/// Runs the experiment with `seed`.
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Runs the experiment in `ctx` (seed, platform, overrides, optional trace).
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    let mut rows = Vec::new();
    for variant in VARIANTS {
        for &max_loops in MAX_LOOPS {
            rows.push(point(ctx, variant, max_loops));
        }
    }
    let mut out = ExperimentOutput::new("coalesce-loops", ctx.seed, &rows);
    out.notes.push(
        "setup: pir-variants test 1 (one DSA WQ, 512 B fills kept full, one vector on one CPU); \
         the RFC's MaxLoop table was measured with the rfc handler"
            .into(),
    );
    out
}

/// One point's row.
pub fn point(ctx: &ExperimentCtx, variant: &str, max_loops: u32) -> Row {
    let sc = scenario(variant, max_loops, ctx.seed);
    let ramp = sim_core::Duration::from_secs_f64(pir_variants::RAMP_US * 1e-6);
    let (a, b) = ctx.run_point_after_ramp(&sc, ramp);
    let r = pir_variants::row(variant, 1, &a, &b);
    let msis = (b.msis.generated - a.msis.generated).max(1) as f64;
    Row {
        max_loops,
        irq_rate_mps: r.irq_rate_mps,
        notifications_per_msi: (b.notifications.sent - a.notifications.sent) as f64 / msis,
        p99_latency_ns: b.latency_ns.p99,
        variant: variant.to_string(),
        handler_calls_mps: r.handler_calls_mps,
        cpu_busy_frac: r.cpu_busy_frac,
    }
}

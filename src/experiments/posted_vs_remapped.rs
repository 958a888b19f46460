//! `posted-vs-remapped`: one CPU, four DSA work queues on four vectors, offered
//! aggregate MSI rates from 0.1 M/s to far past saturation, in posted and remapped mode.
//!
//! The question (posted-MSI RFC, 2023): how much interrupt overhead does coalescing
//! through the posted-interrupt descriptor save, and what does it cost in latency?
//! Runs on seed 000's Sapphire Rapids profile. Past saturation the APIC's fixed
//! priority serves the highest vector first, so the lowest (0x21) starves: its
//! backlog is a column of its own instead of being hidden inside `handled_mps`.

use serde::Serialize;

use super::{ExperimentCtx, ExperimentOutput};
use crate::system::scenario::{CpuConfig, DeviceConfig, DeviceKind};
use crate::{DeliveryMode, Scenario};
use devices::ArrivalProcess;

/// The platform.
pub const PLATFORM: &str = "spr";
/// Offered aggregate rates, M MSIs/s.
pub const RATES_MPS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 25.0, 30.0,
];
/// Vectors of the four queues (as Linux would hand out to one device's MSI-X entries).
pub const VECTORS: [u32; 4] = [0x21, 0x22, 0x23, 0x24];
/// Each point simulates long enough for about this many MSIs, and at least 2 ms.
const TARGET_MSIS: f64 = 20_000.0;

/// One point: a delivery mode at an offered rate.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// `posted` or `remapped`.
    pub mode: String,
    /// Offered aggregate MSI rate, millions per second.
    pub rate_mps: f64,
    /// MSIs handled per simulated second, millions.
    pub handled_mps: f64,
    /// Interrupts the CPU took per generated MSI.
    pub interrupts_per_msi: f64,
    /// Fraction of simulated time CPU 0 was busy (0 to 1).
    pub cpu_busy_frac: f64,
    /// Median MSI latency (raised to handler start), ns.
    pub p50_latency_ns: f64,
    /// 99th-percentile MSI latency (raised to handler start), ns.
    pub p99_latency_ns: f64,
    /// Posted-interrupt notifications per generated MSI (0 in remapped mode).
    pub notifications_per_msi: f64,
    /// Fraction of generated MSIs that merged with a pending one of the same vector.
    pub merged_frac: f64,
    /// MSIs neither handled nor dropped when the run ended.
    pub pending_at_end: u64,
    /// MSIs dropped, all reasons together.
    pub dropped: u64,
    /// MSIs of the lowest-priority vector (0x21) not yet handled at the end: pending
    /// at the CPU (PIR, IRR, in service) plus held back in its device.
    pub lowest_vector_backlog: u64,
    /// How long the oldest MSI still waiting at the CPU had waited when the run ended,
    /// ns; null when none waits. The latency percentiles count handled MSIs only, so
    /// past the peak, where vector 0x21 starves, this is the figure that grows.
    pub oldest_waiting_ns: Option<f64>,
}

/// The scenario of one point.
pub fn scenario(mode: DeliveryMode, rate_mps: f64, seed: u64) -> Scenario {
    let per_queue = rate_mps * 1e6 / VECTORS.len() as f64;
    let mut sc = Scenario {
        name: format!("posted-vs-remapped {} {rate_mps} M/s", mode.as_str()),
        seed,
        duration_us: (TARGET_MSIS / rate_mps).max(2000.0),
        mode,
        variant: "copy-then-xchg".into(),
        max_loops: crate::kernel::DEFAULT_MAX_LOOPS,
        cpus: CpuConfig::default(),
        iommu: Default::default(),
        costs: Default::default(),
        devices: VECTORS
            .iter()
            .enumerate()
            .map(|(i, v)| DeviceConfig {
                kind: DeviceKind::Dsa,
                name: format!("dsa-wq{i}"),
                vector: *v,
                cpu: Some(0),
                apic_id: None,
                irte_index: None,
                msi_handle: None,
                source_id: 0x0100 + i as u16,
                handler_cycles: None,
                port: None,
                arrival: Some(ArrivalProcess::Poisson {
                    rate_per_s: per_queue,
                }),
                closed_loop: None,
            })
            .collect(),
        ..Scenario::builder().into_unvalidated()
    };
    sc.apply_platform(PLATFORM)
        .expect("the experiment's platform exists");
    sc
}

/// Checks `--platform` and `--set` against every point.
pub fn check(ctx: &ExperimentCtx) -> Result<(), String> {
    ctx.check_points(&scenarios(ctx))
}

/// Every point's scenario, in row order.
pub fn scenarios(ctx: &ExperimentCtx) -> Vec<Scenario> {
    super::per_mode_and_rate(RATES_MPS, |m, r| scenario(m, r, ctx.seed))
}

/// Runs the experiment with `seed`.
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Runs the experiment in `ctx` (seed, optional trace).
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    let seed = ctx.seed;
    let mut rows = Vec::new();
    for mode in [DeliveryMode::Posted, DeliveryMode::Remapped] {
        for &rate in RATES_MPS {
            let sc = scenario(mode, rate, seed);
            let r = ctx.run_point(&sc);
            let gen = r.msis.generated.max(1) as f64;
            rows.push(Row {
                mode: mode.as_str().into(),
                rate_mps: rate,
                handled_mps: r.handled_per_s / 1e6,
                interrupts_per_msi: r.interrupts_taken as f64 / gen,
                cpu_busy_frac: r.cpu[0].busy_frac,
                p50_latency_ns: r.latency_ns.p50,
                p99_latency_ns: r.latency_ns.p99,
                notifications_per_msi: r.notifications.sent as f64 / gen,
                merged_frac: r.msis.merged as f64 / gen,
                pending_at_end: r.msis.pending,
                dropped: r.msis.dropped.values().sum(),
                lowest_vector_backlog: r.cpu[0]
                    .pending_by_vector
                    .get(&format!("{:#04x}", VECTORS[0]))
                    .copied()
                    .unwrap_or(0)
                    + r.sources[0].msi_backlog,
                oldest_waiting_ns: r.msis.oldest_pending_at_cpu_age_ns,
            });
        }
    }
    ExperimentOutput::new("posted-vs-remapped", seed, &rows)
}

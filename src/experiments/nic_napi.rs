//! `nic-napi`: one NIC RX queue under Poisson packet arrivals from light load to
//! overload, with interrupt throttling off and at two settings. NAPI masks the queue's
//! interrupt, polls up to the budget, and re-enables it only after a poll under budget.

use devices::{ArrivalSpec, NicConfig};
use serde::Serialize;

use super::{ExperimentCtx, ExperimentOutput};
use crate::system::io::NicDeviceConfig;
use crate::{DeliveryMode, Scenario};

/// Offered rates, M packets/s.
pub const RATES_MPPS: &[f64] = &[0.05, 0.2, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0];
/// ITR settings, us (0 = throttling off). 50 us is ixgbe's 20 K interrupts/s default.
pub const ITR_US: &[u32] = &[0, 10, 50];
const DURATION_US: f64 = 2000.0;

/// One point: an ITR setting at an offered packet rate.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Minimum interval between two interrupts of the queue, us (0 = throttling off).
    pub itr_us: u32,
    /// Offered RX rate, millions of packets per second.
    pub rate_mpps: f64,
    /// MSIs the queue raised per arrived packet.
    pub interrupts_per_packet: f64,
    /// Packets dropped because the RX ring was full.
    pub packets_dropped: u64,
    /// 99th-percentile packet latency (arrival to the end of its poll), us.
    pub p99_latency_us: f64,
    /// Median packet latency (arrival to the end of its poll), us.
    pub p50_latency_us: f64,
    /// Fraction of simulated time the CPU was busy (0 to 1).
    pub cpu_busy_frac: f64,
}

/// The scenario of one point.
pub fn scenario(itr_us: u32, rate_mpps: f64, seed: u64) -> Scenario {
    let nic = NicConfig::default();
    let units = (itr_us as f64 * 1000.0 / nic.itr_granularity_ns).round() as u32;
    let mut sc = Scenario::builder()
        .name(format!("nic-napi itr {itr_us} us {rate_mpps} Mpps"))
        .seed(seed)
        .duration_us(DURATION_US)
        .mode(DeliveryMode::Remapped)
        .cpus(1)
        .into_unvalidated();
    sc.nics.push(NicDeviceConfig {
        name: "eth0".into(),
        queues: 1,
        affinity: Default::default(),
        rx: Some(ArrivalSpec::Poisson {
            rate_per_s: rate_mpps * 1e6,
        }),
        tx: None,
        nic: NicConfig {
            itr_interval: units,
            ..nic
        },
        napi: Default::default(),
        source_id: 0x0300,
        handler_cycles: None,
        port: None,
    });
    sc
}

/// Runs the experiment with `seed`.
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Checks `--platform` and `--set` against every point.
pub fn check(ctx: &ExperimentCtx) -> Result<(), String> {
    ctx.check_points(&scenarios(ctx))
}

/// Every point's scenario, in row order.
pub fn scenarios(ctx: &ExperimentCtx) -> Vec<Scenario> {
    ITR_US
        .iter()
        .flat_map(|&itr| RATES_MPPS.iter().map(move |&r| scenario(itr, r, ctx.seed)))
        .collect()
}

/// Runs the experiment in `ctx` (seed, platform, overrides, optional trace).
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    let mut rows = Vec::new();
    for &itr in ITR_US {
        for &rate in RATES_MPPS {
            let r = ctx.run_point(&scenario(itr, rate, ctx.seed));
            let q = &r.io.nics[0];
            rows.push(Row {
                itr_us: itr,
                rate_mpps: rate,
                interrupts_per_packet: q.interrupts_per_packet,
                packets_dropped: q.packets_dropped,
                p99_latency_us: q.latency_us.p99,
                p50_latency_us: q.latency_us.p50,
                cpu_busy_frac: r.cpu[0].busy_frac,
            });
        }
    }
    ExperimentOutput::new("nic-napi", ctx.seed, &rows)
}

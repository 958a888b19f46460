//! `ipi-cluster`: a TLB shootdown from one CPU of socket 0 to the logical CPUs of
//! socket 1, seed 003's microbenchmark ("x86, x2apic: minimize IPI register writes
//! using cluster groups", 2011): the cost of `flush_tlb_others()` from a CPU of one
//! socket to all 20 logical CPUs of another, before and after the patch.
//!
//! The machine is the platform's (default `wsm-ex`: Westmere-EX, 4 sockets x 10 cores
//! x 2 threads), x2APIC IDs packed as firmware does (thread bit 0, core bits, socket
//! above), Linux CPU numbers with every first thread before the second threads (see
//! [`crate::topology`]). Socket 1's 20 CPUs have IDs 0x40-0x53: clusters 4 and 5. The
//! sender is CPU 0.
//!
//! Rows, each a `kernel` and a `mode`:
//! - `flush-tlb-others-2011` (Linux 2.6.38, [`crate::kernel::tlb_2011`]) with
//!   `cluster-per-cpu` (the send before the patch: one ICR write per CPU), `cluster`
//!   (the patch: one per cluster) and `physical`;
//! - `smp-call-function-many` (today's, [`crate::kernel::ipi`]) with `physical` and
//!   `cluster`.
//!
//! One row per pair with every CPU of socket 1 (`set` = `"socket1"`), then a sweep
//! over 1, 4, 16, 20 and 40 targets (`set` = `"sweep"`, the first N CPUs of socket 1
//! in CPU order, capped at the socket's size). `sender_cycles` runs from the start of
//! the call to the sender seeing the last acknowledgement; `sender_send_cycles` is the
//! part spent in the driver's send loop: ICR WRMSRs, including waits for the APIC to
//! hand off the previous message, and, for `flush-tlb-others-2011`, the driver's
//! reads of the shared `flush_cpumask` it walks. Every figure comes from the model's cost tables, not from hardware.

use devices::ArrivalProcess;
use serde::Serialize;
use sim_core::{CpuId, Freq};

use super::{ExperimentCtx, ExperimentOutput};
use crate::kernel::ipi::{IpiMode, ShootdownKernel};
use crate::system::xcall::ShootdownConfig;
use crate::system::{Costs, DeliveryMode, Scenario, System};
use crate::topology::{Topology, TopologySpec};

/// Seed 003's machine.
pub const PLATFORM: &str = "wsm-ex";
/// The (kernel, x2APIC send) pairs of the experiment, in row order.
pub const VARIANTS: [(ShootdownKernel, IpiMode); 5] = [
    (ShootdownKernel::FlushTlbOthers2011, IpiMode::ClusterPerCpu),
    (ShootdownKernel::FlushTlbOthers2011, IpiMode::Cluster),
    (ShootdownKernel::FlushTlbOthers2011, IpiMode::Physical),
    (ShootdownKernel::SmpCallFunctionMany, IpiMode::Physical),
    (ShootdownKernel::SmpCallFunctionMany, IpiMode::Cluster),
];
/// Target counts of the sweep.
pub const TARGET_COUNTS: &[u32] = &[1, 4, 16, 20, 40];
/// The socket whose CPUs are the targets.
pub const TARGET_SOCKET: u32 = 1;
/// When the one call starts, ns after the machine is built (any time works: the
/// machine is idle and the call is the only load).
const CALL_AT_NS: f64 = 1000.0;
/// Simulated time for the run: far beyond any call on this machine; a call still
/// running at the end shows as `funcs_run` < `targets`.
const RUN_US: f64 = 1000.0;

/// One call.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// The x2APIC send: `"physical"`, `"cluster"` (one ICR write per cluster) or
    /// `"cluster-per-cpu"` (cluster mode before Linux 2.6.39: one per CPU).
    pub mode: &'static str,
    /// The shootdown algorithm: `"flush-tlb-others-2011"` or
    /// `"smp-call-function-many"`.
    pub kernel: &'static str,
    /// Target CPUs.
    pub targets: u32,
    /// ICR writes the sender made.
    pub icr_writes: u32,
    /// From the start of the call until the sender saw the last acknowledgement,
    /// core cycles.
    pub sender_cycles: u64,
    /// The part of `sender_cycles` spent in the driver's send loop: ICR WRMSRs, and the
    /// reads of a shared mask it walks (`flush-tlb-others-2011`).
    pub sender_send_cycles: u64,
    /// `"socket1"` (the single row: every CPU of socket 1) or `"sweep"`.
    pub set: &'static str,
    /// x2APIC clusters the targets span.
    pub clusters: u32,
    /// The part spent queueing CSDs (the CSD's lock word and the target's queue head,
    /// each a line access).
    pub sender_enqueue_cycles: u64,
    /// The part spent polling and spinning for acknowledgements.
    pub sender_wait_cycles: u64,
    /// The part spent in the WRMSR fence.
    pub sender_fence_cycles: u64,
    /// Functions run on the targets (equals `targets` when nothing was lost).
    pub funcs_run: u32,
    /// CSD and queue-head line transfers that waited for another in flight.
    pub line_waits: u64,
}

/// The experiment's machine and costs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The machine.
    pub topology: TopologySpec,
    /// The cost tables (the system's: CPU, x2APIC, line, cross-call).
    pub costs: Costs,
    /// The sending CPU (on socket 0).
    pub sender: CpuId,
}

impl Default for Config {
    /// The generic profile's machine (2 x 20 x 2) and costs.
    fn default() -> Self {
        Config {
            topology: TopologySpec::new(2, 20, 2),
            costs: Costs::default(),
            sender: CpuId(0),
        }
    }
}

impl Config {
    /// The machine and costs of `ctx`'s platform (default [`PLATFORM`]), with its
    /// `--set costs.*` applied.
    pub fn of(ctx: &ExperimentCtx) -> Result<Config, String> {
        let layout = ctx.platform(PLATFORM).layout();
        Ok(Config {
            topology: TopologySpec::new(
                layout.sockets,
                layout.cores_per_socket,
                layout.threads_per_core,
            ),
            costs: ctx.costs(PLATFORM)?,
            sender: CpuId(0),
        })
    }
}

/// The scenario of one call: `config`'s machine, idle, and one shootdown by `kernel`
/// from the sender to `targets` in `mode`.
pub fn scenario(
    config: &Config,
    kernel: ShootdownKernel,
    mode: IpiMode,
    targets: Vec<u32>,
) -> Scenario {
    let mut sc = Scenario::builder()
        .name("ipi-cluster")
        .duration_us(RUN_US)
        .mode(DeliveryMode::Remapped)
        .topology(config.topology)
        .shootdown(ShootdownConfig {
            name: "call".into(),
            from: vec![config.sender.0],
            targets,
            target_socket: None,
            arrival: ArrivalProcess::Fixed {
                interval_ns: CALL_AT_NS,
            },
            ipi_mode: mode,
            kernel,
            calls: Some(1),
        })
        .into_unvalidated();
    sc.costs = config.costs.clone();
    sc
}

/// One call by `kernel` from `config.sender` to the first `count` CPUs of the target
/// socket, on a fresh machine.
pub fn point(
    ctx: &ExperimentCtx,
    config: &Config,
    kernel: ShootdownKernel,
    mode: IpiMode,
    count: u32,
    set: &'static str,
) -> Row {
    let topo = Topology::new(config.topology).expect("experiment topology is valid");
    let mut clusters: Vec<u32> = topo
        .socket_cpus(TARGET_SOCKET)
        .take(count as usize)
        .map(|c| topo.cluster(c))
        .collect();
    clusters.sort_unstable();
    clusters.dedup();
    let sc = point_scenario(config, kernel, mode, count);
    let sys = System::new(&sc).expect("the experiment's scenario is valid");
    let report = ctx.finish_point(sys, &sc.name);
    let x = report
        .cross_calls
        .expect("a shootdown load reports cross calls");
    let load = &x.shootdowns[0];
    let freq = Freq::from_mhz(config.costs.cpu.freq_mhz).expect("validated");
    let cycles = |ps: u64| freq.cycles_in(sim_core::Duration(ps));
    let p = load.sender_phases;
    Row {
        mode: mode.as_str(),
        kernel: kernel.as_str(),
        targets: count,
        icr_writes: load.icr_writes as u32,
        sender_cycles: cycles(p.calls_ps),
        sender_send_cycles: cycles(p.icr_ps),
        set,
        clusters: clusters.len() as u32,
        sender_enqueue_cycles: cycles(p.queue_csd_ps),
        sender_wait_cycles: cycles(p.wait_ps),
        sender_fence_cycles: cycles(p.fence_ps),
        funcs_run: x.ipis.funcs_run as u32,
        line_waits: x.lines.values().map(|l| l.waits).sum(),
    }
}

/// The scenario of one call by `kernel` to the first `count` CPUs of the target socket.
pub fn point_scenario(
    config: &Config,
    kernel: ShootdownKernel,
    mode: IpiMode,
    count: u32,
) -> Scenario {
    let topo = Topology::new(config.topology).expect("experiment topology is valid");
    let targets = topo
        .socket_cpus(TARGET_SOCKET)
        .take(count as usize)
        .map(|c| c.0)
        .collect();
    let mut sc = scenario(config, kernel, mode, targets);
    sc.name = format!("ipi-cluster {} {} x{count}", kernel.as_str(), mode.as_str());
    sc
}

/// The points in row order: (kernel, mode, target count, `set`).
fn points(config: &Config) -> Vec<(ShootdownKernel, IpiMode, u32, &'static str)> {
    let topo = Topology::new(config.topology).expect("experiment topology is valid");
    let all = topo.socket_cpus(TARGET_SOCKET).count() as u32;
    let mut points: Vec<_> = VARIANTS
        .iter()
        .map(|&(kernel, mode)| (kernel, mode, all, "socket1"))
        .collect();
    let mut counts: Vec<u32> = TARGET_COUNTS.iter().map(|&c| c.min(all)).collect();
    counts.dedup();
    for count in counts {
        for (kernel, mode) in VARIANTS {
            points.push((kernel, mode, count, "sweep"));
        }
    }
    points
}

/// Every row of the experiment under `config` (`ctx` gives the trace, if any).
pub fn rows(ctx: &ExperimentCtx, config: &Config) -> Vec<Row> {
    points(config)
        .into_iter()
        .map(|(kernel, mode, count, set)| point(ctx, config, kernel, mode, count, set))
        .collect()
}

/// Runs the experiment with `seed` (the model is deterministic and draws nothing; the
/// seed is recorded only).
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Every point's scenario, in row order (none for overrides `check` refuses).
pub fn scenarios(ctx: &ExperimentCtx) -> Vec<Scenario> {
    let Ok(config) = Config::of(ctx) else {
        return Vec::new();
    };
    let platform = ctx.platform(PLATFORM).name.clone();
    points(&config)
        .into_iter()
        .map(|(kernel, mode, count, _)| {
            // Named, so that preparing it starts from the same costs as `Config::of`.
            let mut sc = point_scenario(&config, kernel, mode, count);
            sc.platform = Some(platform.clone());
            sc
        })
        .collect()
}

/// Checks `--platform` and `--set` (costs only), against every point's scenario.
pub fn check(ctx: &ExperimentCtx) -> Result<(), String> {
    let config = Config::of(ctx)?;
    for (kernel, mode, count, _) in points(&config) {
        point_scenario(&config, kernel, mode, count)
            .validate()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Runs the experiment in `ctx`.
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    let config = Config::of(ctx).expect("overrides were checked");
    let topo = Topology::new(config.topology).expect("platform layouts are valid");
    let socket: Vec<CpuId> = topo.socket_cpus(TARGET_SOCKET).collect();
    let ids = |cpus: &[CpuId]| {
        let (lo, hi) = (
            cpus.iter().map(|&c| topo.apic_id(c).0).min().unwrap_or(0),
            cpus.iter().map(|&c| topo.apic_id(c).0).max().unwrap_or(0),
        );
        let mut clusters: Vec<u32> = cpus.iter().map(|&c| topo.cluster(c)).collect();
        clusters.sort_unstable();
        clusters.dedup();
        format!("IDs {lo:#x}-{hi:#x}, clusters {clusters:?}")
    };
    let mut out = ExperimentOutput::new("ipi-cluster", ctx.seed, &rows(ctx, &config));
    out.notes.push(
        "set: \"socket1\" targets every logical CPU of socket 1; \"sweep\" the first N CPUs of socket 1".into(),
    );
    out.notes.push(format!(
        "platform {}: {} sockets x {} cores x {} threads; sender CPU {}; targets: the {} CPUs \
         of socket 1 in Linux order (first threads, then second threads), {}",
        ctx.platform(PLATFORM).name,
        config.topology.sockets,
        config.topology.cores_per_socket,
        config.topology.threads_per_core,
        config.sender.0,
        socket.len(),
        ids(&socket)
    ));
    out.notes.push(
        "runs on System: the sender's task runs the kernel's shootdown with interrupts \
         enabled, each target takes the IPI and runs the handler; an ICR write costs \
         costs.apic.wrmsr_icr_cycles after the APIC has handed off the previous message \
         (costs.interconnect.icr_accept_*_ns by distance); IPI flight = \
         costs.apic.ipi_latency_ns, plus costs.interconnect.ipi_cross_socket_extra_ns \
         across sockets; every CSD, queue-head and flush_state access is a MESI line \
         access priced by costs.pid_line (the one line model), with occupancy; the \
         sender overlaps independent CSD polls up to costs.cpu.fill_buffers misses"
            .into(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_cover_the_single_set_and_the_sweep_in_both_modes() {
        let rows = rows(&ExperimentCtx::new(1), &Config::default());
        assert_eq!(rows.len(), VARIANTS.len() * (1 + TARGET_COUNTS.len()));
        assert_eq!((rows[0].set, rows[0].targets), ("socket1", 40));
        for r in &rows {
            assert_eq!(r.funcs_run, r.targets, "{r:?}");
            assert!(r.sender_cycles > r.sender_send_cycles);
            match r.mode {
                "physical" | "cluster-per-cpu" => assert_eq!(r.icr_writes, r.targets),
                _ => assert_eq!(r.icr_writes, r.clusters),
            }
        }
        let icr = |mode: &str, n: u32| {
            rows.iter()
                .find(|r| {
                    r.set == "sweep"
                        && r.mode == mode
                        && r.targets == n
                        && r.kernel == "smp-call-function-many"
                })
                .map(|r| r.icr_writes)
                .unwrap()
        };
        // First threads of socket 1: IDs 0x40, 0x42, ... 16 of them span clusters 4
        // and 5; all 20 add cluster 6.
        assert_eq!(
            [1, 4, 16, 20, 40].map(|n| icr("cluster", n)),
            [1, 1, 2, 3, 3]
        );
    }

    #[test]
    fn output_is_deterministic_json() {
        let (a, b) = (run(1), run(1));
        assert_eq!(a.to_json(), b.to_json());
        for k in [
            "mode",
            "kernel",
            "targets",
            "icr_writes",
            "sender_cycles",
            "sender_send_cycles",
        ] {
            assert!(a.rows.iter().all(|r| r.get(k).is_some()), "{k}");
        }
    }
}

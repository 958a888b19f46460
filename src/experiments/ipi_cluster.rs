//! `ipi-cluster`: a TLB-shootdown-like cross call from one CPU of socket 0 to CPUs of
//! socket 1, with the x2APIC in physical mode (one ICR write per target) and in
//! cluster mode (one ICR write per x2APIC cluster).
//!
//! The machine: 2 sockets × 20 cores × 2 threads (80 logical CPUs), x2APIC IDs packed
//! as firmware does (thread bit 0, core bits 5:1, socket from bit 6), Linux CPU
//! numbers with every first thread before the second threads (see
//! [`crate::topology`]). Socket 1's 40 CPUs have IDs 0x40-0x67: clusters 4, 5 and 6.
//! The sender is CPU 0. The call is `smp_call_function_many(wait = true)`: queue a CSD
//! per target, send the IPIs, spin until every target has run the function and
//! unlocked its CSD ([`crate::kernel::ipi`]).
//!
//! Rows: one with every CPU of socket 1 (`set` = `"socket1"`), then a sweep over 1, 4,
//! 16, 20 and 40 targets (`set` = `"sweep"`, the first N CPUs of socket 1 in CPU
//! order), each in both modes. `sender_cycles` runs from the start of the call to the
//! sender seeing the last acknowledgement; `sender_send_cycles` is the part spent in
//! ICR WRMSRs. Every figure comes from the model's cost tables, not from hardware.

use devices::ArrivalProcess;
use serde::Serialize;
use sim_core::{CpuId, Freq};

use super::{ExperimentCtx, ExperimentOutput};
use crate::kernel::ipi::IpiMode;
use crate::system::xcall::ShootdownConfig;
use crate::system::{Costs, DeliveryMode, Scenario, System};
use crate::topology::{Topology, TopologySpec};

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
    /// `"physical"` or `"cluster"`.
    pub mode: &'static str,
    /// Target CPUs.
    pub targets: u32,
    /// ICR writes the sender made.
    pub icr_writes: u32,
    /// From the start of the call until the sender saw the last acknowledgement,
    /// core cycles.
    pub sender_cycles: u64,
    /// The part of `sender_cycles` spent in ICR WRMSRs.
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
    fn default() -> Self {
        Config {
            topology: TopologySpec::new(2, 20, 2),
            costs: Costs::default(),
            sender: CpuId(0),
        }
    }
}

/// The scenario of one call: `config`'s machine, idle, and one shootdown from the
/// sender to `targets` in `mode`.
pub fn scenario(config: &Config, mode: IpiMode, targets: Vec<u32>) -> Scenario {
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
            calls: Some(1),
        })
        .into_unvalidated();
    sc.costs = config.costs.clone();
    sc
}

/// One call from `config.sender` to the first `count` CPUs of the target socket, on
/// a fresh machine.
pub fn point(config: &Config, mode: IpiMode, count: u32, set: &'static str) -> Row {
    let topo = Topology::new(config.topology).expect("experiment topology is valid");
    let targets: Vec<CpuId> = topo
        .socket_cpus(TARGET_SOCKET)
        .take(count as usize)
        .collect();
    let mut clusters: Vec<u32> = targets.iter().map(|&c| topo.cluster(c)).collect();
    clusters.sort_unstable();
    clusters.dedup();
    let sc = scenario(config, mode, targets.iter().map(|c| c.0).collect());
    let report = System::run_scenario(&sc).expect("the experiment's scenario is valid");
    let x = report
        .cross_calls
        .expect("a shootdown load reports cross calls");
    let load = &x.shootdowns[0];
    let freq = Freq::from_mhz(config.costs.cpu.freq_mhz).expect("validated");
    let cycles = |ps: u64| freq.cycles_in(sim_core::Duration(ps));
    let p = load.sender_phases;
    Row {
        mode: mode.as_str(),
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

/// Every row of the experiment under `config`.
pub fn rows(config: &Config) -> Vec<Row> {
    let topo = Topology::new(config.topology).expect("experiment topology is valid");
    let all = topo.socket_cpus(TARGET_SOCKET).count() as u32;
    let mut rows = Vec::new();
    for mode in IpiMode::ALL {
        rows.push(point(config, mode, all, "socket1"));
    }
    for &count in TARGET_COUNTS {
        for mode in IpiMode::ALL {
            rows.push(point(config, mode, count.min(all), "sweep"));
        }
    }
    rows
}

/// Runs the experiment with `seed` (the model is deterministic and draws nothing; the
/// seed is recorded only).
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Runs the experiment in `ctx`.
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    // The CPU and x2APIC tables come from the platform (and --set costs.cpu/apic.*).
    let costs = ctx
        .costs(crate::platform::DEFAULT_PLATFORM)
        .expect("overrides were checked");
    let config = Config {
        costs,
        ..Config::default()
    };
    let mut out = ExperimentOutput::new("ipi-cluster", ctx.seed, &rows(&config));
    out.notes.push(
        "set: \"socket1\" targets every logical CPU of socket 1; \"sweep\" the first N CPUs of socket 1".into(),
    );
    out.notes.push(format!(
        "2 sockets x 20 cores x 2 threads; sender CPU {}; targets: CPUs of socket 1 in \
         Linux order (first threads, then second threads); x2APIC IDs 0x40-0x67 form \
         clusters 4, 5 and 6",
        config.sender.0
    ));
    out.notes.push(
        "runs on System: the sender's task runs smp_call_function_many with interrupts \
         enabled, each target takes the call-function IPI and runs the handler; \
         sender_cycles = CSD enqueues + fence + ICR writes + polling and spinning until the \
         last target's csd_unlock is visible; IPI flight = costs.apic.ipi_latency_ns, plus \
         costs.interconnect.ipi_cross_socket_extra_ns across sockets; every CSD and \
         queue-head access is a MESI line access priced by costs.pid_line (the one line \
         model), with occupancy"
            .into(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_cover_the_single_set_and_the_sweep_in_both_modes() {
        let rows = rows(&Config::default());
        assert_eq!(rows.len(), 2 + 2 * TARGET_COUNTS.len());
        assert_eq!((rows[0].set, rows[0].targets), ("socket1", 40));
        for r in &rows {
            assert_eq!(r.funcs_run, r.targets, "{r:?}");
            assert!(r.sender_cycles > r.sender_send_cycles);
            match r.mode {
                "physical" => assert_eq!(r.icr_writes, r.targets),
                _ => assert_eq!(r.icr_writes, r.clusters),
            }
        }
        let icr = |mode: &str, n: u32| {
            rows.iter()
                .find(|r| r.set == "sweep" && r.mode == mode && r.targets == n)
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
            "targets",
            "icr_writes",
            "sender_cycles",
            "sender_send_cycles",
        ] {
            assert!(a.rows.iter().all(|r| r.get(k).is_some()), "{k}");
        }
    }
}

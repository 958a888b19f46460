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

use serde::Serialize;
use sim_core::CpuId;

use super::{ExperimentCtx, ExperimentOutput};
use crate::kernel::ipi::sim::{IpiSim, IpiSimCosts};
use crate::kernel::ipi::{CpuMask, IpiMode};
use crate::topology::{Topology, TopologySpec};

/// Target counts of the sweep.
pub const TARGET_COUNTS: &[u32] = &[1, 4, 16, 20, 40];
/// The socket whose CPUs are the targets.
pub const TARGET_SOCKET: u32 = 1;

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
    /// The part spent queueing CSDs (remote cmpxchg per target).
    pub sender_enqueue_cycles: u64,
    /// The part spent spinning for acknowledgements.
    pub sender_wait_cycles: u64,
    /// The part spent in the WRMSR fence.
    pub sender_fence_cycles: u64,
    /// Functions run on the targets (equals `targets` when nothing was lost).
    pub funcs_run: u32,
}

/// The experiment's machine and costs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The machine.
    pub topology: TopologySpec,
    /// The cost tables.
    pub costs: IpiSimCosts,
    /// The sending CPU (on socket 0).
    pub sender: CpuId,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            topology: TopologySpec::new(2, 20, 2),
            costs: IpiSimCosts::default(),
            sender: CpuId(0),
        }
    }
}

/// One call from `config.sender` to the first `count` CPUs of the target socket, on
/// a fresh machine.
pub fn point(config: &Config, mode: IpiMode, count: u32, set: &'static str) -> Row {
    let topo = Topology::new(config.topology).expect("experiment topology is valid");
    let n = topo.len() as u32;
    let targets: Vec<CpuId> = topo
        .socket_cpus(TARGET_SOCKET)
        .take(count as usize)
        .collect();
    let mut clusters: Vec<u32> = targets.iter().map(|&c| topo.cluster(c)).collect();
    clusters.sort_unstable();
    clusters.dedup();
    let mut sim = IpiSim::new(topo, config.costs.clone()).expect("experiment costs are valid");
    let out = sim
        .call_function_many(config.sender, &CpuMask::from_cpus(n, targets), mode)
        .expect("the experiment's sender and mask fit its machine");
    Row {
        mode: out.mode,
        targets: out.targets,
        icr_writes: out.stats.icr_writes,
        sender_cycles: out.stats.sender_cycles,
        sender_send_cycles: out.stats.sender_send_cycles,
        set,
        clusters: clusters.len() as u32,
        sender_enqueue_cycles: out.stats.sender_enqueue_cycles,
        sender_wait_cycles: out.stats.sender_wait_cycles,
        sender_fence_cycles: out.stats.sender_fence_cycles,
        funcs_run: out.stats.funcs_run,
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
    let mut config = Config::default();
    config.costs.cpu = costs.cpu;
    config.costs.apic = costs.apic;
    let mut out = ExperimentOutput::new("ipi-cluster", ctx.seed, &rows(&config));
    out.notes.push(format!(
        "2 sockets x 20 cores x 2 threads; sender CPU {}; targets: CPUs of socket 1 in \
         Linux order (first threads, then second threads); x2APIC IDs 0x40-0x67 form \
         clusters 4, 5 and 6",
        config.sender.0
    ));
    out.notes.push(
        "sender_cycles = CSD enqueues + fence + ICR writes + spinning until the last \
         target's csd_unlock is visible; IPI flight = costs.apic.ipi_latency_ns, plus \
         costs.interconnect.ipi_cross_socket_extra_ns across sockets"
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

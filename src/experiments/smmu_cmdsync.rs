//! `smmu-cmdsync`: how long a CMD_SYNC takes on an Arm SMMUv3, and what it costs TX
//! unmaps, with CMD_SYNC completion by MSI write (Linux "MSI polling") and by polling
//! CONS (WFE, woken by SEV), on an empty queue and under a stream of unmaps from 1 and
//! from 16 CPUs. Runs the Linux command-queue algorithms in `kernel::smmu` against the
//! SMMU model in `iommu_sim::smmuv3`.
//!
//! The TX case: each iteration of a CPU is one transmitted packet whose buffer is
//! unmapped on completion (one 4 KiB page: a TLBI and a CMD_SYNC), with the rest of the
//! TX completion as think time. `tx_gbps` = packets per second x `TX_PACKET_BYTES`,
//! capped at the NIC's line rate `NIC_LINE_GBPS`.

use serde::Serialize;

use super::{ExperimentCtx, ExperimentOutput};
use crate::kernel::smmu::{run_cmdsync_bench, BenchWorkload, CmdSyncBenchConfig};

/// Bytes per transmitted packet: a 1500-byte MTU frame. Assumption of the scenario.
pub const TX_PACKET_BYTES: f64 = 1500.0;
/// The NIC's line rate, Gbit/s: a 100 GbE port. Assumption of the scenario.
pub const NIC_LINE_GBPS: f64 = 100.0;

/// One point: a CMD_SYNC completion method, a workload and a CPU count.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Whether the SMMU completes CMD_SYNC by MSI write (Linux "MSI polling").
    pub msipoll: bool,
    /// How CMD_SYNC completion was awaited: "msi", "cons-wfe" or "cons-spin".
    pub poll_mode: String,
    /// "empty" (CMD_SYNC alone) or "unmap" (TLBI + CMD_SYNC per buffer).
    pub workload: String,
    /// CPUs issuing at the same time.
    pub cpus: u32,
    /// Median time of one call, from its first command-queue operation to its
    /// CMD_SYNC seen complete, ns.
    pub cmd_sync_ns_p50: f64,
    /// 99th percentile of the same call time, ns.
    pub cmd_sync_ns_p99: f64,
    /// Calls completed per simulated second in the measurement window, all CPUs.
    pub unmaps_per_sec: f64,
    /// For the unmap rows: TX throughput if each unmap frees one packet's buffer.
    pub tx_gbps: f64,
}

/// Runs the experiment with `seed`.
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Runs the experiment in `ctx` (its trace option does not apply: the harness has its
/// own engine).
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    let mut rows = Vec::new();
    let cases = [
        ("empty", BenchWorkload::SyncOnly, 1),
        ("unmap", BenchWorkload::Unmap { pages: 1 }, 1),
        ("unmap", BenchWorkload::Unmap { pages: 1 }, 16),
    ];
    for msipoll in [true, false] {
        for (name, workload, cpus) in cases {
            let mut config = CmdSyncBenchConfig {
                cpus,
                workload,
                seed: ctx.seed,
                ..CmdSyncBenchConfig::default()
            };
            config.smmu.msi_polling_enabled = msipoll;
            let r = run_cmdsync_bench(&config).expect("built-in harness configuration is valid");
            let tx_gbps = if name == "unmap" {
                (r.unmaps_per_sec * TX_PACKET_BYTES * 8.0 / 1e9).min(NIC_LINE_GBPS)
            } else {
                0.0
            };
            rows.push(Row {
                msipoll,
                poll_mode: r.poll_mode.label().into(),
                workload: name.into(),
                cpus,
                cmd_sync_ns_p50: r.p50_ns(),
                cmd_sync_ns_p99: r.p99_ns(),
                unmaps_per_sec: r.unmaps_per_sec,
                tx_gbps,
            });
        }
    }
    let mut out = ExperimentOutput::new("smmu-cmdsync", ctx.seed, &rows);
    out.notes.push(format!(
        "tx_gbps assumes one {TX_PACKET_BYTES}-byte packet per unmap and a {NIC_LINE_GBPS} Gbit/s port"
    ));
    out
}

//! `vmd`: NVMe drives behind one VMD domain, remap versus bypass, over a grid of drives
//! and CPUs, with fio-like jobs of 4 KiB random reads spread over the CPUs (one job per
//! CPU per drive). In remap mode every drive queue's MSI lands on one of VMD's own
//! vectors and `vmd_irq` runs every child handler registered there; in bypass mode each
//! queue interrupts its CPU directly through interrupt remapping.

use devices::{NvmeConfig, VmdConfig, VmdMode};
use serde::Serialize;

use super::{ExperimentCtx, ExperimentOutput};
use crate::system::io::{JobConfig, NvmeDriveConfig, VmdDomainConfig};
use crate::{DeliveryMode, Scenario};

/// Drive counts of the grid.
pub const DRIVES: &[u32] = &[1, 2, 4, 8, 12];
/// CPU counts of the grid; each drive has one I/O queue per CPU.
pub const CPUS: &[u32] = &[1, 2, 6, 12];
/// VMD modes compared.
pub const MODES: &[&str] = &["remap", "bypass"];
/// Commands each job keeps in flight.
pub const IODEPTH: u32 = 8;
const DURATION_US: f64 = 1000.0;

/// One point: a number of drives and CPUs in one VMD mode.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// NVMe drives behind the domain.
    pub drives: u32,
    /// CPUs, each running one job per drive.
    pub cpus: u32,
    /// `remap` or `bypass`.
    pub mode: String,
    /// Completions reaped per simulated second, all drives together.
    pub iops: f64,
    /// Mean over the CPUs of the fraction of simulated time each was busy.
    pub cpu_busy_frac: f64,
    /// Interrupts the CPUs took per I/O completed.
    pub interrupts_per_io: f64,
    /// 99th-percentile I/O latency (submission to reaping), us, all drives.
    pub p99_latency_us: f64,
    /// Child handler calls `vmd_irq` made that found nothing (remap mode).
    pub empty_child_calls_per_io: f64,
}

/// The scenario of one point.
pub fn scenario(drives: u32, cpus: u32, mode: &str, seed: u64) -> Scenario {
    let vmd_mode = if mode == "bypass" {
        VmdMode::Bypass
    } else {
        VmdMode::Remap
    };
    let mut sc = Scenario::builder()
        .name(format!("vmd {mode} {drives} drives {cpus} cpus"))
        .seed(seed)
        .duration_us(DURATION_US)
        .mode(DeliveryMode::Remapped)
        .cpus(cpus)
        .into_unvalidated();
    sc.iommu.irte_entries = 4096;
    sc.vmd.push(VmdDomainConfig {
        name: "vmd0".into(),
        vmd: VmdConfig {
            mode: vmd_mode,
            ..VmdConfig::default()
        },
        source_id: 0x0100,
        handler_cycles: None,
        port: None,
    });
    for d in 0..drives {
        sc.nvme.push(NvmeDriveConfig {
            name: format!("nvme{d}"),
            drive: NvmeConfig {
                queues: cpus,
                ..NvmeConfig::default()
            },
            affinity: Default::default(),
            vmd: Some(0),
            source_id: 0x0200 + d as u16,
            handler_cycles: None,
            port: None,
        });
        for c in 0..cpus {
            sc.jobs.push(JobConfig {
                cpu: c,
                drive: d,
                iodepth: IODEPTH,
                block_bytes: 4096,
            });
        }
    }
    sc
}

/// Runs the experiment with `seed`.
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Runs the experiment in `ctx` (seed, optional trace).
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    let mut rows = Vec::new();
    for &drives in DRIVES {
        for &cpus in CPUS {
            for mode in MODES {
                let r = ctx.run_point(&scenario(drives, cpus, mode, ctx.seed));
                let t = &r.io.nvme_total;
                let ios = t.reaped.max(1) as f64;
                let busy = r.cpu.iter().map(|c| c.busy_frac).sum::<f64>() / r.cpu.len() as f64;
                let empty: u64 = r.io.vmd.iter().map(|v| v.empty_child_handler_calls).sum();
                rows.push(Row {
                    drives,
                    cpus,
                    mode: mode.to_string(),
                    iops: t.iops,
                    cpu_busy_frac: busy,
                    interrupts_per_io: r.interrupts_taken as f64 / ios,
                    p99_latency_us: t.latency_us.p99,
                    empty_child_calls_per_io: empty as f64 / ios,
                });
            }
        }
    }
    ExperimentOutput::new("vmd", ctx.seed, &rows)
}

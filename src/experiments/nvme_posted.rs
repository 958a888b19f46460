//! `nvme-posted`: four NVMe drives driven near their IOPS ceiling by more and more
//! fio-like jobs (4 KiB random reads, iodepth 32, jobs spread round robin over 8 CPUs
//! and the drives), with posted MSI on and off.

use devices::NvmeConfig;
use serde::Serialize;

use super::{ExperimentCtx, ExperimentOutput};
use crate::system::io::{JobConfig, NvmeDriveConfig};
use crate::{DeliveryMode, Scenario};

/// NVMe drives, each with one I/O queue per CPU.
pub const DRIVES: u32 = 4;
/// CPUs the jobs are spread over, round robin.
pub const CPUS: u32 = 8;
/// Job counts, one point each per mode.
pub const JOBS: &[u32] = &[4, 8, 16, 32];
/// Reads each job keeps in flight.
pub const IODEPTH: u32 = 32;
const DURATION_US: f64 = 1000.0;

/// One point: a delivery mode with a number of jobs.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// `posted` or `remapped`.
    pub mode: String,
    /// fio-like jobs running.
    pub jobs: u32,
    /// Completions reaped per simulated second, all drives together.
    pub iops: f64,
    /// Posted: notification interrupts per I/O; remapped: interrupts per I/O.
    pub notifications_per_io: f64,
    /// Mean over the CPUs of the fraction of simulated time each was busy.
    pub cpu_busy_frac: f64,
    /// 99th-percentile I/O latency (submission to reaping), us, all drives.
    pub p99_latency_us: f64,
    /// Median I/O latency (submission to reaping), us, all drives.
    pub p50_latency_us: f64,
}

/// The scenario of one point.
pub fn scenario(mode: DeliveryMode, jobs: u32, seed: u64) -> Scenario {
    let mut sc = Scenario::builder()
        .name(format!("nvme-posted {} {jobs} jobs", mode.as_str()))
        .seed(seed)
        .duration_us(DURATION_US)
        .mode(mode)
        .cpus(CPUS)
        .into_unvalidated();
    sc.iommu.irte_entries = 1024;
    for d in 0..DRIVES {
        sc.nvme.push(NvmeDriveConfig {
            name: format!("nvme{d}"),
            drive: NvmeConfig {
                queues: CPUS,
                ..NvmeConfig::default()
            },
            affinity: Default::default(),
            vmd: None,
            source_id: 0x0200 + d as u16,
            handler_cycles: None,
            port: None,
        });
    }
    for j in 0..jobs {
        sc.jobs.push(JobConfig {
            cpu: j % CPUS,
            drive: j % DRIVES,
            iodepth: IODEPTH,
            block_bytes: 4096,
        });
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
    for mode in [DeliveryMode::Posted, DeliveryMode::Remapped] {
        for &jobs in JOBS {
            let r = ctx.run_point(&scenario(mode, jobs, ctx.seed));
            let t = &r.io.nvme_total;
            let ios = t.reaped.max(1) as f64;
            let busy = r.cpu.iter().map(|c| c.busy_frac).sum::<f64>() / r.cpu.len() as f64;
            rows.push(Row {
                mode: mode.as_str().into(),
                jobs,
                iops: t.iops,
                notifications_per_io: r.interrupts_taken as f64 / ios,
                cpu_busy_frac: busy,
                p99_latency_us: t.latency_us.p99,
                p50_latency_us: t.latency_us.p50,
            });
        }
    }
    ExperimentOutput::new("nvme-posted", ctx.seed, &rows)
}

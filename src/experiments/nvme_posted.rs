//! `nvme-posted`: seed 000's fio test of posted MSI on Gen5 NVMe, on its Sapphire
//! Rapids.
//!
//! The setup (FIDELITY.md, seed 000; Jacob Pan, 2024-02-12): fio, libaio, 4 KiB random
//! reads, iodepth 64, 8 jobs per drive with `cpus_allowed_policy=split` over 8 CPUs of
//! the drive's own, so one active vector per CPU; Samsung PM174x drives on one socket,
//! four per x16 stack, each on a root port of its own; fio's `ramp_time` left out. For
//! 2, 4 and 8 drives, remapped and posted.
//!
//! Rates are per second of the measured part. `msis_per_s_per_vector` counts handler
//! invocations per active vector, as `/proc/interrupts` (and so `irqtop`) counts them;
//! `device_msis_per_s_per_vector` counts the MSIs the drives wrote.

use devices::NvmeConfig;
use serde::Serialize;

use super::{ExperimentCtx, ExperimentOutput};
use crate::system::io::{JobConfig, NvmeDriveConfig};
use crate::{DeliveryMode, Report, Scenario};

/// The platform the seed measured on.
pub const PLATFORM: &str = "spr";
/// Drive counts.
pub const DRIVES: &[u32] = &[2, 4, 8];
/// fio jobs per drive, each on a CPU of its own (`cpus_allowed_policy=split`).
pub const JOBS_PER_DRIVE: u32 = 8;
/// Reads each job keeps in flight (fio `iodepth`).
pub const IODEPTH: u32 = 64;
/// Simulated time of one point, us.
pub const DURATION_US: f64 = 1500.0;
/// Warm-up left out (fio `ramp_time`), us.
pub const RAMP_US: f64 = 300.0;

/// One point: a number of drives in one delivery mode.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// NVMe drives.
    pub drives: u32,
    /// `remapped` or `posted`.
    pub mode: String,
    /// Completions reaped per second per drive.
    pub iops_per_drive: f64,
    /// Handler invocations per second per active vector (as `/proc/interrupts`).
    pub msis_per_s_per_vector: f64,
    /// Posted-interrupt notifications per handler invocation (the thread's PMN / MSIs;
    /// 0 in remapped mode).
    pub notifications_per_msi: f64,
    /// I/Os per handler invocation.
    pub ios_per_msi: f64,
    /// Mean busy fraction of the drives' CPUs.
    pub cpu_busy_frac: f64,
    /// MSIs the drives wrote per second per active vector.
    pub device_msis_per_s_per_vector: f64,
    /// Interrupt entries per I/O.
    pub interrupts_per_io: f64,
    /// Mean fraction of the time a drive's root port had writes waiting behind an MSI.
    pub port_stall_frac: f64,
    /// Busy fraction of the socket's interrupt-delivery path.
    pub delivery_busy_frac: f64,
}

/// The scenario of one point.
pub fn scenario(mode: DeliveryMode, drives: u32, seed: u64, ctx: &ExperimentCtx) -> Scenario {
    let layout = ctx.platform(PLATFORM).layout();
    let cpus = drives * JOBS_PER_DRIVE;
    let mut sc = Scenario::builder()
        .name(format!("nvme-posted {} {drives} drives", mode.as_str()))
        .seed(seed)
        .duration_us(DURATION_US)
        .mode(mode)
        .cpus(cpus)
        .into_unvalidated();
    sc.apply_platform(&ctx.platform(PLATFORM).name)
        .expect("the platform exists");
    sc.iommu.irte_entries = 1024;
    sc.pcie.ports_per_stack = layout.ports_per_stack;
    sc.pcie.stacks_per_socket = layout.stacks_per_socket;
    sc.iommu.units = layout.stacks_per_socket;
    for d in 0..drives {
        sc.nvme.push(NvmeDriveConfig {
            name: format!("nvme{d}"),
            // One I/O queue per CPU (the driver's default when the drive has enough).
            drive: NvmeConfig {
                queues: cpus,
                ..NvmeConfig::default()
            },
            affinity: Default::default(),
            vmd: None,
            source_id: 0x6300 + (d as u16) * 0x100,
            // Four drives per x16 stack, a root port each (seed 000: 62:01.0-07.0).
            port: Some(d),
            handler_cycles: None,
        });
        for j in 0..JOBS_PER_DRIVE {
            sc.jobs.push(JobConfig {
                cpu: d * JOBS_PER_DRIVE + j,
                drive: d,
                iodepth: IODEPTH,
                block_bytes: 4096,
            });
        }
    }
    sc
}

/// Checks `--platform` and `--set` against every point.
pub fn check(ctx: &ExperimentCtx) -> Result<(), String> {
    ctx.check_points(&scenarios(ctx))
}

/// Every point's scenario, in row order.
pub fn scenarios(ctx: &ExperimentCtx) -> Vec<Scenario> {
    DRIVES
        .iter()
        .flat_map(|&d| {
            [DeliveryMode::Remapped, DeliveryMode::Posted].map(|m| scenario(m, d, ctx.seed, ctx))
        })
        .collect()
}

/// Runs the experiment with `seed`.
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Runs the experiment in `ctx` (seed, platform, overrides, optional trace).
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    let mut rows = Vec::new();
    for &drives in DRIVES {
        for mode in [DeliveryMode::Remapped, DeliveryMode::Posted] {
            rows.push(point(ctx, mode, drives));
        }
    }
    let mut out = ExperimentOutput::new("nvme-posted", ctx.seed, &rows);
    out.notes.push(format!(
        "seed 000 setup: fio libaio 4 KiB random read, iodepth {IODEPTH}, {JOBS_PER_DRIVE} jobs per drive on CPUs of their own, four drives per x16 stack, platform {PLATFORM}; first {RAMP_US} us left out"
    ));
    out
}

/// One point's row.
pub fn point(ctx: &ExperimentCtx, mode: DeliveryMode, drives: u32) -> Row {
    let sc = scenario(mode, drives, ctx.seed, ctx);
    let ramp = sim_core::Duration::from_secs_f64(RAMP_US * 1e-6);
    let (a, b) = ctx.run_point_after_ramp(&sc, ramp);
    row(mode, drives, &a, &b)
}

fn row(mode: DeliveryMode, drives: u32, a: &Report, b: &Report) -> Row {
    let secs = (b.sim_time_ns - a.sim_time_ns) * 1e-9;
    let ios = (b.io.nvme_total.reaped - a.io.nvme_total.reaped) as f64;
    let calls: u64 = b.cpu.iter().map(|c| c.handler_calls).sum::<u64>()
        - a.cpu.iter().map(|c| c.handler_calls).sum::<u64>();
    let entries = (b.interrupts_taken - a.interrupts_taken) as f64;
    let device_msis = (b.io.nvme_total.interrupts - a.io.nvme_total.interrupts) as f64;
    let vectors = (drives * JOBS_PER_DRIVE) as f64;
    let busy = super::mean_busy_between(a, b);
    let calls = calls.max(1) as f64;
    Row {
        drives,
        mode: mode.as_str().into(),
        iops_per_drive: ios / secs / drives as f64,
        msis_per_s_per_vector: calls / secs / vectors,
        notifications_per_msi: (b.notifications.sent - a.notifications.sent) as f64 / calls,
        ios_per_msi: ios / calls,
        cpu_busy_frac: busy,
        device_msis_per_s_per_vector: device_msis / secs / vectors,
        interrupts_per_io: entries / ios.max(1.0),
        port_stall_frac: port_stall_frac(a, b, secs),
        delivery_busy_frac: b.fabric.delivery.first().map_or(0.0, |d| d.busy_frac),
    }
}

/// Mean over the ports of the measured fraction of time writes stood behind an MSI.
pub fn port_stall_frac(a: &Report, b: &Report, secs: f64) -> f64 {
    let n = b.fabric.ports.len().max(1) as f64;
    b.fabric
        .ports
        .iter()
        .zip(&a.fabric.ports)
        .map(|(y, x)| (y.stalled_behind_msi_ns - x.stalled_behind_msi_ns) / (secs * 1e9))
        .sum::<f64>()
        / n
}

//! The experiment points `irqsim validate` runs, and running them on worker threads.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use devices::VmdMode;
use serde_json::Value;

use crate::experiments::{
    coalesce_loops, ipi_cluster, nvme_posted, pir_variants, rte_cache, smmu_cmdsync, vmd,
    ExperimentCtx, FieldSet,
};
use crate::kernel::ioapic_driver::RteDriver;
use crate::kernel::iosapic::{IoapicChipKind, PinTrigger};
use crate::kernel::ipi::{IpiMode, ShootdownKernel};
use crate::DeliveryMode;

/// One point of one experiment, as its row function runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Point {
    /// `pir-variants`: a variant with 1 or 2 DSA devices.
    Pir(&'static str, u32),
    /// `coalesce-loops`: a variant at a MAX_LOOPS.
    Loops(&'static str, u32),
    /// `nvme-posted`: posted or remapped, with a number of drives.
    Nvme(bool, u32),
    /// `vmd`: drives, bypass or remap, merging.
    Vmd(u32, bool, bool),
    /// `smmu-cmdsync`: MSI polling on or off, a workload, CPUs or threads.
    Smmu(bool, &'static str, u32),
    /// `ipi-cluster`: `flush-tlb-others-2011` (true) or `smp-call-function-many`, the
    /// x2APIC send, targets (the first N CPUs of socket 1).
    Ipi(bool, IpiModeKey, u32),
    /// `rte-cache`, IA-64 level pin: read-modify-write (true) or shadowed.
    Rte(bool),
}

/// An x2APIC send, orderable (for [`Point`]'s keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum IpiModeKey {
    /// `physical`.
    Physical,
    /// `cluster` (the patch's per-cluster send).
    Cluster,
    /// `cluster-per-cpu` (the send before the patch).
    ClusterPerCpu,
}

impl IpiModeKey {
    fn mode(self) -> IpiMode {
        match self {
            IpiModeKey::Physical => IpiMode::Physical,
            IpiModeKey::Cluster => IpiMode::Cluster,
            IpiModeKey::ClusterPerCpu => IpiMode::ClusterPerCpu,
        }
    }
}

impl Point {
    /// The platform the point's experiment runs on.
    pub fn platform(self) -> &'static str {
        match self {
            Point::Pir(..) => pir_variants::PLATFORM,
            Point::Loops(..) => pir_variants::PLATFORM,
            Point::Nvme(..) => nvme_posted::PLATFORM,
            Point::Vmd(..) => vmd::PLATFORM,
            Point::Smmu(..) => smmu_cmdsync::PLATFORM,
            Point::Ipi(..) => ipi_cluster::PLATFORM,
            Point::Rte(..) => rte_cache::IA64_PLATFORM,
        }
    }

    /// Runs the point in `ctx` and returns its row.
    pub fn run(self, ctx: &ExperimentCtx) -> Value {
        let row = match self {
            Point::Pir(v, n) => serde_json::to_value(pir_variants::point(ctx, v, n)),
            Point::Loops(v, l) => serde_json::to_value(coalesce_loops::point(ctx, v, l)),
            Point::Nvme(posted, drives) => {
                let mode = if posted {
                    DeliveryMode::Posted
                } else {
                    DeliveryMode::Remapped
                };
                serde_json::to_value(nvme_posted::point(ctx, mode, drives))
            }
            Point::Vmd(drives, bypass, merge) => {
                let mode = if bypass {
                    VmdMode::Bypass
                } else {
                    VmdMode::Remap
                };
                serde_json::to_value(vmd::point(ctx, drives, mode, merge))
            }
            Point::Smmu(msipoll, workload, cpus) => {
                serde_json::to_value(smmu_cmdsync::point(ctx, msipoll, workload, cpus))
            }
            Point::Ipi(old, mode, targets) => {
                let kernel = if old {
                    ShootdownKernel::FlushTlbOthers2011
                } else {
                    ShootdownKernel::SmpCallFunctionMany
                };
                let config = ipi_cluster::Config::of(ctx).expect("validate sets valid fields");
                return serde_json::to_value(ipi_cluster::point(
                    ctx,
                    &config,
                    kernel,
                    mode.mode(),
                    targets,
                    "socket1",
                ))
                .expect("rows serialize");
            }
            Point::Rte(rmw) => {
                let driver = if rmw {
                    RteDriver::ReadModifyWrite
                } else {
                    RteDriver::Shadowed
                };
                let sc = ctx.prepared(&rte_cache::chip_scenario(
                    IoapicChipKind::Ia64Iosapic,
                    PinTrigger::Level,
                    driver,
                    ctx.seed,
                ));
                serde_json::to_value(rte_cache::point(driver, &sc))
            }
        };
        row.expect("rows serialize")
    }
}

/// What a set of runs produced: each point's row.
pub type Results = BTreeMap<Point, Value>;

/// A job: a point under a list of field overrides (none for the baseline).
#[derive(Clone, Debug)]
pub struct Job {
    /// The point.
    pub point: Point,
    /// Overrides on top of the point's platform.
    pub sets: Vec<FieldSet>,
}

/// Runs every job on `threads` workers; results come back in job order, so they do
/// not depend on the thread count.
pub fn run_jobs(jobs: &[Job], seed: u64, threads: usize) -> Vec<Value> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<Value>>> = Mutex::new(vec![None; jobs.len()]);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                let mut ctx = ExperimentCtx::new(seed);
                ctx.sets = job.sets.clone();
                let row = job.point.run(&ctx);
                out.lock().expect("no worker panicked")[i] = Some(row);
            });
        }
    });
    out.into_inner()
        .expect("no worker panicked")
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}

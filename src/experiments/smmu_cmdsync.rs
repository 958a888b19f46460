//! `smmu-cmdsync`: how long a CMD_SYNC takes on an Arm SMMUv3, and what it costs a
//! NIC's transmit path in strict mode, with CMD_SYNC completion by MSI write (Linux
//! "MSI polling") and by polling CONS (WFE, woken by SEV). Every point is a `System`
//! run on `arch = "arm"`: the Linux command-queue algorithms of `kernel::smmu` run as
//! CPU tasks against the SMMU model of `iommu_sim::smmuv3`, their shared lines in the
//! one line model.
//!
//! Rows:
//! - `empty`: one CPU issuing a CMD_SYNC alone into an empty queue, in a loop (the
//!   seed's micro-benchmark);
//! - `unmap`: 1 and 16 CPUs each unmapping one-page buffers in a loop (TLBI and
//!   CMD_SYNC per buffer), `think_ns` apart;
//! - `udp-tx`: the seed's throughput test: 1 and 16 netperf-like threads sending
//!   32 KB UDP datagrams through a 100 Gbit/s NIC with 16 queues, every fragment
//!   mapped and, on TX completion, unmapped with its own CMD_SYNC. `tx_gbps` is the
//!   UDP payload the NIC sent, per simulated second. Each sender runs on its queue's
//!   interrupt CPU (XPS lines them up), so one CPU both sends and cleans;
//! - `udp-tx-apart`: the same, each sender on a CPU that takes no queue interrupt, as
//!   an unpinned netperf thread mostly is on a Kunpeng 920 server, which has several
//!   times more CPUs than 16 queue interrupts ([`tx_apart_scenario`]). The seed does
//!   not say where its threads ran.
//!
//! The platform is the `kunpeng920` profile (seed 004's hi1620): its SoC path is built
//! from hops. The compute-die and die-to-die hops come from a public core-to-core
//! measurement of a Kunpeng 920; the I/O-die hop, the SMMU register and DRAM latencies
//! are assumptions. The figures are model output, not measurements.

use serde::Serialize;

use super::{ExperimentCtx, ExperimentOutput};
use crate::report::Report;
use crate::system::io::NicDeviceConfig;
use crate::system::scenario::Arch;
use crate::system::smmu_host::{CmdqLock, SmmuLoadConfig, SmmuSetup, SmmuWorkload};
use crate::system::transmit::TransmitConfig;
use crate::system::{DeliveryMode, Scenario};
use devices::{Affinity, NicConfig};

/// Simulated time of a latency point, us.
const LATENCY_US: f64 = 400.0;
/// Simulated time of a transmit point, us.
const TX_US: f64 = 20000.0;
/// Transmit points do not count datagrams that left the wire before this, us.
const TX_WARMUP_US: f64 = 500.0;
/// CPUs of the machine: one socket's worth for 16 senders and their queues.
const CPUS: u32 = 32;
/// NIC queues (hns3 gives each CPU of a 16-queue port its own TX queue).
const NIC_QUEUES: u32 = 16;
/// hns3's default TX interrupt gap limit, us (`HNS3_INT_GL_50K` = 20 us).
const HNS3_GL_US: u32 = 20;
/// TX descriptors per queue. Assumption: 1024 (hns3's default BD count per ring).
const HNS3_TX_RING: u32 = 1024;

/// One point: a CMD_SYNC completion method, a workload and a CPU count.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Whether the SMMU completes CMD_SYNC by MSI write (Linux "MSI polling").
    pub msipoll: bool,
    /// How CMD_SYNC completion was awaited: "msi", "cons-wfe" or "cons-spin".
    pub poll_mode: String,
    /// "empty" (CMD_SYNC alone), "unmap" (TLBI + CMD_SYNC per buffer, in a loop),
    /// "udp-tx" (the transmit path, each sender on its queue's interrupt CPU) or
    /// "udp-tx-apart" (the same, each sender on a CPU that takes no queue interrupt).
    pub workload: String,
    /// CPUs issuing (for `udp-tx`: sending threads).
    pub cpus: u32,
    /// Median time of one command-queue call with its CMD_SYNC (loads: from the
    /// first queue operation to the return; `udp-tx`: the call's interrupts-masked
    /// span), ns.
    pub cmd_sync_ns_p50: f64,
    /// 99th percentile of the same, ns.
    pub cmd_sync_ns_p99: f64,
    /// Median time from a CPU's PROD write to its CMD_SYNC poll returning (the wait
    /// seed 004 quotes: 280 ns with MSI polling, 190 ns without), over calls whose
    /// CPU wrote PROD; null when none did. ns.
    pub poll_window_ns: Option<f64>,
    /// 99th percentile of the same, ns.
    pub poll_window_ns_p99: Option<f64>,
    /// Calls with a CMD_SYNC completed per simulated second, all CPUs.
    pub unmaps_per_sec: f64,
    /// For `udp-tx`: UDP payload the NIC sent, Gbit/s; null for the other rows,
    /// which transmit nothing.
    pub tx_gbps: Option<f64>,
    /// CMD_SYNCs the SMMU completed per second of the point.
    pub syncs_per_sec: f64,
}

/// Seed 004's machine.
pub const PLATFORM: &str = "kunpeng920";

fn base(name: String, msipoll: bool, seed: u64, duration_us: f64) -> Scenario {
    let mut sc = Scenario::builder()
        .name(name)
        .seed(seed)
        .duration_us(duration_us)
        .mode(DeliveryMode::Remapped)
        .arch(Arch::Arm)
        .cpus(CPUS)
        .smmu(SmmuSetup {
            msi_polling_enabled: msipoll,
            // The seed's kernel (5.9-rc1) predates the fair lock.
            cmdq_lock: CmdqLock::SetRelease,
            ..SmmuSetup::default()
        })
        .into_unvalidated();
    sc.platform = Some(PLATFORM.into());
    sc
}

/// The scenario of a load point: `cpus` CPUs each calling `workload` in a loop.
pub fn load_scenario(msipoll: bool, workload: SmmuWorkload, cpus: u32, seed: u64) -> Scenario {
    let mut sc = base(
        format!("smmu-cmdsync {workload:?} x{cpus} msipoll={msipoll}"),
        msipoll,
        seed,
        LATENCY_US,
    );
    sc.smmu_loads.push(SmmuLoadConfig {
        name: String::new(),
        cpus: (0..cpus).collect(),
        workload,
        think_ns: 1000.0,
        think_jitter: 0.2,
        calls: None,
        warmup_us: 20.0,
        asid: 1,
    });
    sc
}

/// The scenario of a transmit point: `threads` UDP senders on a 100G NIC.
pub fn tx_scenario(msipoll: bool, threads: u32, seed: u64) -> Scenario {
    let mut sc = base(
        format!("smmu-cmdsync udp-tx x{threads} msipoll={msipoll}"),
        msipoll,
        seed,
        TX_US,
    );
    sc.nics.push(NicDeviceConfig {
        name: "hns3".into(),
        queues: NIC_QUEUES,
        affinity: Default::default(),
        rx: None,
        tx: None,
        nic: NicConfig {
            tx_ring: HNS3_TX_RING,
            itr_interval: HNS3_GL_US,
            itr_granularity_ns: 1000.0,
            ..NicConfig::default()
        },
        napi: Default::default(),
        source_id: 0x0300,
        port: None,
        handler_cycles: None,
    });
    sc.transmit.push(TransmitConfig {
        name: "netperf".into(),
        nic: 0,
        threads,
        cpus: Vec::new(),
        datagram_bytes: 32768,
        mtu: 1500,
        sndbuf_bytes: 212_992,
        skb_overhead_bytes: 1100,
        datagrams: None,
        line_gbps: 100.0,
        warmup_us: TX_WARMUP_US,
        asid: 1,
    });
    sc
}

/// The scenario of a transmit point with each sender on a CPU that takes no queue
/// interrupt. hns3 aims queue `i`'s interrupt at the `i`-th CPU of the NIC's node
/// (`hns3_nic_set_cpumask`: `cpumask_local_spread(i, node)`) and sets XPS from the
/// same masks (`hns3_config_xps`), so only those CPUs have an XPS queue. A netperf
/// thread the scheduler places anywhere else gets its queue from the flow hash, and
/// that queue's TX completion, with its CMD_SYNCs, runs on another CPU than the
/// sender. Thread `t` is on CPU `NIC_QUEUES + t` and sends on queue `t`
/// (assumption: the flows hash to distinct queues).
pub fn tx_apart_scenario(msipoll: bool, threads: u32, seed: u64) -> Scenario {
    let mut sc = tx_scenario(msipoll, threads, seed);
    sc.name = format!("smmu-cmdsync udp-tx-apart x{threads} msipoll={msipoll}");
    sc.nics[0].affinity = Affinity::Explicit {
        cpus: (0..NIC_QUEUES).collect(),
    };
    sc.transmit[0].cpus = (NIC_QUEUES..NIC_QUEUES + threads).collect();
    sc
}

/// Runs the experiment with `seed`.
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Checks `--platform` and `--set` against every point: the bare CMD_SYNC loads have
/// no transmit path and the transmit rows no `smmu_loads`, so a set reaches the points
/// that have its field.
pub fn check(ctx: &ExperimentCtx) -> Result<(), String> {
    ctx.check_points(&scenarios(ctx))
}

/// Every point's scenario, in row order.
pub fn scenarios(ctx: &ExperimentCtx) -> Vec<Scenario> {
    [true, false]
        .iter()
        .flat_map(|&msipoll| {
            CASES
                .iter()
                .map(move |&(workload, cpus)| point_scenario(msipoll, workload, cpus, ctx.seed))
        })
        .collect()
}

/// The scenario of one row (see [`point`]).
pub fn point_scenario(msipoll: bool, workload: &str, cpus: u32, seed: u64) -> Scenario {
    match workload {
        "empty" => load_scenario(msipoll, SmmuWorkload::SyncOnly, cpus, seed),
        "unmap" => load_scenario(msipoll, SmmuWorkload::Unmap { pages: 1 }, cpus, seed),
        "udp-tx" => tx_scenario(msipoll, cpus, seed),
        "udp-tx-apart" => tx_apart_scenario(msipoll, cpus, seed),
        other => panic!("smmu-cmdsync has no workload {other:?}"),
    }
}

fn row(msipoll: bool, workload: &str, cpus: u32, r: &Report, tx_gbps: Option<f64>) -> Row {
    let smmu = r.smmu.as_ref().expect("an Arm run reports its SMMU");
    let secs = r.sim_time_ns * 1e-9;
    let (lat, per_sec) = match smmu.loads.first() {
        Some(l) => (&l.latency_ns, l.calls_per_sec),
        None => (
            &smmu.call_latency_ns,
            smmu.call_latency_ns.count as f64 / secs,
        ),
    };
    Row {
        msipoll,
        poll_mode: smmu.poll_mode.into(),
        workload: workload.into(),
        cpus,
        cmd_sync_ns_p50: lat.p50,
        cmd_sync_ns_p99: lat.p99,
        poll_window_ns: (smmu.poll_window_ns.count > 0).then_some(smmu.poll_window_ns.p50),
        poll_window_ns_p99: (smmu.poll_window_ns.count > 0).then_some(smmu.poll_window_ns.p99),
        unmaps_per_sec: per_sec,
        tx_gbps,
        syncs_per_sec: smmu.cmdq.sync as f64 / secs,
    }
}

/// One row: `workload` is "empty", "unmap" (one-page unmaps), "udp-tx" or
/// "udp-tx-apart"; `cpus` the issuing CPUs or sending threads.
pub fn point(ctx: &ExperimentCtx, msipoll: bool, workload: &str, cpus: u32) -> Row {
    let r = ctx.run_point(&point_scenario(msipoll, workload, cpus, ctx.seed));
    let gbps = r.transmit.first().map(|t| t.tx_gbps);
    row(msipoll, workload, cpus, &r, gbps)
}

/// The rows, in report order: (workload, CPUs or threads).
pub const CASES: [(&str, u32); 7] = [
    ("empty", 1),
    ("unmap", 1),
    ("unmap", 16),
    ("udp-tx", 1),
    ("udp-tx", 16),
    ("udp-tx-apart", 1),
    ("udp-tx-apart", 16),
];

/// Runs the experiment in `ctx` (seed, platform, overrides, optional trace).
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    let mut rows = Vec::new();
    for msipoll in [true, false] {
        for (workload, cpus) in CASES {
            rows.push(point(ctx, msipoll, workload, cpus));
        }
    }
    let mut out = ExperimentOutput::new("smmu-cmdsync", ctx.seed, &rows);
    out.notes.push(format!(
        "model output on the {} profile (platforms/{}.toml; its I/O-die, DRAM and register costs are assumptions), not a Kunpeng 920 measurement",
        ctx.platform(PLATFORM).name,
        ctx.platform(PLATFORM).name
    ));
    out.notes.push(format!(
        "udp-tx: 32 KB UDP datagrams, MTU 1500, {NIC_QUEUES} NIC queues at 100 Gbit/s, one strict-mode unmap (TLBI + CMD_SYNC) per fragment; tx_gbps counts UDP payload after {TX_WARMUP_US} us"
    ));
    out.notes.push(format!(
        "udp-tx-apart: queue interrupts on CPUs 0-{} (hns3's affinity hints), sender t on CPU {} + t and queue t, so TX completion and its CMD_SYNCs run on another CPU than the sender",
        NIC_QUEUES - 1,
        NIC_QUEUES
    ));
    out
}

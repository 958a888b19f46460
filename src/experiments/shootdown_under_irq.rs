//! `shootdown-under-irq`: TLB-shootdown latency from one CPU to the other CPUs of its
//! socket while DSA interrupts land on those targets, posted vs remapped, at several
//! interrupt rates.
//!
//! The machine is the `generic` profile's 2 sockets x 20 cores x 2 threads. CPU 0
//! runs `native_flush_tlb_multi` (a cross call with wait = true, x2APIC cluster mode)
//! to every other CPU of socket 0 at `SHOOTDOWN_RATE_PER_S`, Poisson. Each target has
//! its own open-loop DSA queue raising MSIs at `irq_rate_mps` (per target CPU). The
//! sender has none, so its own interrupts do not enter the figure.
//!
//! Why the tail moves: a call returns when the *last* target has run the function. A
//! target in a hardirq handler (interrupts off) takes the call-function IPI only when
//! the handler returns; the IPI's vector class is the highest, so it is next. With
//! remapped MSIs every MSI is its own interrupt (entry, handler, EOI, exit), so at
//! high rates each target is in a handler most of the time and the slowest of the
//! targets sets the call's length. Posted MSIs coalesce: one notification drains
//! every MSI posted meanwhile, so targets spend less time in handlers per MSI, but a
//! single notification handler can run longer.
//!
//! Every figure comes from the model and its cost tables, not from hardware.

use devices::ArrivalProcess;
use serde::Serialize;

use super::{ExperimentCtx, ExperimentOutput};
use crate::kernel::ipi::IpiMode;
use crate::system::scenario::{DeviceConfig, Scenario};
use crate::system::xcall::ShootdownConfig;
use crate::topology::{Topology, TopologySpec};
use crate::DeliveryMode;

/// The platform (its machine is the topology below).
pub const PLATFORM: &str = "generic";
/// Interrupt rates per target CPU, millions of MSIs per second.
pub const IRQ_RATES_MPS: &[f64] = &[0.0, 0.1, 0.25, 0.5, 1.0, 1.5];
/// Shootdowns per second from the sender.
pub const SHOOTDOWN_RATE_PER_S: f64 = 20_000.0;
/// Shootdowns each point aims to measure.
const TARGET_CALLS: f64 = 600.0;
/// The sender.
pub const SENDER: u32 = 0;
/// The device vector of every target's queue.
const DEVICE_VECTOR: u32 = 0x30;

/// One point: a delivery mode at an interrupt rate.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// `posted` or `remapped`.
    pub mode: String,
    /// MSIs offered to each target CPU, millions per second.
    pub irq_rate_mps: f64,
    /// Median shootdown latency (call start to return), ns.
    pub shootdown_p50_ns: f64,
    /// 99th-percentile shootdown latency, ns.
    pub shootdown_p99_ns: f64,
    /// Mean over the targets of the fraction of time spent taking and handling
    /// interrupts (entry, exit, handlers, descriptor accesses, EOI; the cross call's
    /// own handler operations excluded).
    pub target_irq_busy_frac: f64,
    /// Shootdowns completed.
    pub shootdowns: u64,
    /// Mean shootdown latency, ns.
    pub shootdown_mean_ns: f64,
    /// Largest shootdown latency, ns.
    pub shootdown_max_ns: f64,
    /// Interrupts the targets took per MSI they were sent (0 when none were sent).
    pub interrupts_per_msi: f64,
    /// MSIs handled per simulated second on all targets together, millions.
    pub handled_mps: f64,
    /// Whether every MSI is accounted for (handled, pending or dropped).
    pub balanced: bool,
}

/// The machine.
pub fn topology() -> TopologySpec {
    let layout = crate::platform::get(PLATFORM)
        .expect("the platform is embedded")
        .layout();
    TopologySpec::new(
        layout.sockets,
        layout.cores_per_socket,
        layout.threads_per_core,
    )
}

/// The targets: every CPU of the sender's socket but the sender.
pub fn targets() -> Vec<u32> {
    let topo = Topology::new(topology()).expect("the platform's machine is valid");
    let socket = topo.cpu(sim_core::CpuId(SENDER)).socket;
    topo.socket_cpus(socket)
        .map(|c| c.0)
        .filter(|&c| c != SENDER)
        .collect()
}

/// The scenario of one point.
pub fn scenario(mode: DeliveryMode, irq_rate_mps: f64, seed: u64) -> Scenario {
    let targets = targets();
    let mut b = Scenario::builder()
        .name(format!(
            "shootdown-under-irq {} {irq_rate_mps} M/s",
            mode.as_str()
        ))
        .seed(seed)
        .duration_us(TARGET_CALLS / SHOOTDOWN_RATE_PER_S * 1e6)
        .mode(mode)
        .platform(PLATFORM)
        .topology(topology())
        .shootdown(ShootdownConfig {
            name: "tlb-flush".into(),
            from: vec![SENDER],
            targets: targets.clone(),
            target_socket: None,
            arrival: ArrivalProcess::Poisson {
                rate_per_s: SHOOTDOWN_RATE_PER_S,
            },
            ipi_mode: IpiMode::Cluster,
            kernel: Default::default(),
            calls: None,
        });
    if irq_rate_mps > 0.0 {
        for &cpu in &targets {
            let mut d = DeviceConfig::dsa(
                DEVICE_VECTOR,
                cpu,
                ArrivalProcess::Poisson {
                    rate_per_s: irq_rate_mps * 1e6,
                },
            );
            d.name = format!("dsa-cpu{cpu}");
            b = b.device(d);
        }
    }
    b.into_unvalidated()
}

/// Runs one point.
pub fn point(ctx: &ExperimentCtx, mode: DeliveryMode, irq_rate_mps: f64) -> Row {
    let report = ctx.run_point(&scenario(mode, irq_rate_mps, ctx.seed));
    let x = report
        .cross_calls
        .as_ref()
        .expect("a shootdown load reports cross calls");
    let load = &x.shootdowns[0];
    let targets = targets();
    let ns = report.sim_time_ns.max(1e-9);
    let busy: f64 = targets
        .iter()
        .map(|&c| {
            let r = &report.cpu[c as usize];
            (r.irq_entry_ns + r.irq_exit_ns + r.handlers_ns + r.pid_access_ns + r.eoi_ns) / ns
        })
        .sum::<f64>()
        / targets.len() as f64;
    let interrupts: u64 = targets
        .iter()
        .map(|&c| report.cpu[c as usize].interrupts_taken)
        .sum();
    // Call-function IPIs taken are interrupts too; count only the device ones.
    let device_interrupts = interrupts.saturating_sub(x.ipis.handlers_run);
    Row {
        mode: mode.as_str().into(),
        irq_rate_mps,
        shootdown_p50_ns: load.latency_ns.p50,
        shootdown_p99_ns: load.latency_ns.p99,
        target_irq_busy_frac: busy,
        shootdowns: load.completed,
        shootdown_mean_ns: load.latency_ns.mean,
        shootdown_max_ns: load.latency_ns.max,
        interrupts_per_msi: if report.msis.generated > 0 {
            device_interrupts as f64 / report.msis.generated as f64
        } else {
            0.0
        },
        handled_mps: report.handled_per_s / 1e6,
        balanced: report.msis.balanced,
    }
}

/// Checks `--platform` and `--set` against every point.
pub fn check(ctx: &ExperimentCtx) -> Result<(), String> {
    ctx.check_points(&scenarios(ctx))
}

/// Every point's scenario, in row order.
pub fn scenarios(ctx: &ExperimentCtx) -> Vec<Scenario> {
    super::per_mode_and_rate(IRQ_RATES_MPS, |m, r| scenario(m, r, ctx.seed))
}

/// Every point, in `ctx`.
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    let mut rows = Vec::new();
    for mode in [DeliveryMode::Posted, DeliveryMode::Remapped] {
        for &rate in IRQ_RATES_MPS {
            rows.push(point(ctx, mode, rate));
        }
    }
    let mut out = ExperimentOutput::new("shootdown-under-irq", ctx.seed, &rows);
    let t = topology();
    out.notes.push(format!(
        "machine {} sockets x {} cores x {} threads (platform {PLATFORM}); CPU {SENDER} sends {SHOOTDOWN_RATE_PER_S} \
         shootdowns/s (Poisson, x2APIC cluster mode) to the {} other CPUs of its socket; \
         each target has an open-loop DSA queue at irq_rate_mps",
        t.sockets,
        t.cores_per_socket,
        t.threads_per_core,
        targets().len()
    ));
    out.notes.push(
        "mechanism: a call waits for its slowest target, and a target in a hardirq \
         handler (interrupts off) takes the call-function IPI only when that handler \
         returns (the IPI's vector class is the highest, so it goes next); the added delay \
         is at most one handler's remaining interrupts-off window. A remapped MSI's window \
         is one entry + handler + EOI + exit; a posted notification's window drains every \
         MSI posted meanwhile, up to max_loops rounds, so it is longer though rarer"
            .into(),
    );
    out.notes.push(tail_comparison(&rows));
    out
}

/// What the rows at the highest rate say about the two modes' tails, in words.
fn tail_comparison(rows: &[Row]) -> String {
    let top = IRQ_RATES_MPS[IRQ_RATES_MPS.len() - 1];
    let at = |mode: &str| {
        rows.iter()
            .find(|r| r.mode == mode && r.irq_rate_mps == top)
    };
    let (Some(p), Some(r)) = (at("posted"), at("remapped")) else {
        return "no rows at the highest rate".into();
    };
    let quiet = rows
        .iter()
        .find(|r| r.irq_rate_mps == 0.0)
        .map_or(0.0, |r| r.shootdown_p99_ns);
    let longer = if r.shootdown_p99_ns > p.shootdown_p99_ns {
        "remapped lengthens the tail more"
    } else {
        "posted lengthens the tail more (its longer interrupts-off windows; compare \
         --set max_loops=1)"
    };
    format!(
        "at {top} M/s per target: p99 posted {:.0} ns (targets {:.0} % in interrupts), \
         remapped {:.0} ns ({:.0} %), quiet {quiet:.0} ns: {longer}; remapped handled \
         {:.1} M/s of {:.1} M/s offered (its delivery paths' occupancy)",
        p.shootdown_p99_ns,
        p.target_irq_busy_frac * 100.0,
        r.shootdown_p99_ns,
        r.target_irq_busy_frac * 100.0,
        r.handled_mps,
        top * targets().len() as f64,
    )
}

/// Runs the experiment with `seed`.
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_has_the_row_keys_and_interrupts_lengthen_the_median() {
        let ctx = ExperimentCtx::new(3);
        let quiet = point(&ctx, DeliveryMode::Remapped, 0.0);
        let busy = point(&ctx, DeliveryMode::Remapped, 0.5);
        assert!(quiet.balanced && busy.balanced);
        assert!(quiet.shootdowns > 100 && busy.shootdowns > 100);
        assert!(busy.target_irq_busy_frac > quiet.target_irq_busy_frac + 0.2);
        assert!(busy.shootdown_p50_ns > quiet.shootdown_p50_ns);
        assert!(busy.shootdown_p99_ns >= busy.shootdown_p50_ns);
        let v = serde_json::to_value(&busy).unwrap();
        for k in [
            "mode",
            "irq_rate_mps",
            "shootdown_p50_ns",
            "shootdown_p99_ns",
            "target_irq_busy_frac",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
    }
}

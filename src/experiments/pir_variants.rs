//! `pir-variants`: seed 000's DSA tests of how to drain PIR, on its Sapphire Rapids.
//!
//! The setup (FIDELITY.md, seed 000): the idxd `dsa_test` memory fill with 512-byte
//! transfers, work queues kept full, a completion interrupt per descriptor.
//! - Test 1: one dedicated WQ, one MSI vector, its interrupt on one CPU: every
//!   variant, and the remapped baseline as variant `remapped`.
//! - Test 2: two DSA devices with one WQ each, both interrupts pinned to one CPU:
//!   posted (the mainline handler) vs remapped.
//!
//! The interrupt handler reaps each completed descriptor and submits a new one in its
//! place (assumption: the thread's "one CPU" is the only CPU the test uses, so the
//! completion callback resubmits from the handler), which keeps the WQ full as long as
//! that CPU keeps up; the initial descriptors start at random phases within one
//! service time, so they do not run in lockstep. "IRQ/s" is completed descriptors (MSIs) per second, as in the
//! thread; handler calls are counted apart. No cost depends on a variant's name:
//! differences come from the operations each variant performs on the descriptor line.

use serde::Serialize;

use super::{ExperimentCtx, ExperimentOutput};
use crate::kernel::posted_msi::variant_by_name;
use crate::system::scenario::{ClosedLoopConfig, CpuConfig, DeviceConfig, DeviceKind};
use crate::{DeliveryMode, Report, Scenario};

/// The platform the seed measured on.
pub const PLATFORM: &str = "spr";
/// Test 1's variants, the two ON-clear store variants of the TSO explorer, and
/// "remapped" for the non-posted baseline.
pub const VARIANTS: &[&str] = &[
    "copy-then-xchg",
    "rfc",
    "interleaved",
    "per-word-dispatch",
    "no-final-recheck",
    "xchg-word0",
    "kvm-clear-on-first",
    "plain-clear-on",
    "plain-clear-on-mfence",
    "remapped",
];
/// Test 2's variants: the mainline handler against the remapped baseline.
pub const TWO_DEVICE_VARIANTS: &[&str] = &["copy-then-xchg", "remapped"];
/// Bytes each memory-fill descriptor writes (seed 000: `run_intr.sh 512`).
pub const TRANSFER_BYTES: u64 = 512;
/// Root ports per stack of the scenario's layout (the default), to put each DSA
/// device on a stack of its own.
const PORTS_PER_STACK: u32 = 4;
/// Descriptors each WQ holds, all kept in flight.
pub const WQ_DEPTH: u32 = 128;
/// Simulated time of one point, and the warm-up left out of the rates.
pub const DURATION_US: f64 = 2000.0;
/// Warm-up excluded from the rates, us.
pub const RAMP_US: f64 = 200.0;

/// One point: a variant with one or two DSA devices.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Handler variant name, or `remapped` for the non-posted baseline.
    pub variant: String,
    /// DSA devices (one WQ and one vector each), all interrupting CPU 0.
    pub dsa_devices: u32,
    /// Completed descriptors (= MSIs) per second, millions: the thread's "IRQ/s".
    pub irq_rate_mps: f64,
    /// Device-handler invocations per second, millions (merged MSIs share one).
    pub handler_calls_mps: f64,
    /// Interrupt entries (notifications, or remapped interrupts) per MSI.
    pub notifications_per_irq: f64,
    /// Accesses of CPU 0 to its descriptor line that missed L1, per interrupt entry.
    pub cpu_l1d_misses_per_notification: f64,
    /// Locked exchanges of PIR words per interrupt entry.
    pub xchg_per_notification: f64,
    /// Plain loads of PIR words per interrupt entry.
    pub loads_per_notification: f64,
    /// Memory-fill bandwidth, GB/s (descriptors x 512 B).
    pub fill_gbytes_per_s: f64,
    /// Fraction of the measured time CPU 0 was busy.
    pub cpu_busy_frac: f64,
    /// MSIs in PIR when the run ended (in flight for a correct variant; a broken one
    /// can also leave stranded ones here).
    pub pending_in_pir_at_end: u64,
    /// The variant is broken on purpose: it can strand posted interrupts.
    pub broken: bool,
}

/// The scenario of one point: `variant` is a handler name or "remapped".
pub fn scenario(variant: &str, dsa_devices: u32, seed: u64) -> Scenario {
    let remapped = variant == "remapped";
    let mut sc = Scenario {
        name: format!("pir-variants {variant} x{dsa_devices}"),
        seed,
        duration_us: DURATION_US,
        mode: if remapped {
            DeliveryMode::Remapped
        } else {
            DeliveryMode::Posted
        },
        variant: if remapped { "copy-then-xchg" } else { variant }.into(),
        // CPU 0 takes the interrupts and resubmits.
        cpus: CpuConfig::default(),
        devices: (0..dsa_devices)
            .map(|i| DeviceConfig {
                kind: DeviceKind::Dsa,
                name: format!("dsa{i}-wq0"),
                // Consecutive vectors, as the idxd driver's MSI-X allocations get.
                vector: 0x21 + i,
                cpu: Some(0),
                apic_id: None,
                irte_index: None,
                msi_handle: None,
                source_id: 0x6a00 + (i as u16) * 0x100,
                // Each DSA is an integrated endpoint in an accelerator stack of its own.
                port: Some(i * PORTS_PER_STACK),
                handler_cycles: None,
                arrival: None,
                closed_loop: Some(ClosedLoopConfig {
                    inflight: WQ_DEPTH,
                    random_start: true,
                    wq: devices::DsaWqConfig {
                        depth: WQ_DEPTH,
                        transfer_bytes: TRANSFER_BYTES,
                        ..devices::DsaWqConfig::default()
                    },
                    ..ClosedLoopConfig::default()
                }),
            })
            .collect(),
        ..Scenario::builder().into_unvalidated()
    };
    sc.apply_platform(PLATFORM)
        .expect("the experiment's platform exists");
    sc
}

/// Checks `--platform` and `--set` against every point.
pub fn check(ctx: &ExperimentCtx) -> Result<(), String> {
    ctx.check_points(&scenarios(ctx))
}

/// Every point's scenario, in row order.
pub fn scenarios(ctx: &ExperimentCtx) -> Vec<Scenario> {
    let one = VARIANTS.iter().map(|v| scenario(v, 1, ctx.seed));
    let two = TWO_DEVICE_VARIANTS.iter().map(|v| scenario(v, 2, ctx.seed));
    one.chain(two).collect()
}

/// Runs the experiment with `seed`.
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Runs the experiment in `ctx` (seed, platform, overrides, optional trace).
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    let mut rows: Vec<Row> = VARIANTS.iter().map(|v| point(ctx, v, 1)).collect();
    rows.extend(TWO_DEVICE_VARIANTS.iter().map(|v| point(ctx, v, 2)));
    let mut out = ExperimentOutput::new("pir-variants", ctx.seed, &rows);
    notes(&mut out);
    out
}

/// One point's row.
pub fn point(ctx: &ExperimentCtx, variant: &str, dsa_devices: u32) -> Row {
    let sc = scenario(variant, dsa_devices, ctx.seed);
    let ramp = sim_core::Duration::from_secs_f64(RAMP_US * 1e-6);
    let (a, b) = ctx.run_point_after_ramp(&sc, ramp);
    row(variant, dsa_devices, &a, &b)
}

/// The row of a point from its reports at the end of the ramp (`a`) and at the end
/// (`b`): every rate over the measured part only.
pub fn row(variant: &str, dsa_devices: u32, a: &Report, b: &Report) -> Row {
    let secs = (b.sim_time_ns - a.sim_time_ns) * 1e-9;
    let (ca, cb) = (&a.cpu[0], &b.cpu[0]);
    let d = |f: fn(&crate::report::CpuReport) -> u64| (f(cb) - f(ca)) as f64;
    let descriptors: u64 = b
        .devices
        .iter()
        .map(|d| d.descriptors_completed)
        .sum::<u64>()
        - a.devices
            .iter()
            .map(|d| d.descriptors_completed)
            .sum::<u64>();
    let msis = (b.msis.generated - a.msis.generated).max(1) as f64;
    let entries = d(|c| c.interrupts_taken).max(1.0);
    Row {
        variant: variant.to_string(),
        dsa_devices,
        irq_rate_mps: msis / secs / 1e6,
        handler_calls_mps: d(|c| c.handler_calls) / secs / 1e6,
        notifications_per_irq: d(|c| c.interrupts_taken) / msis,
        cpu_l1d_misses_per_notification: d(|c| c.pid_l1_misses) / entries,
        xchg_per_notification: d(|c| c.pir_xchgs) / entries,
        loads_per_notification: d(|c| c.pir_loads) / entries,
        fill_gbytes_per_s: descriptors as f64 * TRANSFER_BYTES as f64 / secs / 1e9,
        cpu_busy_frac: (cb.busy_ns - ca.busy_ns) / (secs * 1e9),
        pending_in_pir_at_end: b.msis.pending_where.pir,
        broken: b.variant_broken && variant != "remapped",
    }
}

fn notes(out: &mut ExperimentOutput) {
    for v in VARIANTS {
        if variant_by_name(v, 3).is_some_and(|h| h.is_broken()) {
            out.notes.push(format!(
                "{v} is BROKEN ON PURPOSE: it can strand posted interrupts; its rows show what that costs, not a candidate"
            ));
        }
    }
    out.notes.push(
        "xchg-word0 harvests PIR word 0 only: the DSA vectors here (0x21, 0x22) are in that word, so it runs like copy-then-xchg; it strands vectors from 0x40 up (irqsim explore --variant xchg-word0)"
            .into(),
    );
    out.notes.push(
        "plain-clear-on clears ON with a plain store; the System performs each access when it completes (sequentially consistent), so the store-buffer window that loses an interrupt under x86-TSO does not occur here (irqsim explore --variant plain-clear-on --memory-model tso); plain-clear-on-mfence adds the fence's cost (costs.cpu.mfence_cycles)"
            .into(),
    );
    out.notes.push(format!(
        "seed 000 setup: DSA memfill {TRANSFER_BYTES} B, WQs of {WQ_DEPTH} kept full by the handler's resubmissions, interrupts on CPU 0, platform {PLATFORM}; first {RAMP_US} us left out"
    ));
}

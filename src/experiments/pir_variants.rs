//! `pir-variants`: every way of draining PIR, on one CPU that does nothing but handle
//! interrupts, fed by DSA work queues in closed loop (a fixed number of memory-fill
//! descriptors in flight; each completion reaped by the handler is resubmitted at a
//! submission cost). The IRQ rate is therefore set by the handler path, not by an
//! offered rate, and differences between variants come only from the operations each
//! performs on the descriptor line: no cost depends on a variant's name.

use serde::Serialize;

use super::{ExperimentCtx, ExperimentOutput};
use crate::kernel::posted_msi::variant_by_name;
use crate::system::scenario::{ClosedLoopConfig, CpuConfig, DeviceConfig, DeviceKind};
use crate::{DeliveryMode, Scenario};

/// Variants compared, plus "remapped" for the non-posted baseline.
pub const VARIANTS: &[&str] = &[
    "copy-then-xchg",
    "rfc",
    "interleaved",
    "per-word-dispatch",
    "no-final-recheck",
    "kvm-clear-on-first",
    "remapped",
];
/// One queue on one vector, and four queues with one vector in each PIR word.
pub const CASES: &[&[u32]] = &[&[0x21], &[0x21, 0x61, 0xa1, 0xe1]];
/// Descriptors in flight over all queues of a case: few (little merging, so the
/// per-notification path shows) and many (a saturated handler, heavy merging).
pub const TOTAL_INFLIGHT: &[u32] = &[4, 64];
const DURATION_US: f64 = 2000.0;

/// One point: a variant with a set of vectors and descriptors in flight.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Handler variant name, or `remapped` for the non-posted baseline.
    pub variant: String,
    /// Queues (one vector each) feeding the CPU.
    pub vectors: u32,
    /// Descriptors in flight over all queues.
    pub inflight: u32,
    /// Device-handler invocations per second.
    pub irq_rate_mps: f64,
    /// Notification (or, for the baseline, interrupt) entries per handler invocation.
    pub notifications_per_irq: f64,
    /// Accesses to the CPU's own descriptor line that missed L1, per interrupt entry.
    pub cpu_l1d_misses_per_notification: f64,
    /// Locked exchanges of PIR words per interrupt entry.
    pub xchg_per_notification: f64,
    /// Plain loads of PIR words per interrupt entry.
    pub loads_per_notification: f64,
    /// Completed descriptors per second.
    pub descriptors_mps: f64,
    /// Fraction of simulated time the CPU was busy (0 to 1).
    pub cpu_busy_frac: f64,
    /// MSIs in PIR when the run ended (in flight for a correct variant; a broken one
    /// can also leave stranded ones here).
    pub pending_in_pir_at_end: u64,
    /// The variant is broken on purpose: it can strand posted interrupts.
    pub broken: bool,
}

/// The scenario of one point: `variant` is a handler name or "remapped".
pub fn scenario(variant: &str, vectors: &[u32], inflight: u32, seed: u64) -> Scenario {
    let per_queue = (inflight / vectors.len() as u32).max(1);
    let remapped = variant == "remapped";
    Scenario {
        name: format!(
            "pir-variants {variant} x{} inflight {inflight}",
            vectors.len()
        ),
        seed,
        duration_us: DURATION_US,
        mode: if remapped {
            DeliveryMode::Remapped
        } else {
            DeliveryMode::Posted
        },
        variant: if remapped { "copy-then-xchg" } else { variant }.into(),
        max_loops: crate::kernel::DEFAULT_MAX_LOOPS,
        cpus: CpuConfig::default(),
        iommu: Default::default(),
        costs: Default::default(),
        devices: vectors
            .iter()
            .enumerate()
            .map(|(i, v)| DeviceConfig {
                kind: DeviceKind::Dsa,
                name: format!("dsa-wq{i}"),
                vector: *v,
                cpu: Some(0),
                apic_id: None,
                irte_index: None,
                msi_handle: None,
                source_id: 0x0100 + i as u16,
                handler_cycles: None,
                port: None,
                arrival: None,
                closed_loop: Some(ClosedLoopConfig {
                    inflight: per_queue,
                    ..ClosedLoopConfig::default()
                }),
            })
            .collect(),
        ..Scenario::builder().into_unvalidated()
    }
}

/// Runs the experiment with `seed`.
pub fn run(seed: u64) -> ExperimentOutput {
    run_with(&ExperimentCtx::new(seed))
}

/// Runs the experiment in `ctx` (seed, optional trace).
pub fn run_with(ctx: &ExperimentCtx) -> ExperimentOutput {
    let seed = ctx.seed;
    let mut rows = Vec::new();
    for &inflight in TOTAL_INFLIGHT {
        for vectors in CASES {
            for variant in VARIANTS {
                rows.push(point(ctx, variant, vectors, inflight));
            }
        }
    }
    let mut out = ExperimentOutput::new("pir-variants", seed, &rows);
    notes(&mut out);
    out
}
fn point(ctx: &ExperimentCtx, variant: &str, vectors: &[u32], inflight: u32) -> Row {
    let r = ctx.run_point(&scenario(variant, vectors, inflight, ctx.seed));
    let secs = r.sim_time_ns * 1e-9;
    let c = &r.cpu[0];
    let irqs = c.handler_calls.max(1) as f64;
    let entries = c.interrupts_taken.max(1) as f64;
    Row {
        variant: variant.to_string(),
        vectors: vectors.len() as u32,
        inflight,
        irq_rate_mps: c.handler_calls as f64 / secs / 1e6,
        notifications_per_irq: c.interrupts_taken as f64 / irqs,
        cpu_l1d_misses_per_notification: c.pid_l1_misses as f64 / entries,
        xchg_per_notification: c.pir_xchgs as f64 / entries,
        loads_per_notification: c.pir_loads as f64 / entries,
        descriptors_mps: r
            .devices
            .iter()
            .map(|d| d.descriptors_completed)
            .sum::<u64>() as f64
            / secs
            / 1e6,
        cpu_busy_frac: c.busy_frac,
        pending_in_pir_at_end: r.msis.pending_where.pir,
        broken: r.variant_broken && variant != "remapped",
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
}

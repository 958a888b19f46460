//! Built-in experiments: each reproduces one published question with the model and
//! returns rows that the CLI prints as a table or as JSON.
//!
//! Every experiment takes a seed; rows come from the model, never from hardware.

pub mod coalesce_loops;
pub mod ioapic_mask;
pub mod ipi_cluster;
pub mod nic_napi;
pub mod nvme_posted;
pub mod pir_variants;
pub mod posted_vs_remapped;
pub mod rte_cache;
pub mod smmu_cmdsync;
pub mod vmd;

use serde::Serialize;

use crate::report::table::Table;
use crate::report::trace::ChromeTrace;
use crate::report::MODEL_NOTE;
use crate::{Report, Scenario, System};

/// One experiment's output.
#[derive(Clone, Debug, Serialize)]
pub struct ExperimentOutput {
    /// Name of the experiment, as in [`ALL`].
    pub experiment: String,
    /// Seed every point ran with.
    pub seed: u64,
    /// One JSON object per point, keys in the row struct's field order.
    pub rows: Vec<serde_json::Value>,
    /// Human-readable remarks (e.g. that a variant is broken on purpose).
    pub notes: Vec<String>,
    /// Always [`MODEL_NOTE`].
    pub note: &'static str,
}

impl ExperimentOutput {
    /// An output of `rows`, serialized, with no notes.
    pub fn new<R: Serialize>(experiment: &str, seed: u64, rows: &[R]) -> Self {
        ExperimentOutput {
            experiment: experiment.into(),
            seed,
            rows: rows
                .iter()
                .map(|r| serde_json::to_value(r).expect("rows serialize"))
                .collect(),
            notes: Vec::new(),
            note: MODEL_NOTE,
        }
    }

    /// `{"experiment": NAME, "rows": [...]}` plus the seed and notes.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("output serializes")
    }

    /// A table with one column per key of the first row, in the row's field order.
    pub fn to_table(&self) -> String {
        let Some(first) = self.rows.first().and_then(|r| r.as_object()) else {
            return format!("{}: no rows\n", self.experiment);
        };
        let keys: Vec<String> = first.keys().cloned().collect();
        let mut t = Table::new(keys.clone());
        for r in &self.rows {
            t.row(keys.iter().map(|k| format_cell(&r[k])));
        }
        let mut s = format!("experiment {}  (seed {})\n", self.experiment, self.seed);
        s.push_str(&t.render());
        for n in &self.notes {
            s.push_str(&format!("note: {n}\n"));
        }
        s.push_str(&format!("({MODEL_NOTE})\n"));
        s
    }
}

fn format_cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => {
                if f.abs() >= 100.0 {
                    format!("{f:.0}")
                } else if f.abs() >= 1.0 {
                    format!("{f:.2}")
                } else {
                    format!("{f:.3}")
                }
            }
            _ => n.to_string(),
        },
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// How an experiment is run: its seed, and optionally a trace every point writes to.
pub struct ExperimentCtx {
    /// Seed of every point's scenario.
    pub seed: u64,
    /// Chrome trace every point writes to, when asked for (`--trace`).
    pub trace: Option<ChromeTrace>,
}

impl ExperimentCtx {
    /// A context with `seed` and no trace.
    pub fn new(seed: u64) -> Self {
        ExperimentCtx { seed, trace: None }
    }

    /// Runs one point of the experiment to its end, tracing it if asked.
    pub fn run_point(&self, scenario: &Scenario) -> Report {
        let sys = System::new(scenario).expect("built-in experiment scenarios are valid");
        self.finish_point(sys, &scenario.name)
    }

    /// Runs a system built by the experiment (e.g. with its own handler) to its end.
    pub fn finish_point(&self, mut sys: System, name: &str) -> Report {
        if let Some(trace) = &self.trace {
            sys.set_observer(Box::new(trace.run(
                name,
                sys.cpu_count(),
                &sys.device_names(),
            )));
        }
        sys.run_to_end();
        sys.report()
    }
}

/// A runnable experiment.
pub struct ExperimentInfo {
    /// Name the CLI takes (`irqsim experiment NAME`).
    pub name: &'static str,
    /// One line saying what it measures, for `irqsim list`.
    pub summary: &'static str,
    /// Runs every point in the given context.
    pub run: fn(&ExperimentCtx) -> ExperimentOutput,
}

/// Every built-in experiment.
pub const ALL: &[ExperimentInfo] = &[
    ExperimentInfo {
        name: "posted-vs-remapped",
        summary: "one CPU, four DSA queues: handled rate, interrupts per MSI and latency vs offered rate, posted vs remapped",
        run: posted_vs_remapped::run_with,
    },
    ExperimentInfo {
        name: "pir-variants",
        summary: "every PIR-draining variant on one CPU fed by closed-loop DSA queues: IRQ rate, notifications, PID misses, xchgs",
        run: pir_variants::run_with,
    },
    ExperimentInfo {
        name: "coalesce-loops",
        summary: "MAX_LOOPS 1..8 and unbounded at a moderate and a high rate: handled rate, notifications per MSI, p99",
        run: coalesce_loops::run_with,
    },
    ExperimentInfo {
        name: "vmd",
        summary: "NVMe drives behind VMD, remap vs bypass, over drives x CPUs: IOPS, CPU, interrupts per I/O, p99",
        run: vmd::run_with,
    },
    ExperimentInfo {
        name: "nvme-posted",
        summary: "4 NVMe drives near their IOPS ceiling, posted MSI on and off, by number of jobs",
        run: nvme_posted::run_with,
    },
    ExperimentInfo {
        name: "nic-napi",
        summary: "one NIC RX queue with NAPI, light load to overload, interrupt throttling off and at two settings",
        run: nic_napi::run_with,
    },
    ExperimentInfo {
        name: "smmu-cmdsync",
        summary: "Arm SMMUv3 CMD_SYNC latency and TX unmap rate from 1 and 16 CPUs, MSI polling on and off",
        run: smmu_cmdsync::run_with,
    },
    ExperimentInfo {
        name: "ipi-cluster",
        summary: "TLB-shootdown-like cross call from socket 0 to socket 1 (2x20x2), x2APIC physical vs cluster mode: ICR writes and sender cycles",
        run: ipi_cluster::run_with,
    },
    ExperimentInfo {
        name: "rte-cache",
        summary: "IOAPIC mask_irq/unmask_irq cycles, read-modify-write of the RTE low word vs a shadowed low word",
        run: rte_cache::run_with,
    },
    ExperimentInfo {
        name: "ioapic-mask",
        summary: "edge interrupts lost while a user-space-driver-like flow masks the IOAPIC pin: asserted = delivered + lost + pending",
        run: ioapic_mask::run_with,
    },
];

/// Looks an experiment up by name.
pub fn find(name: &str) -> Option<&'static ExperimentInfo> {
    ALL.iter().find(|e| e.name == name)
}

/// The default seed of experiments.
pub const DEFAULT_SEED: u64 = 1;

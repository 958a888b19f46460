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
pub mod shootdown_under_irq;
pub mod smmu_cmdsync;
pub mod vmd;

use std::sync::Mutex;

use serde::Serialize;

use crate::platform::Platform;
use crate::report::table::Table;
use crate::report::trace::ChromeTrace;
use crate::report::MODEL_NOTE;
use crate::sweep::path::{FieldPath, SetError};
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
        // Headers carry the unit their name implies; the JSON keys stay bare.
        let headers: Vec<String> = keys
            .iter()
            .map(|k| match crate::plot::units::unit_of(k) {
                Some(u) => format!("{k} ({u})"),
                None => k.clone(),
            })
            .collect();
        let mut t = Table::new(headers);
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
                    group_digits(&format!("{f:.0}"))
                } else if f.abs() >= 1.0 {
                    format!("{f:.2}")
                } else {
                    format!("{f:.3}")
                }
            }
            _ => group_digits(&n.to_string()),
        },
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// `1234567` as `1,234,567` (numbers below 10,000 stay as they are).
fn group_digits(s: &str) -> String {
    let (sign, digits) = s.strip_prefix('-').map_or(("", s), |d| ("-", d));
    if digits.len() < 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return s.to_string();
    }
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

/// One `--set FIELD=VALUE`: a scenario field path and its new value.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldSet {
    /// The field, as in the scenario format (`costs.fabric.message_occupancy_ns`,
    /// `nvme[*].drive.iops_ceiling`).
    pub path: FieldPath,
    /// The value (a JSON number, boolean or string).
    pub value: serde_json::Value,
}

impl FieldSet {
    /// Parses `FIELD=VALUE`; VALUE is read as JSON when it parses (numbers, `true`,
    /// quoted strings), else as a plain string.
    pub fn parse(text: &str) -> Result<FieldSet, String> {
        let (field, value) = text
            .split_once('=')
            .ok_or_else(|| format!("--set {text:?} is not allowed: expected FIELD=VALUE"))?;
        let path = FieldPath::parse(field.trim()).map_err(|e| format!("--set: {e}"))?;
        let value = value.trim();
        let value = serde_json::from_str(value)
            .unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
        Ok(FieldSet { path, value })
    }
}

/// One scenario per (delivery mode, rate), posted first, rates inner: the points of
/// experiments that sweep a rate under both deliveries.
fn per_mode_and_rate(
    rates: &[f64],
    scenario: impl Fn(crate::system::DeliveryMode, f64) -> Scenario,
) -> Vec<Scenario> {
    use crate::system::DeliveryMode;
    [DeliveryMode::Posted, DeliveryMode::Remapped]
        .iter()
        .flat_map(|&m| rates.iter().map(move |&r| (m, r)))
        .map(|(m, r)| scenario(m, r))
        .collect()
}

/// The error for a tree that no longer deserializes after `sets` (each with its path in
/// `base`): names the first set after which it stops deserializing, found by applying
/// them again one at a time. Only the failing case pays for the replay.
fn blame<T: serde::de::DeserializeOwned>(
    base: &serde_json::Value,
    sets: &[(&FieldSet, FieldPath)],
    err: serde_json::Error,
) -> String {
    let mut tree = base.clone();
    for (s, path) in sets {
        if crate::sweep::path::set(&mut tree, path, &s.value).is_ok() {
            if let Err(e) = serde_json::from_value::<T>(tree.clone()) {
                return format!("--set {}={}: {e}", s.path, s.value);
            }
        }
    }
    format!("--set: {err}")
}

/// How an experiment is run: its seed, the platform and field overrides, and
/// optionally a trace every point writes to.
pub struct ExperimentCtx {
    /// Seed of every point's scenario.
    pub seed: u64,
    /// Chrome trace every point writes to, when asked for (`--trace`).
    pub trace: Option<ChromeTrace>,
    /// Run on this platform profile instead of the experiment's own (`--platform`).
    pub platform: Option<String>,
    /// Fields set on every point's scenario that has them, after the platform
    /// (`--set`), in order.
    pub sets: Vec<FieldSet>,
    /// For each of `sets`, the points run so far that had its field and those that
    /// did not (an experiment's points differ: only some have a transmit path).
    set_uses: Mutex<Vec<SetUse>>,
}

/// Whether one `--set` reached one point's scenario.
enum Reach {
    Applied,
    /// The scenario has no such field; what it has instead.
    Absent(String),
}

/// How many points one `--set` reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetUse {
    /// Points whose scenario had the field and ran with the new value.
    pub applied: u32,
    /// Points whose scenario has no such field and ran without it.
    pub absent: u32,
}

impl ExperimentCtx {
    /// A context with `seed`, the experiments' own platforms and no trace.
    pub fn new(seed: u64) -> Self {
        ExperimentCtx {
            seed,
            trace: None,
            platform: None,
            sets: Vec::new(),
            set_uses: Mutex::new(Vec::new()),
        }
    }

    /// The platform a point runs on: `--platform`, else the experiment's `default`.
    pub fn platform(&self, default: &str) -> &'static Platform {
        let name = self.platform.as_deref().unwrap_or(default);
        crate::platform::get(name).expect("checked when the context was made")
    }

    /// Checks the overrides against one scenario of the experiment: an unknown
    /// platform, a path the scenario does not have, or a value its field does not take
    /// is an error naming them.
    pub fn check(&self, example: &Scenario) -> Result<(), String> {
        self.check_points(std::slice::from_ref(example))
    }

    /// Checks the overrides against scenarios that between them have every table the
    /// experiment's points have. A `--set` must reach at least one of them (else it is
    /// a typo, and the error says what each kind of point has instead); where it reaches
    /// one, its value must be one the field takes.
    pub fn check_points(&self, examples: &[Scenario]) -> Result<(), String> {
        if let Some(p) = &self.platform {
            crate::platform::get(p).map_err(|e| e.to_string())?;
        }
        let mut reached = vec![false; self.sets.len()];
        let mut absences: Vec<Vec<String>> = vec![Vec::new(); self.sets.len()];
        for example in examples {
            let (_, applied) = self.apply(example).map_err(|e| {
                if examples.len() > 1 {
                    format!("point {:?}: {e}", example.name)
                } else {
                    e
                }
            })?;
            for (i, reach) in applied.into_iter().enumerate() {
                match reach {
                    Reach::Applied => reached[i] = true,
                    Reach::Absent(why) if !absences[i].contains(&why) => absences[i].push(why),
                    Reach::Absent(_) => {}
                }
            }
        }
        for (i, s) in self.sets.iter().enumerate() {
            if !reached[i] {
                // Each kind of point says what it has instead (a table with other
                // fields, a list too short), so a typo shows its neighbours.
                let why = absences[i].join("; ");
                return Err(if examples.len() > 1 {
                    format!(
                        "--set {}: no point of this experiment has that field ({why})",
                        s.path
                    )
                } else {
                    format!("--set {}: {why}", s.path)
                });
            }
        }
        Ok(())
    }

    /// The scenario a point really runs: its costs from the platform (`--platform`,
    /// else the scenario's own, else `generic`), then every `--set` whose field the
    /// scenario has.
    pub fn prepare(&self, scenario: &Scenario) -> Result<Scenario, String> {
        self.apply(scenario).map(|(sc, _)| sc)
    }

    /// [`ExperimentCtx::prepare`], and for each set whether it reached the scenario
    /// (with, when it did not, what the scenario has instead).
    fn apply(&self, scenario: &Scenario) -> Result<(Scenario, Vec<Reach>), String> {
        let mut sc = scenario.clone();
        let name = self
            .platform
            .clone()
            .or_else(|| sc.platform.clone())
            .unwrap_or_else(|| crate::platform::DEFAULT_PLATFORM.to_string());
        sc.apply_platform(&name).map_err(|e| e.to_string())?;
        let mut applied = Vec::with_capacity(self.sets.len());
        if !self.sets.is_empty() {
            let base = serde_json::to_value(&sc).expect("scenarios serialize");
            let mut tree = base.clone();
            let mut reached = Vec::new();
            for s in &self.sets {
                // Each set starts from the tree as the earlier ones left it; an absent
                // path leaves the tree untouched (a `[*]` may have set some entries
                // before finding one without the field, so it works on a copy).
                let mut attempt = tree.clone();
                match crate::sweep::path::set(&mut attempt, &s.path, &s.value) {
                    Ok(()) => {
                        tree = attempt;
                        reached.push((s, s.path.clone()));
                        applied.push(Reach::Applied);
                    }
                    Err(SetError::Absent(why)) => applied.push(Reach::Absent(why)),
                    Err(e) => return Err(format!("--set {}: {e}", s.path)),
                }
            }
            let base_dir = sc.base_dir.take();
            sc = serde_json::from_value(tree).map_err(|e| blame::<Scenario>(&base, &reached, e))?;
            sc.base_dir = base_dir;
        }
        sc.validate().map_err(|e| e.to_string())?;
        Ok((sc, applied))
    }

    /// For each of `sets`, how many points run so far had its field.
    pub fn set_uses(&self) -> Vec<SetUse> {
        let uses = self.set_uses.lock().expect("no point panicked");
        (0..self.sets.len())
            .map(|i| uses.get(i).copied().unwrap_or_default())
            .collect()
    }

    /// A note per `--set`: what it set and how many of the points run had the field.
    pub fn set_notes(&self) -> Vec<String> {
        self.sets
            .iter()
            .zip(self.set_uses())
            .map(|(s, u)| {
                let total = u.applied + u.absent;
                if total == 0 {
                    // An experiment that builds its cost table once ([`Self::costs`]).
                    format!("--set {}={}: applied to the cost tables", s.path, s.value)
                } else if u.absent == 0 {
                    format!("--set {}={}: applied to every point ({total})", s.path, s.value)
                } else {
                    format!(
                        "--set {}={}: applied to {} of {total} points; the other {} have no such field and ran without it",
                        s.path, s.value, u.applied, u.absent
                    )
                }
            })
            .collect()
    }

    /// The cost tables of `default`'s platform (or `--platform`'s) with every
    /// `--set costs.*` applied, for experiments that do not run a scenario.
    pub fn costs(&self, default: &str) -> Result<crate::system::Costs, String> {
        let base = self.platform(default).costs_tree();
        let mut tree = base.clone();
        let mut reached = Vec::new();
        for s in &self.sets {
            match s.path.0.split_first() {
                Some((crate::sweep::path::Segment::Key(k), rest)) if k == "costs" => {
                    let path = FieldPath(rest.to_vec());
                    crate::sweep::path::set(&mut tree, &path, &s.value)
                        .map_err(|e| format!("--set {}: {e}", s.path))?;
                    reached.push((s, path));
                }
                _ => {
                    return Err(format!(
                    "--set {}: this experiment runs no scenario, so only costs.* fields can be set",
                    s.path
                ))
                }
            }
        }
        serde_json::from_value(tree).map_err(|e| blame::<crate::system::Costs>(&base, &reached, e))
    }

    /// Runs one point of the experiment to its end, tracing it if asked.
    pub fn run_point(&self, scenario: &Scenario) -> Report {
        let sys =
            System::new(&self.prepared(scenario)).expect("built-in experiment scenarios are valid");
        self.finish_point(sys, &scenario.name)
    }

    /// [`ExperimentCtx::prepare`], for overrides already [`check`](Self::check)ed;
    /// counts, for [`ExperimentCtx::set_notes`], which sets the point had.
    pub fn prepared(&self, scenario: &Scenario) -> Scenario {
        let (sc, applied) = self
            .apply(scenario)
            .unwrap_or_else(|e| panic!("{}: overrides were checked: {e}", scenario.name));
        let mut uses = self.set_uses.lock().expect("no point panicked");
        uses.resize(self.sets.len(), SetUse::default());
        for (u, reach) in uses.iter_mut().zip(applied) {
            match reach {
                Reach::Applied => u.applied += 1,
                Reach::Absent(_) => u.absent += 1,
            }
        }
        sc
    }

    /// Runs a point for `ramp` (fio's `ramp_time`) and then to its end; returns the
    /// report at the end of the ramp and at the end, so rates can be taken over the
    /// measured part only.
    pub fn run_point_after_ramp(
        &self,
        scenario: &Scenario,
        ramp: sim_core::Duration,
    ) -> (Report, Report) {
        let mut sys =
            System::new(&self.prepared(scenario)).expect("built-in experiment scenarios are valid");
        if let Some(trace) = &self.trace {
            sys.set_observer(Box::new(trace.run(
                &scenario.name,
                sys.cpu_count(),
                &sys.device_names(),
            )));
        }
        sys.run_for(ramp);
        let at_ramp = sys.report();
        sys.run_to_end();
        (at_ramp, sys.report())
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

/// The mean over the CPUs of the fraction of the time between reports `a` and `b` of
/// one run (the measured part after a ramp) that each CPU was busy.
pub fn mean_busy_between(a: &Report, b: &Report) -> f64 {
    let ns = (b.sim_time_ns - a.sim_time_ns).max(1e-9);
    b.cpu
        .iter()
        .zip(&a.cpu)
        .map(|(y, x)| (y.busy_ns - x.busy_ns) / ns)
        .sum::<f64>()
        / b.cpu.len().max(1) as f64
}

/// A runnable experiment.
pub struct ExperimentInfo {
    /// Name the CLI takes (`irqsim experiment NAME`).
    pub name: &'static str,
    /// One line saying what it measures, for `irqsim list`.
    pub summary: &'static str,
    /// Runs every point in the given context.
    pub run: fn(&ExperimentCtx) -> ExperimentOutput,
    /// Checks a context's `--platform` and `--set` against the experiment before it
    /// runs; the error names the field and what is wrong.
    pub check: fn(&ExperimentCtx) -> Result<(), String>,
    /// Every point's scenario in row order, before the context's platform and sets
    /// ([`ExperimentCtx::prepare`] applies them); for a context that passed `check`.
    pub scenarios: fn(&ExperimentCtx) -> Vec<Scenario>,
}

/// Every built-in experiment.
pub const ALL: &[ExperimentInfo] = &[
    ExperimentInfo {
        name: "posted-vs-remapped",
        summary: "one CPU, four DSA queues: handled rate, interrupts per MSI and latency vs offered rate, posted vs remapped",
        run: posted_vs_remapped::run_with,
        check: posted_vs_remapped::check,
        scenarios: posted_vs_remapped::scenarios,
    },
    ExperimentInfo {
        name: "pir-variants",
        summary: "every PIR-draining variant on one CPU fed by closed-loop DSA queues: IRQ rate, notifications, PID misses, xchgs",
        run: pir_variants::run_with,
        check: pir_variants::check,
        scenarios: pir_variants::scenarios,
    },
    ExperimentInfo {
        name: "coalesce-loops",
        summary: "MAX_LOOPS 1..8 and unbounded at a moderate and a high rate: handled rate, notifications per MSI, p99",
        run: coalesce_loops::run_with,
        check: coalesce_loops::check,
        scenarios: coalesce_loops::scenarios,
    },
    ExperimentInfo {
        name: "vmd",
        summary: "NVMe drives behind VMD, remap vs bypass, over drives x CPUs: IOPS, CPU, interrupts per I/O, p99",
        run: vmd::run_with,
        check: vmd::check,
        scenarios: vmd::scenarios,
    },
    ExperimentInfo {
        name: "nvme-posted",
        summary: "4 NVMe drives near their IOPS ceiling, posted MSI on and off, by number of jobs",
        run: nvme_posted::run_with,
        check: nvme_posted::check,
        scenarios: nvme_posted::scenarios,
    },
    ExperimentInfo {
        name: "nic-napi",
        summary: "one NIC RX queue with NAPI, light load to overload, interrupt throttling off and at two settings",
        run: nic_napi::run_with,
        check: nic_napi::check,
        scenarios: nic_napi::scenarios,
    },
    ExperimentInfo {
        name: "smmu-cmdsync",
        summary: "Arm SMMUv3 on Kunpeng 920: CMD_SYNC latency and poll window, unmap rate from 1 and 16 CPUs, and UDP transmit throughput with strict-mode unmaps, MSI polling on and off",
        run: smmu_cmdsync::run_with,
        check: smmu_cmdsync::check,
        scenarios: smmu_cmdsync::scenarios,
    },
    ExperimentInfo {
        name: "ipi-cluster",
        summary: "TLB shootdown from socket 0 to every CPU of socket 1 on Westmere-EX (4x10x2), Linux 2.6.38 and today's algorithms, x2APIC sends before and after the cluster patch: ICR writes and sender cycles",
        run: ipi_cluster::run_with,
        check: ipi_cluster::check,
        scenarios: ipi_cluster::scenarios,
    },
    ExperimentInfo {
        name: "shootdown-under-irq",
        summary: "TLB-shootdown p50/p99 from one CPU to its socket while DSA interrupts land on the targets, posted vs remapped, by interrupt rate",
        run: shootdown_under_irq::run_with,
        check: shootdown_under_irq::check,
        scenarios: shootdown_under_irq::scenarios,
    },
    ExperimentInfo {
        name: "rte-cache",
        summary: "mask_irq/unmask_irq cycles, read-modify-write of the RTE low word vs a shadowed low word: x86 io_apic.c (edge) and IA-64 iosapic.c (level, set_affinity, enable_irq)",
        run: rte_cache::run_with,
        check: rte_cache::check,
        scenarios: rte_cache::scenarios,
    },
    ExperimentInfo {
        name: "ioapic-mask",
        summary: "edge interrupts while a user-space-driver-like flow keeps the pin off, by masking the entry (lost) or by the lazy disable (replayed): asserted = delivered + lost + pending",
        run: ioapic_mask::run_with,
        check: ioapic_mask::check,
        scenarios: ioapic_mask::scenarios,
    },
];

/// Looks an experiment up by name.
pub fn find(name: &str) -> Option<&'static ExperimentInfo> {
    ALL.iter().find(|e| e.name == name)
}

/// The default seed of experiments.
pub const DEFAULT_SEED: u64 = 1;

#[cfg(test)]
mod table_tests {
    use super::*;

    #[test]
    fn headers_carry_units_and_large_numbers_are_grouped() {
        assert_eq!(group_digits("1991000"), "1,991,000");
        assert_eq!(group_digits("-12345"), "-12,345");
        assert_eq!(group_digits("9999"), "9999");
        assert_eq!(group_digits("12.5"), "12.5");
        let rows = vec![
            serde_json::json!({"rate_mps": 2.5, "iops": 1991000.0, "tx_gbps": 31.05, "mode": "posted"}),
        ];
        let out = ExperimentOutput::new("t", 1, &rows);
        let table = out.to_table();
        for h in ["rate_mps (M/s)", "iops (IO/s)", "tx_gbps (Gbit/s)", "mode"] {
            assert!(table.contains(h), "{h} in\n{table}");
        }
        assert!(table.contains("1,991,000"), "{table}");
    }
}

//! What a run reports: a serde structure (JSON) and a human table.
//!
//! Every figure here comes from the model, not from hardware; [`MODEL_NOTE`] says so in
//! every JSON report and table.

pub mod table;
pub mod trace;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::system::ledger::PendingWhere;

/// Printed with every report.
pub const MODEL_NOTE: &str =
    "figures come from the irqsim model and its cost tables, not from hardware measurements";

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub mode: String,
    pub variant: String,
    /// True when the handler variant is wrong on purpose.
    pub variant_broken: bool,
    pub sim_time_ns: f64,
    /// Events the engine handled.
    pub events: u64,
    pub msis: MsiBalance,
    pub notifications: Notifications,
    /// Interrupt entries on all CPUs.
    pub interrupts_taken: u64,
    pub cpu: Vec<CpuReport>,
    pub pid_line: PidLineReport,
    pub iommu: IommuReport,
    pub devices: Vec<crate::system::device_runtime::DeviceReport>,
    /// NVMe drives, NIC queues and VMD domains.
    pub io: crate::system::io::IoReport,
    /// Flow control per MSI source.
    pub sources: Vec<crate::system::sources::SourceReport>,
    /// From an MSI being raised to the start of the handler that serves it.
    pub latency_ns: LatencySummary,
    /// Handled MSIs per simulated second.
    pub handled_per_s: f64,
    /// Wall-clock time the run took; the one field that differs between identical runs.
    pub wall_time_s: f64,
    pub note: &'static str,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MsiBalance {
    pub generated: u64,
    pub handled: u64,
    pub pending: u64,
    pub pending_where: PendingWhere,
    /// Reason -> count. Reasons are stable snake_case names.
    pub dropped: BTreeMap<String, u64>,
    /// MSIs that found their vector's bit already set (PIR or IRR) and merged with it.
    pub merged: u64,
    /// Handler calls with no MSI behind them.
    pub spurious_handler_calls: u64,
    /// generated == handled + pending + sum(dropped); always true unless irqsim has a bug.
    pub balanced: bool,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Notifications {
    /// Posted-interrupt notification events the IOMMU sent.
    pub sent: u64,
    /// Posts that set PIR without a notification (ON already set, or SN set).
    pub suppressed: u64,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct CpuReport {
    pub cpu: u32,
    pub apic_id: u32,
    pub busy_ns: f64,
    pub busy_frac: f64,
    pub irq_entry_ns: f64,
    pub irq_exit_ns: f64,
    pub handlers_ns: f64,
    pub pid_access_ns: f64,
    pub eoi_ns: f64,
    pub softirq_ns: f64,
    pub app_ns: f64,
    pub interrupts_taken: u64,
    pub handler_calls: u64,
    /// Plain loads of PIR words by this CPU's handlers.
    pub pir_loads: u64,
    /// Locked exchanges of PIR words.
    pub pir_xchgs: u64,
    /// Locked clears (or test-and-clears) of ON.
    pub on_clears: u64,
    pub eois: u64,
    /// Accesses of this CPU to its own descriptor line that missed its L1.
    pub pid_l1_misses: u64,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PidLineReport {
    /// CPU accesses to a descriptor line that missed the core's L1.
    pub cpu_misses: u64,
    pub cpu_loads: u64,
    pub cpu_locked_ops: u64,
    pub cpu_rfos: u64,
    pub cpu_invalidations_received: u64,
    pub cpu_modified_transfers: u64,
    /// Atomic descriptor updates the IOMMU made (posts).
    pub iommu_updates: u64,
    pub iommu_modified_transfers: u64,
    /// MESI transitions of CPU agents, "FROM->TO" -> count (self-loops included).
    pub cpu_transitions: BTreeMap<String, u64>,
    /// Each CPU's descriptor line, agent by agent.
    pub lines: Vec<PidLineDetail>,
}

/// One CPU's descriptor line.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PidLineDetail {
    /// Whose descriptor it is.
    pub cpu: u32,
    /// Every agent that ever touched it.
    pub agents: Vec<PidAgentReport>,
}

/// One agent's view of one descriptor line.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PidAgentReport {
    /// "cpuN" or "iommu".
    pub agent: String,
    /// MESI state at the end of the run.
    pub state: String,
    pub counters: pid_model::AgentCounters,
    /// "FROM->TO" -> count.
    pub transitions: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct IommuReport {
    /// Remapping units (their figures are summed here).
    pub units: u32,
    pub remapped: u64,
    pub posted: u64,
    pub faults: BTreeMap<String, u64>,
    pub fault_records_kept: u64,
    pub iec_hits: u64,
    pub iec_misses: u64,
    /// Interrupt messages (remapped interrupts and notifications) through the system
    /// agent, and how long they queued there.
    pub fabric_messages: u64,
    pub fabric_mean_wait_ns: f64,
    pub fabric_max_wait_ns: f64,
    /// Time units spent unable to send a message because the fabric was full.
    pub fabric_stall_ns: f64,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    /// The full distribution: `[value_ns, count]` for every recorded bucket, ascending.
    /// Buckets are HDR-histogram buckets with 3 significant digits (values within 0.1%
    /// of each other share a bucket; `value_ns` is the bucket's highest value).
    pub histogram: Vec<[u64; 2]>,
}

impl Report {
    /// The report as JSON, wall-clock fields included.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a Report always serializes")
    }

    /// A copy with the wall-clock fields zeroed: two runs of the same scenario and
    /// seed give equal values of this.
    pub fn without_wall_clock(&self) -> Report {
        Report {
            wall_time_s: 0.0,
            ..self.clone()
        }
    }
}

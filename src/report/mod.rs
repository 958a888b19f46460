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

/// Everything a run reports: built by `System::report`, printed by [`table`] and as JSON.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Report {
    /// The scenario's `name` (empty when it has none).
    pub scenario: String,
    /// Seed of every random stream in the run.
    pub seed: u64,
    /// Delivery mode: `"posted"` or `"remapped"`.
    pub mode: String,
    /// Name of the notification handler variant (used in posted mode).
    pub variant: String,
    /// True when the handler variant is wrong on purpose.
    pub variant_broken: bool,
    /// Simulated time elapsed when the report was taken, in ns.
    pub sim_time_ns: f64,
    /// Events the engine handled.
    pub events: u64,
    /// Where every raised MSI ended up.
    pub msis: MsiBalance,
    /// Posted-interrupt notifications sent and suppressed by the IOMMU.
    pub notifications: Notifications,
    /// Interrupt entries on all CPUs.
    pub interrupts_taken: u64,
    /// One entry per CPU, in CPU order.
    pub cpu: Vec<CpuReport>,
    /// MESI traffic on the posted-interrupt descriptor lines.
    pub pid_line: PidLineReport,
    /// Remapping, fault and fabric counters of the IOMMU units.
    pub iommu: IommuReport,
    /// One entry per DSA device of the scenario (`devices[i]`).
    pub devices: Vec<crate::system::device_runtime::DeviceReport>,
    /// NVMe drives, NIC queues and VMD domains.
    pub io: crate::system::io::IoReport,
    /// Root ports (writes, MSIs, stalls behind MSIs) and the interrupt-delivery paths
    /// (occupancy and waits).
    pub fabric: crate::system::fabric::FabricReport,
    /// Flow control per MSI source.
    pub sources: Vec<crate::system::sources::SourceReport>,
    /// TLB shootdowns, IPIs and the lines cross calls share; absent when the run
    /// had none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cross_calls: Option<crate::system::xcall::XcallReport>,
    /// IOAPIC pins (x86): assertions, masks, time masked; their interrupts are in
    /// `msis`, lost edges in `msis.dropped`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ioapic: Vec<crate::system::ioapic::IoapicPinReport>,
    /// The IRQ core's retriggers of device vectors and the posted chip's acks; also
    /// present, with the CPUs affected, whenever a vector is left in service with no
    /// interrupt running (nothing will EOI it). Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retriggers: Option<crate::system::retrigger::RetriggerReport>,
    /// Affinity changes of posted interrupts and the old CPUs' vector cleanups;
    /// absent without migrations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migrations: Option<crate::system::migration::MigrationsReport>,
    /// The SMMUv3 command queue (Arm systems): loads, host counters, busiest lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smmu: Option<crate::system::smmu_host::SmmuHostReport>,
    /// Transmit loads (UDP senders on NIC queues), with `tx_gbps`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub transmit: Vec<crate::system::transmit::TransmitReport>,
    /// From an MSI being raised to the start of the handler that serves it.
    pub latency_ns: LatencySummary,
    /// Handled MSIs per simulated second.
    pub handled_per_s: f64,
    /// Wall-clock time the run took; the one field that differs between identical runs.
    pub wall_time_s: f64,
    /// Always [`MODEL_NOTE`].
    pub note: &'static str,
}

/// The MSI balance: generated = handled + pending + sum(dropped).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MsiBalance {
    /// MSIs raised by all devices.
    pub generated: u64,
    /// MSIs served by a handler call; MSIs merged into one call each count.
    pub handled: u64,
    /// MSIs neither handled nor dropped when the report was taken.
    pub pending: u64,
    /// `pending`, split by where the MSIs are.
    pub pending_where: PendingWhere,
    /// Reason -> count. Reasons are stable snake_case names.
    pub dropped: BTreeMap<String, u64>,
    /// MSIs that found their vector's bit already set (PIR or IRR) and merged with it.
    pub merged: u64,
    /// Handler calls with no MSI behind them.
    pub spurious_handler_calls: u64,
    /// MSIs devices asked for but have not written yet, because flow control holds
    /// them back (the sum of `sources[].msi_backlog`). Not in `generated` until they
    /// are written: offered = generated + held_back_in_devices.
    pub held_back_in_devices: u64,
    /// How long the oldest MSI waiting at a CPU (in PIR, harvested, in IRR or in
    /// service) had waited when the report was taken, from its raise; null when none
    /// waits there. The latency percentiles count handled MSIs only, so a starved
    /// vector's MSIs show here and not there.
    pub oldest_pending_at_cpu_age_ns: Option<f64>,
    /// generated == handled + pending + sum(dropped); always true unless irqsim has a bug.
    pub balanced: bool,
}

/// Posted-interrupt notification counts (zero in remapped mode).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Notifications {
    /// Posted-interrupt notification events the IOMMU sent.
    pub sent: u64,
    /// Posts that set PIR without a notification (ON already set, or SN set).
    pub suppressed: u64,
}

/// Where one CPU's time went and what it did. Time is charged when an activity starts,
/// except that `busy_ns` leaves out the part of the current activity after the report.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct CpuReport {
    /// CPU number (index in the scenario).
    pub cpu: u32,
    /// x2APIC ID of the CPU.
    pub apic_id: u32,
    /// Sum of all the time categories below, in ns of simulated time.
    pub busy_ns: f64,
    /// `busy_ns` divided by the simulated time elapsed (0 to 1).
    pub busy_frac: f64,
    /// IDT vectoring and `irq_enter`, once per interrupt taken, in ns.
    pub irq_entry_ns: f64,
    /// `irq_exit` and IRET, once per interrupt taken, in ns.
    pub irq_exit_ns: f64,
    /// Device handler bodies plus the generic IRQ flow around each, in ns.
    pub handlers_ns: f64,
    /// Loads, stores and locked operations on the descriptor line, priced by its MESI
    /// state, and `mfence`s, in ns.
    pub pid_access_ns: f64,
    /// EOI writes to the x2APIC (WRMSR), in ns.
    pub eoi_ns: f64,
    /// NAPI polls (softirq context), in ns.
    pub softirq_ns: f64,
    /// Application work (fio-like jobs submitting I/O), in ns.
    pub app_ns: f64,
    /// Cross calls: a shootdown's sender side and call-function handler operations.
    pub cross_call_ns: f64,
    /// SMMU command-queue work (insertion, polling, PTE clears; not time asleep in
    /// WFE), ns.
    pub smmu_ns: f64,
    /// A NIC's transmit path outside the SMMU (send path, mapping, posts, clean-up), ns.
    pub tx_ns: f64,
    /// Cross-called functions this CPU ran (as a shootdown's target).
    pub funcs_run: u64,
    /// Interrupts acknowledged from the local APIC (notifications included).
    pub interrupts_taken: u64,
    /// Device handler calls, one per `handle_vector` (spurious ones included).
    pub handler_calls: u64,
    /// Plain loads of PIR words by this CPU's handlers.
    pub pir_loads: u64,
    /// Locked exchanges of PIR words.
    pub pir_xchgs: u64,
    /// Clears (or test-and-clears) of ON, locked or plain.
    pub on_clears: u64,
    /// EOI writes.
    pub eois: u64,
    /// Plain stores to PIR words.
    pub pir_stores: u64,
    /// `mfence`s (charged `costs.cpu.mfence_cycles` each, in `pid_access_ns`).
    pub fences: u64,
    /// Accesses of this CPU to its own descriptor line that missed its L1.
    pub pid_l1_misses: u64,
    /// MSIs pending at this CPU by vector (`0x21` -> count: in PIR, harvested, in IRR
    /// or in service), only vectors with some; a starved vector shows here.
    pub pending_by_vector: BTreeMap<String, u64>,
}

/// Posted-interrupt descriptor line counters, summed over every CPU's line.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PidLineReport {
    /// CPU accesses to a descriptor line that missed the core's L1.
    pub cpu_misses: u64,
    /// Plain loads of descriptor lines by CPUs.
    pub cpu_loads: u64,
    /// Stores and locked read-modify-writes of descriptor lines by CPUs.
    pub cpu_locked_ops: u64,
    /// CPU writes that found the line in S or I (request for ownership).
    pub cpu_rfos: u64,
    /// Times an access by another agent took a CPU's copy to I.
    pub cpu_invalidations_received: u64,
    /// Times a CPU obtained a line while another agent held it Modified.
    pub cpu_modified_transfers: u64,
    /// Atomic descriptor updates the IOMMU made (posts).
    pub iommu_updates: u64,
    /// IOMMU posts that found a line Modified in a CPU's cache.
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
    /// Access and coherence counters of this agent on this line.
    pub counters: pid_model::AgentCounters,
    /// "FROM->TO" -> count.
    pub transitions: BTreeMap<String, u64>,
}

/// IOMMU counters, summed over the remapping units.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct IommuReport {
    /// Remapping units (their figures are summed here).
    pub units: u32,
    /// Interrupt requests delivered through a remapped-format IRTE.
    pub remapped: u64,
    /// Interrupt requests handed over for posting through a posted-format IRTE.
    pub posted: u64,
    /// Faults that occurred, by reason name (e.g. `irte_not_present`); zero counts left out.
    pub faults: BTreeMap<String, u64>,
    /// Faults held in the fault recording registers at the end (the rest were
    /// suppressed by FPD or overflowed).
    pub fault_records_kept: u64,
    /// Interrupt entry cache lookups that found the IRTE cached.
    pub iec_hits: u64,
    /// Interrupt entry cache lookups that had to read the IRTE from memory.
    pub iec_misses: u64,
    /// Interrupt messages (remapped interrupts and notifications) through the system
    /// agent, and how long they queued there.
    pub fabric_messages: u64,
    /// Mean queueing time of a fabric message before its service started, in ns.
    pub fabric_mean_wait_ns: f64,
    /// Longest queueing time of a single fabric message, in ns.
    pub fabric_max_wait_ns: f64,
}

/// Distribution of a latency, from an HDR histogram; every figure is in the unit of the
/// field that holds it (ns for [`Report::latency_ns`]), 0 when nothing was recorded.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LatencySummary {
    /// Samples recorded (for MSI latency: MSIs served by a handler).
    pub count: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest sample.
    pub max: f64,
    /// The full distribution: `[value_ns, count]` for every recorded bucket, ascending.
    /// Buckets are HDR-histogram buckets with 3 significant digits (values within 0.1%
    /// of each other share a bucket; `value_ns` is the bucket's highest value).
    pub histogram: Vec<[u64; 2]>,
}

impl LatencySummary {
    /// The summary of `h` (all zero when it is empty).
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> LatencySummary {
        if h.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: h.len(),
            mean: h.mean(),
            p50: h.value_at_quantile(0.5) as f64,
            p90: h.value_at_quantile(0.9) as f64,
            p99: h.value_at_quantile(0.99) as f64,
            p999: h.value_at_quantile(0.999) as f64,
            max: h.max() as f64,
            histogram: h
                .iter_recorded()
                .map(|v| [v.value_iterated_to(), v.count_at_value()])
                .collect(),
        }
    }
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

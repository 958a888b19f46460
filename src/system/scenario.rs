//! Scenarios: what system to build and how long to run it, as TOML or Rust values.
//!
//! Parsing rejects unknown fields; [`Scenario::validate`] then checks every rule a
//! value must satisfy and names the field, the value and what is allowed.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::Path;

use devices::ArrivalProcess;
use serde::{Deserialize, Serialize};

use super::costs::Costs;
use crate::kernel::posted_msi::{variant_by_name, VARIANT_NAMES};
use crate::topology::MAX_SOCKETS;

/// Longest run a scenario may ask for: one hour of simulated time keeps every
/// timestamp far from the end of the u64 picosecond range.
pub const MAX_DURATION_US: f64 = 3.6e9;
/// Most CPUs a scenario may have.
pub const MAX_CPUS: u32 = 65_536;
/// Slowest arrival a device may have: one event per 1000 s on average. Slower
/// processes could draw gaps past the end of simulated time.
pub const MIN_RATE_PER_S: f64 = 1e-3;

/// How device MSIs reach CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryMode {
    /// Posted IRTEs into each CPU's posted-interrupt descriptor, demultiplexed by the
    /// notification handler (Linux `intremap=posted_msi`).
    Posted,
    /// Remapped IRTEs: every MSI is an interrupt of its own vector.
    Remapped,
}

impl DeliveryMode {
    /// The name used in TOML and reports: `"posted"` or `"remapped"`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryMode::Posted => "posted",
            DeliveryMode::Remapped => "remapped",
        }
    }
}

/// Which interrupt architecture the system has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    /// x86: VT-d interrupt remapping (remapped or posted) and x2APICs.
    #[default]
    X86,
    /// Arm: MSIs are DMA writes to the GICv3 ITS doorbell through the SMMUv3; LPIs on
    /// each CPU's redistributor. Only `mode = "remapped"` applies (posting is VT-d's).
    Arm,
}

/// A whole simulation setup.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Free-form name shown in reports.
    #[serde(default)]
    pub name: String,
    /// Seed of every random stream in the run.
    #[serde(default)]
    pub seed: u64,
    /// Simulated time to run, in microseconds.
    pub duration_us: f64,
    /// Posted or remapped delivery for every device.
    pub mode: DeliveryMode,
    /// `"x86"` (default) or `"arm"`.
    #[serde(default)]
    pub arch: Arch,
    /// The notification handler variant (posted mode), by name.
    #[serde(default = "default_variant")]
    pub variant: String,
    /// Linux MAX_POSTED_MSI_COALESCING_LOOP; 0 means unbounded.
    #[serde(default = "default_max_loops")]
    pub max_loops: u32,
    /// The platform profile the costs start from (`irqsim platforms`); unset, the
    /// `generic` profile. Applied when the scenario is read from TOML (the `costs`
    /// table then overrides single fields) or by [`Scenario::apply_platform`]; `costs`
    /// always holds the resolved values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// Number of CPUs, their sockets, APIC IDs and descriptor addresses.
    #[serde(default)]
    pub cpus: CpuConfig,
    /// The remapping units: count, table size, entry cache.
    #[serde(default)]
    pub iommu: IommuConfig,
    /// The PCIe layout: root ports per stack, stacks per socket, port credits.
    #[serde(default)]
    pub pcie: PcieConfig,
    /// Every cost table (CPU, APIC, devices, descriptor line, remapping, fabric); each
    /// field documents its unit and source.
    #[serde(default)]
    pub costs: Costs,
    /// DSA work queues (open or closed loop).
    #[serde(default)]
    pub devices: Vec<DeviceConfig>,
    /// NVMe drives.
    #[serde(default)]
    pub nvme: Vec<super::io::NvmeDriveConfig>,
    /// fio-like jobs driving the NVMe drives.
    #[serde(default)]
    pub jobs: Vec<super::io::JobConfig>,
    /// VMD domains the drives may sit behind.
    #[serde(default)]
    pub vmd: Vec<super::io::VmdDomainConfig>,
    /// NICs.
    #[serde(default)]
    pub nics: Vec<super::io::NicDeviceConfig>,
    /// TLB-shootdown loads: cross calls from initiator CPUs to target CPUs.
    #[serde(default)]
    pub shootdowns: Vec<super::xcall::ShootdownConfig>,
    /// IOAPIC pins (x86): edge inputs, their load generators and driver flows.
    #[serde(default)]
    pub ioapic_pins: Vec<super::ioapic::IoapicPinConfig>,
    /// The `irq_ack` of the posted-MSI irq chip: `"eoi-if-inactive"` (Linux commit
    /// 0edc78b82bea, the default) or `"move-irq-only"` (v6.10 until that fix).
    #[serde(default)]
    pub posted_msi_ack: crate::kernel::retrigger::PostedMsiAck,
    /// The IRQ core retriggering device vectors (`irq_retrigger()`) at given times.
    #[serde(default)]
    pub retriggers: Vec<super::retrigger::RetriggerConfig>,
    /// Affinity changes of posted DSA interrupts at given times.
    #[serde(default)]
    pub migrations: Vec<super::migration::MigrationConfig>,
    /// How the old CPU's vector cleanup checks pending after a migration:
    /// `"irr-and-pir"` (Linux commit ce0a92871179, the default) or `"irr-only"`.
    #[serde(default)]
    pub vector_cleanup: crate::kernel::migration::MigrationCleanup,
    /// The SMMU of an `arch = "arm"` system as its driver finds it (features, MSI
    /// polling, queue size).
    #[serde(default)]
    pub smmu: super::smmu_host::SmmuSetup,
    /// CPUs calling Linux's SMMUv3 command-queue algorithms in a loop (`arch = "arm"`).
    #[serde(default)]
    pub smmu_loads: Vec<super::smmu_host::SmmuLoadConfig>,
    /// UDP senders on NIC TX queues, unmapping through the SMMU (`arch = "arm"`).
    #[serde(default)]
    pub transmit: Vec<super::transmit::TransmitConfig>,
    /// Directory relative trace paths are resolved against: the scenario file's, when
    /// it was loaded from one (not part of the format).
    #[serde(skip)]
    pub base_dir: Option<std::path::PathBuf>,
}

fn default_variant() -> String {
    "copy-then-xchg".into()
}
fn default_max_loops() -> u32 {
    crate::kernel::DEFAULT_MAX_LOOPS
}

/// The CPUs and their interrupt-side identities.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CpuConfig {
    /// Number of logical CPUs.
    pub count: u32,
    /// Sockets the CPUs are spread over, in order (CPU i is on socket
    /// i * sockets / count). The remapping unit sits on socket 0, so descriptor lines of
    /// CPUs on other sockets cost it cross-socket transfers.
    pub sockets: u32,
    /// x2APIC ID of each CPU; empty means CPU i has APIC ID i.
    pub apic_ids: Vec<u32>,
    /// Physical address of each CPU's posted-interrupt descriptor (64-byte aligned);
    /// empty means `pid_base + 64 * i`.
    pub pid_addresses: Vec<u64>,
    /// Base of the per-CPU descriptor array when `pid_addresses` is empty.
    pub pid_base: u64,
    /// Sockets x cores x threads with firmware-style x2APIC IDs and Linux CPU
    /// numbering (see `irqsim::topology`). When set, it decides each CPU's socket,
    /// core and APIC ID; `count` and `sockets` must agree with it and `apic_ids` stay
    /// empty. Unset, every CPU is its own core and CPU i has APIC ID i (or
    /// `apic_ids[i]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology: Option<crate::topology::TopologySpec>,
}

impl Default for CpuConfig {
    fn default() -> Self {
        CpuConfig {
            count: 1,
            sockets: 1,
            apic_ids: Vec::new(),
            pid_addresses: Vec::new(),
            pid_base: 0x1_0000_0000,
            topology: None,
        }
    }
}

/// The VT-d remapping unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IommuConfig {
    /// Interrupt remapping table entries: 2^(S+1) for IRTA_REG.S in 0..=15.
    pub irte_entries: u32,
    /// Interrupt entry cache capacity, entries.
    pub iec_entries: u32,
    /// Whether compatibility-format MSIs pass through (GSTS.CFIS) or fault.
    pub compat_allowed: bool,
    /// Remapping units (VT-d DRHD units, each with its own request pipeline and
    /// interrupt entry cache). A device belongs to the unit whose scope covers its
    /// position: the unit of its PCIe stack (stack index modulo the number of units),
    /// whatever CPU its interrupts target. Default 1.
    pub units: u32,
}

/// Where devices sit: root ports grouped into PCIe stacks, stacks into sockets.
///
/// A device's `port` is a global root-port index: port p is on stack
/// `p / ports_per_stack`, which is on socket `stack / stacks_per_socket`. Devices that
/// share a port (behind a switch) share its ordered write stream. A device without a
/// `port` gets the next port no device names, in the order `devices`, `nvme`, `vmd`,
/// `nics`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PcieConfig {
    /// Root ports per stack (an x16 stack bifurcated into four x4 ports has 4).
    pub ports_per_stack: u32,
    /// PCIe stacks per socket.
    pub stacks_per_socket: u32,
    /// MSIs of open-loop devices (DSA queues with an arrival process, NIC queues) a root
    /// port's ordered stream holds. When they are all taken, PCIe flow control stops
    /// such a device from writing; its completions and their MSIs wait in the device,
    /// in order. (A closed-loop device has as many writes outstanding as commands, so
    /// it needs no such bound.)
    /// Assumption: 64 (root ports advertise posted-request credits on the order of
    /// tens; the exact count is not published).
    pub port_credits: u32,
}

impl Default for PcieConfig {
    fn default() -> Self {
        PcieConfig {
            ports_per_stack: 4,
            stacks_per_socket: 6,
            port_credits: 64,
        }
    }
}

impl Default for IommuConfig {
    fn default() -> Self {
        IommuConfig {
            irte_entries: 256,
            iec_entries: 64,
            compat_allowed: false,
            units: 1,
        }
    }
}

/// The root port of every device of a scenario ([`Scenario::device_ports`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DevicePorts {
    /// Port of each `devices[i]`.
    pub devices: Vec<u32>,
    /// Port of each `nvme[i]`.
    pub nvme: Vec<u32>,
    /// Port of each `vmd[i]` (VMD's own MSIs).
    pub vmd: Vec<u32>,
    /// Port of each `nics[i]`.
    pub nics: Vec<u32>,
}

/// Kinds of MSI source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// A DSA-like work queue raising one MSI per completed descriptor.
    Dsa,
}

/// One MSI source and the interrupt the host set up for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// What the device is (only `dsa` so far).
    pub kind: DeviceKind,
    /// Names the device in reports and its random stream; default `device<i>`.
    #[serde(default)]
    pub name: String,
    /// The interrupt vector the host allocated, 32..=255 (and below 0xeb in posted
    /// mode, where 0xeb and above are system vectors).
    pub vector: u32,
    /// Target CPU by index; give this or `apic_id`.
    #[serde(default)]
    pub cpu: Option<u32>,
    /// Target CPU by x2APIC ID; give this or `cpu`.
    #[serde(default)]
    pub apic_id: Option<u32>,
    /// The IRTE the host programmed for this device; default: the device's position.
    #[serde(default)]
    pub irte_index: Option<u32>,
    /// The handle the device actually writes. Defaults to `irte_index`; set it to
    /// model a misprogrammed device (a handle past the table or at an empty entry is
    /// an interrupt-remapping fault at run time, not a scenario error).
    #[serde(default)]
    pub msi_handle: Option<u32>,
    /// PCI requester id (bus << 8 | devfn).
    #[serde(default)]
    pub source_id: u16,
    /// The root port the device sits behind (see [`PcieConfig`]); unset, a port of its
    /// own.
    #[serde(default)]
    pub port: Option<u32>,
    /// Cost of the device's own handler body, in CPU cycles; unset, the platform's
    /// `costs.dsa.handler_cycles`.
    #[serde(default)]
    pub handler_cycles: Option<f64>,
    /// Open loop: when completions happen. Give this or `closed_loop`.
    #[serde(default)]
    pub arrival: Option<ArrivalProcess>,
    /// Closed loop: a host job keeps descriptors in flight and the handler resubmits
    /// one per completion it reaps. Give this or `arrival`.
    #[serde(default)]
    pub closed_loop: Option<ClosedLoopConfig>,
}

/// A host job driving a DSA work queue in closed loop, as a DSA memory-fill
/// interrupt benchmark does: `inflight` descriptors outstanding; the interrupt handler
/// reaps every descriptor whose completion record has landed, and one new descriptor
/// is submitted for each, by the handler itself or by a submitter job on another CPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClosedLoopConfig {
    /// Descriptors the job keeps in flight.
    pub inflight: u32,
    /// CPU cycles to prepare one descriptor and write it to the WQ portal; unset, the
    /// platform's `costs.dsa.submit_cycles`.
    pub submit_cycles: Option<f64>,
    /// CPU cycles to check one completion record and complete its descriptor; unset,
    /// the platform's `costs.dsa.reap_cycles`.
    pub reap_cycles: Option<f64>,
    /// The CPU of a submitter job that writes the replacement descriptors (as a
    /// benchmark that keeps the WQ full from its own thread does); unset, the handler
    /// resubmits on the interrupt's CPU.
    pub submit_cpu: Option<u32>,
    /// Submit each initial descriptor at a random time within one service time instead
    /// of all at time 0, so descriptors do not run in lockstep.
    pub random_start: bool,
    /// The work queue and its engines.
    pub wq: devices::DsaWqConfig,
}

impl Default for ClosedLoopConfig {
    fn default() -> Self {
        ClosedLoopConfig {
            inflight: 32,
            submit_cycles: None,
            reap_cycles: None,
            submit_cpu: None,
            random_start: false,
            wq: devices::DsaWqConfig::default(),
        }
    }
}

/// `max_loops` above this draws a warning.
pub const MAX_LOOPS_WARNING: u32 = 4096;

/// Largest scenario text accepted, bytes (4 MiB), checked before parsing so a huge or
/// generated file costs no more than reading this much.
pub const MAX_SCENARIO_BYTES: usize = 4 << 20;

/// Most device tables (`[[devices]]`, `[[nvme]]`, `[[nics]]`, `[[vmd]]` together) a
/// scenario may list: one 16-bit PCIe requester ID each.
pub const MAX_MSI_SOURCES: usize = 1 << 16;

/// Everything that can be wrong with a scenario.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The scenario file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Io {
        /// The file as given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not TOML, or has unknown fields or values of the wrong type.
    #[error("scenario {path} is not valid TOML for irqsim: {message}")]
    Parse {
        /// The file, or the `origin` given to [`Scenario::from_toml_str`].
        path: String,
        /// The TOML parser's message, with a "did you mean" for misspelt names.
        message: String,
    },
    /// A value breaks a rule of the format.
    #[error("{field} = {value} is not allowed: expected {allowed}")]
    Invalid {
        /// Path of the field, e.g. `devices[0].vector`.
        field: String,
        /// The offending value as written (empty when the error is about a whole table).
        value: String,
        /// What the field accepts.
        allowed: String,
    },
}

/// A device crate's validation error is a scenario error with the same field, value
/// and allowed values.
impl From<devices::DeviceError> for ScenarioError {
    fn from(e: devices::DeviceError) -> Self {
        match e {
            devices::DeviceError::InvalidParameter {
                field,
                value,
                allowed,
            } => ScenarioError::Invalid {
                field,
                value,
                allowed,
            },
        }
    }
}

impl ScenarioError {
    /// An [`ScenarioError::Invalid`] for `field`, its `value` and what is `allowed`.
    pub fn invalid(
        field: impl Into<String>,
        value: impl Display,
        allowed: impl Into<String>,
    ) -> Self {
        ScenarioError::Invalid {
            field: field.into(),
            value: value.to_string(),
            allowed: allowed.into(),
        }
    }

    /// Wraps a component crate's validation error, prefixing where the table sits.
    pub fn invalid_from(prefix: &str, err: impl Display) -> Self {
        ScenarioError::Invalid {
            field: prefix.into(),
            value: String::new(),
            allowed: err.to_string(),
        }
    }

    /// The offending field, for errors that have one.
    pub fn field(&self) -> Option<&str> {
        match self {
            ScenarioError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// A parser message cut to a readable excerpt: the parser echoes the offending line,
/// which for generated input can be hundreds of kilobytes.
fn excerpt(message: &str) -> String {
    const MAX_LINES: usize = 12;
    const MAX_CHARS: usize = 160;
    let lines: Vec<&str> = message.lines().collect();
    let mut out: Vec<String> = lines
        .iter()
        .take(MAX_LINES)
        .map(|l| {
            if l.chars().count() > MAX_CHARS {
                format!("{}...", l.chars().take(MAX_CHARS).collect::<String>())
            } else {
                (*l).to_string()
            }
        })
        .collect();
    if lines.len() > MAX_LINES {
        out.push(format!("({} more lines)", lines.len() - MAX_LINES));
    }
    out.join("\n")
}

/// Refuses a list of more than `max` entries of scenario table `field`.
pub(super) fn check_list_len(field: &str, len: usize, max: usize) -> Result<(), ScenarioError> {
    if len > max {
        return Err(ScenarioError::invalid(
            field,
            format!("{len} entries"),
            format!("at most {max}"),
        ));
    }
    Ok(())
}

/// Refuses a time `at_us` outside the run (0 to `duration_us`), naming `field`.
pub(super) fn check_time_in_run(
    field: String,
    at_us: f64,
    duration_us: f64,
) -> Result<(), ScenarioError> {
    if !(at_us.is_finite() && (0.0..=duration_us).contains(&at_us)) {
        return Err(ScenarioError::invalid(
            field,
            at_us,
            format!("a time from 0 to duration_us = {duration_us}"),
        ));
    }
    Ok(())
}

/// Device kinds that have their own table, for a `kind` written under `[[devices]]`.
const OWN_TABLE_KINDS: [(&str, &str); 4] = [
    ("nvme", "[[nvme]]"),
    ("nic", "[[nics]]"),
    ("nics", "[[nics]]"),
    ("vmd", "[[vmd]]"),
];

/// Appends "did you mean `x`?" to serde's unknown-field and unknown-variant messages
/// ("unknown field `duraton_us`, expected one of `name`, `seed`, ..."), and cuts the
/// message to an [`excerpt`]. The candidates are read from the whole message, because
/// the excerpt may cut a long list of expected names short.
/// What a scenario writes for each internally tagged enum, for serde's "expected
/// internally tagged enum Dist", which names a Rust type the user never sees: a
/// short name for the message, and the kinds with their keys for a line of its own.
const TAGGED_TABLES: [(&str, &str, &str); 5] = [
    (
        "Dist",
        "a distribution table",
        "kind = fixed (value), uniform (low, high), exponential (mean), \
         shifted_exponential (min, mean_above_min), lognormal (mean, sigma), \
         pareto (scale, shape) or geometric (mean); e.g. { kind = \"fixed\", value = 16 }",
    ),
    (
        "ArrivalProcess",
        "an arrival table",
        "{ kind = \"fixed\", interval_ns = X } or { kind = \"poisson\", rate_per_s = X }",
    ),
    (
        "ArrivalSpec",
        "an arrival table",
        "kind = fixed (interval_ns), poisson (rate_per_s), on_off (rate_per_s, on_ns, \
         off_ns), bursts (burst_len, gap_ns, spacing_ns) or trace (path)",
    ),
    (
        "Affinity",
        "an affinity table",
        "{ kind = \"managed\" } or { kind = \"explicit\", cpus = [..] }",
    ),
    (
        "SmmuWorkload",
        "a workload table",
        "{ kind = \"sync_only\" } or { kind = \"unmap\", pages = N }",
    ),
];

/// serde's message with an internal enum name replaced by what the scenario calls
/// that table, and the line that says how to write one.
fn without_type_names(message: String) -> (String, Option<String>) {
    const PREFIX: &str = "internally tagged enum ";
    let Some(at) = message.find(PREFIX) else {
        return (message, None);
    };
    let name_start = at + PREFIX.len();
    let name_len = message[name_start..]
        .find(|c: char| !c.is_alphanumeric() && c != '_')
        .unwrap_or(message.len() - name_start);
    let name = &message[name_start..name_start + name_len];
    let (short, how) = TAGGED_TABLES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map_or(("a table with a `kind` key", None), |(_, short, how)| {
            (*short, Some(format!("{short}: {how}")))
        });
    let replaced = format!(
        "{}{short}{}",
        &message[..at],
        &message[name_start + name_len..]
    );
    (replaced, how)
}

fn with_suggestion(full: String) -> String {
    let (full, how_to_write) = without_type_names(full);
    let mut message = excerpt(&full);
    if let Some(how) = how_to_write {
        message = format!("{}\n{how}", message.trim_end());
    }
    let Some(start) = full
        .find("unknown field `")
        .map(|i| i + "unknown field `".len())
        .or_else(|| {
            full.find("unknown variant `")
                .map(|i| i + "unknown variant `".len())
        })
    else {
        return message;
    };
    let Some(len) = full[start..].find('`') else {
        return message;
    };
    let given = &full[start..start + len];
    let rest = &full[start + len..];
    let expected: Vec<&str> = rest.split('`').skip(2).step_by(2).collect();
    if expected.first() == Some(&"dsa") {
        if let Some((_, table)) = OWN_TABLE_KINDS.iter().find(|(k, _)| *k == given) {
            return format!(
                "{}\n[[devices]] holds DSA work queues; a `{given}` is a {table} table \
                 (NVMe drives are [[nvme]], NIC queues [[nics]], VMD domains [[vmd]])",
                message.trim_end()
            );
        }
    }
    let best = expected
        .iter()
        .map(|cand| (edit_distance(given, cand), *cand))
        .min();
    match best {
        Some((d, cand)) if d <= given.len().max(cand.len()) / 2 => {
            format!("{}\ndid you mean `{cand}`?", message.trim_end())
        }
        _ => message,
    }
}

/// Lays `over` onto `base` field by field (tables merge, everything else replaces).
/// A field `base` does not have is kept, so deserialization names it as unknown.
fn merge_toml(base: &mut toml::Value, over: toml::Value, at: &str) -> Result<(), String> {
    match (base, over) {
        (toml::Value::Table(b), toml::Value::Table(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge_toml(slot, v, &format!("{at}.{k}"))?,
                    None => {
                        b.insert(k, v);
                    }
                }
            }
            Ok(())
        }
        (toml::Value::Table(_), other) => Err(format!(
            "`{at}` is a table of cost fields, not {}",
            other.type_str()
        )),
        (slot, v) => {
            *slot = v;
            Ok(())
        }
    }
}

/// Levenshtein distance between two short identifiers.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

impl Scenario {
    /// Parses TOML text; `origin` names the source in errors. When the text names a
    /// `platform`, its profile's costs are the starting point and the text's `[costs]`
    /// table overrides single fields on top.
    ///
    /// This checks the text's shape (known keys, types, enumerated names). The values
    /// themselves (ranges, CPUs that exist, vectors that do not collide) are checked
    /// by [`Scenario::validate`], which [`crate::System::new`] runs; call it to get a
    /// typed error before building anything.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        let parse_error = |e: &dyn Display| ScenarioError::Parse {
            path: origin.into(),
            message: with_suggestion(e.to_string()),
        };
        if text.len() > MAX_SCENARIO_BYTES {
            return Err(ScenarioError::Invalid {
                field: "scenario".into(),
                value: format!("{origin} of more than {MAX_SCENARIO_BYTES} bytes"),
                allowed: format!("a scenario of at most {MAX_SCENARIO_BYTES} bytes"),
            });
        }
        let mut table: toml::Table = toml::from_str(text).map_err(|e| parse_error(&e))?;
        let platform = match table.get("platform") {
            None => crate::platform::DEFAULT_PLATFORM.to_string(),
            Some(toml::Value::String(name)) => name.clone(),
            Some(other) => {
                return Err(ScenarioError::invalid(
                    "platform",
                    other,
                    format!(
                        "a profile name, one of {} (irqsim platforms)",
                        crate::platform::names().join(", ")
                    ),
                ))
            }
        };
        let profile = crate::platform::get(&platform)?;
        let mut costs: toml::Value =
            toml::Value::try_from(profile.costs()).expect("a profile's costs are TOML");
        if let Some(over) = table.remove("costs") {
            merge_toml(&mut costs, over, "costs").map_err(|m| ScenarioError::Parse {
                path: origin.into(),
                message: m,
            })?;
        }
        table.insert("costs".into(), costs);
        Scenario::deserialize(toml::Value::Table(table)).map_err(|e| parse_error(&e))
    }

    /// Reads, parses and validates a scenario file of at most [`MAX_SCENARIO_BYTES`].
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        use std::io::Read;
        let io = |source| ScenarioError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .map_err(io)?
            .take(MAX_SCENARIO_BYTES as u64 + 1)
            .read_to_string(&mut text)
            .map_err(io)?;
        let mut s = Scenario::from_toml_str(&text, &path.display().to_string())?;
        s.base_dir = path.parent().map(|p| p.to_path_buf());
        s.validate()?;
        Ok(s)
    }

    /// The scenario as TOML that [`Scenario::from_toml_str`] reads back.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a Scenario always serializes")
    }

    /// The APIC ID of CPU `cpu`.
    pub fn apic_id_of(&self, cpu: u32) -> u32 {
        if let Some(lc) = self.cpus.topology.and_then(|t| t.place(cpu)) {
            return lc.apic_id.0;
        }
        self.cpus.apic_ids.get(cpu as usize).copied().unwrap_or(cpu)
    }

    /// (socket, core) of CPU `cpu`; without a topology every CPU is its own core.
    pub fn place_of(&self, cpu: u32) -> (u32, u32) {
        match self.cpus.topology.and_then(|t| t.place(cpu)) {
            Some(lc) => (lc.socket, lc.core),
            None => (self.socket_of(cpu) as u32, cpu),
        }
    }

    /// The PCIe stack of root port `port`.
    pub fn stack_of_port(&self, port: u32) -> u32 {
        port / self.pcie.ports_per_stack
    }

    /// The socket of root port `port`; stacks past the last socket's belong to the
    /// last socket.
    pub fn socket_of_port(&self, port: u32) -> u16 {
        let socket = self.stack_of_port(port) / self.pcie.stacks_per_socket;
        socket.min(self.cpus.sockets.saturating_sub(1)) as u16
    }

    /// The remapping unit whose scope covers root port `port` (its stack's).
    pub fn unit_of_port(&self, port: u32) -> u16 {
        (self.stack_of_port(port) % self.iommu.units) as u16
    }

    /// The root port of every device, in the order `devices`, `nvme`, `vmd`, `nics`:
    /// the one it names, or the next port no device names.
    pub fn device_ports(&self) -> DevicePorts {
        let named: std::collections::BTreeSet<u32> = self
            .devices
            .iter()
            .map(|d| d.port)
            .chain(self.nvme.iter().map(|d| d.port))
            .chain(self.vmd.iter().map(|d| d.port))
            .chain(self.nics.iter().map(|d| d.port))
            .flatten()
            .collect();
        let mut next = 0u32;
        let mut pick = |p: Option<u32>| {
            p.unwrap_or_else(|| {
                while named.contains(&next) {
                    next += 1;
                }
                next += 1;
                next - 1
            })
        };
        DevicePorts {
            devices: self.devices.iter().map(|d| pick(d.port)).collect(),
            nvme: self.nvme.iter().map(|d| pick(d.port)).collect(),
            vmd: self.vmd.iter().map(|d| pick(d.port)).collect(),
            nics: self.nics.iter().map(|d| pick(d.port)).collect(),
        }
    }

    /// Replaces the costs with platform `name`'s and records the choice.
    pub fn apply_platform(&mut self, name: &str) -> Result<(), ScenarioError> {
        self.costs = crate::platform::get(name)?.costs();
        self.platform = Some(name.to_string());
        Ok(())
    }

    /// The socket of CPU `cpu`.
    pub fn socket_of(&self, cpu: u32) -> u16 {
        if let Some(lc) = self.cpus.topology.and_then(|t| t.place(cpu)) {
            return lc.socket as u16;
        }
        (cpu as u64 * self.cpus.sockets as u64 / self.cpus.count as u64) as u16
    }

    /// The descriptor address of CPU `cpu`.
    pub fn pid_address_of(&self, cpu: u32) -> u64 {
        self.cpus
            .pid_addresses
            .get(cpu as usize)
            .copied()
            .unwrap_or(self.cpus.pid_base + pid_model::PID_ALIGN * cpu as u64)
    }

    /// The IRTE index programmed for device `i`.
    pub fn irte_index_of(&self, i: usize) -> u32 {
        self.devices[i].irte_index.unwrap_or(i as u32)
    }

    /// x2APIC ID -> CPU index, for every CPU.
    pub fn cpu_of_apic_id(&self) -> BTreeMap<u32, u32> {
        (0..self.cpus.count)
            .map(|c| (self.apic_id_of(c), c))
            .collect()
    }

    /// The CPU index device `i` targets, given [`Scenario::cpu_of_apic_id`]. Only
    /// meaningful after validation.
    pub fn target_cpu_of(&self, i: usize, cpu_of_apic: &BTreeMap<u32, u32>) -> u32 {
        self.device_cpu(i, cpu_of_apic)
            .expect("validated: a device's apic_id names a CPU")
    }

    /// [`Scenario::target_cpu_of`] for checks that run before the devices' own: `None`
    /// when the device's `apic_id` names no CPU.
    pub(super) fn device_cpu(&self, i: usize, cpu_of_apic: &BTreeMap<u32, u32>) -> Option<u32> {
        let d = &self.devices[i];
        match (d.cpu, d.apic_id) {
            (Some(c), _) => Some(c),
            (None, Some(a)) => cpu_of_apic.get(&a).copied(),
            (None, None) => Some(0),
        }
    }

    /// Likely mistakes in a scenario that is valid: each a sentence naming the field.
    /// The command line prints them on stderr before running; nothing refuses them.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        // This is public and may see a scenario not yet validated. Only counts that
        // validation allows are looked at: 0 sockets would divide by zero, and 2^32 - 1
        // would size the tally at 16 GiB; validation names the field of either.
        let (count, sockets) = (self.cpus.count, self.cpus.sockets);
        let splittable = count <= MAX_CPUS && (1..=count.min(MAX_SOCKETS)).contains(&sockets);
        if self.cpus.topology.is_none() && splittable && count % sockets != 0 {
            let mut per_socket = vec![0u32; self.cpus.sockets as usize];
            for cpu in 0..self.cpus.count {
                per_socket[self.socket_of(cpu) as usize] += 1;
            }
            let counts: Vec<String> = per_socket.iter().map(u32::to_string).collect();
            out.push(format!(
                "cpus.count = {} is not a multiple of cpus.sockets = {}: the sockets get {} CPUs, where a server's sockets each have the same number",
                self.cpus.count,
                self.cpus.sockets,
                counts.join(", ")
            ));
        }
        if !self.cpus.pid_addresses.is_empty() {
            let mut seen = std::collections::BTreeMap::new();
            for (cpu, a) in self.cpus.pid_addresses.iter().enumerate() {
                if let Some(first) = seen.insert(*a, cpu) {
                    out.push(format!(
                        "cpus.pid_addresses: CPUs {first} and {cpu} share the descriptor at {a:#x}, so their posted interrupts land in one PIR"
                    ));
                }
            }
        }
        for (i, d) in self.devices.iter().enumerate() {
            if let Some(job) = &d.closed_loop {
                if !job.wq.completion_interrupt {
                    out.push(format!(
                        "devices[{i}].closed_loop.wq.completion_interrupt = false: the device raises no MSI, so its job is never resumed and the run generates nothing from it"
                    ));
                }
            }
        }
        for (i, d) in self.nvme.iter().enumerate() {
            // nvme_setup_io_queues() asks for at most one I/O queue per possible CPU, and
            // blk-mq maps each CPU to one queue: the rest would never see a command.
            if d.drive.queues > self.cpus.count {
                out.push(format!(
                    "nvme[{i}].drive.queues = {} is more than cpus.count = {}: Linux creates at most one I/O queue per CPU, and no CPU would submit to the other {}",
                    d.drive.queues,
                    self.cpus.count,
                    d.drive.queues - self.cpus.count
                ));
            }
            if !self.jobs.iter().any(|j| j.drive as usize == i) {
                out.push(format!(
                    "nvme[{i}]: no entry of `jobs` reads from this drive (jobs[*].drive = {i}), so it raises no MSI"
                ));
            }
        }
        for (i, n) in self.nics.iter().enumerate() {
            let sent_on = self.transmit.iter().any(|t| t.nic as usize == i);
            if n.rx.is_none() && n.tx.is_none() && !sent_on {
                out.push(format!(
                    "nics[{i}]: neither `rx` nor `tx` is set and no `transmit` load sends on it, so no packet moves and the NIC raises no MSI"
                ));
            }
        }
        if self.arch == Arch::Arm && !self.vmd.is_empty() {
            out.push(format!(
                "vmd: {} VMD domain(s) on arch = \"arm\": VMD is a feature of Intel Xeon root complexes",
                self.vmd.len()
            ));
        }
        out.extend(super::stream_names::shared_source_names(self));
        if self.max_loops > MAX_LOOPS_WARNING {
            out.push(format!(
                "max_loops = {}: Linux uses 3 (MAX_POSTED_MSI_COALESCING_LOOP); above {MAX_LOOPS_WARNING} one notification can keep its CPU in the handler for a very long time",
                self.max_loops
            ));
        }
        out
    }

    /// Checks every rule; the first violation is returned.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if variant_by_name(&self.variant, self.max_loops).is_none() {
            return Err(ScenarioError::invalid(
                "variant",
                format!("{:?}", self.variant),
                format!("one of {}", VARIANT_NAMES.join(", ")),
            ));
        }
        self.validate_system()
    }

    /// Every rule except the variant name, for systems that run a handler given in
    /// code ([`crate::System::with_handler`]), where the scenario's `variant` is unused.
    pub fn validate_system(&self) -> Result<(), ScenarioError> {
        self.validate_parts(true)
    }

    /// [`Scenario::validate_system`], optionally without the rule that a scenario
    /// has at least one load (for systems driven by `System::inject_post`).
    pub(crate) fn validate_parts(&self, need_load: bool) -> Result<(), ScenarioError> {
        // Counted first, so an oversized list is refused before any per-device check.
        let sources = self.devices.len() + self.nvme.len() + self.nics.len() + self.vmd.len();
        if sources > MAX_MSI_SOURCES {
            return Err(ScenarioError::invalid(
                "devices + nvme + nics + vmd",
                sources,
                format!(
                    "at most {MAX_MSI_SOURCES} device tables: requester IDs are 16 bits (PCIe bus/device/function)"
                ),
            ));
        }
        if let Some(name) = &self.platform {
            crate::platform::get(name)?;
        }
        if self.arch == Arch::Arm && self.mode == DeliveryMode::Posted {
            return Err(ScenarioError::invalid(
                "mode",
                "\"posted\" with arch = \"arm\"",
                "\"remapped\" on Arm: posted interrupts are a VT-d feature; Arm MSIs become GICv3 LPIs",
            ));
        }
        if !(self.duration_us.is_finite() && self.duration_us > 0.0)
            || self.duration_us > MAX_DURATION_US
        {
            return Err(ScenarioError::invalid(
                "duration_us",
                self.duration_us,
                format!("a number of microseconds greater than zero and at most {MAX_DURATION_US:e} (one hour)"),
            ));
        }
        self.validate_cpus()?;
        self.validate_iommu()?;
        self.costs.validate()?;
        if need_load
            && self.devices.is_empty()
            && self.nvme.is_empty()
            && self.nics.is_empty()
            && self.shootdowns.is_empty()
            && self.smmu_loads.is_empty()
            && self.ioapic_pins.is_empty()
        {
            return Err(ScenarioError::invalid(
                "devices",
                "[]",
                "at least one load: a DSA queue in `devices`, a drive in `nvme`, a NIC in `nics`, a TLB-shootdown load in `shootdowns`, an SMMU load in `smmu_loads`, or an IOAPIC pin in `ioapic_pins`",
            ));
        }
        super::io::validate(self)?;
        super::xcall::validate(self)?;
        super::smmu_host::validate(self)?;
        super::transmit::validate(self)?;
        super::ioapic::validate(self)?;
        super::retrigger::validate(self)?;
        super::migration::validate(self)?;
        super::stream_names::validate(self)?;
        let cpu_of_apic = self.cpu_of_apic_id();
        let mut irte_owner = std::collections::BTreeMap::new();
        let mut vector_owner = std::collections::BTreeMap::new();
        for i in 0..self.devices.len() {
            self.validate_device(i, &cpu_of_apic)?;
            // A CPU runs one handler per vector: a second device on the same one
            // would take over the first's handler, and a closed-loop first device
            // would never see its completions reaped.
            let cpu = self.target_cpu_of(i, &cpu_of_apic);
            let vector = self.devices[i].vector;
            if let Some(j) = vector_owner.insert((cpu, vector), i) {
                return Err(ScenarioError::invalid(
                    format!("devices[{i}].vector"),
                    format!("{vector:#x}"),
                    format!(
                        "a vector no other device uses on CPU {cpu} (devices[{j}] has it): Linux's vector allocator gives each interrupt a vector of its own on its CPU"
                    ),
                ));
            }
            let irte = self.irte_index_of(i);
            if let Some(j) = irte_owner.insert(irte, i) {
                return Err(ScenarioError::invalid(
                    format!("devices[{i}].irte_index"),
                    irte,
                    format!("an IRTE no other device uses (devices[{j}] has it)"),
                ));
            }
        }
        Ok(())
    }

    fn validate_cpus(&self) -> Result<(), ScenarioError> {
        let c = &self.cpus;
        if c.count == 0 || c.count > MAX_CPUS {
            return Err(ScenarioError::invalid(
                "cpus.count",
                c.count,
                format!("1..={MAX_CPUS} CPUs"),
            ));
        }
        if c.sockets == 0 || c.sockets > c.count.min(MAX_SOCKETS) {
            return Err(ScenarioError::invalid(
                "cpus.sockets",
                c.sockets,
                format!(
                    "1..={} (at most one socket per CPU, and {MAX_SOCKETS})",
                    c.count.min(MAX_SOCKETS)
                ),
            ));
        }
        if let Some(t) = c.topology {
            crate::topology::Topology::new(t).map_err(|e| match e {
                crate::topology::TopologyError::InvalidConfig {
                    field,
                    value,
                    allowed,
                } => ScenarioError::invalid(format!("cpus.{field}"), value, allowed),
                other => ScenarioError::invalid_from("cpus.topology", other),
            })?;
            if t.cpu_count() != c.count as u64 {
                return Err(ScenarioError::invalid(
                    "cpus.count",
                    c.count,
                    format!(
                        "{} = cpus.topology's sockets x cores_per_socket x threads_per_core",
                        t.cpu_count()
                    ),
                ));
            }
            if t.sockets != c.sockets {
                return Err(ScenarioError::invalid(
                    "cpus.sockets",
                    c.sockets,
                    format!("{} = cpus.topology.sockets", t.sockets),
                ));
            }
            if !c.apic_ids.is_empty() {
                return Err(ScenarioError::invalid(
                    "cpus.apic_ids",
                    format!("{} entries", c.apic_ids.len()),
                    "empty when cpus.topology is set: the topology numbers the x2APIC IDs",
                ));
            }
        }
        if !c.apic_ids.is_empty() && c.apic_ids.len() != c.count as usize {
            return Err(ScenarioError::invalid(
                "cpus.apic_ids",
                format!("{} entries", c.apic_ids.len()),
                format!("empty, or one entry per CPU ({})", c.count),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, id) in c.apic_ids.iter().enumerate() {
            if !seen.insert(*id) {
                return Err(ScenarioError::invalid(
                    format!("cpus.apic_ids[{i}]"),
                    id,
                    "an x2APIC ID no other CPU has",
                ));
            }
            if *id == u32::MAX {
                return Err(ScenarioError::invalid(
                    format!("cpus.apic_ids[{i}]"),
                    id,
                    "an ID other than 0xffffffff, the x2APIC broadcast destination",
                ));
            }
        }
        if !c.pid_addresses.is_empty() && c.pid_addresses.len() != c.count as usize {
            return Err(ScenarioError::invalid(
                "cpus.pid_addresses",
                format!("{} entries", c.pid_addresses.len()),
                format!("empty, or one entry per CPU ({})", c.count),
            ));
        }
        if c.pid_addresses.is_empty() && !pid_model::is_pid_aligned(c.pid_base) {
            return Err(ScenarioError::invalid(
                "cpus.pid_base",
                format!("{:#x}", c.pid_base),
                "a 64-byte aligned physical address (the descriptor is one cache line)",
            ));
        }
        for (i, a) in c.pid_addresses.iter().enumerate() {
            if !pid_model::is_pid_aligned(*a) {
                return Err(ScenarioError::invalid(
                    format!("cpus.pid_addresses[{i}]"),
                    format!("{a:#x}"),
                    "a 64-byte aligned physical address (the descriptor is one cache line)",
                ));
            }
        }
        Ok(())
    }

    fn validate_iommu(&self) -> Result<(), ScenarioError> {
        let n = self.iommu.irte_entries;
        if !(2..=65536).contains(&n) || !n.is_power_of_two() {
            return Err(ScenarioError::invalid(
                "iommu.irte_entries",
                n,
                "a power of two from 2 to 65536 (2^(S+1) for IRTA_REG.S in 0..=15)",
            ));
        }
        let p = &self.pcie;
        if p.port_credits == 0 || p.port_credits > 1_000_000 {
            return Err(ScenarioError::invalid(
                "pcie.port_credits",
                p.port_credits,
                "1..=1000000 credits",
            ));
        }
        for (name, v) in [
            ("pcie.ports_per_stack", p.ports_per_stack),
            ("pcie.stacks_per_socket", p.stacks_per_socket),
        ] {
            if v == 0 || v > 4096 {
                return Err(ScenarioError::invalid(name, v, "1..=4096"));
            }
        }
        if self.iommu.units == 0 || self.iommu.units > 64 {
            return Err(ScenarioError::invalid(
                "iommu.units",
                self.iommu.units,
                "1..=64 remapping units",
            ));
        }
        if self.iommu.iec_entries == 0 {
            return Err(ScenarioError::invalid(
                "iommu.iec_entries",
                0,
                "at least 1 interrupt entry cache entry",
            ));
        }
        Ok(())
    }

    fn validate_device(
        &self,
        i: usize,
        cpu_of_apic: &BTreeMap<u32, u32>,
    ) -> Result<(), ScenarioError> {
        let d = &self.devices[i];
        let f = |name: &str| format!("devices[{i}].{name}");
        if d.vector < 32 || d.vector > 255 {
            return Err(ScenarioError::invalid(
                f("vector"),
                d.vector,
                "32..=255 (0-15 are illegal, 16-31 are reserved for exceptions)",
            ));
        }
        if self.mode == DeliveryMode::Posted
            && d.vector >= crate::kernel::POSTED_MSI_NOTIFICATION_VECTOR.0 as u32
        {
            return Err(ScenarioError::invalid(
                f("vector"),
                format!("{:#x}", d.vector),
                "below 0xeb in posted mode (0xeb and above are system vectors, never dispatched from PIR)",
            ));
        }
        match (d.cpu, d.apic_id) {
            (Some(_), Some(_)) => {
                return Err(ScenarioError::invalid(
                    f("apic_id"),
                    d.apic_id.unwrap_or_default(),
                    "either `cpu` or `apic_id`, not both",
                ))
            }
            (Some(c), None) if c >= self.cpus.count => {
                return Err(ScenarioError::invalid(
                    f("cpu"),
                    c,
                    format!("a CPU index below cpus.count ({})", self.cpus.count),
                ))
            }
            (None, Some(a)) if !cpu_of_apic.contains_key(&a) => {
                return Err(ScenarioError::invalid(
                    f("apic_id"),
                    a,
                    "the x2APIC ID of one of the scenario's CPUs",
                ))
            }
            _ => {}
        }
        let irte = self.irte_index_of(i);
        if irte >= self.iommu.irte_entries {
            return Err(ScenarioError::invalid(
                f("irte_index"),
                irte,
                format!(
                    "an index below iommu.irte_entries ({})",
                    self.iommu.irte_entries
                ),
            ));
        }
        if let Some(h) = d.msi_handle {
            if h > u16::MAX as u32 {
                return Err(ScenarioError::invalid(
                    f("msi_handle"),
                    h,
                    "a 16-bit interrupt handle (0..=65535)",
                ));
            }
        }
        if let Some(c) = d.handler_cycles {
            super::costs::check_non_negative(&f("handler_cycles"), c)?;
        }
        match (&d.arrival, &d.closed_loop) {
            (Some(arrival), None) => {
                arrival.validate(&f("arrival"))?;
                if arrival.mean_rate_per_s() < MIN_RATE_PER_S {
                    let (name, value) = match arrival {
                        ArrivalProcess::Fixed { interval_ns } => ("interval_ns", *interval_ns),
                        ArrivalProcess::Poisson { rate_per_s } => ("rate_per_s", *rate_per_s),
                    };
                    return Err(ScenarioError::invalid(
                        f(&format!("arrival.{name}")),
                        value,
                        format!("a mean rate of at least {MIN_RATE_PER_S} events per second"),
                    ));
                }
            }
            (None, Some(cl)) => {
                cl.wq.validate(&f("closed_loop.wq"))?;
                if cl.inflight == 0 || cl.inflight > cl.wq.depth {
                    return Err(ScenarioError::invalid(
                        f("closed_loop.inflight"),
                        cl.inflight,
                        format!("1..=closed_loop.wq.depth ({})", cl.wq.depth),
                    ));
                }
                for (name, v) in [
                    ("closed_loop.submit_cycles", cl.submit_cycles),
                    ("closed_loop.reap_cycles", cl.reap_cycles),
                ] {
                    if let Some(v) = v {
                        super::costs::check_non_negative(&f(name), v)?;
                    }
                }
                if let Some(c) = cl.submit_cpu {
                    if c >= self.cpus.count {
                        return Err(ScenarioError::invalid(
                            f("closed_loop.submit_cpu"),
                            c,
                            format!("a CPU index below cpus.count ({})", self.cpus.count),
                        ));
                    }
                }
            }
            (Some(_), Some(_)) => {
                return Err(ScenarioError::invalid(
                    f("closed_loop"),
                    "set together with arrival",
                    "either `arrival` (open loop) or `closed_loop`, not both",
                ))
            }
            (None, None) => {
                return Err(ScenarioError::invalid(
                    f("arrival"),
                    "missing",
                    "`arrival` (open loop) or `closed_loop`",
                ))
            }
        }
        Ok(())
    }
}

//! Cost tables of the parts the root crate models itself: the CPU's interrupt path,
//! the device side of PCIe, and the host side of each device's driver. Component crates
//! own their own tables (PID line, IOMMU, interrupt fabric, NVMe drive, DSA engine);
//! [`Costs`] gathers them so a platform profile sets them all and a scenario can
//! override any field.
//!
//! Every field is documented with its meaning and unit. `Default` is the `generic`
//! platform profile, whose doc comments give the source of each default; every
//! platform profile (`platforms/*.toml`, listed by `irqsim platforms`) gives each
//! field's value with its own source: a primary source, `calibrated` (to which figure,
//! and how), or `assumption` (and why).

use apic_sim::LapicCosts;
use iommu_sim::vtd::{FabricCosts, RemapCosts};
use pid_model::LineCosts;
use serde::{Deserialize, Serialize};

use super::scenario::ScenarioError;

/// All cost tables of a system.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Costs {
    /// Core clock, and interrupt entry, exit and generic IRQ flow costs in cycles.
    pub cpu: CpuCosts,
    /// x2APIC register access costs (EOI and ICR writes, IPI flight).
    pub apic: LapicCosts,
    /// Device-side latencies: a write reaching the root port, a doorbell write.
    pub device: DeviceCosts,
    /// The root port's ordered write stream.
    pub pcie: PcieCosts,
    /// Host side of NVMe I/O: submission, per-entry reaping and `nvme_irq`, cycles.
    pub nvme_host: devices::NvmeHostCosts,
    /// The platform's NVMe drive: ceiling, latency, link (fields a scenario's drive
    /// leaves unset).
    pub nvme: devices::NvmeDriveCosts,
    /// DSA: the engine's service model and the host's per-descriptor work.
    pub dsa: DsaPlatformCosts,
    /// VMD: `vmd_irq`'s own cost and the forwarding delay.
    pub vmd: VmdCosts,
    /// NIC: the hardirq handler's cost.
    pub nic: NicHostCosts,
    /// Accesses to the posted-interrupt descriptor line, by MESI case.
    pub pid_line: LineCosts,
    /// IOMMU remapping: IRTE lookup (entry cache hit or miss) and checks.
    pub remap: RemapCosts,
    /// The interrupt-message path from the IOMMU to a local APIC.
    pub fabric: FabricCosts,
    /// Cross calls (`smp_call_function_many`, TLB shootdowns): the WRMSR fence, CSD
    /// set-up, the cross-called function. CSD and queue-head lines are priced by
    /// `pid_line`, the one line model.
    pub ipi: crate::kernel::ipi::IpiCosts,
    /// Distance-dependent latencies between CPUs (the extra flight of an IPI to
    /// another socket).
    pub interconnect: crate::topology::InterconnectCosts,
    /// The SMMUv3 command queue's own timing (fetch, decode, invalidation, CMD_SYNC,
    /// its MSI write).
    pub smmu_cmdq: iommu_sim::smmuv3::CmdqCosts,
    /// The CPU side of the SMMU command queue beyond its shared lines (which
    /// `pid_line` prices): MMIO, WFE, the event stream, PTE clears.
    pub smmu_host: super::smmu_host::SmmuHostCosts,
    /// IOAPIC register accesses, its messages, and the UIO flow around them.
    pub ioapic: super::ioapic::IoapicHostCosts,
    /// A NIC's transmit path: the UDP send path, DMA mapping, descriptor posts, the
    /// NIC's fetch, completion clean-up.
    pub tx: super::transmit::TxCosts,
}

impl Costs {
    /// Checks every table; the error names the first bad field.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        // One rule for every number in every table, whatever crate owns it: a cost
        // beyond MAX_COST would push timestamps toward the end of u64 picoseconds.
        let tree = serde_json::to_value(self).expect("cost tables serialize");
        check_magnitudes(&mut vec!["costs"], &tree)?;
        self.cpu.validate()?;
        check_non_negative("costs.apic.ipi_latency_ns", self.apic.ipi_latency_ns)?;
        self.device.validate()?;
        check_non_negative("costs.pcie.ordered_write_ns", self.pcie.ordered_write_ns)?;
        self.nvme_host.validate("costs.nvme_host")?;
        self.nvme.validate("costs.nvme")?;
        self.dsa.device().validate("costs.dsa")?;
        for (name, v) in [
            ("handler_cycles", self.dsa.handler_cycles),
            ("reap_cycles", self.dsa.reap_cycles),
            ("submit_cycles", self.dsa.submit_cycles),
        ] {
            check_non_negative(&format!("costs.dsa.{name}"), v)?;
        }
        check_non_negative("costs.vmd.handler_cycles", self.vmd.handler_cycles)?;
        devices::vmd::check_forward_ns("costs.vmd.forward_ns", self.vmd.forward_ns)?;
        check_non_negative("costs.nic.irq_cycles", self.nic.irq_cycles)?;
        self.pid_line.validate().map_err(|e| match e {
            pid_model::PidError::InvalidCost { field, value } => {
                bad_cost(&format!("costs.pid_line.{field}"), value)
            }
            other => ScenarioError::invalid_from("costs.pid_line", other),
        })?;
        let iommu_cost = |table: &str, e: iommu_sim::IommuError| match e {
            iommu_sim::IommuError::InvalidCost { field, value, .. } => {
                bad_cost(&format!("{table}.{field}"), value)
            }
            other => ScenarioError::invalid_from(table, other),
        };
        self.remap
            .validate()
            .map_err(|e| iommu_cost("costs.remap", e))?;
        self.fabric
            .validate()
            .map_err(|e| iommu_cost("costs.fabric", e))?;
        for (name, v) in [
            ("fence_cycles", self.ipi.fence_cycles),
            ("csd_setup_cycles", self.ipi.csd_setup_cycles),
            ("func_cycles", self.ipi.func_cycles),
            ("pause_cycles", self.ipi.pause_cycles),
            ("irq_save_cycles", self.ipi.irq_save_cycles),
        ] {
            check_non_negative(&format!("costs.ipi.{name}"), v)?;
        }
        for (name, v) in [
            (
                "ipi_cross_socket_extra_ns",
                self.interconnect.ipi_cross_socket_extra_ns,
            ),
            (
                "icr_accept_same_socket_ns",
                self.interconnect.icr_accept_same_socket_ns,
            ),
            (
                "icr_accept_cross_socket_ns",
                self.interconnect.icr_accept_cross_socket_ns,
            ),
        ] {
            check_non_negative(&format!("costs.interconnect.{name}"), v)?;
        }
        self.smmu_cmdq.validate().map_err(|e| match e {
            iommu_sim::smmuv3::SmmuError::InvalidCost { field, value, .. } => {
                bad_cost(&format!("costs.smmu_cmdq.{field}"), value)
            }
            other => ScenarioError::invalid_from("costs.smmu_cmdq", other),
        })?;
        for (name, v) in self.smmu_host.fields() {
            check_non_negative(&format!("costs.smmu_host.{name}"), v)?;
        }
        if self.smmu_host.event_stream_period_us < 1.0 {
            return Err(ScenarioError::invalid(
                "costs.smmu_host.event_stream_period_us",
                self.smmu_host.event_stream_period_us,
                "at least 1 us",
            ));
        }
        for (name, v) in self.ioapic.fields() {
            check_non_negative(&format!("costs.ioapic.{name}"), v)?;
        }
        for (name, v) in self.tx.fields() {
            check_non_negative(&format!("costs.tx.{name}"), v)?;
        }
        Ok(())
    }
}

/// A cost field's error, named by its path in the scenario.
fn bad_cost(field: &str, value: f64) -> ScenarioError {
    ScenarioError::invalid(
        field,
        value,
        "a finite number greater than or equal to zero (units: irqsim platforms NAME)",
    )
}

/// CPU-side costs of taking and handling an interrupt, in core cycles.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CpuCosts {
    /// Core clock, MHz. Source: Intel Xeon Platinum 8480+ (Sapphire Rapids, the part
    /// the posted-MSI work targeted) base frequency 2.0 GHz, Intel ARK.
    pub freq_mhz: u32,
    /// Interrupt entry: IDT vectoring, register save, `irq_enter`, up to the first
    /// instruction of the handler body. Cycles. Assumption: DESIGN.md 3 puts entry
    /// plus exit at hundreds of ns to a microsecond on servers; 600 cycles (300 ns at
    /// 2 GHz) for entry sits in the lower part of that range. No public bare-metal
    /// measurement was found.
    pub irq_entry_cycles: f64,
    /// Interrupt exit: `irq_exit` (softirq check with nothing pending), register
    /// restore, IRET. Cycles. Assumption, same reasoning as entry; exit is cheaper
    /// because it does no vectoring: 400 cycles.
    pub irq_exit_cycles: f64,
    /// Generic IRQ layer around one device handler: vector-to-descriptor lookup,
    /// `handle_edge_irq` flow, `handle_irq_event` accounting. Cycles. Assumption:
    /// a few cache-hot function calls and a spinlock, 150 cycles.
    pub irq_flow_cycles: f64,
    /// L1D fill buffers: how many L1 misses one core keeps in flight. Independent
    /// loads that miss (a sender polling many CSDs that are already unlocked) overlap
    /// up to this many; one more waits for the oldest. Count. Source: 12 on Skylake
    /// (Intel 64 and IA-32 Architectures Optimization Reference Manual, Skylake
    /// microarchitecture: "12 fill buffers", up from 10).
    pub fill_buffers: u32,
    /// `mfence` with an empty store buffer (the engine charges a plain store its
    /// ownership cost when issued, so nothing is left to drain). Cycles. Source:
    /// Agner Fog, "Instruction tables" (Skylake: MFENCE reciprocal throughput 33).
    pub mfence_cycles: f64,
}

impl Default for CpuCosts {
    fn default() -> Self {
        CpuCosts {
            freq_mhz: 2000,
            irq_entry_cycles: 600.0,
            irq_exit_cycles: 400.0,
            irq_flow_cycles: 150.0,
            fill_buffers: 12,
            mfence_cycles: 33.0,
        }
    }
}

impl CpuCosts {
    fn validate(&self) -> Result<(), ScenarioError> {
        if self.freq_mhz == 0 {
            return Err(ScenarioError::invalid(
                "costs.cpu.freq_mhz",
                self.freq_mhz,
                "a clock above 0 MHz",
            ));
        }
        if !(1..=256).contains(&self.fill_buffers) {
            return Err(ScenarioError::invalid(
                "costs.cpu.fill_buffers",
                self.fill_buffers,
                "1..=256 outstanding L1 misses",
            ));
        }
        for (name, v) in [
            ("irq_entry_cycles", self.irq_entry_cycles),
            ("irq_exit_cycles", self.irq_exit_cycles),
            ("irq_flow_cycles", self.irq_flow_cycles),
            ("mfence_cycles", self.mfence_cycles),
        ] {
            check_non_negative(&format!("costs.cpu.{name}"), v)?;
        }
        Ok(())
    }
}

/// Costs on the device side of the IOMMU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeviceCosts {
    /// From a device issuing a posted write (read data, a completion record, an MSI) to
    /// the write reaching its root port's ordering point, ns. Source: half of the
    /// ~700-740 ns uncached MMIO read round trip across PCIe Gen5 in COST-SOURCES.md
    /// (an order of magnitude, host CPU not stated): 360 ns. All of a device's writes
    /// take the same flight, so their order is kept.
    pub msi_write_ns: f64,
    /// From the host writing a doorbell or a work-queue portal (a posted write) to the
    /// write reaching the device, ns. Source: the same half round trip as
    /// `msi_write_ns`, since both are one posted PCIe write.
    pub doorbell_write_ns: f64,
}

impl Default for DeviceCosts {
    fn default() -> Self {
        DeviceCosts {
            msi_write_ns: 360.0,
            doorbell_write_ns: 360.0,
        }
    }
}

impl DeviceCosts {
    fn validate(&self) -> Result<(), ScenarioError> {
        check_non_negative("costs.device.msi_write_ns", self.msi_write_ns)?;
        check_non_negative("costs.device.doorbell_write_ns", self.doorbell_write_ns)
    }
}

/// The root port's ordered stream of a device's upstream posted writes (DESIGN.md
/// 4.7): read data (Relaxed Ordering), then the completion record or CQE, then the MSI.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PcieCosts {
    /// How long a strictly ordered posted write (a completion record, a CQE, a child
    /// MSI to VMD) holds the root port's ordering point: the writes it may not pass
    /// must be visible first. Link time comes on top. In ns. Default 10: assumption
    /// (no public figure; the commit overlaps the memory write, so only the ordering
    /// check is serial).
    pub ordered_write_ns: f64,
}

impl Default for PcieCosts {
    fn default() -> Self {
        PcieCosts {
            ordered_write_ns: 10.0,
        }
    }
}

/// DSA: the device's service model and the host's work per descriptor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DsaPlatformCosts {
    /// Per-descriptor fixed work in an engine (fetch, decode, completion record), ns.
    /// Default: [`devices::DsaCosts`]'s.
    pub descriptor_overhead_ns: f64,
    /// Memory-fill bandwidth of one engine, GB/s. Default: [`devices::DsaCosts`]'s.
    pub fill_gbps: f64,
    /// Memory-copy bandwidth of one engine, GB/s. Default: [`devices::DsaCosts`]'s.
    pub copy_gbps: f64,
    /// The device's interrupt handler body per call, cycles (a device's own
    /// `handler_cycles` overrides it). Default 300: assumption, a completion check and
    /// a wake-up of the waiter; no public figure.
    pub handler_cycles: f64,
    /// Host cycles to check one completion record and complete its descriptor, in the
    /// handler. Default 100: assumption, one read of the record plus list bookkeeping.
    pub reap_cycles: f64,
    /// Host cycles to prepare one descriptor and write it to the WQ portal (MOVDIR64B
    /// or ENQCMD). Default 200: assumption; DESIGN.md 3 puts a posted MMIO write on the
    /// order of a hundred cycles, plus preparing the descriptor.
    pub submit_cycles: f64,
}

impl Default for DsaPlatformCosts {
    fn default() -> Self {
        let d = devices::DsaCosts::default();
        DsaPlatformCosts {
            descriptor_overhead_ns: d.descriptor_overhead_ns,
            fill_gbps: d.fill_gbps,
            copy_gbps: d.copy_gbps,
            handler_cycles: 300.0,
            reap_cycles: 100.0,
            submit_cycles: 200.0,
        }
    }
}

impl DsaPlatformCosts {
    /// The device's service model.
    pub fn device(&self) -> devices::DsaCosts {
        devices::DsaCosts {
            descriptor_overhead_ns: self.descriptor_overhead_ns,
            fill_gbps: self.fill_gbps,
            copy_gbps: self.copy_gbps,
        }
    }
}

/// VMD's host-side cost and its forwarding delay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VmdCosts {
    /// `vmd_irq`'s own cost per call (walking the vector's child list under RCU),
    /// cycles; each child handler's cost comes on top. Default 100: assumption.
    pub handler_cycles: f64,
    /// From a child's MSI write reaching VMD to VMD's own MSI write, ns. Default 0:
    /// assumption (no public figure; VMD forwards the write as it arrives).
    pub forward_ns: f64,
}

impl Default for VmdCosts {
    fn default() -> Self {
        VmdCosts {
            handler_cycles: 100.0,
            forward_ns: 0.0,
        }
    }
}

/// The NIC driver's hardirq handler.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NicHostCosts {
    /// The hardirq handler's cost (acknowledge, `napi_schedule`), cycles. Default 100:
    /// assumption.
    pub irq_cycles: f64,
}

impl Default for NicHostCosts {
    fn default() -> Self {
        NicHostCosts { irq_cycles: 100.0 }
    }
}

/// Largest value any cost field may hold (cycles or nanoseconds): 1e12, i.e. at least
/// 1000 s per operation at any clock, far past anything physical.
pub const MAX_COST: f64 = 1e12;

/// `path` is the field's keys from the root, joined only for an error: a sweep
/// validates every point, so the walk must not format a name per field.
fn check_magnitudes<'a>(
    path: &mut Vec<&'a str>,
    v: &'a serde_json::Value,
) -> Result<(), ScenarioError> {
    match v {
        serde_json::Value::Object(map) => {
            for (k, child) in map {
                path.push(k);
                check_magnitudes(path, child)?;
                path.pop();
            }
            Ok(())
        }
        serde_json::Value::Number(n) => match n.as_f64() {
            Some(x) if x.abs() > MAX_COST => Err(ScenarioError::invalid(
                path.join("."),
                format!("{x:e}"),
                format!("a cost of at most {MAX_COST:e}"),
            )),
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

pub(crate) fn check_non_negative(field: &str, v: f64) -> Result<(), ScenarioError> {
    if v.is_finite() && (0.0..=MAX_COST).contains(&v) {
        Ok(())
    } else {
        Err(ScenarioError::invalid(
            field,
            v,
            format!("a finite number greater than or equal to zero and at most {MAX_COST:e}"),
        ))
    }
}

//! Cost tables of the parts the root crate models itself: the CPU's interrupt path and
//! the device-to-IOMMU write. Component crates own their own tables (PID line, IOMMU,
//! interrupt fabric); [`Costs`] gathers them so a scenario can override any field.
//!
//! Every field is documented with its unit and its source. "Assumption" marks a value
//! with no public measurement behind it, and says how it was chosen.

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
    /// Device-side latencies: an MSI write reaching the IOMMU, a doorbell write.
    pub device: DeviceCosts,
    /// Host side of NVMe I/O: submission and per-entry reaping, cycles.
    pub nvme_host: devices::NvmeHostCosts,
    /// Accesses to the posted-interrupt descriptor line, by MESI case.
    pub pid_line: LineCosts,
    /// IOMMU remapping: IRTE lookup (entry cache hit or miss) and checks.
    pub remap: RemapCosts,
    /// The interrupt-message path from the IOMMU to a local APIC.
    pub fabric: FabricCosts,
}

impl Costs {
    /// Checks every table; the error names the first bad field.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        // One rule for every number in every table, whatever crate owns it: a cost
        // beyond MAX_COST would push timestamps toward the end of u64 picoseconds.
        let tree = serde_json::to_value(self).expect("cost tables serialize");
        check_magnitudes("costs", &tree)?;
        self.cpu.validate()?;
        check_non_negative("costs.apic.ipi_latency_ns", self.apic.ipi_latency_ns)?;
        self.device.validate()?;
        self.nvme_host
            .validate("costs.nvme_host")
            .map_err(|e| ScenarioError::invalid_from("costs.nvme_host", e))?;
        self.pid_line
            .validate()
            .map_err(|e| ScenarioError::invalid_from("costs.pid_line", e))?;
        self.remap
            .validate()
            .map_err(|e| ScenarioError::invalid_from("costs.remap", e))?;
        self.fabric
            .validate()
            .map_err(|e| ScenarioError::invalid_from("costs.fabric", e))?;
        Ok(())
    }
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
}

impl Default for CpuCosts {
    fn default() -> Self {
        CpuCosts {
            freq_mhz: 2000,
            irq_entry_cycles: 600.0,
            irq_exit_cycles: 400.0,
            irq_flow_cycles: 150.0,
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
        for (name, v) in [
            ("irq_entry_cycles", self.irq_entry_cycles),
            ("irq_exit_cycles", self.irq_exit_cycles),
            ("irq_flow_cycles", self.irq_flow_cycles),
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
    /// From a device posting its MSI write to the write reaching the IOMMU, ns. Source:
    /// half of the ~700-740 ns uncached MMIO read round trip across PCIe Gen5 in
    /// COST-SOURCES.md (an order of magnitude, host CPU not stated): 360 ns.
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

/// Largest value any cost field may hold (cycles or nanoseconds): 1e12, i.e. at least
/// 1000 s per operation at any clock, far past anything physical.
pub const MAX_COST: f64 = 1e12;

fn check_magnitudes(path: &str, v: &serde_json::Value) -> Result<(), ScenarioError> {
    match v {
        serde_json::Value::Object(map) => {
            for (k, child) in map {
                check_magnitudes(&format!("{path}.{k}"), child)?;
            }
            Ok(())
        }
        serde_json::Value::Number(n) => match n.as_f64() {
            Some(x) if x.abs() > MAX_COST => Err(ScenarioError::invalid(
                path,
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

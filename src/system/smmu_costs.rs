//! Costs of the CPU side of the SMMUv3 command queue, and the SoC path between the
//! cores and the SMMU.
//!
//! The path is built from hops, so that a chiplet SoC (Kunpeng 920: cores, L3, home
//! agent and DRAM on a compute die; SMMU and NIC on an I/O die) and a monolithic die
//! are the same model with different numbers:
//!
//! ```text
//!  core / home agent ──compute_die_hop── die edge ──die_to_die── I/O die edge ──io_die_hop── SMMU
//! ```
//!
//! - a PROD write reaches the SMMU after one way plus `smmu_register_ns`;
//! - a CONS `readl` is a round trip plus `smmu_register_ns` (sampled at the SMMU);
//! - the SMMU's fetch of a ring line is a coherent read: one way to the home agent,
//!   the line model's price of a DMA read there (a snoop of the core that wrote it),
//!   and one way back; the writer keeps or shares its copy as [`FetchSnoop`] says;
//! - the CMD_SYNC's MSI write travels one way to the home agent, where it invalidates
//!   every cached copy (the line model's price of a DMA write); the poller's monitor
//!   clears then, and its reload comes from where the write left the line
//!   ([`IoWriteLands`]);
//!   the write's response comes back the same way; a later CMD_SYNC completes only
//!   once it has ([`MsiCompletion`] says whether the commands between wait too);
//! - an SEV travels one way to the cores and reaches every one of them.

use serde::{Deserialize, Serialize};
use sim_core::Duration;

/// Where the home agent leaves a line that a coherent write from the I/O side (the
/// SMMU's MSI write) updated, which decides where the next core load finds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoWriteLands {
    /// The write allocates in the shared cache: a reload is an LLC hit.
    #[default]
    Llc,
    /// The write goes to DRAM (no allocation, no stash): a reload is a memory read.
    Memory,
}

impl IoWriteLands {
    /// The name used in profiles and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            IoWriteLands::Llc => "llc",
            IoWriteLands::Memory => "memory",
        }
    }
}

/// What the SMMU's fetch of a command line does to the copy of the core that wrote it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FetchSnoop {
    /// The fetch is a non-allocating coherent read (AMBA ReadOnce), which the home
    /// node serves with SnpOnce: the writer keeps its copy Modified, so its next
    /// command into the line is a cache hit.
    #[default]
    Keep,
    /// The fetch snoops the writer down to Shared (a ReadShared-like snoop): its next
    /// command into the line must upgrade the line first.
    Share,
}

/// When the SMMU counts a CMD_SYNC that signals by MSI as complete, which decides
/// whether the commands after it wait for the MSI write's response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MsiCompletion {
    /// What IHI 0070 4.7.3 requires and no more: the commands after the CMD_SYNC go
    /// ahead once it has issued its MSI, and only a later CMD_SYNC waits, for the
    /// write responses of every earlier CMD_SYNC's MSI.
    #[default]
    InOrder,
    /// The CMD_SYNC is complete only once its own MSI write's response is back, so
    /// the SMMU begins nothing after it before then (a legal, simpler design).
    Acknowledged,
}

/// CPU-side costs of the SMMU host path beyond the shared lines (which
/// `costs.pid_line` prices), and the hops between cores and the SMMU.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SmmuHostCosts {
    /// Issuing the posted MMIO write to SMMU_CMDQ_PROD. Core cycles. Default 100:
    /// DESIGN.md section 3 ("a posted MMIO write costs on the order of a hundred
    /// cycles").
    pub mmio_write_cycles: f64,
    /// One way between a core (or the home agent of a line) and the edge of its
    /// die, through the on-die interconnect. Nanoseconds. Default 40: assumption, about
    /// half of an LLC hit (77 cycles at 2 GHz, AnandTech 11550) on a mesh.
    pub compute_die_hop_ns: f64,
    /// One crossing of the die-to-die link between the cores' die and the SMMU's die.
    /// Nanoseconds. Default 0: the generic machine is one die.
    pub die_to_die_ns: f64,
    /// One way between the SMMU and the edge of its die. Nanoseconds. Default 60:
    /// assumption, so that core to SMMU is 100 ns, the old flat PROD flight.
    pub io_die_hop_ns: f64,
    /// The SMMU's register block taking a write or answering a read, in its own
    /// clock domain. Nanoseconds. Default 100: assumption, so that a CONS read round
    /// trip is 300 ns (COST-SOURCES.md gives 700-740 ns across PCIe Gen5; on-chip is
    /// fewer hops).
    pub smmu_register_ns: f64,
    /// Where the SMMU's coherent MSI write leaves the line, and so where the poller
    /// reloads it from. Default `llc`: assumption (x86-class home agents allocate I/O
    /// writes in the LLC).
    pub io_write_lands: IoWriteLands,
    /// What the SMMU's command fetch leaves in the core that wrote the line. Default
    /// `keep`: AMBA ReadOnce / SnpOnce, the read an I/O-coherent master issues for a
    /// shareable, non-allocating access.
    pub fetch_snoop: FetchSnoop,
    /// Whether the commands after a CMD_SYNC that signals by MSI wait for that
    /// write's response. Default `in-order`: IHI 0070 4.7.3's minimum.
    pub msi_completion: MsiCompletion,
    /// Leaving WFE after the event that ends it. Nanoseconds. Default 50:
    /// assumption (clock-gated standby exit).
    pub wfe_wake_ns: f64,
    /// Period of the arm64 architected-timer event stream that bounds every WFE.
    /// Microseconds. Default 100: Linux `ARCH_TIMER_EVT_STREAM_PERIOD_US`.
    pub event_stream_period_us: f64,
    /// One `cpu_relax()` iteration (YIELD plus the loop). Core cycles. Default 10:
    /// assumption.
    pub cpu_relax_cycles: f64,
    /// `ktime_get()`: reading CNTVCT_EL0 and scaling. Nanoseconds. Default 20:
    /// assumption.
    pub clock_read_ns: f64,
    /// io-pgtable clearing one page's PTE (a mostly cached walk and a store).
    /// Nanoseconds per page. Default 100: assumption.
    pub pte_clear_ns: f64,
    /// `local_irq_save` or `local_irq_restore` (an MSR to DAIF). Core cycles.
    /// Default 5: assumption, a system-register write that does not synchronise.
    pub irq_mask_cycles: f64,
}

impl Default for SmmuHostCosts {
    fn default() -> Self {
        SmmuHostCosts {
            mmio_write_cycles: 100.0,
            compute_die_hop_ns: 40.0,
            die_to_die_ns: 0.0,
            io_die_hop_ns: 60.0,
            smmu_register_ns: 100.0,
            io_write_lands: IoWriteLands::Llc,
            fetch_snoop: FetchSnoop::Keep,
            msi_completion: MsiCompletion::InOrder,
            wfe_wake_ns: 50.0,
            event_stream_period_us: 100.0,
            cpu_relax_cycles: 10.0,
            clock_read_ns: 20.0,
            pte_clear_ns: 100.0,
            irq_mask_cycles: 5.0,
        }
    }
}

impl SmmuHostCosts {
    /// The numeric fields by name, for validation.
    pub(super) fn fields(&self) -> [(&'static str, f64); 11] {
        [
            ("mmio_write_cycles", self.mmio_write_cycles),
            ("compute_die_hop_ns", self.compute_die_hop_ns),
            ("die_to_die_ns", self.die_to_die_ns),
            ("io_die_hop_ns", self.io_die_hop_ns),
            ("smmu_register_ns", self.smmu_register_ns),
            ("wfe_wake_ns", self.wfe_wake_ns),
            ("event_stream_period_us", self.event_stream_period_us),
            ("cpu_relax_cycles", self.cpu_relax_cycles),
            ("clock_read_ns", self.clock_read_ns),
            ("pte_clear_ns", self.pte_clear_ns),
            ("irq_mask_cycles", self.irq_mask_cycles),
        ]
    }

    /// One way between a core (or a line's home agent) and the SMMU.
    pub fn core_to_smmu(&self) -> Duration {
        Duration::from_ns_f64(self.compute_die_hop_ns + self.die_to_die_ns + self.io_die_hop_ns)
    }

    /// One way between the SMMU and the edge of a compute die. A DMA access to a line
    /// takes this path on each side of the line model's price for it, which, priced
    /// from a core's point of view, already holds the legs on the compute die: the
    /// request reaching the home agent and the data or acknowledgement leaving it (a
    /// core-to-core transfer is three such legs, a DRAM read runs core to home and
    /// back). With [`Self::core_to_smmu`] on each side those legs would count twice.
    pub fn smmu_to_compute_die(&self) -> Duration {
        Duration::from_ns_f64(self.die_to_die_ns + self.io_die_hop_ns)
    }

    /// From the PROD write leaving the core until the SMMU's register holds it.
    pub fn prod_write_flight(&self) -> Duration {
        self.core_to_smmu() + Duration::from_ns_f64(self.smmu_register_ns)
    }

    /// When a CONS read samples the register, from its issue.
    pub fn cons_read_sample(&self) -> Duration {
        self.prod_write_flight()
    }

    /// A CONS read, issue to data.
    pub fn cons_read(&self) -> Duration {
        self.prod_write_flight() + self.core_to_smmu()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_register_read_is_a_round_trip_and_a_write_one_way() {
        let k = SmmuHostCosts {
            compute_die_hop_ns: 10.0,
            die_to_die_ns: 20.0,
            io_die_hop_ns: 5.0,
            smmu_register_ns: 7.0,
            ..SmmuHostCosts::default()
        };
        assert_eq!(k.core_to_smmu(), Duration::from_ns(35));
        assert_eq!(
            k.smmu_to_compute_die() + Duration::from_ns_f64(k.compute_die_hop_ns),
            k.core_to_smmu()
        );
        assert_eq!(k.prod_write_flight(), Duration::from_ns(42));
        assert_eq!(k.cons_read(), Duration::from_ns(77));
        assert!(k.cons_read_sample() < k.cons_read());
    }

    #[test]
    fn the_generic_path_keeps_the_flat_figures_it_replaced() {
        let k = SmmuHostCosts::default();
        assert_eq!(k.core_to_smmu(), Duration::from_ns(100));
        assert_eq!(k.cons_read(), Duration::from_ns(300));
    }
}

//! Building scenarios in Rust, with no TOML.
//!
//! ```
//! use irqsim::system::{ClosedLoopConfig, DeliveryMode};
//! use irqsim::devices::ArrivalProcess;
//! use irqsim::{Scenario, System};
//!
//! let scenario = Scenario::builder()
//!     .seed(3)
//!     .duration_us(200.0)
//!     .mode(DeliveryMode::Posted)
//!     .cpus(2)
//!     .dsa(0x21, 0, ArrivalProcess::Poisson { rate_per_s: 2e6 })
//!     .dsa_closed_loop(0x61, 1, ClosedLoopConfig::default())
//!     .costs(|c| c.cpu.irq_entry_cycles = 800.0)
//!     .build()
//!     .unwrap();
//! let report = System::run_scenario(&scenario).unwrap();
//! assert!(report.msis.balanced);
//! ```

use devices::ArrivalProcess;

use super::costs::Costs;
use super::scenario::{
    ClosedLoopConfig, CpuConfig, DeliveryMode, DeviceConfig, DeviceKind, IommuConfig, PcieConfig,
    Scenario, ScenarioError,
};

/// Builds a [`Scenario`] step by step; [`ScenarioBuilder::build`] validates it.
#[derive(Clone, Debug)]
pub struct ScenarioBuilder {
    scenario: Scenario,
}

impl Scenario {
    /// A builder starting from: seed 0, 1 ms, posted mode, the mainline handler with
    /// MAX_LOOPS 3, one CPU, default IOMMU and costs, no devices.
    pub fn builder() -> ScenarioBuilder {
        ScenarioBuilder {
            scenario: Scenario {
                name: String::new(),
                seed: 0,
                duration_us: 1000.0,
                mode: DeliveryMode::Posted,
                arch: Default::default(),
                variant: "copy-then-xchg".into(),
                max_loops: crate::kernel::DEFAULT_MAX_LOOPS,
                platform: None,
                cpus: CpuConfig::default(),
                iommu: IommuConfig::default(),
                pcie: PcieConfig::default(),
                costs: Costs::default(),
                devices: Vec::new(),
                nvme: Vec::new(),
                jobs: Vec::new(),
                vmd: Vec::new(),
                nics: Vec::new(),
                shootdowns: Vec::new(),
                ioapic_pins: Vec::new(),
                posted_msi_ack: Default::default(),
                retriggers: Vec::new(),
                migrations: Vec::new(),
                vector_cleanup: Default::default(),
                smmu: Default::default(),
                smmu_loads: Vec::new(),
                transmit: Vec::new(),
                base_dir: None,
            },
        }
    }
}

impl DeviceConfig {
    /// A DSA work queue raising MSIs on `vector` at CPU `cpu` (open loop).
    pub fn dsa(vector: u32, cpu: u32, arrival: ArrivalProcess) -> DeviceConfig {
        DeviceConfig {
            kind: DeviceKind::Dsa,
            name: String::new(),
            vector,
            cpu: Some(cpu),
            apic_id: None,
            irte_index: None,
            msi_handle: None,
            source_id: 0,
            port: None,
            handler_cycles: None,
            arrival: Some(arrival),
            closed_loop: None,
        }
    }

    /// A DSA work queue driven in closed loop by a host job, interrupting CPU `cpu`.
    pub fn dsa_closed_loop(vector: u32, cpu: u32, job: ClosedLoopConfig) -> DeviceConfig {
        DeviceConfig {
            arrival: None,
            closed_loop: Some(job),
            ..DeviceConfig::dsa(vector, cpu, ArrivalProcess::fixed_rate(1.0))
        }
    }
}

impl ScenarioBuilder {
    /// Name shown in reports and traces.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.scenario.name = name.into();
        self
    }
    /// Seed of every random stream.
    pub fn seed(mut self, seed: u64) -> Self {
        self.scenario.seed = seed;
        self
    }
    /// Simulated time to run, microseconds.
    pub fn duration_us(mut self, us: f64) -> Self {
        self.scenario.duration_us = us;
        self
    }
    /// Posted or remapped delivery.
    pub fn mode(mut self, mode: DeliveryMode) -> Self {
        self.scenario.mode = mode;
        self
    }
    /// A built-in notification handler variant, by name.
    pub fn variant(mut self, name: impl Into<String>) -> Self {
        self.scenario.variant = name.into();
        self
    }
    /// Linux MAX_POSTED_MSI_COALESCING_LOOP; 0 means unbounded.
    pub fn max_loops(mut self, n: u32) -> Self {
        self.scenario.max_loops = n;
        self
    }
    /// Number of CPUs (APIC IDs 0..n unless set with [`ScenarioBuilder::apic_ids`]).
    pub fn cpus(mut self, count: u32) -> Self {
        self.scenario.cpus.count = count;
        self
    }
    /// The machine as sockets x cores x threads: sets the CPU count, the sockets and
    /// firmware-style x2APIC IDs (see `cpus.topology`).
    pub fn topology(mut self, spec: crate::topology::TopologySpec) -> Self {
        self.scenario.cpus.count = spec.cpu_count().min(u32::MAX as u64) as u32;
        self.scenario.cpus.sockets = spec.sockets;
        self.scenario.cpus.topology = Some(spec);
        self
    }
    /// A TLB-shootdown load.
    pub fn shootdown(mut self, load: super::xcall::ShootdownConfig) -> Self {
        self.scenario.shootdowns.push(load);
        self
    }
    /// The instruction set and interrupt architecture (`x86` or `arm`).
    pub fn arch(mut self, arch: super::scenario::Arch) -> Self {
        self.scenario.arch = arch;
        self
    }
    /// An IOAPIC pin with its load and driver flow (x86).
    pub fn ioapic_pin(mut self, pin: super::ioapic::IoapicPinConfig) -> Self {
        self.scenario.ioapic_pins.push(pin);
        self
    }
    /// An SMMU command-queue load (`arch = "arm"`).
    pub fn smmu_load(mut self, load: super::smmu_host::SmmuLoadConfig) -> Self {
        self.scenario.smmu_loads.push(load);
        self
    }
    /// UDP senders on a NIC (`arch = "arm"`).
    pub fn transmit(mut self, load: super::transmit::TransmitConfig) -> Self {
        self.scenario.transmit.push(load);
        self
    }
    /// The SMMU as its driver finds it (`arch = "arm"`).
    pub fn smmu(mut self, setup: super::smmu_host::SmmuSetup) -> Self {
        self.scenario.smmu = setup;
        self
    }
    /// x2APIC ID of each CPU.
    pub fn apic_ids(mut self, ids: Vec<u32>) -> Self {
        self.scenario.cpus.apic_ids = ids;
        self
    }
    /// The remapping unit's configuration.
    pub fn iommu(mut self, iommu: IommuConfig) -> Self {
        self.scenario.iommu = iommu;
        self
    }
    /// Starts the cost tables from platform profile `name` (`irqsim platforms`),
    /// replacing any costs set before; [`ScenarioBuilder::build`] reports an unknown
    /// name.
    pub fn platform(mut self, name: &str) -> Self {
        match crate::platform::get(name) {
            Ok(p) => self.scenario.costs = p.costs(),
            // Left for validation to report with the field and the names there are.
            Err(_) => self.scenario.costs = Costs::default(),
        }
        self.scenario.platform = Some(name.to_string());
        self
    }
    /// Edits the cost tables in place.
    pub fn costs(mut self, edit: impl FnOnce(&mut Costs)) -> Self {
        edit(&mut self.scenario.costs);
        self
    }
    /// An open-loop DSA queue on `vector` targeting CPU `cpu`.
    pub fn dsa(self, vector: u32, cpu: u32, arrival: ArrivalProcess) -> Self {
        self.device(DeviceConfig::dsa(vector, cpu, arrival))
    }
    /// A closed-loop DSA queue on `vector` targeting CPU `cpu`.
    pub fn dsa_closed_loop(self, vector: u32, cpu: u32, job: ClosedLoopConfig) -> Self {
        self.device(DeviceConfig::dsa_closed_loop(vector, cpu, job))
    }
    /// Any device, fully specified.
    pub fn device(mut self, device: DeviceConfig) -> Self {
        self.scenario.devices.push(device);
        self
    }
    /// Validates and returns the scenario.
    pub fn build(self) -> Result<Scenario, ScenarioError> {
        self.scenario.validate()?;
        Ok(self.scenario)
    }
    /// The scenario as built so far, unvalidated (e.g. to edit a field directly).
    pub fn into_unvalidated(self) -> Scenario {
        self.scenario
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_errors_like_toml_does() {
        let err = Scenario::builder()
            .dsa(20, 0, ArrivalProcess::fixed_rate(1e6))
            .build()
            .unwrap_err();
        assert_eq!(err.field(), Some("devices[0].vector"));
        assert!(Scenario::builder().build().is_err(), "no devices");
    }

    #[test]
    fn builder_and_toml_agree() {
        let built = Scenario::builder()
            .seed(5)
            .duration_us(100.0)
            .dsa(0x21, 0, ArrivalProcess::Poisson { rate_per_s: 1e6 })
            .build()
            .unwrap();
        // The same scenario written by hand, not by the builder's own serializer.
        let by_hand = Scenario::from_toml_str(
            "seed = 5\nduration_us = 100\nmode = \"posted\"\n\
             [[devices]]\nkind = \"dsa\"\nvector = 0x21\ncpu = 0\n\
             arrival = { kind = \"poisson\", rate_per_s = 1e6 }\n",
            "by-hand",
        )
        .unwrap();
        assert_eq!(built, by_hand);
        let parsed = Scenario::from_toml_str(&built.to_toml(), "roundtrip").unwrap();
        assert_eq!(built, parsed);
    }

    #[test]
    fn a_platform_sets_the_costs_and_toml_overrides_single_fields() {
        let built = Scenario::builder()
            .platform("spr")
            .dsa(0x21, 0, ArrivalProcess::Poisson { rate_per_s: 1e6 })
            .build()
            .unwrap();
        let spr = crate::platform::get("spr").unwrap().costs();
        assert_eq!(built.costs, spr);
        // The same through TOML, plus one override: every other field stays spr's.
        let parsed = Scenario::from_toml_str(
            "duration_us = 10\nmode = \"posted\"\nplatform = \"spr\"\n\
             [costs.cpu]\nirq_entry_cycles = 999\n\
             [[devices]]\nkind = \"dsa\"\nvector = 0x21\narrival = { kind = \"poisson\", rate_per_s = 1e6 }\n",
            "t",
        )
        .unwrap();
        assert_eq!(parsed.costs.cpu.irq_entry_cycles, 999.0);
        assert_eq!(parsed.costs.cpu.freq_mhz, spr.cpu.freq_mhz);
        assert_eq!(parsed.costs.fabric, spr.fabric);
        // A round trip keeps the resolved values.
        let again = Scenario::from_toml_str(&parsed.to_toml(), "again").unwrap();
        assert_eq!(again, parsed);
        let e = Scenario::builder()
            .platform("nope")
            .dsa(0x21, 0, ArrivalProcess::fixed_rate(1e6))
            .build()
            .unwrap_err();
        assert_eq!(e.field(), Some("platform"));
    }
}

//! The Arm interrupt path in a [`super::System`] (`arch = "arm"`): a device's MSI is a DMA
//! write of its EventID to the GIC ITS doorbell, translated by the SMMUv3; the ITS
//! maps (DeviceID, EventID) to an LPI on the target CPU's redistributor; the CPU
//! acknowledges it (ICC_IAR1), runs the handler and writes ICC_EOIR1 (Linux's
//! `gic_handle_irq` with EOImode 0 and the fasteoi flow).
//!
//! Setup follows Linux: dma-iommu maps the ITS doorbell page into each device's IOVA
//! space, DeviceID = StreamID = the PCI requester id (IORT identity mapping,
//! assumption), one ITS collection per CPU, one LPI per MSI source. Bad translations
//! (an SMMU fault), writes that miss the doorbell, and unmapped devices or events
//! (an ITS drop) are faults with typed reasons in the MSI balance.

use apic_sim::gic::{
    GicCpuCosts, Its, ItsConfig, ItsDropReason, LpiConfig, LpiConfigTable, LPI_BASE,
};
use iommu_sim::smmuv3::{EventId, Perm, Smmu, SmmuConfig, Ste};
use sim_core::{CpuId, MsiMessage, Vector};

use super::scenario::ScenarioError;
use crate::kernel::smmu::ArmMsiDrop;

/// IOVA where dma-iommu maps the ITS doorbell page in every device's address space.
/// Any page-aligned IOVA works; this one is what the Linux IOVA allocator might pick.
const DOORBELL_IOVA: u64 = 0x0800_0000;
/// The SMMU translation context (and ASID) every device shares in this model.
const CONTEXT: u32 = 1;
/// LPI priority Linux programs (`LPI_PROP_DEFAULT_PRIO`).
const LPI_PRIORITY: u8 = 0xa0;
/// EventID bits each device's ITT holds.
const ITT_BITS: u8 = 8;

/// The SMMU, the ITS and the LPI tables of an Arm system.
pub(super) struct ArmPath {
    /// The SMMU: its translation side (MSIs reach the ITS through it) and its
    /// command queue.
    pub smmu: Smmu,
    /// The host side of the command queue: shared lines, waits, SMMU loads.
    pub host: super::smmu_host::SmmuHost,
    pub its: Its,
    pub lpis: LpiConfigTable,
    pub cpu_costs: GicCpuCosts,
    /// LPI `LPI_BASE + i` is delivered to CPU `.0` and served by the handler on local
    /// slot `.1` (the per-CPU handler table and the MSI ledger are indexed by it).
    pub lpi_slot: Vec<(u32, Vector)>,
    /// Next EventID of each DeviceID.
    next_event: std::collections::BTreeMap<u32, u32>,
}

fn err(e: impl std::fmt::Display) -> ScenarioError {
    ScenarioError::invalid_from("arch", e)
}

impl ArmPath {
    pub fn new(
        cpus: u32,
        config: &SmmuConfig,
        host: super::smmu_host::SmmuHost,
    ) -> Result<ArmPath, ScenarioError> {
        let its_config = ItsConfig::default();
        let doorbell = its_config.translater_address();
        let mut smmu = Smmu::new(config).map_err(err)?;
        smmu.translator.add_context(CONTEXT, CONTEXT as u16);
        smmu.translator
            .map(CONTEXT, DOORBELL_IOVA, doorbell & !0xfff, Perm::WO)
            .map_err(err)?;
        let mut its = Its::new(its_config).map_err(err)?;
        for c in 0..cpus {
            its.mapc(c as u16, Some(CpuId(c))).map_err(err)?;
        }
        Ok(ArmPath {
            smmu,
            host,
            its,
            lpis: LpiConfigTable::new(16),
            cpu_costs: GicCpuCosts::default(),
            lpi_slot: Vec::new(),
            next_event: Default::default(),
        })
    }

    /// The doorbell address a device writes.
    fn doorbell(&self) -> u64 {
        DOORBELL_IOVA + (self.its.config().translater_address() & 0xfff)
    }

    /// Sets up one MSI source of device `device_id` aimed at `cpu`, served by the handler
    /// on local slot `slot`; returns the (address, data) the device writes. `event`
    /// overrides the EventID the device writes (a misprogrammed device).
    pub fn add_source(
        &mut self,
        device_id: u16,
        cpu: u32,
        slot: Vector,
        event_override: Option<u32>,
    ) -> Result<MsiMessage, ScenarioError> {
        let dev = device_id as u32;
        if !self.next_event.contains_key(&dev) {
            self.smmu
                .translator
                .set_ste(dev, Ste::stage1(CONTEXT))
                .map_err(err)?;
            self.its.mapd(dev, Some(ITT_BITS)).map_err(err)?;
            self.next_event.insert(dev, 0);
        }
        let event = self.next_event[&dev];
        self.next_event.insert(dev, event + 1);
        let intid = LPI_BASE + self.lpi_slot.len() as u32;
        self.its.mapti(dev, event, intid, cpu as u16).map_err(err)?;
        self.lpis
            .set(
                intid,
                LpiConfig {
                    priority: LPI_PRIORITY,
                    enabled: true,
                },
            )
            .map_err(err)?;
        self.lpi_slot.push((cpu, slot));
        Ok(MsiMessage {
            address: self.doorbell(),
            data: event_override.unwrap_or(event),
        })
    }

    /// The CPU and handler slot of LPI `intid`.
    pub fn slot_of(&self, intid: u32) -> Option<(u32, Vector)> {
        intid
            .checked_sub(LPI_BASE)
            .and_then(|i| self.lpi_slot.get(i as usize).copied())
    }
}

/// The balance's name for an Arm MSI drop.
pub(super) fn drop_reason(r: ArmMsiDrop) -> &'static str {
    match r {
        ArmMsiDrop::SmmuFault(e) => match e {
            EventId::CBadStreamId => "smmu_c_bad_streamid",
            EventId::FSteFetch => "smmu_f_ste_fetch",
            EventId::CBadSte => "smmu_c_bad_ste",
            EventId::FTranslation => "smmu_f_translation",
            EventId::FPermission => "smmu_f_permission",
        },
        ArmMsiDrop::SmmuAbort => "smmu_abort",
        ArmMsiDrop::NotDoorbell { .. } => "msi_not_at_its_doorbell",
        ArmMsiDrop::Its(r) => match r {
            ItsDropReason::DeviceIdOutOfRange => "its_device_id_out_of_range",
            ItsDropReason::DeviceNotMapped => "its_device_not_mapped",
            ItsDropReason::EventIdOutOfRange => "its_event_id_out_of_range",
            ItsDropReason::EventNotMapped => "its_event_not_mapped",
            ItsDropReason::CollectionNotMapped => "its_collection_not_mapped",
        },
        ArmMsiDrop::LpisDisabled => "lpis_disabled",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::smmu::{route_arm_msi, ArmMsiRoute};
    use sim_core::SimTime;

    #[test]
    fn faults_on_the_path_get_typed_names() {
        let sc = crate::system::Scenario::builder()
            .arch(crate::system::scenario::Arch::Arm)
            .cpus(2)
            .into_unvalidated();
        let config = sc.smmu.config(&sc.costs.smmu_cmdq);
        let smmu = Smmu::new(&config).unwrap();
        let host =
            super::super::smmu_host::SmmuHost::new(&sc, &smmu, &crate::engine::RngStreams::new(1))
                .unwrap();
        let mut arm = ArmPath::new(2, &config, host).unwrap();
        let good = arm.add_source(0x100, 1, Vector(0x21), None).unwrap();
        let route = |arm: &mut ArmPath, sid: u32, msg: MsiMessage| {
            route_arm_msi(
                SimTime::ZERO,
                &mut arm.smmu.translator,
                &mut arm.its,
                sid,
                msg,
            )
        };
        match route(&mut arm, 0x100, good) {
            ArmMsiRoute::Lpi { cpu, intid, .. } => {
                assert_eq!(cpu, CpuId(1));
                assert_eq!(arm.slot_of(intid), Some((1, Vector(0x21))));
            }
            other => panic!("expected an LPI, got {other:?}"),
        }
        // A stream the SMMU has no STE for: a bad translation, dropped with a reason.
        let ArmMsiRoute::Dropped { reason, .. } = route(&mut arm, 0x999, good) else {
            panic!("unknown stream must fault");
        };
        assert!(drop_reason(reason).starts_with("smmu_"), "{reason:?}");
        // An address next to the doorbell: not mapped, F_TRANSLATION.
        let off = MsiMessage {
            address: good.address + 0x1000,
            ..good
        };
        let ArmMsiRoute::Dropped { reason, .. } = route(&mut arm, 0x100, off) else {
            panic!("unmapped IOVA must fault");
        };
        assert_eq!(drop_reason(reason), "smmu_f_translation");
        // An EventID the ITS never mapped.
        let ArmMsiRoute::Dropped { reason, .. } =
            route(&mut arm, 0x100, MsiMessage { data: 9, ..good })
        else {
            panic!("unmapped event must drop");
        };
        assert_eq!(drop_reason(reason), "its_event_not_mapped");
    }
}

//! The Arm MSI path, and Linux's GICv3 interrupt entry.
//!
//! ```text
//!  device ── DMA write (addr = doorbell IOVA, data = EventID) ──▶ SMMU translate
//!     │ Translated{pa}: pa must be GITS_TRANSLATER     │ Fault{F_TRANSLATION..} / Aborted
//!     ▼                                                ▼
//!  ITS translate(DeviceID = StreamID, EventID) ──▶ Lpi{intid, cpu}  │ Dropped(ItsDropReason)
//!     ▼ at `at`
//!  Redistributor[cpu].set_pending ── signal ──▶ CPU: gic_handle_irq
//!                                            (IAR read, EOIR, handler; EOImode 0 or 1)
//! ```
//!
//! [`route_arm_msi`] does the SMMU and ITS steps (both pure, both priced) and tells the
//! engine when the LPI reaches its redistributor; the engine then calls
//! `Redistributor::set_pending` at that time, and runs [`gic_handle_irq`] on the CPU
//! when the redistributor signals. Linux (arm-smmu-v3 with dma-iommu) maps the ITS
//! doorbell page into each device's IOVA space (`iommu_dma_prepare_msi`), so a
//! device's MSI is an ordinary translated DMA write; DeviceID = StreamID here (the
//! IORT identity mapping of a PCIe requester ID, assumption).
//!
//! Every MSI ends in exactly one of: dropped with an [`ArmMsiDrop`] reason, merged
//! into an LPI already pending, pending, or handled. The test below keeps that ledger.

use crate::engine::{Call, Port};
use apic_sim::gic::{is_special_intid, Its, ItsDropReason, ItsResult, LPI_BASE};
use iommu_sim::smmuv3::{DmaRequest, EventId, TranslateResult, Translator};
use sim_core::{CpuId, MsiMessage, SimTime};

/// Why an Arm MSI produced no LPI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ArmMsiDrop {
    /// The SMMU faulted the write (bad StreamID or STE, unmapped doorbell IOVA,
    /// permission): the event record type.
    SmmuFault(EventId),
    /// The device's STE aborts all traffic (Config = abort): terminated silently.
    SmmuAbort,
    /// The write translated to an address that is not GITS_TRANSLATER: it went to
    /// memory, and no interrupt exists.
    NotDoorbell {
        /// The physical address the write went to.
        pa: u64,
    },
    /// The ITS had no mapping.
    Its(ItsDropReason),
    /// The target redistributor has LPIs disabled (GICR_CTLR.EnableLPIs = 0).
    LpisDisabled,
}

/// Where [`route_arm_msi`] sends an MSI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArmMsiRoute {
    /// The LPI reaches `cpu`'s redistributor at `at`.
    Lpi {
        /// The CPU whose redistributor takes the LPI.
        cpu: CpuId,
        /// The LPI's INTID (8192 and up).
        intid: u32,
        /// When it reaches the redistributor.
        at: SimTime,
    },
    /// Dropped; `at` is when the path finished with it.
    Dropped {
        /// Why, and where on the path.
        reason: ArmMsiDrop,
        /// When the path finished with it.
        at: SimTime,
    },
}

/// Routes a device's MSI write arriving at the SMMU at `now`: SMMU translation of the
/// doorbell address, then ITS translation of (StreamID, data as EventID).
pub fn route_arm_msi(
    now: SimTime,
    smmu: &mut Translator,
    its: &mut Its,
    stream_id: u32,
    msi: MsiMessage,
) -> ArmMsiRoute {
    let req = DmaRequest {
        stream_id,
        iova: msi.address,
        write: true,
    };
    let t = smmu.translate(now, req);
    let at_its = now + t.cost;
    let pa = match t.result {
        TranslateResult::Translated { pa, .. } | TranslateResult::Bypassed { pa } => pa,
        TranslateResult::Aborted => {
            return ArmMsiRoute::Dropped {
                reason: ArmMsiDrop::SmmuAbort,
                at: at_its,
            }
        }
        TranslateResult::Fault { event, .. } => {
            return ArmMsiRoute::Dropped {
                reason: ArmMsiDrop::SmmuFault(event),
                at: at_its,
            }
        }
    };
    if pa != its.config().translater_address() {
        return ArmMsiRoute::Dropped {
            reason: ArmMsiDrop::NotDoorbell { pa },
            at: at_its,
        };
    }
    let out = its.translate(at_its, stream_id, msi.data);
    match out.result {
        ItsResult::Lpi { intid, cpu } => ArmMsiRoute::Lpi {
            cpu,
            intid,
            at: at_its + out.latency,
        },
        ItsResult::Dropped(r) => ArmMsiRoute::Dropped {
            reason: ArmMsiDrop::Its(r),
            at: at_its + out.cost,
        },
    }
}

/// One operation of Linux's GICv3 interrupt entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GicCpuOp {
    /// Read ICC_IAR1_EL1; yields the INTID.
    ReadIar,
    /// Write ICC_EOIR1_EL1 (priority drop; with EOImode 0 also deactivation).
    WriteEoir(u32),
    /// Write ICC_DIR_EL1 (deactivation, EOImode 1 only).
    WriteDir(u32),
    /// `generic_handle_domain_irq`: run the flow handler and the device's handler.
    HandleIrq(u32),
}

/// The algorithm's handle on the CPU taking the interrupt.
#[derive(Clone)]
pub struct GicCpuPort {
    port: Port<GicCpuOp, u64>,
}

impl GicCpuPort {
    /// Wraps the port the driver gave the algorithm.
    pub fn new(port: Port<GicCpuOp, u64>) -> Self {
        GicCpuPort { port }
    }
    fn op(&self, op: GicCpuOp) -> Call<GicCpuOp, u64> {
        self.port.call(op)
    }
    /// [`GicCpuOp::ReadIar`]: yields the INTID acknowledged.
    pub async fn read_iar(&self) -> u32 {
        self.op(GicCpuOp::ReadIar).await as u32
    }
    /// [`GicCpuOp::WriteEoir`] for `intid`.
    pub async fn write_eoir(&self, intid: u32) {
        self.op(GicCpuOp::WriteEoir(intid)).await;
    }
    /// [`GicCpuOp::WriteDir`] for `intid`.
    pub async fn write_dir(&self, intid: u32) {
        self.op(GicCpuOp::WriteDir(intid)).await;
    }
    /// [`GicCpuOp::HandleIrq`] for `intid`.
    pub async fn handle_irq(&self, intid: u32) {
        self.op(GicCpuOp::HandleIrq(intid)).await;
    }
}

/// Linux's `gic_handle_irq` for one interrupt (drivers/irqchip/irq-gic-v3.c, v6.x):
/// read IAR; a special INTID (spurious) ends it. With EOImode 1 (the kernel runs at
/// EL2 and `supports_deactivate_key` is on) EOIR is written at once, as the priority
/// drop, before the handler; the deactivation (DIR) follows the handler for SPIs and
/// PPIs but is skipped for LPIs, which have no active state. With EOImode 0 the EOIR
/// write comes after the handler (`handle_fasteoi_irq` -> `gic_eoi_irq`). Returns the
/// INTID handled, if any.
pub async fn gic_handle_irq(cpu: &GicCpuPort, eoimode1: bool) -> Option<u32> {
    let intid = cpu.read_iar().await;
    if is_special_intid(intid) {
        return None;
    }
    if eoimode1 {
        cpu.write_eoir(intid).await;
    }
    cpu.handle_irq(intid).await;
    if !eoimode1 {
        cpu.write_eoir(intid).await;
    } else if intid < LPI_BASE {
        cpu.write_dir(intid).await;
    }
    Some(intid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Coroutine, Step};
    use apic_sim::gic::ItsConfig;
    use iommu_sim::smmuv3::{Ste, TranslateConfig};

    #[test]
    fn eoimode0_writes_eoir_after_the_handler_and_spurious_ends_early() {
        let run = |eoimode1: bool, iar: u32| {
            let mut co: Coroutine<GicCpuOp, u64> = Coroutine::new(move |port| async move {
                gic_handle_irq(&GicCpuPort::new(port), eoimode1).await;
            });
            let mut ops = Vec::new();
            let mut resp = None;
            while let Step::Request(op) = co.resume(resp.take()) {
                ops.push(op);
                resp = Some(if op == GicCpuOp::ReadIar {
                    iar as u64
                } else {
                    0
                });
            }
            ops
        };
        use GicCpuOp::*;
        assert_eq!(run(true, 8192), [ReadIar, WriteEoir(8192), HandleIrq(8192)]);
        assert_eq!(
            run(false, 8192),
            [ReadIar, HandleIrq(8192), WriteEoir(8192)]
        );
        assert_eq!(
            run(true, 40),
            [ReadIar, WriteEoir(40), HandleIrq(40), WriteDir(40)]
        );
        assert_eq!(run(true, 1023), [ReadIar]);
    }

    #[test]
    fn misdirected_msi_reasons() {
        let its_cfg = ItsConfig::default();
        let mut smmu = Translator::new(TranslateConfig::default()).unwrap();
        let mut its = Its::new(its_cfg.clone()).unwrap();
        smmu.set_ste(1, Ste::bypass()).unwrap();
        smmu.set_ste(2, Ste::abort()).unwrap();
        let msi = |address| MsiMessage { address, data: 0 };
        let r = route_arm_msi(SimTime::ZERO, &mut smmu, &mut its, 1, msi(0x1000));
        assert!(matches!(
            r,
            ArmMsiRoute::Dropped {
                reason: ArmMsiDrop::NotDoorbell { pa: 0x1000 },
                ..
            }
        ));
        let r = route_arm_msi(
            SimTime::ZERO,
            &mut smmu,
            &mut its,
            2,
            msi(its_cfg.translater_address()),
        );
        assert!(matches!(
            r,
            ArmMsiRoute::Dropped {
                reason: ArmMsiDrop::SmmuAbort,
                ..
            }
        ));
        let r = route_arm_msi(
            SimTime::ZERO,
            &mut smmu,
            &mut its,
            1,
            msi(its_cfg.translater_address()),
        );
        assert!(matches!(
            r,
            ArmMsiRoute::Dropped { reason: ArmMsiDrop::Its(ItsDropReason::DeviceNotMapped), at } if at > SimTime::ZERO
        ));
        let r = route_arm_msi(SimTime::ZERO, &mut smmu, &mut its, 3, msi(0));
        assert!(matches!(
            r,
            ArmMsiRoute::Dropped {
                reason: ArmMsiDrop::SmmuFault(EventId::CBadSte),
                ..
            }
        ));
    }
}

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
    use crate::engine::{Coroutine, EventQueue, Priority, Step};
    use apic_sim::gic::{
        GicCpuCosts, ItsConfig, LpiConfig, LpiConfigTable, PendOutcome, Redistributor,
    };
    use iommu_sim::smmuv3::{Perm, Ste, TranslateConfig};
    use sim_core::{Duration, Freq};
    use std::collections::BTreeMap;

    #[derive(Clone, Copy, Debug)]
    enum Ev {
        Raise { stream: u32, msi: MsiMessage },
        LpiArrives { cpu: usize, intid: u32 },
        Irq { cpu: usize },
        OpDone { cpu: usize, resp: u64 },
        ExitDone { cpu: usize },
    }

    #[derive(Default, Debug)]
    struct Ledger {
        raised: u64,
        dropped: BTreeMap<ArmMsiDrop, u64>,
        merged: u64,
        handled: u64,
    }

    /// A device behind the SMMU raises MSIs to two CPUs through the ITS; some are
    /// misdirected (unmapped doorbell IOVA, unmapped EventID, LPIs off on CPU 2). At
    /// the end every MSI is handled, merged, dropped with a reason, or still pending,
    /// and the counts balance.
    #[test]
    fn arm_msi_end_to_end_balances() {
        let its_cfg = ItsConfig::default();
        let doorbell_pa = its_cfg.translater_address();
        let doorbell_iova = 0x0800_0000u64; // where dma-iommu put the doorbell page
        let mut smmu = Translator::new(TranslateConfig::default()).unwrap();
        smmu.add_context(1, 1);
        smmu.map(1, doorbell_iova, doorbell_pa & !0xfff, Perm::WO)
            .unwrap();
        smmu.set_ste(0x10, Ste::stage1(1)).unwrap();
        smmu.set_ste(0x11, Ste::stage1(1)).unwrap();
        let mut its = Its::new(its_cfg).unwrap();
        let mut lpis = LpiConfigTable::new(16);
        for dev in [0x10u32, 0x11] {
            its.mapd(dev, Some(5)).unwrap();
        }
        for c in 0..3u16 {
            its.mapc(c, Some(CpuId(c as u32))).unwrap();
        }
        // device 0x10: events 0,1 -> CPU 0 and 1; device 0x11 event 0 -> CPU 2 (LPIs off).
        for (dev, ev, intid, icid) in [(0x10, 0, 8192, 0), (0x10, 1, 8193, 1), (0x11, 0, 8194, 2)] {
            its.mapti(dev, ev, intid, icid).unwrap();
            lpis.set(
                intid,
                LpiConfig {
                    priority: 0xa0,
                    enabled: true,
                },
            )
            .unwrap();
        }
        let mut rd: Vec<Redistributor> = (0..3).map(|c| Redistributor::new(CpuId(c))).collect();
        rd[0].set_enable_lpis(true);
        rd[1].set_enable_lpis(true);

        let freq = Freq::from_mhz(2500).unwrap();
        let gic = GicCpuCosts::default();
        let entry = Duration::from_ns(300);
        let handler = Duration::from_ns(700);
        let exit = Duration::from_ns(200);

        let mut q: EventQueue<Ev> = EventQueue::new();
        let doorbell = |off: u64| doorbell_iova + (doorbell_pa & 0xfff) + off;
        let mut t = SimTime::ZERO;
        for i in 0..400u64 {
            t += Duration::from_ns(150 + (i * 37) % 200);
            let (stream, addr, data) = match i % 10 {
                7 => (0x10, doorbell(0) + 0x1000, 0), // unmapped IOVA: F_TRANSLATION
                8 => (0x10, doorbell(0), 9),          // unmapped event
                9 => (0x11, doorbell(0), 0),          // CPU 2 has LPIs off
                _ => (0x10, doorbell(0), (i % 2) as u32),
            };
            q.schedule(
                t,
                Priority::DEVICE,
                Ev::Raise {
                    stream,
                    msi: MsiMessage {
                        address: addr,
                        data,
                    },
                },
            );
        }

        let mut ledger = Ledger::default();
        let mut cos: Vec<Option<Coroutine<GicCpuOp, u64>>> = (0..3).map(|_| None).collect();
        let mut in_flight = 0u64;
        let eoimode1 = true;
        let start = |co: &mut Option<Coroutine<GicCpuOp, u64>>| {
            *co = Some(Coroutine::new(move |port| async move {
                gic_handle_irq(&GicCpuPort::new(port), eoimode1).await;
            }));
        };
        while let Some((now, ev)) = q.pop() {
            match ev {
                Ev::Raise { stream, msi } => {
                    ledger.raised += 1;
                    match route_arm_msi(now, &mut smmu, &mut its, stream, msi) {
                        ArmMsiRoute::Lpi { cpu, intid, at } => {
                            in_flight += 1;
                            q.schedule(
                                at,
                                Priority::APIC,
                                Ev::LpiArrives {
                                    cpu: cpu.0 as usize,
                                    intid,
                                },
                            );
                        }
                        ArmMsiRoute::Dropped { reason, .. } => {
                            *ledger.dropped.entry(reason).or_insert(0) += 1
                        }
                    }
                }
                Ev::LpiArrives { cpu, intid } => {
                    in_flight -= 1;
                    match rd[cpu].set_pending(intid, &lpis) {
                        PendOutcome::Pending { signal } => {
                            if signal && cos[cpu].is_none() {
                                q.schedule(now + gic.signal(), Priority::APIC, Ev::Irq { cpu });
                            }
                        }
                        PendOutcome::Merged => ledger.merged += 1,
                        PendOutcome::LpisDisabled => {
                            *ledger.dropped.entry(ArmMsiDrop::LpisDisabled).or_insert(0) += 1
                        }
                    }
                }
                Ev::Irq { cpu } => {
                    if cos[cpu].is_some() || !rd[cpu].irq_asserted() {
                        continue;
                    }
                    start(&mut cos[cpu]);
                    // Interrupt entry, then the first operation.
                    q.schedule(
                        now + entry,
                        Priority::CPU,
                        Ev::OpDone {
                            cpu,
                            resp: u64::MAX,
                        },
                    );
                }
                Ev::OpDone { cpu, resp } => {
                    let co = cos[cpu].as_mut().unwrap();
                    let step = co.resume((resp != u64::MAX).then_some(resp));
                    match step {
                        Step::Request(op) => {
                            // Apply at request, deliver after the cost (the CPU is busy).
                            let (cost, r) = match op {
                                GicCpuOp::ReadIar => {
                                    (gic.iar_read(freq), rd[cpu].acknowledge() as u64)
                                }
                                GicCpuOp::WriteEoir(id) => {
                                    rd[cpu].eoi(id);
                                    (gic.eoir_write(freq), 0)
                                }
                                GicCpuOp::WriteDir(_) => (gic.eoir_write(freq), 0),
                                GicCpuOp::HandleIrq(_) => {
                                    ledger.handled += 1;
                                    (handler, 0)
                                }
                            };
                            q.schedule(now + cost, Priority::CPU, Ev::OpDone { cpu, resp: r });
                        }
                        Step::Done => {
                            cos[cpu] = None;
                            q.schedule(now + exit, Priority::CPU, Ev::ExitDone { cpu });
                        }
                    }
                }
                Ev::ExitDone { cpu } => {
                    if rd[cpu].irq_asserted() {
                        q.schedule(now, Priority::CPU, Ev::Irq { cpu });
                    }
                }
            }
        }
        let pending: u64 = rd.iter().map(|r| r.pending_count() as u64).sum();
        let dropped: u64 = ledger.dropped.values().sum();
        assert_eq!(in_flight, 0);
        assert_eq!(
            ledger.raised,
            ledger.handled + ledger.merged + dropped + pending,
            "{ledger:?} pending {pending}"
        );
        assert_eq!(ledger.raised, 400);
        assert_eq!(
            ledger.dropped[&ArmMsiDrop::SmmuFault(EventId::FTranslation)],
            40
        );
        assert_eq!(
            ledger.dropped[&ArmMsiDrop::Its(ItsDropReason::EventNotMapped)],
            40
        );
        assert_eq!(ledger.dropped[&ArmMsiDrop::LpisDisabled], 40);
        assert!(ledger.handled > 0);
        assert_eq!(pending, 0, "everything deliverable was handled");
        // The doorbell translation walks once, then hits the IOTLB; the unmapped IOVA
        // walks every time (faulting translations are not cached).
        let c = smmu.counters();
        assert_eq!(c.iotlb.misses, 1 + 40, "{c:?}");
        assert_eq!(c.iotlb.hits, 400 - 41);
        for r in &rd[..2] {
            assert_eq!(r.counters().acknowledged, r.counters().eois);
            assert_eq!(r.active_count(), 0);
        }
    }

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

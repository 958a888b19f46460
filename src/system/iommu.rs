//! The interrupt-remapping units: each serves the MSI writes of the sources behind
//! it one at a time, in arrival order (remap, then for a posted entry the atomic update
//! of the target CPU's descriptor), and sends interrupt messages into its socket's
//! fabric, waiting when the fabric has no credit left.

use std::collections::VecDeque;

use iommu_sim::vtd::{InterruptMessageFabric, InterruptRemapper, RemapAction};
use pid_model::{Agent, LineOp};
use sim_core::{Duration, SimTime, Vector};

use super::ledger::MsiToken;
use super::{Event, InFlightMsi, IommuWork, SimEvent, System};
use crate::engine::Priority;

/// The stage of the request the IOMMU is working on.
#[derive(Clone, Copy, Debug)]
pub(super) enum IommuStage {
    Remap(RemapAction),
    /// Arm: the SMMU and ITS have routed the write (an LPI, or a drop).
    Arm(crate::kernel::smmu::ArmMsiRoute),
    /// The atomic update of CPU `cpu`'s descriptor, begun at `started`.
    PostWrite {
        cpu: u32,
        vector: Vector,
        urg: bool,
        started: SimTime,
    },
}

pub(super) struct IommuUnit {
    pub remapper: InterruptRemapper,
    pub fifo: VecDeque<InFlightMsi>,
    pub current: Option<(InFlightMsi, IommuStage)>,
    pub fabric: InterruptMessageFabric,
    pub agent: Agent,
    pub updates: u64,
    /// Request credits not taken by an MSI in flight to, or queued in, the unit.
    pub credits_free: u32,
    /// Sources holding MSIs back for lack of a credit, in arrival order.
    pub credit_waiters: VecDeque<u32>,
    /// Interrupt messages sent into the fabric and not yet delivered.
    pub fabric_in_flight: u32,
    pub fabric_credits: u32,
    /// The unit finished a stage but could not send its message: the fabric was full.
    pub waiting_for_fabric: bool,
    /// How long the unit spent waiting for fabric credit.
    pub fabric_stall: Duration,
    pub fabric_stall_since: SimTime,
}

impl System {
    /// A message of unit `unit`'s fabric reached its LAPIC: its credit returns, and a
    /// unit that was waiting for one finishes its stage.
    pub(super) fn fabric_delivered(&mut self, now: SimTime, unit: u16) {
        let u = unit as usize;
        self.iommus[u].fabric_in_flight -= 1;
        if self.iommus[u].waiting_for_fabric {
            self.iommus[u].waiting_for_fabric = false;
            let since = self.iommus[u].fabric_stall_since;
            self.iommus[u].fabric_stall += now.since(since);
            self.on_iommu_stage_done(now, unit);
        }
    }

    /// The IOMMU processes one request at a time, in arrival order.
    pub(super) fn iommu_start_next(&mut self, now: SimTime, unit: u16) {
        let u = unit as usize;
        if self.iommus[u].current.is_some() {
            return;
        }
        let Some(msi) = self.iommus[u].fifo.pop_front() else {
            return;
        };
        // The request left the inbound queue: its credit goes back to the devices.
        self.credit_returned(now, unit);
        let src = &self.sources[msi.source as usize];
        let (message, source_id) = (src.message, src.source_id);
        if let Some(arm) = self.arm.as_mut() {
            // Arm: the SMMU translates the doorbell write and the ITS maps it to an LPI.
            let route = crate::kernel::smmu::route_arm_msi(
                now,
                &mut arm.smmu,
                &mut arm.its,
                source_id as u32,
                message,
            );
            let at = match route {
                crate::kernel::smmu::ArmMsiRoute::Lpi { at, .. }
                | crate::kernel::smmu::ArmMsiRoute::Dropped { at, .. } => at.max(now),
            };
            self.iommus[u].current = Some((msi, IommuStage::Arm(route)));
            self.queue
                .schedule(at, Priority::IOMMU, Event::IommuStageDone { unit });
            return;
        }
        let out = self.iommus[u].remapper.remap(now, &message, source_id);
        self.iommus[u].current = Some((msi, IommuStage::Remap(out.action)));
        self.queue.schedule(
            now + out.cost,
            Priority::IOMMU,
            Event::IommuStageDone { unit },
        );
        if self.observing() {
            let unknown = u32::MAX;
            let what = match out.action {
                RemapAction::Deliver { dest, vector, .. } => IommuWork::Remapped {
                    cpu: self.apic_to_cpu.get(&dest.0).copied().unwrap_or(unknown),
                    vector,
                },
                RemapAction::Post { pda, vector, .. } => IommuWork::PostLookup {
                    cpu: self.pda_to_cpu.get(&pda).copied().unwrap_or(unknown),
                    vector,
                },
                RemapAction::Blocked { reason, .. } => IommuWork::Fault {
                    code: reason.code(),
                },
            };
            self.emit(SimEvent::IommuWork {
                start: now,
                dur: out.cost,
                msi: msi.token,
                what,
            });
        }
    }

    /// Drops `msi` for `reason`: counted in the balance and reported to the observer.
    pub(super) fn drop_msi(&mut self, now: SimTime, msi: MsiToken, reason: &'static str) {
        self.ledger.drop_msi(reason);
        self.emit(SimEvent::MsiDropped {
            t: now,
            msi,
            reason,
        });
    }

    /// Whether the current stage may finish now: a stage that sends an interrupt
    /// message needs room in the fabric. If not, the unit waits for a delivery.
    fn fabric_has_room(&mut self, now: SimTime, unit: u16, stage: &IommuStage) -> bool {
        let u = unit as usize;
        let sends = matches!(
            stage,
            IommuStage::Remap(RemapAction::Deliver { .. }) | IommuStage::PostWrite { .. }
        );
        if !sends || self.iommus[u].fabric_in_flight < self.iommus[u].fabric_credits {
            return true;
        }
        if !self.iommus[u].waiting_for_fabric {
            self.iommus[u].waiting_for_fabric = true;
            self.iommus[u].fabric_stall_since = now;
        }
        false
    }

    /// Sends an interrupt message for `vector` to `cpu` through unit `unit`'s fabric;
    /// it reaches the LAPIC when the fabric says. `msi` is the device MSI it carries
    /// (none for a posted-interrupt notification).
    fn send_interrupt_message(
        &mut self,
        now: SimTime,
        unit: u16,
        cpu: u32,
        vector: Vector,
        level: bool,
        msi: Option<MsiToken>,
    ) {
        let u = unit as usize;
        self.iommus[u].fabric_in_flight += 1;
        let at = self.iommus[u].fabric.submit(now);
        self.queue.schedule(
            at,
            Priority::APIC,
            Event::ApicMessage {
                unit,
                cpu,
                vector,
                level,
                msi,
            },
        );
    }

    pub(super) fn on_iommu_stage_done(&mut self, now: SimTime, unit: u16) {
        let u = unit as usize;
        let stage = self.iommus[u]
            .current
            .as_ref()
            .expect("IommuStageDone with no request in progress")
            .1;
        if !self.fabric_has_room(now, unit, &stage) {
            return;
        }
        let (msi, stage) = self.iommus[u].current.take().expect("checked above");
        match stage {
            IommuStage::Arm(route) => {
                self.ledger.iommu -= 1;
                match route {
                    crate::kernel::smmu::ArmMsiRoute::Lpi { cpu, intid, .. } => {
                        self.ledger.fabric += 1;
                        let signal = self
                            .arm
                            .as_ref()
                            .expect("an Arm stage means an Arm system")
                            .cpu_costs
                            .signal();
                        self.queue.schedule(
                            now + signal,
                            Priority::APIC,
                            Event::GicLpi {
                                cpu: cpu.0,
                                intid,
                                msi: msi.token,
                            },
                        );
                    }
                    crate::kernel::smmu::ArmMsiRoute::Dropped { reason, .. } => {
                        self.drop_msi(now, msi.token, super::arm::drop_reason(reason));
                    }
                }
            }
            IommuStage::Remap(RemapAction::Blocked { reason, .. }) => {
                self.ledger.iommu -= 1;
                self.drop_msi(now, msi.token, reason.name());
            }
            IommuStage::Remap(RemapAction::Deliver {
                dest,
                vector,
                level_triggered,
                ..
            }) => {
                self.ledger.iommu -= 1;
                match self.apic_to_cpu.get(&dest.0) {
                    Some(&cpu) => {
                        self.ledger.fabric += 1;
                        self.send_interrupt_message(
                            now,
                            unit,
                            cpu,
                            vector,
                            level_triggered,
                            Some(msi.token),
                        );
                    }
                    None => self.drop_msi(now, msi.token, "no_cpu_at_destination"),
                }
            }
            IommuStage::Remap(RemapAction::Post {
                pda, vector, urg, ..
            }) => match self.pda_to_cpu.get(&pda) {
                Some(&cpu) => {
                    let op = LineOp::IommuPost { vector, urg };
                    let cost = self.cpus[cpu as usize].pid.cost(
                        self.iommus[u].agent,
                        &op,
                        &self.costs.pid_line,
                        self.freq,
                    );
                    self.iommus[u].current = Some((
                        msi,
                        IommuStage::PostWrite {
                            cpu,
                            vector,
                            urg,
                            started: now,
                        },
                    ));
                    self.queue.schedule(
                        now + cost,
                        Priority::IOMMU,
                        Event::IommuStageDone { unit },
                    );
                    // The IOMMU owns the line for the length of its atomic update.
                    self.emit(SimEvent::PidLineState {
                        t: now,
                        line: cpu,
                        agent: None,
                        state: pid_model::Mesi::M,
                    });
                    return;
                }
                None => {
                    self.ledger.iommu -= 1;
                    self.drop_msi(now, msi.token, "pda_not_a_cpu_descriptor");
                }
            },
            IommuStage::PostWrite {
                cpu,
                vector,
                urg,
                started,
            } => {
                let agent = self.iommus[u].agent;
                let before = if self.observing() {
                    let mut b = self.line_snapshot(cpu);
                    b.push((agent, pid_model::Mesi::M));
                    b
                } else {
                    Vec::new()
                };
                let result = self.cpus[cpu as usize]
                    .pid
                    .perform(agent, LineOp::IommuPost { vector, urg })
                    .post()
                    .expect("an IOMMU post yields a PostResult");
                self.emit_line_changes(now, cpu, &before);
                self.emit(SimEvent::IommuWork {
                    start: started,
                    dur: now.since(started),
                    msi: msi.token,
                    what: IommuWork::Posted {
                        cpu,
                        vector,
                        merged: result.already_pending,
                        notified: result.notification.is_some(),
                    },
                });
                self.iommus[u].updates += 1;
                self.ledger.iommu -= 1;
                self.ledger
                    .posted(cpu as usize, vector, msi.token, result.already_pending);
                match result.notification {
                    Some(n) => {
                        self.notifications_sent += 1;
                        match self.apic_to_cpu.get(&n.ndst) {
                            Some(&target) => {
                                self.emit(SimEvent::NotificationSent {
                                    t: now,
                                    cpu: target,
                                    vector: n.nv,
                                });
                                self.send_interrupt_message(now, unit, target, n.nv, false, None);
                            }
                            None => self.notifications_undeliverable += 1,
                        }
                    }
                    None => self.notifications_suppressed += 1,
                }
            }
        }
        self.iommu_start_next(now, unit);
    }
}

//! The interrupt-remapping units and posting.
//!
//! Each unit (one per PCIe stack's scope) takes the MSIs that reach the head of its
//! ports' ordered streams through one request pipeline, in arrival order; each request
//! costs the remap outcome's lookup time. Then:
//! - remapped: the message takes the port's delivery path; the MSI retires (its port
//!   goes on) when the path is free again, and reaches the LAPIC after the flight;
//! - posted: the atomic update of the target CPU's descriptor line. Posts to one line
//!   go one at a time, each holding the line for its occupancy (longer when a core
//!   holds the line); posts to different lines overlap. The MSI retires at the update;
//!   a notification, if one is due, leaves after the posting latency and takes the
//!   delivery path without holding the port;
//! - a fault: the MSI is dropped with its reason and retires.

use std::collections::VecDeque;

use iommu_sim::vtd::{InterruptRemapper, RemapAction, RemapPipeline};
use pid_model::{Agent, LineOp};
use sim_core::{SimTime, Vector};

use super::ledger::MsiToken;
use super::{Event, IommuWork, SimEvent, System};
use crate::engine::Priority;

/// What the pipeline decided for a request.
#[derive(Clone, Copy, Debug)]
pub(super) enum UnitOutcome {
    Remap(RemapAction),
    /// Arm: the SMMU and ITS have routed the write (an LPI, or a drop).
    Arm(crate::kernel::smmu::ArmMsiRoute),
}

/// A request in a unit's pipeline.
#[derive(Clone, Copy, Debug)]
pub(super) struct UnitRequest {
    pub port: u16,
    pub msi: MsiToken,
    pub outcome: UnitOutcome,
}

pub(super) struct IommuUnit {
    pub remapper: InterruptRemapper,
    pub pipeline: RemapPipeline,
    /// Requests in the pipeline, oldest first (they finish in this order).
    pub in_pipeline: VecDeque<UnitRequest>,
    pub agent: Agent,
    pub updates: u64,
}

/// A post waiting for, or holding, a CPU's descriptor line.
#[derive(Clone, Copy, Debug)]
pub(super) struct PendingPost {
    pub unit: u16,
    pub port: u16,
    pub msi: MsiToken,
    pub vector: Vector,
    pub urg: bool,
}

/// The posts of one descriptor line.
#[derive(Default)]
pub(super) struct LinePosts {
    pub waiting: VecDeque<PendingPost>,
    /// The post holding the line, and when it started.
    pub current: Option<(PendingPost, SimTime)>,
}

impl System {
    /// The MSI at the head of port `port` enters unit `unit`'s pipeline.
    pub(super) fn iommu_accept(
        &mut self,
        now: SimTime,
        unit: u16,
        port: u16,
        source: u32,
        msi: MsiToken,
    ) {
        let u = unit as usize;
        let src = &self.sources[source as usize];
        let (message, source_id) = (src.message, src.source_id);
        let (outcome, cost) = if let Some(arm) = self.arm.as_mut() {
            // Arm: the SMMU translates the doorbell write and the ITS maps it to an LPI.
            let route = crate::kernel::smmu::route_arm_msi(
                now,
                &mut arm.smmu.translator,
                &mut arm.its,
                source_id as u32,
                message,
            );
            let at = match route {
                crate::kernel::smmu::ArmMsiRoute::Lpi { at, .. }
                | crate::kernel::smmu::ArmMsiRoute::Dropped { at, .. } => at.max(now),
            };
            (UnitOutcome::Arm(route), at.since(now))
        } else {
            let out = self.iommus[u].remapper.remap(now, &message, source_id);
            (UnitOutcome::Remap(out.action), out.cost)
        };
        let done = self.iommus[u].pipeline.submit(now, cost);
        self.iommus[u]
            .in_pipeline
            .push_back(UnitRequest { port, msi, outcome });
        self.queue
            .schedule(done, Priority::IOMMU, Event::RemapDone { unit });
        if self.observing() {
            if let UnitOutcome::Remap(action) = outcome {
                let unknown = u32::MAX;
                let what = match action {
                    RemapAction::Deliver { dest, vector, .. } => IommuWork::Remapped {
                        cpu: self.apic_index.get(u64::from(dest.0)).unwrap_or(unknown),
                        vector,
                    },
                    RemapAction::Post { pda, vector, .. } => IommuWork::PostLookup {
                        cpu: self.pda_index.get(pda).unwrap_or(unknown),
                        vector,
                    },
                    RemapAction::Blocked { reason, .. } => IommuWork::Fault {
                        code: reason.code(),
                    },
                };
                self.emit(|| SimEvent::IommuWork {
                    start: SimTime(done.0 - cost.as_ps()),
                    dur: cost,
                    msi,
                    what,
                });
            }
        }
    }

    /// Drops `msi` for `reason`: counted in the balance and reported to the observer.
    pub(super) fn drop_msi(&mut self, now: SimTime, msi: MsiToken, reason: &'static str) {
        self.ledger.drop_msi(msi, reason);
        self.emit(|| SimEvent::MsiDropped {
            t: now,
            msi,
            reason,
        });
    }

    /// Sends `message` (an [`Event::ApicMessage`]) on port `port`'s delivery path, not
    /// before `earliest`; returns when the path is free again.
    fn send_interrupt_message(
        &mut self,
        now: SimTime,
        earliest: SimTime,
        port: u16,
        message: Event,
    ) -> SimTime {
        debug_assert!(matches!(message, Event::ApicMessage { .. }));
        let d = self.ports[port as usize].delivery as usize;
        let t = self.deliveries[d].path.submit_timed(now, earliest);
        self.queue.schedule(t.arrives, Priority::APIC, message);
        t.occupancy_ends
    }

    /// The oldest request of unit `unit`'s pipeline is done.
    pub(super) fn on_remap_done(&mut self, now: SimTime, unit: u16) {
        let UnitRequest { port, msi, outcome } = self.iommus[unit as usize]
            .in_pipeline
            .pop_front()
            .expect("RemapDone with a request in the pipeline");
        match outcome {
            UnitOutcome::Arm(route) => {
                self.ledger.iommu -= 1;
                match route {
                    crate::kernel::smmu::ArmMsiRoute::Lpi { cpu, intid, .. } => {
                        self.ledger.fabric += 1;
                        let signal = self
                            .arm
                            .as_ref()
                            .expect("an Arm outcome means an Arm system")
                            .cpu_costs
                            .signal();
                        self.queue.schedule(
                            now + signal,
                            Priority::APIC,
                            Event::GicLpi {
                                cpu: cpu.0,
                                intid,
                                msi: self.parked.msis.park(msi),
                            },
                        );
                    }
                    crate::kernel::smmu::ArmMsiRoute::Dropped { reason, .. } => {
                        self.drop_msi(now, msi, super::arm::drop_reason(reason));
                    }
                }
                self.port_msi_retired(now, port);
            }
            UnitOutcome::Remap(RemapAction::Blocked { reason, .. }) => {
                self.ledger.iommu -= 1;
                self.drop_msi(now, msi, reason.name());
                self.port_msi_retired(now, port);
            }
            UnitOutcome::Remap(RemapAction::Deliver {
                dest,
                vector,
                level_triggered,
                ..
            }) => {
                self.ledger.iommu -= 1;
                match self.apic_index.get(u64::from(dest.0)) {
                    Some(cpu) => {
                        self.ledger.fabric += 1;
                        let message = Event::ApicMessage {
                            cpu,
                            vector,
                            level: level_triggered,
                            msi: Some(self.parked.msis.park(msi)),
                        };
                        let free = self.send_interrupt_message(now, now, port, message);
                        // Strong ordering: the port's later writes wait until the
                        // message has been handed over.
                        self.queue
                            .schedule(free, Priority::IOMMU, Event::PortMsiRetired { port });
                    }
                    None => {
                        self.drop_msi(now, msi, "no_cpu_at_destination");
                        self.port_msi_retired(now, port);
                    }
                }
            }
            UnitOutcome::Remap(RemapAction::Post {
                pda, vector, urg, ..
            }) => match self.pda_index.get(pda) {
                Some(cpu) => {
                    self.line_posts[cpu as usize]
                        .waiting
                        .push_back(PendingPost {
                            unit,
                            port,
                            msi,
                            vector,
                            urg,
                        });
                    self.start_line_post(now, cpu);
                }
                None => {
                    self.ledger.iommu -= 1;
                    self.drop_msi(now, msi, "pda_not_a_cpu_descriptor");
                    self.port_msi_retired(now, port);
                }
            },
        }
    }

    /// Starts the next post on CPU `cpu`'s descriptor line if none holds it.
    fn start_line_post(&mut self, now: SimTime, cpu: u32) {
        let lp = &mut self.line_posts[cpu as usize];
        if lp.current.is_some() {
            return;
        }
        let Some(post) = lp.waiting.pop_front() else {
            return;
        };
        lp.current = Some((post, now));
        let op = LineOp::IommuPost {
            vector: post.vector,
            urg: post.urg,
        };
        let agent = self.iommus[post.unit as usize].agent;
        let line = &mut self.cpus[cpu as usize].pid;
        let hold = line.cost_priced(agent, &op, &self.line_prices);
        // The update waits for a transfer of the line to a CPU already in flight.
        let start = line.occupy(now, hold);
        self.queue
            .schedule(start + hold, Priority::IOMMU, Event::LinePostDone { cpu });
        // The IOMMU owns the line for the length of its atomic update.
        self.emit(|| SimEvent::PidLineState {
            t: now,
            line: cpu,
            agent: None,
            state: pid_model::Mesi::M,
        });
    }

    /// The post holding CPU `cpu`'s line is performed.
    pub(super) fn on_line_post_done(&mut self, now: SimTime, cpu: u32) {
        let (post, started) = self.line_posts[cpu as usize]
            .current
            .take()
            .expect("LinePostDone with a post on the line");
        let agent = self.iommus[post.unit as usize].agent;
        let before = if self.observing() {
            let mut b = self.line_snapshot(cpu);
            b.push((agent, pid_model::Mesi::M));
            b
        } else {
            Vec::new()
        };
        let result = self.cpus[cpu as usize]
            .pid
            .perform(
                agent,
                LineOp::IommuPost {
                    vector: post.vector,
                    urg: post.urg,
                },
            )
            .post()
            .expect("an IOMMU post yields a PostResult");
        self.emit_line_changes(now, cpu, &before);
        self.emit(|| SimEvent::IommuWork {
            start: started,
            dur: now.since(started),
            msi: post.msi,
            what: IommuWork::Posted {
                cpu,
                vector: post.vector,
                merged: result.already_pending,
                notified: result.notification.is_some(),
            },
        });
        self.iommus[post.unit as usize].updates += 1;
        self.ledger.iommu -= 1;
        self.ledger
            .posted(cpu as usize, post.vector, post.msi, result.already_pending);
        let mut held_until = None;
        match result.notification {
            Some(n) => {
                self.notifications_sent += 1;
                match self.apic_index.get(u64::from(n.ndst)) {
                    Some(target) => {
                        self.emit(|| SimEvent::NotificationSent {
                            t: now,
                            cpu: target,
                            vector: n.nv,
                        });
                        let ready = now + self.timing.post_latency;
                        let message = Event::ApicMessage {
                            cpu: target,
                            vector: n.nv,
                            level: false,
                            msi: None,
                        };
                        let free = self.send_interrupt_message(now, ready, post.port, message);
                        if self.costs.fabric.notification_holds_port {
                            held_until = Some(free);
                        }
                    }
                    None => self.notifications_undeliverable += 1,
                }
            }
            None => self.notifications_suppressed += 1,
        }
        match held_until {
            // The notification is this MSI's interrupt, as strongly ordered as a
            // remapped one: the port goes on once it has been handed over.
            Some(free) => self.queue.schedule(
                free,
                Priority::IOMMU,
                Event::PortMsiRetired { port: post.port },
            ),
            None => self.port_msi_retired(now, post.port),
        }
        self.start_line_post(now, cpu);
    }
}

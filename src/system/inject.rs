//! Hooks that change a [`System`] at chosen times from outside a scenario's loads:
//! an IOMMU post into a CPU's descriptor, another CPU setting or clearing SN. The
//! timed race explorer (`explore::timed`) and property tests drive the posted-MSI
//! path through them, so their schedules run on the same event loop, cost tables
//! and descriptor line as every experiment.
//!
//! An injected post is an MSI in the ledger (source `injected`): the IOMMU's
//! descriptor update happens at the chosen time (no device, root port or IRTE
//! lookup), a notification it sends reaches the target's local APIC
//! `pid_line.iommu_post_latency_ns` + `fabric.message_latency_ns` later.
//!
//! With an observer attached, the system reports each step of the posted path in
//! the order it applies them ([`AlgorithmStep`]), so a checker can replay the run
//! into a model and compare.

use pid_model::desc::SN_BIT;
use pid_model::{Agent, LineOp};
use serde::Serialize;
use sim_core::{Duration, MsiMessage, SimTime, Vector};

use super::scenario::{DeliveryMode, Scenario, ScenarioError};
use super::sources::MsiSource;
use super::{Event, SimEvent, System};
use crate::engine::Priority;
use crate::kernel::{CpuOp, PirHandler};

/// One step of the posted path on a CPU, reported in the order the system applies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AlgorithmStep {
    /// The IOMMU posted `vector` (URG `urg`); `notified`: it sent a notification.
    Posted {
        /// The vector posted.
        vector: Vector,
        /// The IRTE's URG.
        urg: bool,
        /// Whether the post sent a notification.
        notified: bool,
    },
    /// Another CPU set (`set`) or cleared SN.
    SnChanged {
        /// Set or clear.
        set: bool,
    },
    /// The SN owner's recheck after a clear; `notified`: it set ON and notified.
    Recheck {
        /// Whether it sent a notification.
        notified: bool,
    },
    /// A notification reached the local APIC.
    NotificationArrived,
    /// The CPU took the notification vector: its handler starts.
    Delivered,
    /// The handler asks for `op` (issued now, applied at `Completed`).
    Requested {
        /// The operation.
        op: CpuOp,
    },
    /// `op` took effect and yielded `value`.
    Completed {
        /// The operation.
        op: CpuOp,
        /// Its result.
        value: u64,
    },
    /// The handler returned.
    Returned,
}

impl System {
    /// A system driven by the injection hooks: like [`System::with_handler`], but
    /// the scenario may have no load of its own. Posted mode only.
    pub fn for_injection(
        scenario: &Scenario,
        handler: Box<dyn PirHandler>,
    ) -> Result<System, ScenarioError> {
        if scenario.mode != DeliveryMode::Posted {
            return Err(ScenarioError::invalid(
                "mode",
                scenario.mode.as_str(),
                "\"posted\": injected posts go into posted-interrupt descriptors",
            ));
        }
        scenario.validate_parts(false)?;
        System::build(scenario, handler)
    }

    fn check_injection(&self, cpu: u32) -> Result<(), ScenarioError> {
        if self.mode != DeliveryMode::Posted || self.arm.is_some() {
            return Err(ScenarioError::invalid(
                "inject",
                format!("a {} system", self.mode.as_str()),
                "an x86 system in posted mode",
            ));
        }
        if cpu >= self.cpu_count() {
            return Err(ScenarioError::invalid(
                "inject cpu",
                cpu,
                format!("a CPU 0..{}", self.cpu_count()),
            ));
        }
        Ok(())
    }

    /// At `at` (not before now), the IOMMU posts `vector` into CPU `cpu`'s descriptor
    /// as it would for a device MSI whose IRTE is posted with URG `urg`.
    pub fn inject_post(
        &mut self,
        at: SimTime,
        cpu: u32,
        vector: Vector,
        urg: bool,
    ) -> Result<(), ScenarioError> {
        self.check_injection(cpu)?;
        if vector.0 < 0x10 {
            return Err(ScenarioError::invalid(
                "inject_post vector",
                vector.0,
                "0x10..=0xff (vectors below 16 are reserved)",
            ));
        }
        let at = at.max(self.now());
        self.queue.schedule(
            at,
            Priority::IOMMU,
            Event::InjectedPost { cpu, vector, urg },
        );
        Ok(())
    }

    /// At `at`, CPU `by` sets (`set`) or clears SN in CPU `cpu`'s descriptor with a
    /// locked bit operation. After a clear, `recheck` later, `by` looks at PIR and,
    /// if anything is pending and ON is clear, sets ON and sends the notification
    /// (a self-IPI of the notification vector, as KVM does after clearing SN).
    pub fn inject_sn(
        &mut self,
        at: SimTime,
        cpu: u32,
        by: u32,
        set: bool,
        recheck: Duration,
    ) -> Result<(), ScenarioError> {
        self.check_injection(cpu)?;
        self.check_injection(by)?;
        let at = at.max(self.now());
        self.queue.schedule(
            at,
            Priority::CPU,
            Event::InjectedSn {
                cpu,
                change: self.parked.sn_changes.park(super::SnChange {
                    by,
                    set,
                    recheck_ps: recheck.as_ps(),
                }),
            },
        );
        Ok(())
    }

    fn injected_source(&mut self) -> u32 {
        if let Some(i) = self.sources.iter().position(|s| s.name == "injected") {
            return i as u32;
        }
        self.sources.push(MsiSource::new(
            "injected".into(),
            MsiMessage {
                address: 0xfee0_0000,
                data: 0,
            },
            0,
            u16::MAX,
        ));
        self.sources.len() as u32 - 1
    }

    pub(super) fn emit_step(&mut self, t: SimTime, cpu: u32, step: AlgorithmStep) {
        self.emit(|| SimEvent::AlgorithmStep { t, cpu, step });
    }

    /// Sends the notification of CPU `cpu`'s descriptor from the IOMMU side.
    fn send_injected_notification(&mut self, now: SimTime, cpu: u32, nv: Vector) {
        self.notifications_sent += 1;
        self.emit(|| SimEvent::NotificationSent {
            t: now,
            cpu,
            vector: nv,
        });
        let flight =
            self.timing.post_latency + Duration::from_ns_f64(self.costs.fabric.message_latency_ns);
        self.queue.schedule(
            now + flight,
            Priority::APIC,
            Event::ApicMessage {
                cpu,
                vector: nv,
                level: false,
                msi: None,
            },
        );
    }

    /// The injected post lands.
    pub(super) fn on_injected_post(&mut self, now: SimTime, cpu: u32, vector: Vector, urg: bool) {
        let source = self.injected_source();
        let token = self.new_msi(now, source);
        let agent = self.iommus.first().map_or(Agent::iommu(0), |u| u.agent);
        let before = if self.observing() {
            self.line_snapshot(cpu)
        } else {
            Vec::new()
        };
        let result = self.cpus[cpu as usize]
            .pid
            .perform(agent, LineOp::IommuPost { vector, urg })
            .post()
            .expect("an IOMMU post yields a PostResult");
        self.emit_line_changes(now, cpu, &before);
        self.ledger
            .posted(cpu as usize, vector, token, result.already_pending);
        self.emit_step(
            now,
            cpu,
            AlgorithmStep::Posted {
                vector,
                urg,
                notified: result.notification.is_some(),
            },
        );
        match result.notification {
            Some(n) => {
                let target = self.apic_index.get(u64::from(n.ndst));
                match target {
                    Some(t) => self.send_injected_notification(now, t, n.nv),
                    None => self.notifications_undeliverable += 1,
                }
            }
            None => self.notifications_suppressed += 1,
        }
    }

    /// Another CPU changes SN.
    pub(super) fn on_injected_sn(&mut self, now: SimTime, cpu: u32, change: super::SnChange) {
        let super::SnChange {
            by,
            set,
            recheck_ps,
        } = change;
        let agent = self.cpus[by as usize].agent;
        let op = if set {
            LineOp::LockedBitSet { bit: SN_BIT }
        } else {
            LineOp::LockedBitClear { bit: SN_BIT }
        };
        let _ = self.cpus[cpu as usize].pid.perform(agent, op);
        self.emit_step(now, cpu, AlgorithmStep::SnChanged { set });
        if !set {
            self.queue.schedule(
                now + Duration(recheck_ps),
                Priority::CPU,
                Event::InjectedRecheck { cpu, by },
            );
        }
    }

    /// The SN owner's recheck after clearing SN.
    pub(super) fn on_injected_recheck(&mut self, now: SimTime, cpu: u32, by: u32) {
        let c = &mut self.cpus[cpu as usize];
        let pending = !c.pid.desc().pir().is_empty();
        let notify = pending && !c.pid.desc().on();
        if notify {
            let agent = self.cpus[by as usize].agent;
            let _ = self.cpus[cpu as usize].pid.perform(
                agent,
                LineOp::LockedTestAndSet {
                    bit: pid_model::desc::ON_BIT,
                },
            );
        }
        self.emit_step(now, cpu, AlgorithmStep::Recheck { notified: notify });
        if notify {
            let nv = self.cpus[cpu as usize].pid.desc().nv();
            self.send_injected_notification(now, cpu, nv);
        }
    }

    /// The descriptor of CPU `cpu` (its PIR, ON, SN, NV and NDST).
    pub fn pid(&self, cpu: u32) -> &pid_model::PiDesc {
        self.cpus[cpu as usize].pid.desc()
    }
}

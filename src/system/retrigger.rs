//! The IRQ core retriggering device vectors (`irq_retrigger()` ->
//! `apic_retrigger_irq()`): a fixed IPI of a device's vector to its target CPU, at
//! times the scenario gives (`[[retriggers]]`). In posted mode the vector is taken
//! through the IDT and handled by the posted chip's flow
//! ([`crate::kernel::retrigger`]), whose ack decides whether the vector is ever
//! EOI'd; the scenario's `posted_msi_ack` picks the kernel before or after the fix.
//!
//! What is modelled: the IPI's flight (`costs.apic.ipi_latency_ns`), its acceptance
//! into IRR (a retrigger while the vector is already requested merges with it), the
//! ack and the device handler. What is not: the retriggering CPU's own cost (the ICR
//! write inside `enable_irq()`), which is paid once per retrigger, and the reason the
//! core retriggered (a scenario gives the times; the MSIs behind them are whatever
//! the device's handler finds).

use serde::{Deserialize, Serialize};
use sim_core::{Duration, SimTime, Vector};

use super::cpu::{CpuState, HandlerRef};
use super::scenario::{check_list_len, check_time_in_run, Arch, Scenario, ScenarioError};
use super::{Algorithm, DeliveryMode, Event, System};
use crate::engine::{Coroutine, Priority};
use crate::kernel::retrigger::{handle_edge_posted, PostedMsiAck};
use crate::kernel::CpuPort;

/// Most retriggers a scenario may list.
pub const MAX_RETRIGGERS: usize = 65_536;

/// Scenario `[[retriggers]]`: one `irq_retrigger()` of a device's vector.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetriggerConfig {
    /// The interrupt's target CPU (its effective affinity), by index.
    pub cpu: u32,
    /// The device vector the IRQ core raises on it.
    pub vector: u32,
    /// When the IRQ core sends the IPI, in us from the start; it reaches the APIC
    /// `costs.apic.ipi_latency_ns` later.
    pub at_us: f64,
}

/// Checks the list against the rest of the scenario (the vectors against the
/// handlers registered, in [`System::new`]).
pub(super) fn validate(sc: &Scenario) -> Result<(), ScenarioError> {
    if sc.retriggers.is_empty() {
        return Ok(());
    }
    check_list_len("retriggers", sc.retriggers.len(), MAX_RETRIGGERS)?;
    if sc.arch == Arch::Arm {
        return Err(ScenarioError::invalid(
            "retriggers",
            "a retrigger with arch = \"arm\"",
            "x86 only: the model retriggers through a local-APIC IPI (apic_retrigger_irq); a GICv3 LPI retrigger is not modelled",
        ));
    }
    for (i, r) in sc.retriggers.iter().enumerate() {
        if r.cpu >= sc.cpus.count {
            return Err(ScenarioError::invalid(
                format!("retriggers[{i}].cpu"),
                r.cpu,
                format!("a CPU index below cpus.count = {}", sc.cpus.count),
            ));
        }
        if !(0x20..=0xff).contains(&r.vector) {
            return Err(ScenarioError::invalid(
                format!("retriggers[{i}].vector"),
                format!("{:#x}", r.vector),
                "a device vector, 0x20..=0xff",
            ));
        }
        check_time_in_run(format!("retriggers[{i}].at_us"), r.at_us, sc.duration_us)?;
    }
    Ok(())
}

/// Vectors in a CPU's ISR with no interrupt of theirs running: nothing will EOI them.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct StaleIsr {
    /// The CPU.
    pub cpu: u32,
    /// The stale vectors, highest first (`"0x21"`).
    pub vectors: Vec<String>,
    /// The processor-priority class they hold: no vector at or below
    /// `class * 16 + 15` is delivered to this CPU any more.
    pub blocked_class: u8,
}

/// The `retriggers` part of the report.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RetriggerReport {
    /// The posted chip's ack (`"move-irq-only"` or `"eoi-if-inactive"`).
    pub posted_msi_ack: &'static str,
    /// IPIs the IRQ core sent.
    pub sent: u64,
    /// Of those, IPIs that reached their APIC so far.
    pub arrived: u64,
    /// Arrivals that found the vector already requested in IRR (merged with it).
    pub merged: u64,
    /// Posted device vectors taken through the IDT (and handled by the posted chip's
    /// flow).
    pub taken_posted: u64,
    /// Of those, acks that wrote the EOI.
    pub acked_with_eoi: u64,
    /// Of those, acks that did not (the vector stays in service).
    pub acked_without_eoi: u64,
    /// CPUs with vectors in service that no running interrupt will EOI.
    pub stale_isr: Vec<StaleIsr>,
}

/// The retriggers of a run and their counters.
#[derive(Debug, Default)]
pub(super) struct Retriggers {
    ack: PostedMsiAck,
    list: Vec<(u32, Vector, SimTime)>,
    arrived: u64,
    merged: u64,
    acked_with_eoi: u64,
    acked_without_eoi: u64,
}

impl Retriggers {
    pub(super) fn new(sc: &Scenario) -> Retriggers {
        Retriggers {
            ack: sc.posted_msi_ack,
            list: sc
                .retriggers
                .iter()
                .map(|r| {
                    (
                        r.cpu,
                        Vector(r.vector as u8),
                        SimTime::ZERO + Duration::from_secs_f64(r.at_us * 1e-6),
                    )
                })
                .collect(),
            ..Retriggers::default()
        }
    }
}

impl System {
    /// Refuses a retrigger of a vector with no device handler on its CPU.
    pub(super) fn check_retrigger_vectors(&self) -> Result<(), ScenarioError> {
        for (i, &(cpu, vector, _)) in self.retriggers.list.iter().enumerate() {
            let handler = self.cpus[cpu as usize].handler_of(vector);
            if handler == HandlerRef::None {
                let registered: Vec<String> = (0x20..=0xffu8)
                    .map(Vector)
                    .filter(|v| self.cpus[cpu as usize].handler_of(*v) != HandlerRef::None)
                    .map(|v| format!("{:#04x}", v.0))
                    .collect();
                return Err(ScenarioError::invalid(
                    format!("retriggers[{i}].vector"),
                    format!("{:#04x}", vector.0),
                    format!(
                        "a vector with a device handler on cpu {cpu}: {}",
                        if registered.is_empty() {
                            "it has none".to_string()
                        } else {
                            registered.join(", ")
                        }
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Schedules every retrigger's IPI arrival.
    pub(super) fn start_retriggers(&mut self) {
        let flight = self.costs.apic.ipi_latency();
        for index in 0..self.retriggers.list.len() {
            let (_, _, at) = self.retriggers.list[index];
            self.queue.schedule(
                at + flight,
                Priority::APIC,
                Event::Retrigger {
                    index: index as u32,
                },
            );
        }
    }

    /// A retrigger IPI reaches its CPU's APIC.
    pub(super) fn on_retrigger(&mut self, now: SimTime, index: u32) {
        let (cpu, vector, _) = self.retriggers.list[index as usize];
        self.retriggers.arrived += 1;
        if self.cpus[cpu as usize].apic.irr().contains(vector) {
            self.retriggers.merged += 1;
        }
        let _ = self.cpus[cpu as usize].apic.accept(vector, false);
        self.try_take_interrupt(now, cpu);
    }

    /// The algorithm for a posted device's vector taken through the IDT (only a
    /// retrigger raises one in posted mode), or `None` for any other vector.
    pub(super) fn posted_vector_through_idt(
        &mut self,
        cpu: u32,
        vector: Vector,
    ) -> Option<Algorithm> {
        let c = cpu as usize;
        if self.mode != DeliveryMode::Posted || self.arm.is_some() {
            return None;
        }
        match self.cpus[c].handler_of(vector) {
            HandlerRef::None | HandlerRef::IoapicPin(_) => return None,
            _ => {}
        }
        let ack = self.retriggers.ack;
        let active = self.cpus[c].posted_handler_active;
        if ack.eois(active) {
            self.retriggers.acked_with_eoi += 1;
        } else {
            self.retriggers.acked_without_eoi += 1;
        }
        Some(Algorithm::Irq(Coroutine::new(move |port| async move {
            handle_edge_posted(&CpuPort::new(port), vector, ack, active).await
        })))
    }

    /// Vectors in service on `cpu` that no running interrupt of theirs will EOI.
    fn stale_isr_of(&self, cpu: usize) -> Option<StaleIsr> {
        let c = &self.cpus[cpu];
        if c.gic.is_some() {
            return None;
        }
        let running = match c.state {
            CpuState::Entering(v) | CpuState::Running(v) => Some(v),
            _ => None,
        };
        let mut stale: Vec<Vector> = (0x10..=0xffu8)
            .rev()
            .map(Vector)
            .filter(|v| c.apic.isr().contains(*v) && Some(*v) != running)
            .collect();
        if running.is_some() {
            // The running interrupt's own bit is the highest legitimately in service;
            // any lower bit belongs to an interrupt that returned without its EOI.
            stale.retain(|v| Some(*v) < running);
        }
        let highest = *stale.first()?;
        Some(StaleIsr {
            cpu: cpu as u32,
            vectors: stale.iter().map(|v| format!("{:#04x}", v.0)).collect(),
            blocked_class: highest.0 >> 4,
        })
    }

    /// The `retriggers` part of the report; absent when the scenario has none and no
    /// CPU has a stale ISR bit.
    pub(super) fn retrigger_report(&self) -> Option<RetriggerReport> {
        let stale_isr: Vec<StaleIsr> = (0..self.cpus.len())
            .filter_map(|c| self.stale_isr_of(c))
            .collect();
        if self.retriggers.list.is_empty() && stale_isr.is_empty() {
            return None;
        }
        let r = &self.retriggers;
        Some(RetriggerReport {
            posted_msi_ack: r.ack.label(),
            sent: r.list.iter().filter(|(_, _, at)| *at <= self.now()).count() as u64,
            arrived: r.arrived,
            merged: r.merged,
            taken_posted: r.acked_with_eoi + r.acked_without_eoi,
            acked_with_eoi: r.acked_with_eoi,
            acked_without_eoi: r.acked_without_eoi,
            stale_isr,
        })
    }
}

//! Which kinds of events a run is made of: a diagnostic of where a scenario's
//! simulation time goes, not a figure of the simulated hardware.
//!
//! Two scenarios with the same events per second can spend them very differently. In
//! `large` most events are one CPU's next kernel operation (a CPU step), and most of
//! those are the posted-MSI handler's loads of PIR words; in `default` they are the
//! remapping pipeline's. A CPU step is named by what the CPU was doing when it ended
//! (entry, the operation in flight, exit, deferred work, task), read before the event
//! is handled.
//!
//! The names are the engine's own event and operation names. They describe this
//! version's event loop and may change with it.

use std::collections::BTreeMap;

use serde::Serialize;
use sim_core::SimTime;

use super::{CpuState, Deferred, Event, OpInFlight, System};

/// What one event was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct EventKind {
    /// The event's name in the engine (`CpuStep`, `RemapDone`, `LinePostDone`, ...).
    pub event: &'static str,
    /// For a `CpuStep`, what the CPU was doing: `entry`, `exit`, the kernel operation
    /// that completes (`LoadPir`, `XchgPir`, `HandleVector`, ...), the deferred work
    /// (`deferred NvmeSubmit`, ...) or `task`. `None` for every other event.
    pub activity: Option<&'static str>,
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.activity {
            Some(a) => write!(f, "{} ({a})", self.event),
            None => f.write_str(self.event),
        }
    }
}

/// Counts of the events a run handled, by kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventMix {
    counts: BTreeMap<EventKind, u64>,
}

impl EventMix {
    /// Counts one more event of `kind`.
    pub fn add(&mut self, kind: EventKind) {
        *self.counts.entry(kind).or_default() += 1;
    }

    /// Events counted, of every kind.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// How many `CpuStep`s ended `activity`.
    pub fn of_cpu_step(&self, activity: &str) -> u64 {
        self.counts
            .iter()
            .filter(|(k, _)| k.event == "CpuStep" && k.activity == Some(activity))
            .map(|(_, n)| n)
            .sum()
    }

    /// Every kind seen with its count, the most frequent first (ties in name order).
    pub fn entries(&self) -> Vec<(EventKind, u64)> {
        let mut v: Vec<(EventKind, u64)> = self.counts.iter().map(|(&k, &n)| (k, n)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}

impl Event {
    fn name(&self) -> &'static str {
        match self {
            Event::DeviceCompletion { .. } => "DeviceCompletion",
            Event::DsaSubmit { .. } => "DsaSubmit",
            Event::DsaEngineDone { .. } => "DsaEngineDone",
            Event::IoWake { .. } => "IoWake",
            Event::PortReady { .. } => "PortReady",
            Event::PortWriteDone { .. } => "PortWriteDone",
            Event::PortMsiRetired { .. } => "PortMsiRetired",
            Event::RemapDone { .. } => "RemapDone",
            Event::LinePostDone { .. } => "LinePostDone",
            Event::ApicMessage { .. } => "ApicMessage",
            Event::CpuStep { .. } => "CpuStep",
            Event::GicLpi { .. } => "GicLpi",
            Event::ShootdownRequest { .. } => "ShootdownRequest",
            Event::IpiArrive { .. } => "IpiArrive",
            Event::MigrationIrteWrite { .. } => "MigrationIrteWrite",
            Event::MigrationCleanup { .. } => "MigrationCleanup",
            Event::Retrigger { .. } => "Retrigger",
            Event::SmmuCallRequest { .. } => "SmmuCallRequest",
            Event::SmmuProdArrive { .. } => "SmmuProdArrive",
            Event::SmmuConsumeDone => "SmmuConsumeDone",
            Event::SmmuSev => "SmmuSev",
            Event::SmmuResume => "SmmuResume",
            Event::SmmuMsiVisible { .. } => "SmmuMsiVisible",
            Event::SmmuConsSample { .. } => "SmmuConsSample",
            Event::SmmuTick { .. } => "SmmuTick",
            Event::SmmuWake { .. } => "SmmuWake",
            Event::IoapicAssert { .. } => "IoapicAssert",
            Event::IoapicDeassert { .. } => "IoapicDeassert",
            Event::TaskHoldDone { .. } => "TaskHoldDone",
            Event::InjectedPost { .. } => "InjectedPost",
            Event::InjectedSn { .. } => "InjectedSn",
            Event::InjectedRecheck { .. } => "InjectedRecheck",
        }
    }
}

fn deferred_name(d: &Deferred) -> &'static str {
    match d {
        Deferred::NvmeSubmit { .. } => "deferred NvmeSubmit",
        Deferred::DsaSubmit { .. } => "deferred DsaSubmit",
        Deferred::VectorCleanup { .. } => "deferred VectorCleanup",
        Deferred::NapiPoll { .. } => "deferred NapiPoll",
    }
}

impl System {
    fn kind_of(&self, event: &Event) -> EventKind {
        let activity = match *event {
            Event::CpuStep { cpu } => {
                let c = &self.cpus[cpu as usize];
                Some(match &c.state {
                    CpuState::Entering(_) => "entry",
                    CpuState::Running(_) => match &c.op_in_flight {
                        Some(OpInFlight::Cpu(op)) => op.name(),
                        Some(OpInFlight::Ipi(..)) => "cross-call operation",
                        Some(OpInFlight::Ioapic(..)) => "IOAPIC operation",
                        None => "no operation",
                    },
                    CpuState::Exiting => "exit",
                    CpuState::Deferred(d) => deferred_name(d),
                    CpuState::Task => "task",
                    CpuState::Idle => "idle",
                    CpuState::Spinning => "spinning",
                    CpuState::Waiting => "waiting",
                })
            }
            _ => None,
        };
        EventKind {
            event: event.name(),
            activity,
        }
    }

    /// Handles the next event if it is due at or before `limit`, and says what kind it
    /// was; `None` (and nothing handled) if no event is due by then. Like
    /// [`System::step`], for diagnostics such as `irqsim bench scenario`'s event mix: it
    /// does not advance the clock to `limit` when the events run out, and its time is
    /// not counted in the run's wall-clock figures.
    pub fn step_until(&mut self, limit: SimTime) -> Option<EventKind> {
        let (t, event) = self.queue.pop_until(limit)?;
        let kind = self.kind_of(&event);
        self.handle(t, event);
        Some(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::Scenario;

    fn scenario(name: &str, duration_us: f64) -> Scenario {
        let text = crate::scenarios::embedded(name).expect("embedded scenario");
        let mut sc = Scenario::from_toml_str(text, name).expect("embedded scenario parses");
        sc.duration_us = duration_us;
        sc
    }

    fn mix_of(scenario: &Scenario) -> (System, EventMix) {
        let mut sys = System::new(scenario).expect("embedded scenario builds");
        let end = sys.end_of_scenario();
        let mut mix = EventMix::default();
        while let Some(kind) = sys.step_until(end) {
            mix.add(kind);
        }
        (sys, mix)
    }

    #[test]
    fn every_event_is_counted_once_and_the_run_matches_an_unobserved_one() {
        let sc = scenario("nvme-posted", 2_000.0);
        let (stepped, mix) = mix_of(&sc);
        let mut plain = System::new(&sc).unwrap();
        plain.run_to_end();
        assert_eq!(mix.total(), stepped.events());
        assert_eq!(
            stepped.events(),
            plain.events(),
            "naming events changed the run"
        );
        assert_eq!(stepped.msis_generated(), plain.msis_generated());
    }

    #[test]
    fn cpu_steps_are_named_by_the_operation_that_completes() {
        let sc = scenario("nvme-posted", 2_000.0);
        let (sys, mix) = mix_of(&sc);
        let cpus = sys.cpu_count() as u64;
        let (mut loads, mut xchgs, mut eois, mut taken) = (0, 0, 0, 0);
        for c in &sys.cpus {
            loads += c.ops.pir_loads;
            xchgs += c.ops.pir_xchgs;
            eois += c.ops.eois;
            taken += c.interrupts_taken;
        }
        // Operations are counted when requested and named here when they complete: a
        // CPU has at most one in flight when the run ends.
        let close = |steps: u64, requested: u64, what: &str| {
            assert!(
                steps <= requested && requested - steps <= cpus,
                "{what}: {steps} steps for {requested} requested"
            );
        };
        assert!(loads > 0, "the posted scenario loads PIR words");
        close(mix.of_cpu_step("LoadPir"), loads, "LoadPir");
        close(mix.of_cpu_step("XchgPir"), xchgs, "XchgPir");
        close(mix.of_cpu_step("Eoi"), eois, "Eoi");
        close(mix.of_cpu_step("entry"), taken, "entry");
        // A running CPU always waits on an operation when its step ends.
        assert_eq!(mix.of_cpu_step("no operation"), 0);
    }

    #[test]
    fn entries_come_most_frequent_first() {
        let mut mix = EventMix::default();
        let a = EventKind {
            event: "RemapDone",
            activity: None,
        };
        let b = EventKind {
            event: "CpuStep",
            activity: Some("LoadPir"),
        };
        mix.add(a);
        mix.add(b);
        mix.add(b);
        assert_eq!(mix.entries(), vec![(b, 2), (a, 1)]);
        assert_eq!(b.to_string(), "CpuStep (LoadPir)");
    }
}

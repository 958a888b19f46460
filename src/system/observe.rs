//! What a running [`super::System`] tells an attached observer.
//!
//! Attach one with [`super::System::set_observer`] to trace, count or assert on
//! anything that happens. Events carry simulated times; spans (`CpuSpan`, IOMMU
//! stages) are reported once, when they start, with their duration, because the
//! engine knows an operation's cost when it issues it.

use pid_model::Mesi;
use sim_core::{Duration, SimTime, Vector};

use super::ledger::MsiToken;
use crate::kernel::CpuOp;

/// What a CPU spends a span of time on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuActivity {
    /// IDT vectoring and `irq_enter` for `vector`.
    IrqEntry { vector: Vector },
    /// `irq_exit` and IRET.
    IrqExit,
    /// The device handler of `vector` (with the generic IRQ flow around it).
    Handler { vector: Vector },
    /// One access to the CPU's posted-interrupt descriptor.
    PidAccess { op: CpuOp },
    /// The EOI write.
    Eoi,
    /// Deferred work with interrupts enabled: a NAPI poll or a job's submission.
    Deferred { work: super::cpu::Deferred },
}

impl CpuActivity {
    /// A short name for traces.
    pub fn name(&self) -> String {
        match self {
            CpuActivity::IrqEntry { vector } => format!("irq entry {vector}"),
            CpuActivity::IrqExit => "irq exit".into(),
            CpuActivity::Handler { vector } => format!("handler {vector}"),
            CpuActivity::PidAccess { op } => match op {
                CpuOp::LoadPir { word } => format!("load PIR[{word}]"),
                CpuOp::XchgPir { word, .. } => format!("xchg PIR[{word}]"),
                CpuOp::ClearOn => "clear ON".into(),
                CpuOp::TestAndClearOn => "test-and-clear ON".into(),
                CpuOp::HandleVector(v) => format!("handler {v}"),
                CpuOp::Eoi => "EOI".into(),
            },
            CpuActivity::Eoi => "EOI".into(),
            CpuActivity::Deferred { work } => match work {
                super::cpu::Deferred::NvmeSubmit { job } => format!("job{job} submit"),
                super::cpu::Deferred::NapiPoll { nic, queue } => {
                    format!("napi poll nic{nic} q{queue}")
                }
            },
        }
    }
}

/// Something that happened in a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SimEvent<'a> {
    /// A device raised an MSI.
    MsiRaised {
        t: SimTime,
        device: u32,
        msi: MsiToken,
    },
    /// The IOMMU finished remapping or posting one request; `dur` is how long it took.
    IommuWork {
        start: SimTime,
        dur: Duration,
        msi: MsiToken,
        what: IommuWork,
    },
    /// An MSI was dropped, with its reason.
    MsiDropped {
        t: SimTime,
        msi: MsiToken,
        reason: &'a str,
    },
    /// A posted-interrupt notification left the IOMMU for `cpu`.
    NotificationSent {
        t: SimTime,
        cpu: u32,
        vector: Vector,
    },
    /// A CPU started a span of work.
    CpuSpan {
        cpu: u32,
        start: SimTime,
        dur: Duration,
        activity: CpuActivity,
    },
    /// A device handler started and serves these MSIs (empty: a spurious call).
    HandlerServes {
        t: SimTime,
        cpu: u32,
        vector: Vector,
        msis: &'a [MsiToken],
    },
    /// The MESI state of `agent` (`None` = the IOMMU, else a CPU index) for the
    /// descriptor line of CPU `line` is now `state`.
    PidLineState {
        t: SimTime,
        line: u32,
        agent: Option<u32>,
        state: Mesi,
    },
    /// Number of vectors pending in CPU `cpu`'s PIR after a change.
    PirPopulation { t: SimTime, cpu: u32, pending: u32 },
}

/// What the IOMMU did with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IommuWork {
    /// Remapped to an interrupt for `cpu`.
    Remapped { cpu: u32, vector: Vector },
    /// Looked up a posted IRTE (the descriptor update follows).
    PostLookup { cpu: u32, vector: Vector },
    /// Updated CPU `cpu`'s descriptor; `notified` if a notification follows.
    Posted {
        cpu: u32,
        vector: Vector,
        merged: bool,
        notified: bool,
    },
    /// Blocked with a fault.
    Fault { code: u8 },
}

/// Receives every [`SimEvent`] of a run, in simulated-time order of their start.
pub trait Observer {
    fn event(&mut self, event: &SimEvent<'_>);
}

impl<F: FnMut(&SimEvent<'_>)> Observer for F {
    fn event(&mut self, event: &SimEvent<'_>) {
        self(event)
    }
}

use pid_model::Agent;

impl super::System {
    /// Attaches `observer`; it sees every event from now on. Replaces any previous one.
    pub fn set_observer(&mut self, observer: Box<dyn Observer>) {
        self.observer = Some(observer);
    }

    /// Detaches and returns the observer (for example to flush a trace file).
    pub fn take_observer(&mut self) -> Option<Box<dyn Observer>> {
        self.observer.take()
    }

    pub(super) fn observing(&self) -> bool {
        self.observer.is_some()
    }

    pub(super) fn emit(&mut self, event: SimEvent<'_>) {
        if let Some(o) = self.observer.as_deref_mut() {
            o.event(&event);
        }
    }

    pub(super) fn emit_cpu_span(
        &mut self,
        cpu: u32,
        start: SimTime,
        dur: Duration,
        activity: CpuActivity,
    ) {
        self.emit(SimEvent::CpuSpan {
            cpu,
            start,
            dur,
            activity,
        });
    }

    /// Holders of CPU `line`'s descriptor line, to compare after an operation.
    pub(super) fn line_snapshot(&self, line: u32) -> Vec<(Agent, Mesi)> {
        self.cpus[line as usize].pid.holders().to_vec()
    }

    /// Reports every agent whose state of CPU `line`'s descriptor line differs from
    /// `before`, and the PIR population.
    pub(super) fn emit_line_changes(&mut self, t: SimTime, line: u32, before: &[(Agent, Mesi)]) {
        let Some(o) = self.observer.as_deref_mut() else {
            return;
        };
        let pid = &self.cpus[line as usize].pid;
        let agent_id = |a: Agent| match a {
            Agent::Core { cpu, .. } => Some(cpu.0),
            Agent::Iommu { .. } => None,
        };
        for (agent, state) in pid.holders() {
            let old = before.iter().find(|(a, _)| a == agent).map(|(_, s)| *s);
            if old != Some(*state) {
                o.event(&SimEvent::PidLineState {
                    t,
                    line,
                    agent: agent_id(*agent),
                    state: *state,
                });
            }
        }
        for (agent, old) in before {
            if *old != Mesi::I && pid.state(*agent) == Mesi::I {
                o.event(&SimEvent::PidLineState {
                    t,
                    line,
                    agent: agent_id(*agent),
                    state: Mesi::I,
                });
            }
        }
        o.event(&SimEvent::PirPopulation {
            t,
            cpu: line,
            pending: pid.desc().pir().count(),
        });
    }
}

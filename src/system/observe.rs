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
    IrqEntry {
        /// The vector acknowledged.
        vector: Vector,
    },
    /// `irq_exit` and IRET.
    IrqExit,
    /// The device handler of `vector` (with the generic IRQ flow around it).
    Handler {
        /// The vector whose handler runs.
        vector: Vector,
    },
    /// One access to the CPU's posted-interrupt descriptor.
    PidAccess {
        /// The load or locked operation.
        op: CpuOp,
    },
    /// The EOI write.
    Eoi,
    /// Deferred work with interrupts enabled: a NAPI poll or a job's submission.
    Deferred {
        /// Which piece of work.
        work: super::cpu::Deferred,
    },
    /// One operation of a cross call (a shootdown's sender, or the call-function
    /// handler on a target); a spin in `csd_lock_wait` is one span.
    CrossCall {
        /// The operation.
        op: crate::kernel::ipi::IpiOp,
    },
    /// One operation of an SMMU command-queue call or of a NIC's transmit path (a WFE
    /// sleep is not a span: the CPU is not busy).
    Smmu {
        /// The operation.
        op: crate::kernel::smmu::SmmuCpuOp,
    },
    /// One IOAPIC access or step of a pin's driver flow.
    Ioapic {
        /// The operation.
        op: crate::kernel::ioapic_driver::IoapicOp,
    },
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
                CpuOp::StorePir { word, .. } => format!("store PIR[{word}]"),
                CpuOp::StoreClearOn => "store ON=0".into(),
                CpuOp::Mfence => "mfence".into(),
            },
            CpuActivity::Eoi => "EOI".into(),
            CpuActivity::Deferred { work } => match work {
                super::cpu::Deferred::NvmeSubmit { job } => format!("job{job} submit"),
                super::cpu::Deferred::DsaSubmit { device } => format!("dsa{device} submit"),
                super::cpu::Deferred::VectorCleanup { index } => {
                    format!("vector cleanup of migration {index}")
                }
                super::cpu::Deferred::NapiPoll { nic, queue } => {
                    format!("napi poll nic{nic} q{queue}")
                }
            },
            CpuActivity::CrossCall { op } => {
                use crate::kernel::ipi::IpiOp;
                match op {
                    IpiOp::WrmsrFence => "wrmsr fence".into(),
                    IpiOp::WriteIcr(icr) => format!("ICR write {:#x}", icr.destination()),
                    IpiOp::QueueCsd(t) => format!("queue CSD cpu{}", t.0),
                    IpiOp::WaitCsd(t) => format!("csd_lock_wait cpu{}", t.0),
                    IpiOp::Eoi => "EOI".into(),
                    IpiOp::TakeQueue => "take call_single_queue".into(),
                    IpiOp::RunCsdFunc(i) => format!("flush func #{i}"),
                    IpiOp::UnlockCsd(i) => format!("csd_unlock #{i}"),
                    IpiOp::LoadsRetired => "loads retire".into(),
                    IpiOp::LocalIrqSave => "local_irq_save".into(),
                    IpiOp::LocalIrqRestore => "local_irq_restore".into(),
                    IpiOp::CpuRelax => "cpu_relax".into(),
                    IpiOp::FlushStateLock(s) => format!("flush_state {s} lock"),
                    IpiOp::FlushStateFill(s) => format!("flush_state {s} fill"),
                    IpiOp::FlushMaskSet(s, t) => format!("flush_state {s} set cpu{}", t.0),
                    IpiOp::FlushMaskPoll(s) => format!("flush_state {s} poll"),
                    IpiOp::FlushMaskRead(s) => format!("flush_state {s} mask walk"),
                    IpiOp::FlushStateUnlock(s) => format!("flush_state {s} unlock"),
                    IpiOp::FlushMaskTest(s) => format!("flush_state {s} test"),
                    IpiOp::FlushTlbLocal => "local TLB flush".into(),
                    IpiOp::FlushMaskClear(s) => format!("flush_state {s} clear bit"),
                }
            }
            CpuActivity::Smmu { op } => {
                use crate::kernel::smmu::SmmuCpuOp as S;
                match op {
                    S::Tx(tx) => format!("tx {tx:?}"),
                    S::Load(w) => format!("load {w:?}"),
                    S::Store { word, .. } => format!("store {word:?}"),
                    S::Cas { word, .. } => format!("cas {word:?}"),
                    S::WriteEntry { index, .. } => format!("write slot {index:#x}"),
                    S::WriteProd(p) => format!("PROD write {p:#x}"),
                    other => format!("{other:?}"),
                }
            }
            CpuActivity::Ioapic { op } => format!("ioapic {op:?}"),
        }
    }
}

/// Something that happened in a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SimEvent<'a> {
    /// A device raised an MSI.
    MsiRaised {
        /// When the device wrote the MSI.
        t: SimTime,
        /// Index of the MSI source (see [`super::System::device_names`]).
        device: u32,
        /// The MSI's identity in the ledger.
        msi: MsiToken,
    },
    /// The IOMMU finished remapping or posting one request; `dur` is how long it took.
    IommuWork {
        /// When the stage started.
        start: SimTime,
        /// How long the stage took: the lookup, or the atomic descriptor update.
        dur: Duration,
        /// The request's MSI.
        msi: MsiToken,
        /// Which stage it was and its outcome.
        what: IommuWork,
    },
    /// An MSI was dropped, with its reason.
    MsiDropped {
        /// When it was dropped.
        t: SimTime,
        /// The dropped MSI.
        msi: MsiToken,
        /// Stable snake_case reason, as counted in `MsiBalance::dropped`.
        reason: &'a str,
    },
    /// A posted-interrupt notification left the IOMMU for `cpu`.
    NotificationSent {
        /// When it left the IOMMU; it reaches the local APIC after the fabric.
        t: SimTime,
        /// Index of the target CPU.
        cpu: u32,
        /// Notification vector (the descriptor's NV).
        vector: Vector,
    },
    /// A CPU started a span of work.
    CpuSpan {
        /// Index of the CPU.
        cpu: u32,
        /// When the span starts.
        start: SimTime,
        /// Its length: the cost charged for it.
        dur: Duration,
        /// What the CPU does during it.
        activity: CpuActivity,
    },
    /// A device handler started and serves these MSIs (empty: a spurious call).
    HandlerServes {
        /// When the handler starts; each MSI's latency is measured to here.
        t: SimTime,
        /// Index of the CPU running it.
        cpu: u32,
        /// Vector whose handler runs.
        vector: Vector,
        /// MSIs served by this call (merged MSIs together), one by one.
        msis: &'a [MsiToken],
        /// MSIs this call also serves that the ledger kept only as a count with
        /// their raise times (a place holding more than
        /// [`super::token_bag::EXACT_TOKENS`]; see [`super::token_bag`]): they have no
        /// id here, so no trace flow ends for them.
        more: u64,
    },
    /// The MESI state of `agent` (`None` = the IOMMU, else a CPU index) for the
    /// descriptor line of CPU `line` is now `state`.
    PidLineState {
        /// When the state changed.
        t: SimTime,
        /// Index of the CPU whose descriptor line it is.
        line: u32,
        /// `None` for the IOMMU, else the index of the CPU.
        agent: Option<u32>,
        /// The agent's new MESI state.
        state: Mesi,
    },
    /// A step of the posted path on CPU `cpu`, in the order the system applies it
    /// (see [`super::inject`]).
    AlgorithmStep {
        /// When it took effect.
        t: SimTime,
        /// The CPU whose descriptor or handler it concerns.
        cpu: u32,
        /// What happened.
        step: super::inject::AlgorithmStep,
    },
    /// An IOAPIC pin's line or entry changed.
    IoapicPin {
        /// When it changed.
        t: SimTime,
        /// The IOAPIC input.
        pin: u8,
        /// What changed.
        change: super::ioapic::PinChange,
    },
    /// The SMMU consumed one command of its queue (`arch = "arm"`).
    SmmuConsumed {
        /// When the command completed.
        t: SimTime,
        /// Its slot (index and wrap bit).
        index: u32,
        /// The decoded command; `None` for an illegal entry.
        command: Option<iommu_sim::smmuv3::Command>,
    },
    /// Number of vectors pending in CPU `cpu`'s PIR after a change.
    PirPopulation {
        /// When the descriptor changed.
        t: SimTime,
        /// Index of the CPU whose PIR it is.
        cpu: u32,
        /// Bits set in PIR.
        pending: u32,
    },
}

/// What the IOMMU did with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IommuWork {
    /// Remapped to an interrupt for `cpu`.
    Remapped {
        /// Index of the destination CPU (`u32::MAX` if no CPU has the IRTE's APIC ID).
        cpu: u32,
        /// Vector of the remapped interrupt.
        vector: Vector,
    },
    /// Looked up a posted IRTE (the descriptor update follows).
    PostLookup {
        /// Index of the CPU whose descriptor the IRTE points at (`u32::MAX` if none).
        cpu: u32,
        /// Vector to be posted.
        vector: Vector,
    },
    /// Updated CPU `cpu`'s descriptor; `notified` if a notification follows.
    Posted {
        /// Index of the CPU whose descriptor was updated.
        cpu: u32,
        /// Vector whose PIR bit was set.
        vector: Vector,
        /// The bit was already set: this MSI merged with a pending one.
        merged: bool,
        /// A notification follows (ON went 0 to 1 with SN clear, or URG).
        notified: bool,
    },
    /// Blocked with a fault.
    Fault {
        /// VT-d fault reason code (0x20 to 0x28).
        code: u8,
    },
}

/// Receives every [`SimEvent`] of a run, in simulated-time order of their start.
pub trait Observer {
    /// Called once per event, as it happens.
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

    /// Hands the event `build` makes to the observer, if one is attached. The event is
    /// built only then: built unconditionally, the copies into it (a `CpuOp` is 24
    /// bytes) were most of an unobserved run's cost of emitting, with a
    /// store-forwarding stall where the copy was reloaded at a different width.
    #[inline(always)]
    pub(super) fn emit<'e>(&mut self, build: impl FnOnce() -> SimEvent<'e>) {
        if let Some(o) = self.observer.as_deref_mut() {
            o.event(&build());
        }
    }

    #[inline(always)]
    pub(super) fn emit_cpu_span(
        &mut self,
        cpu: u32,
        start: SimTime,
        dur: Duration,
        activity: impl FnOnce() -> CpuActivity,
    ) {
        self.emit(|| SimEvent::CpuSpan {
            cpu,
            start,
            dur,
            activity: activity(),
        });
    }

    /// Holders of CPU `line`'s descriptor line, to compare after an operation.
    pub(super) fn line_snapshot(&self, line: u32) -> Vec<(Agent, Mesi)> {
        self.cpus[line as usize].pid.holders().to_vec()
    }

    /// Reports every agent whose state of CPU `line`'s descriptor line differs from
    /// `before`, and the PIR population.
    // Inlined down to the observer check: every descriptor-line access calls this, and
    // an unobserved run paid a call for nothing (1.1% of `nvme-posted` in perf).
    #[inline(always)]
    pub(super) fn emit_line_changes(&mut self, t: SimTime, line: u32, before: &[(Agent, Mesi)]) {
        if self.observer.is_some() {
            self.emit_observed_line_changes(t, line, before);
        }
    }

    #[inline(never)]
    fn emit_observed_line_changes(&mut self, t: SimTime, line: u32, before: &[(Agent, Mesi)]) {
        let Some(o) = self.observer.as_deref_mut() else {
            return;
        };
        let pid = &self.cpus[line as usize].pid;
        let agent_id = |a: Agent| match a {
            Agent::Core { cpu, .. } => Some(cpu.0),
            Agent::Iommu { .. } | Agent::Dma { .. } => None,
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

//! CPU tasks inside [`System`]: kernel algorithms that run outside hardirq context
//! as coroutines on the one executor, one operation at a time.
//!
//! A CPU has at most two tasks: a thread-context one (a shootdown's sender, an SMMU
//! load's call, a sending thread, an algorithm of [`System::run_on`]) and a
//! softirq-context one (a TX-completion poll), which runs first, as softirqs run on
//! interrupt exit before the interrupted thread continues. Interrupts are taken
//! between operations, while a cross-call sender spins, and while a task waits, but
//! only when the running task has not masked them (`local_irq_save`): Linux's
//! SMMUv3 insertion masks them for the whole call, its CMD_SYNC wait included.
//!
//! The operations themselves belong to their rooms: cross calls in `xcall.rs`, the
//! SMMU command queue in `smmu_host.rs`, the NIC transmit path in `transmit.rs`.

use super::cpu::{CpuState, Task, TaskCo, TaskKind, TaskOp};
use super::scenario::ScenarioError;
use super::System;
use crate::engine::{Coroutine, Step};
use crate::kernel::ioapic_driver::{IoapicOp, PinHostOp};
use crate::kernel::ipi::IpiPort;
use sim_core::{Duration, SimTime};

/// How an issued task operation proceeds.
pub(super) enum TaskIssued {
    /// It keeps the CPU busy for this long; a cross-call operation's value is known.
    Busy(Duration, u64),
    /// The task spins or waits; something else ends it.
    Parked,
}

impl System {
    /// Starts `algorithm` as CPU `cpu`'s task: thread context with interrupts enabled,
    /// so the CPU takes interrupts between its operations and while it spins. It
    /// starts now if the CPU is idle, otherwise when the CPU is next free; run the
    /// system to make it progress. Errors: no such CPU, an Arm system (no x2APIC), or
    /// a task (a shootdown or an earlier `run_on`) still running there.
    pub fn run_on<F>(
        &mut self,
        cpu: u32,
        algorithm: impl FnOnce(IpiPort) -> F,
    ) -> Result<(), ScenarioError>
    where
        F: std::future::Future<Output = ()> + 'static,
    {
        if cpu >= self.cpu_count() {
            return Err(ScenarioError::invalid(
                "run_on cpu",
                cpu,
                format!("a CPU 0..{}", self.cpu_count()),
            ));
        }
        if self.arm.is_some() {
            return Err(ScenarioError::invalid(
                "run_on",
                "an arch = \"arm\" system",
                "an x86 system: cross-call algorithms drive the x2APIC",
            ));
        }
        let c = cpu as usize;
        if self.cpus[c].task.is_some() {
            return Err(ScenarioError::invalid(
                "run_on cpu",
                cpu,
                "a CPU whose task has returned (one task per CPU at a time)",
            ));
        }
        let now = self.now();
        let co = Coroutine::new(|port| algorithm(IpiPort::new(port)));
        self.cpus[c].task = Some(Task::new(TaskCo::CrossCall(co), TaskKind::User, now));
        self.try_take_interrupt(now, cpu);
        Ok(())
    }

    /// The task that runs next on `cpu`: the softirq one if any, else the thread.
    pub(super) fn active_task(&mut self, cpu: u32) -> Option<&mut Task> {
        let c = &mut self.cpus[cpu as usize];
        c.softirq.as_deref_mut().or(c.task.as_deref_mut())
    }

    /// Whether the running task of `cpu` has masked interrupts.
    pub(super) fn irqs_masked(&self, cpu: u32) -> bool {
        let c = &self.cpus[cpu as usize];
        c.softirq
            .as_ref()
            .or(c.task.as_ref())
            .is_some_and(|t| t.irq_off > 0)
    }

    /// The CPU has nothing else to do: continue its task, or start the next queued
    /// one. Returns whether the CPU got busy (or parked in a wait).
    pub(super) fn run_task(&mut self, now: SimTime, cpu: u32) -> bool {
        let c = cpu as usize;
        if !self.start_queued_tx_clean(now, cpu)
            && self.cpus[c].task.is_none()
            && !self.start_queued_shootdown(now, cpu)
            && !self.start_queued_smmu_call(now, cpu)
        {
            return false;
        }
        let task = self.active_task(cpu).expect("checked above");
        if task.wait.is_some() {
            // A thread still blocked (its softirq ran meanwhile): park again.
            self.cpus[c].state = CpuState::Waiting;
            self.cpus[c].activity_end = now;
            return true;
        }
        let op = match task.reissue.take() {
            Some(op) => op,
            None => {
                let value = task.resume_with.take();
                match task.co.resume(value) {
                    Step::Request(op) => op,
                    Step::Done => {
                        self.task_done(now, cpu);
                        return self.run_task(now, cpu);
                    }
                }
            }
        };
        let issued = match op {
            TaskOp::Ipi(ipi) => match self.issue_task_ipi_op(now, cpu, ipi) {
                Some((cost, value)) => TaskIssued::Busy(cost, value),
                None => TaskIssued::Parked,
            },
            TaskOp::Smmu(sop) => self.issue_task_smmu_op(now, cpu, sop),
            TaskOp::Ioapic(iop) => self.issue_task_ioapic_op(now, cpu, iop),
        };
        match issued {
            TaskIssued::Busy(cost, value) => {
                let task = self.active_task(cpu).expect("running");
                task.in_flight = Some((op, value));
                self.cpus[c].state = CpuState::Task;
                self.schedule_cpu_step(cpu, now + cost);
            }
            TaskIssued::Parked => {
                if self.cpus[c].state != CpuState::Spinning {
                    self.cpus[c].state = CpuState::Waiting;
                }
                self.cpus[c].activity_end = now;
            }
        }
        true
    }

    /// The running task returned: count it where it belongs and drop it.
    fn task_done(&mut self, now: SimTime, cpu: u32) {
        let c = cpu as usize;
        let task = match self.cpus[c].softirq.take() {
            Some(t) => t,
            None => self.cpus[c].task.take().expect("a task returned"),
        };
        match task.kind {
            TaskKind::Shootdown(load) => self.shootdown_done(now, load, task.started),
            TaskKind::User => self.xcall.user_tasks_done += 1,
            TaskKind::SmmuLoad { load, cpu_index } => {
                let start = task.issue_start.unwrap_or(task.started);
                self.smmu_call_done(now, load, cpu_index, start)
            }
            // Their counts are kept as they go (datagrams freed, packets cleaned); a
            // UIO reader loops for ever.
            TaskKind::TxThread { .. } | TaskKind::TxClean { .. } | TaskKind::IoapicThread(_) => {}
        }
    }

    /// The running task's operation in flight completes.
    pub(super) fn on_task_step(&mut self, now: SimTime, cpu: u32) {
        let c = cpu as usize;
        let task = self.active_task(cpu).expect("a task step has a task");
        let (op, value) = task.in_flight.take().expect("a task op was in flight");
        let result = match op {
            TaskOp::Ipi(ipi) => {
                self.complete_ipi_op(now, cpu, ipi);
                Some(value)
            }
            TaskOp::Smmu(sop) => self.complete_task_smmu_op(now, cpu, sop),
            TaskOp::Ioapic(iop) => Some(self.complete_ioapic_op(now, cpu, iop)),
        };
        match result {
            Some(v) => {
                self.active_task(cpu).expect("still there").resume_with = Some(v);
                self.cpus[c].state = CpuState::Idle;
                self.try_take_interrupt(now, cpu);
            }
            // The operation became a wait (a monitored word still unchanged).
            None => {
                self.cpus[c].state = CpuState::Waiting;
                self.cpus[c].activity_end = now;
            }
        }
    }

    /// The running task's wait ends at `now` with `value`: it resumes (after any
    /// interrupt the CPU now takes).
    pub(super) fn end_wait(&mut self, now: SimTime, cpu: u32, value: u64) {
        let c = cpu as usize;
        let task = self.active_task(cpu).expect("a waiting CPU has a task");
        task.wait = None;
        task.resume_with = Some(value);
        if self.cpus[c].state == CpuState::Waiting {
            self.cpus[c].state = CpuState::Idle;
            self.try_take_interrupt(now, cpu);
        }
    }

    /// An interrupt can be taken on a waiting CPU whose task has interrupts enabled:
    /// a WFE ends (the algorithm looks again after the handler); a blocked thread
    /// will wait again.
    pub(super) fn break_wait(&mut self, now: SimTime, cpu: u32) {
        let c = cpu as usize;
        let task = self.active_task(cpu).expect("a waiting CPU has a task");
        let (op, since) = task.wait.take().expect("waiting");
        match op {
            TaskOp::Smmu(s) if super::smmu_host::is_wfe_wait(s) => {
                task.resume_with = Some(0);
                self.smmu_wait_broken(now, cpu);
            }
            TaskOp::Ioapic(IoapicOp::Host(PinHostOp::Hold { ns })) => {
                let rest = self.break_hold(now, cpu, ns, since);
                self.active_task(cpu).expect("still there").reissue = Some(rest);
            }
            other => task.reissue = Some(other),
        }
        self.cpus[c].state = CpuState::Idle;
    }
}

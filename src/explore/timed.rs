//! One timed schedule, run on the engine's event queue with the invariants on.
//!
//! A [`TimedSchedule`] says when each post lands (vector, URG), when another CPU sets
//! or clears SN, and what each kind of handler operation costs. [`run_timed`] drives
//! the handler's own coroutine the way the system's CPUs do (an operation is issued,
//! takes its cost, and its effect applies at completion, so posts landing meanwhile
//! are seen) and changes the world through [`World`], so it checks exactly the
//! invariants the exhaustive explorer checks, after every event and at the end.
//!
//! The proptest suite (`tests/explore_proptest.rs`) generates these schedules; a
//! failing one shrinks to a minimal schedule that can be kept as a literal test.

use std::fmt;

use serde::Serialize;
use sim_core::{Duration, SimTime, Vector};

use super::model::{Violation, World};
use super::DEFAULT_MAX_HANDLER_OPS;
use crate::engine::{Coroutine, EventQueue, Priority, Step};
use crate::kernel::{CpuOp, CpuPort, PirHandler};

/// A post the IOMMU performs at `at_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TimedPost {
    /// When the post's descriptor update happens, ns from the start.
    pub at_ns: u64,
    /// The vector posted.
    pub vector: Vector,
    /// The IRTE has URG set: the post notifies even while SN is set.
    pub urg: bool,
}

/// Another CPU sets (`set`) or clears SN at `at_ns`. A clear is followed, after
/// [`OpCosts::recheck_ns`], by that CPU's recheck of PIR ([`World::sn_recheck`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SnChange {
    /// When, ns from the start.
    pub at_ns: u64,
    /// Set SN (true) or clear it (false).
    pub set: bool,
}

/// What each step costs, in nanoseconds. Zero is allowed (the step completes in the
/// same instant, after the hardware events of that instant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct OpCosts {
    /// From taking the notification to the handler's first operation.
    pub entry_ns: u64,
    /// A plain load of a PIR word.
    pub load_ns: u64,
    /// A locked operation on the line (exchange, clear ON, test-and-clear ON).
    pub locked_ns: u64,
    /// One device handler call.
    pub handle_ns: u64,
    /// The EOI write.
    pub eoi_ns: u64,
    /// From the handler's return until the CPU can take the next interrupt.
    pub exit_ns: u64,
    /// From a notification being sent to it being pending in the APIC's IRR.
    pub notify_ns: u64,
    /// From the SN clear to the clearing CPU's recheck of PIR.
    pub recheck_ns: u64,
}

impl Default for OpCosts {
    /// Round numbers of the order the default cost tables give (assumptions, for tests).
    fn default() -> Self {
        OpCosts {
            entry_ns: 100,
            load_ns: 5,
            locked_ns: 20,
            handle_ns: 150,
            eoi_ns: 10,
            exit_ns: 50,
            notify_ns: 80,
            recheck_ns: 30,
        }
    }
}

/// Everything the hardware and the other CPU do, and the costs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TimedSchedule {
    /// The IOMMU's posts (any order; equal times run in list order).
    pub posts: Vec<TimedPost>,
    /// The other CPU's SN changes.
    pub sn_changes: Vec<SnChange>,
    /// What each step costs.
    pub costs: OpCosts,
}

/// An invariant that failed, and when.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimedViolation {
    /// Simulated time of the failing event (or of the last event, at quiescence).
    pub at_ns: f64,
    /// Found at the end, once nothing was left to happen.
    pub at_quiescence: bool,
    /// Which invariant, and why.
    pub violation: Violation,
}

/// What one schedule did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimedRun {
    /// Events handled.
    pub events: u64,
    /// Handler entries started.
    pub entries: u32,
    /// Notifications sent.
    pub notifications: u32,
    /// Device handler calls.
    pub handled: u64,
    /// Individual invariant evaluations.
    pub invariants_checked: u64,
    /// One line per step: time, actor, what it did, the fields after it.
    pub log: Vec<String>,
    /// The first invariant that failed, if any.
    pub violation: Option<TimedViolation>,
}

impl TimedRun {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violation.is_none()
    }
}

impl fmt::Display for TimedRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.log {
            writeln!(f, "{line}")?;
        }
        match &self.violation {
            None => write!(
                f,
                "every invariant held: {} events, {} entries, {} handled",
                self.events, self.entries, self.handled
            ),
            Some(v) => write!(
                f,
                "invariant violated at {:.3} ns{}: {}",
                v.at_ns,
                if v.at_quiescence { " (quiescence)" } else { "" },
                v.violation
            ),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Event {
    Post(usize),
    Sn(usize),
    Recheck,
    NotificationArrives,
    CpuStep,
}

enum Cpu {
    Idle,
    Entering,
    Running(Coroutine<CpuOp, u64>, CpuOp),
    Exiting,
}

struct Driver<'a> {
    handler: &'a dyn PirHandler,
    schedule: &'a TimedSchedule,
    queue: EventQueue<Event>,
    world: World,
    cpu: Cpu,
    checks: u64,
    handled: u64,
    log: Vec<String>,
}

fn ns(n: u64) -> Duration {
    Duration::from_ns(n)
}

impl Driver<'_> {
    fn note(&mut self, now: SimTime, actor: &str, what: &str) {
        self.log.push(format!(
            "{:>12.3} ns  {actor:<9} {what}  -> {}",
            now.as_ns_f64(),
            self.world.snapshot()
        ));
    }

    fn op_cost(&self, op: CpuOp) -> Duration {
        let c = &self.schedule.costs;
        ns(match op {
            CpuOp::LoadPir { .. } => c.load_ns,
            CpuOp::XchgPir { .. } | CpuOp::ClearOn | CpuOp::TestAndClearOn => c.locked_ns,
            CpuOp::HandleVector(_) => c.handle_ns,
            CpuOp::Eoi => c.eoi_ns,
        })
    }

    fn notify(&mut self, now: SimTime) {
        let at = now + ns(self.schedule.costs.notify_ns);
        self.queue
            .schedule(at, Priority::APIC, Event::NotificationArrives);
    }

    fn try_take(&mut self, now: SimTime) {
        if matches!(self.cpu, Cpu::Idle) && self.world.can_deliver() {
            let note = self.world.deliver();
            self.note(now, "apic", &note.0);
            self.cpu = Cpu::Entering;
            let at = now + ns(self.schedule.costs.entry_ns);
            self.queue.schedule(at, Priority::CPU, Event::CpuStep);
        }
    }

    /// Records where the handler stopped and schedules its next completion.
    fn after_resume(
        &mut self,
        now: SimTime,
        co: Coroutine<CpuOp, u64>,
        step: Step<CpuOp>,
    ) -> Result<(), Violation> {
        let next = match &step {
            Step::Request(op) => Step::Request(*op),
            Step::Done => Step::Done,
        };
        let note = self
            .world
            .handler_next(next, DEFAULT_MAX_HANDLER_OPS, &mut self.checks)?;
        match step {
            Step::Request(op) => {
                let at = now + self.op_cost(op);
                self.cpu = Cpu::Running(co, op);
                self.queue.schedule(at, Priority::CPU, Event::CpuStep);
            }
            Step::Done => {
                if let Some(n) = note {
                    self.note(now, "handler", &n.0);
                }
                self.cpu = Cpu::Exiting;
                let at = now + ns(self.schedule.costs.exit_ns);
                self.queue.schedule(at, Priority::CPU, Event::CpuStep);
            }
        }
        Ok(())
    }

    fn handle(&mut self, now: SimTime, ev: Event) -> Result<(), Violation> {
        match ev {
            Event::Post(i) => {
                let p = self.schedule.posts[i];
                let (sent, note) = self.world.post(p.vector, p.urg, &mut self.checks)?;
                self.note(now, if p.urg { "iommu-urg" } else { "iommu" }, &note.0);
                if sent {
                    self.notify(now);
                }
            }
            Event::Sn(i) => {
                let set = self.schedule.sn_changes[i].set;
                let note = self.world.set_sn(set, true, &mut self.checks)?;
                self.note(now, "sn-cpu", &note.0);
                if !set {
                    let at = now + ns(self.schedule.costs.recheck_ns);
                    self.queue.schedule(at, Priority::CPU, Event::Recheck);
                }
            }
            Event::Recheck => {
                let (sent, note) = self.world.sn_recheck();
                self.note(now, "sn-cpu", &note.0);
                if sent {
                    self.notify(now);
                }
            }
            Event::NotificationArrives => {
                let note = self.world.notification_arrives();
                self.note(now, "apic", &note.0);
                self.try_take(now);
            }
            Event::CpuStep => match std::mem::replace(&mut self.cpu, Cpu::Idle) {
                Cpu::Idle => unreachable!("CPU step while idle"),
                Cpu::Entering => {
                    let handler = self.handler;
                    let mut co = Coroutine::from_boxed(|port| handler.run(CpuPort::new(port)));
                    let step = co.resume(None);
                    self.after_resume(now, co, step)?;
                }
                Cpu::Running(mut co, op) => {
                    if matches!(op, CpuOp::HandleVector(_)) {
                        self.handled += 1;
                    }
                    let (value, note) = match self.world.handler_op(op, &mut self.checks) {
                        Ok(r) => r,
                        Err(v) => {
                            self.note(now, "handler", &format!("{op:?}"));
                            return Err(v);
                        }
                    };
                    self.note(now, "handler", &note.0);
                    let step = co.resume(Some(value));
                    self.after_resume(now, co, step)?;
                }
                Cpu::Exiting => self.try_take(now),
            },
        }
        Ok(())
    }
}

/// Runs `schedule` against `handler` until nothing is left to happen, checking every
/// invariant after each event and at the end.
pub fn run_timed(handler: &dyn PirHandler, schedule: &TimedSchedule) -> TimedRun {
    let mut d = Driver {
        handler,
        schedule,
        queue: EventQueue::with_capacity(64),
        world: World::new(),
        cpu: Cpu::Idle,
        checks: 0,
        handled: 0,
        log: Vec::new(),
    };
    for (i, p) in schedule.posts.iter().enumerate() {
        d.queue
            .schedule(SimTime::ZERO + ns(p.at_ns), Priority::IOMMU, Event::Post(i));
    }
    for (i, c) in schedule.sn_changes.iter().enumerate() {
        d.queue
            .schedule(SimTime::ZERO + ns(c.at_ns), Priority::CPU, Event::Sn(i));
    }
    let mut violation = None;
    while let Some((now, ev)) = d.queue.pop() {
        let step = d
            .handle(now, ev)
            .and_then(|()| d.world.check_nothing_lost(&mut d.checks));
        if let Err(v) = step {
            violation = Some(TimedViolation {
                at_ns: now.as_ns_f64(),
                at_quiescence: false,
                violation: v,
            });
            break;
        }
    }
    if violation.is_none() {
        if let Err(v) = d.world.check_quiescent(&mut d.checks) {
            violation = Some(TimedViolation {
                at_ns: d.queue.now().as_ns_f64(),
                at_quiescence: true,
                violation: v,
            });
        }
    }
    TimedRun {
        events: d.queue.events_popped(),
        entries: d.world.entries,
        notifications: d.world.notifications,
        handled: d.handled,
        invariants_checked: d.checks,
        log: d.log,
        violation,
    }
}

/// Shrinks a failing schedule further than proptest's single pass can. It repeatedly
/// tries one simplification at a time (drop a post or an SN change, clear an URG flag,
/// halve a post's or SN change's time, halve a cost) and keeps the first one that still
/// violates the same invariant, until none does. Every simplification makes the
/// schedule strictly smaller, so this ends. The result is 1-minimal: removing any one
/// of its posts or SN changes makes that violation go away. A schedule that does not
/// fail is returned unchanged.
pub fn minimize(handler: &dyn PirHandler, schedule: &TimedSchedule) -> TimedSchedule {
    let invariant = |s: &TimedSchedule| {
        run_timed(handler, s)
            .violation
            .map(|v| v.violation.invariant)
    };
    let Some(target) = invariant(schedule) else {
        return schedule.clone();
    };
    let mut best = schedule.clone();
    while let Some(smaller) = simplifications(&best)
        .into_iter()
        .find(|s| invariant(s) == Some(target))
    {
        best = smaller;
    }
    best
}

/// Every one-step simplification of `s`, most drastic first.
fn simplifications(s: &TimedSchedule) -> Vec<TimedSchedule> {
    let mut out = Vec::new();
    for i in 0..s.posts.len() {
        let mut t = s.clone();
        t.posts.remove(i);
        out.push(t);
    }
    for i in 0..s.sn_changes.len() {
        let mut t = s.clone();
        t.sn_changes.remove(i);
        out.push(t);
    }
    for i in 0..s.posts.len() {
        if s.posts[i].urg {
            let mut t = s.clone();
            t.posts[i].urg = false;
            out.push(t);
        }
        if s.posts[i].at_ns > 0 {
            let mut t = s.clone();
            t.posts[i].at_ns /= 2;
            out.push(t);
        }
    }
    for i in 0..s.sn_changes.len() {
        if s.sn_changes[i].at_ns > 0 {
            let mut t = s.clone();
            t.sn_changes[i].at_ns /= 2;
            out.push(t);
        }
    }
    for field in 0..8 {
        let mut t = s.clone();
        let c = &mut t.costs;
        let slot = [
            &mut c.entry_ns,
            &mut c.load_ns,
            &mut c.locked_ns,
            &mut c.handle_ns,
            &mut c.eoi_ns,
            &mut c.exit_ns,
            &mut c.notify_ns,
            &mut c.recheck_ns,
        ]
        .into_iter()
        .nth(field)
        .expect("eight cost fields");
        if *slot > 0 {
            *slot /= 2;
            out.push(t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explore::model::Invariant;
    use crate::kernel::posted_msi::variant_by_name;

    fn post(at_ns: u64, v: u8) -> TimedPost {
        TimedPost {
            at_ns,
            vector: Vector(v),
            urg: false,
        }
    }

    #[test]
    fn lone_post_is_handled_by_every_correct_variant() {
        let s = TimedSchedule {
            posts: vec![post(0, 0x21)],
            ..TimedSchedule::default()
        };
        for name in ["copy-then-xchg", "rfc", "interleaved", "per-word-dispatch"] {
            let h = variant_by_name(name, 3).unwrap();
            let run = run_timed(h.as_ref(), &s);
            assert!(run.passed(), "{name}:\n{run}");
            assert_eq!((run.entries, run.handled), (1, 1), "{name}");
        }
    }

    #[test]
    fn post_in_the_window_before_clear_on_strands_no_final_recheck() {
        // The notification arrives at 80 ns, the entry's first operation issues at
        // 180 ns. copy-then-xchg with the default costs: 4 loads (done at 200), xchg
        // (220), handle (370), 4 loads (the load of word 1 completes at 380, the last
        // at 390), clear ON (410). A post to word 1 at 400 ns lands in the window.
        let s = TimedSchedule {
            posts: vec![post(0, 0x21), post(400, 0x61)],
            ..TimedSchedule::default()
        };
        let broken = variant_by_name("no-final-recheck", 3).unwrap();
        let run = run_timed(broken.as_ref(), &s);
        let v = run.violation.as_ref().expect("the window is hit");
        assert_eq!(v.violation.invariant, Invariant::NothingLost, "{run}");
        assert!(!v.at_quiescence, "found when the handler returns");
        let good = variant_by_name("copy-then-xchg", 3).unwrap();
        let run = run_timed(good.as_ref(), &s);
        assert!(run.passed(), "{run}");
        assert_eq!(run.handled, 2);
    }

    #[test]
    fn sn_suppresses_then_the_recheck_notifies() {
        let s = TimedSchedule {
            posts: vec![post(10, 0x21)],
            sn_changes: vec![
                SnChange {
                    at_ns: 0,
                    set: true,
                },
                SnChange {
                    at_ns: 100,
                    set: false,
                },
            ],
            ..TimedSchedule::default()
        };
        let h = variant_by_name("copy-then-xchg", 3).unwrap();
        let run = run_timed(h.as_ref(), &s);
        assert!(run.passed(), "{run}");
        assert_eq!((run.notifications, run.handled), (1, 1));
        assert!(run.log.iter().any(|l| l.contains("suppressed")));
    }
}

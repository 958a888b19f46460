//! One timed schedule, run on a [`System`] with the invariants on.
//!
//! A [`TimedSchedule`] says when each post lands (vector, URG), when another CPU sets
//! or clears SN, and what each kind of handler operation costs. [`run_timed`] builds a
//! two-CPU posted system whose cost tables give exactly those costs
//! ([`timed_scenario`]), injects the posts and SN changes through the system's public
//! hooks (`System::inject_post`, `System::inject_sn`), and runs it: the handler runs
//! on the system's CPU as in any experiment (an operation is issued, takes its cost,
//! and its effect applies at completion, so posts landing meanwhile are seen). Every
//! step the system applies is replayed into the explorer's model ([`World`]), which
//! checks exactly the invariants the exhaustive explorer checks, after every event
//! and at the end, and that the system computed what the model computes.
//!
//! The proptest suite (`tests/explore_proptest.rs`) generates these schedules; a
//! failing one shrinks to a minimal schedule that can be kept as a literal test.

use std::fmt;

use serde::Serialize;
use sim_core::{Duration, SimTime, Vector};

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use super::model::{Invariant, Violation, World};
use super::DEFAULT_MAX_HANDLER_OPS;
use crate::engine::Step;
use crate::kernel::{CpuOp, CpuPort, PirHandler};
use crate::system::inject::AlgorithmStep;
use crate::system::{DeliveryMode, Scenario, SimEvent, System};

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

/// Replays the system's steps of the posted path into the explorer's model, which
/// checks every invariant and that the system computes what the model computes.
struct Checker {
    world: World,
    checks: u64,
    handled: u64,
    log: Vec<String>,
    violation: Option<(f64, Violation)>,
}

impl Checker {
    fn note(&mut self, t: SimTime, actor: &str, what: &str) {
        self.log.push(format!(
            "{:>12.3} ns  {actor:<9} {what}  -> {}",
            t.as_ns_f64(),
            self.world.snapshot()
        ));
    }

    fn disagree(what: String) -> Violation {
        Violation::new(
            Invariant::HandlerContract,
            format!("the system and the model disagree: {what}"),
        )
    }

    fn step(&mut self, t: SimTime, step: AlgorithmStep) -> Result<(), Violation> {
        match step {
            AlgorithmStep::Posted {
                vector,
                urg,
                notified,
            } => {
                let (sent, note) = self.world.post(vector, urg, &mut self.checks)?;
                self.note(t, if urg { "iommu-urg" } else { "iommu" }, &note.0);
                if sent != notified {
                    return Err(Self::disagree(format!(
                        "post of {vector}: system notified={notified}, model {sent}"
                    )));
                }
            }
            AlgorithmStep::SnChanged { set } => {
                let note = self.world.set_sn(set, true, &mut self.checks)?;
                self.note(t, "sn-cpu", &note.0);
            }
            AlgorithmStep::Recheck { notified } => {
                let (sent, note) = self.world.sn_recheck();
                self.note(t, "sn-cpu", &note.0);
                if sent != notified {
                    return Err(Self::disagree(format!(
                        "recheck: system notified={notified}, model {sent}"
                    )));
                }
            }
            AlgorithmStep::NotificationArrived => {
                if self.world.in_flight == 0 {
                    return Err(Self::disagree(
                        "a notification arrived that the model never sent".into(),
                    ));
                }
                let note = self.world.notification_arrives();
                self.note(t, "apic", &note.0);
            }
            AlgorithmStep::Delivered => {
                if !self.world.can_deliver() {
                    return Err(Self::disagree(
                        "the CPU took a notification the model cannot deliver".into(),
                    ));
                }
                let note = self.world.deliver();
                self.note(t, "apic", &note.0);
            }
            AlgorithmStep::Requested { op } => {
                self.world.handler_next(
                    Step::Request(op),
                    DEFAULT_MAX_HANDLER_OPS,
                    &mut self.checks,
                )?;
            }
            AlgorithmStep::Completed { op, value } => {
                if matches!(op, CpuOp::HandleVector(_)) {
                    self.handled += 1;
                }
                let (v, note) = match self.world.handler_op(op, &mut self.checks) {
                    Ok(r) => r,
                    Err(e) => {
                        self.note(t, "handler", &format!("{op:?}"));
                        return Err(e);
                    }
                };
                self.note(t, "handler", &note.0);
                if v != value {
                    return Err(Self::disagree(format!(
                        "{op:?} yielded {value:#x} in the system, {v:#x} in the model"
                    )));
                }
            }
            AlgorithmStep::Returned => {
                let note = self.world.handler_next(
                    Step::Done,
                    DEFAULT_MAX_HANDLER_OPS,
                    &mut self.checks,
                )?;
                if let Some(n) = note {
                    self.note(t, "handler", &n.0);
                }
            }
        }
        Ok(())
    }
}

/// The machine a schedule runs on: CPU 0 takes the posts, CPU 1 changes SN; a 1 GHz
/// clock so cycle costs are nanoseconds; every descriptor access costs `load_ns`
/// whatever its MESI case, a locked one `max(locked_ns, load_ns)`; a notification
/// reaches the APIC `notify_ns` after the post.
pub fn timed_scenario(costs: &OpCosts) -> Scenario {
    let mut sc = Scenario::builder()
        .name("timed schedule")
        .mode(DeliveryMode::Posted)
        .cpus(2)
        .into_unvalidated();
    let k = &mut sc.costs;
    k.cpu.freq_mhz = 1000;
    k.cpu.irq_entry_cycles = costs.entry_ns as f64;
    k.cpu.irq_exit_cycles = costs.exit_ns as f64;
    k.cpu.irq_flow_cycles = costs.handle_ns as f64;
    k.apic.wrmsr_eoi_cycles = costs.eoi_ns.min(u32::MAX as u64) as u32;
    let load = costs.load_ns as f64;
    let l = &mut k.pid_line;
    l.l1_hit_cycles = load;
    l.llc_hit_cycles = load;
    for f in [
        &mut l.upgrade_s_to_m_ns,
        &mut l.upgrade_other_socket_ns,
        &mut l.remote_clean_same_socket_ns,
        &mut l.remote_clean_other_socket_ns,
        &mut l.remote_modified_same_socket_ns,
        &mut l.remote_modified_other_socket_ns,
        &mut l.remote_llc_other_socket_ns,
        &mut l.memory_ns,
        &mut l.remote_memory_ns,
    ] {
        *f = load;
    }
    l.locked_rmw_cycles = costs.locked_ns.saturating_sub(costs.load_ns) as f64;
    l.iommu_post_occupancy_ns = 0.0;
    l.iommu_snoop_modified_ns = 0.0;
    l.iommu_post_latency_ns = costs.notify_ns as f64;
    k.fabric.message_latency_ns = 0.0;
    k.fabric.message_occupancy_ns = 0.0;
    sc
}

fn ns(n: u64) -> Duration {
    Duration::from_ns(n)
}

/// Events one schedule may take before the run is cut (a handler looping for ever
/// is caught by the model's operation bound long before).
const MAX_EVENTS: u64 = 1_000_000;

/// Runs `schedule` against `handler` on a [`System`] (posts and SN changes through
/// its injection hooks) until nothing is left to happen, replaying every step into
/// the explorer's model, which checks every invariant after each event and at the
/// end.
pub fn run_timed(handler: &Arc<dyn PirHandler>, schedule: &TimedSchedule) -> TimedRun {
    let sc = timed_scenario(&schedule.costs);
    let mut sys = System::for_injection(&sc, Box::new(Shared(Arc::clone(handler))))
        .expect("the timed machine is a valid scenario");
    let at = |n: u64| SimTime::ZERO + ns(n);
    for p in &schedule.posts {
        sys.inject_post(at(p.at_ns), 0, p.vector, p.urg)
            .expect("CPU 0 of a posted system");
    }
    for c in &schedule.sn_changes {
        sys.inject_sn(at(c.at_ns), 0, 1, c.set, ns(schedule.costs.recheck_ns))
            .expect("CPUs 0 and 1 of a posted system");
    }
    let checker = Rc::new(RefCell::new(Checker {
        world: World::new(),
        checks: 0,
        handled: 0,
        log: Vec::new(),
        violation: None,
    }));
    let sink = Rc::clone(&checker);
    sys.set_observer(Box::new(move |e: &SimEvent<'_>| {
        if let SimEvent::AlgorithmStep { t, cpu: 0, step } = *e {
            let mut c = sink.borrow_mut();
            if c.violation.is_none() {
                if let Err(v) = c.step(t, step) {
                    c.violation = Some((t.as_ns_f64(), v));
                }
            }
        }
    }));
    let mut violation = None;
    while let Some(t) = sys.step() {
        let mut c = checker.borrow_mut();
        if let Some((at_ns, v)) = c.violation.take() {
            violation = Some(TimedViolation {
                at_ns,
                at_quiescence: false,
                violation: v,
            });
            break;
        }
        let Checker { world, checks, .. } = &mut *c;
        if let Err(v) = world.check_nothing_lost(checks) {
            violation = Some(TimedViolation {
                at_ns: t.as_ns_f64(),
                at_quiescence: false,
                violation: v,
            });
            break;
        }
        if sys.events() >= MAX_EVENTS {
            break;
        }
    }
    let mut c = checker.borrow_mut();
    if violation.is_none() {
        let Checker { world, checks, .. } = &mut *c;
        if let Err(v) = world.check_quiescent(checks) {
            violation = Some(TimedViolation {
                at_ns: sys.now().as_ns_f64(),
                at_quiescence: true,
                violation: v,
            });
        }
    }
    TimedRun {
        events: sys.events(),
        entries: c.world.entries,
        notifications: c.world.notifications,
        handled: c.handled,
        invariants_checked: c.checks,
        log: std::mem::take(&mut c.log),
        violation,
    }
}

/// A handler shared with the caller, as the system's owned handler.
struct Shared(Arc<dyn PirHandler>);

impl PirHandler for Shared {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn is_broken(&self) -> bool {
        self.0.is_broken()
    }
    fn run(&self, cpu: CpuPort) -> crate::kernel::HandlerFuture {
        self.0.run(cpu)
    }
}

/// Shrinks a failing schedule further than proptest's single pass can. It repeatedly
/// tries one simplification at a time (drop a post or an SN change, clear an URG flag,
/// halve a post's or SN change's time, halve a cost) and keeps the first one that still
/// violates the same invariant, until none does. Every simplification makes the
/// schedule strictly smaller, so this ends. The result is 1-minimal: removing any one
/// of its posts or SN changes makes that violation go away. A schedule that does not
/// fail is returned unchanged.
pub fn minimize(handler: &Arc<dyn PirHandler>, schedule: &TimedSchedule) -> TimedSchedule {
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
            let h: Arc<dyn PirHandler> = variant_by_name(name, 3).unwrap().into();
            let run = run_timed(&h, &s);
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
        let broken: Arc<dyn PirHandler> = variant_by_name("no-final-recheck", 3).unwrap().into();
        let run = run_timed(&broken, &s);
        let v = run.violation.as_ref().expect("the window is hit");
        assert_eq!(v.violation.invariant, Invariant::NothingLost, "{run}");
        assert!(!v.at_quiescence, "found when the handler returns");
        let good: Arc<dyn PirHandler> = variant_by_name("copy-then-xchg", 3).unwrap().into();
        let run = run_timed(&good, &s);
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
        let h: Arc<dyn PirHandler> = variant_by_name("copy-then-xchg", 3).unwrap().into();
        let run = run_timed(&h, &s);
        assert!(run.passed(), "{run}");
        assert_eq!((run.notifications, run.handled), (1, 1));
        assert!(run.log.iter().any(|l| l.contains("suppressed")));
    }
}

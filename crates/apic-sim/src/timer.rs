//! Local APIC timer: one-shot, periodic and TSC-deadline modes (SDM Vol. 3A 11.5.4).
//!
//! The timer never ticks: it stores when it was armed and computes the current count
//! and the next expiry from `now`. The engine asks [`ApicTimer::next_fire`] after any
//! register write that may have changed it and calls `fire(now)` at that instant.
//!
//! Assumptions (the SDM leaves them to the implementation):
//! - The timer clock (the "bus clock" of the SDM) is a configured frequency; on recent
//!   Xeons it is the core crystal clock that CPUID leaf 0x15 reports, see
//!   [`LapicConfig`](crate::LapicConfig).
//! - The TSC reads 0 at simulated time 0 and runs at the configured TSC frequency.
//! - Changing the divide configuration while the timer runs continues the count from
//!   its current value at the new rate.
//! - Expiries that happen while the LVT entry is masked produce no interrupt and are
//!   not remembered: unmasking later does not deliver them.
//! - A write that switches into or out of TSC-deadline mode disarms the timer and
//!   clears both the initial count and the deadline (SDM 11.5.4.1 says the timer is
//!   disarmed; clearing the initial count follows KVM).
//!
//! Not modelled: timer behaviour in deep C-states (ARAT is assumed), TSC adjustment
//! and TSC_ADJUST, the timer's LVT delivery-status bit.

use sim_core::{Freq, SimTime, Vector, PS_PER_US};

/// LVT timer bits 18:17: timer mode (SDM Figure 11-8).
pub const LVT_TIMER_MODE_SHIFT: u32 = 17;
pub const LVT_TIMER_MODE_MASK: u32 = 0x3 << LVT_TIMER_MODE_SHIFT;
/// LVT bit 16: mask.
pub const LVT_MASKED: u32 = 1 << 16;
/// LVT bits 7:0: vector.
pub const LVT_VECTOR_MASK: u32 = 0xff;

/// Divide configuration register: the defined bits are 3, 1 and 0 (SDM Figure 11-10).
pub const DCR_VALID_BITS: u32 = 0b1011;

/// LVT timer mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimerMode {
    /// 00: count down once from the initial count, interrupt at zero.
    OneShot,
    /// 01: reload the initial count at zero and interrupt each time.
    Periodic,
    /// 10: interrupt when the TSC reaches IA32_TSC_DEADLINE.
    TscDeadline,
}

impl TimerMode {
    /// `None` for the reserved encoding 11.
    pub fn from_lvt(lvt: u32) -> Option<TimerMode> {
        match (lvt & LVT_TIMER_MODE_MASK) >> LVT_TIMER_MODE_SHIFT {
            0 => Some(TimerMode::OneShot),
            1 => Some(TimerMode::Periodic),
            2 => Some(TimerMode::TscDeadline),
            _ => None,
        }
    }
}

/// Divide value for a divide configuration register value: bits (3,1,0) = 000 -> 2,
/// 001 -> 4, ... 110 -> 128, 111 -> 1.
pub fn divide_value(dcr: u32) -> u64 {
    let code = ((dcr >> 1) & 0b100) | (dcr & 0b11);
    if code == 0b111 {
        1
    } else {
        2u64 << code
    }
}

/// Smallest number of picoseconds in which `freq` completes `cycles` cycles, so that
/// `freq.cycles_in(Duration(result)) >= cycles`. `None` past the end of `u64` time.
fn ps_for_cycles(freq: Freq, cycles: u128) -> Option<u64> {
    let mhz = freq.mhz() as u128;
    let ps = (cycles * PS_PER_US as u128).div_ceil(mhz);
    u64::try_from(ps).ok()
}

/// A countdown in progress (one-shot or periodic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    start: SimTime,
    /// Count loaded at `start` (the initial count, or the remaining count after a
    /// divide change). Never 0.
    start_count: u32,
    /// How many expiries of this run have been consumed (fired or lost while masked).
    consumed: u64,
    /// An expiry of an earlier run (before a divide change or a switch to one-shot)
    /// that fell due and has not been consumed yet: when it fell due.
    owed: Option<SimTime>,
}

/// The timer registers and countdown state of one local APIC.
#[derive(Clone, Debug)]
pub struct ApicTimer {
    clock: Freq,
    tsc: Freq,
    lvt: u32,
    initial: u32,
    dcr: u32,
    run: Option<Run>,
    /// IA32_TSC_DEADLINE; 0 = disarmed.
    deadline: u64,
}

impl ApicTimer {
    /// Reset state: LVT masked, one-shot, counts and deadline 0, divide by 2.
    pub fn new(clock: Freq, tsc: Freq) -> ApicTimer {
        ApicTimer {
            clock,
            tsc,
            lvt: LVT_MASKED,
            initial: 0,
            dcr: 0,
            run: None,
            deadline: 0,
        }
    }

    pub fn lvt(&self) -> u32 {
        self.lvt
    }
    /// The timer clock before division.
    pub fn clock(&self) -> Freq {
        self.clock
    }
    /// The TSC clock used in TSC-deadline mode.
    pub fn tsc_clock(&self) -> Freq {
        self.tsc
    }
    pub fn initial_count(&self) -> u32 {
        self.initial
    }
    pub fn divide_config(&self) -> u32 {
        self.dcr
    }
    /// The mode field; the reserved encoding reads as one-shot (it cannot be written).
    pub fn mode(&self) -> TimerMode {
        TimerMode::from_lvt(self.lvt).unwrap_or(TimerMode::OneShot)
    }
    pub fn masked(&self) -> bool {
        self.lvt & LVT_MASKED != 0
    }
    /// IA32_TSC_DEADLINE as RDMSR returns it: the armed deadline in TSC-deadline mode
    /// (0 once fired), 0 in the other modes (SDM 11.5.4.1).
    pub fn tsc_deadline(&self) -> u64 {
        if self.mode() == TimerMode::TscDeadline {
            self.deadline
        } else {
            0
        }
    }
    /// The TSC value at `now`.
    pub fn tsc_at(&self, now: SimTime) -> u64 {
        self.tsc.cycles_in(sim_core::Duration(now.0))
    }

    fn divide(&self) -> u64 {
        divide_value(self.dcr)
    }

    /// Time of expiry number `k` of `run`, `None` if past the end of time.
    fn expiry(&self, run: &Run, k: u64) -> Option<SimTime> {
        let counts = run.start_count as u128 + k as u128 * self.initial as u128;
        let ps = ps_for_cycles(self.clock, counts * self.divide() as u128)?;
        run.start.0.checked_add(ps).map(SimTime)
    }

    /// Number of expiries of `run` at or before `now`.
    fn expiries_by(&self, run: &Run, now: SimTime) -> u64 {
        let ticks = self.clock.cycles_in(now.since(run.start)) / self.divide();
        let first = run.start_count as u64;
        if ticks < first {
            0
        } else if self.mode() == TimerMode::Periodic && self.initial > 0 {
            1 + (ticks - first) / self.initial as u64
        } else {
            1
        }
    }

    /// Current-count register at `now` (0 in TSC-deadline mode or when not running).
    pub fn current_count(&self, now: SimTime) -> u32 {
        let Some(run) = self.run else { return 0 };
        if self.mode() == TimerMode::TscDeadline {
            return 0;
        }
        let ticks = self.clock.cycles_in(now.since(run.start)) / self.divide();
        let first = run.start_count as u64;
        if ticks < first {
            (first - ticks) as u32
        } else if self.mode() == TimerMode::Periodic && self.initial > 0 {
            let into = (ticks - first) % self.initial as u64;
            (self.initial as u64 - into) as u32
        } else {
            0
        }
    }

    /// When the timer next raises an interrupt, if it is armed and unmasked. May be
    /// `<= now` when an expiry is due but not yet consumed (e.g. a TSC deadline written
    /// in the past): the engine fires it at once.
    pub fn next_fire(&self) -> Option<SimTime> {
        if self.masked() {
            return None;
        }
        self.next_expiry()
    }

    fn next_expiry(&self) -> Option<SimTime> {
        match self.mode() {
            TimerMode::TscDeadline => {
                if self.deadline == 0 {
                    None
                } else {
                    ps_for_cycles(self.tsc, self.deadline as u128).map(SimTime)
                }
            }
            TimerMode::OneShot => {
                let run = self.run?;
                run.owed
                    .or_else(|| (run.consumed == 0).then(|| self.expiry(&run, 0)).flatten())
            }
            TimerMode::Periodic => {
                let run = self.run?;
                run.owed.or_else(|| self.expiry(&run, run.consumed))
            }
        }
    }

    /// Consumes every expiry at or before `now`. Returns how many there were
    /// (periodic expiries missed by a late caller merge into one interrupt).
    fn consume(&mut self, now: SimTime) -> u64 {
        match self.mode() {
            TimerMode::TscDeadline => match self.next_expiry() {
                Some(t) if t <= now => {
                    self.deadline = 0;
                    1
                }
                _ => 0,
            },
            TimerMode::OneShot | TimerMode::Periodic => {
                let Some(mut run) = self.run else { return 0 };
                let due = self.expiries_by(&run, now);
                let owed = run.owed.is_some_and(|t| t <= now);
                if owed {
                    run.owed = None;
                }
                let n = due.saturating_sub(run.consumed) + owed as u64;
                run.consumed = run.consumed.max(due);
                if self.mode() == TimerMode::OneShot && run.consumed > 0 {
                    // The count stays at 0; the initial-count register keeps its value.
                    self.run = None;
                } else {
                    self.run = Some(run);
                }
                n
            }
        }
    }

    /// The engine's timer event at `now`. Returns the LVT vector if an expiry was due
    /// and the entry is unmasked; re-arms a periodic timer and disarms the others.
    /// A stale call (nothing due) returns `None` and changes nothing.
    pub fn fire(&mut self, now: SimTime) -> Option<Vector> {
        let n = self.consume(now);
        (n > 0 && !self.masked()).then_some(Vector((self.lvt & LVT_VECTOR_MASK) as u8))
    }

    /// Writes the LVT timer register (already checked for reserved bits by the caller).
    pub fn write_lvt(&mut self, now: SimTime, value: u32) {
        if self.masked() {
            // Expiries while masked are lost, not delivered on unmask.
            self.consume(now);
        }
        let old = self.mode();
        let rebased = self.rebased(now);
        self.lvt = value;
        let new = self.mode();
        if (old == TimerMode::TscDeadline) != (new == TimerMode::TscDeadline) {
            self.run = None;
            self.initial = 0;
            self.deadline = 0;
        } else if old == TimerMode::Periodic && new == TimerMode::OneShot && self.run.is_some() {
            // Finish the period in progress, then stop.
            self.run = rebased;
        }
    }

    /// The running countdown restated as starting at the last count boundary at or
    /// before `now`, with the count it had there, and carrying an expiry that fell due
    /// and was not consumed yet. `None` if it has reached 0 and owes nothing.
    fn rebased(&self, now: SimTime) -> Option<Run> {
        let run = self.run?;
        let owed = run.owed.or_else(|| {
            (self.expiries_by(&run, now) > run.consumed)
                .then(|| self.expiry(&run, run.consumed))
                .flatten()
        });
        let ticks = self.clock.cycles_in(now.since(run.start)) / self.divide();
        let count = self.current_count(now);
        let ps = ps_for_cycles(self.clock, ticks as u128 * self.divide() as u128)?;
        let start = SimTime(run.start.0 + ps);
        if count != 0 {
            Some(Run {
                start,
                start_count: count,
                consumed: 0,
                owed,
            })
        } else {
            // A one-shot at 0: nothing more to count, only the owed expiry to fire.
            owed.map(|t| Run {
                start,
                start_count: 1,
                consumed: 1,
                owed: Some(t),
            })
        }
    }

    /// Forces the mask bit (software disable, SDM 11.4.7.2).
    pub fn mask(&mut self) {
        self.lvt |= LVT_MASKED;
    }

    /// Writes the initial-count register: ignored in TSC-deadline mode; 0 stops the
    /// timer; any other value (re)starts the countdown at `now`.
    pub fn write_initial(&mut self, now: SimTime, value: u32) {
        if self.mode() == TimerMode::TscDeadline {
            return;
        }
        self.initial = value;
        self.run = (value != 0).then_some(Run {
            start: now,
            start_count: value,
            consumed: 0,
            owed: None,
        });
    }

    /// Writes the divide configuration register (caller checked reserved bits). A
    /// running count continues from where it is at the new rate; an expiry already due
    /// stays due.
    pub fn write_divide(&mut self, now: SimTime, value: u32) {
        self.run = self.rebased(now);
        self.dcr = value;
    }

    /// Writes IA32_TSC_DEADLINE: ignored outside TSC-deadline mode; 0 disarms.
    pub fn write_deadline(&mut self, value: u64) {
        if self.mode() == TimerMode::TscDeadline {
            self.deadline = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE_SHOT: u32 = 0x40;
    const PERIODIC: u32 = 0x40 | 1 << LVT_TIMER_MODE_SHIFT;
    const DEADLINE: u32 = 0x40 | 2 << LVT_TIMER_MODE_SHIFT;

    /// 25 MHz timer clock (40 ns per tick), 1 GHz TSC (1 ns per tick).
    fn timer() -> ApicTimer {
        ApicTimer::new(Freq::from_mhz(25).unwrap(), Freq::from_mhz(1000).unwrap())
    }
    fn ns(n: u64) -> SimTime {
        SimTime(n * 1000)
    }

    #[test]
    fn divide_values_follow_figure_11_10() {
        let want = [
            (0b0000, 2),
            (0b0001, 4),
            (0b0010, 8),
            (0b0011, 16),
            (0b1000, 32),
            (0b1001, 64),
            (0b1010, 128),
            (0b1011, 1),
        ];
        for (dcr, div) in want {
            assert_eq!(divide_value(dcr), div, "dcr={dcr:#b}");
        }
    }

    #[test]
    fn one_shot_counts_down_and_fires_once() {
        let mut t = timer();
        t.write_lvt(ns(0), ONE_SHOT);
        t.write_divide(ns(0), 0b1011); // divide by 1: 40 ns per count
        t.write_initial(ns(100), 10);
        assert_eq!(t.next_fire(), Some(ns(500)));
        assert_eq!(t.current_count(ns(100)), 10);
        assert_eq!(t.current_count(ns(180)), 8);
        assert_eq!(t.fire(ns(499)), None, "stale call changes nothing");
        assert_eq!(t.fire(ns(500)), Some(Vector(0x40)));
        assert_eq!(t.current_count(ns(600)), 0);
        assert_eq!(t.initial_count(), 10);
        assert_eq!(t.next_fire(), None);
        assert_eq!(t.fire(ns(1000)), None);
    }

    #[test]
    fn periodic_rearms_from_its_own_schedule() {
        let mut t = timer();
        t.write_lvt(ns(0), PERIODIC);
        t.write_divide(ns(0), 0b0000); // divide by 2: 80 ns per count
        t.write_initial(ns(0), 5); // 400 ns period
        assert_eq!(t.next_fire(), Some(ns(400)));
        assert_eq!(t.fire(ns(400)), Some(Vector(0x40)));
        assert_eq!(t.next_fire(), Some(ns(800)));
        assert_eq!(t.current_count(ns(400)), 5);
        assert_eq!(t.current_count(ns(480)), 4);
        // A late engine: two periods missed merge into one interrupt, no drift.
        assert_eq!(t.fire(ns(1700)), Some(Vector(0x40)));
        assert_eq!(t.next_fire(), Some(ns(2000)));
        // Initial count 0 stops it.
        t.write_initial(ns(1800), 0);
        assert_eq!(t.next_fire(), None);
        assert_eq!(t.current_count(ns(1900)), 0);
    }

    #[test]
    fn masked_timer_counts_but_does_not_fire_and_forgets_expiries() {
        let mut t = timer();
        t.write_lvt(ns(0), ONE_SHOT | LVT_MASKED);
        t.write_divide(ns(0), 0b1011);
        t.write_initial(ns(0), 10);
        assert_eq!(t.next_fire(), None);
        assert_eq!(t.current_count(ns(200)), 5);
        t.write_lvt(ns(600), ONE_SHOT); // unmask after the expiry at 400 ns
        assert_eq!(t.next_fire(), None);
        assert_eq!(t.fire(ns(700)), None);
    }

    #[test]
    fn divide_change_continues_from_current_count() {
        let mut t = timer();
        t.write_lvt(ns(0), ONE_SHOT);
        t.write_divide(ns(0), 0b1011); // 40 ns per count
        t.write_initial(ns(0), 10);
        t.write_divide(ns(200), 0b0000); // 5 left, now 80 ns each
        assert_eq!(t.current_count(ns(200)), 5);
        assert_eq!(t.next_fire(), Some(ns(600)));
    }

    #[test]
    fn tsc_deadline_fires_once_and_clears() {
        let mut t = timer();
        t.write_lvt(ns(0), DEADLINE);
        t.write_initial(ns(0), 100); // ignored in this mode
        assert_eq!(t.initial_count(), 0);
        assert_eq!(t.current_count(ns(10)), 0);
        t.write_deadline(5_000); // 1 GHz TSC: 5 us
        assert_eq!(t.tsc_deadline(), 5_000);
        assert_eq!(t.next_fire(), Some(ns(5_000)));
        assert_eq!(t.fire(ns(5_000)), Some(Vector(0x40)));
        assert_eq!(t.tsc_deadline(), 0);
        assert_eq!(t.next_fire(), None);
        // A deadline in the past is due at once.
        t.write_deadline(10);
        assert!(t.next_fire().unwrap() <= ns(6_000));
        assert_eq!(t.fire(ns(6_000)), Some(Vector(0x40)));
        // An unreachable deadline never fires rather than overflowing.
        t.write_deadline(u64::MAX);
        let _ = t.next_fire();
        assert_eq!(t.tsc_at(ns(7)), 7);
    }

    #[test]
    fn mode_switch_through_tsc_deadline_disarms() {
        let mut t = timer();
        t.write_lvt(ns(0), PERIODIC);
        t.write_initial(ns(0), 100);
        t.write_lvt(ns(10), DEADLINE);
        assert_eq!((t.initial_count(), t.next_fire()), (0, None));
        t.write_deadline(1_000_000);
        t.write_lvt(ns(20), ONE_SHOT);
        assert_eq!((t.tsc_deadline(), t.next_fire()), (0, None));
        // Deadline writes outside TSC-deadline mode are ignored.
        t.write_deadline(5);
        assert_eq!(t.tsc_deadline(), 0);
    }

    #[test]
    fn periodic_to_one_shot_fires_once_more() {
        let mut t = timer();
        t.write_lvt(ns(0), PERIODIC);
        t.write_divide(ns(0), 0b1011);
        t.write_initial(ns(0), 10); // 400 ns period
        assert_eq!(t.fire(ns(400)), Some(Vector(0x40)));
        t.write_lvt(ns(500), ONE_SHOT);
        assert_eq!(t.next_fire(), Some(ns(800)));
        assert_eq!(t.fire(ns(800)), Some(Vector(0x40)));
        assert_eq!(t.next_fire(), None);
    }

    #[test]
    fn divide_register_reads_back() {
        let mut t = timer();
        assert_eq!(t.divide_config(), 0, "reset: divide by 2");
        t.write_divide(ns(0), 0b1010);
        assert_eq!(t.divide_config(), 0b1010);
    }

    /// The rebase after a divide change counts whole ticks of the old divisor.
    #[test]
    fn divide_change_from_a_divisor_above_one() {
        let mut t = timer();
        t.write_lvt(ns(0), PERIODIC);
        t.write_divide(ns(0), 0b0000); // 80 ns per count
        t.write_initial(ns(0), 10); // 800 ns period
        t.write_divide(ns(250), 0b1011); // 3 counts gone, 7 left at 40 ns each
        assert_eq!(t.current_count(ns(250)), 7);
        assert_eq!(t.next_fire(), Some(ns(240 + 7 * 40)));
        assert_eq!(t.fire(ns(520)), Some(Vector(0x40)));
        // The next period reloads the full initial count at the new rate: 400 ns.
        assert_eq!(t.next_fire(), Some(ns(920)));
        assert_eq!(
            t.current_count(ns(600)),
            8,
            "2 of 10 counts into the second period"
        );
    }

    #[test]
    fn one_shot_past_its_expiry_reads_zero_before_the_engine_fires() {
        let mut t = timer();
        t.write_lvt(ns(0), ONE_SHOT);
        t.write_divide(ns(0), 0b1011);
        t.write_initial(ns(0), 10);
        assert_eq!(t.current_count(ns(400)), 0);
        assert_eq!(t.current_count(ns(1000)), 0);
    }

    /// A one-shot timer that has fired stays stopped: switching it to periodic does not
    /// restart it (the count is 0 until the initial count is written again).
    #[test]
    fn a_fired_one_shot_stays_stopped_in_periodic_mode() {
        let mut t = timer();
        t.write_lvt(ns(0), ONE_SHOT);
        t.write_divide(ns(0), 0b1011);
        t.write_initial(ns(0), 10);
        assert_eq!(t.fire(ns(400)), Some(Vector(0x40)));
        t.write_lvt(ns(500), PERIODIC);
        assert_eq!(t.next_fire(), None);
        assert_eq!(t.current_count(ns(900)), 0);
    }

    #[test]
    fn a_deadline_not_yet_reached_is_kept_by_an_early_call() {
        let mut t = timer();
        t.write_lvt(ns(0), DEADLINE);
        t.write_deadline(5_000);
        assert_eq!(t.fire(ns(4_999)), None);
        assert_eq!(t.tsc_deadline(), 5_000);
        assert_eq!(t.next_fire(), Some(ns(5_000)));
    }

    /// An expiry that is due but not yet fired survives an LVT rewrite (a new vector,
    /// the same mode) and a divide change: neither may restart the period.
    #[test]
    fn a_due_expiry_survives_lvt_and_divide_writes() {
        let periodic = || {
            let mut t = timer();
            t.write_lvt(ns(0), PERIODIC);
            t.write_divide(ns(0), 0b1011);
            t.write_initial(ns(0), 10); // due at 400 ns
            t
        };
        let mut t = periodic();
        t.write_lvt(ns(450), PERIODIC | 0x01);
        assert_eq!(t.next_fire(), Some(ns(400)));
        assert_eq!(t.fire(ns(450)), Some(Vector(0x41)));
        assert_eq!(t.next_fire(), Some(ns(800)));

        let mut t = periodic();
        t.write_divide(ns(450), 0b0000);
        assert_eq!(t.next_fire(), Some(ns(400)));
        assert_eq!(t.fire(ns(450)), Some(Vector(0x40)));
    }
}

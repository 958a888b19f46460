//! Arrival processes: when the next event of a source happens.
//!
//! Two layers:
//! - [`ArrivalProcess`]: the stateless kinds (fixed interval, Poisson). `next_gap`
//!   draws a gap from the caller's random stream; nothing else is kept.
//! - [`ArrivalSpec`]: every kind a scenario may ask for, a superset of
//!   `ArrivalProcess` with the same TOML shape for `fixed` and `poisson`, plus on/off
//!   periods, bursts and trace replay. Those need per-source state, so a spec is turned
//!   into an [`ArrivalGenerator`] (one per device or queue), which also loads a trace
//!   file once. The spec itself stays small and cheap to clone (a trace is a path).
//!
//! DSA devices (`[[devices]]`) take the stateless kinds only; NIC queues (`rx`, `tx`
//! of `[[nics]]`) take every kind.
//!
//! ```toml
//! arrival = { kind = "fixed", interval_ns = 250 }
//! arrival = { kind = "poisson", rate_per_s = 4e6 }
//! rx = { kind = "trace", path = "traces/rx.csv" }             # rebase = false
//!
//! [nics.rx]                                                   # spacing = "poisson" | "fixed"
//! kind = "on_off"
//! rate_per_s = 1e7
//! on_ns = { kind = "exponential", mean = 5000 }
//! off_ns = { kind = "pareto", scale = 2000, shape = 1.5 }
//!
//! [nics.tx]
//! kind = "bursts"
//! burst_len = { kind = "geometric", mean = 16 }
//! gap_ns = { kind = "exponential", mean = 20000 }
//! spacing_ns = 67.2
//! ```
//!
//! Neither layer keeps a clock: a generator remembers only the time of its own previous
//! event, starting from the origin the caller gives it.

use std::path::{Path, PathBuf};

use rand::Rng;
use serde::{Deserialize, Serialize};
use sim_core::{Duration, SimTime, PS_PER_S};

use crate::dist::Dist;
use crate::trace::{TraceArrival, TraceError};
use crate::DeviceError;

/// How a source spaces its events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ArrivalProcess {
    /// One event every `interval_ns` nanoseconds, exactly.
    Fixed { interval_ns: f64 },
    /// Exponentially distributed gaps with mean 1 / `rate_per_s`.
    Poisson { rate_per_s: f64 },
}

impl ArrivalProcess {
    /// A fixed process at `rate_per_s` events per second.
    pub fn fixed_rate(rate_per_s: f64) -> ArrivalProcess {
        ArrivalProcess::Fixed {
            interval_ns: 1e9 / rate_per_s,
        }
    }

    /// Mean events per second.
    pub fn mean_rate_per_s(&self) -> f64 {
        match *self {
            ArrivalProcess::Fixed { interval_ns } => 1e9 / interval_ns,
            ArrivalProcess::Poisson { rate_per_s } => rate_per_s,
        }
    }

    /// Checks the parameters; `field` names where they came from for the error.
    pub fn validate(&self, field: &str) -> Result<(), DeviceError> {
        let (name, value) = match *self {
            ArrivalProcess::Fixed { interval_ns } => ("interval_ns", interval_ns),
            ArrivalProcess::Poisson { rate_per_s } => ("rate_per_s", rate_per_s),
        };
        if !(value.is_finite() && value > 0.0) {
            return Err(DeviceError::InvalidParameter {
                field: format!("{field}.{name}"),
                value: value.to_string(),
                allowed: "a finite number greater than zero".into(),
            });
        }
        // A gap below one picosecond cannot be represented and would stall time.
        let mean_gap_ps = match *self {
            ArrivalProcess::Fixed { interval_ns } => interval_ns * 1e3,
            ArrivalProcess::Poisson { rate_per_s } => PS_PER_S as f64 / rate_per_s,
        };
        if mean_gap_ps < 1.0 {
            return Err(DeviceError::InvalidParameter {
                field: format!("{field}.{name}"),
                value: value.to_string(),
                allowed: "a mean gap of at least 1 ps (rate at most 1e12 per second)".into(),
            });
        }
        Ok(())
    }

    /// Counts the events from `first` (drawn, not yet used) through `until` without
    /// stepping through them, with the first event after `until`; `None` when the
    /// caller should step instead. Fixed spacing is closed form and exact. A Poisson
    /// process expecting at least [`BULK_POISSON_EVENTS`] draws the count and starts
    /// afresh at `until` (memoryless); fewer are left to stepping, so light overload
    /// draws the same numbers as event-by-event use. The draw uses the nominal rate;
    /// stepping rounds each gap to whole picoseconds (at least 1), which differs only
    /// for mean gaps of a few picoseconds.
    pub fn count_through<R: Rng + ?Sized>(
        &self,
        first: SimTime,
        until: SimTime,
        rng: &mut R,
    ) -> Option<(u64, SimTime)> {
        let span_ps = until.as_ps().checked_sub(first.as_ps())?;
        match *self {
            ArrivalProcess::Fixed { .. } => {
                let gap = self.next_gap(rng).as_ps();
                let n = span_ps / gap + 1;
                Some((n, SimTime(first.as_ps() + n * gap)))
            }
            ArrivalProcess::Poisson { rate_per_s } => {
                let expected = rate_per_s * span_ps as f64 / PS_PER_S as f64;
                if below_bulk_threshold(expected, BULK_POISSON_EVENTS) {
                    return None;
                }
                let more = poisson_count(expected, rng);
                Some((1 + more, until + self.next_gap(rng)))
            }
        }
    }

    /// The gap to the next event. Never zero, so a source always makes progress.
    pub fn next_gap<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        let gap = match *self {
            ArrivalProcess::Fixed { interval_ns } => Duration::from_ns_f64(interval_ns),
            ArrivalProcess::Poisson { rate_per_s } => {
                // Inverse-CDF sampling; 1 - u is in (0, 1] so ln never sees zero.
                let u: f64 = rng.gen();
                let secs = -(1.0 - u).ln() / rate_per_s;
                Duration::from_secs_f64(secs)
            }
        };
        if gap.as_ps() == 0 {
            Duration::from_ps(1)
        } else {
            gap
        }
    }
}

/// A Poisson-distributed count with mean `expected` (0 for a mean the distribution
/// refuses: zero, negative or not finite).
fn poisson_count<R: Rng + ?Sized>(expected: f64, rng: &mut R) -> u64 {
    rand_distr::Poisson::new(expected)
        .map(|d| rng.sample(d) as u64)
        .unwrap_or(0)
}

/// How events are spaced inside an ON period of [`ArrivalSpec::OnOff`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Spacing {
    /// A Poisson process at `rate_per_s` that only runs while ON.
    #[default]
    Poisson,
    /// One event at the start of each ON period, then one every `1 / rate_per_s`
    /// while the period lasts.
    Fixed,
}

/// Every arrival process a device may be given. `fixed` and `poisson` have exactly
/// the shape and meaning of [`ArrivalProcess`]; the other kinds need an
/// [`ArrivalGenerator`] (see the module docs for TOML examples).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ArrivalSpec {
    /// One event every `interval_ns` nanoseconds, the first one interval after the origin.
    Fixed { interval_ns: f64 },
    /// Exponentially distributed gaps with mean 1 / `rate_per_s`.
    Poisson { rate_per_s: f64 },
    /// Alternating ON and OFF periods, starting with ON at the origin. Events occur only
    /// while ON, at `rate_per_s` spaced as `spacing` says. Period lengths in ns.
    OnOff {
        rate_per_s: f64,
        on_ns: Dist,
        off_ns: Dist,
        #[serde(default)]
        spacing: Spacing,
    },
    /// Bursts of `burst_len` events (a count: samples are rounded, at least 1) spaced
    /// `spacing_ns` apart (0: all at one instant); `gap_ns` separates the last event of
    /// a burst from the first of the next, and the origin from the first burst.
    Bursts {
        burst_len: Dist,
        gap_ns: Dist,
        #[serde(default)]
        spacing_ns: f64,
    },
    /// Replay of a CSV file of timestamps (see [`crate::trace`]); relative paths are
    /// resolved against the directory the caller gives (the scenario file's). The
    /// source stops when the trace ends.
    Trace {
        path: PathBuf,
        #[serde(default)]
        rebase: bool,
    },
}

/// Expected events in a [`ArrivalGenerator::skip_through`] interval from which a
/// Poisson process draws their count instead of stepping through them.
pub const BULK_POISSON_EVENTS: f64 = 4096.0;

/// Expected bursts in a [`ArrivalGenerator::skip_through`] interval from which bursts
/// of random length or gap draw their event count at once (renewal-reward central
/// limit) instead of stepping burst by burst. At this many bursts the count's relative
/// spread is under 2% of its mean for any length and gap with a finite variance, and
/// the normal approximation's error is smaller than that spread.
pub const BULK_BURST_CYCLES: f64 = 4096.0;

/// Whether an interval expecting `expected` events (or burst cycles) is stepped
/// rather than counted in bulk. Either side of the threshold gives the same
/// distribution, so where exactly it falls is not observable.
fn below_bulk_threshold(expected: f64, threshold: f64) -> bool {
    expected < threshold
}

/// Smallest mean ON period, ns: a shorter one rounds to nothing in picoseconds.
pub const MIN_MEAN_ON_NS: f64 = 1.0;

/// Fewest events a Poisson ON period must hold on average. Drawing one event walks
/// about `1 / (rate * mean ON)` periods, so this bounds that walk to ~1000 periods.
pub const MIN_EVENTS_PER_ON_PERIOD: f64 = 1e-3;

impl From<ArrivalProcess> for ArrivalSpec {
    fn from(p: ArrivalProcess) -> ArrivalSpec {
        match p {
            ArrivalProcess::Fixed { interval_ns } => ArrivalSpec::Fixed { interval_ns },
            ArrivalProcess::Poisson { rate_per_s } => ArrivalSpec::Poisson { rate_per_s },
        }
    }
}

impl ArrivalSpec {
    /// The stateless form, for `fixed` and `poisson`.
    pub fn as_process(&self) -> Option<ArrivalProcess> {
        match *self {
            ArrivalSpec::Fixed { interval_ns } => Some(ArrivalProcess::Fixed { interval_ns }),
            ArrivalSpec::Poisson { rate_per_s } => Some(ArrivalProcess::Poisson { rate_per_s }),
            _ => None,
        }
    }

    /// Mean events per second; `None` for a trace, whose rate is known once loaded
    /// ([`ArrivalGenerator::mean_rate_per_s`]). For `on_off` with fixed spacing and for
    /// bursts with a non-integer length distribution this is the rate before rounding
    /// (events per ON period, burst lengths), an approximation.
    pub fn mean_rate_per_s(&self) -> Option<f64> {
        match self {
            ArrivalSpec::Fixed { .. } | ArrivalSpec::Poisson { .. } => {
                self.as_process().map(|p| p.mean_rate_per_s())
            }
            ArrivalSpec::OnOff {
                rate_per_s,
                on_ns,
                off_ns,
                ..
            } => Some(rate_per_s * on_ns.mean() / (on_ns.mean() + off_ns.mean())),
            ArrivalSpec::Bursts {
                burst_len,
                gap_ns,
                spacing_ns,
            } => {
                let len = burst_len.mean().max(1.0);
                let cycle_ns = (len - 1.0) * spacing_ns + gap_ns.mean();
                Some(len / (cycle_ns * 1e-9))
            }
            ArrivalSpec::Trace { .. } => None,
        }
    }

    /// Checks the parameters (not the trace file: [`ArrivalSpec::generator`] reads it);
    /// `field` names where they came from for the error.
    pub fn validate(&self, field: &str) -> Result<(), DeviceError> {
        let bad = |name: &str, value: String, allowed: &str| {
            Err(DeviceError::InvalidParameter {
                field: format!("{field}.{name}"),
                value,
                allowed: allowed.into(),
            })
        };
        match self {
            ArrivalSpec::Fixed { .. } | ArrivalSpec::Poisson { .. } => {
                self.as_process().expect("simple kind").validate(field)
            }
            ArrivalSpec::OnOff {
                rate_per_s,
                on_ns,
                off_ns,
                spacing,
            } => {
                ArrivalProcess::Poisson {
                    rate_per_s: *rate_per_s,
                }
                .validate(field)?;
                on_ns.validate(&format!("{field}.on_ns"))?;
                off_ns.validate(&format!("{field}.off_ns"))?;
                if on_ns.mean() < MIN_MEAN_ON_NS {
                    return bad(
                        "on_ns",
                        format!("mean {}", on_ns.mean()),
                        "a distribution with a mean of at least 1 ns",
                    );
                }
                let per_period = rate_per_s * on_ns.mean() * 1e-9;
                if *spacing == Spacing::Poisson && per_period < MIN_EVENTS_PER_ON_PERIOD {
                    return bad(
                        "rate_per_s",
                        rate_per_s.to_string(),
                        "rate_per_s * mean ON time >= 0.001 events per ON period",
                    );
                }
                Ok(())
            }
            ArrivalSpec::Bursts {
                burst_len,
                gap_ns,
                spacing_ns,
            } => {
                burst_len.validate(&format!("{field}.burst_len"))?;
                gap_ns.validate(&format!("{field}.gap_ns"))?;
                if !(spacing_ns.is_finite() && (0.0..=crate::dist::DIST_MAX).contains(spacing_ns)) {
                    return bad(
                        "spacing_ns",
                        spacing_ns.to_string(),
                        "a finite number in 0..=1e12",
                    );
                }
                if gap_ns.mean() < 1e-3 {
                    return bad(
                        "gap_ns",
                        format!("mean {}", gap_ns.mean()),
                        "a distribution with a mean of at least 0.001 ns (1 ps), so bursts advance time",
                    );
                }
                Ok(())
            }
            ArrivalSpec::Trace { path, .. } => {
                if path.as_os_str().is_empty() {
                    return bad(
                        "path",
                        "\"\"".into(),
                        "the path of a CSV file of timestamps",
                    );
                }
                Ok(())
            }
        }
    }

    /// Validates and builds the per-source generator; a trace is read here, its relative
    /// path resolved against `base_dir` when given. Errors name `field` (or, for a
    /// malformed trace, the file and line: see [`TraceError`]).
    pub fn generator(
        &self,
        field: &str,
        base_dir: Option<&Path>,
    ) -> Result<ArrivalGenerator, DeviceError> {
        self.validate(field)?;
        let state = match self {
            ArrivalSpec::Fixed { .. } | ArrivalSpec::Poisson { .. } => {
                GenState::Simple(self.as_process().expect("simple kind"))
            }
            ArrivalSpec::OnOff {
                rate_per_s,
                on_ns,
                off_ns,
                spacing,
            } => GenState::OnOff {
                rate_per_s: *rate_per_s,
                on: on_ns.clone(),
                off: off_ns.clone(),
                spacing: *spacing,
                interval: Duration::from_secs_f64(1.0 / rate_per_s).max(Duration::from_ps(1)),
                on_end: None,
                fresh_period: true,
            },
            ArrivalSpec::Bursts {
                burst_len,
                gap_ns,
                spacing_ns,
            } => GenState::Bursts {
                len: burst_len.clone(),
                gap: gap_ns.clone(),
                spacing: Duration::from_ns_f64(*spacing_ns),
                left_in_burst: 0,
            },
            ArrivalSpec::Trace { path, rebase } => {
                let full = match base_dir {
                    Some(dir) if path.is_relative() => dir.join(path),
                    _ => path.clone(),
                };
                let trace = TraceArrival::load(&full, *rebase).map_err(|e| {
                    // Name the scenario field first, then the file and line.
                    let DeviceError::InvalidParameter {
                        field: at,
                        value,
                        allowed,
                    } = DeviceError::from(e);
                    DeviceError::InvalidParameter {
                        field: format!("{field}.path ({at})"),
                        value,
                        allowed,
                    }
                })?;
                GenState::Trace { trace, next: 0 }
            }
        };
        Ok(ArrivalGenerator {
            state,
            origin: SimTime::ZERO,
            last: SimTime::ZERO,
            emitted: 0,
        })
    }
}

/// The per-source state of an arrival process: yields absolute event times, one after
/// the other, from an origin. Build it with [`ArrivalSpec::generator`],
/// [`ArrivalGenerator::from_process`] or [`ArrivalGenerator::from_trace`]; give it the
/// start time with [`ArrivalGenerator::restart`]; then call
/// [`ArrivalGenerator::next_arrival`] each time the previous event has happened.
#[derive(Clone, Debug)]
pub struct ArrivalGenerator {
    state: GenState,
    origin: SimTime,
    last: SimTime,
    emitted: u64,
}

#[derive(Clone, Debug)]
enum GenState {
    Simple(ArrivalProcess),
    OnOff {
        rate_per_s: f64,
        on: Dist,
        off: Dist,
        spacing: Spacing,
        interval: Duration,
        /// End of the current ON period; `None` before the first event is drawn.
        on_end: Option<SimTime>,
        /// The next fixed-spacing event is the first of its period.
        fresh_period: bool,
    },
    Bursts {
        len: Dist,
        gap: Dist,
        spacing: Duration,
        left_in_burst: u64,
    },
    Trace {
        trace: TraceArrival,
        next: usize,
    },
}

impl ArrivalGenerator {
    /// A generator for a stateless process (assumed validated).
    pub fn from_process(p: ArrivalProcess) -> ArrivalGenerator {
        ArrivalGenerator {
            state: GenState::Simple(p),
            origin: SimTime::ZERO,
            last: SimTime::ZERO,
            emitted: 0,
        }
    }

    /// A generator replaying a loaded trace.
    pub fn from_trace(trace: TraceArrival) -> ArrivalGenerator {
        ArrivalGenerator {
            state: GenState::Trace { trace, next: 0 },
            origin: SimTime::ZERO,
            last: SimTime::ZERO,
            emitted: 0,
        }
    }

    /// Loads a trace file and wraps it (the typed error names file and line).
    pub fn load_trace(path: &Path, rebase: bool) -> Result<ArrivalGenerator, TraceError> {
        TraceArrival::load(path, rebase).map(ArrivalGenerator::from_trace)
    }

    /// Starts over from `origin`: the next event is the process's first one after it.
    pub fn restart(&mut self, origin: SimTime) {
        self.origin = origin;
        self.last = origin;
        self.emitted = 0;
        match &mut self.state {
            GenState::Simple(_) => {}
            GenState::OnOff {
                on_end,
                fresh_period,
                ..
            } => {
                *on_end = None;
                *fresh_period = true;
            }
            GenState::Bursts { left_in_burst, .. } => *left_in_burst = 0,
            GenState::Trace { next, .. } => *next = 0,
        }
    }

    /// The time of the next event, never before the previous one; `None` once a trace
    /// is exhausted (the other kinds never end).
    pub fn next_arrival<R: Rng + ?Sized>(&mut self, rng: &mut R) -> Option<SimTime> {
        let last = self.last;
        let t = match &mut self.state {
            GenState::Simple(p) => last + p.next_gap(rng),
            GenState::OnOff {
                rate_per_s,
                on,
                off,
                spacing,
                interval,
                on_end,
                fresh_period,
            } => {
                let sample = |d: &Dist, rng: &mut R| Duration::from_ns_f64(d.sample(rng));
                let mut end = match *on_end {
                    Some(e) => e,
                    None => last + sample(on, rng),
                };
                let mut t = match spacing {
                    Spacing::Poisson => {
                        last + ArrivalProcess::Poisson {
                            rate_per_s: *rate_per_s,
                        }
                        .next_gap(rng)
                    }
                    Spacing::Fixed if *fresh_period => last,
                    Spacing::Fixed => last + *interval,
                };
                // Past the ON period: skip the OFF period. A Poisson draw carries its
                // overshoot into the next ON period (memoryless); fixed spacing restarts
                // at the period's start.
                while t >= end {
                    let overshoot = t - end;
                    let start = end + sample(off, rng);
                    end = start + sample(on, rng);
                    t = match spacing {
                        Spacing::Poisson => start + overshoot,
                        Spacing::Fixed => start,
                    };
                }
                *on_end = Some(end);
                *fresh_period = false;
                t
            }
            GenState::Bursts {
                len,
                gap,
                spacing,
                left_in_burst,
            } => {
                if *left_in_burst == 0 {
                    *left_in_burst = len.sample_count(rng) - 1;
                    last + Duration::from_ns_f64(gap.sample(rng))
                } else {
                    *left_in_burst -= 1;
                    last + *spacing
                }
            }
            GenState::Trace { trace, next } => {
                let ns = *trace.times_ns().get(*next)?;
                *next += 1;
                SimTime(self.origin.as_ps().checked_add(ns.checked_mul(1_000)?)?)
            }
        };
        self.last = t;
        self.emitted += 1;
        Some(t)
    }

    /// Counts the events from `first` (the one [`next_arrival`](Self::next_arrival)
    /// returned last, not yet used) through `until`, consuming them, and returns that
    /// count with the first event after `until` (`None` once a trace ends). For a
    /// caller to whom those events are all alike (drops at a full ring), so the work
    /// does not grow with their number where the kind allows: fixed and Poisson
    /// processes as [`ArrivalProcess::count_through`], a trace by binary search, a
    /// burst at one instant whole.
    pub fn skip_through<R: Rng + ?Sized>(
        &mut self,
        first: SimTime,
        until: SimTime,
        rng: &mut R,
    ) -> (u64, Option<SimTime>) {
        if first > until {
            return (0, Some(first));
        }
        match &mut self.state {
            GenState::Simple(p) => match p.count_through(first, until, rng) {
                Some((n, next)) => {
                    // The counted events and the next one are yielded.
                    self.last = next;
                    self.emitted += n;
                    (n, Some(next))
                }
                None => self.step_through(until, rng),
            },
            GenState::Trace { trace, next } => {
                // Events through `until`, from the next unread one on.
                let limit_ns = (until.as_ps() - self.origin.as_ps().min(until.as_ps())) / 1_000;
                let times = trace.times_ns();
                let end = *next + times[*next..].partition_point(|&t| t <= limit_ns);
                let n = 1 + (end - *next) as u64;
                *next = end;
                self.emitted += n - 1;
                (n, self.next_arrival(rng))
            }
            GenState::Bursts {
                len: len @ Dist::Fixed { .. },
                gap: gap @ Dist::Fixed { .. },
                spacing,
                ..
            } => {
                // Fixed samples draw nothing from `rng`.
                let burst = len.sample_count(rng);
                let spacing_ps = spacing.as_ps();
                let cycle_ps = Duration::from_ns_f64(gap.sample(rng))
                    .as_ps()
                    .saturating_add((burst - 1).saturating_mul(spacing_ps));
                self.fixed_bursts_through(until, burst, cycle_ps, rng)
            }
            GenState::Bursts { .. } => self.random_bursts_through(until, rng),
            GenState::OnOff { .. } => self.on_off_through(until, rng),
        }
    }

    /// [`skip_through`](Self::skip_through) for bursts whose length or gap is random.
    /// The rest of the current burst is closed form. When the rest of the interval
    /// expects at least [`BULK_BURST_CYCLES`] bursts, their events are counted in one
    /// draw from the renewal-reward central limit: with burst length `L`, cycle
    /// `C = gap + (L - 1) * spacing` and `r = E[L] / E[C]`, the count over a span `W`
    /// is normal with mean `W * r` and variance `W * Var(L - r * C) / E[C]`, and the
    /// process starts afresh at `until` as if a burst had ended there (the next event
    /// is a gap later). Fewer bursts are stepped, so light overload draws the same
    /// numbers as event-by-event use. A length or gap with infinite variance (Pareto
    /// with shape at most 2) is counted at its mean. The moments are those before
    /// [`crate::dist::DIST_MAX`] caps samples and before lengths and gaps are rounded
    /// (stepping rounds each gap to whole picoseconds, which differs only for mean
    /// gaps of a few picoseconds: 1 ps exponential gaps step to ~4% more bursts).
    fn random_bursts_through<R: Rng + ?Sized>(
        &mut self,
        until: SimTime,
        rng: &mut R,
    ) -> (u64, Option<SimTime>) {
        let counted = 1 + self.rest_of_burst_through(until);
        if !self.burst_done() {
            // The burst runs on past `until`: its next event is the first after it.
            return (counted, self.next_arrival(rng));
        }
        let GenState::Bursts {
            len, gap, spacing, ..
        } = &self.state
        else {
            unreachable!("called for bursts only");
        };
        let span_ns = until.as_ps().saturating_sub(self.last.as_ps()) as f64 / 1e3;
        let spacing_ns = spacing.as_ns_f64();
        let mean_len = len.mean().max(1.0);
        let mean_cycle_ns = gap.mean() + (mean_len - 1.0) * spacing_ns;
        if below_bulk_threshold(span_ns / mean_cycle_ns, BULK_BURST_CYCLES) {
            let (stepped, next) = self.step_through(until, rng);
            return (counted + stepped - 1, next);
        }
        let per_ns = mean_len / mean_cycle_ns;
        let mean_count = span_ns * per_ns;
        let drawn = match (len.variance(), gap.variance()) {
            (Some(var_len), Some(var_gap)) => {
                let var_residual =
                    (1.0 - per_ns * spacing_ns).powi(2) * var_len + per_ns * per_ns * var_gap;
                let spread_sd = (span_ns * var_residual / mean_cycle_ns).sqrt();
                // mean + sd * z. The normal is symmetric, so the sign of the spread is
                // not observable.
                spread_sd.mul_add(crate::dist::std_normal(rng), mean_count)
            }
            _ => mean_count,
        };
        let bulk = drawn.round().max(0.0) as u64;
        self.last = until;
        self.emitted = self.emitted.saturating_add(bulk);
        // A gap can round to 0 ps, so the next burst may still fall at `until`.
        let (stepped, next) = self.step_through(until, rng);
        (counted.saturating_add(bulk) + stepped - 1, next)
    }

    /// [`skip_through`](Self::skip_through) for ON/OFF sources, an ON period at a
    /// time: fixed spacing in closed form (the same numbers as stepping), Poisson
    /// spacing by one count draw per ON period (exact in distribution; memoryless, so
    /// the process resumes where the period or `until` cuts it). An interval expecting
    /// fewer than [`BULK_POISSON_EVENTS`] Poisson events in all is stepped, so light
    /// overload draws the same numbers as event-by-event use. The work grows with the
    /// periods, not with the events they hold.
    fn on_off_through<R: Rng + ?Sized>(
        &mut self,
        until: SimTime,
        rng: &mut R,
    ) -> (u64, Option<SimTime>) {
        let span_s = until.as_ps().saturating_sub(self.last.as_ps()) as f64 / PS_PER_S as f64;
        if matches!(
            self.state,
            GenState::OnOff {
                spacing: Spacing::Poisson,
                ..
            }
        ) && below_bulk_threshold(self.mean_rate_per_s() * span_s, BULK_POISSON_EVENTS)
        {
            return self.step_through(until, rng);
        }
        let mut n: u64 = 1;
        loop {
            let GenState::OnOff {
                rate_per_s,
                spacing,
                interval,
                on_end: Some(end),
                ..
            } = &self.state
            else {
                return self.step_through(until, rng);
            };
            // `self.last` is an event of the ON period that ends at `end`.
            let last = self.last.as_ps();
            let counted = match spacing {
                Spacing::Poisson => {
                    let stretch_ps = end.as_ps().min(until.as_ps()).saturating_sub(last);
                    let expected = rate_per_s * stretch_ps as f64 / PS_PER_S as f64;
                    self.last = SimTime(last + stretch_ps);
                    poisson_count(expected, rng)
                }
                Spacing::Fixed => {
                    // Events at `last + j * interval`, before `end` and through `until`.
                    let limit = if until < *end {
                        until.as_ps() - last
                    } else {
                        end.as_ps().saturating_sub(last + 1)
                    };
                    let interval_ps = interval.as_ps().max(1);
                    let k = limit / interval_ps;
                    self.last = SimTime(last + k * interval_ps);
                    k
                }
            };
            self.emitted = self.emitted.saturating_add(counted);
            n = n.saturating_add(counted);
            match self.next_arrival(rng) {
                Some(t) if t <= until => n += 1,
                other => return (n, other),
            }
        }
    }

    /// [`skip_through`](Self::skip_through) for bursts of a fixed length and gap: the
    /// rest of the current burst, then whole burst cycles, in closed form, so the
    /// work does not grow with the bursts (a 1 ps gap offers 10^12 a second). The
    /// counts equal [`step_through`](Self::step_through)'s: fixed samples draw nothing.
    fn fixed_bursts_through<R: Rng + ?Sized>(
        &mut self,
        until: SimTime,
        burst: u64,
        cycle_ps: u64,
        rng: &mut R,
    ) -> (u64, Option<SimTime>) {
        let mut n: u64 = 1;
        loop {
            let mut counted = self.rest_of_burst_through(until);
            // Whole bursts that end by `until`, once this one is done.
            if self.burst_done() && cycle_ps > 0 {
                let cycles = until.as_ps().saturating_sub(self.last.as_ps()) / cycle_ps;
                let advance = cycles.saturating_mul(cycle_ps);
                self.last = SimTime(self.last.as_ps().saturating_add(advance));
                let whole = cycles.saturating_mul(burst);
                self.emitted = self.emitted.saturating_add(whole);
                counted = counted.saturating_add(whole);
            }
            n = n.saturating_add(counted);
            match self.next_arrival(rng) {
                Some(t) if t <= until => n += 1,
                other => return (n, other),
            }
        }
    }

    /// Consumes the events of the current burst through `until` (spacing 0: all of
    /// them, at this instant) and returns their number.
    fn rest_of_burst_through(&mut self, until: SimTime) -> u64 {
        let GenState::Bursts {
            spacing,
            left_in_burst,
            ..
        } = &mut self.state
        else {
            unreachable!("called for bursts only");
        };
        let spacing_ps = spacing.as_ps();
        let room = until.as_ps().saturating_sub(self.last.as_ps());
        let k = room
            .checked_div(spacing_ps)
            .map_or(*left_in_burst, |fit| (*left_in_burst).min(fit));
        *left_in_burst -= k;
        let advance = k.saturating_mul(spacing_ps);
        self.last = SimTime(self.last.as_ps().saturating_add(advance));
        self.emitted = self.emitted.saturating_add(k);
        k
    }

    /// The current burst has no events left (the next one starts a burst).
    fn burst_done(&self) -> bool {
        matches!(
            self.state,
            GenState::Bursts {
                left_in_burst: 0,
                ..
            }
        )
    }

    /// [`skip_through`](Self::skip_through) one event (or one instant's burst) at a
    /// time.
    fn step_through<R: Rng + ?Sized>(
        &mut self,
        until: SimTime,
        rng: &mut R,
    ) -> (u64, Option<SimTime>) {
        let mut n = 1;
        loop {
            // A burst at one instant is taken whole.
            if let GenState::Bursts {
                spacing,
                left_in_burst,
                ..
            } = &mut self.state
            {
                if spacing.as_ps() == 0 && *left_in_burst > 0 {
                    n += *left_in_burst;
                    self.emitted += *left_in_burst;
                    *left_in_burst = 0;
                }
            }
            match self.next_arrival(rng) {
                Some(t) if t <= until => n += 1,
                other => return (n, other),
            }
        }
    }

    /// Events yielded since the last restart.
    pub fn emitted(&self) -> u64 {
        self.emitted
    }

    /// Mean events per second (see [`ArrivalSpec::mean_rate_per_s`] for the kinds
    /// where this is an approximation).
    pub fn mean_rate_per_s(&self) -> f64 {
        match &self.state {
            GenState::Simple(p) => p.mean_rate_per_s(),
            GenState::OnOff {
                rate_per_s,
                on,
                off,
                ..
            } => rate_per_s * on.mean() / (on.mean() + off.mean()),
            GenState::Bursts {
                len, gap, spacing, ..
            } => {
                let l = len.mean().max(1.0);
                let cycle_s = ((l - 1.0) * spacing.as_ns_f64() + gap.mean()) * 1e-9;
                l / cycle_s
            }
            GenState::Trace { trace, .. } => trace.mean_rate_per_s(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn skipping_a_fixed_process_or_a_burst_matches_stepping_it() {
        let fixed_bursts = |len: u32, gap_ns: f64, spacing_ns: f64| {
            format!(
                "kind = \"bursts\"\nburst_len = {{ kind = \"fixed\", value = {len} }}\n\
                 gap_ns = {{ kind = \"fixed\", value = {gap_ns:?} }}\nspacing_ns = {spacing_ns:?}"
            )
        };
        let mut specs = vec![
            r#"kind = "fixed"
interval_ns = 3.3"#
                .to_string(),
            r#"kind = "bursts"
burst_len = { kind = "geometric", mean = 6 }
gap_ns = { kind = "exponential", mean = 20 }
spacing_ns = 0.0"#
                .to_string(),
            r#"kind = "poisson"
rate_per_s = 1e9"#
                .to_string(),
        ];
        // ON/OFF: fixed spacing in closed form; Poisson stretches below the bulk
        // threshold are stepped.
        specs.push(
            "kind = \"on_off\"\nrate_per_s = 1e11\nspacing = \"fixed\"\n\
             on_ns = { kind = \"exponential\", mean = 50 }\noff_ns = { kind = \"fixed\", value = 30 }"
                .to_string(),
        );
        specs.push(
            "kind = \"on_off\"\nrate_per_s = 1e9\n\
             on_ns = { kind = \"uniform\", low = 10, high = 400 }\noff_ns = { kind = \"exponential\", mean = 30 }"
                .to_string(),
        );
        // Bursts counted in closed form: 1 ps gaps, spaced bursts, single events.
        for (len, gap, spacing) in [
            (4, 0.001, 0.0),
            (5, 7.3, 1.1),
            (1, 2.5, 0.0),
            (1000, 50.0, 0.5),
        ] {
            specs.push(fixed_bursts(len, gap, spacing));
        }
        // Fixed ON and OFF periods: ON periods end on multiples of 80 ns plus 50 ns,
        // where an event of the 10 ps spacing would fall, so some `until` below hit
        // an end, an event, the middle of an ON period and an OFF period.
        specs.push(
            "kind = \"on_off\"\nrate_per_s = 1e11\nspacing = \"fixed\"\n\
             on_ns = { kind = \"fixed\", value = 50 }\noff_ns = { kind = \"fixed\", value = 30 }"
                .to_string(),
        );
        let untils = [
            2_000_000, 1_650_000, 1_650_010, 1_649_990, 1_625_005, 1_670_000, 1_730_000,
        ];
        for text in &specs {
            for until in untils.map(SimTime) {
                let spec: ArrivalSpec = toml::from_str(text).unwrap();
                let mut a = spec.generator("x", None).unwrap();
                let mut b = a.clone();
                let (mut ra, mut rb) = (
                    rand::rngs::StdRng::seed_from_u64(9),
                    rand::rngs::StdRng::seed_from_u64(9),
                );
                a.restart(SimTime::ZERO);
                b.restart(SimTime::ZERO);
                let first = a.next_arrival(&mut ra).unwrap();
                assert_eq!(b.next_arrival(&mut rb), Some(first));
                let (n, next) = a.skip_through(first, until, &mut ra);
                let mut m = 1;
                let mut t = b.next_arrival(&mut rb);
                while t.is_some_and(|t| t <= until) {
                    m += 1;
                    t = b.next_arrival(&mut rb);
                }
                assert_eq!((n, next), (m, t), "{text} through {until:?}");
                assert_eq!(a.emitted(), b.emitted(), "{text} through {until:?}");
            }
        }
    }

    /// Random numbers drawn through it, to tell a bulk count from stepping.
    struct CountingRng(rand::rngs::StdRng, u64);

    impl rand::RngCore for CountingRng {
        fn next_u32(&mut self) -> u32 {
            self.1 += 1;
            self.0.next_u32()
        }
        fn next_u64(&mut self) -> u64 {
            self.1 += 1;
            self.0.next_u64()
        }
        fn fill_bytes(&mut self, dest: &mut [u8]) {
            self.1 += 1;
            self.0.fill_bytes(dest)
        }
        fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
            self.1 += 1;
            self.0.try_fill_bytes(dest)
        }
    }

    /// An overloaded Poisson ON/OFF source is counted an ON period at a time: a
    /// million events in 10 periods take a few draws per period, not one per event.
    #[test]
    fn a_busy_poisson_on_off_source_is_counted_a_period_at_a_time() {
        let text = "kind = \"on_off\"\nrate_per_s = 1e12\n\
                    on_ns = { kind = \"fixed\", value = 100000 }\n\
                    off_ns = { kind = \"fixed\", value = 100000 }";
        let spec: ArrivalSpec = toml::from_str(text).unwrap();
        let mut g = spec.generator("x", None).unwrap();
        let mut rng = CountingRng(rand::rngs::StdRng::seed_from_u64(3), 0);
        g.restart(SimTime::ZERO);
        let first = g.next_arrival(&mut rng).unwrap();
        let until = SimTime(2_000_000_000); // 2 ms: 10 ON periods of 10^8 events
        let (n, _) = g.skip_through(first, until, &mut rng);
        assert!((n as f64 - 1e9).abs() < 1e6, "{n} events");
        assert!(rng.1 < 1_000, "{} draws for {n} events", rng.1);
    }

    /// Counts through `until` of `trials` runs, by skipping (`skip`) or by stepping.
    fn counts_through(text: &str, until: SimTime, trials: u64, skip: bool) -> Vec<f64> {
        let spec: ArrivalSpec = toml::from_str(text).unwrap();
        (0..trials)
            .map(|seed| {
                let mut g = spec.generator("x", None).unwrap();
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                g.restart(SimTime::ZERO);
                let first = g.next_arrival(&mut rng).unwrap();
                if skip {
                    let (n, next) = g.skip_through(first, until, &mut rng);
                    assert!(next.is_some_and(|t| t > until), "{text}");
                    assert_eq!(g.emitted(), n + 1, "the counted ones and the next: {text}");
                    return n as f64;
                }
                let mut n = 1;
                while g.next_arrival(&mut rng).is_some_and(|t| t <= until) {
                    n += 1;
                }
                n as f64
            })
            .collect()
    }

    fn mean_and_variance(xs: &[f64]) -> (f64, f64) {
        let m = xs.iter().sum::<f64>() / xs.len() as f64;
        let v = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64;
        (m, v)
    }

    /// Random bursts past the bulk threshold are counted in one draw, and ON/OFF
    /// sources in one draw per period; the counts must spread as event-by-event
    /// stepping spreads them, in mean and in variance, with and without spacing
    /// inside a burst.
    #[test]
    fn bulk_counts_of_random_bursts_match_stepping_in_mean_and_spread() {
        let until = SimTime(1_000_000);
        for text in [
            "kind = \"bursts\"\nburst_len = { kind = \"geometric\", mean = 4 }\n\
             gap_ns = { kind = \"exponential\", mean = 0.01 }\nspacing_ns = 0.0",
            "kind = \"bursts\"\nburst_len = { kind = \"uniform\", low = 1, high = 9 }\n\
             gap_ns = { kind = \"lognormal\", mean = 0.05, sigma = 1.0 }\nspacing_ns = 0.002",
            // ON/OFF: a Poisson count per ON period.
            "kind = \"on_off\"\nrate_per_s = 1e10\n\
             on_ns = { kind = \"exponential\", mean = 100 }\noff_ns = { kind = \"exponential\", mean = 50 }",
        ] {
            let bulk = counts_through(text, until, 2000, true);
            let stepped = counts_through(text, until, 64, false);
            let (bm, bv) = mean_and_variance(&bulk);
            let (sm, sv) = mean_and_variance(&stepped);
            // The stepped mean is known to within its standard error, plus 0.2% for
            // stepping rounding each gap to whole picoseconds (the draw uses the
            // nominal mean).
            let tolerance = 4.0 * (sv / stepped.len() as f64).sqrt() + 2e-3 * sm;
            assert!((bm - sm).abs() < tolerance, "{text}: mean {bm} vs {sm}");
            // 64 samples estimate a variance to about 18% (one sigma).
            assert!(bv / sv > 0.5 && bv / sv < 1.8, "{text}: variance {bv} vs {sv}");
        }
    }

    /// The bulk draw's spread is the renewal-reward variance `W * Var(L - r*C) / E[C]`,
    /// worked out here by hand for two sources. Each makes one of its two terms
    /// dominant, so a wrong operator in either moves the variance by far more than the
    /// 1% standard error of 20,000 draws. (The comparison with stepping above has only
    /// 64 stepped samples, too few to see a 10% error.)
    #[test]
    fn the_spread_of_bulk_burst_counts_is_the_renewal_reward_variance() {
        let until = SimTime(100_000_000); // W = 100,000 ns
        for (text, want_variance) in [
            // Burst length dominates. L geometric, mean 5: Var(L) = 5 * 4 = 20. Gap
            // uniform on 0.9..1.1 ns: Var = 0.2^2 / 12. E[C] = 1 + 4 * 0.1 = 1.4 ns,
            // r = 5 / 1.4 per ns. Var(L - rC) = (1 - 0.1 r)^2 * 20 + r^2 * 0.04 / 12.
            (
                "kind = \"bursts\"\nburst_len = { kind = \"geometric\", mean = 5 }\n\
                 gap_ns = { kind = \"uniform\", low = 0.9, high = 1.1 }\nspacing_ns = 0.1",
                {
                    let r: f64 = 5.0 / 1.4;
                    1e5 * ((1.0 - 0.1 * r).powi(2) * 20.0 + r * r * 0.04 / 12.0) / 1.4
                },
            ),
            // The gap dominates: L fixed at 4, gap exponential with mean 0.5 ns, so
            // Var(gap) = 0.25, r = 8 per ns and Var(L - rC) = 64 * 0.25.
            (
                "kind = \"bursts\"\nburst_len = { kind = \"fixed\", value = 4 }\n\
                 gap_ns = { kind = \"exponential\", mean = 0.5 }\nspacing_ns = 0.0",
                1e5 * 64.0 * 0.25 / 0.5,
            ),
        ] {
            let counts = counts_through(text, until, 20_000, true);
            let (_, variance) = mean_and_variance(&counts);
            let ratio = variance / want_variance;
            assert!(
                (ratio - 1.0).abs() < 0.06,
                "{text}: variance {variance} vs {want_variance}"
            );
        }
    }

    /// Many bursts held back cost one draw: 1 ps gaps for a millisecond are 10^9
    /// bursts, counted without stepping, at the process's mean rate.
    #[test]
    fn a_parked_random_burst_source_counts_a_billion_bursts_at_once() {
        let text = "kind = \"bursts\"\nburst_len = { kind = \"geometric\", mean = 4 }\n\
                    gap_ns = { kind = \"exponential\", mean = 0.001 }\nspacing_ns = 0.0";
        let until = SimTime(1_000_000_000);
        let counts = counts_through(text, until, 8, true);
        let (m, _) = mean_and_variance(&counts);
        let want = 4.0 / 0.001 * 1e6;
        assert!((m - want).abs() / want < 1e-3, "{m} vs {want}");
    }

    #[test]
    fn skipping_a_trace_is_a_search_and_ends_with_it() {
        let dir = std::env::temp_dir().join(format!("irqsim-skip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.csv");
        std::fs::write(&path, "10\n20\n30\n40\n").unwrap();
        let mut g = ArrivalGenerator::load_trace(&path, false).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        g.restart(SimTime::ZERO);
        let first = g.next_arrival(&mut rng).unwrap();
        assert_eq!(
            g.skip_through(first, SimTime(30_000), &mut rng),
            (3, Some(SimTime(40_000)))
        );
        let (n, next) = g.skip_through(SimTime(40_000), SimTime(1_000_000), &mut rng);
        assert_eq!((n, next), (1, None));

        // From a later origin the times shift with it, and the generator counts what
        // it skipped as a generator stepping event by event does.
        let origin = SimTime(100_000);
        let mut stepped = ArrivalGenerator::load_trace(&path, false).unwrap();
        stepped.restart(origin);
        for _ in 0..4 {
            stepped.next_arrival(&mut rng).unwrap();
        }
        g.restart(origin);
        let first = g.next_arrival(&mut rng).unwrap();
        assert_eq!(first, SimTime(110_000));
        assert_eq!(
            g.skip_through(first, SimTime(130_000), &mut rng),
            (3, Some(SimTime(140_000)))
        );
        assert_eq!(g.emitted(), stepped.emitted());
        assert_eq!(g.emitted(), 4);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A bulk Poisson count is the event at `first` plus a Poisson draw for the rest
    /// of the span, and the next event follows `until` by one gap.
    #[test]
    fn a_bulk_poisson_count_is_the_first_event_and_a_draw_for_the_rest() {
        let p = ArrivalProcess::Poisson { rate_per_s: 1e9 };
        let (first, until) = (SimTime(0), SimTime(1_000_000_000));
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut twin = rng.clone();
        let (n, next) = p.count_through(first, until, &mut rng).unwrap();
        let expected = 1e9 * 1e-3;
        assert_eq!(n, 1 + poisson_count(expected, &mut twin));
        assert_eq!(next, until + p.next_gap(&mut twin));
    }

    #[test]
    fn mean_rates_of_every_kind() {
        assert_eq!(
            ArrivalProcess::Fixed { interval_ns: 250.0 }.mean_rate_per_s(),
            4e6
        );
        assert_eq!(
            ArrivalProcess::Poisson { rate_per_s: 3e6 }.mean_rate_per_s(),
            3e6
        );
        let bursts = ArrivalSpec::Bursts {
            burst_len: Dist::Fixed { value: 4.0 },
            gap_ns: Dist::Fixed { value: 70.0 },
            spacing_ns: 10.0,
        };
        // 4 events per 3 x 10 ns of spacing plus a 70 ns gap: 4 per 100 ns.
        let r = bursts.mean_rate_per_s().unwrap();
        assert!((r - 4e7).abs() < 1e-3, "{r}");
        let on_off = ArrivalSpec::OnOff {
            rate_per_s: 1e7,
            on_ns: Dist::Fixed { value: 3000.0 },
            off_ns: Dist::Fixed { value: 1000.0 },
            spacing: Spacing::Poisson,
        };
        assert_eq!(on_off.mean_rate_per_s(), Some(7.5e6));
        // A generator states the rate of its spec.
        for spec in [bursts, on_off] {
            let g = spec.generator("a", None).unwrap();
            let (a, b) = (g.mean_rate_per_s(), spec.mean_rate_per_s().unwrap());
            assert!((a - b).abs() < 1e-6 * b, "{spec:?}: {a} vs {b}");
        }
    }

    /// The bounds are inclusive: a mean gap of exactly 1 ps, an ON mean of exactly
    /// 1 ns, exactly 0.001 events per ON period, a burst gap of exactly 1 ps.
    #[test]
    fn validation_bounds_are_inclusive() {
        assert!(ArrivalProcess::Fixed { interval_ns: 0.001 }
            .validate("a")
            .is_ok());
        assert!(ArrivalProcess::Fixed {
            interval_ns: 0.0009
        }
        .validate("a")
        .is_err());
        assert!(ArrivalProcess::Poisson { rate_per_s: 1e12 }
            .validate("a")
            .is_ok());
        assert!(ArrivalProcess::Poisson { rate_per_s: 1.1e12 }
            .validate("a")
            .is_err());
        let on_off = |rate: f64, on: f64, spacing| ArrivalSpec::OnOff {
            rate_per_s: rate,
            on_ns: Dist::Fixed { value: on },
            off_ns: Dist::Fixed { value: 10.0 },
            spacing,
        };
        assert!(on_off(1e9, 1.0, Spacing::Poisson).validate("a").is_ok());
        assert!(on_off(1e9, 0.999, Spacing::Poisson).validate("a").is_err());
        // 1e3/s for 1000 ns is 0.001 events per period.
        assert!(on_off(1e3, 1000.0, Spacing::Poisson).validate("a").is_ok());
        assert!(on_off(0.9e3, 1000.0, Spacing::Poisson)
            .validate("a")
            .is_err());
        assert!(
            on_off(0.9e3, 1000.0, Spacing::Fixed).validate("a").is_ok(),
            "fixed spacing always has its first event"
        );
        let bursts = |gap: f64, spacing_ns: f64| ArrivalSpec::Bursts {
            burst_len: Dist::Fixed { value: 2.0 },
            gap_ns: Dist::Fixed { value: gap },
            spacing_ns,
        };
        assert!(bursts(1e-3, 0.0).validate("a").is_ok());
        assert!(bursts(0.9e-3, 0.0).validate("a").is_err());
        assert!(bursts(1.0, 1e12).validate("a").is_ok());
        assert!(bursts(1.0, 1.1e12).validate("a").is_err());
    }

    #[test]
    fn fixed_is_exact() {
        let p = ArrivalProcess::fixed_rate(4e6);
        let mut rng = rand::rngs::mock::StepRng::new(0, 1);
        assert_eq!(p.next_gap(&mut rng), Duration::from_ns(250));
    }

    #[test]
    fn poisson_mean_is_close_to_rate() {
        let p = ArrivalProcess::Poisson { rate_per_s: 1e6 };
        let mut rng = rand_pcg_like();
        let n = 20_000;
        let total: u64 = (0..n).map(|_| p.next_gap(&mut rng).as_ps()).sum();
        let mean_ns = total as f64 / n as f64 / 1e3;
        assert!((mean_ns - 1000.0).abs() < 30.0, "mean gap {mean_ns} ns");
    }

    fn rand_pcg_like() -> rand::rngs::StdRng {
        rand::rngs::StdRng::seed_from_u64(1)
    }

    #[test]
    fn zero_and_negative_rates_are_rejected_with_the_field() {
        let e = ArrivalProcess::Poisson { rate_per_s: 0.0 }
            .validate("devices[2].arrival")
            .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("devices[2].arrival.rate_per_s"), "{msg}");
        assert!(msg.contains("greater than zero"), "{msg}");
        assert!(ArrivalProcess::Fixed { interval_ns: -1.0 }
            .validate("x")
            .is_err());
        assert!(ArrivalProcess::Fixed {
            interval_ns: f64::NAN
        }
        .validate("x")
        .is_err());
        assert!(ArrivalProcess::Poisson { rate_per_s: 1e13 }
            .validate("x")
            .is_err());
    }

    fn rng() -> rand::rngs::StdRng {
        rand::rngs::StdRng::seed_from_u64(11)
    }

    fn spec(toml_text: &str) -> ArrivalSpec {
        #[derive(Deserialize)]
        struct W {
            arrival: ArrivalSpec,
        }
        toml::from_str::<W>(toml_text).unwrap().arrival
    }

    /// Draws `n` events from `origin` and checks they never go back in time.
    fn draw(g: &mut ArrivalGenerator, origin: SimTime, n: usize) -> Vec<SimTime> {
        let mut r = rng();
        g.restart(origin);
        let mut out = Vec::with_capacity(n);
        let mut prev = origin;
        for _ in 0..n {
            let Some(t) = g.next_arrival(&mut r) else {
                break;
            };
            assert!(t >= prev, "went back in time: {t:?} after {prev:?}");
            prev = t;
            out.push(t);
        }
        out
    }

    #[test]
    fn simple_kinds_keep_their_toml_shape_and_match_arrival_process() {
        let s = spec(r#"arrival = { kind = "fixed", interval_ns = 250 }"#);
        assert_eq!(
            s.as_process(),
            Some(ArrivalProcess::Fixed { interval_ns: 250.0 })
        );
        let s = spec(r#"arrival = { kind = "poisson", rate_per_s = 4e6 }"#);
        assert_eq!(
            s,
            ArrivalSpec::from(ArrivalProcess::Poisson { rate_per_s: 4e6 })
        );
        let mut g = ArrivalSpec::Fixed { interval_ns: 250.0 }
            .generator("a", None)
            .unwrap();
        let t = draw(&mut g, SimTime(1_000), 3);
        assert_eq!(
            t,
            vec![SimTime(251_000), SimTime(501_000), SimTime(751_000)]
        );
        assert!(
            toml::from_str::<std::collections::BTreeMap<String, ArrivalSpec>>(
                r#"arrival = { kind = "fixed", interval_ns = 1, burst = 2 }"#
            )
            .is_err(),
            "unknown fields are an error"
        );
    }

    #[test]
    fn on_off_poisson_rate_matches_the_duty_cycle() {
        let s = spec(
            r#"
[arrival]
            kind = "on_off"
            rate_per_s = 1e7
            on_ns = { kind = "exponential", mean = 5000 }
            off_ns = { kind = "exponential", mean = 15000 }
"#,
        );
        let expect = s.mean_rate_per_s().unwrap();
        assert!((expect - 2.5e6).abs() < 1.0);
        let mut g = s.generator("a", None).unwrap();
        let t = draw(&mut g, SimTime::ZERO, 100_000);
        let rate = t.len() as f64 / t.last().unwrap().as_secs_f64();
        assert!((rate - expect).abs() / expect < 0.05, "rate {rate}");
    }

    #[test]
    fn on_off_fixed_spacing_puts_events_only_inside_on_periods() {
        // ON 1000 ns, OFF 9000 ns, 1 event / 300 ns while ON: events at 0, 300, 600, 900
        // of each 10 us cycle.
        let s = spec(
            r#"
[arrival]
            kind = "on_off"
            rate_per_s = 3333333.3333333335
            spacing = "fixed"
            on_ns = { kind = "fixed", value = 1000 }
            off_ns = { kind = "fixed", value = 9000 }
"#,
        );
        let mut g = s.generator("a", None).unwrap();
        let t = draw(&mut g, SimTime::ZERO, 8);
        let ns: Vec<u64> = t.iter().map(|t| t.as_ps() / 1000).collect();
        assert_eq!(ns, vec![0, 300, 600, 900, 10_000, 10_300, 10_600, 10_900]);
    }

    #[test]
    fn bursts_have_the_configured_length_spacing_and_gap() {
        let s = spec(
            r#"
[arrival]
            kind = "bursts"
            spacing_ns = 10
            burst_len = { kind = "fixed", value = 3 }
            gap_ns = { kind = "fixed", value = 1000 }
"#,
        );
        let mut g = s.generator("a", None).unwrap();
        let t = draw(&mut g, SimTime::ZERO, 6);
        let ns: Vec<u64> = t.iter().map(|t| t.as_ps() / 1000).collect();
        assert_eq!(ns, vec![1000, 1010, 1020, 2020, 2030, 2040]);
        // Mean rate: 3 events per (2 * 10 + 1000) ns.
        assert!((g.mean_rate_per_s() - 3.0 / 1020e-9).abs() < 1.0);
        let geo = spec(
            r#"
[arrival]
            kind = "bursts"
            burst_len = { kind = "geometric", mean = 16 }
            gap_ns = { kind = "exponential", mean = 20000 }
"#,
        );
        let mut g = geo.generator("a", None).unwrap();
        let t = draw(&mut g, SimTime::ZERO, 200_000);
        let rate = t.len() as f64 / t.last().unwrap().as_secs_f64();
        let expect = geo.mean_rate_per_s().unwrap();
        assert!((rate - expect).abs() / expect < 0.05, "{rate} vs {expect}");
    }

    #[test]
    fn trace_replays_from_the_origin_and_ends() {
        let dir = std::env::temp_dir().join(format!("irqsim-arrival-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("rx.csv"), "timestamp_ns\n100\n100\n350\n").unwrap();
        let s = spec(r#"arrival = { kind = "trace", path = "rx.csv" }"#);
        assert_eq!(s.mean_rate_per_s(), None);
        let mut g = s.generator("a", Some(&dir)).unwrap();
        let t = draw(&mut g, SimTime(5_000), 10);
        assert_eq!(
            t,
            vec![SimTime(105_000), SimTime(105_000), SimTime(355_000)]
        );
        assert_eq!(g.emitted(), 3);
        // Restart replays it again.
        assert_eq!(draw(&mut g, SimTime::ZERO, 10).len(), 3);
        // A malformed trace names file and line through DeviceError.
        std::fs::write(dir.join("bad.csv"), "1\n2\nthree\n").unwrap();
        let e = spec(r#"arrival = { kind = "trace", path = "bad.csv" }"#)
            .generator("a", Some(&dir))
            .unwrap_err();
        assert!(e.to_string().contains("bad.csv:3"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn invalid_specs_name_their_field() {
        let e = spec(
            r#"
[arrival]
            kind = "on_off"
            rate_per_s = 1e6
            on_ns = { kind = "fixed", value = 0.5 }
            off_ns = { kind = "fixed", value = 10 }
"#,
        )
        .validate("devices[1].arrival")
        .unwrap_err();
        assert!(e.to_string().contains("devices[1].arrival.on_ns"), "{e}");
        let e = spec(
            r#"
[arrival]
            kind = "on_off"
            rate_per_s = 1
            on_ns = { kind = "fixed", value = 10 }
            off_ns = { kind = "fixed", value = 10 }
"#,
        )
        .validate("a")
        .unwrap_err();
        assert!(e.to_string().contains("a.rate_per_s"), "{e}");
        let e = spec(
            r#"
[arrival]
            kind = "bursts"
            burst_len = { kind = "fixed", value = 4 }
            gap_ns = { kind = "fixed", value = 0 }
"#,
        )
        .validate("a")
        .unwrap_err();
        assert!(e.to_string().contains("a.gap_ns"), "{e}");
        let e = spec(
            r#"
[arrival]
            kind = "bursts"
            burst_len = { kind = "fixed", value = 4 }
            gap_ns = { kind = "exponential", mean = -1 }
"#,
        )
        .validate("a")
        .unwrap_err();
        assert!(e.to_string().contains("a.gap_ns.mean"), "{e}");
        assert!(ArrivalSpec::Trace {
            path: PathBuf::new(),
            rebase: false
        }
        .validate("a")
        .is_err());
    }
}

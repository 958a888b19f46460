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
            Err(DeviceError::invalid(field, name, value, allowed))
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
mod tests;

//! Arrival processes: when the next event of a source happens.
//!
//! A process is a pure description plus the caller's random stream; it keeps no clock.

use rand::Rng;
use serde::{Deserialize, Serialize};
use sim_core::{Duration, PS_PER_S};

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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

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
}

//! Distributions of non-negative quantities: latencies, burst lengths, period lengths.
//!
//! A [`Dist`] has no unit of its own: the field that holds it names the unit
//! (`latency_ns`, `on_ns`, `burst_len`, ...). Sampling uses only the caller's random
//! stream, inverse-CDF or Box-Muller, so a run stays a pure function of its seed.
//!
//! TOML shapes (`kind` selects the variant; unknown fields are an error):
//!
//! | kind | fields | mean |
//! |---|---|---|
//! | `fixed` | `value` | `value` |
//! | `uniform` | `low`, `high` | `(low + high) / 2` |
//! | `exponential` | `mean` | `mean` |
//! | `shifted_exponential` | `min`, `mean_above_min` | `min + mean_above_min` |
//! | `lognormal` | `mean`, `sigma` (of the underlying normal) | `mean` |
//! | `pareto` | `scale` (the minimum), `shape` (> 1) | `shape * scale / (shape - 1)` |
//! | `geometric` | `mean` (>= 1), integers 1, 2, 3, ... | `mean` |

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::DeviceError;

/// Largest value a parameter may have, and the cap on a sample, in the field's unit.
/// 1e12 ns is 1000 s: far beyond any run, far below `u64` picoseconds (1.8e10 s).
pub const DIST_MAX: f64 = 1e12;

/// Largest `sigma` a lognormal may have. Beyond 4 the distribution's mass sits in a
/// tail no run of realistic length samples, so the mean stops meaning anything.
pub const LOGNORMAL_MAX_SIGMA: f64 = 4.0;

/// A distribution of a non-negative quantity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Dist {
    /// Always `value`.
    Fixed { value: f64 },
    /// Uniform on `[low, high]`.
    Uniform { low: f64, high: f64 },
    /// Exponential with the given mean.
    Exponential { mean: f64 },
    /// `min` plus an exponential with mean `mean_above_min`: a floor with a tail.
    ShiftedExponential { min: f64, mean_above_min: f64 },
    /// Lognormal with the given mean; `sigma` is the standard deviation of the
    /// underlying normal (0 gives a constant). The median is `mean * exp(-sigma^2 / 2)`.
    #[serde(rename = "lognormal")]
    LogNormal { mean: f64, sigma: f64 },
    /// Pareto (type I): `scale` is the smallest value, `shape` the tail index. Heavy
    /// tailed; `shape` must exceed 1 so the mean exists.
    Pareto { scale: f64, shape: f64 },
    /// Geometric on 1, 2, 3, ... with the given mean (success probability `1 / mean`):
    /// a count, e.g. packets per burst.
    Geometric { mean: f64 },
}

impl Dist {
    /// The mean of the distribution, before [`DIST_MAX`] caps samples.
    pub fn mean(&self) -> f64 {
        match *self {
            Dist::Fixed { value } => value,
            Dist::Uniform { low, high } => 0.5 * (low + high),
            Dist::Exponential { mean } => mean,
            Dist::ShiftedExponential {
                min,
                mean_above_min,
            } => min + mean_above_min,
            Dist::LogNormal { mean, .. } => mean,
            Dist::Pareto { scale, shape } => shape * scale / (shape - 1.0),
            Dist::Geometric { mean } => mean,
        }
    }

    /// The variance of the distribution, before [`DIST_MAX`] caps samples; `None`
    /// where it is infinite (Pareto with `shape` at most 2). Bulk counts of bursts
    /// use it for their spread.
    pub fn variance(&self) -> Option<f64> {
        match *self {
            Dist::Fixed { .. } => Some(0.0),
            Dist::Uniform { low, high } => Some((high - low).powi(2) / 12.0),
            Dist::Exponential { mean } => Some(mean * mean),
            Dist::ShiftedExponential { mean_above_min, .. } => {
                Some(mean_above_min * mean_above_min)
            }
            Dist::LogNormal { mean, sigma } => Some(mean * mean * (sigma * sigma).exp_m1()),
            Dist::Pareto { scale, shape } if shape > 2.0 => {
                Some(scale * scale * shape / ((shape - 1.0).powi(2) * (shape - 2.0)))
            }
            Dist::Pareto { .. } => None,
            // Failures before the first success: (1 - p) / p^2 with p = 1 / mean.
            Dist::Geometric { mean } => Some(mean * (mean - 1.0)),
        }
    }

    /// Checks the parameters; `field` names the distribution for the error.
    pub fn validate(&self, field: &str) -> Result<(), DeviceError> {
        let bad = |name: &str, value: f64, allowed: &str| {
            Err(DeviceError::invalid(field, name, value, allowed))
        };
        let in_range = |v: f64| v.is_finite() && (0.0..=DIST_MAX).contains(&v);
        let non_neg = "a finite number in 0..=1e12";
        let positive = "a finite number in (0, 1e12]";
        match *self {
            Dist::Fixed { value } if !in_range(value) => bad("value", value, non_neg),
            Dist::Uniform { low, .. } if !in_range(low) => bad("low", low, non_neg),
            Dist::Uniform { low, high } if !(in_range(high) && high >= low) => {
                bad("high", high, "a finite number in low..=1e12")
            }
            Dist::Exponential { mean } if !(in_range(mean) && mean > 0.0) => {
                bad("mean", mean, positive)
            }
            Dist::ShiftedExponential { min, .. } if !in_range(min) => bad("min", min, non_neg),
            Dist::ShiftedExponential { mean_above_min, .. }
                if !(in_range(mean_above_min) && mean_above_min > 0.0) =>
            {
                bad("mean_above_min", mean_above_min, positive)
            }
            Dist::LogNormal { mean, .. } if !(in_range(mean) && mean > 0.0) => {
                bad("mean", mean, positive)
            }
            Dist::LogNormal { sigma, .. }
                if !(sigma.is_finite() && (0.0..=LOGNORMAL_MAX_SIGMA).contains(&sigma)) =>
            {
                bad("sigma", sigma, "a finite number in 0..=4")
            }
            Dist::Pareto { scale, .. } if !(in_range(scale) && scale > 0.0) => {
                bad("scale", scale, positive)
            }
            Dist::Pareto { shape, .. } if !(shape.is_finite() && shape > 1.0 && shape <= 100.0) => {
                bad(
                    "shape",
                    shape,
                    "a finite number in (1, 100] (the mean must exist)",
                )
            }
            Dist::Geometric { mean } if !(in_range(mean) && mean >= 1.0) => {
                bad("mean", mean, "a finite number in 1..=1e12")
            }
            _ => Ok(()),
        }
    }

    /// Draws one value, in `[0, DIST_MAX]`.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        let x = match *self {
            Dist::Fixed { value } => value,
            Dist::Uniform { low, high } => low + (high - low) * rng.gen::<f64>(),
            Dist::Exponential { mean } => mean * std_exponential(rng),
            Dist::ShiftedExponential {
                min,
                mean_above_min,
            } => min + mean_above_min * std_exponential(rng),
            Dist::LogNormal { mean, sigma } => {
                // mean = exp(mu + sigma^2 / 2), so mu = ln(mean) - sigma^2 / 2.
                let mu = mean.ln() - 0.5 * sigma * sigma;
                sigma.mul_add(std_normal(rng), mu).exp()
            }
            Dist::Pareto { scale, shape } => {
                // Inverse CDF: P(X > x) = (scale / x)^shape; 1 - u is in (0, 1].
                let v = 1.0 - rng.gen::<f64>();
                scale / v.powf(1.0 / shape)
            }
            Dist::Geometric { mean } => {
                let p = 1.0 / mean;
                if p >= 1.0 {
                    1.0
                } else {
                    // P(K >= k) = (1 - p)^(k - 1): K = ceil(ln V / ln(1 - p)), V in (0, 1].
                    let v = 1.0 - rng.gen::<f64>();
                    (v.ln() / (1.0 - p).ln()).ceil().max(1.0)
                }
            }
        };
        if x.is_nan() {
            0.0
        } else {
            x.clamp(0.0, DIST_MAX)
        }
    }

    /// Draws a count: the sample rounded to the nearest integer, at least 1.
    pub fn sample_count<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        sim_core::round_to_u64(self.sample(rng)).max(1)
    }
}

/// An exponential with mean 1 by inverse CDF; `1 - u` is in (0, 1], so `ln` never sees 0.
fn std_exponential<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    -(1.0 - rng.gen::<f64>()).ln()
}

/// A standard normal by the Box-Muller transform (one of the pair; two uniforms a draw,
/// so the stream's consumption does not depend on earlier draws).
pub(crate) fn std_normal<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    let u1 = 1.0 - rng.gen::<f64>();
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rng() -> rand::rngs::StdRng {
        rand::rngs::StdRng::seed_from_u64(7)
    }

    fn empirical_mean(d: &Dist, n: usize) -> f64 {
        let mut r = rng();
        (0..n).map(|_| d.sample(&mut r)).sum::<f64>() / n as f64
    }

    /// One of each random kind, with finite variance. No parameter is 1 or 2, where a
    /// square equals a quotient or a sum (`x * x` against `x / x` or `x + x`).
    fn random_cases() -> Vec<Dist> {
        vec![
            Dist::Uniform {
                low: 2.0,
                high: 5.0,
            },
            Dist::Exponential { mean: 5.0 },
            Dist::ShiftedExponential {
                min: 1.0,
                mean_above_min: 3.0,
            },
            Dist::LogNormal {
                mean: 3400.0,
                sigma: 0.5,
            },
            Dist::Pareto {
                scale: 3.0,
                shape: 6.0,
            },
            Dist::Geometric { mean: 8.0 },
        ]
    }

    #[test]
    fn sample_means_match_the_stated_means() {
        let mut cases = random_cases();
        cases.extend([
            Dist::Fixed { value: 5.0 },
            Dist::LogNormal {
                mean: 3400.0,
                sigma: 0.2,
            },
            // A heavier tail than the variance cases': the mean still converges.
            Dist::Pareto {
                scale: 1.0,
                shape: 3.0,
            },
        ]);
        for d in cases {
            d.validate("d").unwrap();
            assert!(d.mean() > 0.0, "{d:?}");
            let m = empirical_mean(&d, 200_000);
            let rel = (m - d.mean()).abs() / d.mean();
            assert!(rel < 0.02, "{d:?}: sample mean {m}, stated {}", d.mean());
        }
    }

    #[test]
    fn sample_variances_match_the_stated_variances() {
        let cases = random_cases();
        let n = 400_000;
        for d in cases {
            let mut r = rng();
            let xs: Vec<f64> = (0..n).map(|_| d.sample(&mut r)).collect();
            let m = xs.iter().sum::<f64>() / n as f64;
            let v = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64;
            let want = d.variance().unwrap();
            assert!(
                (v - want).abs() / want < 0.03,
                "{d:?}: sample variance {v}, stated {want}"
            );
        }
        assert_eq!(Dist::Fixed { value: 3.0 }.variance(), Some(0.0));
        let heavy = Dist::Pareto {
            scale: 1.0,
            shape: 2.0,
        };
        assert_eq!(heavy.variance(), None, "infinite at shape 2");
    }

    /// Exponential draws spread as the distribution says: P(X <= mean) = 1 - 1/e, and
    /// the shifted form keeps that shape above its minimum.
    #[test]
    fn exponential_samples_have_the_exponential_shape() {
        let mut r = rng();
        let n = 100_000;
        let d = Dist::Exponential { mean: 5.0 };
        let below = (0..n).filter(|_| d.sample(&mut r) <= 5.0).count() as f64 / n as f64;
        let want = 1.0 - (-1.0f64).exp();
        assert!((below - want).abs() < 0.01, "{below} vs {want}");
        let d = Dist::ShiftedExponential {
            min: 1.0,
            mean_above_min: 2.0,
        };
        let below = (0..n).filter(|_| d.sample(&mut r) <= 3.0).count() as f64 / n as f64;
        assert!((below - want).abs() < 0.01, "{below} vs {want}");
    }

    #[test]
    fn stated_means_by_hand() {
        assert_eq!(
            Dist::Uniform {
                low: 2.0,
                high: 5.0
            }
            .mean(),
            3.5
        );
        assert_eq!(
            Dist::ShiftedExponential {
                min: 1.0,
                mean_above_min: 2.0
            }
            .mean(),
            3.0
        );
        assert_eq!(
            Dist::Pareto {
                scale: 2.0,
                shape: 3.0
            }
            .mean(),
            3.0
        );
        assert_eq!(
            Dist::LogNormal {
                mean: 7.0,
                sigma: 1.0
            }
            .mean(),
            7.0
        );
    }

    /// Every parameter is checked on its own: each bad value alone is refused and
    /// named; the smallest good values pass.
    #[test]
    fn each_parameter_is_checked_alone() {
        let bad = [
            (Dist::Fixed { value: 1e13 }, "value"),
            (
                Dist::Fixed {
                    value: f64::INFINITY,
                },
                "value",
            ),
            (Dist::Fixed { value: -1.0 }, "value"),
            (
                Dist::Uniform {
                    low: -1.0,
                    high: 2.0,
                },
                "low",
            ),
            (
                Dist::ShiftedExponential {
                    min: -1.0,
                    mean_above_min: 2.0,
                },
                "min",
            ),
            (
                Dist::ShiftedExponential {
                    min: 1.0,
                    mean_above_min: 0.0,
                },
                "mean_above_min",
            ),
            (
                Dist::ShiftedExponential {
                    min: 1.0,
                    mean_above_min: f64::NAN,
                },
                "mean_above_min",
            ),
            (
                Dist::LogNormal {
                    mean: 0.0,
                    sigma: 0.5,
                },
                "mean",
            ),
            (
                Dist::LogNormal {
                    mean: 1e13,
                    sigma: 0.5,
                },
                "mean",
            ),
            (
                Dist::Pareto {
                    scale: 0.0,
                    shape: 2.0,
                },
                "scale",
            ),
            (
                Dist::Pareto {
                    scale: 1e13,
                    shape: 2.0,
                },
                "scale",
            ),
            (Dist::Exponential { mean: 1e13 }, "mean"),
        ];
        for (d, field) in bad {
            let e = d.validate("d").unwrap_err().to_string();
            assert!(e.contains(&format!("d.{field}")), "{d:?}: {e}");
        }
        let good = [
            Dist::Fixed { value: 0.0 },
            Dist::Fixed { value: 1e12 },
            Dist::Uniform {
                low: 0.0,
                high: 0.0,
            },
            Dist::ShiftedExponential {
                min: 0.0,
                mean_above_min: 1e-9,
            },
            Dist::LogNormal {
                mean: 1e-9,
                sigma: 0.0,
            },
            Dist::Pareto {
                scale: 1e-9,
                shape: 1.5,
            },
            Dist::Exponential { mean: 1e12 },
        ];
        for d in good {
            assert!(d.validate("d").is_ok(), "{d:?}");
        }
    }

    #[test]
    fn lognormal_median_is_below_the_mean() {
        let d = Dist::LogNormal {
            mean: 1000.0,
            sigma: 0.5,
        };
        let mut r = rng();
        let mut v: Vec<f64> = (0..50_001).map(|_| d.sample(&mut r)).collect();
        v.sort_by(f64::total_cmp);
        let median = v[25_000];
        let expect = 1000.0 * (-0.125f64).exp();
        assert!((median - expect).abs() / expect < 0.02, "median {median}");
        // One standard deviation of the underlying normal: the 84.13th percentile is
        // e^sigma times the median.
        let p84 = v[(50_001.0 * 0.8413) as usize];
        let spread = p84 / median;
        assert!((spread - 0.5f64.exp()).abs() < 0.03, "p84/median {spread}");
    }

    #[test]
    fn geometric_takes_integer_values_from_one() {
        let d = Dist::Geometric { mean: 3.0 };
        let mut r = rng();
        for _ in 0..10_000 {
            let x = d.sample(&mut r);
            assert!(x >= 1.0 && x.fract() == 0.0, "{x}");
        }
        assert_eq!(Dist::Geometric { mean: 1.0 }.sample(&mut r), 1.0);
        assert_eq!(Dist::Fixed { value: 0.2 }.sample_count(&mut r), 1);
    }

    #[test]
    fn bad_parameters_name_the_field() {
        let e = Dist::Pareto {
            scale: 1.0,
            shape: 1.0,
        }
        .validate("arrival.on_ns")
        .unwrap_err();
        assert!(e.to_string().contains("arrival.on_ns.shape"), "{e}");
        assert!(Dist::Uniform {
            low: 3.0,
            high: 2.0
        }
        .validate("x")
        .is_err());
        assert!(Dist::Exponential { mean: 0.0 }.validate("x").is_err());
        assert!(Dist::Fixed { value: f64::NAN }.validate("x").is_err());
        assert!(Dist::LogNormal {
            mean: 1.0,
            sigma: 9.0
        }
        .validate("x")
        .is_err());
        assert!(Dist::Geometric { mean: 0.5 }.validate("x").is_err());
    }

    #[test]
    fn serde_shape_is_kind_tagged() {
        #[derive(Deserialize)]
        struct W {
            d: Dist,
        }
        let w: W =
            serde_json::from_str(r#"{"d":{"kind":"lognormal","mean":3400,"sigma":0.2}}"#).unwrap();
        assert_eq!(
            w.d,
            Dist::LogNormal {
                mean: 3400.0,
                sigma: 0.2
            }
        );
        assert!(
            serde_json::from_str::<W>(r#"{"d":{"kind":"fixed","value":1,"extra":2}}"#).is_err()
        );
    }
}

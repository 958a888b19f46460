//! The sweep definition: a base scenario, axes over scenario fields, and the points of
//! their cartesian product, each with its own scenario and seed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::path::{self, FieldPath};
use super::SweepError;
use crate::engine::stable_hash;
use crate::Scenario;

/// Most points one sweep may have.
pub const MAX_POINTS: usize = 10_000_000;

/// How each point's scenario seed is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SeedMode {
    /// Each point gets a seed derived from the sweep seed and its coordinates.
    #[default]
    PerPoint,
    /// Every point runs with the sweep seed (common random numbers across points).
    Same,
}

impl SeedMode {
    /// The name used in sweep files.
    pub fn as_str(self) -> &'static str {
        match self {
            SeedMode::PerPoint => "per-point",
            SeedMode::Same => "same",
        }
    }
}

/// One axis: a scenario field and the values it takes, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    /// The field path as written, e.g. `devices[*].arrival.rate_per_s`.
    pub field: String,
    /// The parsed field path.
    pub path: FieldPath,
    /// The values, in order; at least one.
    pub values: Vec<Value>,
}

/// A parsed, checked sweep.
#[derive(Clone, Debug)]
pub struct Sweep {
    /// Free text from the file's `name`.
    pub name: String,
    /// The sweep seed.
    pub seed: u64,
    /// How point seeds are chosen.
    pub seeds: SeedMode,
    /// The base scenario as a JSON tree (every field present, defaults filled in).
    base: Value,
    /// The axes, in file order; the first varies slowest.
    pub axes: Vec<Axis>,
    len: usize,
}

/// One point of a sweep.
#[derive(Clone, Debug)]
pub struct Point {
    /// Position in the sweep, 0-based; the first axis varies slowest.
    pub index: usize,
    /// Field path -> value, in axis order.
    pub coords: Map<String, Value>,
    /// The seed the point's scenario runs with.
    pub seed: u64,
    /// The point's scenario, validated.
    pub scenario: Scenario,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepFile {
    #[serde(default)]
    name: String,
    seed: Option<u64>,
    #[serde(default)]
    seeds: SeedMode,
    base: BaseSpec,
    /// Field path -> value, applied to the base before the axes.
    #[serde(default)]
    set: toml::Table,
    #[serde(default)]
    axes: Vec<AxisFile>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum BaseSpec {
    Reference(String),
    Inline(toml::Table),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AxisFile {
    field: String,
    values: Option<Vec<toml::Value>>,
    range: Option<RangeFile>,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(untagged)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn f(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
    fn is_int(self) -> bool {
        matches!(self, Num::Int(_))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RangeFile {
    from: Num,
    to: Num,
    step: Option<Num>,
    points: Option<u64>,
    #[serde(default)]
    log: bool,
}

impl Sweep {
    /// Reads and checks a sweep file; a `base` path is relative to the file.
    pub fn load(path: &Path) -> Result<Sweep, SweepError> {
        let text = std::fs::read_to_string(path).map_err(|e| SweepError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Sweep::from_toml_str(&text, &path.display().to_string(), &dir)
    }

    /// Parses and checks sweep TOML; `origin` names it in errors and `base_dir` is
    /// where a `base = "file.toml"` is looked up.
    pub fn from_toml_str(text: &str, origin: &str, base_dir: &Path) -> Result<Sweep, SweepError> {
        let file: SweepFile = toml::from_str(text).map_err(|e| SweepError::Parse {
            origin: origin.into(),
            message: e.to_string(),
        })?;
        let mut base = resolve_base(file.base, origin, base_dir)?;
        if !file.set.is_empty() {
            base = apply_set(&base, file.set)?;
        }
        let seed = file.seed.unwrap_or(base.seed);
        let mut axes = Vec::with_capacity(file.axes.len());
        for (i, a) in file.axes.into_iter().enumerate() {
            let axis = build_axis(i, a)?;
            if let Some(j) = axes.iter().position(|b: &Axis| b.field == axis.field) {
                return Err(SweepError::DuplicateAxis {
                    field: axis.field,
                    first: j + 1,
                    second: i + 1,
                });
            }
            axes.push(axis);
        }
        Sweep::new(file.name, seed, file.seeds, &base, axes)
    }

    /// A sweep built in code. Each axis value is checked alone against `base`: the
    /// field must exist and accept the value's type.
    pub fn new(
        name: String,
        seed: u64,
        seeds: SeedMode,
        base: &Scenario,
        axes: Vec<Axis>,
    ) -> Result<Sweep, SweepError> {
        let base_tree = serde_json::to_value(base).expect("a Scenario serializes");
        // Size first, so a sweep of too many points is refused before any per-value work.
        let mut len: usize = 1;
        for (i, axis) in axes.iter().enumerate() {
            if axis.values.is_empty() {
                return Err(SweepError::EmptyAxis {
                    axis: i + 1,
                    field: axis.field.clone(),
                });
            }
            len = len
                .checked_mul(axis.values.len())
                .filter(|n| *n <= MAX_POINTS)
                .ok_or_else(|| SweepError::TooManyPoints {
                    max: MAX_POINTS,
                    axes: axes
                        .iter()
                        .enumerate()
                        .map(|(i, a)| format!("axis {} `{}`: {}", i + 1, a.field, a.values.len()))
                        .collect::<Vec<_>>()
                        .join(" x "),
                })?;
        }
        for (i, axis) in axes.iter().enumerate() {
            let mut seen = std::collections::HashSet::with_capacity(axis.values.len());
            for v in &axis.values {
                let value = canonical(v);
                if !seen.insert(value.clone()) {
                    return Err(SweepError::DuplicateValue {
                        axis: i + 1,
                        field: axis.field.clone(),
                        value,
                    });
                }
            }
        }
        for (i, axis) in axes.iter().enumerate() {
            for v in &axis.values {
                let mut tree = base_tree.clone();
                path::set(&mut tree, &axis.path, v).map_err(|message| SweepError::Field {
                    axis: i + 1,
                    field: axis.field.clone(),
                    message: message.to_string(),
                })?;
                serde_json::from_value::<Scenario>(tree).map_err(|e| SweepError::Value {
                    axis: i + 1,
                    field: axis.field.clone(),
                    value: canonical(v),
                    message: e.to_string(),
                })?;
            }
        }
        Ok(Sweep {
            name,
            seed,
            seeds,
            base: base_tree,
            axes,
            len,
        })
    }

    /// Number of points (the product of the axis lengths; 1 with no axes).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a sweep has at least one point.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The base scenario as a JSON tree.
    pub fn base_tree(&self) -> &Value {
        &self.base
    }

    /// Identity of the sweep: a hash of its canonical definition (seed, seed mode,
    /// base scenario with every default filled in, axes and their values). Two sweep
    /// files that define the same points have the same fingerprint.
    pub fn fingerprint(&self) -> String {
        let def = serde_json::json!({
            "format": 1,
            "seed": self.seed,
            "seeds": self.seeds.as_str(),
            "base": self.base,
            "axes": self.axes_json(),
        });
        let text = serde_json::to_string(&def).expect("JSON serializes");
        format!("{:016x}", mix(stable_hash(text.as_bytes())))
    }

    /// `[{"field": F, "values": [...]}, ...]`.
    pub fn axes_json(&self) -> Value {
        Value::Array(
            self.axes
                .iter()
                .map(|a| serde_json::json!({"field": a.field, "values": a.values}))
                .collect(),
        )
    }

    /// The index of each axis's value at point `index`.
    pub fn coords_of(&self, index: usize) -> Vec<usize> {
        let mut rest = index;
        let mut out = vec![0; self.axes.len()];
        for (k, axis) in self.axes.iter().enumerate().rev() {
            out[k] = rest % axis.values.len();
            rest /= axis.values.len();
        }
        out
    }

    /// The seed and the axis values of point `index`, without building its scenario
    /// (what `--dry-run` lists, once [`check_all`](Self::check_all) has passed).
    ///
    /// # Panics
    /// If `index` is not below [`Sweep::len`].
    pub fn seed_and_coords(&self, index: usize) -> (u64, Map<String, Value>) {
        let mut coords = Map::new();
        for (axis, k) in self.axes.iter().zip(self.coords_of(index)) {
            coords.insert(axis.field.clone(), axis.values[k].clone());
        }
        let seed = match coords.get("seed").and_then(Value::as_u64) {
            // An axis over the seed sets it itself.
            Some(seed) => seed,
            None => match self.seeds {
                SeedMode::PerPoint => point_seed(self.seed, &coords),
                SeedMode::Same => self.seed,
            },
        };
        (seed, coords)
    }

    /// Point `index`, built and validated.
    ///
    /// # Panics
    /// If `index` is not below [`Sweep::len`].
    pub fn point(&self, index: usize) -> Result<Point, SweepError> {
        assert!(
            index < self.len,
            "point {index} of a {}-point sweep",
            self.len
        );
        let (seed, coords) = self.seed_and_coords(index);
        let mut tree = self.base.clone();
        tree["seed"] = Value::from(seed);
        for axis in &self.axes {
            path::set(&mut tree, &axis.path, &coords[&axis.field])
                .expect("checked when the sweep was built");
        }
        let scenario: Scenario =
            serde_json::from_value(tree).map_err(|e| SweepError::PointRejected {
                point: index,
                coords: coords_text(&coords),
                message: e.to_string(),
            })?;
        if let Err(e) = scenario.validate() {
            let axis = e
                .field()
                .and_then(|f| self.axes.iter().position(|a| path::covers(&a.path, f)));
            return Err(SweepError::PointInvalid {
                point: index,
                coords: coords_text(&coords),
                axis: axis.map(|i| format!(" (set by axis {} `{}`)", i + 1, self.axes[i].field)),
                message: e.to_string(),
            });
        }
        Ok(Point {
            index,
            seed: scenario.seed,
            coords,
            scenario,
        })
    }

    /// Builds and validates every point, so that an error shows before any run and
    /// is the same whatever the shard.
    pub fn check_all(&self) -> Result<(), SweepError> {
        (0..self.len).try_for_each(|i| self.point(i).map(|_| ()))
    }
}

/// The seed of a point: a hash of the sweep seed and each (field, value) pair, taken in
/// field-name order, so it depends on neither thread count, shard, run order, nor the
/// order the axes are listed in.
pub fn point_seed(sweep_seed: u64, coords: &Map<String, Value>) -> u64 {
    let mut pairs: Vec<(&String, String)> = coords.iter().map(|(k, v)| (k, canonical(v))).collect();
    pairs.sort();
    let mut bytes = b"irqsim-sweep-point\0".to_vec();
    bytes.extend_from_slice(&sweep_seed.to_le_bytes());
    for (k, v) in pairs {
        bytes.extend_from_slice(k.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(v.as_bytes());
        bytes.push(0);
    }
    mix(stable_hash(&bytes))
}

/// splitmix64's finalizer: spreads FNV's output over all 64 bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Canonical text of a value: strings bare, numbers in Rust's shortest round-trip
/// form (`2000000`, `0.1`), anything else as compact JSON.
pub fn canonical(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(u)) => u.to_string(),
            _ => {
                let f = n.as_f64().expect("a JSON number");
                format!("{f}")
            }
        },
        other => other.to_string(),
    }
}

/// `field = value, field = value` for error messages and labels.
pub fn coords_text(coords: &Map<String, Value>) -> String {
    if coords.is_empty() {
        return "no axes".into();
    }
    coords
        .iter()
        .map(|(k, v)| format!("{k} = {}", canonical(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn resolve_base(spec: BaseSpec, origin: &str, dir: &Path) -> Result<Scenario, SweepError> {
    match spec {
        BaseSpec::Inline(table) => {
            Scenario::deserialize(toml::Value::Table(table)).map_err(|e| SweepError::Base {
                base: format!("[base] of {origin}"),
                message: e.to_string(),
            })
        }
        BaseSpec::Reference(name) => {
            let path: PathBuf = dir.join(&name);
            if path.is_file() {
                let text = std::fs::read_to_string(&path).map_err(|e| SweepError::Io {
                    path: path.display().to_string(),
                    message: e.to_string(),
                })?;
                Scenario::from_toml_str(&text, &path.display().to_string()).map_err(|e| {
                    SweepError::Base {
                        base: path.display().to_string(),
                        message: e.to_string(),
                    }
                })
            } else if let Some(text) = crate::scenarios::embedded(&name) {
                Scenario::from_toml_str(text, &name).map_err(|e| SweepError::Base {
                    base: name.clone(),
                    message: e.to_string(),
                })
            } else {
                let names: Vec<&str> = crate::scenarios::EMBEDDED.iter().map(|(n, _)| *n).collect();
                Err(SweepError::Base {
                    base: name,
                    message: format!(
                        "no such file {} and no embedded scenario of that name (embedded: {})",
                        path.display(),
                        names.join(", ")
                    ),
                })
            }
        }
    }
}

/// Applies the `[set]` table's field paths to `base`.
fn apply_set(base: &Scenario, set: toml::Table) -> Result<Scenario, SweepError> {
    let mut tree = serde_json::to_value(base).expect("a Scenario serializes");
    let fail = |key: &str, message: String| SweepError::Base {
        base: format!("[set] `{key}`"),
        message,
    };
    for (key, value) in set {
        let path = FieldPath::parse(&key).map_err(|m| fail(&key, m))?;
        let value = toml_to_json(value).map_err(|m| fail(&key, m))?;
        path::set(&mut tree, &path, &value).map_err(|m| fail(&key, m.to_string()))?;
    }
    serde_json::from_value(tree).map_err(|e| SweepError::Base {
        base: "[set]".into(),
        message: e.to_string(),
    })
}

fn build_axis(i: usize, a: AxisFile) -> Result<Axis, SweepError> {
    let n = i + 1;
    let path = FieldPath::parse(&a.field).map_err(|message| SweepError::Field {
        axis: n,
        field: a.field.clone(),
        message,
    })?;
    let values = match (a.values, a.range) {
        (Some(vs), None) => vs
            .into_iter()
            .map(|v| {
                toml_to_json(v).map_err(|message| SweepError::Field {
                    axis: n,
                    field: a.field.clone(),
                    message,
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
        (None, Some(r)) => expand_range(&r).map_err(|message| SweepError::BadRange {
            axis: n,
            field: a.field.clone(),
            message,
        })?,
        _ => {
            return Err(SweepError::BadRange {
                axis: n,
                field: a.field,
                message: "give exactly one of `values = [...]` and `range = { ... }`".into(),
            })
        }
    };
    Ok(Axis {
        field: a.field,
        path,
        values,
    })
}

/// The values of a range, `to` included when the steps land on it.
fn expand_range(r: &RangeFile) -> Result<Vec<Value>, String> {
    let (from, to) = (r.from.f(), r.to.f());
    if !from.is_finite() || !to.is_finite() {
        return Err("`from` and `to` must be finite numbers".into());
    }
    let ints = r.from.is_int() && r.to.is_int();
    let floats: Vec<f64> = match (r.step, r.points) {
        (Some(_), Some(_)) | (None, None) => {
            return Err("give exactly one of `step` and `points`".into())
        }
        (Some(step), None) => {
            if r.log {
                return Err("`log = true` needs `points`, not `step`".into());
            }
            let s = step.f();
            if !s.is_finite() || s == 0.0 || (to - from) * s < 0.0 {
                return Err(format!(
                    "step {s} never goes from {from} to {to}: it must be non-zero and point from `from` towards `to`"
                ));
            }
            let count = ((to - from) / s + 1e-9).floor() as u64 + 1;
            if count as usize > MAX_POINTS {
                return Err(format!("{count} values, more than {MAX_POINTS}"));
            }
            if ints && step.is_int() {
                let (f, st) = (from as i64, s as i64);
                return Ok((0..count as i64).map(|k| Value::from(f + k * st)).collect());
            }
            (0..count).map(|k| from + k as f64 * s).collect()
        }
        (None, Some(points)) => {
            if points == 0 || points as usize > MAX_POINTS {
                return Err(format!("points = {points}: expected 1..={MAX_POINTS}"));
            }
            if r.log && (from <= 0.0 || to <= 0.0) {
                return Err(format!(
                    "a log range needs `from` and `to` above zero, got {from} and {to}"
                ));
            }
            (0..points)
                .map(|k| {
                    let t = if points == 1 {
                        0.0
                    } else {
                        k as f64 / (points - 1) as f64
                    };
                    if r.log {
                        from * (to / from).powf(t)
                    } else {
                        from + (to - from) * t
                    }
                })
                .collect()
        }
    };
    Ok(floats
        .into_iter()
        .map(|x| {
            let x = round_sig(x);
            if ints && x.fract() == 0.0 && x.abs() < 9.0e15 {
                Value::from(x as i64)
            } else {
                Value::from(x)
            }
        })
        .collect())
}

/// Rounds to 12 significant digits so that `0.1 + 2 * 0.1` reads `0.3`.
fn round_sig(x: f64) -> f64 {
    if x == 0.0 {
        return 0.0;
    }
    format!("{x:.11e}").parse().unwrap_or(x)
}

fn toml_to_json(v: toml::Value) -> Result<Value, String> {
    Ok(match v {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) if f.is_finite() => Value::from(f),
        toml::Value::Float(f) => return Err(format!("value {f} is not a finite number")),
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => {
            return Err(format!("value {d}: dates are not scenario values"))
        }
        toml::Value::Array(a) => Value::Array(
            a.into_iter()
                .map(toml_to_json)
                .collect::<Result<Vec<_>, _>>()?,
        ),
        toml::Value::Table(t) => Value::Object(
            t.into_iter()
                .map(|(k, v)| toml_to_json(v).map(|v| (k, v)))
                .collect::<Result<Map<_, _>, _>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(text: &str) -> Result<Vec<Value>, String> {
        #[derive(Deserialize)]
        struct W {
            range: RangeFile,
        }
        let w: W = toml::from_str(text).unwrap();
        expand_range(&w.range)
    }

    #[test]
    fn integer_ranges_stay_integers_and_include_the_end() {
        let v = range("range = { from = 1, to = 8, step = 1 }").unwrap();
        assert_eq!(v, (1..=8).map(Value::from).collect::<Vec<_>>());
        let v = range("range = { from = 8, to = 2, step = -3 }").unwrap();
        assert_eq!(v, vec![Value::from(8), Value::from(5), Value::from(2)]);
    }

    #[test]
    fn float_ranges_are_rounded_and_log_ranges_are_geometric() {
        let v = range("range = { from = 0.1, to = 0.5, step = 0.1 }").unwrap();
        let f: Vec<f64> = v.iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(f, vec![0.1, 0.2, 0.3, 0.4, 0.5]);
        let v = range("range = { from = 1e5, to = 1e7, points = 3, log = true }").unwrap();
        let f: Vec<f64> = v.iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(f, vec![1e5, 1e6, 1e7]);
        let v = range("range = { from = 1, to = 1024, points = 11, log = true }").unwrap();
        assert_eq!(v[10], Value::from(1024));
        assert_eq!(v[1], Value::from(2));
    }

    #[test]
    fn bad_ranges_say_why() {
        for (text, needle) in [
            ("range = { from = 1, to = 8 }", "exactly one of"),
            ("range = { from = 1, to = 8, step = 0 }", "non-zero"),
            ("range = { from = 1, to = 8, step = -1 }", "towards"),
            (
                "range = { from = 0, to = 8, points = 3, log = true }",
                "above zero",
            ),
            (
                "range = { from = 1, to = 8, step = 1, log = true }",
                "needs `points`",
            ),
            ("range = { from = 1, to = 8, points = 0 }", "points = 0"),
        ] {
            let e = range(text).unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn point_seed_ignores_axis_order_but_not_values() {
        let mut a = Map::new();
        a.insert("mode".into(), Value::from("posted"));
        a.insert("max_loops".into(), Value::from(3));
        let mut b = Map::new();
        b.insert("max_loops".into(), Value::from(3));
        b.insert("mode".into(), Value::from("posted"));
        assert_eq!(point_seed(1, &a), point_seed(1, &b));
        assert_ne!(point_seed(2, &a), point_seed(1, &a));
        b.insert("max_loops".into(), Value::from(4));
        assert_ne!(point_seed(1, &a), point_seed(1, &b));
    }

    #[test]
    fn canonical_numbers_are_short() {
        assert_eq!(canonical(&Value::from(2e6)), "2000000");
        assert_eq!(canonical(&Value::from(0.1)), "0.1");
        assert_eq!(canonical(&Value::from(7u64)), "7");
        assert_eq!(canonical(&Value::from("posted")), "posted");
    }
}

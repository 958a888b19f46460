//! `irqsim validate`: the model against every published figure of the seeds (000-004) that
//! an experiment reproduces, and how the comparisons move when one assumed or
//! calibrated cost moves.
//!
//! Each figure ([`figures::all`]) is a published value or a ratio of two published
//! values of one test. A value's magnitude holds when the model is within
//! [`MAGNITUDE`] of it. A comparison's direction holds when the model's ratio is on
//! the same side of 1; a published difference under [`TIE`] is a tie, which holds when
//! the model's two values are within [`TIE`] of each other. Its magnitude holds when
//! the model's ratio is within [`MAGNITUDE`] of the published ratio.
//!
//! `--sensitivity` moves each `assumption` and `calibrated` numeric cost field of the
//! platforms the points run on by -20 % and +20 %, one at a time, reruns every point
//! on that platform, and lists every comparison whose direction (or tie) changes,
//! with the field and, by bisection, the factor at which it changes. It also switches
//! each assumed named-choice field (where an I/O write lands, what a snoop leaves,
//! when a CMD_SYNC completes, ...) to each of its other choices, one at a time, and
//! lists the comparisons that change direction with it: a binary assumption that
//! decides a direction is as much a warning as a cost that does.

pub mod arm_apic_figures;
pub mod figures;
pub mod points;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use crate::experiments::FieldSet;
use crate::sweep::path::FieldPath;
use figures::{Figure, Kind};
use points::{run_jobs, Job, Point, Results};

/// A model value within this fraction of the published one has the right magnitude.
pub const MAGNITUDE: f64 = 0.25;
/// A published difference under this fraction is a tie.
pub const TIE: f64 = 0.05;
/// How far `--sensitivity` moves a field, as a fraction.
pub const MOVE: f64 = 0.20;

/// Where a comparison's model ratio falls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The first value is the larger by at least [`TIE`].
    Above,
    /// Within [`TIE`]: a tie.
    Tie,
    /// The first value is the smaller by at least [`TIE`].
    Below,
}

impl Direction {
    /// The direction of a ratio.
    pub fn of(ratio: f64) -> Direction {
        if ratio >= 1.0 + TIE {
            Direction::Above
        } else if ratio <= 1.0 / (1.0 + TIE) {
            Direction::Below
        } else {
            Direction::Tie
        }
    }

    fn name(self) -> &'static str {
        match self {
            Direction::Above => "above",
            Direction::Tie => "tie",
            Direction::Below => "below",
        }
    }
}

/// One row of the validation table.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// The figure's id.
    pub id: String,
    /// The seed.
    pub seed: String,
    /// Where it was published.
    pub citation: String,
    /// What it measures.
    pub what: String,
    /// Unit of both values.
    pub unit: String,
    /// The published value (a ratio for a comparison).
    pub published: f64,
    /// The model's value.
    pub model: f64,
    /// model / published.
    pub ratio: f64,
    /// `value` or `comparison`.
    pub kind: &'static str,
    /// For a comparison: whether the published direction (or tie) holds.
    pub direction_holds: Option<bool>,
    /// Whether the model is within [`MAGNITUDE`] of the published value.
    pub magnitude_holds: bool,
    /// Whether the figure set a cost (then it is no evidence for the model).
    pub calibration: bool,
}

/// A comparison whose direction changed when one field moved.
#[derive(Clone, Debug, Serialize)]
pub struct Flip {
    /// The figure.
    pub figure: String,
    /// The field moved (`costs.<table>.<field>`).
    pub field: String,
    /// The factor at which the change was seen (0.8 or 1.2).
    pub factor: f64,
    /// Where the change happens, as a factor of the field's value, to within 1 %.
    pub crossover: f64,
    /// The model's direction at the profile's values and at `factor`.
    pub from: Direction,
    /// See `from`.
    pub to: Direction,
}

/// A comparison whose direction changed when one named-choice field was switched.
#[derive(Clone, Debug, Serialize)]
pub struct Switch {
    /// The figure.
    pub figure: String,
    /// The field switched (`costs.<table>.<field>`).
    pub field: String,
    /// The choice it was switched to.
    pub value: String,
    /// The model's direction at the profile's choice and at `value`.
    pub from: Direction,
    /// See `from`.
    pub to: Direction,
    /// The model's ratio at the profile's choice.
    pub model_from: f64,
    /// The model's ratio at `value`.
    pub model_to: f64,
}

/// A named-choice field `--sensitivity` switched.
#[derive(Clone, Debug, Serialize)]
pub struct SwitchedField {
    /// `costs.<table>.<field>`.
    pub field: String,
    /// The choices tried on each platform (every one but the profile's).
    pub choices: BTreeMap<String, Vec<String>>,
}

/// What `--sensitivity` found.
#[derive(Clone, Debug, Serialize)]
pub struct Sensitivity {
    /// Each field moved, with the platforms it was moved on.
    pub moved: Vec<MovedField>,
    /// Every comparison that changed direction, field by field.
    pub flips: Vec<Flip>,
    /// Each named-choice field switched, with the choices tried.
    pub switched: Vec<SwitchedField>,
    /// Every comparison that changed direction when a field was switched.
    pub switches: Vec<Switch>,
}

/// A field `--sensitivity` moved.
#[derive(Clone, Debug, Serialize)]
pub struct MovedField {
    /// `costs.<table>.<field>`.
    pub field: String,
    /// `assumption` or `calibrated` on each platform it was moved on.
    pub kinds: BTreeMap<String, String>,
}

/// The whole output of `irqsim validate`.
#[derive(Clone, Debug, Serialize)]
pub struct Validation {
    /// Seed of every run.
    pub seed: u64,
    /// One row per published figure.
    pub figures: Vec<Comparison>,
    /// With `--sensitivity`.
    pub sensitivity: Option<Sensitivity>,
    /// Always the model note.
    pub note: &'static str,
}

fn all_points() -> Vec<Point> {
    let set: BTreeSet<Point> = figures::all()
        .flat_map(|f| f.points.iter().copied())
        .collect();
    set.into_iter().collect()
}

fn run(
    points: &[Point],
    sets: &dyn Fn(Point) -> Vec<FieldSet>,
    seed: u64,
    threads: usize,
) -> Results {
    let jobs: Vec<Job> = points
        .iter()
        .map(|&p| Job {
            point: p,
            sets: sets(p),
        })
        .collect();
    points
        .iter()
        .copied()
        .zip(run_jobs(&jobs, seed, threads))
        .collect()
}

fn compare(f: &Figure, r: &Results) -> Comparison {
    let model = (f.model)(r);
    let ratio = model / f.published;
    let direction_holds = match f.kind {
        Kind::Value => None,
        Kind::Comparison => Some(Direction::of(model) == Direction::of(f.published)),
    };
    Comparison {
        id: f.id.into(),
        seed: f.seed.into(),
        citation: f.citation.into(),
        what: f.what.into(),
        unit: f.unit.into(),
        published: f.published,
        model,
        ratio,
        kind: match f.kind {
            Kind::Value => "value",
            Kind::Comparison => "comparison",
        },
        direction_holds,
        magnitude_holds: (ratio - 1.0).abs() <= MAGNITUDE,
        calibration: f.calibration,
    }
}

/// The sets that move `field` by `factor` on the platform of each point (nothing on a
/// platform where the field is primary).
fn moved_sets(field: &str, factor: f64) -> impl Fn(Point) -> Vec<FieldSet> + '_ {
    move |p: Point| {
        let platform = crate::platform::get(p.platform()).expect("embedded");
        match platform.movable_fields().find(|f| f.path == field) {
            Some(f) => vec![FieldSet {
                path: FieldPath::parse(field).expect("profile paths parse"),
                value: Value::from(f.value.as_f64().expect("movable fields are numbers") * factor),
            }],
            None => Vec::new(),
        }
    }
}

/// The sets that switch `field` to `value` on the platform of each point where it is
/// an assumed named choice with another value (nothing elsewhere).
fn switched_sets<'a>(field: &'a str, value: &'a str) -> impl Fn(Point) -> Vec<FieldSet> + 'a {
    move |p: Point| {
        let platform = crate::platform::get(p.platform()).expect("embedded");
        let switchable = platform
            .switchable_fields()
            .any(|(f, others)| f.path == field && others.contains(&value));
        if switchable {
            vec![FieldSet {
                path: FieldPath::parse(field).expect("profile paths parse"),
                value: Value::from(value),
            }]
        } else {
            Vec::new()
        }
    }
}

/// Runs the validation; `sensitivity` adds the one-at-a-time moves.
pub fn validate(seed: u64, sensitivity: bool, threads: usize) -> Validation {
    let points = all_points();
    let base = run(&points, &|_| Vec::new(), seed, threads);
    let rows: Vec<Comparison> = figures::all().map(|f| compare(f, &base)).collect();
    let sensitivity = sensitivity.then(|| sensitivity_of(&base, &points, seed, threads));
    Validation {
        seed,
        figures: rows,
        sensitivity,
        note: crate::report::MODEL_NOTE,
    }
}

fn sensitivity_of(base: &Results, points: &[Point], seed: u64, threads: usize) -> Sensitivity {
    // Every movable field of the points' platforms, and the kinds it has there.
    let mut moved: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let platforms: BTreeSet<&str> = points.iter().map(|p| p.platform()).collect();
    for name in &platforms {
        let p = crate::platform::get(name).expect("embedded");
        for f in p.movable_fields() {
            moved
                .entry(f.path.clone())
                .or_default()
                .insert(name.to_string(), f.kind.as_str().into());
        }
    }
    let factors = [1.0 - MOVE, 1.0 + MOVE];
    let keys = moved
        .keys()
        .flat_map(|field| factors.map(|factor| (field.clone(), factor.to_bits())));
    let moved_results = run_variants(
        base,
        points,
        keys,
        |(field, bits), p| moved_sets(field, f64::from_bits(*bits))(p),
        seed,
        threads,
    );
    let mut flips = Vec::new();
    for ((field, factor_bits), results) in &moved_results {
        let factor = f64::from_bits(*factor_bits);
        for f in figures::all().filter(|f| f.kind == Kind::Comparison) {
            let from = Direction::of((f.model)(base));
            let to = Direction::of((f.model)(results));
            if from != to {
                flips.push(Flip {
                    figure: f.id.into(),
                    field: field.clone(),
                    factor,
                    crossover: crossover(f, field, factor, from, seed, threads),
                    from,
                    to,
                });
            }
        }
    }
    let (switched, switches) = switches_of(base, points, seed, threads);
    Sensitivity {
        moved: moved
            .into_iter()
            .map(|(field, kinds)| MovedField { field, kinds })
            .collect(),
        flips,
        switched,
        switches,
    }
}

/// Switches every assumed named-choice field of the points' platforms to each of its
/// other choices, one at a time, and lists the comparisons whose direction changes.
fn switches_of(
    base: &Results,
    points: &[Point],
    seed: u64,
    threads: usize,
) -> (Vec<SwitchedField>, Vec<Switch>) {
    let mut tried: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let platforms: BTreeSet<&str> = points.iter().map(|p| p.platform()).collect();
    for name in &platforms {
        let p = crate::platform::get(name).expect("embedded");
        for (f, others) in p.switchable_fields() {
            tried.entry(f.path.clone()).or_default().insert(
                name.to_string(),
                others.iter().map(|c| c.to_string()).collect(),
            );
        }
    }
    let values: BTreeSet<(String, String)> = tried
        .iter()
        .flat_map(|(field, per)| {
            per.values()
                .flatten()
                .map(move |v| (field.clone(), v.clone()))
        })
        .collect();
    let switched_results = run_variants(
        base,
        points,
        values,
        |(field, value), p| switched_sets(field, value)(p),
        seed,
        threads,
    );
    let mut switches = Vec::new();
    // Each comparison whose points ran, with its ratio at the profiles' choices.
    let compared: Vec<(&Figure, f64)> = figures::all()
        .filter(|f| f.kind == Kind::Comparison && f.points.iter().all(|p| base.contains_key(p)))
        .map(|f| (f, (f.model)(base)))
        .collect();
    for ((field, value), results) in &switched_results {
        for &(f, model_from) in &compared {
            let model_to = (f.model)(results);
            let (from, to) = (Direction::of(model_from), Direction::of(model_to));
            if from != to {
                switches.push(Switch {
                    figure: f.id.into(),
                    field: field.clone(),
                    value: value.clone(),
                    from,
                    to,
                    model_from,
                    model_to,
                });
            }
        }
    }
    let switched = tried
        .into_iter()
        .map(|(field, choices)| SwitchedField { field, choices })
        .collect();
    (switched, switches)
}

/// Every point run once per variant `key`: `sets_of(key, point)` gives the point's
/// field sets, and a point it leaves unchanged (no sets) keeps its `base` result. All
/// variants' jobs run together so the workers stay busy.
fn run_variants<K: Ord + Clone>(
    base: &Results,
    points: &[Point],
    keys: impl IntoIterator<Item = K>,
    sets_of: impl Fn(&K, Point) -> Vec<FieldSet>,
    seed: u64,
    threads: usize,
) -> BTreeMap<K, Results> {
    let mut jobs = Vec::new();
    let mut owners = Vec::new();
    for key in keys {
        for &p in points {
            let sets = sets_of(&key, p);
            if !sets.is_empty() {
                owners.push((key.clone(), p));
                jobs.push(Job { point: p, sets });
            }
        }
    }
    let mut out: BTreeMap<K, Results> = BTreeMap::new();
    for ((key, p), row) in owners.into_iter().zip(run_jobs(&jobs, seed, threads)) {
        out.entry(key)
            .or_insert_with(|| base.clone())
            .insert(p, row);
    }
    out
}

/// Bisects the factor between 1 and `far` at which `f`'s direction leaves `from`.
fn crossover(f: &Figure, field: &str, far: f64, from: Direction, seed: u64, threads: usize) -> f64 {
    let (mut near, mut far) = (1.0, far);
    while (far - near).abs() > 0.01 {
        let mid = (near + far) / 2.0;
        let r = run(f.points, &moved_sets(field, mid), seed, threads);
        if Direction::of((f.model)(&r)) == from {
            near = mid;
        } else {
            far = mid;
        }
    }
    (near + far) / 2.0
}

fn fmt(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.3} M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1} k", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// The validation as a table.
pub fn render(v: &Validation) -> String {
    use crate::report::table::Table;
    let mut t = Table::new([
        "seed",
        "figure",
        "unit",
        "published",
        "model",
        "model/pub",
        "direction",
        "magnitude",
        "calib.",
    ]);
    for c in &v.figures {
        t.row([
            c.seed.clone(),
            c.id.clone(),
            c.unit.clone(),
            fmt(c.published),
            fmt(c.model),
            format!("{:.2}", c.ratio),
            match c.direction_holds {
                None => "-".to_string(),
                Some(true) => "holds".into(),
                Some(false) => "FLIPS".into(),
            },
            if c.magnitude_holds { "holds" } else { "off" }.into(),
            if c.calibration { "yes" } else { "" }.into(),
        ]);
    }
    let mut s = format!(
        "irqsim validate (seed {}): each published figure beside the model's value\n",
        v.seed
    );
    s.push_str(&t.render());
    s.push_str(&format!(
        "direction: a comparison's ratio on the published side of 1 (a difference under {:.0} % is a tie); magnitude: within {:.0} % of the published value\n",
        TIE * 100.0,
        MAGNITUDE * 100.0
    ));
    let mut cites = BTreeSet::new();
    for c in &v.figures {
        cites.insert((c.seed.clone(), c.citation.clone()));
    }
    s.push_str("sources:\n");
    for (seed, c) in cites {
        s.push_str(&format!("  {seed}: {c}\n"));
    }
    if let Some(sens) = &v.sensitivity {
        s.push_str(&format!(
            "\nsensitivity: {} fields moved by -{:.0} % and +{:.0} %, one at a time\n",
            sens.moved.len(),
            MOVE * 100.0,
            MOVE * 100.0
        ));
        if sens.flips.is_empty() {
            s.push_str("no comparison changes direction\n");
        } else {
            let mut t = Table::new(["figure", "field", "moved to", "model", "crossover"]);
            for f in &sens.flips {
                t.row([
                    f.figure.clone(),
                    f.field.clone(),
                    format!("x{:.1}", f.factor),
                    format!("{} -> {}", f.from.name(), f.to.name()),
                    format!("x{:.2}", f.crossover),
                ]);
            }
            s.push_str(&t.render());
        }
        s.push_str(&format!(
            "switched: {} named-choice fields, each to every other choice, one at a time\n",
            sens.switched.len()
        ));
        if sens.switches.is_empty() {
            s.push_str("no comparison changes direction\n");
        } else {
            let mut t = Table::new(["figure", "field", "switched to", "model", "ratio"]);
            for w in &sens.switches {
                t.row([
                    w.figure.clone(),
                    w.field.clone(),
                    w.value.clone(),
                    format!("{} -> {}", w.from.name(), w.to.name()),
                    format!("{:.3} -> {:.3}", w.model_from, w.model_to),
                ]);
            }
            s.push_str(&t.render());
        }
    }
    s.push_str(&format!("({})\n", crate::report::MODEL_NOTE));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_and_ties() {
        assert_eq!(Direction::of(1.30), Direction::Above);
        assert_eq!(Direction::of(1.04), Direction::Tie);
        assert_eq!(Direction::of(1.0 / 1.04), Direction::Tie);
        assert_eq!(Direction::of(0.9), Direction::Below);
    }

    #[test]
    fn every_figure_names_points_that_exist_and_only_calibration_inputs_are_marked() {
        let calibrated: Vec<&str> = figures::all()
            .filter(|f| f.calibration)
            .map(|f| f.id)
            .collect();
        // FIDELITY.md allows two calibration inputs, both from seed 000.
        assert_eq!(
            calibrated,
            ["000-nvme4-remapped-msis-per-vector", "000-polled-iops"]
        );
        let mut ids = BTreeSet::new();
        for f in figures::all() {
            assert!(ids.insert(f.id), "duplicate figure {}", f.id);
            assert!(f.published.is_finite() && f.published > 0.0, "{}", f.id);
            if f.kind == Kind::Comparison {
                assert_eq!(f.points.len(), 2, "{}", f.id);
            }
        }
    }

    #[test]
    fn a_moved_field_changes_only_the_platforms_where_it_is_movable() {
        // The drive ceiling is calibrated on spr and primary on spr-2s.
        let sets = moved_sets("costs.nvme.iops_ceiling", 0.8);
        let on_spr = sets(Point::Nvme(true, 4));
        assert_eq!(on_spr.len(), 1);
        assert_eq!(on_spr[0].value.as_f64(), Some(3.25e6 * 0.8));
        assert!(sets(Point::Vmd(1, true, false)).is_empty());
    }

    #[test]
    fn switching_when_a_cmd_sync_completes_decides_seed_004s_sixteen_thread_direction() {
        let points = [
            Point::Smmu(true, "udp-tx", 16),
            Point::Smmu(false, "udp-tx", 16),
        ];
        let base = run(&points, &|_| Vec::new(), 1, 2);
        let (switched, switches) = switches_of(&base, &points, 1, 2);
        let fields: Vec<&str> = switched.iter().map(|s| s.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "costs.fabric.delivery_shared_by",
                "costs.smmu_host.fetch_snoop",
                "costs.smmu_host.io_write_lands",
                "costs.smmu_host.msi_completion"
            ]
        );
        let tx16: Vec<&Switch> = switches
            .iter()
            .filter(|w| w.figure == "004-tx16-sev-vs-msi")
            .collect();
        assert_eq!(tx16.len(), 1, "{switches:?}");
        let w = tx16[0];
        assert_eq!(
            (w.field.as_str(), w.value.as_str()),
            ("costs.smmu_host.msi_completion", "acknowledged")
        );
        assert_eq!(w.to, Direction::Above);
        assert_ne!(w.from, Direction::Above);
        assert!(w.model_to > w.model_from, "{w:?}");
    }

    #[test]
    fn a_switched_field_changes_only_the_platforms_where_it_is_an_assumed_choice() {
        let sets = switched_sets("costs.smmu_host.msi_completion", "acknowledged");
        let on_kunpeng = sets(Point::Smmu(true, "udp-tx", 16));
        assert_eq!(on_kunpeng.len(), 1);
        assert_eq!(on_kunpeng[0].value, Value::from("acknowledged"));
        // Switching a field to the profile's own choice sets nothing.
        assert!(
            switched_sets("costs.smmu_host.msi_completion", "in-order")(Point::Smmu(
                true, "udp-tx", 16
            ))
            .is_empty()
        );
        assert!(
            switched_sets("costs.smmu_host.io_write_lands", "memory")(Point::Smmu(
                true, "empty", 1
            ))
            .is_empty()
        );
    }
}

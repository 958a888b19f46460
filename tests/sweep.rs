//! Parameter sweeps: definition, errors, determinism across threads and shards, merge.

use std::path::{Path, PathBuf};

use irqsim::sweep::{
    merge_dirs, point_seed, run_to_dir, ProgressMode, RunOptions, SeedMode, Shard, Sweep,
    SweepError, CSV_FILE, JSONL_FILE, MANIFEST_FILE,
};
use serde_json::Value;

/// Six short points: three rates by two modes.
const SMALL: &str = r#"
name = "test"
seed = 5
base = "default"

[set]
duration_us = 300

[[axes]]
field = "devices[*].arrival.rate_per_s"
values = [5e5, 1e6, 2e6]

[[axes]]
field = "mode"
values = ["posted", "remapped"]
"#;

fn sweep(text: &str) -> Result<Sweep, SweepError> {
    Sweep::from_toml_str(text, "test.toml", Path::new("."))
}

fn small() -> Sweep {
    sweep(SMALL).unwrap()
}

/// A fresh, empty directory under the system temp dir.
fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("irqsim-sweep-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn opts(threads: usize, shard: Shard) -> RunOptions {
    RunOptions {
        threads,
        shard,
        progress: ProgressMode::Quiet,
        extra_metrics: vec![],
    }
}

/// The lines of points.jsonl with the wall-clock field removed.
fn lines_without_wall_clock(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join(JSONL_FILE))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            let wall = v["report"].as_object_mut().unwrap().remove("wall_time_s");
            assert!(wall.is_some(), "the report carries wall_time_s");
            v
        })
        .collect()
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap()
}

#[test]
fn example_sweep_file_loads_with_eight_points() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/sweeps/posted_rate.toml");
    let s = Sweep::load(&path).unwrap();
    assert_eq!(s.len(), 8);
    assert_eq!(s.axes.len(), 2);
    s.check_all().unwrap();
    let p = s.point(7).unwrap();
    assert_eq!(p.coords["mode"], "remapped");
    assert_eq!(p.scenario.duration_us, 1000.0);
    assert!(p
        .scenario
        .devices
        .iter()
        .all(|d| format!("{:?}", d.arrival).contains("2000000")));
}

#[test]
fn points_enumerate_first_axis_slowest_with_coordinate_seeds() {
    let s = small();
    assert_eq!(s.len(), 6);
    let coords: Vec<String> = (0..6)
        .map(|i| irqsim::sweep::coords_text(&s.point(i).unwrap().coords))
        .collect();
    assert_eq!(
        coords[1],
        "devices[*].arrival.rate_per_s = 500000, mode = remapped"
    );
    assert_eq!(
        coords[4],
        "devices[*].arrival.rate_per_s = 2000000, mode = posted"
    );
    let p = s.point(3).unwrap();
    assert_eq!(p.seed, point_seed(5, &p.coords));
    assert_eq!(p.scenario.seed, p.seed);
    let seeds: std::collections::BTreeSet<u64> = (0..6).map(|i| s.point(i).unwrap().seed).collect();
    assert_eq!(seeds.len(), 6, "every point has its own seed");

    // Listing the axes the other way round renumbers points but keeps each
    // coordinate's seed.
    let swapped = SMALL.replace(
        "[[axes]]\nfield = \"devices[*].arrival.rate_per_s\"\nvalues = [5e5, 1e6, 2e6]\n\n",
        "",
    )
        + "\n[[axes]]\nfield = \"devices[*].arrival.rate_per_s\"\nvalues = [5e5, 1e6, 2e6]\n";
    let t = sweep(&swapped).unwrap();
    assert_eq!(t.axes[0].field, "mode");
    let q = t.point(1).unwrap();
    assert_eq!(q.coords["mode"], "posted");
    assert_eq!(q.coords["devices[*].arrival.rate_per_s"], 1e6);
    assert_eq!(q.seed, s.point(2).unwrap().seed);
    assert_ne!(t.fingerprint(), s.fingerprint());
}

#[test]
fn same_seed_mode_and_seed_axis() {
    let s = sweep(&SMALL.replace("seed = 5", "seed = 5\nseeds = \"same\"")).unwrap();
    assert_eq!(s.seeds, SeedMode::Same);
    assert!((0..6).all(|i| s.point(i).unwrap().seed == 5));
    let s = sweep(
        "base = \"default\"\n[[axes]]\nfield = \"seed\"\nrange = { from = 1, to = 3, step = 1 }\n",
    )
    .unwrap();
    let seeds: Vec<u64> = (0..3).map(|i| s.point(i).unwrap().seed).collect();
    assert_eq!(seeds, vec![1, 2, 3], "a seed axis sets the seed itself");
}

/// What `--dry-run` lists without building points is what building them gives, in
/// each seed mode and with a seed axis.
#[test]
fn listed_seeds_and_coordinates_are_those_of_the_built_points() {
    let seed_axis =
        "base = \"default\"\n[[axes]]\nfield = \"seed\"\nrange = { from = 1, to = 3, step = 1 }\n\
         [[axes]]\nfield = \"mode\"\nvalues = [\"posted\", \"remapped\"]\n";
    for s in [
        small(),
        sweep(&SMALL.replace("seed = 5", "seed = 5\nseeds = \"same\"")).unwrap(),
        sweep(seed_axis).unwrap(),
    ] {
        for i in 0..s.len() {
            let p = s.point(i).unwrap();
            assert_eq!(s.seed_and_coords(i), (p.seed, p.coords), "point {i}");
        }
    }
}

#[test]
fn fingerprint_is_the_definition_not_the_spelling() {
    let a = small();
    let b = sweep(&SMALL.replace(
        "values = [5e5, 1e6, 2e6]",
        "values = [500000.0, 1000000.0, 2e6]",
    ))
    .unwrap();
    assert_eq!(a.fingerprint(), b.fingerprint());
    let c = sweep(&SMALL.replace("seed = 5", "seed = 6")).unwrap();
    assert_ne!(a.fingerprint(), c.fingerprint());
    let d = sweep(&SMALL.replace("duration_us = 300", "duration_us = 301")).unwrap();
    assert_ne!(a.fingerprint(), d.fingerprint());
}

#[test]
fn one_thread_and_two_threads_give_identical_results() {
    let s = small();
    let d1 = temp_dir("t1");
    let d2 = temp_dir("t2");
    let r1 = run_to_dir(&s, &opts(1, Shard::WHOLE), &d1).unwrap();
    let r2 = run_to_dir(&s, &opts(2, Shard::WHOLE), &d2).unwrap();
    assert_eq!((r1.threads, r2.threads), (1, 2));
    assert_eq!(r1.records, r2.records);
    assert_eq!(r1.records.len(), 6);
    assert_eq!(lines_without_wall_clock(&d1), lines_without_wall_clock(&d2));
    assert_eq!(read(&d1, CSV_FILE), read(&d2, CSV_FILE));
    assert_eq!(read(&d1, MANIFEST_FILE), read(&d2, MANIFEST_FILE));
    let points: Vec<u64> = lines_without_wall_clock(&d1)
        .iter()
        .map(|l| l["point"].as_u64().unwrap())
        .collect();
    assert_eq!(points, vec![0, 1, 2, 3, 4, 5], "lines are in point order");
    let csv = read(&d1, CSV_FILE);
    assert_eq!(csv.lines().count(), 7);
    assert!(csv.starts_with("point,seed,devices[*].arrival.rate_per_s,mode,handled_per_s,"));
    for l in lines_without_wall_clock(&d1) {
        assert_eq!(l["metrics"]["msis_balanced"], true);
        assert_eq!(l["sweep"], s.fingerprint());
        assert!(l["metrics"]["handled_per_s"].as_f64().unwrap() > 0.0);
    }
    let _ = std::fs::remove_dir_all(&d1);
    let _ = std::fs::remove_dir_all(&d2);
}

#[test]
fn one_shard_equals_three_merged_shards() {
    let s = small();
    let whole = temp_dir("whole");
    run_to_dir(&s, &opts(2, Shard::WHOLE), &whole).unwrap();
    let shards: Vec<PathBuf> = (1..=3)
        .map(|k| {
            let d = temp_dir(&format!("shard{k}"));
            let r = run_to_dir(&s, &opts(1, Shard::new(k, 3).unwrap()), &d).unwrap();
            assert_eq!(r.records.len(), 2);
            assert!(r.records.iter().all(|p| p.point % 3 == k - 1));
            d
        })
        .collect();
    let manifest: Value = serde_json::from_str(&read(&shards[1], MANIFEST_FILE)).unwrap();
    assert_eq!(manifest["shard"], "2/3");
    let merged = temp_dir("merged");
    // Shards given in any order.
    let inputs = vec![shards[2].clone(), shards[0].clone(), shards[1].clone()];
    let m = merge_dirs(&inputs, &merged, false).unwrap();
    assert_eq!(m.records.len(), 6);
    assert!(m.missing.is_empty());
    assert_eq!(
        lines_without_wall_clock(&whole),
        lines_without_wall_clock(&merged)
    );
    assert_eq!(read(&whole, CSV_FILE), read(&merged, CSV_FILE));

    // Merge errors: a shard twice, a shard missing, another sweep's shard.
    let out = temp_dir("merge-bad");
    let e = merge_dirs(&[shards[0].clone(), shards[0].clone()], &out, false).unwrap_err();
    assert!(e.to_string().contains("is given twice"), "{e}");
    let half = temp_dir("half");
    run_to_dir(&s, &opts(1, Shard::new(1, 2).unwrap()), &half).unwrap();
    let e = merge_dirs(&[shards[0].clone(), half.clone()], &out, false).unwrap_err();
    assert!(e.to_string().contains("point 0 is in both"), "{e}");
    let e = merge_dirs(&shards[..2], &out, false).unwrap_err();
    assert!(
        e.to_string()
            .contains("2 of 6 points are missing (points 2, 5)"),
        "{e}"
    );
    let partial = merge_dirs(&shards[..2], &out, true).unwrap();
    assert_eq!(partial.missing, vec![2, 5]);
    // The merged manifest says what it holds and what is missing.
    let m: Value = serde_json::from_str(&read(&out, MANIFEST_FILE)).unwrap();
    assert_eq!(m["missing_points"], 2);
    assert_eq!(m["shard"], "merged");
    assert_eq!(m["shard_points"], 4);
    assert_eq!(m["merged_from"].as_array().unwrap().len(), 2);
    let full: Value = serde_json::from_str(&read(&merged, MANIFEST_FILE)).unwrap();
    assert_eq!(full["missing_points"], 0);
    assert_eq!(full["shard_points"], 6);
    // A manifest whose fingerprint is not the points' sweep is refused.
    let forged = temp_dir("forged");
    run_to_dir(&s, &opts(1, Shard::new(1, 3).unwrap()), &forged).unwrap();
    let mut fm: Value = serde_json::from_str(&read(&forged, MANIFEST_FILE)).unwrap();
    fm["fingerprint"] = Value::from("0000000000000000");
    std::fs::write(forged.join(MANIFEST_FILE), fm.to_string()).unwrap();
    let e = merge_dirs(
        &[forged.clone(), shards[1].clone(), shards[2].clone()],
        &out,
        false,
    )
    .unwrap_err();
    assert!(e.to_string().contains("the manifest says sweep"), "{e}");
    // A point past the end of its sweep is refused.
    let past = temp_dir("past");
    std::fs::create_dir_all(&past).unwrap();
    let mut line: Value =
        serde_json::from_str(read(&shards[0], JSONL_FILE).lines().next().unwrap()).unwrap();
    line["point"] = Value::from(99);
    std::fs::write(past.join(JSONL_FILE), format!("{line}\n")).unwrap();
    let e = merge_dirs(std::slice::from_ref(&past), &out, true).unwrap_err();
    assert!(e.to_string().contains("past the end"), "{e}");
    let _ = std::fs::remove_dir_all(&forged);
    let _ = std::fs::remove_dir_all(&past);
    let other = sweep(&SMALL.replace("seed = 5", "seed = 9")).unwrap();
    let od = temp_dir("other");
    run_to_dir(&other, &opts(1, Shard::new(3, 3).unwrap()), &od).unwrap();
    let e = merge_dirs(
        &[shards[0].clone(), shards[1].clone(), od.clone()],
        &out,
        false,
    )
    .unwrap_err();
    assert!(e.to_string().contains("different sweep definitions"), "{e}");
    let e = merge_dirs(&[temp_dir("empty")], &out, false).unwrap_err();
    assert!(e.to_string().contains("did that shard finish?"), "{e}");

    for d in shards.iter().chain([&whole, &merged, &out, &od, &half]) {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn extra_report_paths_become_metrics() {
    let s = sweep(&SMALL.replace("values = [5e5, 1e6, 2e6]", "values = [1e6]")).unwrap();
    let d = temp_dir("extra");
    let mut o = opts(2, Shard::WHOLE);
    o.extra_metrics = vec![
        "iommu.fabric_mean_wait_ns".into(),
        "cpu[0].busy_frac".into(),
    ];
    let r = run_to_dir(&s, &o, &d).unwrap();
    assert!(r.records[0].metric("cpu[0].busy_frac").unwrap() > 0.0);
    assert!(read(&d, CSV_FILE)
        .lines()
        .next()
        .unwrap()
        .ends_with(",iommu.fabric_mean_wait_ns,cpu[0].busy_frac"));
    o.extra_metrics = vec!["iommu.nothing".into()];
    let e = run_to_dir(&s, &o, &d).unwrap_err();
    assert!(
        e.to_string().contains("no single value at `iommu.nothing`"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn optional_tables_are_created_for_nested_fields() {
    // A closed-loop base: the axis reaches into closed_loop.
    let text = r#"
base = "default"
[set]
duration_us = 200
"devices[*].arrival" = "unset"
[[axes]]
field = "devices[0].closed_loop.inflight"
values = [2, 8]
"#;
    // Strings are not arrival processes: the [set] error names the key.
    let e = sweep(text).unwrap_err().to_string();
    assert!(e.contains("[set]"), "{e}");
    // On an open-loop device, creating closed_loop makes the point invalid, and the
    // error names the point and what is allowed.
    let text =
        "base = \"default\"\n[[axes]]\nfield = \"devices[0].closed_loop.inflight\"\nvalues = [2]\n";
    let s = sweep(text).unwrap();
    let e = s.check_all().unwrap_err().to_string();
    assert!(
        e.contains("point 0 (devices[0].closed_loop.inflight = 2) is invalid"),
        "{e}"
    );
    assert!(e.contains("not both"), "{e}");
}

#[test]
fn errors_name_the_axis_the_field_and_what_is_allowed() {
    let axis = |field: &str, values: &str| {
        sweep(&format!(
            "base = \"default\"\n[[axes]]\nfield = \"mode\"\nvalues = [\"posted\"]\n[[axes]]\nfield = \"{field}\"\n{values}\n"
        ))
    };
    let cases: &[(&str, &str, &str)] = &[
        (
            "max_loop",
            "values = [1]",
            "axis 2 (`max_loop`): the scenario has no field `max_loop`",
        ),
        (
            "costs.cpu.frequency",
            "values = [1]",
            "`costs.cpu` has no field `frequency`",
        ),
        (
            "devices[9].vector",
            "values = [40]",
            "`devices` has 4 entries, so there is no index 9",
        ),
        ("mode[0]", "values = [1]", "`mode` is a string, not a list"),
        ("devices[*]..vector", "values = [40]", "is not a field path"),
        (
            "max_loops",
            "values = [\"three\"]",
            "axis 2 (`max_loops`): value three is rejected: invalid type",
        ),
        (
            "mode",
            "values = [\"posted\"]",
            "axes 1 and 2 both set `mode`",
        ),
        (
            "max_loops",
            "values = []",
            "axis 2 (`max_loops`) has no values",
        ),
        ("max_loops", "values = [1, 2, 1]", "lists the value 1 twice"),
        (
            "max_loops",
            "range = { from = 1, to = 8, step = -1 }",
            "bad range",
        ),
        (
            "max_loops",
            "range = { from = 1, to = 8 }",
            "exactly one of `step` and `points`",
        ),
        (
            "max_loops",
            "values = [1]\nrange = { from = 1, to = 8, step = 1 }",
            "exactly one of `values = [...]` and `range",
        ),
    ];
    for (field, values, needle) in cases {
        let e = axis(field, values).unwrap_err().to_string();
        assert!(e.contains(needle), "{field} {values}: {e}");
    }
    // Validation: a vector valid in remapped mode but not in posted mode. Only device
    // 0's: `default`'s four devices share CPU 0, where each needs a vector of its own.
    let s = sweep(
        "base = \"default\"\n[[axes]]\nfield = \"mode\"\nvalues = [\"remapped\", \"posted\"]\n[[axes]]\nfield = \"devices[0].vector\"\nvalues = [64, 240]\n",
    )
    .unwrap();
    let e = s.check_all().unwrap_err().to_string();
    assert!(
        e.contains("point 3 (mode = posted, devices[0].vector = 240) is invalid (set by axis 2 `devices[0].vector`): devices[0].vector = 0xf0 is not allowed"),
        "{e}"
    );
    // Every device on one vector of one CPU: refused at the first point.
    let s = sweep("base = \"default\"\n[[axes]]\nfield = \"devices[*].vector\"\nvalues = [64]\n")
        .unwrap();
    let e = s.check_all().unwrap_err().to_string();
    assert!(
        e.contains("devices[1].vector = 0x40 is not allowed: expected a vector no other device uses on CPU 0"),
        "{e}"
    );
    // Base and file errors.
    let e = sweep("base = \"nope\"\n").unwrap_err().to_string();
    assert!(
        e.contains("no embedded scenario of that name (embedded: default"),
        "{e}"
    );
    let e = sweep("base = \"default\"\nfoo = 1\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `foo`"), "{e}");
    let e = sweep("[base]\nmode = \"posted\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("[base]") && e.contains("duration_us"), "{e}");
    let e = "2/1".parse::<Shard>().unwrap_err().to_string();
    assert!(e.contains("bad shard \"2/1\""), "{e}");
    let e = run_to_dir(&small(), &opts(0, Shard::WHOLE), &temp_dir("zero")).unwrap_err();
    assert!(e.to_string().contains("at least 1"), "{e}");
}

#[test]
fn inline_base_and_file_base_relative_to_the_sweep() {
    let dir = temp_dir("files");
    std::fs::write(
        dir.join("base.toml"),
        irqsim::scenarios::embedded("remapped").unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.join("s.toml"),
        "base = \"base.toml\"\n[[axes]]\nfield = \"max_loops\"\nrange = { from = 1, to = 4, step = 1 }\n",
    )
    .unwrap();
    let s = Sweep::load(&dir.join("s.toml")).unwrap();
    assert_eq!(s.len(), 4);
    assert_eq!(
        s.point(0).unwrap().scenario.mode,
        irqsim::DeliveryMode::Remapped
    );
    let inline = "seed = 3\n[base]\nduration_us = 100\nmode = \"posted\"\n[[base.devices]]\nkind = \"dsa\"\nvector = 0x30\narrival = { kind = \"fixed\", interval_ns = 1000 }\n[[axes]]\nfield = \"devices[0].arrival\"\nvalues = [{ kind = \"fixed\", interval_ns = 500 }, { kind = \"poisson\", rate_per_s = 1e6 }]\n";
    let s = sweep(inline).unwrap();
    assert_eq!(s.seed, 3);
    s.check_all().unwrap();
    assert!(format!("{:?}", s.point(1).unwrap().scenario.devices[0].arrival).contains("Poisson"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sweep too large to run is refused by its size, before any value is looked at: a
/// 1e5 x 1e4 grid used to spend hours in the duplicate check first.
#[test]
fn a_grid_past_the_point_limit_is_refused_by_its_size() {
    let err = sweep(
        "base = \"default\"\n[[axes]]\nfield = \"seed\"\nrange = { from = 1, to = 100000, step = 1 }\n\
         [[axes]]\nfield = \"duration_us\"\nrange = { from = 1, to = 10000, step = 1 }\n",
    )
    .unwrap_err();
    assert!(
        matches!(&err, SweepError::TooManyPoints { max, axes } if *max == irqsim::sweep::MAX_POINTS && axes == "axis 1 `seed`: 100000 x axis 2 `duration_us`: 10000"),
        "{err}"
    );
}

/// A repeated value is found wherever it sits in a long axis, and named.
#[test]
fn a_repeat_at_the_end_of_a_long_axis_is_named() {
    let mut values: Vec<String> = (1..=20_000).map(|v| v.to_string()).collect();
    values.push("17".into());
    let err = sweep(&format!(
        "base = \"default\"\n[[axes]]\nfield = \"seed\"\nvalues = [{}]\n",
        values.join(", ")
    ))
    .unwrap_err();
    assert!(
        matches!(&err, SweepError::DuplicateValue { value, axis: 1, .. } if value == "17"),
        "{err}"
    );
}

#[test]
fn an_input_named_twice_is_refused_however_it_is_spelled() {
    let out = temp_dir("twice-out");
    let d = temp_dir("twice");
    std::fs::create_dir_all(&d).unwrap();
    // The same folder, spelled two ways: compared after canonicalising.
    // (Path equality already ignores `.` components; `..` it keeps.)
    let again = d.join("..").join(d.file_name().unwrap());
    let e = merge_dirs(&[d.clone(), again], &out, false).unwrap_err();
    assert!(e.to_string().contains("is given twice"), "{e}");
    // Paths that do not exist cannot be canonicalised: compared as written.
    let gone = d.join("no-such-shard");
    let e = merge_dirs(&[gone.clone(), gone.clone()], &out, false).unwrap_err();
    assert!(e.to_string().contains("is given twice"), "{e}");
    // A missing points file named directly is not a shard folder: no shard hint.
    let e = merge_dirs(&[d.join("points-0.jsonl")], &out, false).unwrap_err();
    assert!(!e.to_string().contains("did that shard finish?"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

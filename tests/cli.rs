//! The `irqsim` binary as a user runs it.

use std::process::Command;

fn irqsim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_irqsim"))
        .args(args)
        .output()
        .expect("irqsim binary runs")
}

/// Runs `irqsim args` and parses its stdout as JSON; a failed run fails the test with
/// its stderr.
fn irqsim_json(args: &[&str]) -> serde_json::Value {
    let out = irqsim(args);
    assert!(
        out.status.success(),
        "irqsim {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

#[test]
fn experiment_json_has_the_documented_rows() {
    let out = irqsim(&["experiment", "posted-vs-remapped", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["experiment"], "posted-vs-remapped");
    let rows = v["rows"].as_array().unwrap();
    for mode in ["posted", "remapped"] {
        let rates: Vec<f64> = rows
            .iter()
            .filter(|r| r["mode"] == mode)
            .map(|r| r["rate_mps"].as_f64().unwrap())
            .collect();
        assert!(
            rates.contains(&0.1) && rates.iter().any(|r| *r >= 20.0),
            "{mode}: {rates:?}"
        );
    }
    for key in [
        "mode",
        "rate_mps",
        "handled_mps",
        "interrupts_per_msi",
        "cpu_busy_frac",
        "p50_latency_ns",
        "p99_latency_ns",
        "oldest_waiting_ns",
    ] {
        assert!(rows.iter().all(|r| r.get(key).is_some()), "missing {key}");
    }
    // Far past remapped mode's peak vector 0x21 starves: its oldest MSI has waited
    // longer than the percentiles, which count handled MSIs, show.
    let overloaded = rows
        .iter()
        .find(|r| r["mode"] == "remapped" && r["rate_mps"] == 30.0)
        .expect("the remapped 30 M/s point");
    let oldest = overloaded["oldest_waiting_ns"].as_f64().expect("MSIs wait");
    let p99 = overloaded["p99_latency_ns"].as_f64().unwrap();
    assert!(oldest > 10.0 * p99, "oldest {oldest} ns, p99 {p99} ns");
}

#[test]
fn run_embedded_scenario_as_json_with_seed_override() {
    let out = irqsim(&["run", "default", "--seed", "9", "--json", "-"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["seed"], 9);
    for path in [
        "/msis/generated",
        "/msis/handled",
        "/msis/pending",
        "/msis/dropped",
        "/msis/merged",
        "/notifications/sent",
        "/notifications/suppressed",
        "/interrupts_taken",
        "/cpu/0/busy_ns",
        "/pid_line/cpu_misses",
        "/pid_line/iommu_updates",
        "/latency_ns/p50",
        "/latency_ns/p99",
        "/latency_ns/max",
        "/sim_time_ns",
        "/events",
        "/wall_time_s",
    ] {
        assert!(v.pointer(path).is_some(), "report lacks {path}");
    }
}

#[test]
fn bad_scenario_file_is_a_clear_error_and_exit_2() {
    let dir = std::env::temp_dir().join(format!("irqsim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "duration_us = 10\nmode = \"posted\"\n[[devices]]\nkind = \"dsa\"\nvector = 3\ncpu = 0\narrival = { kind = \"fixed\", interval_ns = 10.0 }\n",
    )
    .unwrap();
    let out = irqsim(&["run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("devices[0].vector") && err.contains("32..=255"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn unknown_experiment_lists_the_known_ones() {
    let out = irqsim(&["experiment", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("posted-vs-remapped"));
}

#[test]
fn bench_engine_runs_both_queues_on_the_same_draws() {
    let v = irqsim_json(&[
        "bench",
        "engine",
        "--pending",
        "50",
        "--events",
        "20000",
        "--seed",
        "7",
        "--json",
    ]);
    let runs = v.as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["engine"], "irqsim");
    assert_eq!(runs[1]["engine"], "binary-heap");
    for r in runs {
        assert_eq!(r["events"], 20000);
        assert_eq!(r["pending"], 50);
        assert!(r["events_per_sec"].as_f64().unwrap() > 0.0);
        assert_eq!(r["build"]["debug_assertions"], cfg!(debug_assertions));
    }
    // Same seed, same draws, same pop order: both reach the same simulated time.
    assert_eq!(runs[0]["final_time_ps"], runs[1]["final_time_ps"]);
}

#[test]
fn bench_scenario_reports_rates_and_honours_the_duration_override() {
    let v = irqsim_json(&[
        "bench",
        "scenario",
        "default",
        "--duration-us",
        "150",
        "--json",
    ]);
    assert_eq!(v["scenario"], "default");
    assert_eq!(v["sim_time_us"], 150.0);
    let (events, msis) = (v["events"].as_u64().unwrap(), v["msis"].as_u64().unwrap());
    assert!(msis > 0 && events > msis);
    let per_msi = v["events_per_msi"].as_f64().unwrap();
    assert!((per_msi - events as f64 / msis as f64).abs() < 1e-9);
    assert!(v["peak_rss_bytes"].as_u64().unwrap() > 0);
    // A round under 0.1 s gets a duration for 0.25 s at the speed measured, so at least
    // 2.5 times as long as the 150 us it ran; a round that long already gets none.
    let suggested = v
        .get("suggested_duration_us")
        .expect("the key, null or a number");
    let wall = v["wall_seconds"].as_f64().unwrap();
    match suggested.as_f64() {
        Some(us) => assert!(wall < 0.1 && us >= 375.0, "{us} us after {wall} s"),
        None => assert!(
            suggested.is_null() && wall >= 0.1,
            "{suggested} after {wall} s"
        ),
    }
    // The binary under test is built with the tests' profile, never profile-guided.
    assert_eq!(v["build"]["debug_assertions"], cfg!(debug_assertions));
    assert!(v["build"]["profile_guided"].is_null());
    // The event mix names every event of the run, each once.
    let mix = v["event_mix"]
        .as_array()
        .expect("event_mix with the heap comparison");
    let counted: u64 = mix.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert_eq!(counted, events);
    assert!(mix
        .iter()
        .all(|r| r["event"].is_string() && r.get("activity").is_some()));
    let text = irqsim(&["bench", "scenario", "default", "--duration-us", "150"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("event mix"));
    let no_heap = irqsim_json(&[
        "bench",
        "scenario",
        "default",
        "--duration-us",
        "150",
        "--no-heap",
        "--json",
    ]);
    assert!(no_heap["event_mix"].is_null());

    let bad = irqsim(&["bench", "scenario", "default", "--duration-us", "0"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("duration_us"));
}

#[test]
fn bench_scenario_rounds_report_each_round_and_the_median() {
    let v = irqsim_json(&[
        "bench",
        "scenario",
        "default",
        "--duration-us",
        "100",
        "--rounds",
        "3",
        "--json",
    ]);
    let rounds = v["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 3);
    let ratio = v["ratio_to_heap"].as_f64().unwrap();
    let range = v["ratio_to_heap_range"].as_array().unwrap();
    let (lo, hi) = (range[0].as_f64().unwrap(), range[1].as_f64().unwrap());
    assert!(lo <= ratio && ratio <= hi, "{lo} <= {ratio} <= {hi}");
    assert!(rounds
        .iter()
        .any(|r| r["ratio_to_heap"].as_f64() == Some(ratio)));

    let bad = irqsim(&["bench", "scenario", "default", "--rounds", "0"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--rounds"));
}

#[test]
fn platforms_lists_the_profiles_and_shows_one_with_sources() {
    let all = irqsim_json(&["platforms", "--json"]);
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for n in ["generic", "spr", "spr-2s"] {
        assert!(names.contains(&n), "{names:?}");
    }
    let spr = irqsim_json(&["platforms", "spr", "--json"]);
    let occ = spr["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "costs.fabric.message_occupancy_ns")
        .unwrap();
    assert_eq!(occ["kind"], "calibrated");
    assert_eq!(occ["unit"], "ns");
    let out = irqsim(&["platforms", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("platform"));
}

#[test]
fn experiments_take_a_platform_and_field_sets_and_reject_bad_ones() {
    let base = irqsim_json(&["experiment", "nvme-posted", "--json"]);
    let moved = irqsim_json(&[
        "experiment",
        "nvme-posted",
        "--json",
        "--set",
        "costs.fabric.message_occupancy_ns=300",
        "--set",
        "costs.nvme.iops_ceiling=2e6",
    ]);
    let iops = |v: &serde_json::Value, mode: &str| {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["drives"] == 4 && r["mode"] == mode)
            .unwrap()["iops_per_drive"]
            .as_f64()
            .unwrap()
    };
    assert!(iops(&moved, "remapped") < iops(&base, "remapped"));
    assert!(iops(&moved, "posted") <= 2e6 * 1.01);
    let notes = moved["notes"].to_string();
    assert!(
        notes.contains("--set costs.nvme.iops_ceiling=2000000.0: applied to every point"),
        "{notes}"
    );
    for (experiment, args, needle) in [
        (
            "smmu-cmdsync",
            vec!["--set", "transmit[0].nosuch=1"],
            "no point of this experiment has that field",
        ),
        (
            "smmu-cmdsync",
            vec!["--set", "transmit[0].cpus=[20]"],
            "point \"smmu-cmdsync udp-tx x16 msipoll=true\": transmit[0].cpus",
        ),
        (
            "ipi-cluster",
            vec!["--set", "costs.cpu.freq_mhz=0"],
            "costs.cpu.freq_mhz = 0 is not allowed",
        ),
        (
            "rte-cache",
            vec!["--set", "costs.cpu.freq_mhz=-5"],
            "--set costs.cpu.freq_mhz=-5: invalid value",
        ),
        (
            "nvme-posted",
            vec!["--set", "costs.fabric.occupancy=1"],
            "occupancy",
        ),
        (
            "nvme-posted",
            vec!["--set", "costs.fabric.message_occupancy_ns"],
            "FIELD=VALUE",
        ),
        ("nvme-posted", vec!["--platform", "nope"], "platform"),
        (
            "nvme-posted",
            vec!["--set", "costs.fabric.message_occupancy_ns=-5"],
            "message_occupancy_ns",
        ),
    ] {
        let mut a = vec!["experiment", experiment];
        a.extend(args.iter().copied());
        let out = irqsim(&a);
        assert_eq!(out.status.code(), Some(2), "{a:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{a:?}: {err}");
    }
}

#[test]
fn validate_prints_every_figure_as_json() {
    let v = irqsim_json(&["validate", "--json", "--threads", "2"]);
    let rows = v["figures"].as_array().unwrap();
    assert!(rows.len() > 20);
    for key in [
        "seed",
        "citation",
        "published",
        "model",
        "unit",
        "ratio",
        "direction_holds",
        "magnitude_holds",
        "calibration",
    ] {
        assert!(rows.iter().all(|r| r.get(key).is_some()), "missing {key}");
    }
    assert!(v["sensitivity"].is_null());
}

#[test]
fn limits_and_unwritable_outputs_are_refused_before_any_work() {
    let out = irqsim(&["bench", "engine", "--pending", "100000000000"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--pending 100000000000 is more than 10000000"),
        "{err}"
    );

    // The report table is printed after the run: none means the run never happened.
    let out = irqsim(&["run", "default", "--json", "/nonexistent-dir/r.json"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--json /nonexistent-dir/r.json: cannot write"),
        "{err}"
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    for dry in [true, false] {
        let mut args = vec!["sweep", "scenarios/sweeps/speedup.toml", "--threads", "0"];
        if dry {
            args.push("--dry-run");
        }
        let out = irqsim(&args);
        assert_eq!(out.status.code(), Some(2), "dry run {dry}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--threads 0 is not allowed"),
            "dry run {dry}: {err}"
        );
    }
}

#[test]
fn an_experiments_points_are_written_as_scenarios_that_run_alone() {
    let dir = std::env::temp_dir().join(format!("irqsim-cli-points-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let set = "costs.ioapic.window_read_ns=1500";
    let out = irqsim(&[
        "experiment",
        "rte-cache",
        "--set",
        set,
        "--scenarios",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    // rte-cache: two chips x two drivers, in row order.
    assert_eq!(listed.len(), 4, "{listed:?}");
    assert!(listed[0].ends_with(".toml") && listed[0].contains("00-rte-cache"));

    // Each file is the point as it runs: platform, then the set.
    let mut ctx = irqsim::experiments::ExperimentCtx::new(1);
    ctx.sets = vec![irqsim::experiments::FieldSet::parse(set).unwrap()];
    let points = irqsim::experiments::rte_cache::scenarios(&ctx);
    for (file, point) in listed.iter().zip(&points) {
        let mut loaded = irqsim::Scenario::load(std::path::Path::new(file)).unwrap();
        loaded.base_dir = None;
        assert_eq!(loaded, ctx.prepare(point).unwrap(), "{file}");
        assert_eq!(loaded.costs.ioapic.window_read_ns, 1500.0);
    }
    // And `irqsim run` takes one.
    let run = irqsim(&["run", &listed[2]]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A trace window that starts after the run ends still runs, but says the trace will
/// be empty of events.
#[test]
fn a_trace_window_after_the_run_is_warned_about() {
    let path = std::env::temp_dir().join(format!("irqsim-cli-late-{}.json", std::process::id()));
    let p = path.to_str().unwrap();
    // `default` runs 2,000 us.
    let out = irqsim(&["run", "default", "--trace", p, "--trace-from", "5000"]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: --trace-from 5000 is after the run ends (duration_us = 2000)"),
        "{err}"
    );
    let out = irqsim(&["run", "default", "--trace", p, "--trace-from", "1500"]);
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));
    let _ = std::fs::remove_file(&path);
}

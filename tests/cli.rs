//! The `irqsim` binary as a user runs it.

use std::process::Command;

fn irqsim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_irqsim"))
        .args(args)
        .output()
        .expect("irqsim binary runs")
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
    ] {
        assert!(rows.iter().all(|r| r.get(key).is_some()), "missing {key}");
    }
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

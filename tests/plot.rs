//! SVG figures of experiments and sweeps.

use std::path::Path;

use irqsim::experiments::{
    self, coalesce_loops, pir_variants, posted_vs_remapped, ExperimentCtx, ExperimentOutput,
};
use irqsim::plot::{experiment_figure, plot_experiment, plot_sweep, sweep_figure, Style, XScale};
use irqsim::sweep::{run_points, ProgressMode, RunOptions, Shard, Sweep};
use serde_json::json;

/// A minimal well-formedness check: every element opened is closed, in order.
fn assert_well_formed(svg: &str) {
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    let mut stack: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find('<') {
        let end = rest[i..].find('>').expect("a tag closes") + i;
        let tag = &rest[i + 1..end];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop().as_deref(), Some(name), "closing {name}");
        } else if !tag.ends_with('/') {
            stack.push(tag.split_whitespace().next().unwrap().to_string());
        }
        rest = &rest[end + 1..];
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
    assert!(!svg.contains("NaN") && !svg.contains("inf\""));
}

fn texts(svg: &str) -> String {
    // Text content sits on its own line between <text ...> and </text>.
    svg.lines()
        .filter(|l| !l.starts_with('<'))
        .collect::<Vec<_>>()
        .join("\n")
}

fn pvr_output() -> ExperimentOutput {
    let mut rows = Vec::new();
    for mode in ["posted", "remapped"] {
        for &rate in posted_vs_remapped::RATES_MPS {
            rows.push(json!({"mode": mode, "rate_mps": rate, "handled_mps": rate.min(6.0)}));
        }
    }
    ExperimentOutput::new("posted-vs-remapped", 7, &rows)
}

/// The built-in experiments, run for real, get their own figure (not the generic one),
/// so renaming a column the figure uses fails here.
#[test]
fn built_in_experiments_get_their_own_figure() {
    for name in ["posted-vs-remapped", "pir-variants", "coalesce-loops"] {
        let info = experiments::find(name).unwrap();
        let out = (info.run)(&ExperimentCtx::new(2));
        let fig = experiment_figure(&out).unwrap();
        assert!(
            fig.caption.iter().all(|c| !c.contains("generic")),
            "{name}: {:?}",
            fig.caption
        );
        assert!(fig.caption[0].contains("seed 2"));
        assert_well_formed(&fig.to_svg().unwrap());
    }
}

#[test]
fn posted_vs_remapped_draws_handled_against_offered_by_mode() {
    let out = pvr_output();
    let fig = experiment_figure(&out).unwrap();
    assert_eq!(fig.x_scale, XScale::Log);
    assert_eq!(fig.series.len(), 2);
    let svg = fig.to_svg().unwrap();
    assert_well_formed(&svg);
    let t = texts(&svg);
    for needle in [
        "offered rate (M MSIs/s, log scale)",
        "handled rate (M MSIs/s)",
        "posted mode",
        "remapped mode",
        "handled = offered",
        "model output (irqsim), seed 7 — not hardware measurements",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in\n{t}");
    }
    assert!(svg.matches("<circle").count() >= 2 * posted_vs_remapped::RATES_MPS.len());
}

#[test]
fn pir_variants_draws_grouped_bars_and_marks_broken_variants() {
    let mut rows = Vec::new();
    for &v in pir_variants::VARIANTS {
        for devices in [1u32, 2] {
            rows.push(json!({
                "variant": v,
                "dsa_devices": devices,
                "irq_rate_mps": 1.0 + devices as f64 * 0.1,
                "broken": v == "no-final-recheck",
            }));
        }
    }
    let out = ExperimentOutput::new("pir-variants", 3, &rows);
    let fig = experiment_figure(&out).unwrap();
    assert_eq!(fig.style, Style::Bars);
    assert_eq!(fig.series.len(), 2);
    let XScale::Categories(names) = &fig.x_scale else {
        panic!("categories expected");
    };
    assert_eq!(names.len(), pir_variants::VARIANTS.len());
    assert!(names.contains(&"no-final-recheck *".to_string()));
    let svg = fig.to_svg().unwrap();
    assert_well_formed(&svg);
    let t = texts(&svg);
    for needle in [
        "copy-then-xchg",
        "remapped",
        "2 DSA devices on one CPU",
        "1 DSA device on one CPU",
        "IRQ rate (M completed descriptors/s)",
        "* broken on purpose",
        "seed 3",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in\n{t}");
    }
    let bars = svg.matches("<rect").count();
    assert!(bars > rows.len(), "{bars} rects for {} bars", rows.len());
}

#[test]
fn coalesce_loops_sets_unbounded_apart_at_the_right() {
    let mut rows = Vec::new();
    for &variant in coalesce_loops::VARIANTS {
        for &max_loops in coalesce_loops::MAX_LOOPS {
            rows.push(json!({
                "max_loops": max_loops,
                "variant": variant,
                "notifications_per_msi": 1.0 / (1.0 + max_loops as f64),
            }));
        }
    }
    let out = ExperimentOutput::new("coalesce-loops", 1, &rows);
    let fig = experiment_figure(&out).unwrap();
    let s = &fig.series[0];
    assert_eq!(s.points.len(), 7);
    assert_eq!(s.detached, vec![(10.0, 1.0)]);
    assert!(fig.x_ticks.contains(&(10.0, "unbounded".to_string())));
    let dir = std::env::temp_dir().join(format!("irqsim-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("coalesce.svg");
    plot_experiment(&out, &path).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert_well_formed(&svg);
    let t = texts(&svg);
    for needle in [
        "unbounded",
        "MAX_LOOPS (loop iterations per notification)",
        "notifications per MSI (ratio)",
        "rfc handler, DSA at saturation",
        "copy-then-xchg handler, DSA at saturation",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in\n{t}");
    }
    let e = plot_experiment(&out, &dir.join("no/such/dir.svg")).unwrap_err();
    assert!(e.contains("cannot write"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unknown_experiments_get_a_generic_figure() {
    #[derive(serde::Serialize)]
    struct Row {
        vmd_mode: &'static str,
        drives: u32,
        iops: f64,
        p99_latency_ns: f64,
    }
    let rows: Vec<Row> = ["vmd-off", "vmd-on"]
        .iter()
        .flat_map(|m| {
            (1..=8).map(move |d| Row {
                vmd_mode: m,
                drives: d,
                iops: d as f64 * 8e5,
                p99_latency_ns: 1e4,
            })
        })
        .collect();
    let out = ExperimentOutput::new("vmd-scaling", 11, &rows);
    let fig = experiment_figure(&out).unwrap();
    assert_eq!(fig.series.len(), 2);
    let svg = fig.to_svg().unwrap();
    assert_well_formed(&svg);
    let t = texts(&svg);
    for needle in [
        "vmd-off",
        "vmd-on",
        "drives",
        "iops",
        "seed 11",
        "generic figure: iops against drives by vmd_mode",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in\n{t}");
    }
    // Fewer than two numeric columns: nothing to draw.
    #[derive(serde::Serialize)]
    struct Thin {
        name: &'static str,
        n: u32,
    }
    let out = ExperimentOutput::new("thin", 1, &[Thin { name: "a", n: 1 }]);
    assert!(experiment_figure(&out)
        .unwrap_err()
        .contains("two numeric columns"));
    // A built-in name whose rows lack the expected columns falls back to generic.
    let out = ExperimentOutput::new("coalesce-loops", 1, &rows);
    assert!(experiment_figure(&out).unwrap().caption[1].starts_with("generic figure"));
}

fn run_small(text: &str) -> Vec<irqsim::sweep::PointRecord> {
    let s = Sweep::from_toml_str(text, "inline", Path::new(".")).unwrap();
    s.check_all().unwrap();
    let opts = RunOptions {
        threads: 2,
        shard: Shard::WHOLE,
        progress: ProgressMode::Quiet,
        extra_metrics: vec![],
    };
    run_points(&s, &opts, |_, _| Ok(())).unwrap().records
}

#[test]
fn sweeps_plot_a_metric_against_the_first_axis_by_the_others() {
    let recs = run_small(
        "seed = 4\nbase = \"default\"\n[set]\nduration_us = 200\n[[axes]]\nfield = \"devices[*].arrival.rate_per_s\"\nvalues = [2.5e5, 5e5, 1e6]\n[[axes]]\nfield = \"mode\"\nvalues = [\"posted\", \"remapped\"]\n",
    );
    let fig = sweep_figure(&recs, "handled_per_s").unwrap();
    assert_eq!(fig.series.len(), 2);
    assert_eq!(fig.series[0].name, "mode = posted");
    assert_eq!(fig.series[0].points.len(), 3);
    assert_eq!(fig.x_label, "devices[*].arrival.rate_per_s (M/s)");
    assert!(
        fig.y_label.starts_with("handled_per_s ("),
        "{}",
        fig.y_label
    );
    let svg = fig.to_svg().unwrap();
    assert_well_formed(&svg);
    let t = texts(&svg);
    assert!(t.contains("model output (irqsim), sweep seed 4"), "{t}");
    assert!(t.contains("not hardware measurements"));

    // A text first axis gives categories.
    let recs = run_small(
        "seed = 4\nbase = \"default\"\n[set]\nduration_us = 200\n[[axes]]\nfield = \"mode\"\nvalues = [\"posted\", \"remapped\"]\n[[axes]]\nfield = \"max_loops\"\nvalues = [1, 3]\n",
    );
    let fig = sweep_figure(&recs, "latency_p99_ns").unwrap();
    assert_eq!(fig.style, Style::Bars);
    assert_eq!(
        fig.x_scale,
        XScale::Categories(vec!["posted".into(), "remapped".into()])
    );
    assert_well_formed(&fig.to_svg().unwrap());

    let e = sweep_figure(&recs, "no_such_metric").unwrap_err();
    assert!(
        e.contains("no numeric metric `no_such_metric`") && e.contains("handled_per_s"),
        "{e}"
    );
    let dir = std::env::temp_dir().join(format!("irqsim-plot-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    plot_sweep(&recs, "cpu_busy_frac_mean", &dir.join("s.svg")).unwrap();
    assert!(std::fs::read_to_string(dir.join("s.svg"))
        .unwrap()
        .contains("cpu_busy_frac_mean (fraction)"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(sweep_figure(&[], "handled_per_s").is_err());
}

/// A field that is null at some points (a report's `msis.oldest_pending_at_cpu_age_ns`
/// when no MSI waits at a CPU) leaves those points out and says so; null everywhere is
/// an error, and a value that is neither null nor a number is still "no metric".
#[test]
fn sweep_points_with_a_null_value_are_left_out_and_counted_in_the_caption() {
    let mut recs = run_small(
        "seed = 4\nbase = \"default\"\n[set]\nduration_us = 200\n[[axes]]\nfield = \"devices[*].arrival.rate_per_s\"\nvalues = [2.5e5, 5e5, 1e6]\n[[axes]]\nfield = \"mode\"\nvalues = [\"posted\", \"remapped\"]\n",
    );
    let key = "msis.oldest_pending_at_cpu_age_ns";
    for r in &mut recs {
        let v = if r.point == 1 {
            serde_json::Value::Null
        } else {
            serde_json::json!(1000.0 * (r.point + 1) as f64)
        };
        r.metrics.insert(key.into(), v);
    }
    let fig = sweep_figure(&recs, key).unwrap();
    let drawn: usize = fig.series.iter().map(|s| s.points.len()).sum();
    assert_eq!(drawn, recs.len() - 1);
    assert!(
        fig.caption
            .iter()
            .any(|c| c == &format!("1 of 6 points have no value of {key} (null) and are not drawn")),
        "{:?}",
        fig.caption
    );
    assert_well_formed(&fig.to_svg().unwrap());

    for r in &mut recs {
        r.metrics.insert(key.into(), serde_json::Value::Null);
    }
    let e = sweep_figure(&recs, key).unwrap_err();
    assert!(e.contains("null at every point"), "{e}");

    recs[0]
        .metrics
        .insert(key.into(), serde_json::json!("soon"));
    let e = sweep_figure(&recs, key).unwrap_err();
    assert!(e.contains("point 0 has no numeric metric"), "{e}");
}

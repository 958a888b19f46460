//! The main figure of each built-in experiment, and a generic one for the others.

use std::path::Path;

use serde_json::Value;

use super::units::{scale_for_display, unit_of};
use super::{model_caption, Figure, Series, Style, XScale};
use crate::experiments::ExperimentOutput;

/// Draws `out`'s main figure to `path` as SVG.
pub fn plot_experiment(out: &ExperimentOutput, path: &Path) -> Result<(), String> {
    experiment_figure(out)?.write_svg(path)
}

/// The main figure of an experiment: its own for the built-in ones (when their rows
/// have the expected columns), otherwise the first two numeric columns by the first
/// text column.
pub fn experiment_figure(out: &ExperimentOutput) -> Result<Figure, String> {
    let known = match out.experiment.as_str() {
        "posted-vs-remapped" => posted_vs_remapped(out),
        "pir-variants" => pir_variants(out),
        "coalesce-loops" => coalesce_loops(out),
        _ => None,
    };
    match known {
        Some(f) => Ok(f),
        None => generic(out),
    }
}

fn num(row: &Value, key: &str) -> Option<f64> {
    row.get(key).and_then(Value::as_f64)
}

fn text(row: &Value, key: &str) -> Option<String> {
    match row.get(key)? {
        Value::String(s) => Some(s.clone()),
        v @ (Value::Number(_) | Value::Bool(_)) => Some(v.to_string()),
        _ => None,
    }
}

/// Series in order of first appearance.
fn group<K: PartialEq + Clone>(
    items: impl IntoIterator<Item = (K, (f64, f64))>,
) -> Vec<(K, Vec<(f64, f64)>)> {
    let mut out: Vec<(K, Vec<(f64, f64)>)> = Vec::new();
    for (k, p) in items {
        match out.iter_mut().find(|(g, _)| *g == k) {
            Some((_, v)) => v.push(p),
            None => out.push((k, vec![p])),
        }
    }
    out
}

fn caption(out: &ExperimentOutput) -> Vec<String> {
    vec![model_caption(&format!("seed {}", out.seed))]
}

/// Log scale when every x is positive and they span at least `ratio` times.
fn x_scale_for(xs: impl Iterator<Item = f64> + Clone, ratio: f64) -> XScale {
    let lo = xs.clone().fold(f64::INFINITY, f64::min);
    let hi = xs.fold(f64::NEG_INFINITY, f64::max);
    if lo > 0.0 && hi / lo >= ratio {
        XScale::Log
    } else {
        XScale::Linear
    }
}

fn posted_vs_remapped(out: &ExperimentOutput) -> Option<Figure> {
    let pts = out
        .rows
        .iter()
        .map(|r| {
            Some((
                text(r, "mode")?,
                (num(r, "rate_mps")?, num(r, "handled_mps")?),
            ))
        })
        .collect::<Option<Vec<_>>>()?;
    let x_scale = x_scale_for(pts.iter().map(|p| p.1 .0), 20.0);
    let log = x_scale == XScale::Log;
    let (lo, hi) = pts
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
            (l.min(p.1 .0), h.max(p.1 .0))
        });
    // Up to a little above the highest handled rate, so the line stays in the plot.
    let top = pts.iter().map(|p| p.1 .1).fold(0.0, f64::max) * 1.08;
    let hi = hi.min(top).max(lo);
    let reference = (0..=40)
        .map(|k| {
            let t = k as f64 / 40.0;
            let x = if log {
                lo * (hi / lo).powf(t)
            } else {
                lo + (hi - lo) * t
            };
            (x, x)
        })
        .collect();
    Some(Figure {
        title: "posted-vs-remapped: handled vs offered MSI rate, one CPU, four DSA queues".into(),
        x_label: format!(
            "offered rate (M MSIs/s{})",
            if log { ", log scale" } else { "" }
        ),
        y_label: "handled rate (M MSIs/s)".into(),
        caption: caption(out),
        x_scale,
        style: Style::Lines,
        series: group(pts)
            .into_iter()
            .map(|(mode, points)| Series {
                name: format!("{mode} mode"),
                points,
                detached: vec![],
            })
            .collect(),
        x_ticks: vec![],
        reference: Some(Series {
            name: "handled = offered".into(),
            points: reference,
            detached: vec![],
        }),
    })
}

fn pir_variants(out: &ExperimentOutput) -> Option<Figure> {
    let mut variants: Vec<(String, bool)> = Vec::new();
    let mut cases: Vec<u64> = Vec::new();
    let mut rows = Vec::new();
    for r in &out.rows {
        let v = text(r, "variant")?;
        let case = num(r, "dsa_devices")? as u64;
        let y = num(r, "irq_rate_mps")?;
        let broken = r.get("broken").and_then(Value::as_bool).unwrap_or(false);
        match variants.iter_mut().find(|(n, _)| *n == v) {
            Some(e) => e.1 |= broken,
            None => variants.push((v.clone(), broken)),
        }
        if !cases.contains(&case) {
            cases.push(case);
        }
        rows.push((v, case, y));
    }
    let series = cases
        .iter()
        .map(|&devices| Series {
            name: format!(
                "{devices} DSA device{} on one CPU",
                if devices == 1 { "" } else { "s" }
            ),
            points: rows
                .iter()
                .filter(|(_, c, _)| *c == devices)
                .map(|(v, _, y)| {
                    let x = variants.iter().position(|(n, _)| n == v).expect("listed");
                    (x as f64, *y)
                })
                .collect(),
            detached: vec![],
        })
        .collect();
    let any_broken = variants.iter().any(|v| v.1);
    let mut caption = caption(out);
    if any_broken {
        caption
            .push("* broken on purpose: loses or strands interrupts; shown for comparison".into());
    }
    Some(Figure {
        title: "pir-variants: IRQ rate by PIR-draining variant, DSA memfill WQs kept full".into(),
        x_label: "notification handler variant (remapped = non-posted baseline)".into(),
        y_label: "IRQ rate (M completed descriptors/s)".into(),
        caption,
        x_scale: XScale::Categories(
            variants
                .into_iter()
                .map(|(n, b)| if b { format!("{n} *") } else { n })
                .collect(),
        ),
        style: Style::Bars,
        series,
        x_ticks: vec![],
        reference: None,
    })
}

fn coalesce_loops(out: &ExperimentOutput) -> Option<Figure> {
    let pts = out
        .rows
        .iter()
        .map(|r| {
            Some((
                text(r, "variant")?,
                (num(r, "max_loops")?, num(r, "notifications_per_msi")?),
            ))
        })
        .collect::<Option<Vec<_>>>()?;
    let bounded: Vec<f64> = pts.iter().map(|p| p.1 .0).filter(|x| *x > 0.0).collect();
    let max_bounded = bounded.iter().copied().fold(0.0, f64::max);
    let unbounded_x = max_bounded + 2.0;
    let mut x_ticks: Vec<(f64, String)> = Vec::new();
    for x in &bounded {
        if !x_ticks.iter().any(|t| t.0 == *x) {
            x_ticks.push((*x, format!("{x}")));
        }
    }
    let has_unbounded = pts.iter().any(|p| p.1 .0 == 0.0);
    if has_unbounded {
        x_ticks.push((unbounded_x, "unbounded".into()));
    }
    let series = group(pts)
        .into_iter()
        .map(|(variant, points)| {
            let (det, line): (Vec<_>, Vec<_>) = points.into_iter().partition(|p| p.0 == 0.0);
            Series {
                name: format!("{variant} handler, DSA at saturation"),
                points: line,
                detached: det.into_iter().map(|p| (unbounded_x, p.1)).collect(),
            }
        })
        .collect();
    let mut caption = caption(out);
    if has_unbounded {
        caption.push("\"unbounded\" is max_loops = 0, set apart at the right".into());
    }
    Some(Figure {
        title: "coalesce-loops: notifications per MSI vs MAX_POSTED_MSI_COALESCING_LOOP".into(),
        x_label: "MAX_LOOPS (loop iterations per notification)".into(),
        y_label: "notifications per MSI (ratio)".into(),
        caption,
        x_scale: XScale::Linear,
        style: Style::Lines,
        series,
        x_ticks,
        reference: None,
    })
}

/// The first two numeric columns (x, y) by the first text column.
fn generic(out: &ExperimentOutput) -> Result<Figure, String> {
    let first = out
        .rows
        .first()
        .and_then(Value::as_object)
        .ok_or_else(|| format!("{}: no rows to plot", out.experiment))?;
    let numeric: Vec<&String> = first
        .iter()
        .filter(|(_, v)| v.is_number())
        .map(|(k, _)| k)
        .collect();
    let [xk, yk, ..] = numeric[..] else {
        return Err(format!(
            "{}: a generic plot needs two numeric columns, the rows have {}",
            out.experiment,
            numeric.len()
        ));
    };
    let sk = first.iter().find(|(_, v)| v.is_string()).map(|(k, _)| k);
    let pts: Vec<(String, (f64, f64))> = out
        .rows
        .iter()
        .filter_map(|r| {
            let s = sk.and_then(|k| text(r, k)).unwrap_or_default();
            Some((s, (num(r, xk)?, num(r, yk)?)))
        })
        .collect();
    let x_scale = x_scale_for(pts.iter().map(|p| p.1 .0), 50.0);
    let xmax = pts.iter().map(|p| p.1 .0.abs()).fold(0.0, f64::max);
    let ymax = pts.iter().map(|p| p.1 .1.abs()).fold(0.0, f64::max);
    let xs = scale_for_display(xk, unit_of(xk), xmax);
    let ys = scale_for_display(yk, unit_of(yk), ymax);
    let mut caption = caption(out);
    caption.push(format!(
        "generic figure: {yk} against {xk}{}",
        sk.map(|k| format!(" by {k}")).unwrap_or_default()
    ));
    Ok(Figure {
        title: out.experiment.clone(),
        x_label: if x_scale == XScale::Log {
            format!("{} — log scale", xs.label)
        } else {
            xs.label
        },
        y_label: ys.label,
        caption,
        x_scale,
        style: Style::Lines,
        series: group(pts)
            .into_iter()
            .map(|(name, points)| Series {
                name,
                points: points
                    .into_iter()
                    .map(|(x, y)| (x * xs.factor, y * ys.factor))
                    .collect(),
                detached: vec![],
            })
            .collect(),
        x_ticks: vec![],
        reference: None,
    })
}

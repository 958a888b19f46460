//! A sweep's figure: one metric against the first axis, one series per combination of
//! the other axes' values.

use std::path::Path;

use super::units::{scale_for_display, unit_of};
use super::{model_caption, Figure, Series, Style, XScale};
use crate::sweep::{canonical, Metrics, PointRecord};

/// Draws `y` against the first axis of `records` to `path` as SVG.
pub fn plot_sweep(records: &[PointRecord], y: &str, path: &Path) -> Result<(), String> {
    sweep_figure(records, y)?.write_svg(path)
}

/// The figure [`plot_sweep`] draws. `y` is a key of every record's `metrics`.
pub fn sweep_figure(records: &[PointRecord], y: &str) -> Result<Figure, String> {
    let first = records.first().ok_or("the sweep has no points to plot")?;
    let axes: Vec<&String> = first.coords.keys().collect();
    let Some(&x_field) = axes.first() else {
        return Err("the sweep has no axes, so there is nothing to plot against".into());
    };
    // A null value is a field with nothing to report at that point (no MSI waiting,
    // say): the point is left out of the figure, and the caption says so. Any other
    // value that is not a number means `y` is not a metric.
    let mut ys: Vec<Option<f64>> = Vec::with_capacity(records.len());
    for r in records {
        if matches!(r.metrics.get(y), Some(serde_json::Value::Null)) {
            ys.push(None);
            continue;
        }
        ys.push(Some(r.metric(y).ok_or_else(|| {
            let mut names = Metrics::names();
            names.extend(
                r.metrics
                    .keys()
                    .filter(|k| !names.contains(k))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
            format!(
                "point {} has no numeric metric `{y}` (metrics: {})",
                r.point,
                names.join(", ")
            )
        })?));
    }
    let without_value = ys.iter().filter(|v| v.is_none()).count();
    if without_value == records.len() {
        return Err(format!(
            "`{y}` is null at every point of the sweep, so there is nothing to plot"
        ));
    }
    let xs: Vec<Option<f64>> = records
        .iter()
        .map(|r| r.coords.get(x_field.as_str()).and_then(|v| v.as_f64()))
        .collect();
    let numeric_x = xs.iter().all(Option::is_some);
    let series_key = |r: &PointRecord| -> String {
        axes[1..]
            .iter()
            .map(|a| {
                format!(
                    "{a} = {}",
                    r.coords.get(a.as_str()).map(canonical).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let ymax = ys.iter().flatten().map(|v| v.abs()).fold(0.0, f64::max);
    let y_scaled = scale_for_display(y, unit_of(y), ymax);

    let mut categories: Vec<String> = Vec::new();
    let (x_scale, x_label, xvals): (XScale, String, Vec<f64>) = if numeric_x {
        let raw: Vec<f64> = xs.iter().map(|x| x.expect("numeric")).collect();
        let xmax = raw.iter().map(|v| v.abs()).fold(0.0, f64::max);
        let s = scale_for_display(x_field, unit_of(x_field), xmax);
        let lo = raw.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = raw.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let log = lo > 0.0 && hi / lo >= 50.0;
        (
            if log { XScale::Log } else { XScale::Linear },
            if log {
                format!("{} — log scale", s.label)
            } else {
                s.label
            },
            raw.iter().map(|v| v * s.factor).collect(),
        )
    } else {
        let xv = records
            .iter()
            .map(|r| {
                let c = r
                    .coords
                    .get(x_field.as_str())
                    .map(canonical)
                    .unwrap_or_default();
                let i = categories.iter().position(|k| *k == c).unwrap_or_else(|| {
                    categories.push(c);
                    categories.len() - 1
                });
                i as f64
            })
            .collect();
        (
            XScale::Categories(categories.clone()),
            x_field.to_string(),
            xv,
        )
    };

    let mut series: Vec<Series> = Vec::new();
    for ((r, x), yv) in records.iter().zip(&xvals).zip(&ys) {
        let Some(yv) = yv else { continue };
        let key = series_key(r);
        let p = (*x, yv * y_scaled.factor);
        match series.iter_mut().find(|s| s.name == key) {
            Some(s) => s.points.push(p),
            None => series.push(Series {
                name: key,
                points: vec![p],
                detached: vec![],
            }),
        }
    }
    let style = if !numeric_x && series.len() <= 6 {
        Style::Bars
    } else {
        Style::Lines
    };
    let same_seed = records.iter().all(|r| r.seed == r.sweep_seed);
    let seed_text = if same_seed {
        format!("seed {} at every point", first.sweep_seed)
    } else {
        format!(
            "sweep seed {} (point seeds derived from it)",
            first.sweep_seed
        )
    };
    let mut caption = vec![model_caption(&seed_text)];
    caption.push(format!(
        "sweep {}: {} of {} points{}",
        first.sweep,
        records.len(),
        first.points_total,
        if axes.len() > 2 {
            "; each series is one combination of the other axes"
        } else {
            ""
        }
    ));
    if without_value > 0 {
        caption.push(format!(
            "{without_value} of {} points have no value of {y} (null) and are not drawn",
            records.len()
        ));
    }
    Ok(Figure {
        title: format!("{y} vs {x_field}"),
        x_label,
        y_label: y_scaled.label,
        caption,
        x_scale,
        style,
        series,
        x_ticks: vec![],
        reference: None,
    })
}

//! SVG figures of experiment and sweep results, drawn with plotters' SVG backend.
//!
//! A [`Figure`] is plain data (series of points, axis labels with units, a caption);
//! [`Figure::to_svg`] renders it. [`plot_experiment`] knows the main figure of each
//! built-in experiment and falls back to a generic one; [`plot_sweep`] draws a metric
//! against a sweep's first axis. Every caption says the figures come from the model,
//! with the seed.

mod experiments;
mod sweep;
pub(crate) mod units;

use std::ops::Range;
use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

pub use experiments::{experiment_figure, plot_experiment};
pub use sweep::{plot_sweep, sweep_figure};
pub use units::{scale_for_display, unit_of, Scaled};

/// How the x axis maps values.
#[derive(Clone, Debug, PartialEq)]
pub enum XScale {
    /// Linear.
    Linear,
    /// Logarithmic; every x must be above zero.
    Log,
    /// Named categories at x = 0, 1, 2, ...
    Categories(Vec<String>),
}

/// How series are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Markers joined by lines (markers only on a categorical axis).
    Lines,
    /// Bars grouped by category, one bar per series.
    Bars,
}

/// One named series.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Series {
    /// Shown in the legend.
    pub name: String,
    /// Points joined by a line, drawn in x order.
    pub points: Vec<(f64, f64)>,
    /// Points drawn as markers only (e.g. "unbounded" set apart at the right).
    pub detached: Vec<(f64, f64)>,
}

/// A figure as data.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// Above the plot.
    pub title: String,
    /// With unit, e.g. "offered rate (M MSIs/s)".
    pub x_label: String,
    /// With unit.
    pub y_label: String,
    /// Lines under the plot; the first says where the numbers come from.
    pub caption: Vec<String>,
    /// How x maps to the page.
    pub x_scale: XScale,
    /// Lines or bars.
    pub style: Style,
    /// The data, one entry per legend item.
    pub series: Vec<Series>,
    /// When non-empty (linear axis only), the x tick labels: only these positions are
    /// labelled, with this text.
    pub x_ticks: Vec<(f64, String)>,
    /// A thin grey reference line (e.g. handled = offered).
    pub reference: Option<Series>,
}

/// The caption line every figure carries.
pub fn model_caption(seed_text: &str) -> String {
    format!("model output (irqsim), {seed_text} — not hardware measurements")
}

/// Okabe-Ito colours, readable by most colour-blind readers.
const COLORS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(120, 120, 120),
    RGBColor(240, 228, 66),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

const HEIGHT: u32 = 600;
const FONT: &str = "sans-serif";

impl Figure {
    /// Renders the figure as an SVG document.
    pub fn to_svg(&self) -> Result<String, String> {
        let finite = |p: &&(f64, f64)| p.0.is_finite() && p.1.is_finite();
        let all: Vec<(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().chain(&s.detached))
            .filter(finite)
            .copied()
            .collect();
        if all.is_empty() {
            return Err(format!(
                "{}: nothing to plot (no finite points)",
                self.title
            ));
        }
        let width = self.width();
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (width, HEIGHT)).into_drawing_area();
            root.fill(&WHITE).map_err(err)?;
            let footer_h = 18 * self.caption.len() as u32 + 12;
            let (main, footer) = root.split_vertically(HEIGHT - footer_h);
            for (i, line) in self.caption.iter().enumerate() {
                footer
                    .draw_text(
                        line,
                        &TextStyle::from((FONT, 16).into_font()).color(&RGBColor(70, 70, 70)),
                        (12, 2 + 18 * i as i32),
                    )
                    .map_err(err)?;
            }
            let legend_entries = self.series.len() + self.reference.is_some() as usize;
            let y = y_range(&all, self.style, legend_entries);
            match &self.x_scale {
                XScale::Log => {
                    let (lo, hi) = x_bounds(&all);
                    if lo <= 0.0 {
                        return Err(format!("{}: a log x axis needs x above zero", self.title));
                    }
                    let x = (lo / 1.25..hi * 1.25).log_scale();
                    self.draw(&main, x, y, |v| v.log10())?;
                }
                XScale::Linear if self.x_ticks.is_empty() => {
                    let (lo, hi) = x_bounds(&all);
                    let pad = if hi > lo { (hi - lo) * 0.04 } else { 0.5 };
                    self.draw(&main, lo - pad..hi + pad, y, |v| v)?;
                }
                XScale::Linear => {
                    let (lo, hi) = x_bounds(&all);
                    let ticks = self.x_ticks.iter().map(|t| t.0);
                    let lo = ticks.clone().fold(lo, f64::min);
                    let hi = ticks.fold(hi, f64::max);
                    self.draw(&main, lo - 0.5..hi + 0.5, y, |v| v)?;
                }
                XScale::Categories(names) => {
                    let n = names.len().max(1) as f64;
                    self.draw(&main, -0.5..n - 0.5, y, |v| v)?;
                }
            }
            root.present().map_err(err)?;
        }
        Ok(svg)
    }

    /// Writes the SVG to `path`.
    pub fn write_svg(&self, path: &Path) -> Result<(), String> {
        let svg = self.to_svg()?;
        std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// Wide enough for category labels side by side and for the caption.
    fn width(&self) -> u32 {
        let caption = self
            .caption
            .iter()
            .map(|l| l.chars().count() as u32 * 8 + 30)
            .max()
            .unwrap_or(0);
        let plot = match &self.x_scale {
            XScale::Categories(names) => {
                let longest = names.iter().map(|n| n.chars().count()).max().unwrap_or(4);
                let per = (longest as u32 * 8 + 16).max(60);
                names.len() as u32 * per + 160
            }
            _ => 900,
        };
        plot.max(caption).clamp(800, 2400)
    }

    /// The tick labels, when the figure fixes them.
    fn tick_labels(&self) -> Option<Vec<(f64, String)>> {
        match &self.x_scale {
            XScale::Categories(names) => Some(
                names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (i as f64, n.clone()))
                    .collect(),
            ),
            XScale::Linear if !self.x_ticks.is_empty() => Some(self.x_ticks.clone()),
            _ => None,
        }
    }

    fn draw<XS>(
        &self,
        area: &DrawingArea<SVGBackend<'_>, Shift>,
        x_spec: XS,
        y: Range<f64>,
        x_norm: impl Fn(f64) -> f64,
    ) -> Result<(), String>
    where
        XS: AsRangedCoord<Value = f64>,
        XS::CoordDescType: ValueFormatter<f64>,
    {
        let mut chart = ChartBuilder::on(area)
            .caption(&self.title, (FONT, 24))
            .margin(14)
            .x_label_area_size(54)
            .y_label_area_size(84)
            .build_cartesian_2d(x_spec, y)
            .map_err(err)?;
        let ticks = self.tick_labels();
        let tick_fmt = |v: &f64| -> String {
            ticks
                .as_ref()
                .and_then(|t| t.iter().find(|(x, _)| (x - v).abs() < 1e-6))
                .map(|(_, s)| s.clone())
                .unwrap_or_default()
        };
        let y_fmt = |v: &f64| short_number(*v);
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .axis_desc_style((FONT, 18))
            .label_style((FONT, 15))
            .y_label_formatter(&y_fmt)
            .max_light_lines(1)
            .light_line_style(RGBColor(0, 0, 0).mix(0.05));
        if let Some(t) = &ticks {
            let span = t.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max)
                - t.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
            mesh.x_labels(span.round() as usize + 1)
                .x_label_formatter(&tick_fmt);
            if matches!(self.x_scale, XScale::Categories(_)) {
                mesh.disable_x_mesh();
            }
        }
        mesh.draw().map_err(err)?;

        if let Some(r) = &self.reference {
            let style = RGBColor(150, 150, 150).stroke_width(1);
            chart
                .draw_series(DashedLineSeries::new(r.points.clone(), 6, 4, style))
                .map_err(err)?
                .label(&r.name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        }
        let n = self.series.len().max(1) as f64;
        for (i, s) in self.series.iter().enumerate() {
            let c = color(i);
            let mut pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .copied()
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let detached: Vec<(f64, f64)> = s
                .detached
                .iter()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .copied()
                .collect();
            match self.style {
                Style::Bars => {
                    let w = 0.8 / n;
                    let bars = pts.iter().chain(&detached).map(|&(x, v)| {
                        let x0 = x - 0.4 + w * i as f64;
                        Rectangle::new([(x0, 0.0), (x0 + w * 0.92, v)], c.filled())
                    });
                    chart
                        .draw_series(bars)
                        .map_err(err)?
                        .label(&s.name)
                        .legend(move |(x, y)| {
                            Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled())
                        });
                }
                Style::Lines => {
                    let categorical = matches!(self.x_scale, XScale::Categories(_));
                    let (offset, joined) = if categorical {
                        // Side by side within a category, like bars, so markers of
                        // different series do not hide each other.
                        (0.5 * (i as f64 - (n - 1.0) / 2.0) / n, false)
                    } else {
                        (0.0, true)
                    };
                    let at = |p: &(f64, f64)| (p.0 + offset, p.1);
                    if joined && pts.len() > 1 {
                        chart
                            .draw_series(LineSeries::new(pts.iter().map(at), c.stroke_width(2)))
                            .map_err(err)?;
                    }
                    chart
                        .draw_series(
                            pts.iter()
                                .chain(&detached)
                                .map(|p| Circle::new(at(p), 4, c.filled())),
                        )
                        .map_err(err)?
                        .label(&s.name)
                        .legend(move |(x, y)| {
                            EmptyElement::at((x, y))
                                + PathElement::new(vec![(-9, 0), (9, 0)], c.stroke_width(2))
                                + Circle::new((0, 0), 4, c.filled())
                        });
                }
            }
        }
        if self.series.len() > 1 || self.reference.is_some() {
            chart
                .configure_series_labels()
                .position(self.legend_corner(&x_norm))
                .background_style(WHITE.mix(0.9))
                .border_style(RGBColor(0, 0, 0).mix(0.4))
                .label_font((FONT, 16))
                .draw()
                .map_err(err)?;
        }
        Ok(())
    }

    /// The plot corner with the fewest points, so the legend hides little.
    fn legend_corner(&self, x_norm: &impl Fn(f64) -> f64) -> SeriesLabelPosition {
        let pts: Vec<(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().chain(&s.detached))
            .filter(|p| {
                p.0.is_finite()
                    && p.1.is_finite()
                    && (p.0 > 0.0 || !matches!(self.x_scale, XScale::Log))
            })
            .map(|p| (x_norm(p.0), p.1))
            .collect();
        let (xl, xh) = x_bounds(&pts);
        let (yl, yh) = pts
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
                (l.min(p.1), h.max(p.1))
            });
        let yl = if self.style == Style::Bars {
            yl.min(0.0)
        } else {
            yl
        };
        let norm = |v: f64, l: f64, h: f64| if h > l { (v - l) / (h - l) } else { 0.5 };
        let corners = [
            (SeriesLabelPosition::UpperLeft, 0.0, 1.0),
            (SeriesLabelPosition::UpperRight, 1.0, 1.0),
            (SeriesLabelPosition::LowerRight, 1.0, 0.0),
            (SeriesLabelPosition::LowerLeft, 0.0, 0.0),
        ];
        let crowd = |cx: f64, cy: f64| {
            pts.iter()
                .filter(|p| {
                    let (x, y) = (norm(p.0, xl, xh), norm(p.1, yl, yh));
                    // Bars fill everything below their top.
                    let y_hit = if self.style == Style::Bars && cy > 0.5 {
                        y > 0.55
                    } else if self.style == Style::Bars {
                        true
                    } else {
                        (y - cy).abs() < 0.45
                    };
                    (x - cx).abs() < 0.45 && y_hit
                })
                .count()
        };
        corners
            .into_iter()
            .min_by_key(|(_, cx, cy)| crowd(*cx, *cy))
            .map(|c| c.0)
            .expect("four corners")
    }
}

fn x_bounds(pts: &[(f64, f64)]) -> (f64, f64) {
    pts.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
            (l.min(p.0), h.max(p.0))
        })
}

/// From zero (or the lowest negative value) to a little above the highest value; bar
/// charts leave room above the bars for a legend of `legend_entries` lines.
fn y_range(pts: &[(f64, f64)], style: Style, legend_entries: usize) -> Range<f64> {
    let (lo, hi) = pts
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
            (l.min(p.1), h.max(p.1))
        });
    let lo = if style == Style::Bars || lo >= 0.0 {
        lo.min(0.0)
    } else {
        lo
    };
    let span = hi - lo;
    if span <= 0.0 {
        let pad = hi.abs().max(1.0) * 0.5;
        return lo - if lo < 0.0 { pad } else { 0.0 }..hi + pad;
    }
    let lo = if lo < 0.0 { lo - span * 0.06 } else { lo };
    let headroom = if style == Style::Bars && legend_entries > 1 {
        // The legend's share of the plot height (about 20 px a line in 430 px).
        let f = ((legend_entries * 20 + 20) as f64 / 430.0).min(0.6);
        f / (1.0 - f) + 0.04
    } else {
        0.1
    };
    lo..hi + span * headroom
}

/// A tick label without trailing noise: `0.25`, `1.5`, `120`, `2.5e7`.
pub fn short_number(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e6).contains(&a) {
        return format!("{v:.1e}").replace(".0e", "e");
    }
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

fn err(e: impl std::fmt::Display) -> String {
    format!("drawing the plot: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(style: Style, x_scale: XScale) -> Figure {
        Figure {
            title: "t".into(),
            x_label: "x (s)".into(),
            y_label: "y (ns)".into(),
            caption: vec![model_caption("seed 3")],
            x_scale,
            style,
            series: vec![
                Series {
                    name: "a".into(),
                    points: vec![(1.0, 2.0), (2.0, 3.0)],
                    detached: vec![],
                },
                Series {
                    name: "b & <c>".into(),
                    points: vec![(1.0, 1.0), (2.0, 5.0)],
                    detached: vec![(4.0, 4.0)],
                },
            ],
            x_ticks: vec![],
            reference: None,
        }
    }

    #[test]
    fn renders_labels_caption_and_escapes_text() {
        let svg = fig(Style::Lines, XScale::Linear).to_svg().unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("x (s)") && svg.contains("y (ns)"));
        assert!(svg.contains("model output (irqsim), seed 3"));
        assert!(svg.contains("b &amp; &lt;c&gt;"));
        assert!(!svg.contains("<c>"));
    }

    #[test]
    fn renders_bars_categories_and_log_axes() {
        let mut f = fig(
            Style::Bars,
            XScale::Categories(vec!["one".into(), "two".into()]),
        );
        f.series[1].detached.clear();
        let svg = f.to_svg().unwrap();
        assert!(svg.contains("\none\n") && svg.contains("\ntwo\n"), "{svg}");
        let svg = fig(Style::Lines, XScale::Log).to_svg().unwrap();
        assert!(svg.contains("<polyline") || svg.contains("<path"));
    }

    #[test]
    fn empty_figures_are_an_error() {
        let mut f = fig(Style::Lines, XScale::Linear);
        f.series.clear();
        assert!(f.to_svg().unwrap_err().contains("nothing to plot"));
    }

    #[test]
    fn short_numbers() {
        assert_eq!(short_number(0.25), "0.25");
        assert_eq!(short_number(120.0), "120");
        assert_eq!(short_number(2.5e7), "2.5e7");
        assert_eq!(short_number(3e7), "3e7");
        assert_eq!(short_number(0.0), "0");
    }
}

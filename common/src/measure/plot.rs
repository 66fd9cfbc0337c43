//! SVG line plots, for the sweeps (GB/s against columns, one line per kernel version).
//!
//! The plots are drawn on the GPU host, which has the NVIDIA driver and nothing else: no fonts,
//! no fontconfig. So plotters is built with its SVG backend and no font feature. Without `ttf`
//! or `ab_glyph`, plotters sizes text with a per-character estimate and the SVG backend writes
//! each string as a `<text font-family="sans-serif">` element with a `text-anchor`, which the
//! viewer (a browser, GitHub) lays out with its own fonts. Drawing therefore reads no font file
//! at all; the estimate only sizes the margins, which is why the label areas below are fixed
//! and generous. (`ttf` would look for system fonts through font-kit and find none on that host;
//! `ab_glyph` would embed a font only to measure text that the viewer measures again anyway.)

use std::fs;
use std::ops::Range;
use std::path::Path;

use anyhow::{Context, Result, bail};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One line of the plot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Shown in the legend.
    pub name: String,
    /// `(x, y)`, in any order; `x > 0` on a log2 axis. A missing x (a width the version
    /// refuses) breaks the line there instead of bridging it, so no value is drawn that was
    /// never measured.
    pub points: Vec<(f64, f64)>,
}

/// A horizontal reference line across the plot (a ceiling such as the device copy), dashed and
/// grey so it reads as a bound rather than as one more kernel.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HLine {
    /// Shown in the legend.
    pub name: String,
    pub y: f64,
}

/// What to draw. The y axis starts at 0 (bandwidths are compared with the ceiling, and a cut
/// axis would exaggerate the differences; it goes lower only for negative values) and ends 10%
/// above the highest point or line.
#[derive(Debug, Clone, Copy, Default)]
pub struct LinePlot<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// x on a log2 scale with ticks at powers of two (128, 1K, 64K, 1M): the sweeps double the
    /// row length at each step, so this spaces their points evenly.
    pub log2_x: bool,
    pub series: &'a [Series],
    pub hlines: &'a [HLine],
}

/// Writes the plot to `path` as SVG (900x560 px), creating the parent folder.
///
/// The SVG is built in memory first, so a failed plot leaves no half-written file. A plot with
/// no point in any series (an empty `series`, or only empty ones) is an error rather than an
/// empty frame: its x range is undefined, and a sweep that measured nothing should say so.
/// So are non-finite values and `x <= 0` on a log2 axis.
pub fn write_svg(path: &Path, plot: &LinePlot) -> Result<()> {
    let svg = render(plot).with_context(|| format!("plotting {}", path.display()))?;
    write_file(path, &svg)
}

/// Writes a finished SVG to `path`, creating the parent folder (the roofline plots use it too).
pub(crate) fn write_file(path: &Path, svg: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

const SIZE: (u32, u32) = (900, 560);
/// The legend sits beside the plot, not in it: the lines fill the plot from the low left to
/// the ceiling at the top, so no corner of it is reliably empty.
const LEGEND_WIDTH: u32 = 220;
pub(crate) const FONT: &str = "sans-serif";

/// Tableau 10 without its grey, which is kept for the reference lines. Past nine series the
/// colours repeat with another marker shape.
pub(crate) const PALETTE: [RGBColor; 9] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];
pub(crate) const REFERENCE: RGBColor = RGBColor(0x70, 0x70, 0x70);

/// The axes, in plot coordinates (log2 of x when `log2_x`).
struct Frame {
    x: (f64, f64),
    y: (f64, f64),
    x_keys: Vec<f64>,
    /// Every x that any series has, sorted: a series that skips one of them has a gap there.
    grid: Vec<f64>,
    /// Each series' points in plot coordinates, sorted by x.
    lines: Vec<Vec<(f64, f64)>>,
}

impl Frame {
    fn of(plot: &LinePlot) -> Result<Frame> {
        let mut lines = Vec::with_capacity(plot.series.len());
        for s in plot.series {
            let mut line = Vec::with_capacity(s.points.len());
            for &(x, y) in &s.points {
                if !x.is_finite() || !y.is_finite() || (plot.log2_x && x <= 0.0) {
                    bail!(
                        "series {:?} has the point ({x}, {y}), which cannot be drawn{}",
                        s.name,
                        if plot.log2_x { " on a log2 x axis" } else { "" }
                    );
                }
                line.push((if plot.log2_x { x.log2() } else { x }, y));
            }
            line.sort_by(|a, b| a.0.total_cmp(&b.0));
            lines.push(line);
        }
        let mut grid: Vec<f64> = lines.iter().flatten().map(|p| p.0).collect();
        grid.sort_by(f64::total_cmp);
        grid.dedup();
        let (Some(&x_min), Some(&x_max)) = (grid.first(), grid.last()) else {
            bail!("nothing to plot: no series has a point");
        };
        if let Some(h) = plot.hlines.iter().find(|h| !h.y.is_finite()) {
            bail!("reference line {:?} is at y = {}", h.name, h.y);
        }
        let ys = || {
            lines
                .iter()
                .flatten()
                .map(|p| p.1)
                .chain(plot.hlines.iter().map(|h| h.y))
        };
        let y_max = ys().fold(0.0, f64::max);
        let y_min = ys().fold(0.0, f64::min);
        let y = (y_min * 1.1, if y_max > 0.0 { y_max * 1.1 } else { 1.0 });

        let (x, x_keys) = if plot.log2_x {
            // Whole powers of two at both ends, plus a little room so the end markers do not
            // sit on the axes.
            let (lo, hi) = (x_min.floor(), x_max.ceil().max(x_min.floor() + 1.0));
            let step = ((hi - lo) / 16.0).ceil().max(1.0);
            let keys = (0..)
                .map(|i| lo + step * f64::from(i))
                .take_while(|&k| k <= hi)
                .collect();
            ((lo - 0.3, hi + 0.3), keys)
        } else {
            let pad = if x_max > x_min {
                (x_max - x_min) * 0.03
            } else {
                x_min.abs().max(1.0) * 0.1
            };
            let x = (x_min - pad, x_max + pad);
            let keys = RangedCoordf64::from(x.0..x.1).key_points(10);
            (x, keys)
        };
        Ok(Frame {
            x,
            y,
            x_keys,
            grid,
            lines,
        })
    }

    /// The runs of `line` with no gap: consecutive points whose x are neighbours in the grid.
    fn segments<'l>(&self, line: &'l [(f64, f64)]) -> Vec<&'l [(f64, f64)]> {
        let index = |x: f64| self.grid.binary_search_by(|g| g.total_cmp(&x)).unwrap_or(0);
        let mut runs = Vec::new();
        let mut start = 0;
        for i in 1..=line.len() {
            if i == line.len() || index(line[i].0) > index(line[i - 1].0) + 1 {
                runs.push(&line[start..i]);
                start = i;
            }
        }
        runs
    }
}

fn render(plot: &LinePlot) -> Result<String> {
    let frame = Frame::of(plot)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw(&root, plot, &frame).context("drawing")?;
        root.present().context("drawing")?;
    }
    Ok(svg)
}

type DrawResult = std::result::Result<(), DrawingAreaErrorKind<std::io::Error>>;

fn draw(root: &DrawingArea<SVGBackend, Shift>, plot: &LinePlot, frame: &Frame) -> DrawResult {
    root.fill(&WHITE)?;
    let body = root.titled(plot.title, (FONT, 24))?;
    let (plot_area, legend_area) = body.split_horizontally(SIZE.0 - LEGEND_WIDTH);

    let (x_lo, x_hi) = frame.x;
    let mut chart = ChartBuilder::on(&plot_area)
        .margin(10)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d(
            XAxis {
                range: x_lo..x_hi,
                keys: frame.x_keys.clone(),
            },
            frame.y.0..frame.y.1,
        )?;
    let log2_x = plot.log2_x;
    let x_label = move |v: &f64| {
        if log2_x {
            pow2_label(*v)
        } else {
            number_label(*v)
        }
    };
    chart
        .configure_mesh()
        .x_desc(plot.x_label)
        .y_desc(plot.y_label)
        .x_label_formatter(&x_label)
        .y_label_formatter(&|v| number_label(*v))
        .y_labels(10)
        .y_max_light_lines(1)
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .draw()?;

    for h in plot.hlines {
        chart.draw_series(DashedLineSeries::new(
            [(x_lo, h.y), (x_hi, h.y)],
            8,
            5,
            REFERENCE.stroke_width(2),
        ))?;
    }
    for (i, line) in frame.lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        for run in frame.segments(line) {
            chart.draw_series(LineSeries::new(run.iter().copied(), color.stroke_width(2)))?;
        }
        chart.draw_series(line.iter().map(|&p| marker(i, p)))?;
    }

    // The legend: one row per series, then the reference lines, each with its sample.
    let row = |k: usize| 30 + 22 * k as i32;
    let text = TextStyle::from((FONT, 17).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, s) in plot.series.iter().enumerate() {
        let y = row(i);
        let color = PALETTE[i % PALETTE.len()];
        legend_area.draw(&PathElement::new(
            vec![(8, y), (40, y)],
            color.stroke_width(2),
        ))?;
        legend_area.draw(&marker(i, (24, y)))?;
        legend_area.draw(&Text::new(s.name.as_str(), (48, y), text.clone()))?;
    }
    for (k, h) in plot.hlines.iter().enumerate() {
        let y = row(plot.series.len() + k);
        for x in [8, 21, 34] {
            legend_area.draw(&PathElement::new(
                vec![(x, y), (x + 6, y)],
                REFERENCE.stroke_width(2),
            ))?;
        }
        legend_area.draw(&Text::new(h.name.as_str(), (48, y), text.clone()))?;
    }
    Ok(())
}

/// The x axis: linear in plot coordinates (log2 of x when `log2_x`), with ticks exactly at
/// `keys`. Plotters' own f64 axis picks round decimal ticks, which on a log2 axis would not be
/// powers of two, and its `with_key_points` wrapper drops the value formatter that
/// `configure_mesh` requires.
struct XAxis {
    range: Range<f64>,
    keys: Vec<f64>,
}

impl Ranged for XAxis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        RangedCoordf64::from(self.range.clone()).map(value, limit)
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // No light grid lines between the ticks: they would fall between powers of two.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.keys.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

impl ValueFormatter<f64> for XAxis {
    fn format(value: &f64) -> String {
        number_label(*value)
    }
}

/// Series `i`'s point marker: circles for the first nine, then triangles, then crosses, so
/// series that share a colour stay apart.
pub(crate) fn marker<'b, C>(i: usize, at: C) -> DynElement<'static, SVGBackend<'b>, C>
where
    C: Clone + 'static,
{
    let color = PALETTE[i % PALETTE.len()];
    match (i / PALETTE.len()) % 3 {
        0 => Circle::new(at, 3, color.filled()).into_dyn(),
        1 => TriangleMarker::new(at, 5, color.filled()).into_dyn(),
        _ => Cross::new(at, 4, color.stroke_width(2)).into_dyn(),
    }
}

/// `2^exp` the way row lengths are spoken of: 128, 1K, 64K, 1M.
fn pow2_label(exp: f64) -> String {
    let v = exp.exp2();
    for (unit, suffix) in [(30, "G"), (20, "M"), (10, "K")] {
        let unit = f64::from(unit).exp2();
        if v >= unit {
            return format!("{}{suffix}", number_label(v / unit));
        }
    }
    number_label(v)
}

/// A tick value with no trailing zeros (`500`, `0.25`), not plotters' fixed precision.
pub(crate) fn number_label(v: f64) -> String {
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_svg(name: &str) -> std::path::PathBuf {
        std::env::temp_dir()
            .join(format!("common-plot-test-{}", std::process::id()))
            .join(name)
    }

    #[test]
    fn plot_writes_names_and_title() {
        let cols = |k: u32| f64::from(1u32 << k);
        let series = [
            Series {
                name: "softmax_warp_f32".into(),
                points: (7..=20).map(|k| (cols(k), 100.0 * f64::from(k))).collect(),
            },
            Series {
                // Refuses 4K and 8K columns: a gap, not a line across it.
                name: "softmax_block_f32".into(),
                points: (7..=20)
                    .filter(|k| !(12..=13).contains(k))
                    .map(|k| (cols(k), 150.0 * f64::from(k)))
                    .collect(),
            },
        ];
        let hlines = [HLine {
            name: "device copy 3009 GB/s".into(),
            y: 3009.0,
        }];
        let path = temp_svg("two-series.svg");
        write_svg(
            &path,
            &LinePlot {
                title: "day04 block softmax: f32, 2^26 elements per point, NVIDIA H100 80GB HBM3",
                x_label: "columns per row",
                y_label: "GB/s (input read once + output written once)",
                log2_x: true,
                series: &series,
                hlines: &hlines,
            },
        )
        .unwrap();
        let svg = fs::read_to_string(&path).unwrap();
        fs::remove_file(&path).unwrap();
        let _ = fs::remove_dir(path.parent().unwrap());

        let trimmed = svg.trim();
        assert!(
            trimmed.starts_with("<svg"),
            "{}",
            &svg[..svg.len().min(200)]
        );
        assert!(trimmed.ends_with("</svg>"));
        for name in [
            "softmax_warp_f32",
            "softmax_block_f32",
            "device copy 3009 GB/s",
            "day04 block softmax: f32, 2^26 elements per point, NVIDIA H100 80GB HBM3",
            "columns per row",
            ">\n128\n<",
            ">\n1K\n<",
            ">\n1M\n<",
        ] {
            assert!(svg.contains(name), "{name:?} missing from the SVG");
        }
        // The gap splits the second series into two lines (plus its legend sample); the first
        // is one line (plus its sample).
        let strokes = |color: &str| {
            svg.matches(&format!(
                "<polyline fill=\"none\" opacity=\"1\" stroke=\"{color}\""
            ))
            .count()
        };
        assert_eq!(strokes("#1F77B4"), 2, "{svg}");
        assert_eq!(strokes("#FF7F0E"), 3, "{svg}");
    }

    #[test]
    fn plot_without_points_is_an_error_naming_the_path() {
        let path = temp_svg("empty.svg");
        for series in [
            &[][..],
            &[Series {
                name: "none".into(),
                points: vec![],
            }][..],
        ] {
            let plot = LinePlot {
                title: "empty",
                log2_x: true,
                series,
                ..LinePlot::default()
            };
            let err = format!("{:#}", write_svg(&path, &plot).unwrap_err());
            assert!(
                err.contains("empty.svg") && err.contains("nothing to plot"),
                "{err}"
            );
            assert!(!path.exists());
        }
    }

    #[test]
    fn plot_rejects_zero_on_a_log_axis() {
        let series = [Series {
            name: "bad".into(),
            points: vec![(0.0, 1.0)],
        }];
        let plot = LinePlot {
            log2_x: true,
            series: &series,
            ..LinePlot::default()
        };
        let err = format!("{:#}", render(&plot).unwrap_err());
        assert!(err.contains("\"bad\""), "{err}");
    }

    #[test]
    fn plot_labels() {
        assert_eq!(pow2_label(7.0), "128");
        assert_eq!(pow2_label(10.0), "1K");
        assert_eq!(pow2_label(16.0), "64K");
        assert_eq!(pow2_label(20.0), "1M");
        assert_eq!(pow2_label(-1.0), "0.5");
        assert_eq!(number_label(3000.0), "3000");
        assert_eq!(number_label(0.25), "0.25");
    }
}

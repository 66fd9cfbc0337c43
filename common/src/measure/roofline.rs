//! Roofline plots: each kernel at its arithmetic intensity (FLOPs per byte it moves) and its
//! achieved TFLOP/s, under the two roofs no kernel can pass: the memory roof (bandwidth times
//! intensity) and the compute roof (the FP32 peak). Where they meet, the ridge, separates
//! kernels that memory bounds from those that arithmetic bounds.

use std::path::Path;

use anyhow::{Context, Result, bail};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::measure::plot::{FONT, REFERENCE, marker, number_label, write_file};

/// One kernel on the roofline.
#[derive(Debug, Clone)]
pub struct RooflinePoint {
    pub name: String,
    /// FLOPs per byte of the traffic the kernel asks of global memory.
    pub intensity: f64,
    /// Achieved throughput, 10^12 FLOP/s.
    pub tflops: f64,
}

#[derive(Debug, Clone, Copy)]
pub struct Roofline<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    /// The memory roof's slope: measured device copy bandwidth, GB/s (10^9 B/s).
    pub bandwidth_gbs: f64,
    /// The compute roof: FP32 peak, TFLOP/s.
    pub peak_tflops: f64,
    pub points: &'a [RooflinePoint],
}

/// Attainable TFLOP/s at `intensity` FLOP/B under the two roofs.
pub fn attainable_tflops(bandwidth_gbs: f64, peak_tflops: f64, intensity: f64) -> f64 {
    (bandwidth_gbs * intensity / 1e3).min(peak_tflops)
}

/// The intensity (FLOP/B) where the memory roof meets the compute roof.
pub fn ridge_intensity(bandwidth_gbs: f64, peak_tflops: f64) -> f64 {
    peak_tflops * 1e3 / bandwidth_gbs
}

/// Writes the roofline to `path` as SVG (900x560), creating the parent folder. The SVG is
/// built in memory first, so a failed plot leaves no half-written file.
pub fn write_svg(path: &Path, roofline: &Roofline) -> Result<()> {
    validate(roofline)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw(&root, roofline).context("drawing the roofline")?;
        root.present().context("drawing the roofline")?;
    }
    write_file(path, &svg)
}

const SIZE: (u32, u32) = (900, 560);
const LEGEND_WIDTH: u32 = 250;

fn validate(r: &Roofline) -> Result<()> {
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !positive(r.bandwidth_gbs) || !positive(r.peak_tflops) {
        bail!(
            "the roofs must be positive: bandwidth {} GB/s, peak {} TFLOP/s",
            r.bandwidth_gbs,
            r.peak_tflops
        );
    }
    if r.points.is_empty() {
        bail!("nothing to plot: the roofline has no kernel on it");
    }
    if let Some(p) = r
        .points
        .iter()
        .find(|p| !positive(p.intensity) || !positive(p.tflops))
    {
        bail!(
            "{:?} is at {} FLOP/B and {} TFLOP/s, which a log-log roofline cannot show",
            p.name,
            p.intensity,
            p.tflops
        );
    }
    Ok(())
}

/// Powers of ten around `lo..hi`.
fn decades(lo: f64, hi: f64) -> (f64, f64) {
    (
        10f64.powf(lo.log10().floor()),
        10f64.powf(hi.log10().ceil()),
    )
}

type DrawResult = std::result::Result<(), DrawingAreaErrorKind<std::io::Error>>;

fn draw(root: &DrawingArea<SVGBackend, Shift>, r: &Roofline) -> DrawResult {
    root.fill(&WHITE)?;
    let body = root.titled(r.title, (FONT, 22))?;
    let (plot_area, legend_area) = body.split_horizontally(SIZE.0 - LEGEND_WIDTH);

    let ridge = ridge_intensity(r.bandwidth_gbs, r.peak_tflops);
    let fold = |f: fn(f64, f64) -> f64, init: f64, v: &dyn Fn(&RooflinePoint) -> f64| {
        r.points.iter().map(v).fold(init, f)
    };
    let (x_lo, x_hi) = decades(
        fold(f64::min, ridge / 10.0, &|p| p.intensity),
        fold(f64::max, ridge * 10.0, &|p| p.intensity),
    );
    let y_floor = attainable_tflops(r.bandwidth_gbs, r.peak_tflops, x_lo);
    let (y_lo, _) = decades(fold(f64::min, y_floor, &|p| p.tflops), r.peak_tflops);
    let y_hi = r.peak_tflops * 2.0;

    let mut chart = ChartBuilder::on(&plot_area)
        .margin(10)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc(r.x_label)
        .y_desc("TFLOP/s")
        .x_label_formatter(&|v| number_label(*v))
        .y_label_formatter(&|v| number_label(*v))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 17))
        .draw()?;

    // The roofs: the slope up to the ridge, then flat; the ridge dashed.
    chart.draw_series(LineSeries::new(
        [
            (x_lo, y_floor),
            (ridge, r.peak_tflops),
            (x_hi, r.peak_tflops),
        ],
        REFERENCE.stroke_width(2),
    ))?;
    chart.draw_series(DashedLineSeries::new(
        [(ridge, y_lo), (ridge, r.peak_tflops)],
        6,
        4,
        REFERENCE.stroke_width(1),
    ))?;
    let label = TextStyle::from((FONT, 15).into_font()).color(&REFERENCE);
    chart.draw_series([
        Text::new(
            format!("FP32 peak {:.1} TFLOP/s", r.peak_tflops),
            (ridge * 1.3, r.peak_tflops * 1.25),
            label.clone(),
        ),
        Text::new(
            format!("copy {:.0} GB/s", r.bandwidth_gbs),
            (x_lo * 1.4, y_floor * 2.2),
            label.clone(),
        ),
        Text::new(
            format!("ridge {ridge:.1} FLOP/B"),
            (ridge * 1.1, y_lo * 1.6),
            label,
        ),
    ])?;
    for (i, p) in r.points.iter().enumerate() {
        chart.draw_series([marker(i, (p.intensity, p.tflops))])?;
    }

    // The legend: marker, name and TFLOP/s of each kernel.
    let text = TextStyle::from((FONT, 15).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, p) in r.points.iter().enumerate() {
        let y = 30 + 22 * i as i32;
        legend_area.draw(&marker(i, (16, y)))?;
        legend_area.draw(&Text::new(
            format!("{} {:.1} TFLOP/s", p.name, p.tflops),
            (30, y),
            text.clone(),
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roofs_meet_at_the_ridge() {
        approx::assert_relative_eq!(ridge_intensity(3000.0, 60.0), 20.0);
        approx::assert_relative_eq!(attainable_tflops(3000.0, 60.0, 2.0), 6.0);
        approx::assert_relative_eq!(attainable_tflops(3000.0, 60.0, 100.0), 60.0);
    }

    fn point(name: &str, intensity: f64, tflops: f64) -> RooflinePoint {
        RooflinePoint {
            name: name.into(),
            intensity,
            tflops,
        }
    }

    #[test]
    fn writes_every_kernel_and_the_ridge() {
        let path = std::env::temp_dir()
            .join(format!("roofline-test-{}", std::process::id()))
            .join("r.svg");
        let points = [point("naive", 0.25, 0.4), point("tiled", 8.0, 8.5)];
        let r = Roofline {
            title: "test",
            x_label: "FLOP/B",
            bandwidth_gbs: 3000.0,
            peak_tflops: 60.0,
            points: &points,
        };
        write_svg(&path, &r).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("naive") && svg.contains("tiled") && svg.contains("ridge"));
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn empty_and_non_positive_points_are_errors() {
        let mut r = Roofline {
            title: "t",
            x_label: "x",
            bandwidth_gbs: 3000.0,
            peak_tflops: 60.0,
            points: &[],
        };
        assert!(validate(&r).is_err());
        let zero = [point("zero", 0.0, 1.0)];
        r.points = &zero;
        assert!(validate(&r).unwrap_err().to_string().contains("zero"));
    }
}

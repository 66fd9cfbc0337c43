//! What the sweeps of the shared runners (`softmax`, `matmul`, `attention`) have in common: one
//! plot series per version across the reports of a sweep, the plot's title, and the summary
//! table printed beside the plot.

use comfy_table::{Table, presets};

use crate::measure::peers::PeerFigure;
use crate::measure::plot::{self, LinePlot, Series};
use crate::measure::report::{DayReport, Row};

/// The x of each report of a sweep, given beside it (`xs` in the order of `reports`: the
/// columns or size of the shape each was run on), as the `x_of` of [`version_series`] and
/// [`peer_series`]. A report whose key is not among `reports`' is at 0.
pub fn x_by_report(
    reports: &[DayReport],
    xs: impl IntoIterator<Item = f64>,
) -> impl Fn(&DayReport) -> f64 {
    let xs: Vec<(String, f64)> = reports.iter().map(|r| r.key.clone()).zip(xs).collect();
    move |report| {
        xs.iter()
            .find(|(key, _)| *key == report.key)
            .map_or(0.0, |&(_, x)| x)
    }
}

/// One series per name in `versions`: a point `(x_of(report), y_of(row))` for every report
/// where that version has a row with a value.
pub fn version_series<'v>(
    reports: &[DayReport],
    versions: impl IntoIterator<Item = &'v str>,
    x_of: impl Fn(&DayReport) -> f64,
    y_of: impl Fn(&Row) -> Option<f64>,
) -> Vec<Series> {
    versions
        .into_iter()
        .map(|v| Series {
            name: v.to_string(),
            points: reports
                .iter()
                .filter_map(|r| {
                    let row = r.rows.iter().find(|row| row.version == v)?;
                    Some((x_of(r), y_of(row)?))
                })
                .collect(),
        })
        .collect()
}

/// The versions that have a row in any of `reports`, in the order they first appear.
pub fn row_versions(reports: &[DayReport]) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for row in reports.iter().flat_map(|r| &r.rows) {
        if !names.contains(&row.version.as_str()) {
            names.push(&row.version);
        }
    }
    names
}

/// One series per peer (named `<peer><suffix>`), in the order peers first appear: a point
/// `(x_of(report), y_of(report, figure))` for every report that has that peer's figure.
pub fn peer_series(
    reports: &[DayReport],
    suffix: &str,
    x_of: impl Fn(&DayReport) -> f64,
    y_of: impl Fn(&DayReport, &PeerFigure) -> Option<f64>,
) -> Vec<Series> {
    let mut peers: Vec<&str> = Vec::new();
    for figure in reports.iter().flat_map(|r| &r.peers) {
        if !peers.contains(&figure.peer.as_str()) {
            peers.push(&figure.peer);
        }
    }
    peers
        .into_iter()
        .map(|peer| Series {
            name: format!("{peer}{suffix}"),
            points: reports
                .iter()
                .filter_map(|r| {
                    let figure = r.peers.iter().find(|f| f.peer == peer)?;
                    Some((x_of(r), y_of(r, figure)?))
                })
                .collect(),
        })
        .collect()
}

/// A peer's TFLOP/s on a report's problem (its flops over the peer's median time).
pub fn peer_tflops(report: &DayReport, figure: &PeerFigure) -> Option<f64> {
    Some(report.flops_per_run? as f64 / (figure.median_ms * 1e-3) / 1e12)
}

/// A sweep plot's title: `<day> <title>: <what every point shares>, <GPU>`.
pub fn plot_title(day: &str, title: &str, what: &str, gpu_name: &str) -> String {
    format!("{day} {title}: {what}, {gpu_name}")
}

/// Writes a sweep's plot to `path`, then prints its title, the summary table (a row per x
/// under `x_header`, a column per series in `unit` with `decimals` digits) and where the plot
/// went: the end of every day's `--sweep`.
pub fn publish(
    path: &std::path::Path,
    line_plot: &LinePlot,
    x_header: &str,
    unit: &str,
    decimals: usize,
) -> anyhow::Result<()> {
    plot::write_svg(path, line_plot)?;
    let table = summary_table(x_header, unit, decimals, line_plot.series);
    println!("{}\n{table}\nplot: {}", line_plot.title, path.display());
    Ok(())
}

/// A table with a row per x of any series and a column per series (`<name> <unit>`), values
/// with `decimals` digits, `-` where a series has no point.
pub fn summary_table(x_header: &str, unit: &str, decimals: usize, series: &[Series]) -> Table {
    let mut xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let mut table = Table::new();
    table.load_preset(presets::UTF8_FULL_CONDENSED);
    let mut header = vec![x_header.to_string()];
    header.extend(series.iter().map(|s| format!("{} {unit}", s.name)));
    table.set_header(header);
    for x in xs {
        let mut row = vec![format!("{x}")];
        row.extend(series.iter().map(|s| {
            s.points
                .iter()
                .find(|(px, _)| *px == x)
                .map_or_else(|| "-".to_string(), |(_, y)| format!("{y:.decimals$}"))
        }));
        table.add_row(row);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_report_is_at_the_x_given_beside_it() {
        let report = |key: &str| -> DayReport {
            let device = r#"{"name": "gpu", "ordinal": 0, "arch": "sm_90", "sms": 1,
                "l2_bytes": 1, "memory_bytes": 1, "max_threads_per_sm": 1,
                "max_shared_per_block_optin": 1, "driver_cuda_version": 13000}"#;
            serde_json::from_str(&format!(
                r#"{{"day": "d", "title": "t", "problem": "p", "key": "{key}", "device": {device},
                "copy_ceiling_gbs": 1, "bytes_per_run": 1, "baseline": null, "rows": []}}"#
            ))
            .expect("a valid report")
        };
        // Keys whose last dimension is not the x: the x comes from beside them.
        let reports = [report("softmax/f32/8x128"), report("softmax/f32/4x256")];
        let x_of = x_by_report(&reports, [1.0, 2.0]);
        assert_eq!(x_of(&reports[0]), 1.0);
        assert_eq!(x_of(&reports[1]), 2.0);
        assert_eq!(x_of(&report("other")), 0.0);
    }

    #[test]
    fn the_table_has_a_row_per_x_and_dashes_for_gaps() {
        let series = [
            Series {
                name: "a".into(),
                points: vec![(128.0, 1.0), (256.0, 2.5)],
            },
            Series {
                name: "b".into(),
                points: vec![(256.0, 3.0)],
            },
        ];
        let text = summary_table("cols", "GB/s", 1, &series).to_string();
        assert!(text.contains("a GB/s") && text.contains("b GB/s"));
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("128")).collect();
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("1.0") && lines[0].contains('-'));
        assert!(text.contains("2.5") && text.contains("3.0"));
    }
}

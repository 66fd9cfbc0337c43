//! The table every day prints, its JSON form, and its Markdown form for the READMEs.

use comfy_table::{Cell, CellAlignment, Table, presets};
use serde::{Deserialize, Serialize};

use crate::bench::Timing;
use crate::check::CheckReport;
use crate::gpu::DeviceInfo;
use crate::kernel::KernelAttrs;
use crate::peers::PeerFigure;

/// One day's run: the problem, the device and one row per kernel version.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DayReport {
    /// Package name, `day00`.
    pub day: String,
    pub title: String,
    /// The problem in words: `n = 67108864, f32`.
    pub problem: String,
    /// The problem for machines, shared with the peers scripts: `softmax/f32/32768x4096`.
    pub key: String,
    pub device: DeviceInfo,
    pub copy_ceiling_gbs: f64,
    /// Least traffic of one run: inputs read once, outputs written once.
    pub bytes_per_run: u64,
    /// The row the speedup column divides by (the first version run).
    pub baseline: Option<String>,
    pub rows: Vec<Row>,
    /// What the peers (PyTorch, ...) measured on the same problem in the same run.
    #[serde(default)]
    pub peers: Vec<PeerFigure>,
}

/// One kernel version: what it is, how it launched, whether it was right, how fast.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// The version name `--kernel` takes.
    pub version: String,
    /// The CUDA function.
    pub function: String,
    pub launch: String,
    pub attrs: KernelAttrs,
    pub occupancy: f64,
    pub check: CheckReport,
    /// Absent when the check failed: a wrong kernel is not timed.
    pub timing: Option<Timing>,
    pub gb_per_s: Option<f64>,
    pub fraction_of_copy: Option<f64>,
    pub speedup_vs_baseline: Option<f64>,
}

impl DayReport {
    pub fn passed(&self) -> bool {
        self.rows.iter().all(|r| r.check.passed())
    }

    /// The fastest version that passed its check.
    pub fn best(&self) -> Option<&Row> {
        self.rows
            .iter()
            .filter(|r| r.check.passed() && r.timing.is_some())
            .max_by(|a, b| {
                a.gb_per_s
                    .unwrap_or(0.0)
                    .total_cmp(&b.gb_per_s.unwrap_or(0.0))
            })
    }

    /// The line above the table.
    pub fn heading(&self) -> String {
        format!(
            "{} {} | {} | {} | copy ceiling {:.0} GB/s",
            self.day,
            self.title,
            self.device.summary(),
            self.problem,
            self.copy_ceiling_gbs
        )
    }

    /// The table for the terminal.
    pub fn console_table(&self) -> String {
        let mut table = self.table();
        table.load_preset(presets::UTF8_FULL_CONDENSED);
        format!("{}\n{table}", self.heading())
    }

    /// The same table in Markdown, for READMEs.
    pub fn markdown_table(&self) -> String {
        let mut table = self.table();
        table.load_preset(presets::ASCII_MARKDOWN);
        table.to_string()
    }

    fn table(&self) -> Table {
        let baseline = self.baseline.as_deref().unwrap_or("first");
        let mut table = Table::new();
        table.set_header(vec![
            "kernel".to_string(),
            "launch (grid x block)".to_string(),
            "regs".to_string(),
            "smem B".to_string(),
            "local B".to_string(),
            "occ".to_string(),
            "median ms".to_string(),
            "min ms".to_string(),
            "GB/s".to_string(),
            "% copy".to_string(),
            format!("vs {baseline}"),
            "max abs err".to_string(),
            "rel L2 err".to_string(),
            "check".to_string(),
        ]);
        for row in &self.rows {
            let timing = row.timing.as_ref();
            let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
            let cells = vec![
                Cell::new(&row.version),
                Cell::new(&row.launch),
                num(row.attrs.registers),
                num(row.attrs.static_shared_bytes),
                num(row.attrs.local_bytes),
                Cell::new(format!("{:.0}%", row.occupancy * 100.0))
                    .set_alignment(CellAlignment::Right),
                right(opt(timing.map(|t| format!("{:.4}", t.median_ms)))),
                right(opt(timing.map(|t| format!("{:.4}", t.min_ms)))),
                right(opt(row.gb_per_s.map(|g| format!("{g:.0}")))),
                right(opt(row
                    .fraction_of_copy
                    .map(|f| format!("{:.1}%", f * 100.0)))),
                right(opt(row.speedup_vs_baseline.map(|s| format!("{s:.2}x")))),
                right(format!("{:.1e}", row.check.max_abs_err)),
                right(format!("{:.1e}", row.check.rel_l2_err)),
                Cell::new(if row.check.passed() { "ok" } else { "FAIL" }),
            ];
            table.add_row(cells);
        }
        let baseline_ms = self
            .rows
            .iter()
            .find(|r| Some(&r.version) == self.baseline.as_ref())
            .and_then(|r| r.timing)
            .map(|t| t.median_ms);
        for peer in &self.peers {
            let dash = || Cell::new("");
            table.add_row(vec![
                Cell::new(format!("{} (peer)", peer.peer)),
                dash(),
                dash(),
                dash(),
                dash(),
                dash(),
                right(format!("{:.4}", peer.median_ms)),
                dash(),
                right(format!("{:.0}", peer.gb_per_s)),
                right(format!(
                    "{:.1}%",
                    peer.gb_per_s / self.copy_ceiling_gbs * 100.0
                )),
                right(
                    baseline_ms.map_or_else(String::new, |b| format!("{:.2}x", b / peer.median_ms)),
                ),
                dash(),
                dash(),
                dash(),
            ]);
        }
        table
    }
}

fn num(v: u32) -> Cell {
    right(v.to_string())
}

fn right(s: String) -> Cell {
    Cell::new(s).set_alignment(CellAlignment::Right)
}

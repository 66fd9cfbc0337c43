//! The table every day prints, its JSON form, and its Markdown form for the READMEs.

use comfy_table::{Cell, CellAlignment, Table, presets};
use serde::{Deserialize, Serialize};

use crate::gpu::DeviceInfo;
use crate::gpu::kernel::KernelAttrs;
use crate::gpu::kernel_source::SourceOverride;
use crate::measure::bench::Timing;
use crate::measure::check::CheckReport;
use crate::measure::peers::PeerFigure;

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
    /// Floating-point operations of one run, for compute-bound days (matmul: 2mnk). When
    /// present the table shows TFLOP/s instead of GB/s.
    #[serde(default)]
    pub flops_per_run: Option<u64>,
    /// The row every other is compared with as a ceiling (`cublas` on the matmul days): the
    /// table's "% `<ceiling>`" column. Without it, rows are compared with the copy ceiling.
    #[serde(default)]
    pub ceiling: Option<String>,
    /// The row the speedup column divides by (the first of the day's own versions run).
    pub baseline: Option<String>,
    pub rows: Vec<Row>,
    /// Versions that did not run on this problem, and why (a size they cannot take, a GPU
    /// without what they need): listed under the table, never counted as run.
    #[serde(default)]
    pub refused: Vec<RefusedVersion>,
    /// What the peers (PyTorch, ...) measured on the same problem in the same run.
    #[serde(default)]
    pub peers: Vec<PeerFigure>,
    /// Set when the kernels were compiled from a checkout's files
    /// (`DAYS_OF_GPU_KERNEL_SOURCES`) rather than the binary's own: the folder and the files
    /// that differ from the committed ones. `cargo xtask report` refuses such a report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_sources: Option<SourceOverride>,
}

/// One kernel version: what it is, how it launched, whether it was right, how fast.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// The version name `--kernel` takes.
    pub version: String,
    /// The CUDA function.
    pub function: String,
    pub launch: String,
    /// Absent for library calls (cuBLAS), whose kernels we do not load ourselves.
    pub attrs: Option<KernelAttrs>,
    pub occupancy: Option<f64>,
    pub check: CheckReport,
    /// Absent when the check failed: a wrong kernel is not timed.
    pub timing: Option<Timing>,
    pub gb_per_s: Option<f64>,
    pub fraction_of_copy: Option<f64>,
    /// With `flops_per_run`: 10^12 floating-point operations per second.
    #[serde(default)]
    pub tflops: Option<f64>,
    /// With a `ceiling` row: this row's throughput over the ceiling's.
    #[serde(default)]
    pub fraction_of_ceiling: Option<f64>,
    /// Bytes the version asks of global memory per run, as its tiling implies.
    #[serde(default)]
    pub global_bytes: Option<u64>,
    pub speedup_vs_baseline: Option<f64>,
}

/// A version that refused the problem.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RefusedVersion {
    pub version: String,
    pub why: String,
}

impl DayReport {
    /// At least one version ran, and every version that ran passed its check: a problem on
    /// which nothing ran is not a pass.
    pub fn passed(&self) -> bool {
        !self.rows.is_empty() && self.rows.iter().all(|r| r.check.passed())
    }

    /// One line per refused version, for under the table (empty when none).
    pub fn refused_lines(&self) -> String {
        self.refused
            .iter()
            .map(|r| format!("{}: not run ({})\n", r.version, r.why))
            .collect()
    }

    /// The fastest of the day's own versions (not the ceiling) that passed its check.
    pub fn best(&self) -> Option<&Row> {
        self.rows
            .iter()
            .filter(|r| r.check.passed() && r.timing.is_some())
            .filter(|r| Some(&r.version) != self.ceiling.as_ref())
            .min_by(|a, b| {
                let ms = |r: &Row| r.timing.map_or(f64::INFINITY, |t| t.median_ms);
                ms(a).total_cmp(&ms(b))
            })
    }

    /// The ceiling row, when the day has one and it ran.
    pub fn ceiling_row(&self) -> Option<&Row> {
        let name = self.ceiling.as_ref()?;
        self.rows.iter().find(|r| &r.version == name)
    }

    /// Whether the table shows TFLOP/s (compute-bound days) rather than GB/s.
    pub fn is_compute_bound(&self) -> bool {
        self.flops_per_run.is_some()
    }

    /// The line above the table.
    pub fn heading(&self) -> String {
        let ceiling = match (&self.ceiling, self.ceiling_row().and_then(|r| r.tflops)) {
            (Some(name), Some(t)) => format!("{name} {t:.1} TFLOP/s"),
            // Compute-bound, before the ceiling row has run.
            (Some(name), None) => format!("against {name}"),
            (None, _) => format!("copy ceiling {:.0} GB/s", self.copy_ceiling_gbs),
        };
        let sources = self
            .kernel_sources
            .as_ref()
            .map_or(String::new(), |o| format!(" | {}", o.describe()));
        format!(
            "{} {} | {} | {} | {ceiling}{sources}",
            self.day,
            self.title,
            self.device.summary(),
            self.problem,
        )
    }

    /// The table for the terminal.
    pub fn console_table(&self) -> String {
        let mut table = self.table();
        table.load_preset(presets::UTF8_FULL_CONDENSED);
        format!("{}\n{table}\n{}", self.heading(), self.refused_lines())
            .trim_end()
            .to_string()
    }

    /// The same table in Markdown, for READMEs.
    pub fn markdown_table(&self) -> String {
        let mut table = self.table();
        table.load_preset(presets::ASCII_MARKDOWN);
        table.to_string()
    }

    /// The tables' throughput unit and its decimals: TFLOP/s for compute-bound days, GB/s else.
    fn unit(&self) -> (&'static str, usize) {
        if self.is_compute_bound() {
            ("TFLOP/s", 1)
        } else {
            ("GB/s", 0)
        }
    }

    /// The baseline row's median time, which the "vs" column divides by.
    fn baseline_ms(&self) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| Some(&r.version) == self.baseline.as_ref())
            .and_then(|r| r.timing)
            .map(|t| t.median_ms)
    }

    /// Throughput in the table's unit (TFLOP/s or GB/s) of a run of `ms`.
    fn throughput(&self, ms: f64) -> f64 {
        match self.flops_per_run {
            Some(flops) => flops as f64 / (ms * 1e-3) / 1e12,
            None => crate::measure::bench::gb_per_s(self.bytes_per_run, ms),
        }
    }

    /// What the "% ..." column divides by, in the table's unit.
    fn ceiling_throughput(&self) -> Option<f64> {
        match &self.ceiling {
            Some(_) => self
                .ceiling_row()
                .and_then(|r| r.timing)
                .map(|t| self.throughput(t.median_ms)),
            None => Some(self.copy_ceiling_gbs),
        }
    }

    fn table(&self) -> Table {
        let baseline = self.baseline.as_deref().unwrap_or("first");
        let (unit, digits) = self.unit();
        let of = self.ceiling.as_deref().unwrap_or("copy");
        let mut header = vec![
            "kernel".to_string(),
            "launch (grid x block)".to_string(),
            "regs".to_string(),
            "smem B".to_string(),
            "local B".to_string(),
            "occ".to_string(),
            "median ms".to_string(),
            "min ms".to_string(),
            unit.to_string(),
            format!("% {of}"),
            format!("vs {baseline}"),
            "max abs err".to_string(),
            "rel L2 err".to_string(),
            "check".to_string(),
        ];
        let intensity_columns = self.rows.iter().any(|r| r.global_bytes.is_some());
        if intensity_columns {
            // The roofline's view: FLOPs per byte asked of global memory, and those bytes per
            // second.
            header.splice(10..10, ["FLOP/B".to_string(), "global GB/s".to_string()]);
        }
        let mut table = Table::new();
        table.set_header(header);
        let ceiling = self.ceiling_throughput();
        let baseline_ms = self.baseline_ms();
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
        let percent = |v: f64| ceiling.map(|c| format!("{:.1}%", v / c * 100.0));
        let vs = |ms: f64| baseline_ms.map(|b| format!("{:.2}x", b / ms));
        for row in &self.rows {
            let timing = row.timing.as_ref();
            let attr = |f: fn(&KernelAttrs) -> u32| row.attrs.as_ref().map(|a| f(a).to_string());
            let speed = timing.map(|t| self.throughput(t.median_ms));
            let mut cells = vec![
                Cell::new(&row.version),
                Cell::new(&row.launch),
                right(opt(attr(|a| a.registers))),
                right(opt(attr(|a| a.static_shared_bytes))),
                right(opt(attr(|a| a.local_bytes))),
                right(opt(row.occupancy.map(|o| format!("{:.0}%", o * 100.0)))),
                right(opt(timing.map(|t| format!("{:.4}", t.median_ms)))),
                right(opt(timing.map(|t| format!("{:.4}", t.min_ms)))),
                right(opt(speed.map(|s| format!("{s:.digits$}")))),
                right(opt(speed.and_then(percent))),
                right(opt(timing.and_then(|t| vs(t.median_ms)))),
                right(format!("{:.1e}", row.check.max_abs_err)),
                right(format!("{:.1e}", row.check.rel_l2_err)),
                Cell::new(if row.check.passed() { "ok" } else { "FAIL" }),
            ];
            if intensity_columns {
                let flops = self.flops_per_run.unwrap_or(0) as f64;
                let global = row.global_bytes.map(|b| b as f64);
                cells.splice(
                    10..10,
                    [
                        right(opt(global.map(|b| format!("{:.1}", flops / b)))),
                        right(opt(global.zip(timing).map(|(b, t)| {
                            format!("{:.0}", b / (t.median_ms * 1e-3) / 1e9)
                        }))),
                    ],
                );
            }
            table.add_row(cells);
        }
        for peer in &self.peers {
            let dash = || Cell::new("");
            let speed = self.throughput(peer.median_ms);
            let mut cells = vec![
                Cell::new(format!("{} (peer)", peer.peer)),
                dash(),
                dash(),
                dash(),
                dash(),
                dash(),
                right(format!("{:.4}", peer.median_ms)),
                dash(),
                right(format!("{speed:.digits$}")),
                right(opt(percent(speed))),
                right(opt(vs(peer.median_ms))),
                dash(),
                dash(),
                dash(),
            ];
            if intensity_columns {
                cells.splice(10..10, [dash(), dash()]);
            }
            table.add_row(cells);
        }
        table
    }
}

fn right(s: String) -> Cell {
    Cell::new(s).set_alignment(CellAlignment::Right)
}

//! What the softmax days share: the problem (shapes, keys, bytes), their flags, the runner that
//! checks and times a day's versions on each problem or sweeps them over row lengths, and the
//! GPU test every softmax day runs.
//!
//! A day implements [`SoftmaxDay`] (its versions, and how each launches on a shape) and its
//! `main` is `common::softmax::main::<DayNN>()`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use cudarc::driver::CudaSlice;
use half::{bf16, f16};
use indicatif::ProgressBar;

use crate::cli::{CommonArgs, bytes_for, check_host_fits, family_main, finish_reports};
use crate::dtype::Dtype;
use crate::element::Element;
use crate::family::runner::{day_problem, open_gpu_for, progress_bar, rows_cols};
use crate::gpu::Gpu;
use crate::gpu::kernel::{Kernel, LaunchShape};
use crate::measure::check::{self, Tolerance};
use crate::measure::plot::{HLine, LinePlot};
use crate::measure::report::DayReport;
use crate::measure::{inputs, sweep};
use crate::session::{Expected, Session, Version, launch_and_read};
use crate::{reference, sizes, testing};

/// The key peers and reports share: `softmax/f32/32768x4096`.
pub fn key(dtype: Dtype, rows: usize, cols: usize) -> String {
    format!("softmax/{}/{rows}x{cols}", dtype.name())
}

/// One softmax problem: `rows` softmaxes of `cols` elements of `dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub rows: usize,
    pub cols: usize,
    pub dtype: Dtype,
}

impl Shape {
    pub const fn new(rows: usize, cols: usize, dtype: Dtype) -> Self {
        Self { rows, cols, dtype }
    }

    pub fn describe(&self) -> String {
        format!("{} x {}, {}", self.rows, self.cols, self.dtype)
    }
}

/// Elements in every sweep problem: 2^26 (256 MiB of f32 in, as much out, far above L2).
pub const SWEEP_ELEMENTS: usize = 1 << 26;

/// The sweep: rows of 128, 256, ..., 1048576 columns, 2^26 elements each.
pub fn sweep_shapes(dtype: Dtype) -> Vec<Shape> {
    (7..=20)
        .map(|log2| Shape::new(SWEEP_ELEMENTS >> log2, 1 << log2, dtype))
        .collect()
}

/// The flags of the softmax days, beside the common ones.
#[derive(clap::Args, Debug, Clone)]
pub struct SoftmaxArgs {
    #[command(flatten)]
    pub problem: crate::family::runner::RowsArgs,
    /// Run every version on rows of 128 to 1M columns (2^26 elements each) and plot GB/s.
    #[arg(long, conflicts_with_all = ["rows", "cols"])]
    pub sweep: bool,
    /// Where --sweep writes its SVG plot.
    #[arg(long, value_name = "FILE", default_value = "sweep.svg")]
    pub plot: PathBuf,
}

pub use crate::session::Refused;

/// What a version is planned for: `rows` softmaxes of `cols` elements each, on `gpu`.
#[derive(Clone, Copy)]
pub struct Rows<'a> {
    pub gpu: &'a Gpu,
    pub rows: usize,
    pub cols: usize,
}

/// Enqueues one softmax of the input into the output.
pub type Launch<'a, T> = Box<dyn FnMut(&CudaSlice<T>, &mut CudaSlice<T>) -> Result<()> + 'a>;

/// How one version runs on one shape.
pub struct Plan<'a, T: Element> {
    /// The kernel whose attributes the table shows (the main one, if there are several).
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    /// From the version's summation order: see [`reference::softmax::tolerance_for`].
    pub tolerance: Tolerance,
    pub launch: Launch<'a, T>,
}

/// A softmax day: its versions and how each launches.
pub trait SoftmaxDay: Sized {
    /// Package name, `day05`.
    const DAY: &'static str;
    const TITLE: &'static str;
    /// Version names (`--kernel`), in table order; yesterday's best first.
    const VERSIONS: &'static [&'static str];
    /// What `cargo run -p dayNN` runs without --rows/--cols.
    const DEFAULT_PROBLEMS: &'static [Shape];
    /// The storage types the day's kernels take.
    const DTYPES: &'static [Dtype];
    /// Versions that take f32 only (yesterday's f32 kernel in a table of several dtypes,
    /// refused with [`f32_only`]): they run no other dtype's problems, and the GPU test
    /// lets them refuse every shape of the other dtypes. Every other version must run every
    /// dtype of [`Self::DTYPES`].
    const F32_ONLY: &'static [&'static str] = &[];

    fn load(gpu: &Gpu) -> Result<Self>;

    /// How `version` runs on `on`'s rows of `T`, or an error: [`Refused`] for a shape it does
    /// not take, anything else for a real failure.
    fn plan<'a, T: Element>(&'a self, version: &str, on: Rows<'a>) -> Result<Plan<'a, T>>;
}

/// The whole `main` of a softmax day.
pub fn main<D: SoftmaxDay>() -> ExitCode {
    family_main(D::DAY, D::TITLE, D::VERSIONS, run::<D>)
}

fn run<D: SoftmaxDay>(family: &SoftmaxArgs, common: &CommonArgs) -> Result<()> {
    let versions = common.select_versions(D::VERSIONS)?;
    let shapes = problems::<D>(family, &versions)?;
    // Every size is checked here, before the GPU is opened: the device bytes of each shape.
    let mut device_bytes = Vec::with_capacity(shapes.len());
    for shape in &shapes {
        let what = "--rows x --cols";
        let elements = sizes::product(what, &[shape.rows, shape.cols])? as u64;
        // Input and output on the host, the f64 reference.
        let host = bytes_for(what, elements, 2 * shape.dtype.size() as u64 + 8)?;
        check_host_fits(&shape.describe(), host)?;
        let device = bytes_for(what, elements, 2 * shape.dtype.size() as u64)?;
        device_bytes.push((shape.describe(), device));
    }
    let gpu = open_gpu_for(common, &device_bytes)?;
    let day = D::load(&gpu)?;
    let quiet = family.sweep;
    let progress = progress_bar(quiet, shapes.len() * versions.len());
    let run = Run {
        gpu: &gpu,
        common,
        day: &day,
        versions: &versions,
        quiet,
        progress: &progress,
    };
    let mut reports = Vec::new();
    for shape in &shapes {
        reports.push(match shape.dtype {
            Dtype::F32 => run.problem::<f32>(shape)?,
            Dtype::F16 => run.problem::<f16>(shape)?,
            Dtype::Bf16 => run.problem::<bf16>(shape)?,
            integer => unreachable!("softmax takes float dtypes only, not {integer}"),
        });
    }
    progress.finish_and_clear();
    if family.sweep {
        run.plot_sweep(family, &shapes, &reports)?;
    }
    finish_reports(common, &reports)
}

/// The shapes to run: the sweep, the one given, or the day's defaults (in `--dtype` if given),
/// less those no selected version takes (an f32-only baseline on its own runs no f16 problem).
/// A dtype the day has no kernels for, or a `--kernel` choice that leaves nothing to run, is
/// refused here, before the GPU is opened.
fn problems<D: SoftmaxDay>(args: &SoftmaxArgs, versions: &[&str]) -> Result<Vec<Shape>> {
    let names = |dtypes: &[Dtype]| {
        dtypes
            .iter()
            .map(|d| d.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(dtype) = args.problem.dtype
        && !D::DTYPES.contains(&dtype)
    {
        return Err(crate::UsageError::new(format!(
            "{} has no {dtype} kernels; it takes: {}",
            D::DAY,
            names(D::DTYPES)
        ))
        .into());
    }
    let takes = |dtype: Dtype| {
        versions
            .iter()
            .any(|v| dtype == Dtype::F32 || !D::F32_ONLY.contains(v))
    };
    if let Some(dtype) = args.problem.dtype
        && !takes(dtype)
    {
        return Err(crate::UsageError::new(format!(
            "--kernel {} takes f32 only, not {dtype}",
            versions.join(",")
        ))
        .into());
    }
    if args.sweep {
        return Ok(sweep_shapes(args.problem.dtype.unwrap_or(Dtype::F32)));
    }
    if let (Some(rows), Some(cols)) = (args.problem.rows, args.problem.cols) {
        let (rows, cols) = rows_cols(rows, cols)?;
        return Ok(vec![Shape::new(
            rows,
            cols,
            args.problem.dtype.unwrap_or(Dtype::F32),
        )]);
    }
    let mut shapes: Vec<Shape> = D::DEFAULT_PROBLEMS.to_vec();
    if let Some(dtype) = args.problem.dtype {
        shapes.iter_mut().for_each(|s| s.dtype = dtype);
        shapes.dedup();
    }
    shapes.retain(|s| takes(s.dtype));
    if shapes.is_empty() {
        return Err(crate::UsageError::new(format!(
            "--kernel {} takes none of {}'s default problems; give --dtype f32",
            versions.join(","),
            D::DAY
        ))
        .into());
    }
    Ok(shapes)
}

/// One day's run over its problems.
struct Run<'r, D> {
    gpu: &'r Gpu,
    common: &'r CommonArgs,
    day: &'r D,
    versions: &'r [&'static str],
    quiet: bool,
    progress: &'r ProgressBar,
}

impl<D: SoftmaxDay> Run<'_, D> {
    /// Checks and times every version on one shape.
    fn problem<T: Element>(&self, shape: &Shape) -> Result<DayReport> {
        let (rows, cols) = (shape.rows, shape.cols);
        let x: Vec<T> = inputs::logits(rows * cols, self.common.seed);
        let reference = reference::softmax::softmax_rows(&x, rows, cols);
        let problem = day_problem(
            D::DAY,
            D::TITLE,
            shape.describe(),
            key(shape.dtype, rows, cols),
            (rows * cols * shape.dtype.size() * 2) as u64,
        );
        let mut session = Session::new(self.gpu, self.common, problem)?;
        if self.quiet {
            session = session.quiet();
        }
        session.save_input("x", &[rows, cols], &x)?;
        let x_dev = self.gpu.upload(&x)?;
        drop(x);
        let mut out = self.gpu.alloc_poisoned::<T>(rows * cols)?;
        let (problem, out_shape) = (shape.describe(), [rows, cols]);
        let gpu = self.gpu;
        for &name in self.versions {
            self.progress.set_message(format!("{name} on {problem}"));
            let plan = self.day.plan::<T>(name, Rows { gpu, rows, cols });
            let plan = session
                .plan_or_skip(name, plan)
                .with_context(|| format!("planning `{name}` on {problem}"))?;
            if let Some(mut plan) = plan {
                let expected = Expected::full(&reference, &out_shape, plan.tolerance);
                let version = Version {
                    name,
                    kernel: Some((plan.kernel, plan.shape)),
                    global_bytes: None,
                };
                let launch = &mut plan.launch;
                session.run_version(version, &mut out, &expected, |out| launch(&x_dev, out))?;
            }
            self.progress.inc(1);
        }
        session.save_reference(&[rows, cols], &reference)?;
        Ok(session.finish())
    }

    /// The sweep's plot (GB/s against columns, one line per version, the peers and the copy
    /// ceiling) and a summary table on stdout.
    fn plot_sweep(
        &self,
        family: &SoftmaxArgs,
        shapes: &[Shape],
        reports: &[DayReport],
    ) -> Result<()> {
        let (gpu, versions) = (self.gpu, self.versions);
        let cols_of = sweep::x_by_report(reports, shapes.iter().map(|s| s.cols as f64));
        let mut series =
            sweep::version_series(reports, versions.iter().copied(), &cols_of, |row| {
                row.gb_per_s
            });
        series.extend(sweep::peer_series(reports, "", &cols_of, |_, f| {
            Some(f.gb_per_s)
        }));
        let ceiling = gpu.copy_ceiling_gbs()?;
        let dtype = family.problem.dtype.unwrap_or(Dtype::F32);
        let what = format!("{dtype}, 2^26 elements per point");
        let title = sweep::plot_title(D::DAY, D::TITLE, &what, &gpu.info.name);
        let line_plot = LinePlot {
            title: &title,
            x_label: "columns per row",
            y_label: "GB/s (input read once + output written once)",
            log2_x: true,
            series: &series,
            hlines: &[HLine {
                name: format!("device copy {ceiling:.0} GB/s"),
                y: ceiling,
            }],
        };
        sweep::publish(&family.plot, &line_plot, "columns", "GB/s", 0)
    }
}

impl<'a, T: Element> Plan<'a, T> {
    /// A plan whose launch first checks that its buffers hold `on`'s rows x cols, so a
    /// launcher's kernel only ever sees buffers of the shape it was planned for.
    pub fn new(
        kernel: &'a Kernel,
        shape: LaunchShape,
        tolerance: Tolerance,
        on: Rows<'a>,
        mut launch: impl FnMut(&CudaSlice<T>, &mut CudaSlice<T>) -> Result<()> + 'a,
    ) -> Self {
        let Rows { rows, cols, .. } = on;
        Self {
            kernel,
            shape,
            tolerance,
            launch: Box::new(move |x, out| {
                check_sizes(x.len(), out.len(), rows, cols)?;
                launch(x, out)
            }),
        }
    }
}

/// Refuses every `T` but f32, for a version built for f32 alone (yesterday's kernel in a table
/// of several dtypes, listed in [`SoftmaxDay::F32_ONLY`]).
pub fn f32_only<T: Element>() -> Result<()> {
    if T::DTYPE != Dtype::F32 {
        return Err(Refused(format!("f32 only, not {}", T::NAME)).into());
    }
    Ok(())
}

crate::kernel_args! {
    /// A kernel over every row: `(const T* x, T* y, index_t rows, index_t cols)`.
    fn rows_kernel<T>(x: &CudaSlice<T>, out: &mut CudaSlice<T>, rows: u64, cols: u64);
    /// A block-per-row kernel: `(const T* x, T* y, index_t cols)`.
    fn block_per_row<T>(x: &CudaSlice<T>, out: &mut CudaSlice<T>, cols: u64);
    /// A split-row summary: `stats(const T* x, MaxSum* partials, index_t cols, index_t chunk)`.
    fn split_stats<T>(x: &CudaSlice<T>, partials: &mut CudaSlice<f32>, cols: u64, chunk: u64);
    /// A split-row merge: `write(const T* x, T* y, const MaxSum* partials, index_t cols,
    /// index_t chunk)`.
    fn split_write<T>(
        x: &CudaSlice<T>,
        out: &mut CudaSlice<T>,
        partials: &CudaSlice<f32>,
        cols: u64,
        chunk: u64,
    );
}

/// A version that is one kernel `(const T* x, T* y, index_t rows, index_t cols)` on `shape`,
/// which reads and writes only the rows it is given (day 1's thread per row, the warp per row
/// of days 2 and 3, day 5's register tiers): the kernel, its launch shape and its tolerance
/// are the day's.
pub fn plan_rows<'a, T: Element>(
    kernel: &'a Kernel,
    shape: LaunchShape,
    tolerance: Tolerance,
    on: Rows<'a>,
) -> Plan<'a, T> {
    let Rows { gpu, rows, cols } = on;
    Plan::new(kernel, shape, tolerance, on, move |x, out| {
        // SAFETY: the kernel takes (const T*, T*, index_t rows, index_t cols) and touches only
        // rows below `rows`, as this function's contract says; x and out hold rows x cols
        // values (the plan checks).
        unsafe { rows_kernel(gpu, kernel, &shape, x, out, rows as u64, cols as u64) }
    })
}

/// A version that is one kernel `(const T* x, T* y, index_t cols)` run with a block of
/// `threads` per row (day 4's `block`, `block_online`, day 5's `vec_online`).
pub fn plan_block_per_row<'a, T: Element>(
    kernel: &'a Kernel,
    on: Rows<'a>,
    threads: u32,
    tolerance: Tolerance,
) -> Result<Plan<'a, T>> {
    let Rows { gpu, rows, cols } = on;
    if rows > i32::MAX as usize {
        return Err(Refused(format!("{rows} rows exceed the grid's 2^31 - 1 blocks")).into());
    }
    let shape = LaunchShape::linear(rows as u32, threads);
    Ok(Plan::new(kernel, shape, tolerance, on, move |x, out| {
        // SAFETY: the kernel takes (const T*, T*, index_t cols), as this function's contract
        // says, and gets one block per row of a rows x cols buffer (the plan checks both).
        unsafe { block_per_row(gpu, kernel, &shape, x, out, cols as u64) }
    }))
}

/// A version that splits rows into chunks (see [`split_chunks`]): `stats(const T* x,
/// MaxSum* partials, index_t cols, index_t chunk)` writes a (max, sum) per chunk, then
/// `write(const T* x, T* y, const MaxSum* partials, index_t cols, index_t chunk)` merges each
/// row's and writes; both on a grid of (chunks, rows) blocks of `threads`.
pub fn plan_split_rows<'a, T: Element>(
    stats: &'a Kernel,
    write: &'a Kernel,
    on: Rows<'a>,
    threads: u32,
    target_blocks: usize,
    align: usize,
) -> Result<Plan<'a, T>> {
    let Rows { gpu, rows, cols } = on;
    if rows > 65535 {
        return Err(Refused(format!("{rows} rows exceed the grid's 65535 in y")).into());
    }
    let (chunks, chunk) = split_chunks(rows, cols, target_blocks, align);
    let shape = LaunchShape {
        grid: (chunks as u32, rows as u32, 1),
        block: (threads, 1, 1),
        dynamic_shared_bytes: 0,
    };
    // One (max, sum) pair of f32 per chunk.
    let mut partials = gpu.stream.alloc_zeros::<f32>(2 * rows * chunks)?;
    // A thread adds its share of a chunk with up to one rescale per element; the merge adds
    // one term per chunk.
    let terms = 2 * chunk.div_ceil(threads as usize) + chunks + 16;
    let tolerance = reference::softmax::tolerance_for::<T>(terms);
    Ok(Plan::new(stats, shape, tolerance, on, move |x, out| {
        let (cols, chunk) = (cols as u64, chunk as u64);
        // SAFETY: `stats` takes (const T*, MaxSum*, cols, chunk) by this function's contract;
        // `partials` holds a (max, sum) pair for each of its blocks.
        unsafe { split_stats(gpu, stats, &shape, x, &mut partials, cols, chunk) }?;
        // SAFETY: `write` takes (const T*, T*, const MaxSum*, cols, chunk) on the same grid;
        // the stream runs it after the stats kernel.
        unsafe { split_write(gpu, write, &shape, x, out, &partials, cols, chunk) }
    }))
}

/// Checks the buffers of a softmax launch: non-empty, `rows x cols`, input and output alike.
pub fn check_sizes(x_len: usize, out_len: usize, rows: usize, cols: usize) -> Result<()> {
    if rows == 0 || cols == 0 {
        anyhow::bail!("softmax: {rows} x {cols} is empty; rows and columns must be at least 1");
    }
    if rows.checked_mul(cols) != Some(x_len) || out_len != x_len {
        anyhow::bail!(
            "softmax: input of {x_len} and output of {out_len} elements do not hold {rows} x {cols}"
        );
    }
    Ok(())
}

/// How split-row kernels cut a row: about `target_blocks` blocks in all (a few per SM), so a
/// few long rows still fill the GPU; no more chunks than the row has 4096-element pieces, so each block has real
/// work; at most 1024
/// per row (the merge reads them all); each a multiple of `align` (the vector width).
/// Returns (chunks per row, elements per chunk).
pub fn split_chunks(
    rows: usize,
    cols: usize,
    target_blocks: usize,
    align: usize,
) -> (usize, usize) {
    let wanted = target_blocks.div_ceil(rows.max(1));
    let chunks = wanted.clamp(1, cols.div_ceil(4096).clamp(1, 1024));
    let chunk = cols.div_ceil(chunks).next_multiple_of(align);
    (cols.div_ceil(chunk), chunk)
}

/// Shapes of the GPU tests: one row, one column, widths no vector width or block divides,
/// more rows than a block, long rows, a few rows long enough to be split, and a matrix larger
/// than L2.
pub const TEST_SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (1, 4097),
    (3, 1000),
    (257, 17),
    (1000, 1),
    (65, 2048),
    (33, 4099),
    (4096, 128),
    (130, 4096),
    (5, 33_001),
    (2, 262_147),
    // A few long rows of whole packs, as day 5's on-chip versions take them: 5 and 33 blocks
    // a row with an uneven last chunk, and the 8 x 1M problem itself.
    (7, 40_000),
    (2, 262_148),
    (8, 1 << 20),
    // 36 MiB of f32, more than L2: many chunks per row, and more blocks than rows.
    (9, 1 << 20),
];

/// The GPU test of a softmax day: every version, every dtype it takes, every test shape it
/// does not refuse, against the reference; rows 1 of each matrix has every third entry at
/// -inf and the last row (when there are 3 or more) is all -inf, defined as zeros.
///
/// A version must run on at least 3 test shapes of every dtype, except that one of
/// [`SoftmaxDay::F32_ONLY`] runs only f32: a version that refused every shape (a planning
/// mistake, a name the plan does not know) fails instead of passing unchecked.
pub fn test_every_version<D: SoftmaxDay>() {
    let Some(gpu) = testing::gpu_or_skip(&format!("{} GPU correctness", D::DAY)) else {
        return;
    };
    assert!(!D::VERSIONS.is_empty() && !D::DTYPES.is_empty());
    let day = D::load(&gpu).expect("kernels load");
    for &dtype in D::DTYPES {
        let outcomes = match dtype {
            Dtype::F32 => test_versions::<f32, D>(&gpu, &day),
            Dtype::F16 => test_versions::<f16, D>(&gpu, &day),
            Dtype::Bf16 => test_versions::<bf16, D>(&gpu, &day),
            integer => panic!("{}: softmax has no {integer} version", D::DAY),
        };
        for (&version, (ran, refusals)) in D::VERSIONS.iter().zip(outcomes) {
            if dtype != Dtype::F32 && D::F32_ONLY.contains(&version) {
                assert_eq!(ran, 0, "{version} is f32-only but ran on {dtype}");
                continue;
            }
            assert!(
                ran >= 3,
                "{} {version} {dtype}: ran on only {ran} of {} test shapes; refused: {}",
                D::DAY,
                TEST_SHAPES.len(),
                refusals.join("; ")
            );
        }
    }
}

/// Runs every version on every test shape it takes, the input and its reference made once
/// per shape for all of them: per version (in [`SoftmaxDay::VERSIONS`]' order), how many
/// shapes it ran, and why it refused the rest.
fn test_versions<T: Element, D: SoftmaxDay>(gpu: &Gpu, day: &D) -> Vec<(usize, Vec<String>)> {
    let mut outcomes = vec![(0, Vec::new()); D::VERSIONS.len()];
    for (i, &(rows, cols)) in TEST_SHAPES.iter().enumerate() {
        let mut x: Vec<T> = inputs::logits(rows * cols, i as u64);
        if rows >= 2 {
            for c in (0..cols).step_by(3) {
                x[cols + c] = T::from_f64(f64::NEG_INFINITY);
            }
        }
        if rows >= 3 {
            x[(rows - 1) * cols..].fill(T::from_f64(f64::NEG_INFINITY));
        }
        // Made when the first version takes the shape.
        let mut reference = None;
        let mut out = gpu.alloc_poisoned::<T>(rows * cols).expect("alloc");
        for (&version, (ran, refusals)) in D::VERSIONS.iter().zip(outcomes.iter_mut()) {
            let plan = match day.plan::<T>(version, Rows { gpu, rows, cols }) {
                Ok(plan) => plan,
                Err(e) if e.is::<Refused>() => {
                    refusals.push(format!("{rows}x{cols}: {e}"));
                    continue;
                }
                Err(e) => panic!("{version} {} {rows}x{cols}: {e:#}", T::NAME),
            };
            let (expected, x_dev) = reference.get_or_insert_with(|| {
                (
                    reference::softmax::softmax_rows(&x, rows, cols),
                    gpu.upload(&x).expect("upload"),
                )
            });
            let mut launch = plan.launch;
            let got = launch_and_read(gpu, &mut out, &mut |out| launch(x_dev, out))
                .unwrap_or_else(|e| panic!("{version} {} {rows}x{cols}: {e:#}", T::NAME));
            let report = check::compare(&got, expected, &[rows, cols], plan.tolerance);
            assert!(
                report.passed(),
                "{version} {} {rows} x {cols}: {report}",
                T::NAME
            );
            *ran += 1;
        }
    }
    outcomes
}

/// Requests every softmax day refuses before opening a GPU, with exit 2 and one `error:`
/// line saying this: `(arguments, what the error must say)`. Each day's `tests/cli.rs`
/// runs them (`testing::assert_all_refused`) beside `runner::ROWS_REFUSED` and what only that
/// day refuses.
pub const REFUSED_REQUESTS: &[(&str, &str)] = &[
    ("--rows -3 --cols 4", "unexpected argument '-3'"),
    ("--rows 4x --cols 4", "invalid value '4x'"),
    ("--sweep --rows 4 --cols 4", "cannot be used with"),
    (
        "--rows 4 --cols 4 --kernel nope",
        "there is no kernel `nope` here",
    ),
    (
        "--rows 4 --cols 4 --iters 0",
        "'--iters <ITERS>': must be at least 1",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_covers_128_to_1m_columns_at_a_fixed_size() {
        let shapes = sweep_shapes(Dtype::F32);
        assert_eq!(shapes.len(), 14);
        assert_eq!((shapes[0].rows, shapes[0].cols), (1 << 19, 128));
        assert_eq!((shapes[13].rows, shapes[13].cols), (64, 1 << 20));
        assert!(shapes.iter().all(|s| s.rows * s.cols == SWEEP_ELEMENTS));
    }

    #[test]
    fn split_chunks_fill_the_gpu_and_cover_the_row() {
        let (chunks, chunk) = split_chunks(8, 1 << 20, 4 * 132, 4);
        assert_eq!(chunks, 66);
        assert_eq!(chunk % 4, 0);
        assert!(chunks * chunk >= 1 << 20 && (chunks - 1) * chunk < 1 << 20);
        // Many rows: one chunk each.
        assert_eq!(split_chunks(32768, 4096, 4 * 132, 4), (1, 4096));
        // Short rows are not cut below 4096.
        assert_eq!(split_chunks(2, 5000, 4 * 132, 8).0, 2);
        assert_eq!(split_chunks(1, 1, 4 * 132, 8), (1, 8));
    }

    #[test]
    fn sizes_are_checked() {
        assert!(check_sizes(12, 12, 3, 4).is_ok());
        assert!(check_sizes(12, 12, 4, 4).is_err());
        assert!(check_sizes(12, 11, 3, 4).is_err());
        assert!(check_sizes(0, 0, 0, 4).is_err());
    }

    #[test]
    fn keys_name_dtype_and_shape() {
        assert_eq!(key(Dtype::Bf16, 32768, 4096), "softmax/bf16/32768x4096");
    }
}

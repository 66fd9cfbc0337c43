//! What the normalization days share (day11 RMSNorm, day12 LayerNorm): the problems (forward
//! and backward, keys, bytes), their flags, the runner that checks and times a day's versions,
//! the check of a backward output made of parts (dx, then dweight, then dbias), and the GPU
//! test every normalization day runs.
//!
//! A day implements [`NormDay`] and its `main` is `common::norm::main::<DayNN>()`.
//!
//! Buffers: the forward reads `x` (`rows x cols`), `weight` (and LayerNorm's `bias`,
//! `cols` each) and writes `y`. The backward reads `x`, `weight` and `dy` and writes one
//! buffer holding `dx` (`rows x cols`), then `dweight` (`cols`), then LayerNorm's `dbias`
//! (`cols`): the table's check covers all of it, each part against its own tolerance.

use std::process::ExitCode;

use anyhow::Result;
use cudarc::driver::CudaSlice;
use half::{bf16, f16};

pub use crate::reference::norm::Kind;
pub use crate::session::Refused;

use crate::check::{self, CheckReport, Tolerance};
use crate::cli::{CommonArgs, bytes_for, check_host_fits, family_main, finish_reports};
use crate::dtype::Dtype;
use crate::element::Element;
use crate::gpu::Gpu;
use crate::kernel::{Kernel, LaunchShape};
use crate::reference::norm::{self as reference, Forward, Gradients};
use crate::report::DayReport;
use crate::session::{Expected, Problem, Session, Version, launch_and_read};
use crate::{inputs, sizes, testing};

/// Forward or backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pass {
    Forward,
    Backward,
}

/// One problem: `rows` normalizations of `cols` elements of `dtype`, one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub pass: Pass,
    pub rows: usize,
    pub cols: usize,
    pub dtype: Dtype,
}

impl Shape {
    pub const fn new(pass: Pass, rows: usize, cols: usize, dtype: Dtype) -> Self {
        Self {
            pass,
            rows,
            cols,
            dtype,
        }
    }

    pub fn describe(&self) -> String {
        let pass = match self.pass {
            Pass::Forward => "forward",
            Pass::Backward => "backward",
        };
        format!("{pass}, {} x {}, {}", self.rows, self.cols, self.dtype)
    }

    fn elements(&self) -> usize {
        self.rows * self.cols
    }
}

/// `rmsnorm`, `layernorm`.
pub fn op_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Rms => "rmsnorm",
        Kind::Layer => "layernorm",
    }
}

/// The key peers and reports share: `rmsnorm/bf16/16384x4096`, `rmsnorm_bwd/bf16/16384x4096`.
pub fn key(kind: Kind, shape: &Shape) -> String {
    let suffix = match shape.pass {
        Pass::Forward => "",
        Pass::Backward => "_bwd",
    };
    format!(
        "{}{suffix}/{}/{}x{}",
        op_name(kind),
        shape.dtype.name(),
        shape.rows,
        shape.cols
    )
}

/// Weight-like vectors of `cols` the op has: the weight, and LayerNorm's bias.
fn params(kind: Kind) -> usize {
    match kind {
        Kind::Rms => 1,
        Kind::Layer => 2,
    }
}

/// Elements of the backward's output: dx, then one gradient per parameter vector.
pub fn backward_len(kind: Kind, rows: usize, cols: usize) -> usize {
    (rows + params(kind)) * cols
}

/// Least traffic of one run. Forward: x read, y written, the parameters read. Backward: x and
/// dy read, dx written, the weight read, a gradient per parameter written (the per-row
/// statistics are recomputed from x, not read; the column sums' partials stay in L2 and are
/// not counted). `peers/norm.py` counts the same bytes for torch.
pub fn bytes_per_run(kind: Kind, shape: &Shape) -> u64 {
    let (n, c) = (shape.elements() as u64, shape.cols as u64);
    let p = params(kind) as u64;
    let elements = match shape.pass {
        Pass::Forward => 2 * n + p * c,
        Pass::Backward => 3 * n + (1 + p) * c,
    };
    elements * shape.dtype.size() as u64
}

/// The inputs of one launch; `bias` only for the LayerNorm forward, `dy` only for backward.
pub struct Inputs<T> {
    pub x: CudaSlice<T>,
    pub weight: CudaSlice<T>,
    pub bias: Option<CudaSlice<T>>,
    pub dy: Option<CudaSlice<T>>,
}

impl<T> Inputs<T> {
    /// The bias, which a LayerNorm forward needs.
    pub fn bias(&self) -> Result<&CudaSlice<T>> {
        self.bias
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("this launch needs a bias"))
    }

    /// The upstream gradient, which a backward needs.
    pub fn dy(&self) -> Result<&CudaSlice<T>> {
        self.dy
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("a backward launch needs dy"))
    }
}

/// Enqueues one run: the forward's `y`, or the backward's dx | dweight [| dbias].
pub type Launch<'a, T> = Box<dyn FnMut(&Inputs<T>, &mut CudaSlice<T>) -> Result<()> + 'a>;

/// How one version runs on one shape.
pub struct Plan<'a, T: Element> {
    /// The kernel whose attributes the table shows (the main one, if there are several).
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    /// Longest chain of sequential f32 additions in a row's statistics (a thread's share plus
    /// the tree): sets the tolerance, see `reference::norm`.
    pub row_terms: usize,
    /// Longest chain in a column sum of the backward (0 for the forward).
    pub col_terms: usize,
    pub launch: Launch<'a, T>,
}

/// A normalization day: its versions and how each launches.
pub trait NormDay: Sized {
    /// Package name, `day11`.
    const DAY: &'static str;
    const TITLE: &'static str;
    const KIND: Kind;
    /// Version names (`--kernel`), in table order, of each pass.
    const FORWARD_VERSIONS: &'static [&'static str];
    const BACKWARD_VERSIONS: &'static [&'static str];
    /// What `cargo run -p dayNN` runs without --rows/--cols.
    const DEFAULT_PROBLEMS: &'static [Shape];
    /// `--eps` when not given.
    const DEFAULT_EPS: f64;

    fn load(gpu: &Gpu) -> Result<Self>;

    /// How `version` runs on `rows x cols` of `T` with this `eps`, or an error: [`Refused`]
    /// for a shape it does not take, anything else for a real failure.
    fn plan<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        version: &str,
        rows: usize,
        cols: usize,
        eps: f32,
    ) -> Result<Plan<'a, T>>;
}

fn versions_of<D: NormDay>(pass: Pass) -> &'static [&'static str] {
    match pass {
        Pass::Forward => D::FORWARD_VERSIONS,
        Pass::Backward => D::BACKWARD_VERSIONS,
    }
}

/// The flags of the normalization days, beside the common ones.
#[derive(clap::Args, Debug, Clone)]
pub struct NormArgs {
    /// Rows (one normalization each). With --cols, replaces the day's default problems.
    #[arg(long, requires = "cols", value_parser = clap::value_parser!(u64).range(1..))]
    pub rows: Option<u64>,
    /// Columns (the normalized width).
    #[arg(long, requires = "rows", value_parser = clap::value_parser!(u64).range(1..))]
    pub cols: Option<u64>,
    /// Storage type (math is f32 whatever it is); default: that of each default problem.
    #[arg(long, value_enum)]
    pub dtype: Option<Dtype>,
    /// Only this pass; both by default.
    #[arg(long, value_enum)]
    pub pass: Option<Pass>,
    /// Added to the mean square (variance) under the square root; default: the day's (1e-6
    /// for RMSNorm, 1e-5 for LayerNorm, as torch).
    #[arg(long)]
    pub eps: Option<f64>,
}

/// The whole `main` of a norm day.
pub fn main<D: NormDay>() -> ExitCode {
    family_main(D::DAY, D::TITLE, run::<D>)
}

fn run<D: NormDay>(family: &NormArgs, common: &CommonArgs) -> Result<()> {
    let all: Vec<&'static str> = [D::FORWARD_VERSIONS, D::BACKWARD_VERSIONS].concat();
    let versions = common.select_versions(&all)?;
    let eps = eps_of::<D>(family)?;
    let shapes: Vec<Shape> = problems::<D>(family)?
        .into_iter()
        .filter(|s| {
            versions_of::<D>(s.pass)
                .iter()
                .any(|v| versions.contains(v))
        })
        .collect();
    if shapes.is_empty() {
        // Only --pass and --kernel can empty the list: the versions chosen are all of the
        // other pass.
        let chosen = versions.join(",");
        let msg = match family.pass {
            Some(Pass::Forward) => format!("--kernel {chosen} has no version of the forward pass"),
            Some(Pass::Backward) => {
                format!("--kernel {chosen} has no version of the backward pass")
            }
            None => format!("--kernel {chosen} runs none of {}'s problems", D::DAY),
        };
        return Err(crate::UsageError::new(msg).into());
    }
    // Every size is checked here, before the GPU is opened.
    let mut device_bytes = Vec::with_capacity(shapes.len());
    for shape in &shapes {
        let what = "--rows x --cols";
        let elements = sizes::product(what, &[shape.rows, shape.cols])? as u64;
        // The backward's output holds dweight (and dbias) after dx.
        sizes::product(what, &[sizes::sum(what, &[shape.rows, 2])?, shape.cols])?;
        // Inputs and output in T, the reference (and its f64 copies of the inputs).
        let host = bytes_for(what, elements, 4 * shape.dtype.size() as u64 + 4 * 8)?;
        check_host_fits(&shape.describe(), host)?;
        // x, dy and the output, plus small vectors and partial sums.
        let device = bytes_for(what, elements, 3 * shape.dtype.size() as u64)?;
        device_bytes.push(device.saturating_add(64 << 20));
    }
    let gpu = common.open_gpu()?;
    for (shape, &device) in shapes.iter().zip(&device_bytes) {
        gpu.check_fits(&shape.describe(), device)?;
    }
    let day = D::load(&gpu)?;
    let mut reports = Vec::new();
    for shape in &shapes {
        let run = Run {
            gpu: &gpu,
            common: common,
            day: &day,
            versions: &versions,
            eps,
        };
        reports.push(match shape.dtype {
            Dtype::F32 => run.problem::<f32>(shape)?,
            Dtype::F16 => run.problem::<f16>(shape)?,
            Dtype::Bf16 => run.problem::<bf16>(shape)?,
            integer => unreachable!("normalizations take float dtypes only, not {integer}"),
        });
    }
    finish_reports(common, &reports)
}

/// `--eps`, rounded to the f32 the kernels get, or the day's default.
fn eps_of<D: NormDay>(args: &NormArgs) -> Result<f32> {
    let eps = args.eps.unwrap_or(D::DEFAULT_EPS);
    if !(eps.is_finite() && eps >= 0.0 && eps <= f32::MAX as f64) {
        return Err(crate::UsageError::new(format!(
            "--eps {eps:?}: must be a finite f32, at least 0"
        ))
        .into());
    }
    Ok(eps as f32)
}

/// The shapes to run: the one given (both passes unless --pass), or the day's defaults.
fn problems<D: NormDay>(args: &NormArgs) -> Result<Vec<Shape>> {
    if let Some(dtype) = args.dtype
        && dtype.is_integer()
    {
        return Err(crate::UsageError::new(format!("{} has no {dtype} kernels", D::DAY)).into());
    }
    let mut shapes: Vec<Shape> = match (args.rows, args.cols) {
        (Some(rows), Some(cols)) => {
            let (rows, cols) = (to_usize(rows)?, to_usize(cols)?);
            let dtype = args.dtype.unwrap_or(Dtype::Bf16);
            [Pass::Forward, Pass::Backward]
                .into_iter()
                .map(|pass| Shape::new(pass, rows, cols, dtype))
                .collect()
        }
        _ => D::DEFAULT_PROBLEMS.to_vec(),
    };
    if let Some(dtype) = args.dtype {
        shapes.iter_mut().for_each(|s| s.dtype = dtype);
        shapes.dedup();
    }
    if let Some(pass) = args.pass {
        shapes.retain(|s| s.pass == pass);
    }
    Ok(shapes)
}

fn to_usize(v: u64) -> Result<usize> {
    usize::try_from(v).map_err(|_| crate::UsageError::new(format!("{v} is too large")).into())
}

/// The inputs of every run, from a seed: x uniform in [-1, 3) (mean 1, so a LayerNorm that
/// forgets to subtract the mean fails, and RMSNorm's mean square is not the variance), the
/// weight in [0.5, 1.5), the bias in [-0.5, 0.5), dy in [-1, 1). Never zeros.
pub struct HostInputs<T> {
    pub x: Vec<T>,
    pub weight: Vec<T>,
    pub bias: Vec<T>,
    pub dy: Vec<T>,
}

impl<T: Element> HostInputs<T> {
    pub fn new(rows: usize, cols: usize, seed: u64) -> Self {
        let n = rows * cols;
        Self {
            x: inputs::uniform(n, -1.0, 3.0, seed),
            weight: inputs::uniform(cols, 0.5, 1.5, seed ^ 0x5eed_0001),
            bias: inputs::uniform(cols, -0.5, 0.5, seed ^ 0x5eed_0002),
            dy: inputs::uniform(n, -1.0, 1.0, seed ^ 0x5eed_0003),
        }
    }

    /// The device copies a launch of `kind`'s `pass` reads.
    pub fn upload(&self, gpu: &Gpu, kind: Kind, pass: Pass) -> Result<Inputs<T>> {
        Ok(Inputs {
            x: gpu.upload(&self.x)?,
            weight: gpu.upload(&self.weight)?,
            bias: match (kind, pass) {
                (Kind::Layer, Pass::Forward) => Some(gpu.upload(&self.bias)?),
                _ => None,
            },
            dy: match pass {
                Pass::Backward => Some(gpu.upload(&self.dy)?),
                Pass::Forward => None,
            },
        })
    }

    pub fn forward(&self, kind: Kind, rows: usize, cols: usize, eps: f32) -> Forward {
        let eps = eps as f64;
        match kind {
            Kind::Rms => reference::rms_norm(&self.x, &self.weight, rows, cols, eps),
            Kind::Layer => {
                reference::layer_norm(&self.x, &self.weight, &self.bias, rows, cols, eps)
            }
        }
    }

    pub fn backward(&self, kind: Kind, rows: usize, cols: usize, eps: f32) -> Gradients {
        reference::backward(
            kind,
            &self.x,
            &self.weight,
            &self.dy,
            rows,
            cols,
            eps as f64,
        )
    }
}

/// One part of an output: `rows x cols` elements, its reference and tolerance.
struct Part<'a> {
    rows: usize,
    values: &'a [f64],
    tolerance: Tolerance,
}

/// The backward's output checked part by part (dx, dweight, dbias), each against its own
/// tolerance, merged into one report: elements and failures add up, errors are the largest
/// of any part, mismatch indices are in the whole output (`[rows, c]` is dweight's column c,
/// `[rows + 1, c]` dbias's). It passes only if every part passes; the tolerance it shows is
/// then the loosest part's (every element is within it), else the first failing part's.
pub fn check_backward<T: Element>(
    got: &[T],
    grads: &Gradients,
    cols: usize,
    [dx_tol, dw_tol, db_tol]: [Tolerance; 3],
) -> CheckReport {
    let rows = grads.dx.len() / cols.max(1);
    let mut parts = vec![
        Part {
            rows,
            values: &grads.dx,
            tolerance: dx_tol,
        },
        Part {
            rows: 1,
            values: &grads.dweight,
            tolerance: dw_tol,
        },
    ];
    if !grads.dbias.is_empty() {
        parts.push(Part {
            rows: 1,
            values: &grads.dbias,
            tolerance: db_tol,
        });
    }
    let mut merged: Option<CheckReport> = None;
    let (mut offset, mut row_offset) = (0, 0);
    let mut failing_tolerance: Option<(Tolerance, f64)> = None;
    for part in parts {
        let len = part.values.len();
        let mut report = check::compare(
            &got[offset..offset + len],
            part.values,
            &[part.rows, cols],
            part.tolerance,
        );
        // A part that vanishes at this shape (dx of one-column rows), or that has only a few
        // elements (dweight of a narrow row: one column sum of terms of both signs, whose
        // cancellation the per-element bound, scaled by the sum of |terms|, already covers),
        // is judged per element: a relative L2 error over a handful of values is not an
        // average, and relative to rounding noise it means nothing.
        const FEW: usize = 64;
        let rms = (part.values.iter().map(|v| v * v).sum::<f64>() / len.max(1) as f64).sqrt();
        if report.mismatches == 0 && (rms < part.tolerance.atol || len < FEW) {
            report.rel_l2_err = 0.0;
        }
        if !report.passed() && failing_tolerance.is_none() {
            failing_tolerance = Some((part.tolerance, report.rel_l2_err));
        }
        for m in &mut report.first {
            m.index[0] += row_offset;
        }
        merged = Some(match merged {
            None => report,
            Some(mut m) => {
                m.elements += report.elements;
                m.mismatches += report.mismatches;
                m.unwritten += report.unwritten;
                m.nans += report.nans;
                m.max_abs_err = m.max_abs_err.max(report.max_abs_err);
                m.max_rel_err = m.max_rel_err.max(report.max_rel_err);
                m.rel_l2_err = m.rel_l2_err.max(report.rel_l2_err);
                m.tolerance = Tolerance {
                    atol: m.tolerance.atol.max(report.tolerance.atol),
                    rtol: m.tolerance.rtol.max(report.tolerance.rtol),
                    max_rel_l2: m.tolerance.max_rel_l2.max(report.tolerance.max_rel_l2),
                };
                let room = 8usize.saturating_sub(m.first.len());
                m.first.extend(report.first.into_iter().take(room));
                m
            }
        });
        offset += len;
        row_offset += part.rows;
    }
    let mut merged = merged.expect("dx is always a part");
    if let Some((tolerance, rel_l2)) = failing_tolerance {
        merged.tolerance = tolerance;
        merged.rel_l2_err = rel_l2;
        if merged.mismatches == 0 {
            // Only an L2 bound failed: make sure the merged report says so.
            merged.rel_l2_err = merged.rel_l2_err.max(tolerance.max_rel_l2 * (1.0 + 1e-12));
        }
    }
    merged
}

/// One day's run over its problems.
struct Run<'r, D> {
    gpu: &'r Gpu,
    common: &'r CommonArgs,
    day: &'r D,
    versions: &'r [&'static str],
    eps: f32,
}

impl<D: NormDay> Run<'_, D> {
    /// Checks and times every selected version of the shape's pass.
    fn problem<T: Element>(&self, shape: &Shape) -> Result<DayReport> {
        let (rows, cols) = (shape.rows, shape.cols);
        let host = HostInputs::<T>::new(rows, cols, self.common.seed);
        let mut session = Session::new(
            self.gpu,
            self.common,
            Problem {
                day: D::DAY,
                title: D::TITLE,
                description: shape.describe(),
                key: key(D::KIND, shape),
                bytes_per_run: bytes_per_run(D::KIND, shape),
                flops_per_run: None,
            },
        )?;
        session.save_input("x", &[rows, cols], &host.x)?;
        session.save_input("weight", &[cols], &host.weight)?;
        let inputs = host.upload(self.gpu, D::KIND, shape.pass)?;
        let versions = versions_of::<D>(shape.pass)
            .iter()
            .copied()
            .filter(|v| self.versions.contains(v));
        match shape.pass {
            Pass::Forward => {
                if D::KIND == Kind::Layer {
                    session.save_input("bias", &[cols], &host.bias)?;
                }
                let reference = host.forward(D::KIND, rows, cols, self.eps);
                drop(host);
                let mut out = self.gpu.alloc_poisoned::<T>(rows * cols)?;
                let out_shape = [rows, cols];
                for name in versions {
                    let Some(mut plan) = self.plan::<T>(&mut session, name, rows, cols)? else {
                        continue;
                    };
                    let tolerance = reference::forward_tolerance::<T>(&reference, plan.row_terms);
                    let expected = Expected::full(&reference.y, &out_shape, tolerance);
                    let version = Version {
                        name,
                        kernel: Some((plan.kernel, plan.shape)),
                        global_bytes: None,
                    };
                    let launch = &mut plan.launch;
                    session
                        .run_version(version, &mut out, &expected, |out| launch(&inputs, out))?;
                }
                session.save_reference(&out_shape, &reference.y)?;
            }
            Pass::Backward => {
                session.save_input("dy", &[rows, cols], &host.dy)?;
                let grads = host.backward(D::KIND, rows, cols, self.eps);
                drop(host);
                let len = backward_len(D::KIND, rows, cols);
                let mut out = self.gpu.alloc_poisoned::<T>(len)?;
                let out_shape = [len / cols, cols];
                for name in versions {
                    let Some(mut plan) = self.plan::<T>(&mut session, name, rows, cols)? else {
                        continue;
                    };
                    let tolerances =
                        reference::backward_tolerances::<T>(&grads, plan.row_terms, plan.col_terms);
                    let version = Version {
                        name,
                        kernel: Some((plan.kernel, plan.shape)),
                        global_bytes: None,
                    };
                    let check = |got: &[T]| check_backward(got, &grads, cols, tolerances);
                    let launch = &mut plan.launch;
                    session.run_version_checked(version, &mut out, &out_shape, check, |out| {
                        launch(&inputs, out)
                    })?;
                }
                session.save_reference(&out_shape, &grads.concatenated())?;
            }
        }
        Ok(session.finish())
    }

    /// The version's plan, or None (said on the console) when it refuses the shape.
    fn plan<T: Element>(
        &self,
        session: &mut Session,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Option<Plan<'_, T>>> {
        match self.day.plan::<T>(self.gpu, name, rows, cols, self.eps) {
            Ok(plan) => Ok(Some(plan)),
            Err(e) if e.is::<Refused>() => {
                session.skip_version(name, &e.to_string());
                Ok(None)
            }
            Err(e) => Err(e.context(format!("planning `{name}` on {rows} x {cols}"))),
        }
    }
}

/// Checks the sizes of a launch: non-empty, x (and dy) `rows x cols`, the parameters `cols`,
/// the output `out_expected` elements (`rows x cols`, or [`backward_len`]).
pub fn check_sizes<T>(
    inputs: &Inputs<T>,
    out_len: usize,
    rows: usize,
    cols: usize,
    out_expected: usize,
) -> Result<()> {
    if rows == 0 || cols == 0 {
        anyhow::bail!("normalization: {rows} x {cols} is empty; rows and columns must be >= 1");
    }
    let n = rows
        .checked_mul(cols)
        .ok_or_else(|| anyhow::anyhow!("normalization: {rows} x {cols} overflows"))?;
    let bad_dy = inputs.dy.as_ref().is_some_and(|dy| dy.len() != n);
    let bad_bias = inputs.bias.as_ref().is_some_and(|b| b.len() != cols);
    if inputs.x.len() != n || inputs.weight.len() != cols || bad_dy || bad_bias {
        anyhow::bail!("normalization: the inputs do not hold {rows} x {cols}");
    }
    if out_len != out_expected {
        anyhow::bail!(
            "normalization: an output of {out_len} elements, not {out_expected}, for {rows} x {cols}"
        );
    }
    Ok(())
}

/// Elements in one 16-byte pack of `dtype`.
pub fn pack(dtype: Dtype) -> usize {
    16 / dtype.size()
}

/// `v` (16-byte loads) when every row starts on a 16-byte boundary, i.e. the width is a
/// multiple of the pack; `s` (scalar loads) otherwise.
pub fn load_suffix(dtype: Dtype, cols: usize) -> &'static str {
    if cols.is_multiple_of(pack(dtype)) {
        "v"
    } else {
        "s"
    }
}

/// The forward register tiers (threads per row, elements per thread), smallest first, as
/// day05's: a row takes the first whose capacity (the product) holds it.
pub fn forward_tiers(dtype: Dtype) -> [(usize, usize); 6] {
    [
        (32, pack(dtype)),
        (32, 16),
        (128, 32),
        (256, 32),
        (512, 32),
        (1024, 32),
    ]
}

/// The widest row the forward register kernels take: 32 elements in each of 1024 threads.
pub const MAX_REGISTER_ROW: usize = 32 * 1024;

/// The backward register tiers: x, dy, the weight and the weight gradients' accumulators all
/// live in registers, and blocks are sized for 1024 threads per SM (64 registers each), so a
/// thread holds 8 elements (16 spilled).
pub fn backward_tiers(dtype: Dtype) -> [(usize, usize); 4] {
    [(32, pack(dtype)), (256, 8), (512, 8), (1024, 8)]
}

/// The widest row the backward register kernels take.
pub const MAX_BACKWARD_REGISTER_ROW: usize = 1024 * 8;

/// The first tier of `tiers` that holds `cols`.
pub fn tier_for(tiers: &[(usize, usize)], cols: usize) -> Option<(usize, usize)> {
    tiers.iter().copied().find(|(g, e)| g * e >= cols)
}

/// A grid of one block per row must fit the grid's 2^31 - 1 blocks.
pub fn block_per_row_grid(rows: usize) -> Result<u32> {
    u32::try_from(rows)
        .ok()
        .filter(|&r| r <= i32::MAX as u32)
        .ok_or_else(|| Refused(format!("{rows} rows exceed the grid's 2^31 - 1 blocks")).into())
}

/// Terms of a block-per-row sum over blocks of `threads`: each thread's strided share, then
/// the tree (10 levels at most).
pub fn block_terms(cols: usize, threads: u32) -> usize {
    cols.div_ceil(threads as usize) + 10
}

/// The forward register tier for rows of `cols` and its launch shape (a warp per row and 8
/// rows per block for the warp tiers, a block per row otherwise), or a refusal naming the
/// versions that take longer rows.
pub fn forward_register_plan(
    dtype: Dtype,
    rows: usize,
    cols: usize,
    longer_rows: &str,
) -> Result<((usize, usize), LaunchShape)> {
    let Some((group, ept)) = tier_for(&forward_tiers(dtype), cols) else {
        return Err(Refused(format!(
            "rows of {cols} exceed the {MAX_REGISTER_ROW} elements kept in registers \
             ({longer_rows} take them)"
        ))
        .into());
    };
    let shape = if group == 32 {
        LaunchShape::linear(block_per_row_grid(rows.div_ceil(8))?, 256)
    } else {
        LaunchShape::linear(block_per_row_grid(rows)?, group as u32)
    };
    Ok(((group, ept), shape))
}

/// The backward register tier for rows of `cols`, or a refusal naming the version that takes
/// longer rows.
pub fn backward_register_tier(
    dtype: Dtype,
    cols: usize,
    longer_rows: &str,
) -> Result<(usize, usize)> {
    tier_for(&backward_tiers(dtype), cols).ok_or_else(|| {
        Refused(format!(
            "rows of {cols} exceed the {MAX_BACKWARD_REGISTER_ROW} elements the backward keeps \
             in registers ({longer_rows} takes them)"
        ))
        .into()
    })
}

/// Blocks for a kernel whose blocks loop over rows: as many as the GPU holds at once (so each
/// SM keeps its blocks for the whole run), at most one per row.
pub fn resident_blocks(kernel: &Kernel, threads: u32, sms: usize, rows: usize) -> Result<usize> {
    let per_sm = kernel
        .func
        .occupancy_max_active_blocks_per_multiprocessor(threads, 0, None)?
        as usize;
    Ok((per_sm.max(1) * sms).min(rows).max(1))
}

/// The launch shape of `column_sums_<T>`: 32 columns per block, `COLUMN_SLICES` = 8 threads
/// per column.
pub fn column_sums_shape(cols: usize) -> LaunchShape {
    LaunchShape {
        grid: (cols.div_ceil(32) as u32, 1, 1),
        block: (32, 8, 1),
        dynamic_shared_bytes: 0,
    }
}

/// The longest chain of additions in a two-stage column sum: `rows_per_chunk` in the first
/// stage, then `chunks / 8 + 8` in `column_sums`.
pub fn column_terms(rows_per_chunk: usize, chunks: usize) -> usize {
    rows_per_chunk + chunks.div_ceil(8) + 8
}

/// Enqueues `column_sums_<T>(partials, out, chunks, cols)`: `out[c]` = the sum of column `c`
/// of the `chunks x cols` partial sums, in a fixed order.
pub fn launch_column_sums<T: Element>(
    gpu: &Gpu,
    kernel: &Kernel,
    partials: &CudaSlice<f32>,
    out: &mut cudarc::driver::CudaViewMut<'_, T>,
    chunks: usize,
    cols: usize,
) -> Result<()> {
    use cudarc::driver::PushKernelArg;
    if partials.len() < chunks * cols || out.len() != cols {
        anyhow::bail!("column_sums: buffers do not hold {chunks} x {cols} partials");
    }
    let (chunks, cols64) = (chunks as u64, cols as u64);
    let mut launch = gpu.stream.launch_builder(&kernel.func);
    launch.arg(partials).arg(out).arg(&chunks).arg(&cols64);
    // SAFETY: column_sums_<T>(const float* partials, T* out, index_t chunks, index_t cols),
    // with partials holding chunks x cols floats and out cols elements, checked above.
    unsafe { launch.launch(kernel.config(&column_sums_shape(cols))?) }?;
    Ok(())
}

/// Rows of the GPU tests: one, a few (not a multiple of the rows per block), many.
pub const TEST_ROWS: &[usize] = &[1, 3, 17, 1000];
/// Widths of the GPU tests: 1, primes and widths no pack divides, exactly one warp's pack,
/// the default 4096 and one past it, the backward's register limit (8192) and one past it.
pub const TEST_COLS: &[usize] = &[1, 7, 127, 128, 1000, 4096, 4097, 8192, 8193];
/// Widths at the forward's register limit and one past it, with fewer rows (the f64
/// reference of 1000 x 32769 would dominate the test's time).
pub const TEST_WIDE: &[(usize, usize)] = &[(1, 32768), (3, 32769), (17, 32768), (17, 32769)];

fn test_shapes() -> Vec<(usize, usize)> {
    let mut shapes: Vec<(usize, usize)> = TEST_ROWS
        .iter()
        .flat_map(|&r| TEST_COLS.iter().map(move |&c| (r, c)))
        .collect();
    shapes.extend_from_slice(TEST_WIDE);
    shapes
}

/// The GPU test of a normalization day: every version of both passes, every dtype, every
/// test shape it does not refuse, against the reference, each backward part (dx, dweight,
/// dbias) against its own tolerance; outputs poisoned before each launch.
pub fn test_every_version<D: NormDay>() {
    let Some(gpu) = testing::gpu_or_skip(&format!("{} GPU correctness", D::DAY)) else {
        return;
    };
    let day = D::load(&gpu).expect("kernels load");
    for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
        match dtype {
            Dtype::F32 => test_dtype::<f32, D>(&gpu, &day),
            Dtype::F16 => test_dtype::<f16, D>(&gpu, &day),
            _ => test_dtype::<bf16, D>(&gpu, &day),
        }
    }
}

fn test_dtype<T: Element, D: NormDay>(gpu: &Gpu, day: &D) {
    let eps = D::DEFAULT_EPS as f32;
    let mut ran: std::collections::BTreeMap<&str, usize> = Default::default();
    for (i, (rows, cols)) in test_shapes().into_iter().enumerate() {
        let host = HostInputs::<T>::new(rows, cols, 100 + i as u64);
        for pass in [Pass::Forward, Pass::Backward] {
            let inputs = host.upload(gpu, D::KIND, pass).expect("upload");
            let (forward, grads) = match pass {
                Pass::Forward => (Some(host.forward(D::KIND, rows, cols, eps)), None),
                Pass::Backward => (None, Some(host.backward(D::KIND, rows, cols, eps))),
            };
            let len = match pass {
                Pass::Forward => rows * cols,
                Pass::Backward => backward_len(D::KIND, rows, cols),
            };
            let mut out = gpu.alloc_poisoned::<T>(len).expect("alloc");
            for &version in versions_of::<D>(pass) {
                let what = format!("{version} {} {rows} x {cols}", T::NAME);
                let mut plan = match day.plan::<T>(gpu, version, rows, cols, eps) {
                    Ok(plan) => plan,
                    Err(e) if e.is::<Refused>() => continue,
                    Err(e) => panic!("{what}: {e:#}"),
                };
                let got = launch_and_read(gpu, &mut out, &mut |out| (plan.launch)(&inputs, out))
                    .unwrap_or_else(|e| panic!("{what}: {e:#}"));
                let report = match (&forward, &grads) {
                    (Some(f), _) => check::compare(
                        &got,
                        &f.y,
                        &[rows, cols],
                        reference::forward_tolerance::<T>(f, plan.row_terms),
                    ),
                    (_, Some(g)) => {
                        let tols =
                            reference::backward_tolerances::<T>(g, plan.row_terms, plan.col_terms);
                        check_backward(&got, g, cols, tols)
                    }
                    _ => unreachable!(),
                };
                assert!(report.passed(), "{what}: {report}");
                *ran.entry(version).or_insert(0) += 1;
            }
        }
    }
    for &version in D::FORWARD_VERSIONS.iter().chain(D::BACKWARD_VERSIONS) {
        let n = ran.get(version).copied().unwrap_or(0);
        assert!(
            n >= 10,
            "{version} {}: ran on only {n} test shapes",
            T::NAME
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_grow_and_end_at_the_register_limits() {
        for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
            let caps: Vec<usize> = forward_tiers(dtype).iter().map(|(g, e)| g * e).collect();
            assert!(caps.windows(2).all(|w| w[0] < w[1]), "{caps:?}");
            assert_eq!(*caps.last().unwrap(), MAX_REGISTER_ROW);
            let caps: Vec<usize> = backward_tiers(dtype).iter().map(|(g, e)| g * e).collect();
            assert!(caps.windows(2).all(|w| w[0] < w[1]), "{caps:?}");
            assert_eq!(*caps.last().unwrap(), MAX_BACKWARD_REGISTER_ROW);
        }
        // The default problem's tiers: 128 threads x 32 forward, 512 x 8 backward.
        assert_eq!(tier_for(&forward_tiers(Dtype::Bf16), 4096), Some((128, 32)));
        assert_eq!(tier_for(&backward_tiers(Dtype::Bf16), 4096), Some((512, 8)));
        assert_eq!(
            tier_for(&forward_tiers(Dtype::F32), MAX_REGISTER_ROW + 1),
            None
        );
        assert!(forward_register_plan(Dtype::F32, 4, MAX_REGISTER_ROW + 1, "x").is_err());
        assert!(backward_register_tier(Dtype::F32, MAX_BACKWARD_REGISTER_ROW + 1, "x").is_err());
    }

    #[test]
    fn keys_name_op_pass_dtype_and_shape() {
        let fwd = Shape::new(Pass::Forward, 16384, 4096, Dtype::Bf16);
        let bwd = Shape::new(Pass::Backward, 16384, 4096, Dtype::Bf16);
        assert_eq!(key(Kind::Rms, &fwd), "rmsnorm/bf16/16384x4096");
        assert_eq!(key(Kind::Rms, &bwd), "rmsnorm_bwd/bf16/16384x4096");
        assert_eq!(key(Kind::Layer, &bwd), "layernorm_bwd/bf16/16384x4096");
    }

    #[test]
    fn bytes_count_each_input_and_output_once() {
        let fwd = Shape::new(Pass::Forward, 4, 8, Dtype::Bf16);
        let bwd = Shape::new(Pass::Backward, 4, 8, Dtype::F32);
        assert_eq!(bytes_per_run(Kind::Rms, &fwd), (2 * 32 + 8) * 2);
        assert_eq!(bytes_per_run(Kind::Layer, &fwd), (2 * 32 + 16) * 2);
        assert_eq!(bytes_per_run(Kind::Rms, &bwd), (3 * 32 + 16) * 4);
        assert_eq!(bytes_per_run(Kind::Layer, &bwd), (3 * 32 + 24) * 4);
        assert_eq!(backward_len(Kind::Layer, 4, 8), 48);
    }

    #[test]
    fn backward_parts_are_checked_with_their_own_tolerances() {
        let grads = reference::backward::<f32>(
            Kind::Layer,
            &[1.0, 2.0, 4.0, 3.0, 0.5, 2.5],
            &[1.0, 0.5, 2.0],
            &[0.5, -1.0, 0.25, 1.0, -0.5, 0.75],
            2,
            3,
            1e-5,
        );
        let exact: Vec<f32> = grads.concatenated().iter().map(|&v| v as f32).collect();
        let tight = Tolerance::new(1e-6, 1e-5);
        let loose = Tolerance::new(0.5, 1e-5).with_max_rel_l2(1.0);
        assert!(check_backward(&exact, &grads, 3, [tight; 3]).passed());
        // dweight[1] off by 0.1: fails a tight dweight tolerance, passes a loose one; the
        // mismatch is reported at [rows, 1].
        let mut off = exact.clone();
        off[7] += 0.1;
        let report = check_backward(&off, &grads, 3, [tight, tight, tight]);
        assert!(!report.passed());
        assert_eq!(report.first[0].index, vec![2, 1]);
        assert!(check_backward(&off, &grads, 3, [tight, loose, tight]).passed());
        // The same error in dx fails even when dweight's tolerance is loose.
        let mut off = exact.clone();
        off[1] += 0.1;
        assert!(!check_backward(&off, &grads, 3, [tight, loose, loose]).passed());
        // An unwritten dbias element is found at [rows + 1, c].
        let mut off = exact;
        off[9 + 2] = f32::POISON;
        let report = check_backward(&off, &grads, 3, [tight; 3]);
        assert_eq!(
            (report.unwritten, report.first[0].index.clone()),
            (1, vec![3, 2])
        );
    }

    #[test]
    fn test_shapes_reach_past_both_register_limits() {
        let shapes = test_shapes();
        assert!(shapes.contains(&(1000, 8193)) && shapes.contains(&(17, 32769)));
        assert!(shapes.contains(&(1, 1)));
    }
}

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
//!
//! The module's files, by role: this one the problem and the trait; `runner` the command
//! line and the run over a day's problems; `host_inputs` the random inputs; `backward_check`
//! the check of a backward output made of parts; `launch` what the days' launchers share
//! (size checks, register tiers, grids); `plans` the days' kernels and the plans of the
//! versions both have; `gpu_test` the GPU test.

mod backward_check;
mod gpu_test;
mod host_inputs;
mod launch;
mod plans;
mod runner;

use std::process::ExitCode;

use anyhow::Result;
use cudarc::driver::CudaSlice;
use half::{bf16, f16};

pub use crate::reference::norm::Kind;
pub use crate::session::Refused;
pub use backward_check::check_backward;
pub use gpu_test::{
    TEST_COLS, TEST_ROWS, TEST_TALL, TEST_WIDE, test_every_version, test_register_refusals,
};
pub use host_inputs::HostInputs;
pub use launch::*;
pub use plans::{BackwardVersion, NormKernels, functions, kernel_builds};
pub use runner::{NormArgs, REFUSED_REQUESTS, main};

use crate::cli::{CommonArgs, bytes_for, check_host_fits, family_main, finish_reports};
use crate::dtype::Dtype;
use crate::element::Element;
use crate::gpu::Gpu;
use crate::gpu::kernel::{Kernel, LaunchShape};
use crate::gpu::nvrtc::KernelSource;
use crate::measure::check::{self, CheckReport, Tolerance};
use crate::measure::report::DayReport;
use crate::reference::norm::{self as reference, Forward, Gradients};
use crate::session::{Expected, Session, Version, launch_and_read};
use crate::{measure::inputs, sizes, testing};

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
/// dy read, dx written, the weight read, a gradient per parameter written (the column sums'
/// partials stay in L2 and are not counted). `peers/norm.py` counts the same bytes for torch.
/// The `bwd_saved` versions also read the forward's saved statistics, 4 bytes per row and
/// statistic: 64 KiB of RMSNorm's 16384 x 4096 bf16 problem (384 MiB), 0.02%, which this count
/// leaves out for every version alike.
pub fn bytes_per_run(kind: Kind, shape: &Shape) -> u64 {
    let (n, c) = (shape.elements() as u64, shape.cols as u64);
    let p = params(kind) as u64;
    let elements = match shape.pass {
        Pass::Forward => 2 * n + p * c,
        Pass::Backward => 3 * n + (1 + p) * c,
    };
    elements * shape.dtype.size() as u64
}

/// The inputs of one launch; `bias` only for the LayerNorm forward, `dy` and `saved_stats`
/// only for the backward.
pub struct Inputs<T> {
    pub x: CudaSlice<T>,
    pub weight: CudaSlice<T>,
    pub bias: Option<CudaSlice<T>>,
    pub dy: Option<CudaSlice<T>>,
    /// The per-row statistics a training forward saves, f32: RMSNorm's `rstd[rows]`;
    /// LayerNorm's `mean[rows]` then `rstd[rows]`. Only the `bwd_saved` versions read them.
    pub saved_stats: Option<CudaSlice<f32>>,
}

impl<T> Inputs<T> {
    /// The bias, which a LayerNorm forward needs.
    pub fn bias(&self) -> Result<&CudaSlice<T>> {
        self.bias
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("this launch needs a bias"))
    }

    /// The forward's saved statistics, which a `bwd_saved` backward reads.
    pub fn saved_stats(&self) -> Result<&CudaSlice<f32>> {
        self.saved_stats
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("this launch needs the forward's saved statistics"))
    }

    /// The upstream gradient, which a backward needs.
    pub fn dy(&self) -> Result<&CudaSlice<T>> {
        self.dy
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("a backward launch needs dy"))
    }
}

/// Enqueues one run: the forward's `y` into `out`; the backward's dx | dweight [| dbias] into
/// `out`, or, where `params` is given, dx into `out` and dweight [| dbias] into `params` (the
/// PyTorch layers' separate tensors). A forward refuses `params`.
pub type Launch<'a, T> =
    Box<dyn FnMut(&Inputs<T>, &mut CudaSlice<T>, Option<&mut CudaSlice<T>>) -> Result<()> + 'a>;

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

/// One problem a version is planned for: the GPU, `rows x cols`, and eps.
#[derive(Clone, Copy)]
pub struct Rows<'a> {
    pub gpu: &'a Gpu,
    pub rows: usize,
    pub cols: usize,
    pub eps: f32,
}

/// What `cargo run -p dayNN` runs without --rows/--cols, unless the day says otherwise: each
/// pass on 16384 rows of 4096 bf16 (a batch of tokens of a 4096-wide model).
pub const DEFAULT_PROBLEMS: &[Shape] = &[
    Shape::new(Pass::Forward, 16384, 4096, Dtype::Bf16),
    Shape::new(Pass::Backward, 16384, 4096, Dtype::Bf16),
];

/// A normalization day: its name, kind, kernel file and forward versions, and how those of
/// its forward versions that are its own launch. The rest (the backward versions,
/// [`BackwardVersion`], and the forward versions both days have) the family plans from the
/// kernels' names: [`NormKernels`], the day's kernels loaded.
pub trait NormDay: Sized + 'static {
    /// Package name, `day11`.
    const DAY: &'static str;
    const KIND: Kind;
    /// The table's title: the kind's name.
    const TITLE: &'static str = match Self::KIND {
        Kind::Rms => "RMSNorm",
        Kind::Layer => "LayerNorm",
    };
    /// The day's kernel file.
    const SOURCE: KernelSource;
    /// The day's kernels beside the family's ([`functions`]), each compiled per dtype:
    /// `rmsnorm_block`.
    const OWN_FUNCTIONS: &'static [&'static str];
    /// The forward's version names (`--kernel`), in table order.
    const FORWARD_VERSIONS: &'static [&'static str];
    /// The backward's, in table order.
    const BACKWARD_VERSIONS: &'static [&'static str] = &BackwardVersion::NAMES;
    const DEFAULT_PROBLEMS: &'static [Shape] = DEFAULT_PROBLEMS;
    /// `--eps` when not given: 1e-6 for RMSNorm, 1e-5 (torch's) for LayerNorm.
    const DEFAULT_EPS: f64 = match Self::KIND {
        Kind::Rms => 1e-6,
        Kind::Layer => 1e-5,
    };
    /// Rows of x and dy each `bwd_saved` row group stages in shared memory (`SAVED_STAGES` in
    /// the day's kernel file); 0 where they stay in registers.
    const SAVED_STAGED_ROWS: usize;

    /// The day's kernels, compiled and loaded for `gpu`.
    fn load(gpu: &Gpu) -> Result<NormKernels<Self>> {
        NormKernels::load(gpu)
    }

    /// How the day's own forward `version` runs on `on` with `kernels`, or an error:
    /// [`Refused`] for a shape it does not take or a name the day does not have, anything
    /// else for a real failure.
    fn plan_forward<'a, T: Element>(
        kernels: &'a NormKernels<Self>,
        version: &str,
        on: Rows<'a>,
    ) -> Result<Plan<'a, T>>;
}

fn versions_of<D: NormDay>(pass: Pass) -> &'static [&'static str] {
    match pass {
        Pass::Forward => D::FORWARD_VERSIONS,
        Pass::Backward => D::BACKWARD_VERSIONS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

//! Day 3: dtype-aware softmax. The launcher for `softmax_dtype.cu` (one template, three
//! storage types), with day 2's f32 kernel as the baseline.

use anyhow::Result;
use common::dtype::Dtype;
use common::family::softmax::{Plan, Refused, Rows, Shape, SoftmaxDay, plan_rows};
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::reference::softmax::tolerance_for;
use common::{Element, Gpu};
use day02::WarpSoftmax;

pub const SOURCE: KernelSource = common::kernel_source!("softmax_dtype.cu");

/// What the day compiles: one kernel per storage type for the GPU's own architecture.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(
        SOURCE,
        DTYPES.iter().map(|&d| function(d)),
    )]
}

common::test_kernel_builds!();

pub const DTYPES: &[Dtype] = &[Dtype::F32, Dtype::F16, Dtype::Bf16];

/// `softmax_warp_f32`, `softmax_warp_f16`, `softmax_warp_bf16`.
pub fn function(dtype: Dtype) -> String {
    format!("softmax_warp_{dtype}")
}

/// One warp per row, any storage type.
pub struct DtypeSoftmax {
    kernels: KernelSet,
}

impl DtypeSoftmax {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let names = DTYPES.iter().map(|&d| function(d));
        Ok(Self {
            kernels: KernelSet::load(gpu, &SOURCE, names)?,
        })
    }

    /// The version's plan, any storage type: day 2's launch and summation order, the output
    /// rounded to `T`.
    pub fn plan<'a, T: Element>(&'a self, on: Rows<'a>) -> Result<Plan<'a, T>> {
        let kernel = self.kernels.get(&function(T::DTYPE))?;
        let tolerance = tolerance_for::<T>(day02::sum_terms(on.cols));
        // softmax_warp_<T>'s storage type has T's size and layout (f16_t and bf16_t are
        // 16-bit containers).
        Ok(plan_rows(kernel, day02::shape(on.rows), tolerance, on))
    }
}

pub struct Day03 {
    day02: WarpSoftmax,
    warp: DtypeSoftmax,
}

impl SoftmaxDay for Day03 {
    const DAY: &'static str = "day03";
    const TITLE: &'static str = "dtype-aware softmax";
    const VERSIONS: &'static [&'static str] = &["day02_warp", "warp"];
    const DEFAULT_PROBLEMS: &'static [Shape] = &[
        Shape::new(32768, 4096, Dtype::F32),
        Shape::new(32768, 4096, Dtype::F16),
        Shape::new(32768, 4096, Dtype::Bf16),
    ];
    const DTYPES: &'static [Dtype] = DTYPES;
    const F32_ONLY: &'static [&'static str] = &["day02_warp"];

    fn load(gpu: &Gpu) -> Result<Self> {
        let (day02, warp) = (WarpSoftmax::load(gpu)?, DtypeSoftmax::load(gpu)?);
        Ok(Self { day02, warp })
    }

    fn plan<'a, T: Element>(&'a self, version: &str, on: Rows<'a>) -> Result<Plan<'a, T>> {
        match version {
            "day02_warp" => self.day02.plan(on),
            "warp" => self.warp.plan(on),
            other => Err(Refused(format!("day03 has no version `{other}`")).into()),
        }
    }
}

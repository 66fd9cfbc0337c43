//! Day 6: naive matmul. One thread per output, launched with two thread mappings: threads of
//! a warp on consecutive rows (uncoalesced) or on consecutive columns (coalesced).

use anyhow::Result;
use common::family::matmul::{MatmulDay, Plan, Shape, plan_kernel};
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::{Gpu, Kernel};

pub const SOURCE: KernelSource = common::kernel_source!("matmul_naive.cu");

/// What the day compiles: both kernels for the GPU's own architecture.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(SOURCE, [UNCOALESCED, COALESCED])]
}

common::test_kernel_builds!();

pub const UNCOALESCED: &str = "matmul_naive_uncoalesced";
pub const COALESCED: &str = "matmul_naive_coalesced";

/// 32 x 32 threads per block: a warp is one row of the block along x.
const SIDE: u32 = 32;

pub struct NaiveMatmul {
    uncoalesced: Kernel,
    coalesced: Kernel,
}

impl NaiveMatmul {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let module = gpu.load(&SOURCE)?;
        Ok(Self {
            uncoalesced: module.kernel(gpu, UNCOALESCED)?,
            coalesced: module.kernel(gpu, COALESCED)?,
        })
    }

    /// `naive_uncoalesced` (threads along x on rows) or `naive_coalesced` (on columns).
    pub fn plan<'a>(&'a self, gpu: &'a Gpu, coalesced: bool, shape: Shape) -> Result<Plan<'a>> {
        let kernel = if coalesced {
            &self.coalesced
        } else {
            &self.uncoalesced
        };
        // x covers the dimension the warp runs along.
        let (along_x, along_y) = if coalesced {
            (shape.n, shape.m)
        } else {
            (shape.m, shape.n)
        };
        let side = SIDE as usize;
        plan_kernel(
            gpu,
            kernel,
            shape,
            (along_x.div_ceil(side), along_y.div_ceil(side)),
            (SIDE, SIDE, 1),
            0,
            // Every thread reads its own row of A and column of B.
            shape.tiled_bytes(1, 1),
        )
    }
}

/// The day's versions for the shared matmul runner.
pub struct Day06 {
    naive: NaiveMatmul,
}

impl MatmulDay for Day06 {
    const DAY: &'static str = "day06";
    const TITLE: &'static str = "naive matmul";
    const VERSIONS: &'static [&'static str] = &["naive_uncoalesced", "naive_coalesced"];
    const DEFAULT_PROBLEMS: &'static [Shape] = &[Shape::square(4096), Shape::new(1000, 1001, 999)];

    fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            naive: NaiveMatmul::load(gpu)?,
        })
    }

    fn plan<'a>(&'a self, gpu: &'a Gpu, version: &str, shape: Shape) -> Result<Plan<'a>> {
        match version {
            "naive_uncoalesced" => self.naive.plan(gpu, false, shape),
            "naive_coalesced" => self.naive.plan(gpu, true, shape),
            other => anyhow::bail!("day06 has no version `{other}`"),
        }
    }
}

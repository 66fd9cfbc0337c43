//! Day 9: optimized SGEMM. The launchers for `sgemm.cu`, one version per technique (1D and 2D
//! register blocking, 16-byte accesses, A transposed in shared memory, double buffering, warp
//! tiling, tile shapes chosen by timing), with day 7's best tiled kernel as the baseline.

use std::cell::RefCell;
use std::collections::HashMap;

use anyhow::Result;
use common::family::matmul::{MatmulDay, Plan, Shape, plan_kernel};
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::measure::bench::{self, TimingOptions};
use common::session::Refused;
use common::{Gpu, Kernel};
use day07::TiledMatmul;

pub mod tile;

pub use tile::{BLOCK_KERNELS, BlockKernel, FIRST_MULTISTAGE, Tiling, WARP_TILINGS};

pub const SOURCE: KernelSource = common::kernel_source!("sgemm.cu");

/// What the day compiles: every kernel, for the GPU's own architecture. The loader compiles the
/// same, the compile test checks this list, and `cargo xtask bundle` compiles it ahead of time for
/// the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![kernel_build()]
}

/// `sgemm.cu` for the GPU's own architecture, with the tile table's defines.
fn kernel_build() -> KernelBuild {
    KernelBuild::device(SOURCE, all_functions()).with_options(tile::defines())
}

/// `_v` when every row of A and B starts on a 16-byte boundary (k and n multiples of 4).
fn form(shape: Shape) -> &'static str {
    if shape.k.is_multiple_of(4) && shape.n.is_multiple_of(4) {
        "v"
    } else {
        "s"
    }
}

/// Every CUDA function of `sgemm.cu`.
pub fn all_functions() -> Vec<String> {
    let mut names = Vec::new();
    for k in BLOCK_KERNELS {
        if k.two_forms {
            names.push(format!("{}_v", k.function));
            names.push(format!("{}_s", k.function));
        } else {
            names.push(k.function.to_string());
        }
    }
    for t in &WARP_TILINGS {
        names.push(format!("{}_v", t.warp_function()));
        names.push(format!("{}_s", t.warp_function()));
    }
    names
}

pub struct Sgemm {
    kernels: KernelSet,
    /// `autotuned`'s choice per problem (an index into [`WARP_TILINGS`]), timed once.
    tuned: RefCell<HashMap<Shape, usize>>,
}

impl Sgemm {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: KernelSet::load_build(gpu, &kernel_build())?,
            tuned: RefCell::new(HashMap::new()),
        })
    }

    /// One of the block-tiled versions (`tile1d` ... `double_buffer`).
    fn plan_block<'a>(&'a self, gpu: &'a Gpu, k: &BlockKernel, shape: Shape) -> Result<Plan<'a>> {
        let name = if k.two_forms {
            format!("{}_{}", k.function, form(shape))
        } else {
            k.function.to_string()
        };
        plan_tiled(gpu, self.kernels.get(&name)?, k.tiling, shape)
    }

    /// `warptile` or `multistage` with the tiling `WARP_TILINGS[index]`.
    fn plan_warptile<'a>(&'a self, gpu: &'a Gpu, index: usize, shape: Shape) -> Result<Plan<'a>> {
        let tiling = WARP_TILINGS[index];
        let name = format!("{}_{}", tiling.warp_function(), form(shape));
        plan_tiled(gpu, self.kernels.get(&name)?, tiling, shape)
    }

    /// `autotuned`: every warp tiling timed on this problem's shape (on scratch matrices), the
    /// fastest kept for the rest of the run.
    fn plan_autotuned<'a>(&'a self, gpu: &'a Gpu, shape: Shape) -> Result<Plan<'a>> {
        let cached = self.tuned.borrow().get(&shape).copied();
        let best = match cached {
            Some(best) => best,
            None => {
                let best = self.tune(gpu, shape)?;
                self.tuned.borrow_mut().insert(shape, best);
                best
            }
        };
        self.plan_warptile(gpu, best, shape)
    }

    fn tune(&self, gpu: &Gpu, shape: Shape) -> Result<usize> {
        let a = gpu.stream.alloc_zeros::<f32>(shape.m * shape.k)?;
        let b = gpu.stream.alloc_zeros::<f32>(shape.k * shape.n)?;
        let mut c = gpu.stream.alloc_zeros::<f32>(shape.m * shape.n)?;
        let opts = TimingOptions {
            warmup: 2,
            iters: 10,
            budget_ms: 100.0,
        };
        let mut timings = Vec::new();
        for index in 0..WARP_TILINGS.len() {
            let mut plan = match self.plan_warptile(gpu, index, shape) {
                Ok(plan) => plan,
                Err(e) if e.is::<Refused>() => continue,
                Err(e) => return Err(e),
            };
            let t = bench::time_on_gpu(gpu, &opts, shape.min_bytes(), || {
                (plan.launch)(&a, &b, &mut c)
            })?;
            timings.push((index, t.median_ms));
        }
        let (best, best_ms) = timings
            .iter()
            .copied()
            .min_by(|x, y| x.1.total_cmp(&y.1))
            .ok_or_else(|| anyhow::anyhow!("no warp tiling takes {}", shape.describe()))?;
        let all: Vec<String> = timings
            .iter()
            .map(|(i, ms)| format!("{} {ms:.3} ms", WARP_TILINGS[*i].label()))
            .collect();
        eprintln!(
            "autotuned on {}x{}x{}: {} ({best_ms:.3} ms) of [{}]",
            shape.m,
            shape.n,
            shape.k,
            WARP_TILINGS[best].label(),
            all.join(", ")
        );
        Ok(best)
    }
}

/// A kernel of `sgemm.cu` on a grid of `bn x bm` output tiles. The `_v` form (16-byte
/// accesses) is chosen by the caller only when k and n are multiples of 4.
fn plan_tiled<'a>(
    gpu: &'a Gpu,
    kernel: &'a Kernel,
    tiling: Tiling,
    shape: Shape,
) -> Result<Plan<'a>> {
    plan_kernel(
        gpu,
        kernel,
        shape,
        (shape.n.div_ceil(tiling.bn), shape.m.div_ceil(tiling.bm)),
        (tiling.threads, 1, 1),
        tiling.dynamic_shared_bytes(),
        shape.tiled_bytes(tiling.bm, tiling.bn),
    )
}

common::versions! {
    /// The day's versions, in table order (cuBLAS is added before them).
    pub enum Version {
        /// Day 7's best tiled kernel, the baseline.
        Day07Tiled32 => "day07_tiled_32",
        Tile1d => "tile1d",
        Tile2d => "tile2d",
        Vec4 => "vec4",
        TransposedA => "transposed_a",
        DoubleBuffer => "double_buffer",
        /// The first of [`WARP_TILINGS`].
        Warptile => "warptile",
        /// The first multi-stage one.
        Multistage => "multistage",
        /// Every warp tiling timed on the problem, the fastest kept.
        Autotuned => "autotuned",
    }
}

pub struct Day09 {
    tiled: TiledMatmul,
    sgemm: Sgemm,
}

impl MatmulDay for Day09 {
    const DAY: &'static str = "day09";
    const TITLE: &'static str = "optimized SGEMM";
    const VERSIONS: &'static [&'static str] = &Version::NAMES;
    const DEFAULT_PROBLEMS: &'static [Shape] = &[
        Shape::square(4096),
        Shape::square(2048),
        Shape::new(1000, 1001, 999),
    ];

    fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            tiled: TiledMatmul::load(gpu)?,
            sgemm: Sgemm::load(gpu)?,
        })
    }

    fn plan<'a>(&'a self, gpu: &'a Gpu, version: &str, shape: Shape) -> Result<Plan<'a>> {
        let Some(version) = Version::from_name(version) else {
            anyhow::bail!("day09 has no version `{version}`");
        };
        match version {
            Version::Day07Tiled32 => self.tiled.plan(gpu, 32, shape),
            Version::Warptile => self.sgemm.plan_warptile(gpu, 0, shape),
            Version::Multistage => self.sgemm.plan_warptile(gpu, FIRST_MULTISTAGE, shape),
            Version::Autotuned => self.sgemm.plan_autotuned(gpu, shape),
            block => {
                let k = BLOCK_KERNELS.iter().find(|k| k.version == block.name());
                let k = k.ok_or_else(|| anyhow::anyhow!("{} has no tile", block.name()))?;
                self.sgemm.plan_block(gpu, k, shape)
            }
        }
    }
}

common::test_kernel_builds!();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_aligned_form_needs_k_and_n_multiples_of_4() {
        assert_eq!(form(Shape::square(4096)), "v");
        assert_eq!(form(Shape::new(3, 8, 4)), "v");
        assert_eq!(form(Shape::new(4, 8, 6)), "s");
        assert_eq!(form(Shape::new(4, 6, 8)), "s");
    }

    #[test]
    fn every_block_version_has_its_tile() {
        for v in Version::ALL {
            let tiled = BLOCK_KERNELS.iter().any(|k| k.version == v.name());
            let other = matches!(
                v,
                Version::Day07Tiled32
                    | Version::Warptile
                    | Version::Multistage
                    | Version::Autotuned
            );
            assert!(tiled != other, "{v:?}");
        }
    }
}

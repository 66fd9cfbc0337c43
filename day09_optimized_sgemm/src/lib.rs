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

pub const SOURCE: KernelSource = KernelSource {
    file_name: "sgemm.cu",
    code: include_str!("sgemm.cu"),
};

/// What the day compiles: every kernel, for the GPU's own architecture. The loader compiles the
/// same, the compile test checks this list, and `cargo xtask bundle` compiles it ahead of time for
/// the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(SOURCE, all_functions())]
}

/// A block tile shape: `bm x bn` outputs per block of `threads`, `bk` steps of k per tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiling {
    pub bm: usize,
    pub bn: usize,
    pub bk: usize,
    /// Warp tile (warp-tiled kernels only; 0 otherwise).
    pub wm: usize,
    pub wn: usize,
    /// Rows of the warp's 32 lanes (8 x 4 or 4 x 8); 0 for kernels without warp tiles.
    pub lanes_m: usize,
    pub threads: u32,
    /// Tiles in flight through `cp.async` (the multi-stage kernels); 0 for kernels that stage
    /// through registers.
    pub stages: usize,
}

impl Tiling {
    const fn block(bm: usize, bn: usize, threads: u32) -> Self {
        Self {
            bm,
            bn,
            bk: 8,
            wm: 0,
            wn: 0,
            lanes_m: 0,
            threads,
            stages: 0,
        }
    }

    const fn warp(bm: usize, bn: usize, bk: usize, wm: usize, wn: usize) -> Self {
        Self {
            bm,
            bn,
            bk,
            wm,
            wn,
            lanes_m: 8,
            threads: 256,
            stages: 0,
        }
    }

    const fn with_threads(self, threads: u32) -> Self {
        Self { threads, ..self }
    }

    const fn with_lanes_m(self, lanes_m: usize) -> Self {
        Self { lanes_m, ..self }
    }

    const fn multistage(self, stages: usize) -> Self {
        Self { stages, ..self }
    }

    /// `128x128x8_w64x32_l8` (`_s4` with 4 stages), as in the CUDA function names.
    pub fn label(&self) -> String {
        let stages = if self.stages > 0 {
            format!("_s{}", self.stages)
        } else {
            String::new()
        };
        format!(
            "{}x{}x{}_w{}x{}_l{}{stages}",
            self.bm, self.bn, self.bk, self.wm, self.wn, self.lanes_m
        )
    }

    /// Dynamic shared memory: `stages` pairs of tiles (A transposed with 4 words of padding
    /// per row, as `Tiles` in `sgemm.cu`).
    pub fn dynamic_shared_bytes(&self) -> u32 {
        (self.stages * self.bk * ((self.bm + 4) + self.bn) * 4) as u32
    }
}

/// A version of the day: its CUDA function (without the `_v`/`_s` suffix where it has both
/// forms) and its tiling.
struct Variant {
    version: &'static str,
    function: &'static str,
    /// Whether it comes as `_v` (16-byte accesses) and `_s` (4-byte accesses).
    two_forms: bool,
    tiling: Tiling,
}

const VARIANTS: &[Variant] = &[
    Variant {
        version: "tile1d",
        function: "sgemm_tile1d",
        two_forms: false,
        tiling: Tiling::block(64, 64, 512),
    },
    Variant {
        version: "tile2d",
        function: "sgemm_tile2d",
        two_forms: false,
        tiling: Tiling::block(128, 128, 256),
    },
    Variant {
        version: "vec4",
        function: "sgemm_vec4",
        two_forms: true,
        tiling: Tiling::block(128, 128, 256),
    },
    Variant {
        version: "transposed_a",
        function: "sgemm_transposed_a",
        two_forms: true,
        tiling: Tiling::block(128, 128, 256),
    },
    Variant {
        version: "double_buffer",
        function: "sgemm_double_buffer",
        two_forms: true,
        tiling: Tiling::block(128, 128, 256),
    },
];

/// The warp-tile configurations compiled (`WARPTILE` and `MULTISTAGE` in `sgemm.cu`): the
/// first is the `warptile` version, the first multi-stage one the `multistage` version, and
/// `autotuned` picks among all of them.
pub const WARP_TILINGS: [Tiling; 18] = [
    Tiling::warp(128, 128, 8, 64, 32),
    Tiling::warp(128, 128, 16, 64, 32),
    Tiling::warp(128, 128, 8, 32, 64),
    Tiling::warp(128, 256, 8, 64, 64),
    Tiling::warp(256, 128, 8, 64, 64),
    Tiling::warp(128, 64, 16, 32, 32),
    Tiling::warp(64, 128, 16, 32, 32),
    Tiling::warp(128, 128, 8, 64, 64).with_threads(128),
    Tiling::warp(128, 128, 8, 32, 64).with_lanes_m(4),
    Tiling::warp(128, 128, 16, 32, 64).with_lanes_m(4),
    Tiling::warp(128, 256, 8, 64, 64).with_lanes_m(4),
    Tiling::warp(256, 128, 8, 64, 64).with_lanes_m(4),
    Tiling::warp(128, 128, 8, 64, 64)
        .with_threads(128)
        .with_lanes_m(4),
    // The multi-stage (cp.async) kernels; the first is the `multistage` version.
    Tiling::warp(256, 128, 8, 64, 64)
        .with_lanes_m(4)
        .multistage(4),
    Tiling::warp(128, 256, 8, 64, 64)
        .with_lanes_m(4)
        .multistage(4),
    Tiling::warp(256, 128, 8, 64, 64)
        .with_lanes_m(4)
        .multistage(3),
    Tiling::warp(128, 128, 8, 32, 64)
        .with_lanes_m(4)
        .multistage(4),
    Tiling::warp(128, 128, 16, 32, 64)
        .with_lanes_m(4)
        .multistage(3),
];

/// Where the multi-stage kernels start in [`WARP_TILINGS`].
const FIRST_MULTISTAGE: usize = 13;

fn warptile_function(t: &Tiling) -> String {
    let kind = if t.stages > 0 {
        "multistage"
    } else {
        "warptile"
    };
    format!("sgemm_{kind}_{}", t.label())
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
    for v in VARIANTS {
        if v.two_forms {
            names.push(format!("{}_v", v.function));
            names.push(format!("{}_s", v.function));
        } else {
            names.push(v.function.to_string());
        }
    }
    for t in &WARP_TILINGS {
        names.push(format!("{}_v", warptile_function(t)));
        names.push(format!("{}_s", warptile_function(t)));
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
            kernels: KernelSet::load(gpu, &SOURCE, all_functions())?,
            tuned: RefCell::new(HashMap::new()),
        })
    }

    /// One of the block-tiled versions (`tile1d` ... `double_buffer`).
    fn plan_variant<'a>(&'a self, gpu: &'a Gpu, v: &Variant, shape: Shape) -> Result<Plan<'a>> {
        let name = if v.two_forms {
            format!("{}_{}", v.function, form(shape))
        } else {
            v.function.to_string()
        };
        plan_tiled(gpu, self.kernels.get(&name)?, v.tiling, shape)
    }

    /// `warptile` or `multistage` with the tiling `WARP_TILINGS[index]`.
    fn plan_warptile<'a>(&'a self, gpu: &'a Gpu, index: usize, shape: Shape) -> Result<Plan<'a>> {
        let tiling = WARP_TILINGS[index];
        let name = format!("{}_{}", warptile_function(&tiling), form(shape));
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

pub struct Day09 {
    tiled: TiledMatmul,
    sgemm: Sgemm,
}

impl MatmulDay for Day09 {
    const DAY: &'static str = "day09";
    const TITLE: &'static str = "optimized SGEMM";
    const VERSIONS: &'static [&'static str] = &[
        "day07_tiled_32",
        "tile1d",
        "tile2d",
        "vec4",
        "transposed_a",
        "double_buffer",
        "warptile",
        "multistage",
        "autotuned",
    ];
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
        match version {
            "day07_tiled_32" => self.tiled.plan(gpu, 32, shape),
            "warptile" => self.sgemm.plan_warptile(gpu, 0, shape),
            "multistage" => self.sgemm.plan_warptile(gpu, FIRST_MULTISTAGE, shape),
            "autotuned" => self.sgemm.plan_autotuned(gpu, shape),
            other => match VARIANTS.iter().find(|v| v.version == other) {
                Some(v) => self.sgemm.plan_variant(gpu, v, shape),
                None => anyhow::bail!("day09 has no version `{other}`"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_compile_without_spills() {
        common::testing::assert_builds_compile_without_spills(&kernel_builds());
    }

    #[test]
    fn the_aligned_form_needs_k_and_n_multiples_of_4() {
        assert_eq!(form(Shape::square(4096)), "v");
        assert_eq!(form(Shape::new(3, 8, 4)), "v");
        assert_eq!(form(Shape::new(4, 8, 6)), "s");
        assert_eq!(form(Shape::new(4, 6, 8)), "s");
    }

    #[test]
    fn warp_tilings_have_one_warp_per_warp_tile() {
        for t in &WARP_TILINGS {
            assert_eq!(
                (t.bm / t.wm) * (t.bn / t.wn) * 32,
                t.threads as usize,
                "{t:?}"
            );
        }
        assert!(
            WARP_TILINGS[..FIRST_MULTISTAGE]
                .iter()
                .all(|t| t.stages == 0)
        );
        assert!(
            WARP_TILINGS[FIRST_MULTISTAGE..]
                .iter()
                .all(|t| t.stages > 0)
        );
    }

    #[test]
    fn multistage_shared_memory_matches_the_tiles() {
        // 4 x (8 x (256 + 4) + 8 x 128) floats.
        let t = WARP_TILINGS[FIRST_MULTISTAGE];
        assert_eq!(t.dynamic_shared_bytes(), 4 * (8 * 260 + 8 * 128) * 4);
        assert_eq!(WARP_TILINGS[0].dynamic_shared_bytes(), 0);
    }
}

//! Day 7: tiled matmul. A block of T x T threads computes a T x T tile of C through
//! shared-memory tiles of A and B, for T = 8, 16 and 32; day 6's coalesced kernel is the
//! baseline.

use anyhow::Result;
use common::family::matmul::{MatmulDay, Plan, Shape, plan_kernel};
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::{Gpu, Kernel};
use day06::NaiveMatmul;

pub const SOURCE: KernelSource = common::kernel_source!("matmul_tiled.cu");

/// What the day compiles: one kernel per tile for the GPU's own architecture.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(
        SOURCE,
        TILES.iter().map(|&t| function(t)),
    )]
}

common::test_kernel_builds!();

/// The tile sides compiled, and the version names that run them.
pub const TILES: [u32; 3] = [8, 16, 32];
pub const TILED_VERSIONS: [&str; 3] = ["tiled_8", "tiled_16", "tiled_32"];

fn function(tile: u32) -> String {
    format!("matmul_tiled_{tile}")
}

pub struct TiledMatmul {
    kernels: Vec<(u32, Kernel)>,
}

impl TiledMatmul {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let module = gpu.load(&SOURCE)?;
        let kernels = TILES
            .iter()
            .map(|&t| Ok((t, module.kernel(gpu, &function(t))?)))
            .collect::<Result<_>>()?;
        Ok(Self { kernels })
    }

    /// The kernel with tile side `tile` (one of [`TILES`]) on `shape`.
    pub fn plan<'a>(&'a self, gpu: &'a Gpu, tile: u32, shape: Shape) -> Result<Plan<'a>> {
        let kernel = self
            .kernels
            .iter()
            .find_map(|(t, k)| (*t == tile).then_some(k))
            .ok_or_else(|| anyhow::anyhow!("no tiled kernel of side {tile}"))?;
        let side = tile as usize;
        plan_kernel(
            gpu,
            kernel,
            shape,
            (shape.n.div_ceil(side), shape.m.div_ceil(side)),
            (tile, tile, 1),
            0,
            shape.tiled_bytes(side, side),
        )
    }
}

pub struct Day07 {
    naive: NaiveMatmul,
    tiled: TiledMatmul,
}

impl MatmulDay for Day07 {
    const DAY: &'static str = "day07";
    const TITLE: &'static str = "tiled matmul";
    const VERSIONS: &'static [&'static str] =
        &["day06_coalesced", "tiled_8", "tiled_16", "tiled_32"];
    const DEFAULT_PROBLEMS: &'static [Shape] = &[Shape::square(4096), Shape::new(1000, 1001, 999)];

    fn load(gpu: &Gpu) -> Result<Self> {
        let (naive, tiled) = (NaiveMatmul::load(gpu)?, TiledMatmul::load(gpu)?);
        Ok(Self { naive, tiled })
    }

    fn plan<'a>(&'a self, gpu: &'a Gpu, version: &str, shape: Shape) -> Result<Plan<'a>> {
        if version == "day06_coalesced" {
            return self.naive.plan(gpu, true, shape);
        }
        match TILED_VERSIONS.iter().position(|v| *v == version) {
            Some(i) => self.tiled.plan(gpu, TILES[i], shape),
            None => anyhow::bail!("day07 has no version `{version}`"),
        }
    }
}

//! Day 7: tiled matmul. A block of T x T threads computes a T x T tile of C through
//! shared-memory tiles of A and B, for T = 8, 16 and 32; day 6's coalesced kernel is the
//! baseline.

use anyhow::Result;
use common::matmul::{MatmulDay, Plan, Shape, check_sizes};
use common::nvrtc::KernelSource;
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::PushKernelArg;
use day06::NaiveMatmul;

pub const SOURCE: KernelSource = KernelSource {
    file_name: "matmul_tiled.cu",
    code: include_str!("matmul_tiled.cu"),
};

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
        let blocks_y = shape.m.div_ceil(side);
        if blocks_y > 65535 {
            return Err(Refused(format!(
                "m = {} needs {blocks_y} blocks in y, over the grid's 65535",
                shape.m
            ))
            .into());
        }
        let launch_shape = LaunchShape {
            grid: (shape.n.div_ceil(side) as u32, blocks_y as u32, 1),
            block: (tile, tile, 1),
            dynamic_shared_bytes: 0,
        };
        Ok(Plan {
            kernel,
            shape: launch_shape,
            global_bytes: shape.tiled_bytes(side, side),
            launch: Box::new(move |a, b, c| {
                check_sizes(a.len(), b.len(), c.len(), shape)?;
                let (m, n, k) = (shape.m as i32, shape.n as i32, shape.k as i32);
                let mut launch = gpu.stream.launch_builder(&kernel.func);
                launch.arg(a).arg(b).arg(c).arg(&m).arg(&n).arg(&k);
                // SAFETY: matmul_tiled_<T>(const float*, const float*, float*, int m, int n,
                // int k) with a T x T block; sizes checked against the buffers, below 2^31;
                // every load and store is bounds-checked in the kernel.
                unsafe { launch.launch(kernel.config(&launch_shape)?) }?;
                Ok(())
            }),
        })
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
        Ok(Self {
            naive: NaiveMatmul::load(gpu)?,
            tiled: TiledMatmul::load(gpu)?,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_compile_without_spills() {
        let names: Vec<String> = TILES.iter().map(|&t| function(t)).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        common::testing::assert_compiles_without_spills(&SOURCE, "sm_90", &names);
    }
}

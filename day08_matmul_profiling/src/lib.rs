//! Day 8: profiling. No new kernel: every matmul so far (day 6's two naive mappings, day 7's
//! three tile sizes) beside cuBLAS SGEMM, with what the profile of each says: registers, shared
//! memory, occupancy, TFLOP/s, the FLOPs per byte it asks of global memory and those bytes per
//! second, and a roofline of them all (`--roofline FILE`) under the measured copy bandwidth and
//! the FP32 peak. `--sweep` plots TFLOP/s from 256 to 8192.

use anyhow::Result;
use common::Gpu;
use common::family::matmul::{MatmulDay, Plan, Shape};
use day06::NaiveMatmul;
use day07::{TILED_VERSIONS, TILES, TiledMatmul};

pub struct Day08 {
    naive: NaiveMatmul,
    tiled: TiledMatmul,
}

impl MatmulDay for Day08 {
    const DAY: &'static str = "day08";
    const TITLE: &'static str = "matmul profiling";
    const VERSIONS: &'static [&'static str] = &[
        "naive_uncoalesced",
        "naive_coalesced",
        "tiled_8",
        "tiled_16",
        "tiled_32",
    ];
    const DEFAULT_PROBLEMS: &'static [Shape] = &[Shape::square(4096)];

    fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            naive: NaiveMatmul::load(gpu)?,
            tiled: TiledMatmul::load(gpu)?,
        })
    }

    fn plan<'a>(&'a self, gpu: &'a Gpu, version: &str, shape: Shape) -> Result<Plan<'a>> {
        match version {
            "naive_uncoalesced" => self.naive.plan(gpu, false, shape),
            "naive_coalesced" => self.naive.plan(gpu, true, shape),
            other => match TILED_VERSIONS.iter().position(|v| *v == other) {
                Some(i) => self.tiled.plan(gpu, TILES[i], shape),
                None => anyhow::bail!("day08 has no version `{other}`"),
            },
        }
    }
}

//! Day 8: profiling. No new kernel: every matmul so far (day 6's two naive mappings, day 7's
//! three tile sizes) beside cuBLAS SGEMM, with what the profile of each says: registers, shared
//! memory, occupancy, TFLOP/s, the FLOPs per byte it asks of global memory and those bytes per
//! second, and a roofline of them all (`--roofline FILE`) under the measured copy bandwidth and
//! the FP32 peak. `--sweep` plots TFLOP/s from 256 to 8192.

use anyhow::Result;
use common::Gpu;
use common::family::matmul::{MatmulDay, Plan, Shape};
use day06::Day06;
use day07::{TILED_VERSIONS, TILES, TiledMatmul};

/// The day for the shared matmul runner: no kernel of its own.
pub struct Day08 {
    /// Day 6, its two thread mappings under its own names.
    day06: Day06,
    /// Day 7's three tile sizes.
    tiled: TiledMatmul,
}

impl MatmulDay for Day08 {
    const DAY: &'static str = "day08";
    const TITLE: &'static str = "matmul profiling";
    /// The problem of the profiles and the roofline.
    const DEFAULT_PROBLEMS: &'static [Shape] = &[Shape::square(4096)];
    /// Day 6's, then day 7's.
    const VERSIONS: &'static [&'static str] = &[
        "naive_uncoalesced",
        "naive_coalesced",
        "tiled_8",
        "tiled_16",
        "tiled_32",
    ];

    fn load(gpu: &Gpu) -> Result<Self> {
        let (day06, tiled) = (Day06::load(gpu)?, TiledMatmul::load(gpu)?);
        Ok(Self { day06, tiled })
    }

    fn plan<'a>(&'a self, gpu: &'a Gpu, version: &str, shape: Shape) -> Result<Plan<'a>> {
        match TILED_VERSIONS.iter().position(|v| *v == version) {
            Some(i) => self.tiled.plan(gpu, TILES[i], shape),
            None if Day06::VERSIONS.contains(&version) => self.day06.plan(gpu, version, shape),
            None => anyhow::bail!("day08 has no version `{version}`"),
        }
    }
}

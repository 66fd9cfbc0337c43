//! The tiles of `sgemm.cu`: the one table both sides read. The launchers take their grid,
//! block and dynamic shared memory from a [`Tiling`]; the kernel file gets the same numbers as
//! NVRTC defines ([`defines`]): each block-tiled kernel's tile (`-DSG_VEC4_BM=128`, ...), and
//! the warp-tile kernels themselves, one `WARPTILE(...)` or `MULTISTAGE(...)` instantiation
//! per entry of [`WARP_TILINGS`] (`-DSG_WARPTILES=...`, `-DSG_MULTISTAGES=...`), so a tiling
//! is compiled exactly when the table lists it. The kernels `static_assert` that their thread
//! mapping covers the tile and that a multi-stage block's tiles take exactly the shared memory
//! the launcher gives; compiled without the defines, `sgemm.cu` stops at an `#error`.

use common::gpu::tile::{Defines, Violations};

/// Static shared memory a block may hold without opting in: 48 KiB.
const STATIC_SHARED_BYTES: usize = 48 * 1024;

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
    /// Blocks per SM the warp-tile kernels' launch bounds ask ptxas to fit (registers capped
    /// to match); 0 for the block-tiled kernels, whose bounds `sgemm.cu` keeps.
    pub min_blocks: usize,
}

impl Tiling {
    pub const fn block(bm: usize, bn: usize, threads: u32) -> Self {
        Self {
            bm,
            bn,
            bk: 8,
            wm: 0,
            wn: 0,
            lanes_m: 0,
            threads,
            stages: 0,
            min_blocks: 0,
        }
    }

    /// A warp tiling, `[bm, bn, bk, wm, wn, lanes_m, threads, stages, min_blocks]` (stages 0:
    /// the register-staged `warptile` kernel).
    const fn warp(t: [usize; 9]) -> Self {
        let [bm, bn, bk, wm, wn, lanes_m, threads, stages, min_blocks] = t;
        Self {
            bm,
            bn,
            bk,
            wm,
            wn,
            lanes_m,
            threads: threads as u32,
            stages,
            min_blocks,
        }
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

    /// One pair of shared tiles: A transposed with 4 words of padding per row, and B, as
    /// `Tiles` in `sgemm.cu`.
    pub const fn tile_pair_bytes(&self) -> usize {
        self.bk * ((self.bm + 4) + self.bn) * 4
    }

    /// Dynamic shared memory: `stages` pairs of tiles.
    pub fn dynamic_shared_bytes(&self) -> u32 {
        (self.stages * self.tile_pair_bytes()) as u32
    }

    /// The CUDA function (without the `_v`/`_s` suffix) of a warp tiling.
    pub fn warp_function(&self) -> String {
        let kind = if self.stages > 0 {
            "multistage"
        } else {
            "warptile"
        };
        format!("sgemm_{kind}_{}", self.label())
    }

    /// The kernel file's instantiation of this warp tiling.
    fn instantiation(&self) -> String {
        let common = format!(
            "{},{},{},{},{},{},{}",
            self.bm, self.bn, self.bk, self.wm, self.wn, self.lanes_m, self.threads
        );
        if self.stages > 0 {
            format!(
                "MULTISTAGE({common},{},{},{})",
                self.stages,
                self.min_blocks,
                self.dynamic_shared_bytes()
            )
        } else {
            format!("WARPTILE({common},{})", self.min_blocks)
        }
    }

    /// What stops this warp tiling from compiling or running, as the kernel's
    /// `static_assert`s check it (one line each; empty when it fits).
    pub fn warp_violations(&self) -> Vec<String> {
        let mut v = Violations::new(format_args!("tiling {}", self.label()));
        let threads = self.threads as usize;
        v.require([4, 8].contains(&self.lanes_m), || {
            format!("lanes of {} rows: 4 x 8 or 8 x 4", self.lanes_m)
        });
        v.require(
            self.wm > 0 && self.wn > 0 && (self.bm / self.wm) * (self.bn / self.wn) * 32 == threads,
            || format!("{threads} threads are not one warp per warp tile"),
        );
        if let Some(lanes_n) = 32usize.checked_div(self.lanes_m) {
            v.require(
                self.wm.is_multiple_of(4 * self.lanes_m) && self.wn.is_multiple_of(4 * lanes_n),
                || "the lanes' 4 x 4 sub-tiles do not cover the warp tile".into(),
            );
        }
        v.require(
            (self.bm * self.bk / 4).is_multiple_of(threads)
                && (self.bk * self.bn / 4).is_multiple_of(threads),
            || "the tiles do not split evenly into float4s over the threads".into(),
        );
        if self.stages > 0 {
            // cp.async.wait_group leaves STAGES - 2 groups in flight.
            v.require(self.stages >= 2, || {
                "a pipeline of at least 2 stages".into()
            });
            v.shared_bytes(self.dynamic_shared_bytes() as usize);
        } else {
            v.require(2 * self.tile_pair_bytes() <= STATIC_SHARED_BYTES, || {
                "two pairs of tiles over the 48 KiB of static shared memory".into()
            });
        }
        v.require((1..=2).contains(&self.min_blocks), || {
            format!("{} blocks per SM asked", self.min_blocks)
        });
        v.into_lines()
    }
}

/// The block-tiled versions: the version, its CUDA function (without the `_v`/`_s` suffix
/// where it has both forms), whether it has both forms (16-byte and 4-byte accesses), its tile
/// (`SG_{FUNCTION}_*` in the defines) and the outputs a thread computes (`tm x tn`).
pub struct BlockKernel {
    pub version: &'static str,
    pub function: &'static str,
    pub two_forms: bool,
    pub tiling: Tiling,
    pub thread_outputs: (usize, usize),
}

impl BlockKernel {
    fn prefix(&self) -> String {
        let name = self.function.trim_start_matches("sgemm_");
        format!("SG_{}", name.to_uppercase())
    }

    /// What stops this tile from fitting the kernel's thread mapping (empty when it fits).
    pub fn violations(&self) -> Vec<String> {
        let t = self.tiling;
        let (tm, tn) = self.thread_outputs;
        let threads = t.threads as usize;
        let mut v = Violations::new(self.version);
        v.require((t.bm / tm) * (t.bn / tn) == threads, || {
            format!("{threads} threads do not cover the {}x{} tile", t.bm, t.bn)
        });
        // tile1d loads one element of each tile a thread, the others one float4 (tile2d
        // several elements).
        let per_thread = if self.two_forms { 4 } else { 1 };
        v.require(
            (t.bm * t.bk).is_multiple_of(threads * per_thread)
                && (t.bk * t.bn).is_multiple_of(threads * per_thread),
            || "the tiles do not split evenly over the threads".into(),
        );
        v.require(2 * t.tile_pair_bytes() <= STATIC_SHARED_BYTES, || {
            "the tiles are over the 48 KiB of static shared memory".into()
        });
        v.into_lines()
    }
}

pub const BLOCK_KERNELS: &[BlockKernel] = &[
    BlockKernel {
        version: "tile1d",
        function: "sgemm_tile1d",
        two_forms: false,
        tiling: Tiling::block(64, 64, 512),
        thread_outputs: (8, 1),
    },
    BlockKernel {
        version: "tile2d",
        function: "sgemm_tile2d",
        two_forms: false,
        tiling: Tiling::block(128, 128, 256),
        thread_outputs: (8, 8),
    },
    BlockKernel {
        version: "vec4",
        function: "sgemm_vec4",
        two_forms: true,
        tiling: Tiling::block(128, 128, 256),
        thread_outputs: (8, 8),
    },
    BlockKernel {
        version: "transposed_a",
        function: "sgemm_transposed_a",
        two_forms: true,
        tiling: Tiling::block(128, 128, 256),
        thread_outputs: (8, 8),
    },
    BlockKernel {
        version: "double_buffer",
        function: "sgemm_double_buffer",
        two_forms: true,
        tiling: Tiling::block(128, 128, 256),
        thread_outputs: (8, 8),
    },
];

/// The warp-tile configurations compiled, one row each: block `bm x bn x bk`, warp `wm x wn`,
/// lanes `lanes_m x (32 / lanes_m)`, threads (32 per warp), stages, blocks per SM. The first
/// is the `warptile` version, the first multi-stage one the `multistage` version, and
/// `autotuned` times them all on the problem and keeps the fastest.
#[rustfmt::skip]
pub const WARP_TILINGS: [Tiling; 18] = [
    //             bm   bn  bk  wm  wn  lm  thr stg min
    Tiling::warp([128, 128,  8, 64, 32, 8, 256, 0, 2]),
    Tiling::warp([128, 128, 16, 64, 32, 8, 256, 0, 1]),
    Tiling::warp([128, 128,  8, 32, 64, 8, 256, 0, 2]),
    Tiling::warp([128, 256,  8, 64, 64, 8, 256, 0, 1]),
    Tiling::warp([256, 128,  8, 64, 64, 8, 256, 0, 1]),
    Tiling::warp([128,  64, 16, 32, 32, 8, 256, 0, 2]),
    Tiling::warp([ 64, 128, 16, 32, 32, 8, 256, 0, 2]),
    Tiling::warp([128, 128,  8, 64, 64, 8, 128, 0, 2]),
    Tiling::warp([128, 128,  8, 32, 64, 4, 256, 0, 2]),
    Tiling::warp([128, 128, 16, 32, 64, 4, 256, 0, 1]),
    Tiling::warp([128, 256,  8, 64, 64, 4, 256, 0, 1]),
    Tiling::warp([256, 128,  8, 64, 64, 4, 256, 0, 1]),
    Tiling::warp([128, 128,  8, 64, 64, 4, 128, 0, 2]),
    // The multi-stage (cp.async) kernels; the first is the `multistage` version.
    Tiling::warp([256, 128,  8, 64, 64, 4, 256, 4, 1]),
    Tiling::warp([128, 256,  8, 64, 64, 4, 256, 4, 1]),
    Tiling::warp([256, 128,  8, 64, 64, 4, 256, 3, 1]),
    Tiling::warp([128, 128,  8, 32, 64, 4, 256, 4, 2]),
    Tiling::warp([128, 128, 16, 32, 64, 4, 256, 3, 1]),
];

/// Where the multi-stage kernels start in [`WARP_TILINGS`].
pub const FIRST_MULTISTAGE: usize = 13;

/// The NVRTC options that give `sgemm.cu` its tiles: each block-tiled kernel's tile, and the
/// warp-tile kernels to instantiate, in the table's order.
pub fn defines() -> Vec<String> {
    let mut defines = Vec::new();
    for k in BLOCK_KERNELS {
        let t = k.tiling;
        defines.extend(
            Defines::new(k.prefix())
                .set("BM", t.bm)
                .set("BN", t.bn)
                .set("BK", t.bk)
                .set("THREADS", t.threads as usize)
                .into_vec(),
        );
    }
    let (warp, multi) = WARP_TILINGS.split_at(FIRST_MULTISTAGE);
    for (name, tilings) in [("WARPTILES", warp), ("MULTISTAGES", multi)] {
        let list: Vec<String> = tilings.iter().map(Tiling::instantiation).collect();
        defines.push(format!("-DSG_{name}={}", list.join(" ")));
    }
    defines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tile_fits() {
        for k in BLOCK_KERNELS {
            assert_eq!(k.violations(), Vec::<String>::new(), "{}", k.version);
        }
        for t in &WARP_TILINGS {
            assert_eq!(t.warp_violations(), Vec::<String>::new(), "{t:?}");
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
    fn tiles_that_do_not_fit_are_named() {
        let t = WARP_TILINGS[0];
        let lines = Tiling { threads: 128, ..t }.warp_violations();
        assert!(
            lines.iter().any(|l| l.contains("one warp per warp tile")),
            "{lines:?}"
        );
        let deep = Tiling {
            stages: 20,
            ..WARP_TILINGS[FIRST_MULTISTAGE]
        };
        let lines = deep.warp_violations();
        assert!(
            lines.iter().any(|l| l.contains("shared memory")),
            "{lines:?}"
        );
        let wide = Tiling {
            bk: 32,
            bm: 256,
            ..t
        };
        assert!(!wide.warp_violations().is_empty());
        let vec4 = &BLOCK_KERNELS[2];
        let odd = BlockKernel {
            tiling: Tiling::block(128, 128, 128),
            ..*vec4
        };
        assert!(odd.violations().iter().any(|l| l.contains("do not cover")));
    }

    #[test]
    fn multistage_shared_memory_matches_the_tiles() {
        // 4 x (8 x (256 + 4) + 8 x 128) floats.
        let t = WARP_TILINGS[FIRST_MULTISTAGE];
        assert_eq!(t.dynamic_shared_bytes(), 4 * (8 * 260 + 8 * 128) * 4);
        assert_eq!(WARP_TILINGS[0].dynamic_shared_bytes(), 0);
    }

    #[test]
    fn the_defines_carry_every_tile_and_instantiation() {
        let d = defines();
        assert_eq!(d.len(), 4 * BLOCK_KERNELS.len() + 2);
        assert!(d.contains(&"-DSG_TILE1D_THREADS=512".to_string()));
        assert!(d.contains(&"-DSG_DOUBLE_BUFFER_BM=128".to_string()));
        let warp = d.iter().find(|x| x.starts_with("-DSG_WARPTILES=")).unwrap();
        assert!(warp.starts_with("-DSG_WARPTILES=WARPTILE(128,128,8,64,32,8,256,2) "));
        assert_eq!(warp.matches("WARPTILE(").count(), FIRST_MULTISTAGE);
        let multi = d
            .iter()
            .find(|x| x.starts_with("-DSG_MULTISTAGES="))
            .unwrap();
        assert!(
            multi.contains("MULTISTAGE(256,128,8,64,64,4,256,4,1,49664)"),
            "{multi}"
        );
    }
}

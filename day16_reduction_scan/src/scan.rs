//! The launchers of `scan.cu`: the inclusive prefix sum of f32 or i32, three ways and a faster look-back.

use anyhow::{Result, bail};
use common::gpu::nvrtc::KernelSource;
use common::measure::check::{self, CheckReport};
use common::reference::reduce as reference;
use common::{Element, Gpu, Kernel, LaunchShape};
use cudarc::driver::{CudaSlice, DeviceRepr, PushKernelArg, ValidAsZeroBits};

pub const SOURCE: KernelSource = KernelSource {
    file_name: "scan.cu",
    code: include_str!("scan.cu"),
};

/// Threads per block of every scan kernel, and elements per tile (16 per thread): as in
/// `scan.cu`.
pub const THREADS: u32 = 256;
pub const TILE: usize = 4096;
/// The tile of `decoupled_lookback_fast`: 32 elements per thread.
pub const FAST_TILE: usize = 8192;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanVersion {
    SingleBlock,
    Hierarchical,
    DecoupledLookback,
    DecoupledLookbackFast,
    /// `decoupled_lookback` with one of `decoupled_lookback_fast`'s three changes each.
    LookbackOnlyRelaxed,
    LookbackOnlyTile8192,
    LookbackOnlyWaitNearest,
    /// The fast look-back in persistent blocks, the next tile loading while this one is
    /// scanned, looked back for and stored.
    DecoupledLookbackPipe,
}

impl ScanVersion {
    pub const ALL: &'static [ScanVersion] = &[
        ScanVersion::SingleBlock,
        ScanVersion::Hierarchical,
        ScanVersion::DecoupledLookback,
        ScanVersion::DecoupledLookbackFast,
        ScanVersion::LookbackOnlyRelaxed,
        ScanVersion::LookbackOnlyTile8192,
        ScanVersion::LookbackOnlyWaitNearest,
        ScanVersion::DecoupledLookbackPipe,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ScanVersion::SingleBlock => "single_block",
            ScanVersion::Hierarchical => "hierarchical",
            ScanVersion::DecoupledLookback => "decoupled_lookback",
            ScanVersion::DecoupledLookbackFast => "decoupled_lookback_fast",
            ScanVersion::LookbackOnlyRelaxed => "lookback_only_relaxed",
            ScanVersion::LookbackOnlyTile8192 => "lookback_only_tile8192",
            ScanVersion::LookbackOnlyWaitNearest => "lookback_only_wait_nearest",
            ScanVersion::DecoupledLookbackPipe => "decoupled_lookback_pipe",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.name() == name)
    }

    /// The CUDA function (without its `_f32`/`_i32`) doing the bulk of the work.
    fn function(self) -> &'static str {
        match self {
            ScanVersion::SingleBlock => "scan_single_block",
            ScanVersion::Hierarchical => "scan_tiles",
            ScanVersion::DecoupledLookback => "scan_decoupled_lookback",
            ScanVersion::DecoupledLookbackFast => "scan_decoupled_lookback_fast",
            ScanVersion::LookbackOnlyRelaxed => "scan_lookback_only_relaxed",
            ScanVersion::LookbackOnlyTile8192 => "scan_lookback_only_tile8192",
            ScanVersion::LookbackOnlyWaitNearest => "scan_lookback_only_wait_nearest",
            ScanVersion::DecoupledLookbackPipe => "scan_decoupled_lookback_pipe",
        }
    }

    /// Elements per tile (per block).
    pub fn tile(self) -> usize {
        match self {
            ScanVersion::DecoupledLookbackFast
            | ScanVersion::LookbackOnlyTile8192
            | ScanVersion::DecoupledLookbackPipe => FAST_TILE,
            _ => TILE,
        }
    }
}

/// The element types the scan kernels are instantiated for (4-byte, 16 bytes a pack).
pub trait ScanElement: Element + DeviceRepr + ValidAsZeroBits {}
impl ScanElement for f32 {}
impl ScanElement for i32 {}

/// Every CUDA function of `scan.cu`.
pub fn functions() -> Vec<String> {
    ["f32", "i32"]
        .iter()
        .flat_map(|t| {
            [
                "scan_single_block",
                "scan_tiles",
                "add_tile_prefixes",
                "scan_decoupled_lookback",
                "scan_decoupled_lookback_fast",
                "scan_lookback_only_relaxed",
                "scan_lookback_only_tile8192",
                "scan_lookback_only_wait_nearest",
                "scan_decoupled_lookback_pipe",
            ]
            .map(|f| format!("{f}_{t}"))
        })
        .collect()
}

/// The tile totals of one level of the hierarchical scan and their scan.
struct Level<T> {
    totals: CudaSlice<T>,
    prefixes: CudaSlice<T>,
}

/// Buffers made once per problem size, never inside a timed run.
pub struct ScanScratch<T> {
    /// Look-back state: `[0]` the ticket counter, `[1 + t]` tile t's status word; sized for
    /// the smaller tile (4096), so it also holds the fast look-back's fewer tiles.
    state: CudaSlice<u64>,
    /// The hierarchical scan's levels: tile totals of the input, of those totals, ... down to
    /// one tile.
    levels: Vec<Level<T>>,
    n: usize,
}

/// The scan kernels, compiled and loaded for one GPU.
pub struct Scans {
    kernels: common::gpu::kernel::KernelSet,
    sms: usize,
}

impl Scans {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: common::gpu::kernel::KernelSet::load(gpu, &SOURCE, functions())?,
            sms: gpu.info.sms as usize,
        })
    }

    fn kernel<T: ScanElement>(&self, function: &str) -> Result<&Kernel> {
        self.kernels.get(&format!("{function}_{}", T::NAME))
    }

    /// Scratch for scans of `n` elements of T.
    pub fn scratch<T: ScanElement>(&self, gpu: &Gpu, n: usize) -> Result<ScanScratch<T>> {
        let mut levels = Vec::new();
        let mut len = n.max(1);
        loop {
            let tiles = len.div_ceil(TILE);
            levels.push(Level {
                totals: gpu.alloc_poisoned(tiles)?,
                prefixes: gpu.alloc_poisoned(tiles)?,
            });
            if tiles == 1 {
                break;
            }
            len = tiles;
        }
        Ok(ScanScratch {
            // SAFETY: zeroed by the launcher before every launch that reads it.
            state: gpu
                .stream
                .alloc_zeros(n.div_ceil(TILE.min(FAST_TILE)) + 1)?,
            levels,
            n,
        })
    }

    /// The function doing the bulk of `version`'s work, and its launch shape on `n`.
    pub fn plan<T: ScanElement>(
        &self,
        version: ScanVersion,
        n: usize,
    ) -> Result<(&Kernel, LaunchShape)> {
        let tiles = n.div_ceil(version.tile());
        if tiles > i32::MAX as usize {
            bail!("scan: {n} elements need more than 2^31 - 1 tiles");
        }
        let kernel = self.kernel::<T>(version.function())?;
        let shape = match version {
            ScanVersion::SingleBlock => LaunchShape::linear(1, THREADS),
            // Persistent: the blocks the GPU holds at once (at most one per tile) take tiles
            // by ticket; two tiles of shared memory each.
            ScanVersion::DecoupledLookbackPipe => {
                let shared = (2 * FAST_TILE * size_of::<T>()) as u32;
                let per_sm = kernel.blocks_per_sm(THREADS, shared)?.max(1) as usize;
                let blocks = (per_sm * self.sms).min(tiles).max(1);
                LaunchShape {
                    grid: (blocks as u32, 1, 1),
                    block: (THREADS, 1, 1),
                    dynamic_shared_bytes: shared,
                }
            }
            _ => LaunchShape::linear(tiles as u32, THREADS),
        };
        Ok((kernel, shape))
    }

    /// The most f32 roundings that output `i` goes through in `version`'s order (see
    /// `common::reference::reduce`). Within a tile, at most 32: 3 in a pack, 5 in the warp
    /// scan, 3 carries, 8 warp totals, and the offsets added at the store. The single block
    /// and the look-back then chain one tile's prefix onto the next: one more rounding per
    /// tile before (a look-back that skips tiles adds their aggregates as a tree, fewer). The
    /// hierarchical scan instead nests a scan of tile totals per level, 64 per level. The
    /// fast look-back's tile of 8 packs adds 4 carries, still under 32 within the tile, then
    /// one rounding per (larger) tile before.
    pub fn depth(version: ScanVersion, n: usize, i: usize) -> u64 {
        match version {
            ScanVersion::SingleBlock
            | ScanVersion::DecoupledLookback
            | ScanVersion::DecoupledLookbackFast
            | ScanVersion::LookbackOnlyRelaxed
            | ScanVersion::LookbackOnlyTile8192
            | ScanVersion::LookbackOnlyWaitNearest
            | ScanVersion::DecoupledLookbackPipe => 64 + (i / version.tile()) as u64,
            ScanVersion::Hierarchical => {
                let (mut len, mut levels) = (n.max(1), 0u64);
                loop {
                    levels += 1;
                    len = len.div_ceil(TILE);
                    if len == 1 {
                        break 64 * levels;
                    }
                }
            }
        }
    }

    /// `out[i] = x[0] + ... + x[i]` with `version`.
    pub fn scan<T: ScanElement>(
        &self,
        gpu: &Gpu,
        version: ScanVersion,
        x: &CudaSlice<T>,
        out: &mut CudaSlice<T>,
        scratch: &mut ScanScratch<T>,
    ) -> Result<()> {
        let n = x.len();
        if n == 0 || out.len() != n {
            bail!(
                "scan: an input of {n} and an output of {} elements: lengths must be equal and \
                 non-zero",
                out.len()
            );
        }
        if scratch.n != n {
            bail!(
                "scan: scratch made for {} elements, used for {n}",
                scratch.n
            );
        }
        match version {
            ScanVersion::SingleBlock => {
                let (kernel, shape) = self.plan::<T>(version, n)?;
                let n64 = n as u64;
                let mut launch = gpu.stream.launch_builder(&kernel.func);
                launch.arg(x).arg(out).arg(&n64);
                // SAFETY: (const T* in, T* out, both of n, index_t n).
                unsafe { launch.launch(kernel.config(&shape)?) }?;
                Ok(())
            }
            ScanVersion::Hierarchical => self.hierarchical(gpu, x, out, n, &mut scratch.levels),
            ScanVersion::DecoupledLookback
            | ScanVersion::DecoupledLookbackFast
            | ScanVersion::LookbackOnlyRelaxed
            | ScanVersion::LookbackOnlyTile8192
            | ScanVersion::LookbackOnlyWaitNearest
            | ScanVersion::DecoupledLookbackPipe => {
                // The ticket and every tile's flag start at 0 (X) for this launch, on the same
                // stream, so the memset is ordered before the kernel.
                gpu.stream.memset_zeros(&mut scratch.state)?;
                let (kernel, shape) = self.plan::<T>(version, n)?;
                let n64 = n as u64;
                let mut launch = gpu.stream.launch_builder(&kernel.func);
                launch.arg(x).arg(out).arg(&n64).arg(&mut scratch.state);
                // SAFETY: (const T* in, T* out, both of n, index_t n, u64* state of
                // ceil(n / 4096) + 1 words, at least 1 + the tiles of any version); one block
                // per tile of the version (4096 or 8192 elements), or for the pipelined one
                // persistent blocks with 2 tiles of dynamic shared memory, which stop at the
                // first ticket past the last tile (only the counter sees those tickets).
                unsafe { launch.launch(kernel.config(&shape)?) }?;
                Ok(())
            }
        }
    }

    /// Scan the tiles of `src` into `out` (tile totals into this level), scan the totals
    /// into this level's prefixes (recursively), add each tile's prefix to the tiles after it.
    fn hierarchical<T: ScanElement>(
        &self,
        gpu: &Gpu,
        src: &CudaSlice<T>,
        out: &mut CudaSlice<T>,
        n: usize,
        levels: &mut [Level<T>],
    ) -> Result<()> {
        let Some((level, deeper)) = levels.split_first_mut() else {
            bail!("scan: the hierarchical scratch has too few levels for {n} elements");
        };
        let tiles = n.div_ceil(TILE);
        let n64 = n as u64;
        let kernel = self.kernel::<T>("scan_tiles")?;
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch
            .arg(src)
            .arg(&mut *out)
            .arg(&n64)
            .arg(&mut level.totals);
        // SAFETY: (const T* in, T* out, both of >= n, index_t n, T* totals of >= tiles); one
        // block per tile; src and out are different buffers.
        unsafe { launch.launch(kernel.config(&LaunchShape::linear(tiles as u32, THREADS))?) }?;
        if tiles == 1 {
            return Ok(());
        }
        let Level { totals, prefixes } = level;
        self.hierarchical(gpu, totals, prefixes, tiles, deeper)?;
        let add = self.kernel::<T>("add_tile_prefixes")?;
        let mut launch = gpu.stream.launch_builder(&add.func);
        launch.arg(&mut *out).arg(&n64).arg(&*prefixes);
        // SAFETY: (T* out of n, index_t n, const T* prefixes of tiles); block b adds
        // prefixes[b] to tile b + 1, for b < tiles - 1.
        unsafe { launch.launch(add.config(&LaunchShape::linear(tiles as u32 - 1, THREADS))?) }?;
        Ok(())
    }
}

/// The f64 reference of one scan input and each version's check against it: exact where the
/// scan cannot round (integers; f32 inputs on a grid while the prefixes stay small, see
/// `common::reference::reduce::exact_scan_len`), and elsewhere each output within its own
/// bound `gamma(depth(i)) * sum_(j <= i) |x_j|`, not a tolerance that covers the largest.
pub struct ScanReference {
    pub prefix: Vec<f64>,
    abs: Vec<f64>,
    exact_len: usize,
}

impl ScanReference {
    pub fn new<T: ScanElement>(x: &[T]) -> Self {
        let (prefix, abs) = reference::inclusive_scan(x);
        let exact_len = if T::DTYPE.is_integer() {
            x.len()
        } else {
            reference::exact_scan_len(x, &prefix)
        };
        Self {
            prefix,
            abs,
            exact_len,
        }
    }

    /// Outputs that must match exactly, from the first.
    pub fn exact_len(&self) -> usize {
        self.exact_len
    }

    /// `got` (the output of `version`) against the reference.
    pub fn check<T: Element>(&self, got: &[T], version: ScanVersion) -> CheckReport {
        let n = self.prefix.len();
        if self.exact_len == n {
            return check::compare(got, &self.prefix, &[n], reference::EXACT);
        }
        let bounds =
            reference::scan_bounds(&self.abs, self.exact_len, |i| Scans::depth(version, n, i));
        let tolerance = reference::slack_tolerance(&self.prefix, &bounds);
        check::compare_with_slack(got, &self.prefix, &bounds, &[n], tolerance)
    }
}

/// The f32 scan's default inputs: quarters `+-0.25 .. +-2`, never 0, mean 0, so that the
/// prefixes wander like a random walk (about 1.3 sqrt(n): 2e4 at 2^28) and every partial sum
/// stays an exact f32: every output of every version must match the exact scan bit for bit,
/// and one element lost or counted twice is off by at least 0.25.
pub fn quarter_inputs(n: usize, seed: u64) -> Vec<f32> {
    let k: Vec<i32> = common::measure::inputs::uniform(n, 0.51, 16.49, seed);
    k.into_iter()
        .map(|k| {
            let q = if k <= 8 { -k } else { k - 8 };
            q as f32 / 4.0
        })
        .collect()
}

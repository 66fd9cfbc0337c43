//! The launchers of `scan.cu`: the inclusive prefix sum of f32 or i32, three ways and a faster
//! look-back.

use crate::reference;
use anyhow::{Result, bail};
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::gpu::tile::file_define;
use common::measure::check::{self, CheckReport};
use common::{Element, Gpu, Kernel, LaunchShape, Tolerance};
use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};

pub const SOURCE: KernelSource = common::kernel_source!("scan.cu");

/// The scan kernels' layout, held here once: `scan.cu` gets it as NVRTC defines ([`build`]).
/// Threads per block of every scan kernel; 16-byte packs a thread scans (4 elements each) in
/// the 4096-element tile, and in the fast look-back's 8192-element tile.
pub const THREADS: u32 = 256;
const PACKS: usize = 4;
const FAST_PACKS: usize = 8;
pub const TILE: usize = THREADS as usize * 4 * PACKS;
/// The tile of `decoupled_lookback_fast`: 32 elements per thread.
pub const FAST_TILE: usize = THREADS as usize * 4 * FAST_PACKS;
/// The pipelined look-back's dynamic shared memory: two fast tiles of 4-byte elements.
const PIPE_SHARED_BYTES: usize = 2 * FAST_TILE * 4;

/// `scan.cu`, every kernel, with the layout above as `-DSCAN_LAYOUT_...` defines.
pub fn build() -> KernelBuild {
    let defines = [
        ("THREADS", THREADS as usize),
        ("PACKS", PACKS),
        ("FAST_PACKS", FAST_PACKS),
        ("PIPE_SHARED_BYTES", PIPE_SHARED_BYTES),
    ]
    .map(|(name, value)| file_define("SCAN_LAYOUT", name, value));
    KernelBuild::device(SOURCE, functions()).with_options(defines.to_vec())
}

common::versions! {
    pub enum ScanVersion {
        SingleBlock => "single_block",
        Hierarchical => "hierarchical",
        DecoupledLookback => "decoupled_lookback",
        DecoupledLookbackFast => "decoupled_lookback_fast",
        /// `decoupled_lookback` with one of `decoupled_lookback_fast`'s three changes each.
        LookbackOnlyRelaxed => "lookback_only_relaxed",
        LookbackOnlyTile8192 => "lookback_only_tile8192",
        LookbackOnlyWaitNearest => "lookback_only_wait_nearest",
        /// The fast look-back in persistent blocks, the next tile loading while this one is
        /// scanned, looked back for and stored.
        DecoupledLookbackPipe => "decoupled_lookback_pipe",
    }
}

impl ScanVersion {
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

common::kernel_args! {
    /// `scan_single_block_<t>(const T* in, T* out, index_t n)`
    fn scan_single_block<T>(input: &CudaSlice<T>, out: &mut CudaSlice<T>, n: u64);
    /// `scan_tiles_<t>(const T* in, T* out, index_t n, T* tile_totals)`
    fn scan_tiles<T>(
        input: &CudaSlice<T>,
        out: &mut CudaSlice<T>,
        n: u64,
        totals: &mut CudaSlice<T>,
    );
    /// `add_tile_prefixes_<t>(T* out, index_t n, const T* tile_prefixes)`
    fn add_tile_prefixes<T>(out: &mut CudaSlice<T>, n: u64, prefixes: &CudaSlice<T>);
    /// `scan_<look-back version>_<t>(const T* in, T* out, index_t n, unsigned long long* state)`
    fn scan_look_back<T>(
        input: &CudaSlice<T>,
        out: &mut CudaSlice<T>,
        n: u64,
        state: &mut CudaSlice<u64>,
    );
}

/// The tile totals of one level of the hierarchical scan and their scan.
struct Level<T> {
    totals: CudaSlice<T>,
    prefixes: CudaSlice<T>,
}

/// One scan version planned for `n` elements of T: the kernel doing the bulk of the work and
/// its launch shape, and the buffers it keeps between launches (made here, never inside a
/// timed run).
pub struct ScanPlan<'a, T> {
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    version: ScanVersion,
    n: usize,
    /// Look-back state: `[0]` the ticket counter, `[1 + t]` tile t's status word.
    state: CudaSlice<u64>,
    /// The hierarchical scan's levels: tile totals of the input, of those totals, ... down to
    /// one tile; and the kernel adding each tile's prefix.
    levels: Vec<Level<T>>,
    add: &'a Kernel,
}

/// The scan kernels, compiled and loaded for one GPU.
pub struct Scans {
    kernels: common::gpu::kernel::KernelSet,
    sms: usize,
}

impl Scans {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: common::gpu::kernel::KernelSet::load_build(gpu, &build())?,
            sms: gpu.info.sms as usize,
        })
    }

    fn kernel<T: ScanElement>(&self, function: &str) -> Result<&Kernel> {
        self.kernels.get(&format!("{function}_{}", T::NAME))
    }

    /// Plans `version` on `n` elements of T.
    pub fn plan<T: ScanElement>(
        &self,
        gpu: &Gpu,
        version: ScanVersion,
        n: usize,
    ) -> Result<ScanPlan<'_, T>> {
        if n == 0 {
            bail!("scan: an input of 0 elements: lengths must be non-zero");
        }
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
                let shared = PIPE_SHARED_BYTES as u32;
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
        let mut levels = Vec::new();
        if version == ScanVersion::Hierarchical {
            let mut len = n;
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
        }
        Ok(ScanPlan {
            kernel,
            shape,
            version,
            n,
            // Zeroed before every launch that reads it; one status word per tile.
            state: gpu.stream.alloc_zeros(tiles + 1)?,
            levels,
            add: self.kernel::<T>("add_tile_prefixes")?,
        })
    }

    /// The most f32 roundings that output `i` goes through in `version`'s order (see
    /// [`crate::reference`]). Within a tile, at most 32: 3 in a pack, 5 in the warp
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
}

impl<T: ScanElement> ScanPlan<'_, T> {
    /// `out[i] = x[0] + ... + x[i]`.
    pub fn launch(&mut self, gpu: &Gpu, x: &CudaSlice<T>, out: &mut CudaSlice<T>) -> Result<()> {
        let n = self.n;
        if x.len() != n || out.len() != n {
            bail!(
                "scan: an input of {} and an output of {} elements: lengths must be equal and \
                 the planned {n}",
                x.len(),
                out.len()
            );
        }
        let n64 = n as u64;
        match self.version {
            ScanVersion::SingleBlock => {
                // SAFETY: x and out hold n elements (checked above).
                unsafe { scan_single_block(gpu, self.kernel, &self.shape, x, out, n64) }
            }
            ScanVersion::Hierarchical => {
                hierarchical(gpu, self.kernel, self.add, x, out, n, &mut self.levels)
            }
            _ => {
                // The ticket and every tile's flag start at 0 (X) for this launch, on the same
                // stream, so the memset is ordered before the kernel.
                gpu.stream.memset_zeros(&mut self.state)?;
                let state = &mut self.state;
                // SAFETY: x and out hold n elements (checked above), state 1 + the tiles of
                // this version; one block per tile (4096 or 8192 elements), or for the
                // pipelined one persistent blocks with 2 tiles of dynamic shared memory, which
                // stop at the first ticket past the last tile (only the counter sees those
                // tickets).
                unsafe { scan_look_back(gpu, self.kernel, &self.shape, x, out, n64, state) }
            }
        }
    }
}

/// Scan the tiles of `src` into `out` (tile totals into this level), scan the totals into this
/// level's prefixes (recursively), add each tile's prefix to the tiles after it.
fn hierarchical<T: ScanElement>(
    gpu: &Gpu,
    tiles_kernel: &Kernel,
    add: &Kernel,
    src: &CudaSlice<T>,
    out: &mut CudaSlice<T>,
    n: usize,
    levels: &mut [Level<T>],
) -> Result<()> {
    let Some((level, deeper)) = levels.split_first_mut() else {
        bail!("scan: the hierarchical plan has too few levels for {n} elements");
    };
    let tiles = n.div_ceil(TILE);
    let n64 = n as u64;
    let shape = LaunchShape::linear(tiles as u32, THREADS);
    // SAFETY: src and out hold >= n elements, totals >= tiles; one block per tile; src and
    // out are different buffers.
    unsafe {
        scan_tiles(
            gpu,
            tiles_kernel,
            &shape,
            src,
            &mut *out,
            n64,
            &mut level.totals,
        )
    }?;
    if tiles == 1 {
        return Ok(());
    }
    let Level { totals, prefixes } = level;
    hierarchical(gpu, tiles_kernel, add, totals, prefixes, tiles, deeper)?;
    let shape = LaunchShape::linear(tiles as u32 - 1, THREADS);
    // SAFETY: out holds n elements, prefixes `tiles`; block b adds prefixes[b] to tile b + 1,
    // for b < tiles - 1.
    unsafe { add_tile_prefixes(gpu, add, &shape, out, n64, prefixes) }
}

/// The f64 reference of one scan input and each version's check against it: exact where the
/// scan cannot round (integers; f32 inputs on a grid while the prefixes stay small, see
/// [`reference::exact_scan_len`]), and elsewhere each output within its own
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
            return check::compare(got, &self.prefix, &[n], Tolerance::EXACT);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pipelined_block_fits_an_h100() {
        let mut v = common::gpu::tile::Violations::new("scan decoupled_lookback_pipe");
        v.shared_bytes(PIPE_SHARED_BYTES);
        assert_eq!(v.into_lines(), Vec::<String>::new());
    }

    /// The old check covered every output with one `atol + rtol |ref|` (at 2^28, an atol of
    /// about 6.6e4 on every output). An error ten times below that atol must now fail: on the
    /// default quarter inputs every output is exact, and on general floats an early output is
    /// held to its own bound.
    #[test]
    fn a_scan_error_well_below_the_old_covering_bound_now_fails() {
        let n = 1 << 22;
        let version = ScanVersion::DecoupledLookback;
        let depth = |i| Scans::depth(version, n, i);
        for (x, at) in [
            (quarter_inputs(n, 1), n / 2),
            (
                common::measure::inputs::uniform::<f32>(n, -0.5, 1.5, 2),
                100,
            ),
        ] {
            let reference = ScanReference::new(&x);
            let prefix = &reference.prefix;
            let (_, abs) = crate::reference::inclusive_scan(&x);
            let old = crate::reference::covering_tolerance_by(prefix, &abs, depth);
            let mut got: Vec<f32> = prefix.iter().map(|&p| p as f32).collect();
            let error = old.atol / 10.0;
            assert!(error >= 0.25, "{old:?}");
            got[at] += error as f32;
            let shape = [n];
            assert!(check::compare(&got, prefix, &shape, old).passed());
            let report = reference.check(&got, version);
            assert!(!report.passed(), "{report}");
            assert_eq!(report.mismatches, 1, "{report}");
        }
        // On the quarters the exact scan must be matched everywhere.
        let x = quarter_inputs(n, 1);
        let reference = ScanReference::new(&x);
        assert_eq!(reference.exact_len(), n);
        assert!(x.iter().all(|&v| v != 0.0 && (v * 4.0).fract() == 0.0));
    }

    #[test]
    fn scan_depth_grows_with_the_tile_for_chained_versions_only() {
        let n = 1 << 28;
        assert_eq!(Scans::depth(ScanVersion::SingleBlock, n, 0), 64);
        assert_eq!(
            Scans::depth(ScanVersion::DecoupledLookback, n, n - 1),
            64 + (n / TILE - 1) as u64
        );
        assert_eq!(
            Scans::depth(ScanVersion::DecoupledLookbackFast, n, n - 1),
            64 + (n / FAST_TILE - 1) as u64
        );
        // 2^28 -> 65536 tile totals -> 16 -> 1: three levels.
        assert_eq!(Scans::depth(ScanVersion::Hierarchical, n, n - 1), 192);
        assert_eq!(Scans::depth(ScanVersion::Hierarchical, 1, 0), 64);
    }
}

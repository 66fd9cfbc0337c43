//! Day 14: f32 GEMV, y = A x. The launchers for `gemv.cu`: a warp per row (scalar and 16-byte
//! loads), several rows per warp for narrow rows, and split rows with a deterministic second
//! pass for few wide rows.

use anyhow::{Result, bail};
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::reference::gemv::tolerance_f32;
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape, Tolerance};
use cudarc::driver::CudaSlice;

/// Square (the problem the day's goal is set on), tall-skinny and short-wide: 256 MiB of A each.
pub const DEFAULT_SHAPES: [(usize, usize); 3] = [(8192, 8192), (1 << 20, 64), (64, 1 << 20)];

pub const SOURCE: KernelSource = common::kernel_source!("gemv.cu");

/// What the day compiles: every kernel for the GPU's own architecture.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(SOURCE, all_functions())]
}

common::test_kernel_builds!();

/// Version names, in table order.
pub const VERSIONS: &[&str] = &["warp_scalar", "warp_vec4", "rows_vec4", "split_row"];

const THREADS: usize = 256;
const WARPS_PER_BLOCK: usize = THREADS / 32;
/// Lanes per row the `rows_vec4` kernels come in.
const ROW_LANES: [usize; 6] = [1, 2, 4, 8, 16, 32];
/// Float4s per lane `rows_vec4` aims for (its loads in flight, `dot_part<8>`).
const ROWS_FLOAT4_PER_LANE: usize = 8;
/// A split-row warp's tile (`SPLIT_ROWS`, `SPLIT_WARP_COLS` in the .cu).
const SPLIT_ROWS: usize = 16;
const SPLIT_WARP_COLS: usize = 512;

fn rows_function(lanes: usize) -> String {
    format!("gemv_rows_f32x4_l{lanes}")
}

fn narrow_function(lanes: usize) -> String {
    format!("gemv_narrow_f32x4_l{lanes}")
}

/// Loads in flight per lane in `gemv_narrow` (`NARROW_LOADS` in the .cu).
const NARROW_LOADS: usize = 4;

/// Lanes per row of `gemv_narrow`, for rows of whole float4s that one lane group of a warp
/// covers with one float4 each (n = 4, 8, ..., 128): `n / 4`; None for other widths.
pub fn narrow_lanes(n: usize) -> Option<usize> {
    let lanes = n / 4;
    (n.is_multiple_of(4) && ROW_LANES.contains(&lanes)).then_some(lanes)
}

fn all_functions() -> Vec<String> {
    let mut names: Vec<String> = [
        "gemv_warp_f32",
        "gemv_warp_f32x4",
        "gemv_split_partial_f32x4",
        "gemv_split_reduce_f32",
    ]
    .map(String::from)
    .into();
    names.extend(ROW_LANES.map(rows_function));
    names.extend(ROW_LANES.map(narrow_function));
    names
}

/// Lanes per row for `rows_vec4`: the fewest (a power of two, at most 32) that give each lane
/// at most 8 float4s of the row.
pub fn lanes_per_row(n: usize) -> usize {
    let per_lane = n.div_ceil(4).div_ceil(ROWS_FLOAT4_PER_LANE);
    per_lane.next_power_of_two().min(32)
}

common::kernel_args! {
    /// Every one-kernel version, `gemv_*(const float* A, const float* x, float* y, index_t m,
    /// index_t n)`.
    fn gemv(a: &CudaSlice<f32>, x: &CudaSlice<f32>, y: &mut CudaSlice<f32>, m: u64, n: u64);
    /// `gemv_split_partial_f32x4(const float* A, const float* x, float* partial, index_t m,
    /// index_t n)`: each warp's dot product of its 512 columns.
    fn split_partial(
        a: &CudaSlice<f32>,
        x: &CudaSlice<f32>,
        partial: &mut CudaSlice<f32>,
        m: u64,
        n: u64,
    );
    /// `gemv_split_reduce_f32(const float* partial, float* y, index_t m, index_t parts)`: a
    /// row's parts added in order.
    fn split_reduce(partial: &CudaSlice<f32>, y: &mut CudaSlice<f32>, m: u64, parts: u64);
}

/// Enqueues one `y = A x`.
pub type Launch<'a> =
    Box<dyn FnMut(&CudaSlice<f32>, &CudaSlice<f32>, &mut CudaSlice<f32>) -> Result<()> + 'a>;

/// How one version runs on one shape.
pub struct Plan<'a> {
    /// The kernel the table describes (the first of two for `split_row`).
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    /// The longest chain of f32 roundings of one output, for the tolerance.
    pub chain: usize,
    pub launch: Launch<'a>,
}

impl Plan<'_> {
    pub fn tolerance(&self, max_row_magnitude: f64) -> Tolerance {
        tolerance_f32(self.chain, max_row_magnitude)
    }
}

pub struct Gemv {
    kernels: KernelSet,
}

impl Gemv {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: KernelSet::load(gpu, &SOURCE, all_functions())?,
        })
    }

    /// How `version` runs on an `m x n` A, or [`Refused`] (`split_row` beyond 268M columns, a
    /// grid past 2^31 - 1 blocks).
    pub fn plan<'a>(&'a self, gpu: &'a Gpu, version: &str, m: usize, n: usize) -> Result<Plan<'a>> {
        if m == 0 || n == 0 {
            bail!("gemv: A is {m} x {n}; both must be at least 1");
        }
        let one_kernel = |name: &str, rows_per_block: usize, chain: usize| -> Result<Plan<'a>> {
            let kernel = self.kernels.get(name)?;
            let shape = LaunchShape::linear(grid_x(m.div_ceil(rows_per_block))?, THREADS as u32);
            Ok(Plan {
                kernel,
                shape,
                chain,
                launch: Box::new(move |a, x, y| {
                    check_sizes(a, x, y, m, n)?;
                    // SAFETY: A holds m * n, x n and y m floats (checked); the grid covers m
                    // rows and every kernel guards rows >= m.
                    unsafe { gemv(gpu, kernel, &shape, a, x, y, m as u64, n as u64) }
                }),
            })
        };
        // Each lane's FMAs in sequence (4 per float4), head and tail, the butterfly.
        let chain_of = |lanes: usize| 4 * n.div_ceil(4 * lanes) + 8 + lanes.ilog2() as usize;
        match version {
            "warp_scalar" => one_kernel("gemv_warp_f32", WARPS_PER_BLOCK, n.div_ceil(32) + 5),
            "warp_vec4" => one_kernel("gemv_warp_f32x4", WARPS_PER_BLOCK, chain_of(32)),
            "rows_vec4" => match narrow_lanes(n) {
                Some(lanes) => {
                    let rows_per_block = WARPS_PER_BLOCK * NARROW_LOADS * (32 / lanes);
                    one_kernel(&narrow_function(lanes), rows_per_block, chain_of(lanes))
                }
                None => {
                    let lanes = lanes_per_row(n);
                    one_kernel(&rows_function(lanes), THREADS / lanes, chain_of(lanes))
                }
            },
            "split_row" => self.plan_split(gpu, m, n),
            other => bail!("day14 has no version `{other}`"),
        }
    }

    fn plan_split<'a>(&'a self, gpu: &'a Gpu, m: usize, n: usize) -> Result<Plan<'a>> {
        let partial_kernel = self.kernels.get("gemv_split_partial_f32x4")?;
        let reduce_kernel = self.kernels.get("gemv_split_reduce_f32")?;
        let parts = n.div_ceil(SPLIT_WARP_COLS);
        let column_blocks = parts.div_ceil(WARPS_PER_BLOCK);
        if column_blocks > 65535 {
            return Err(Refused(format!(
                "{n} columns need {column_blocks} blocks in y, more than 65535"
            ))
            .into());
        }
        let shape = LaunchShape {
            grid: (grid_x(m.div_ceil(SPLIT_ROWS))?, column_blocks as u32, 1),
            block: (THREADS as u32, 1, 1),
            dynamic_shared_bytes: 0,
        };
        let reduce_shape =
            LaunchShape::linear(grid_x(m.div_ceil(WARPS_PER_BLOCK))?, THREADS as u32);
        // SAFETY: the partial kernel writes every (row, part) before the reduce kernel, later
        // on the same stream, reads it.
        let mut partial = unsafe { gpu.stream.alloc::<f32>(m * parts) }?;
        // A lane's 4 float4s of its 512 columns, head and tail, the butterfly; then the second
        // pass: a lane's parts in sequence and the butterfly.
        let chain = 4 * SPLIT_WARP_COLS.div_ceil(128) + 8 + 5 + parts.div_ceil(32) + 5;
        Ok(Plan {
            kernel: partial_kernel,
            shape,
            chain,
            launch: Box::new(move |a, x, y| {
                check_sizes(a, x, y, m, n)?;
                let (m, n, parts) = (m as u64, n as u64, parts as u64);
                // SAFETY: A holds m * n and x n floats (checked), partial m * ceil(n / 512);
                // the grid covers every (16-row, 4096-column) tile.
                unsafe { split_partial(gpu, partial_kernel, &shape, a, x, &mut partial, m, n) }?;
                // SAFETY: partial holds m * parts floats, y m (checked).
                unsafe { split_reduce(gpu, reduce_kernel, &reduce_shape, &partial, y, m, parts) }
            }),
        })
    }
}

/// `blocks` as a grid's x, or [`Refused`] past its 2^31 - 1 (clamping would leave rows
/// unwritten).
fn grid_x(blocks: usize) -> Result<u32> {
    u32::try_from(blocks)
        .ok()
        .filter(|&b| b <= i32::MAX as u32)
        .ok_or_else(|| Refused(format!("{blocks} blocks exceed the grid's 2^31 - 1 in x")).into())
}

fn check_sizes(
    a: &CudaSlice<f32>,
    x: &CudaSlice<f32>,
    y: &CudaSlice<f32>,
    m: usize,
    n: usize,
) -> Result<()> {
    if m.checked_mul(n) != Some(a.len()) || x.len() != n || y.len() != m {
        bail!(
            "gemv: A of {}, x of {} and y of {} floats do not make a {m} x {n} product",
            a.len(),
            x.len(),
            y.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_rows_share_warps_and_wide_rows_get_a_warp() {
        assert_eq!(lanes_per_row(1), 1);
        assert_eq!(lanes_per_row(32), 1);
        assert_eq!(lanes_per_row(64), 2);
        assert_eq!(lanes_per_row(65), 4);
        assert_eq!(lanes_per_row(1000), 32);
        assert_eq!(lanes_per_row(1 << 20), 32);
    }
}

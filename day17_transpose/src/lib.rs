//! Day 17: transpose. The launchers for `transpose.cu`: a float4 copy (the ceiling), four
//! transposes from naive to float4 on both sides, and array reversal out of place and in place.

use anyhow::{Result, bail};
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::CudaSlice;

pub mod run;
pub mod reference;

/// The default `--rows` and `--cols` of the copy and the transpose (`run.rs`, and the bench).
pub const DEFAULT_ROWS: u64 = 16384;
pub const DEFAULT_COLS: u64 = 16384;

pub const SOURCE: KernelSource = common::kernel_source!("transpose.cu");

/// What the day compiles: every kernel, for the GPU's own architecture. The loader compiles the
/// same, the compile test checks this list, and `cargo xtask bundle` compiles it ahead of time for
/// the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(SOURCE, all_functions())]
}

common::test_kernel_builds!();

const THREADS: u32 = 256;

common::kernel_args! {
    /// `copy_f32x4(const float* x, float* y, index_t n)`
    fn copy_f32x4(x: &CudaSlice<f32>, y: &mut CudaSlice<f32>, n: u64);
    /// `transpose_<version>_f32(const float* x, float* y, int rows, int cols)`
    fn transpose_f32(x: &CudaSlice<f32>, y: &mut CudaSlice<f32>, rows: i32, cols: i32);
    /// `reverse_naive_f32` and `reverse_vec4[_unaligned]_f32x4`: `(const float* x, float* y,
    /// index_t n)`
    fn reverse_f32(x: &CudaSlice<f32>, y: &mut CudaSlice<f32>, n: u64);
    /// `reverse_inplace_f32[x4](float* x, index_t n)`
    fn reverse_inplace_f32(x: &mut CudaSlice<f32>, n: u64);
}

common::versions! {
    /// The transpose versions, in table order.
    pub enum Transpose {
        Naive => "naive",
        Tiled => "tiled",
        Padded => "padded",
        Vec4Swizzled => "vec4_swizzled",
    }
}

impl Transpose {
    pub fn function(self) -> &'static str {
        match self {
            Transpose::Naive => "transpose_naive_f32",
            Transpose::Tiled => "transpose_tiled_f32",
            Transpose::Padded => "transpose_padded_f32",
            Transpose::Vec4Swizzled => "transpose_vec4_swizzled_f32",
        }
    }

    /// Why this version cannot transpose a `rows x cols` x, if it cannot: the kernels index
    /// with int, and a grid takes at most 65535 blocks of tile rows in y. Known without a GPU,
    /// so `main` refuses such a shape before opening one.
    pub fn check_shape(self, rows: usize, cols: usize) -> Result<(), String> {
        let (_, (tile_rows, _)) = self.geometry();
        let max_rows = 65535 * tile_rows;
        if rows > max_rows || cols > i32::MAX as usize {
            return Err(format!(
                "{rows} x {cols}: `{}` indexes with int and takes at most {max_rows} rows",
                self.name()
            ));
        }
        Ok(())
    }

    /// (block, rows and columns of x one block covers).
    fn geometry(self) -> ((u32, u32, u32), (usize, usize)) {
        match self {
            Transpose::Naive => ((32, 8, 1), (8, 32)),
            Transpose::Tiled | Transpose::Padded => ((32, 8, 1), (32, 32)),
            Transpose::Vec4Swizzled => ((256, 1, 1), (64, 64)),
        }
    }
}

common::versions! {
    /// The reversal versions, in table order.
    pub enum Reverse {
        Naive => "naive",
        Vec4 => "vec4",
        InplaceVec4 => "inplace_vec4",
    }
}

impl Reverse {
    /// The CUDA function for `n` elements: the float4 kernels have a variant for n % 4 != 0.
    pub fn function(self, n: usize) -> &'static str {
        let aligned = n.is_multiple_of(4);
        match self {
            Reverse::Naive => "reverse_naive_f32",
            Reverse::Vec4 if aligned => "reverse_vec4_f32x4",
            Reverse::Vec4 => "reverse_vec4_unaligned_f32x4",
            Reverse::InplaceVec4 if aligned => "reverse_inplace_f32x4",
            Reverse::InplaceVec4 => "reverse_inplace_f32",
        }
    }
}

pub const COPY_VERSION: &str = "vec4";
const COPY_FUNCTION: &str = "copy_f32x4";

fn all_functions() -> Vec<&'static str> {
    let mut names = vec![COPY_FUNCTION];
    names.extend(Transpose::ALL.iter().map(|v| v.function()));
    for v in Reverse::ALL {
        names.push(v.function(4));
        names.push(v.function(5));
    }
    names.sort();
    names.dedup();
    names
}

/// One block per 256 threads of `threads` work items, as a u32 (saturating: an impossible
/// grid is refused by `Kernel::config`).
fn blocks_for(threads: usize) -> u32 {
    threads
        .div_ceil(THREADS as usize)
        .max(1)
        .min(u32::MAX as usize) as u32
}

pub struct Day17 {
    kernels: common::gpu::kernel::KernelSet,
}

impl Day17 {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: common::gpu::kernel::KernelSet::load(
                gpu,
                &SOURCE,
                all_functions().into_iter().map(String::from),
            )?,
        })
    }

    /// Plans the float4 copy of `n` elements.
    pub fn plan_copy(&self, n: usize) -> Result<MatrixPlan<'_>> {
        Ok(MatrixPlan {
            kernel: self.kernels.get(COPY_FUNCTION)?,
            shape: LaunchShape::linear(blocks_for(n / 4 + 1), THREADS),
            op: MatrixOp::Copy { n },
        })
    }

    /// `y = x` with float4 accesses, planned and launched once.
    pub fn copy(&self, gpu: &Gpu, x: &CudaSlice<f32>, y: &mut CudaSlice<f32>) -> Result<()> {
        let n = x.len();
        if n == 0 || y.len() != n {
            bail!(
                "copy: x of {n} and y of {} elements must be equal and non-zero",
                y.len()
            );
        }
        self.plan_copy(n)?.launch(gpu, x, y)
    }

    /// Plans a transpose of a `rows x cols` x: [`Refused`] when the version cannot take it.
    pub fn plan_transpose(
        &self,
        version: Transpose,
        rows: usize,
        cols: usize,
    ) -> Result<MatrixPlan<'_>> {
        version.check_shape(rows, cols).map_err(Refused)?;
        let (block, (tile_rows, tile_cols)) = version.geometry();
        let shape = LaunchShape {
            grid: (
                blocks_for_tiles(cols, tile_cols),
                rows.div_ceil(tile_rows) as u32,
                1,
            ),
            block,
            dynamic_shared_bytes: 0,
        };
        Ok(MatrixPlan {
            kernel: self.kernels.get(version.function())?,
            shape,
            op: MatrixOp::Transpose { rows, cols },
        })
    }

    /// `y = x^T` for row-major `x` of `rows x cols` (`y` is `cols x rows`), planned and
    /// launched once.
    pub fn transpose(
        &self,
        gpu: &Gpu,
        version: Transpose,
        x: &CudaSlice<f32>,
        y: &mut CudaSlice<f32>,
        rows: usize,
        cols: usize,
    ) -> Result<()> {
        check_matrix(rows, cols, x, y)?;
        self.plan_transpose(version, rows, cols)?.launch(gpu, x, y)
    }

    /// Plans `version` of the reversal of `n` elements (the float4 kernels have a variant for
    /// n % 4 != 0).
    pub fn plan_reverse(&self, version: Reverse, n: usize) -> Result<ReversePlan<'_>> {
        let threads = match version {
            Reverse::Naive => n,
            Reverse::Vec4 => n / 4 + 1,
            Reverse::InplaceVec4 if n.is_multiple_of(4) => (n / 4).div_ceil(2),
            Reverse::InplaceVec4 => n / 2,
        };
        Ok(ReversePlan {
            kernel: self.kernels.get(version.function(n))?,
            shape: LaunchShape::linear(blocks_for(threads), THREADS),
            version,
            n,
        })
    }

    /// Out of place, `y[i] = x[n - 1 - i]`, planned and launched once. Not for `InplaceVec4`
    /// (see [`Day17::reverse_inplace`]).
    pub fn reverse(
        &self,
        gpu: &Gpu,
        version: Reverse,
        x: &CudaSlice<f32>,
        y: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let n = x.len();
        if n == 0 || y.len() != n {
            bail!(
                "reverse: x of {n} and y of {} elements must be equal and non-zero",
                y.len()
            );
        }
        if version == Reverse::InplaceVec4 {
            bail!(
                "reverse: `{}` works in place; call reverse_inplace",
                version.name()
            );
        }
        self.plan_reverse(version, n)?.launch(gpu, x, y)
    }

    /// Reverses `x` in place, planned and launched once.
    pub fn reverse_inplace(&self, gpu: &Gpu, x: &mut CudaSlice<f32>) -> Result<()> {
        let n = x.len();
        if n == 0 {
            bail!("reverse: the array is empty");
        }
        self.plan_reverse(Reverse::InplaceVec4, n)?
            .launch_inplace(gpu, x)
    }
}

/// The copy or a transpose version planned for one matrix: its kernel and launch shape,
/// chosen once, launched as often as wanted.
pub struct MatrixPlan<'a> {
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    op: MatrixOp,
}

/// What a [`MatrixPlan`] does, and the sizes it was planned for.
#[derive(Clone, Copy)]
enum MatrixOp {
    /// `y = x` of `n` elements.
    Copy { n: usize },
    /// `y = x^T` of a `rows x cols` x.
    Transpose { rows: usize, cols: usize },
}

/// A reversal version planned for `n` elements.
pub struct ReversePlan<'a> {
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    version: Reverse,
    n: usize,
}

/// An error unless x and y both hold the `n > 0` elements `op` was planned for.
fn check_planned(op: &str, n: usize, x: usize, y: usize) -> Result<()> {
    if n == 0 || x != n || y != n {
        bail!("{op}: planned for {n} elements; x has {x} and y {y}");
    }
    Ok(())
}

/// An error unless x and y both hold a `rows x cols` matrix, neither side 0.
fn check_matrix(rows: usize, cols: usize, x: &CudaSlice<f32>, y: &CudaSlice<f32>) -> Result<()> {
    if rows == 0 || cols == 0 || x.len() != rows * cols || y.len() != rows * cols {
        bail!(
            "transpose {rows} x {cols}: x has {} and y {} elements",
            x.len(),
            y.len()
        );
    }
    Ok(())
}

impl MatrixPlan<'_> {
    /// `y = x` with float4 accesses, or `y = x^T` (`y` is `cols x rows`).
    pub fn launch(&self, gpu: &Gpu, x: &CudaSlice<f32>, y: &mut CudaSlice<f32>) -> Result<()> {
        let (kernel, shape) = (self.kernel, &self.shape);
        match self.op {
            MatrixOp::Copy { n } => {
                check_planned("copy", n, x.len(), y.len())?;
                // SAFETY: x and y both hold n floats (checked above); threads past the last
                // float4 return, and the last one copies the tail.
                unsafe { copy_f32x4(gpu, kernel, shape, x, y, n as u64) }
            }
            MatrixOp::Transpose { rows, cols } => {
                check_matrix(rows, cols, x, y)?;
                // SAFETY: x and y both hold rows x cols floats (checked above), rows and cols
                // fit an int (`check_shape`, when planned), and the kernels skip the parts of
                // edge tiles outside the matrix.
                unsafe { transpose_f32(gpu, kernel, shape, x, y, rows as i32, cols as i32) }
            }
        }
    }
}

impl ReversePlan<'_> {
    /// Out of place, `y[i] = x[n - 1 - i]`. Not for `InplaceVec4` ([`ReversePlan::launch_inplace`]).
    pub fn launch(&self, gpu: &Gpu, x: &CudaSlice<f32>, y: &mut CudaSlice<f32>) -> Result<()> {
        if self.version == Reverse::InplaceVec4 {
            bail!(
                "reverse: `{}` works in place; call reverse_inplace",
                self.version.name()
            );
        }
        check_planned("reverse", self.n, x.len(), y.len())?;
        // SAFETY: x and y both hold n floats (checked above); threads past the end return.
        unsafe { reverse_f32(gpu, self.kernel, &self.shape, x, y, self.n as u64) }
    }

    /// Reverses `x` in place: `InplaceVec4` only.
    pub fn launch_inplace(&self, gpu: &Gpu, x: &mut CudaSlice<f32>) -> Result<()> {
        if self.version != Reverse::InplaceVec4 {
            bail!(
                "reverse: `{}` works out of place; call reverse",
                self.version.name()
            );
        }
        check_planned("reverse", self.n, x.len(), x.len())?;
        // SAFETY: x holds n floats, and each element is read and written by one thread only.
        unsafe { reverse_inplace_f32(gpu, self.kernel, &self.shape, x, self.n as u64) }
    }
}

fn blocks_for_tiles(extent: usize, tile: usize) -> u32 {
    extent.div_ceil(tile).min(u32::MAX as usize) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reversal_picks_the_aligned_kernels_only_for_multiples_of_4() {
        assert_eq!(Reverse::Vec4.function(8), "reverse_vec4_f32x4");
        assert_eq!(Reverse::Vec4.function(9), "reverse_vec4_unaligned_f32x4");
        assert_eq!(Reverse::InplaceVec4.function(7), "reverse_inplace_f32");
    }
}

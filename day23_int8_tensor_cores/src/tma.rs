//! The tensor maps of the Hopper kernels, on `common::gpu::tma::KMajorTiles`: an int8 K-major
//! operand (A stored `[m, k]`, B stored `[n, k]`) to load, and the output C (`[m, n]` int32 or
//! bf16) that `wgmma_tma_store` stores. Both are `[rows][columns]` row-major with 128-byte
//! swizzled boxes one swizzle row (128 bytes) wide; they differ in element type and box height.

use anyhow::{Result, bail};
pub use common::gpu::tma::TmaDescriptor;
use common::gpu::tma::{KMajorTiles, TensorMap};
use common::{Element, Gpu};
use cudarc::driver::CudaSlice;
use day18::tile::{SWIZZLE_ROW_BYTES, WG_TILE};

use crate::Out;

/// Bytes (= int8 elements) of k per box: a stage's k, one 128-byte swizzle row.
pub const BOX_K: u32 = WG_TILE.k_bytes as u32;

/// Encodes `[rows][k]` int8, rows contiguous, in boxes of [`BOX_K`] x `box_rows`; elements of
/// a box past the edge arrive as zeros. Refused (the TMA's rules) when a row is not a multiple
/// of 16 bytes or the start is not 16-byte aligned.
pub fn k_major_i8(
    gpu: &Gpu,
    buffer: &CudaSlice<i8>,
    rows: usize,
    k: usize,
    box_rows: u32,
) -> Result<TmaDescriptor> {
    row_major(rows, k, BOX_K, box_rows).encode(gpu, buffer)
}

/// Rows of a staged output box: a consumer warpgroup's 64 rows.
pub const OUT_BOX_ROWS: u32 = WG_TILE.out_rows as u32;

/// Encodes C, `[m][n]` row-major int32 or bf16, for TMA stores of boxes of 128 bytes (32
/// int32 or 64 bf16 columns) x [`OUT_BOX_ROWS`] rows, 128-byte swizzled in shared memory
/// (the kernel's `staged` layout); elements of a box past the edge are not written. Refused
/// when a row is not a multiple of 16 bytes (`n * size % 16`; the planner runs `wgmma` there
/// instead) or the start is not 16-byte aligned.
pub fn row_major_out<T: Element>(
    gpu: &Gpu,
    buffer: &CudaSlice<T>,
    m: usize,
    n: usize,
    out: Out,
) -> Result<TmaDescriptor> {
    if std::mem::size_of::<T>() != out.size() {
        bail!("tensor map: {} elements are not {}", T::NAME, out.name());
    }
    row_major(m, n, (SWIZZLE_ROW_BYTES / out.size()) as u32, OUT_BOX_ROWS).encode(gpu, buffer)
}

/// One `[rows][columns]` matrix in boxes of `box_columns x box_rows`.
fn row_major(rows: usize, columns: usize, box_columns: u32, box_rows: u32) -> KMajorTiles {
    KMajorTiles {
        inner: columns,
        rows,
        outer: 1,
        outer_stride: 0,
        box_inner: box_columns,
        box_rows,
    }
}

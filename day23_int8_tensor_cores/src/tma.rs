//! The tensor maps of the Hopper kernels: an int8 K-major operand (A stored `[m, k]`, B stored
//! `[n, k]`) to load, and the output C (`[m, n]` int32 or bf16) that `wgmma_tma_store` stores.
//! `common::gpu::tma` encodes 16-bit and f32 tensors; these differ only in their data types and
//! in how many elements a 128-byte swizzle row holds (128 int8, 32 int32), so they are encoded
//! here with the same driver call and handed to the kernel as the same [`TmaDescriptor`].

use anyhow::{Result, bail};
pub use common::gpu::tma::TmaDescriptor;
use common::{Gpu, session::Refused};
use cudarc::driver::sys::{
    self, CUtensorMapDataType, CUtensorMapFloatOOBfill, CUtensorMapInterleave,
    CUtensorMapL2promotion, CUtensorMapSwizzle,
};
use cudarc::driver::{CudaSlice, DevicePtr};

use crate::Out;

/// Bytes (= int8 elements) of k per box: one 128-byte swizzle row.
pub const BOX_K: u32 = 128;

/// Encodes `[rows][k]` int8, rows contiguous, in boxes of [`BOX_K`] x `box_rows` with 128-byte
/// swizzling; elements of a box past the edge arrive as zeros. [`Refused`] when a row is not
/// a multiple of 16 bytes or the start is not 16-byte aligned (the TMA's rules).
pub fn k_major_i8(
    gpu: &Gpu,
    buffer: &CudaSlice<i8>,
    rows: usize,
    k: usize,
    box_rows: u32,
) -> Result<TmaDescriptor> {
    if rows == 0 || k == 0 || buffer.len() < rows * k {
        bail!("tensor map: {rows} x {k} int8 is empty or larger than its buffer");
    }
    if !k.is_multiple_of(16) {
        return Err(Refused(format!(
            "the TMA needs rows of a multiple of 16 bytes; k = {k} is not"
        ))
        .into());
    }
    if box_rows == 0 || box_rows > 256 {
        bail!("tensor map: a box is 1 to 256 rows tall, not {box_rows}");
    }
    let (address, _record) = buffer.device_ptr(&gpu.stream);
    encode_2d(
        address,
        CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        1,
        rows,
        k,
        [BOX_K, box_rows],
    )
}

/// Rows of a staged output box: a consumer warpgroup's 64 rows.
pub const OUT_BOX_ROWS: u32 = 64;

/// Encodes C, `[m][n]` row-major int32 or bf16, for TMA stores of boxes of 128 bytes (32
/// int32 or 64 bf16 columns) x [`OUT_BOX_ROWS`] rows, 128-byte swizzled in shared memory
/// (the kernel's `staged` layout); elements of a box past the edge are not written.
/// [`Refused`] when a row is not a multiple of 16 bytes (`n * size % 16`; the planner runs
/// `wgmma` there instead) or the start is not 16-byte aligned.
pub fn row_major_out<T>(
    gpu: &Gpu,
    buffer: &CudaSlice<T>,
    m: usize,
    n: usize,
    out: Out,
) -> Result<TmaDescriptor> {
    if m == 0 || n == 0 || buffer.len() < m * n || std::mem::size_of::<T>() != out.size() {
        bail!(
            "tensor map: {m} x {n} {} does not match its buffer",
            out.name()
        );
    }
    if !(n * out.size()).is_multiple_of(16) {
        return Err(Refused(format!(
            "the TMA needs rows of a multiple of 16 bytes; {n} {} are not",
            out.name()
        ))
        .into());
    }
    let data_type = match out {
        Out::S32 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_INT32,
        Out::Bf16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
    };
    let (address, _record) = buffer.device_ptr(&gpu.stream);
    let box_columns = (128 / out.size()) as u32;
    encode_2d(
        address,
        data_type,
        out.size(),
        m,
        n,
        [box_columns, OUT_BOX_ROWS],
    )
}

/// A `[rows][columns]` row-major matrix of `size`-byte elements as a 3-D map with one matrix
/// (the kernels' TMA copies take a z coordinate of 0), 128-byte swizzle, boxes of `boxes[0]`
/// columns (128 bytes) x `boxes[1]` rows. The caller has checked the sizes.
fn encode_2d(
    address: u64,
    data_type: CUtensorMapDataType,
    size: usize,
    rows: usize,
    columns: usize,
    boxes: [u32; 2],
) -> Result<TmaDescriptor> {
    if !address.is_multiple_of(16) {
        return Err(Refused("the TMA needs a 16-byte aligned start".to_string()).into());
    }
    let dims = [columns as u64, rows as u64, 1];
    let strides = [(columns * size) as u64, (rows * columns * size) as u64];
    let boxes = [boxes[0], boxes[1], 1];
    let element_strides = [1u32; 3];
    let mut map = std::mem::MaybeUninit::<TmaDescriptor>::zeroed();
    // SAFETY: the map is 64-byte aligned and 128 bytes long, as CUtensorMap is; the arrays
    // have the rank's lengths (3, 2, 3, 3); the address is a live allocation the callers
    // checked to hold the whole tensor.
    let status = unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr().cast(),
            data_type,
            3,
            address as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if status != sys::CUresult::CUDA_SUCCESS {
        bail!("cuTensorMapEncodeTiled failed: {status:?} for {rows} x {columns} ({data_type:?})");
    }
    // SAFETY: zero-initialised, then written by the driver on success; any bytes are a valid
    // TmaDescriptor (plain integers).
    Ok(unsafe { map.assume_init() })
}

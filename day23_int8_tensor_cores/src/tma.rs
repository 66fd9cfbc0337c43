//! The tensor map of an int8 K-major operand (A stored `[m, k]`, B stored `[n, k]`) for the
//! Hopper TMA. `common::gpu::tma` encodes 16-bit and f32 tensors; an int8 map differs only in
//! its data type and in how many elements a 128-byte swizzle row holds (128, not 64), so it is
//! encoded here with the same driver call and handed to the kernel as the same
//! [`TmaDescriptor`].

use anyhow::{Result, bail};
pub use common::gpu::tma::TmaDescriptor;
use common::{Gpu, session::Refused};
use cudarc::driver::sys::{
    self, CUtensorMapDataType, CUtensorMapFloatOOBfill, CUtensorMapInterleave,
    CUtensorMapL2promotion, CUtensorMapSwizzle,
};
use cudarc::driver::{CudaSlice, DevicePtr};

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
    if !address.is_multiple_of(16) {
        return Err(Refused("the TMA needs a 16-byte aligned start".to_string()).into());
    }
    // A 3-D map with one matrix (the kernels' tma_load_3d takes a z coordinate of 0).
    let dims = [k as u64, rows as u64, 1];
    let strides = [k as u64, (rows * k) as u64];
    let boxes = [BOX_K, box_rows, 1];
    let element_strides = [1u32; 3];
    let mut map = std::mem::MaybeUninit::<TmaDescriptor>::zeroed();
    // SAFETY: the map is 64-byte aligned and 128 bytes long, as CUtensorMap is; the arrays
    // have the rank's lengths (3, 2, 3, 3); the address is the live allocation checked above
    // to hold the whole tensor.
    let status = unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr().cast(),
            CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
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
        bail!("cuTensorMapEncodeTiled failed: {status:?} for {rows} x {k} int8");
    }
    // SAFETY: zero-initialised, then written by the driver on success; any bytes are a valid
    // TmaDescriptor (plain integers).
    Ok(unsafe { map.assume_init() })
}

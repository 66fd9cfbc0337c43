//! Tensor maps for the Hopper TMA: the 128-byte descriptor that tells the copy engine the
//! shape of a tensor in global memory, the box it copies per request and how it lays that box
//! out in shared memory. Encoded on the host with `cuTensorMapEncodeTiled` and passed to the
//! kernel by value (`const __grid_constant__ TmaDescriptor` in `common/cuda/hopper.cuh`).

use anyhow::{Result, bail};
use cudarc::driver::sys::{
    self, CUtensorMapDataType, CUtensorMapFloatOOBfill, CUtensorMapInterleave,
    CUtensorMapL2promotion, CUtensorMapSwizzle,
};
use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr};

use crate::dtype::Dtype;
use crate::element::Element;
use crate::gpu::Gpu;

/// The encoded map, aligned as the driver and the kernel parameter require.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct TmaDescriptor {
    opaque: [u64; 16],
}

// SAFETY: a plain 128-byte value the kernel receives by copy, as cuTensorMapEncodeTiled wrote it.
unsafe impl DeviceRepr for TmaDescriptor {}

/// A 3-D tensor `[outer][rows][inner]` of 16-bit elements, row-major and contiguous, copied in
/// boxes of `box_inner x box_rows` (one outer index each) with 128-byte swizzling: the K-major
/// operand layout `wgmma` reads. The inner dimension is the one that runs along k.
#[derive(Debug, Clone, Copy)]
pub struct KMajorTiles {
    pub inner: usize,
    pub rows: usize,
    pub outer: usize,
    pub box_inner: u32,
    pub box_rows: u32,
}

impl KMajorTiles {
    /// Encodes the map of `buffer`, which must hold the whole tensor. The TMA needs rows of a
    /// multiple of 16 bytes and a box row of at most 128 bytes under this swizzle; elements of
    /// a box past the tensor's edge arrive as zeros.
    pub fn encode<T: Element>(&self, gpu: &Gpu, buffer: &CudaSlice<T>) -> Result<TmaDescriptor> {
        let data_type = match T::DTYPE {
            Dtype::Bf16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            Dtype::F16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            other => bail!(
                "K-major tensor maps are made for f16 and bf16, not {}",
                other.name()
            ),
        };
        let elem = T::DTYPE.size();
        let row_bytes = self.inner * elem;
        if !row_bytes.is_multiple_of(16) {
            bail!(
                "a TMA row must be a multiple of 16 bytes; {} elements are {row_bytes}",
                self.inner
            );
        }
        if self.box_inner as usize * elem > 128 || self.box_rows == 0 || self.box_rows > 256 {
            bail!("a 128-byte-swizzled box is at most 128 bytes wide and 256 rows tall");
        }
        if buffer.len() < self.inner * self.rows * self.outer {
            bail!("the buffer is smaller than the tensor its map describes");
        }
        let dims = [self.inner as u64, self.rows as u64, self.outer as u64];
        // Byte strides of every dimension but the innermost.
        let strides = [row_bytes as u64, (row_bytes * self.rows) as u64];
        let boxes = [self.box_inner, self.box_rows, 1];
        let element_strides = [1u32; 3];
        let (address, _record) = buffer.device_ptr(&gpu.stream);
        let mut map = TmaDescriptor { opaque: [0; 16] };
        // SAFETY: the map is 64-byte aligned and 128 bytes long, as CUtensorMap is; the arrays
        // have the rank's lengths (3, 2, 3, 3); the address is the live allocation checked to
        // hold the whole tensor above.
        let status = unsafe {
            sys::cuTensorMapEncodeTiled(
                (&mut map as *mut TmaDescriptor).cast(),
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
            bail!("cuTensorMapEncodeTiled failed: {status:?} for {self:?}");
        }
        Ok(map)
    }
}

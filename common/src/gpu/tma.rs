//! Tensor maps for the Hopper TMA: the 128-byte descriptor that tells the copy engine the
//! shape of a tensor in global memory, the box it copies per request and how it lays that box
//! out in shared memory. Encoded on the host with `cuTensorMapEncodeTiled` and passed to the
//! kernel by value (`const __grid_constant__ TmaDescriptor` in `common/cuda/hopper.cuh`).

use anyhow::{Result, bail};
use cudarc::driver::DeviceRepr;
use cudarc::driver::sys::{
    self, CUtensorMapDataType, CUtensorMapFloatOOBfill, CUtensorMapInterleave,
    CUtensorMapL2promotion, CUtensorMapSwizzle,
};

use crate::dtype::Dtype;
use crate::element::Element;
use crate::error::Refused;
use crate::gpu::{DeviceBuffer, Gpu, require_16_byte_start};

/// The encoded map, aligned as the driver and the kernel parameter require.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct TmaDescriptor {
    opaque: [u64; 16],
}

// SAFETY: a plain 128-byte value the kernel receives by copy, as cuTensorMapEncodeTiled wrote it.
unsafe impl DeviceRepr for TmaDescriptor {}

/// A tensor as the TMA copies it. Each map type says how its tensor lies in memory and in what
/// boxes it is copied ([`TensorMap::layout`]); the encoding is the same for all of them.
pub trait TensorMap {
    /// The layout of this tensor stored as `T`, or [`Refused`] where the TMA cannot copy it.
    fn layout<T: Element>(&self) -> Result<Swizzled128>;

    /// Encodes the map of `buffer` (a slice or a view), which must hold the whole tensor. The
    /// TMA needs rows of a multiple of 16 bytes, a 16-byte aligned start and matrix stride,
    /// and a box row of at most 128 bytes under the swizzle: a tensor that breaks one of those
    /// is [`Refused`]. Elements of a box past the tensor's edge arrive as zeros.
    fn encode<T: Element>(
        &self,
        gpu: &Gpu,
        buffer: &impl DeviceBuffer<T>,
    ) -> Result<TmaDescriptor> {
        self.layout::<T>()?.encode(gpu, buffer)
    }
}

/// A 3-D tensor `[outer][rows][inner]` of any element type (16-bit for day 18, int8 for day
/// 23), rows contiguous, matrices `outer_stride` elements apart, copied in boxes of `box_inner x box_rows` (one outer index
/// each) with 128-byte swizzling: the K-major operand layout `wgmma` reads. The inner
/// dimension is the one that runs along k (A stored `[m, k]`, B stored `[n, k]`).
#[derive(Debug, Clone, Copy)]
pub struct KMajorTiles {
    pub inner: usize,
    pub rows: usize,
    pub outer: usize,
    /// Elements from one matrix to the next (`rows * inner` when back to back; unused when
    /// `outer` is 1).
    pub outer_stride: usize,
    pub box_inner: u32,
    pub box_rows: u32,
}

impl TensorMap for KMajorTiles {
    fn layout<T: Element>(&self) -> Result<Swizzled128> {
        Ok(Swizzled128 {
            what: "a K-major operand",
            inner: self.inner,
            rows: self.rows,
            row_stride: self.inner,
            outer: self.outer,
            outer_stride: self.outer_stride,
            box_inner: self.box_inner,
            box_rows: self.box_rows,
            swizzle: true,
        })
    }
}

/// An MN-major operand: A stored `[k, m]` or B stored `[k, n]` (row-major, `outer` matrices
/// `outer_stride` elements apart), the layout `wgmma` reads with its transpose bit set. The
/// box is [`MnMajorTiles::BOX_MN`] elements (128 bytes) along m or n, the width of one
/// 128-byte swizzle atom, by `box_k` rows along k; a tile wider than 64 is several boxes side
/// by side (`hopper.cuh`, `wgmma_descriptor_mn_major_sw128`, draws it).
#[derive(Debug, Clone, Copy)]
pub struct MnMajorTiles {
    /// m (or n): the contiguous dimension, the length of a stored row.
    pub mn: usize,
    pub k: usize,
    pub outer: usize,
    /// Elements from one matrix to the next (`k * mn` when back to back; unused when `outer`
    /// is 1).
    pub outer_stride: usize,
    pub box_k: u32,
}

impl MnMajorTiles {
    /// 64 16-bit elements: one 128-byte swizzle row.
    pub const BOX_MN: u32 = 64;

    /// Why the TMA cannot take this operand, if it cannot: a stored row is `mn` elements, and
    /// the TMA's row stride must be a multiple of 16 bytes (mn % 8 == 0 for 16-bit types).
    pub fn refusal(&self) -> Option<String> {
        (!self.mn.is_multiple_of(8)).then(|| {
            format!(
                "an MN-major operand is stored with rows of m (or n) = {} elements; the TMA \
                 needs rows of a 16-byte multiple (a multiple of 8 elements)",
                self.mn
            )
        })
    }
}

impl TensorMap for MnMajorTiles {
    /// [`Refused`] also for [`MnMajorTiles::refusal`].
    fn layout<T: Element>(&self) -> Result<Swizzled128> {
        if let Some(why) = self.refusal() {
            return Err(Refused(why).into());
        }
        Ok(Swizzled128 {
            what: "an MN-major operand",
            inner: self.mn,
            rows: self.k,
            row_stride: self.mn,
            outer: self.outer,
            outer_stride: self.outer_stride,
            box_inner: Self::BOX_MN,
            box_rows: self.box_k,
            swizzle: true,
        })
    }
}

/// Attention's packed tensors: `[tokens][heads][dim]` (Q, K, V and O of every sequence of a
/// batch one after another), copied in boxes of 128 bytes of dims (one swizzle row: 64 16-bit
/// elements, or 32 floats) x `box_tokens` consecutive tokens of one head. In shared memory a
/// 16-bit box is `box_tokens` rows of 128 bytes: the K-major layout of Q and K (`S = Q K^T`
/// contracts over the dims) and the MN-major layout of V (`O = P V` contracts over the
/// tokens), so one map shape serves all three; an f32 map (day 20's dQ accumulator) takes the
/// TMA's reduce-adds of a tile written swizzled, so that a warp's writes spread over the
/// banks. A head dim over one box is several boxes side by side; coordinates are (dim, token,
/// head).
#[derive(Debug, Clone, Copy)]
pub struct HeadTiles {
    pub tokens: usize,
    pub heads: usize,
    pub dim: usize,
    pub box_tokens: u32,
}

impl HeadTiles {
    /// Bytes of dims per box: one 128-byte swizzle row.
    pub const BOX_BYTES: usize = 128;
}

impl TensorMap for HeadTiles {
    /// The buffer holds `tokens x heads x dim` elements; [`Refused`] where the head dim is not
    /// a multiple of 8, or the start is unaligned.
    fn layout<T: Element>(&self) -> Result<Swizzled128> {
        Ok(Swizzled128 {
            what: "an attention tensor",
            // [heads][tokens][dim] with tokens heads x dim apart and heads dim apart: the
            // same bytes as [tokens][heads][dim], the head made the outer index.
            inner: self.dim,
            rows: self.tokens,
            row_stride: self.heads * self.dim,
            outer: self.heads,
            outer_stride: self.dim,
            box_inner: (Self::BOX_BYTES / T::DTYPE.size()).min(self.dim) as u32,
            box_rows: self.box_tokens,
            swizzle: true,
        })
    }
}

/// Rows of f32 `[rows][len]` (len contiguous, rows `pitch` floats apart), copied in unswizzled
/// boxes of `box_len` consecutive floats of one row: day 20's per-query L and D, transposed so
/// that a query tile's values are one box. `pitch` must be a multiple of 4 (16 bytes).
#[derive(Debug, Clone, Copy)]
pub struct RowSpans {
    pub rows: usize,
    pub pitch: usize,
    pub box_len: u32,
}

impl TensorMap for RowSpans {
    /// f32 only.
    fn layout<T: Element>(&self) -> Result<Swizzled128> {
        if T::DTYPE != Dtype::F32 {
            bail!("f32 rows: a map of {:?} rows", T::DTYPE);
        }
        Ok(Swizzled128 {
            what: "f32 rows",
            inner: self.pitch,
            rows: self.rows,
            row_stride: self.pitch,
            outer: 1,
            outer_stride: 0,
            box_inner: self.box_len,
            box_rows: 1,
            swizzle: false,
        })
    }
}

/// The TMA's name for elements of `dtype`. The copy engine moves bytes and only needs their
/// width (it never converts, and the maps here fill out-of-bounds elements with zeros), so
/// signed int8 travels as UINT8.
fn map_data_type(dtype: Dtype) -> CUtensorMapDataType {
    match dtype {
        Dtype::Bf16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        Dtype::F16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        Dtype::F32 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        Dtype::I8 | Dtype::U8 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        Dtype::I32 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_INT32,
        Dtype::U32 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT32,
    }
}

/// What the layouts share: a 3-D `[outer][rows][inner]` tensor of 1-, 2- or 4-byte elements, rows
/// `row_stride` elements apart (`inner` when contiguous), boxes of `box_inner x box_rows x 1`,
/// 128-byte swizzled (every operand layout) or not (`swizzle: false`, plain rows): what a
/// [`TensorMap`] gives to be encoded.
pub struct Swizzled128 {
    what: &'static str,
    inner: usize,
    rows: usize,
    row_stride: usize,
    outer: usize,
    outer_stride: usize,
    box_inner: u32,
    box_rows: u32,
    swizzle: bool,
}

impl Swizzled128 {
    fn encode<T: Element>(
        &self,
        gpu: &Gpu,
        buffer: &impl DeviceBuffer<T>,
    ) -> Result<TmaDescriptor> {
        let what = self.what;
        let data_type = map_data_type(T::DTYPE);
        if self.inner == 0 || self.rows == 0 || self.outer == 0 {
            bail!("{what}: an empty tensor ({self:?}) has no tensor map");
        }
        let elem = T::DTYPE.size();
        let row_bytes = self.row_stride * elem;
        if !(self.inner * elem).is_multiple_of(16) || !row_bytes.is_multiple_of(16) {
            return Err(Refused(format!(
                "{what}: a TMA row must be a multiple of 16 bytes, and rows 16-byte multiples \
                 apart; rows of {} elements {} apart are not",
                self.inner, self.row_stride
            ))
            .into());
        }
        if self.outer > 1
            && (self.outer_stride == 0 || !(self.outer_stride * elem).is_multiple_of(16))
        {
            return Err(Refused(format!(
                "{what}: the TMA needs a batch stride of a nonzero multiple of 16 bytes; {} \
                 elements are {} bytes",
                self.outer_stride,
                self.outer_stride * elem
            ))
            .into());
        }
        let widest = if self.swizzle { 128 } else { 256 * elem };
        if self.box_inner == 0
            || self.box_inner as usize * elem > widest
            || !(self.box_inner as usize * elem).is_multiple_of(16)
            || self.box_rows == 0
            || self.box_rows > 256
        {
            bail!(
                "{what}: a box row is 16 to {widest} bytes (a multiple of 16) and at most 256 \
                 rows tall"
            );
        }
        let matrix = (self.rows - 1) * self.row_stride + self.inner;
        if buffer.len() < (self.outer - 1) * self.outer_stride + matrix {
            bail!("{what}: the buffer is smaller than the tensor its map describes");
        }
        require_16_byte_start(gpu, buffer, what, "the TMA needs")?;
        let (address, _record) = buffer.device_ptr(&gpu.stream);
        let outer_stride = if self.outer > 1 {
            self.outer_stride
        } else {
            self.rows * self.row_stride
        };
        let dims = [self.inner as u64, self.rows as u64, self.outer as u64];
        // Byte strides of every dimension but the innermost.
        let strides = [row_bytes as u64, (outer_stride * elem) as u64];
        let boxes = [self.box_inner, self.box_rows, 1];
        let element_strides = [1u32; 3];
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
                if self.swizzle {
                    CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B
                } else {
                    CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE
                },
                CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        };
        if status != sys::CUresult::CUDA_SUCCESS {
            bail!("cuTensorMapEncodeTiled failed: {status:?} for {what}, {self:?}");
        }
        Ok(map)
    }
}

impl std::fmt::Debug for Swizzled128 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{}][{}][{}] (row stride {}, matrix stride {}), box {} x {}",
            self.outer,
            self.rows,
            self.inner,
            self.row_stride,
            self.outer_stride,
            self.box_inner,
            self.box_rows
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_type_has_a_map_type_of_its_width() {
        use CUtensorMapDataType::*;
        let width = |t| match t {
            CU_TENSOR_MAP_DATA_TYPE_UINT8 => 1,
            CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 | CU_TENSOR_MAP_DATA_TYPE_FLOAT16 => 2,
            CU_TENSOR_MAP_DATA_TYPE_FLOAT32
            | CU_TENSOR_MAP_DATA_TYPE_INT32
            | CU_TENSOR_MAP_DATA_TYPE_UINT32 => 4,
            other => panic!("unexpected {other:?}"),
        };
        for dtype in [
            Dtype::F32,
            Dtype::F16,
            Dtype::Bf16,
            Dtype::I8,
            Dtype::U8,
            Dtype::I32,
            Dtype::U32,
        ] {
            assert_eq!(width(map_data_type(dtype)), dtype.size(), "{dtype:?}");
        }
    }

    #[test]
    fn mn_major_operands_need_rows_of_16_byte_multiples() {
        let tiles = |mn| MnMajorTiles {
            mn,
            k: 40,
            outer: 1,
            outer_stride: 0,
            box_k: 64,
        };
        assert!(tiles(4096).refusal().is_none());
        assert!(tiles(8).refusal().is_none());
        let why = tiles(1001).refusal().expect("refused");
        assert!(
            why.contains("1001") && why.contains("multiple of 8"),
            "{why}"
        );
    }
}

// day03: dtype-aware softmax, one template for f32, f16 and bf16.
//
// The storage type only decides how many bytes cross the memory bus: values are loaded in
// their type, converted to f32, and every max, exp and sum is done in f32; only the final
// result is rounded back. So a bf16 softmax moves half the bytes of an f32 one for the same
// arithmetic, and its accuracy is set by the output rounding (2^-8 relative), not the math.
//
// Versions (one template, instantiated per type below):
//   warp   day 2's warp-per-row kernel, templated on the storage type
//
// Run: cargo run --release -p day03 -- --dtype bf16
#include "common.cuh"
#include "dtype.cuh"
#include "reduce.cuh"

// grid(ceil(rows / 8)), block(256): warp w of block b owns row 8b + w; lane l reads columns
// l, l+32, ... (for 2-byte types a warp load is 64 contiguous bytes).
// quote: template
template <typename T>
__device__ __forceinline__ void softmax_warp(const T* __restrict__ x, T* __restrict__ y,
                                             index_t rows, index_t cols) {
    const index_t row = (index_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const unsigned lane = threadIdx.x & 31;
    if (row >= rows) return;  // whole warps: the shuffles below see all 32 lanes
    const T* in = x + row * cols;
    T* out = y + row * cols;

    float row_max = NEG_INF;
    for (index_t c = lane; c < cols; c += 32) row_max = fmaxf(row_max, to_f32(in[c]));
    row_max = warp_max(row_max);
    if (row_max == NEG_INF) {
        for (index_t c = lane; c < cols; c += 32) out[c] = from_f32<T>(0.0f);
        return;
    }

    float sum = 0.0f;
    for (index_t c = lane; c < cols; c += 32) sum += expf(to_f32(in[c]) - row_max);
    sum = warp_sum(sum);

    const float inv_sum = 1.0f / sum;
    for (index_t c = lane; c < cols; c += 32)
        out[c] = from_f32<T>(expf(to_f32(in[c]) - row_max) * inv_sum);
}
// end quote: template

// quote: instances
#define SOFTMAX_WARP(T, NAME)                                                                  \
    KERNEL void softmax_warp_##NAME(const T* x, T* y, index_t rows, index_t cols) {           \
        softmax_warp<T>(x, y, rows, cols);                                                     \
    }
SOFTMAX_WARP(float, f32)
SOFTMAX_WARP(f16_t, f16)
SOFTMAX_WARP(bf16_t, bf16)
// end quote: instances

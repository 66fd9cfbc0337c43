// day02: warp softmax, one warp per row.
//
// Day 1 gave each row one thread, so a warp's 32 loads went to 32 different rows. Here the
// 32 lanes of a warp share one row: lane l reads columns l, l+32, l+64, ..., so each load
// instruction of the warp reads 128 contiguous bytes (coalesced), and there are 32 times as
// many threads. The row's max and sum are combined across lanes with __shfl_xor_sync: five
// register exchanges, no shared memory, no barrier.
//
// Versions:
//   warp   one warp per row, three passes over the row (max, sum, write)
//
// Run: cargo run --release -p day02 -- --kernel warp
//
// A row that is all -inf gives zeros (day 1's convention).
#include "common.cuh"
#include "reduce.cuh"

// grid(ceil(rows / 8)), block(256): warp w of block b owns row 8b + w.
// quote: warp
KERNEL void softmax_warp_f32(const float* __restrict__ x, float* __restrict__ y, index_t rows,
                             index_t cols) {
    const index_t row = (index_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const unsigned lane = threadIdx.x & 31;
    // The whole warp leaves together (row is the same for its 32 lanes), so the full-mask
    // shuffles below always have all 32 lanes present.
    if (row >= rows) return;
    const float* in = x + row * cols;
    float* out = y + row * cols;

    float row_max = NEG_INF;
    for (index_t c = lane; c < cols; c += 32) row_max = fmaxf(row_max, in[c]);
    row_max = warp_max(row_max);
    if (row_max == NEG_INF) {
        for (index_t c = lane; c < cols; c += 32) out[c] = 0.0f;
        return;
    }

    float sum = 0.0f;
    for (index_t c = lane; c < cols; c += 32) sum += expf(in[c] - row_max);
    sum = warp_sum(sum);

    const float inv_sum = 1.0f / sum;
    for (index_t c = lane; c < cols; c += 32) out[c] = expf(in[c] - row_max) * inv_sum;
}
// end quote: warp

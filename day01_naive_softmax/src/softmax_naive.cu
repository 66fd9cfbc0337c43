// day01: naive softmax, one thread per row.
//
//   y[r][c] = exp(x[r][c] - m_r) / sum_c' exp(x[r][c'] - m_r),   m_r = max_c x[r][c]
//
// Subtracting the row maximum m_r keeps every exponent <= 0, so exp never overflows, and the
// factor exp(-m_r) cancels between numerator and denominator: the result is unchanged.
//
// Versions:
//   naive   one thread owns a whole row and walks it three times (max, sum, write)
//
// Run: cargo run --release -p day01 -- --rows 32768 --cols 4096
//
// Why it is slow: at every step the 32 threads of a warp read 32 different rows, addresses
// `cols * 4` bytes apart. One load instruction therefore touches 32 separate memory sectors
// and uses 4 bytes of each 32-byte sector (uncoalesced). And there is one thread per row:
// 32768 rows give 32768 threads, a sixteenth of the 270k an H100 can keep resident, too few
// loads in flight to cover memory latency. Day 2 gives each row a warp instead.
//
// A row that is entirely -inf has no softmax (0/0); this workspace defines it as all zeros,
// as attention kernels do for fully masked rows (PyTorch gives NaN).
#include "common.cuh"

// grid(ceil(rows / 64)), block(64): thread r computes row r.
// quote: naive
KERNEL void softmax_row_per_thread_f32(const float* __restrict__ x, float* __restrict__ y,
                                       index_t rows, index_t cols) {
    const index_t row = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* in = x + row * cols;
    float* out = y + row * cols;

    float row_max = NEG_INF;
    for (index_t c = 0; c < cols; ++c) row_max = fmaxf(row_max, in[c]);
    if (row_max == NEG_INF) {
        for (index_t c = 0; c < cols; ++c) out[c] = 0.0f;
        return;
    }

    float sum = 0.0f;
    for (index_t c = 0; c < cols; ++c) sum += expf(in[c] - row_max);

    const float inv_sum = 1.0f / sum;
    for (index_t c = 0; c < cols; ++c) out[c] = expf(in[c] - row_max) * inv_sum;
}
// end quote: naive

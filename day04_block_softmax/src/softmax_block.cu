// day04: block softmax for long rows, the online softmax, and rows split across blocks.
//
// A warp per row leaves each lane with cols/32 elements to walk: 1024 of them at 32768
// columns, one dependent load after another. Giving a row a whole block (512 threads) cuts
// that to 64 and combines the partial results in two steps: shuffles inside each warp, then
// the 16 warp results through shared memory.
//
// The online softmax (Milakov & Gimelshein 2018) folds the max and the sum into one pass:
// keep a running max m and a running sum s of exp(x - m), and when m grows, rescale s by
// exp(m_old - m_new). Two such summaries combine the same way, so lanes, warps and even
// separate blocks can each summarise a piece of a row and merge afterwards. That saves one of
// the three passes over the row.
//
// With only a few rows (8 rows of 1M columns), a block per row leaves 124 of 132 SMs idle.
// The split-row version cuts each row into chunks: one kernel summarises every chunk (grid
// chunks x rows), a second merges the summaries of its row and writes its chunk.
//
// Versions:
//   block          a block per row, three passes (max, sum, write)
//   block_online   a block per row, two passes (online max+sum, write)
//   split_row      chunks of a row on separate blocks: stats kernel, then merge-and-write
//
// Run: cargo run --release -p day04 -- --rows 8 --cols 1048576 --kernel split_row
#include "common.cuh"
#include "dtype.cuh"
#include "reduce.cuh"

// grid(rows), block(THREADS <= 1024, a multiple of 32): thread t reads columns t, t+T, ...
// quote: block
template <typename T>
__device__ __forceinline__ void softmax_block(const T* __restrict__ x, T* __restrict__ y,
                                              index_t cols) {
    __shared__ float scratch[32];
    const T* in = x + (index_t)blockIdx.x * cols;
    T* out = y + (index_t)blockIdx.x * cols;

    float row_max = NEG_INF;
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x)
        row_max = fmaxf(row_max, to_f32(in[c]));
    row_max = block_max(row_max, scratch);
    if (row_max == NEG_INF) {
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x) out[c] = from_f32<T>(0.0f);
        return;
    }

    float sum = 0.0f;
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(to_f32(in[c]) - row_max);
    sum = block_sum(sum, scratch);

    const float inv_sum = 1.0f / sum;
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x)
        out[c] = from_f32<T>(expf(to_f32(in[c]) - row_max) * inv_sum);
}
// end quote: block

// grid(rows), block(THREADS): pass 1 keeps (max, sum) online per thread, then merges them
// across the block; pass 2 writes.
// quote: block_online
template <typename T>
__device__ __forceinline__ void softmax_block_online(const T* __restrict__ x, T* __restrict__ y,
                                                     index_t cols) {
    __shared__ MaxSum scratch[32];
    const T* in = x + (index_t)blockIdx.x * cols;
    T* out = y + (index_t)blockIdx.x * cols;

    MaxSum stats = max_sum_empty();
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x)
        stats = max_sum_add(stats, to_f32(in[c]));
    stats = block_max_sum(stats, scratch);

    if (stats.max == NEG_INF) {
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x) out[c] = from_f32<T>(0.0f);
        return;
    }
    const float inv_sum = 1.0f / stats.sum;
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x)
        out[c] = from_f32<T>(expf(to_f32(in[c]) - stats.max) * inv_sum);
}
// end quote: block_online

// grid(chunks, rows), block(THREADS): block (k, r) summarises columns [k*chunk, (k+1)*chunk)
// of row r into partials[r * chunks + k].
// quote: split_stats
template <typename T>
__device__ __forceinline__ void softmax_split_stats(const T* __restrict__ x,
                                                    MaxSum* __restrict__ partials, index_t cols,
                                                    index_t chunk) {
    __shared__ MaxSum scratch[32];
    const index_t row = blockIdx.y, begin = (index_t)blockIdx.x * chunk;
    const index_t end = begin + chunk < cols ? begin + chunk : cols;
    const T* in = x + row * cols;

    MaxSum stats = max_sum_empty();
    for (index_t c = begin + threadIdx.x; c < end; c += blockDim.x)
        stats = max_sum_add(stats, to_f32(in[c]));
    stats = block_max_sum(stats, scratch);
    if (threadIdx.x == 0) partials[row * gridDim.x + blockIdx.x] = stats;
}
// end quote: split_stats

// grid(chunks, rows), block(THREADS): every block of row r merges the row's chunk summaries
// (a few hundred values, cheap to repeat per block), then writes its own chunk.
template <typename T>
__device__ __forceinline__ void softmax_split_write(const T* __restrict__ x, T* __restrict__ y,
                                                    const MaxSum* __restrict__ partials,
                                                    index_t cols, index_t chunk) {
    __shared__ MaxSum scratch[32];
    const index_t row = blockIdx.y, begin = (index_t)blockIdx.x * chunk;
    const index_t end = begin + chunk < cols ? begin + chunk : cols;

    // quote: split_merge
    MaxSum stats = max_sum_empty();
    for (unsigned k = threadIdx.x; k < gridDim.x; k += blockDim.x)
        stats = max_sum_combine(stats, partials[row * gridDim.x + k]);
    stats = block_max_sum(stats, scratch);
    // end quote: split_merge

    const T* in = x + row * cols;
    T* out = y + row * cols;
    if (stats.max == NEG_INF) {
        for (index_t c = begin + threadIdx.x; c < end; c += blockDim.x) out[c] = from_f32<T>(0.0f);
        return;
    }
    const float inv_sum = 1.0f / stats.sum;
    for (index_t c = begin + threadIdx.x; c < end; c += blockDim.x)
        out[c] = from_f32<T>(expf(to_f32(in[c]) - stats.max) * inv_sum);
}

#define SOFTMAX_BLOCK(T, NAME)                                                                 \
    KERNEL void softmax_block_##NAME(const T* x, T* y, index_t cols) {                        \
        softmax_block<T>(x, y, cols);                                                          \
    }                                                                                          \
    KERNEL void softmax_block_online_##NAME(const T* x, T* y, index_t cols) {                 \
        softmax_block_online<T>(x, y, cols);                                                   \
    }                                                                                          \
    KERNEL void softmax_split_stats_##NAME(const T* x, MaxSum* partials, index_t cols,        \
                                           index_t chunk) {                                    \
        softmax_split_stats<T>(x, partials, cols, chunk);                                      \
    }                                                                                          \
    KERNEL void softmax_split_write_##NAME(const T* x, T* y, const MaxSum* partials,          \
                                           index_t cols, index_t chunk) {                      \
        softmax_split_write<T>(x, y, partials, cols, chunk);                                   \
    }
SOFTMAX_BLOCK(float, f32)
SOFTMAX_BLOCK(f16_t, f16)
SOFTMAX_BLOCK(bf16_t, bf16)

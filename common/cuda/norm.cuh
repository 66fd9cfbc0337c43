// What the normalization days (11 RMSNorm, 12 LayerNorm) share: several row sums reduced at
// once, and the deterministic second stage of a column sum (the weight gradients).
#pragma once
#include "common.cuh"
#include "dtype.cuh"
#include "mma.cuh"
#include "reduce.cuh"

// N sums across a warp at once: the same butterfly as warp_sum, N values per exchange step.
template <int N> __device__ __forceinline__ void warp_sum_n(float (&v)[N]) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(FULL_WARP, v[i], offset);
    }
}

// N sums across a block for the price of one: a backward row needs sum(x^2) and sum(g * x)
// together, and each block reduction costs two barriers whatever it carries. `scratch` holds
// 32 * N floats of shared memory; blocks of a multiple of 32 threads, at most 1024; every
// thread gets the sums. The closing barrier lets the caller reuse `scratch`.
template <int N> __device__ __forceinline__ void block_sum_n(float (&v)[N], float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    warp_sum_n<N>(v);
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < N; ++i) scratch[i * 32 + warp] = v[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = lane < warps ? scratch[i * 32 + lane] : 0.0f;
    warp_sum_n<N>(v);
    __syncthreads();
}

// The row in registers, for the register kernels of both days, is dtype.cuh's load_row (0
// past the row's end). Thread t's pieces of a row in that layout that start inside the row,
// in order: f(slot, col) for each, with `slot` the first of the piece's registers (N of them
// with VEC, 1 without) and `col` its first column. For the stores only: a lambda's captures
// are not `__restrict__`, so a load through one would lose the read-only path.
template <typename T, int GROUP, int EPT, bool VEC, typename F>
__device__ __forceinline__ void for_each_piece(int t, index_t cols, F f) {
    constexpr int N = VEC ? 16 / sizeof(T) : 1;
#pragma unroll
    for (int p = 0; p < EPT / N; ++p) {
        const index_t col = ((index_t)p * GROUP + t) * N;
        if (col < cols) f(p * N, col);
    }
}

// How many of thread t's slots (in load_row's layout) fall inside the row: slot i is real
// exactly when i < valid_slots. One integer instead of a 64-bit column per slot, for kernels
// that must leave the padding out of a sum (LayerNorm's variance).
template <typename T, int GROUP, int EPT, bool VEC>
__device__ __forceinline__ int valid_slots(int t, index_t cols) {
    constexpr int N = VEC ? 16 / sizeof(T) : 1;
    const index_t start = (index_t)t * N, stride = (index_t)GROUP * N;
    const index_t units = start < cols ? (cols - 1 - start) / stride + 1 : 0;  // packs or slots
    return units * N < EPT ? (int)(units * N) : EPT;
}

// Writes the slots of load_row's layout that fall inside the row.
template <typename T, int GROUP, int EPT, bool VEC>
__device__ __forceinline__ void store_row(T* __restrict__ out, int t, index_t cols,
                                          const float (&v)[EPT]) {
    for_each_piece<T, GROUP, EPT, VEC>(t, cols, [&](int slot, index_t col) {
        if constexpr (VEC) {
            constexpr int N = 16 / sizeof(T);
            Pack16<T> pack;
#pragma unroll
            for (int k = 0; k < N; ++k) pack.v[k] = from_f32<T>(v[slot + k]);
            store16(out + col, pack);
        } else {
            out[col] = from_f32<T>(v[slot]);
        }
    });
}

template <int GROUP> __device__ __forceinline__ float group_sum(float v, float* scratch) {
    if constexpr (GROUP == 32) return warp_sum(v);
    else return block_sum(v, scratch);
}

// Threads per column in column_sums: each adds every COLUMN_SLICES-th partial row. 32 (8
// before): the partial rows (a few hundred) are read from L2 by chains of dependent loads, and
// with 8 slices the second stage took 5-10 us of a 150 us backward; `COLUMN_SLICES` in
// `common::family::norm` is the host's copy.
#define COLUMN_SLICES 32

// grid(ceil(cols / 32), arrays), block(32, COLUMN_SLICES): out[a * cols + c] = sum over
// k < chunks of partials[(a * chunks + k) * cols + c], the second stage of a two-stage column
// sum (the first stage wrote one f32 row of partial sums per block of rows) for `arrays`
// column sums at once (LayerNorm's dw and db in one launch). A warp reads 32 consecutive
// columns of one partial row (128 bytes, coalesced); slice s adds rows s, s + 32, ... in order,
// then thread (c, 0) adds the 32 slice sums in order. The order never depends on timing, so
// every run gives the same bits: no float atomics. Longest chain: chunks / 32 + 32 additions.
template <typename T>
__device__ __forceinline__ void column_sums(const float* __restrict__ partials, T* __restrict__ out,
                                            index_t chunks, index_t cols) {
    __shared__ float slice_sums[COLUMN_SLICES][32];
    partials += (index_t)blockIdx.y * chunks * cols;
    out += (index_t)blockIdx.y * cols;
    const index_t c = (index_t)blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (c < cols) {
#pragma unroll 4
        for (index_t k = threadIdx.y; k < chunks; k += COLUMN_SLICES) sum += partials[k * cols + c];
    }
    slice_sums[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float total = 0.0f;
#pragma unroll
        for (int s = 0; s < COLUMN_SLICES; ++s) total += slice_sums[s][threadIdx.x];
        out[c] = from_f32<T>(total);
    }
}

// Writes a thread's EPT accumulators (load_row's layout) into one f32 partial row; with VEC,
// float4 stores (partial rows are 16-byte aligned when cols is a multiple of the pack).
template <typename T, int GROUP, int EPT, bool VEC>
__device__ __forceinline__ void store_partial(float* __restrict__ part, int t, index_t cols,
                                              const float (&acc)[EPT]) {
    for_each_piece<T, GROUP, EPT, VEC>(t, cols, [&](int slot, index_t col) {
        if constexpr (VEC) {
            constexpr int N = 16 / sizeof(T);
#pragma unroll
            for (int k = 0; k < N; k += 4)
                *reinterpret_cast<float4*>(part + col + k) = make_float4(
                    acc[slot + k], acc[slot + k + 1], acc[slot + k + 2], acc[slot + k + 3]);
        } else {
            part[col] = acc[slot];
        }
    });
}

// ---- rows staged ahead in shared memory (the backward's bwd_vec_pipe) ----
// A register kernel with one row in flight per block waits a full memory latency per row;
// the pipelined backward keeps norm_pipe_stages<T>() - 1 more rows of x and dy on their way into
// shared memory by cp.async while it works on the current one. Thread t copies exactly the
// packs it will read (load_row's VEC layout, pack p of thread t at slot p * GROUP + t), so
// no barrier guards the buffers: each is read and refilled by the same thread, in order.

// Rows in flight per block: 5 for 16-bit types, 2 for f32. Every tier runs 1024 threads per
// SM, so a stage costs an SM 2 inputs x 1024 x 8 elements: 32 KB in 16-bit types, 64 KB in f32;
// 5 and 2 stages (160 and 128 KB) leave room for day 12's 32 KB of parked weights. (3 stages
// in 16-bit types measured 2315 and 2125 GB/s on the RMSNorm and LayerNorm backward: still
// short of the copy, so more bytes in flight.)
template <typename T> __host__ __device__ constexpr int norm_pipe_stages() {
    return sizeof(T) == 2 ? 5 : 2;
}

// Starts the copy of thread t's packs of a row (cols a multiple of the pack) into `buf`.
template <typename T, int GROUP, int EPT>
__device__ __forceinline__ void stage_row(const T* __restrict__ in, int t, index_t cols,
                                          uint4* buf) {
    constexpr int N = 16 / sizeof(T);
#pragma unroll
    for (int p = 0; p < EPT / N; ++p) {
        const index_t col = ((index_t)p * GROUP + t) * N;
        if (col < cols) cp_async_16_zfill(&buf[p * GROUP + t], in + col, true);
    }
}

// load_row from a staged buffer: the same values in the same slots (0 past the row).
template <typename T, int GROUP, int EPT>
__device__ __forceinline__ void staged_row(const uint4* buf, int t, index_t cols,
                                           float (&v)[EPT]) {
    constexpr int N = 16 / sizeof(T);
#pragma unroll
    for (int p = 0; p < EPT / N; ++p) {
        const index_t col = ((index_t)p * GROUP + t) * N;
        Pack16<T> pack;
        *reinterpret_cast<uint4*>(&pack) = buf[p * GROUP + t];
#pragma unroll
        for (int k = 0; k < N; ++k) v[p * N + k] = col < cols ? to_f32(pack.v[k]) : 0.0f;
    }
}

// Both days' bwd_vec_pipe walk their rows (b, b + gridDim.x, ... for block b) through the same
// pipeline, x and dy of a row side by side in a stage of `staged` (dynamic shared memory,
// [stage][x | dy][packs]): stage_first_rows before the loop, next_staged_rows at the top of
// each round; what a row does with its x and dy is the day's own. Calls from the day's loop
// rather than a loop that calls the day's row code back: with the row's work in a lambda,
// day 12's kernels came out with other register assignments.

// Starts the copy of row `row` of x and dy into stage s. Past the last row nothing is copied
// but the group is still committed, so that every thread commits one group per call and
// cp_async_wait counts alike in every round.
template <typename T, int GROUP, int EPT>
__device__ __forceinline__ void stage_rows(const T* __restrict__ x, const T* __restrict__ dy,
                                           index_t row, index_t rows, int t, index_t cols,
                                           uint4* staged, int s) {
    constexpr int SLOTS = EPT / (16 / sizeof(T)) * GROUP;  // packs of one input row
    if (row < rows) {
        stage_row<T, GROUP, EPT>(x + row * cols, t, cols, &staged[(2 * s) * SLOTS]);
        stage_row<T, GROUP, EPT>(dy + row * cols, t, cols, &staged[(2 * s + 1) * SLOTS]);
    }
    cp_async_commit();
}

// Fills the pipeline: the block's first norm_pipe_stages<T>() - 1 rows on their way into stages
// 0, 1, ... Work that needs no row (w, the accumulators) can follow while they fly.
template <typename T, int GROUP, int EPT>
__device__ __forceinline__ void stage_first_rows(const T* __restrict__ x,
                                                 const T* __restrict__ dy, index_t rows, int t,
                                                 index_t cols, uint4* staged) {
    constexpr int STAGES = norm_pipe_stages<T>();
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s)
        stage_rows<T, GROUP, EPT>(x, dy, blockIdx.x + (index_t)s * gridDim.x, rows, t, cols, staged,
                                  s);
}

// Row `row` of x and dy into xv and dyv, as load_row would give them (0 past the row), with `s`
// the stage holding `row` (0 for the block's first): refills the stage this thread finished
// reading last round with the row STAGES - 1 ahead, waits for this row's stage, reads it, and
// moves `s` on to the next row's.
template <typename T, int GROUP, int EPT>
__device__ __forceinline__ void next_staged_rows(const T* __restrict__ x,
                                                 const T* __restrict__ dy, index_t row,
                                                 index_t rows, int t, index_t cols,
                                                 uint4* staged, int& s, float (&xv)[EPT],
                                                 float (&dyv)[EPT]) {
    constexpr int STAGES = norm_pipe_stages<T>();
    constexpr int SLOTS = EPT / (16 / sizeof(T)) * GROUP;
    stage_rows<T, GROUP, EPT>(x, dy, row + (index_t)(STAGES - 1) * gridDim.x, rows, t, cols,
                              staged, s == 0 ? STAGES - 1 : s - 1);
    cp_async_wait<STAGES - 1>();  // all but the newest STAGES - 1 groups: this row's
    staged_row<T, GROUP, EPT>(&staged[(2 * s) * SLOTS], t, cols, xv);
    staged_row<T, GROUP, EPT>(&staged[(2 * s + 1) * SLOTS], t, cols, dyv);
    s = s == STAGES - 1 ? 0 : s + 1;
}

// ---- the kernels of a norm day, every tier of every dtype ----
// A day defines SIMPLE_KERNELS(T, NAME) (its non-tiered kernels),
// REGS_TIER(T, NAME, GROUP, EPT, THREADS, SUFFIX, VEC), BWD_TIER(T, NAME, GROUP, EPT, SUFFIX,
// VEC) and BWD_PIPE_TIER(T, NAME, GROUP, EPT) (one extern "C" kernel each), then instantiates NORM_ALL_KERNELS per dtype: the tier
// list lives here once, beside the Rust one it must match.

// Forward tiers (threads per row, elements per thread), as day05's and as
// common::norm::forward_tiers lists them (the launchers pick kernels by those names): a warp
// with one pack per lane, a warp with 16 each, then blocks of 128 to 1024 threads with 32 each
// (32768 columns).
#define NORM_FWD_TIERS(T, NAME, PACK, SUFFIX, VEC)                                                 \
    REGS_TIER(T, NAME, 32, PACK, 256, SUFFIX, VEC)                                                 \
    REGS_TIER(T, NAME, 32, 16, 256, SUFFIX, VEC)                                                   \
    REGS_TIER(T, NAME, 128, 32, 128, SUFFIX, VEC)                                                  \
    REGS_TIER(T, NAME, 256, 32, 256, SUFFIX, VEC)                                                  \
    REGS_TIER(T, NAME, 512, 32, 512, SUFFIX, VEC)                                                  \
    REGS_TIER(T, NAME, 1024, 32, 1024, SUFFIX, VEC)

// Backward tiers: x, dy, w and the dw accumulator are all in registers (4 x EPT floats), so
// threads hold 8 elements (16 spilled at 80 registers) and the widest row is 1024 x 8 = 8192.
// Past the warp tier the block doubles from tier to tier, so a 16-bit row wider than a warp's
// pack leaves at most half of its block idle.
#define NORM_BWD_TIERS(T, NAME, PACK, SUFFIX, VEC)                                                 \
    BWD_TIER(T, NAME, 32, PACK, SUFFIX, VEC)                                                       \
    BWD_TIER(T, NAME, 64, 8, SUFFIX, VEC)                                                          \
    BWD_TIER(T, NAME, 128, 8, SUFFIX, VEC)                                                         \
    BWD_TIER(T, NAME, 256, 8, SUFFIX, VEC)                                                         \
    BWD_TIER(T, NAME, 512, 8, SUFFIX, VEC)                                                         \
    BWD_TIER(T, NAME, 1024, 8, SUFFIX, VEC)

// The pipelined backward (BWD_PIPE_TIER, 16-byte rows only): the backward tiers' shapes.
#define NORM_BWD_PIPE_TIERS(T, NAME, PACK)                                                         \
    BWD_PIPE_TIER(T, NAME, 32, PACK)                                                               \
    BWD_PIPE_TIER(T, NAME, 64, 8)                                                                  \
    BWD_PIPE_TIER(T, NAME, 128, 8)                                                                 \
    BWD_PIPE_TIER(T, NAME, 256, 8)                                                                 \
    BWD_PIPE_TIER(T, NAME, 512, 8)                                                                 \
    BWD_PIPE_TIER(T, NAME, 1024, 8)

#define NORM_ALL_KERNELS(T, NAME, PACK)                                                            \
    SIMPLE_KERNELS(T, NAME)                                                                        \
    NORM_FWD_TIERS(T, NAME, PACK, v, true)                                                         \
    NORM_FWD_TIERS(T, NAME, PACK, s, false)                                                        \
    NORM_BWD_TIERS(T, NAME, PACK, v, true)                                                         \
    NORM_BWD_TIERS(T, NAME, PACK, s, false)                                                        \
    NORM_BWD_PIPE_TIERS(T, NAME, PACK)

// bwd_saved's tiers (BWD_SAVED_TIER(T, NAME, GROUP, EPT, BLOCK, MIN_BLOCKS), one extern "C"
// kernel each; saved_tiers in the launcher): a warp per row (8 rows a block of 256) up to 16
// elements a thread, then blocks of 128 and 256 threads with 32 each. MIN_BLOCKS_128: the
// blocks of 128 threads per SM the day's kernel is sized for.
#define NORM_BWD_SAVED_TIERS(T, NAME, PACK, MIN_BLOCKS_128)                                         \
    BWD_SAVED_TIER(T, NAME, 32, PACK, 256, 2)                                                      \
    BWD_SAVED_TIER(T, NAME, 32, 16, 256, 1)                                                        \
    BWD_SAVED_TIER(T, NAME, 128, 32, 128, MIN_BLOCKS_128)                                          \
    BWD_SAVED_TIER(T, NAME, 256, 32, 256, 1)

// Every kernel of a norm day for f32, f16 and bf16: bwd_saved's tiers, then NORM_ALL_KERNELS.
#define NORM_KERNELS_EVERY_DTYPE(SAVED_MIN_BLOCKS_128)                                             \
    NORM_BWD_SAVED_TIERS(float, f32, 4, SAVED_MIN_BLOCKS_128)                                      \
    NORM_BWD_SAVED_TIERS(f16_t, f16, 8, SAVED_MIN_BLOCKS_128)                                      \
    NORM_BWD_SAVED_TIERS(bf16_t, bf16, 8, SAVED_MIN_BLOCKS_128)                                    \
    NORM_ALL_KERNELS(float, f32, 4)                                                                \
    NORM_ALL_KERNELS(f16_t, f16, 8)                                                                \
    NORM_ALL_KERNELS(bf16_t, bf16, 8)

// ---- the backward from the forward's saved statistics (bwd_saved) ----
// Training keeps each row's statistics from the forward (RMSNorm's rstd, LayerNorm's mean and
// rstd, f32), so the backward need not recompute them: what is left per row is one set of
// sums reduced once. These kernels keep a thread's packs of x and dy packed (half the
// registers of floats), so the next row's loads are already in flight while a row is reduced
// and written, and reduce with one barrier per row: the warps' partial sums go to one of two
// scratch buffers, alternating by row. A warp that races ahead to row r + 1 writes the other
// buffer, and it cannot reach row r + 2 (this buffer again) before every thread has passed row
// r + 1's barrier, after reading row r's sums.

// Rows of 16-byte packs only (cols a multiple of the pack; bwd_vec_regs takes the others).
template <typename T, int GROUP, int EPT>
__device__ __forceinline__ void load_packs(const T* __restrict__ in, int t, index_t cols,
                                           uint4 (&packs)[EPT * sizeof(T) / 16]) {
    constexpr int N = 16 / sizeof(T);
#pragma unroll
    for (int p = 0; p < EPT / N; ++p) {
        const index_t col = ((index_t)p * GROUP + t) * N;
        packs[p] = col < cols ? *reinterpret_cast<const uint4*>(in + col) : make_uint4(0, 0, 0, 0);
    }
}

// The N elements of a pack as f32.
template <typename T>
__device__ __forceinline__ void unpack(const uint4& raw, float (&v)[16 / sizeof(T)]) {
    Pack16<T> pack;
    *reinterpret_cast<uint4*>(&pack) = raw;
#pragma unroll
    for (int k = 0; k < 16 / (int)sizeof(T); ++k) v[k] = to_f32(pack.v[k]);
}

// Writes load_packs' layout from floats (slots past the row are not written).
template <typename T, int GROUP, int EPT>
__device__ __forceinline__ void store_packs(T* __restrict__ out, int t, index_t cols, int p,
                                            const float (&v)[16 / sizeof(T)]) {
    constexpr int N = 16 / sizeof(T);
    const index_t col = ((index_t)p * GROUP + t) * N;
    if (col < cols) {
        Pack16<T> pack;
#pragma unroll
        for (int k = 0; k < N; ++k) pack.v[k] = from_f32<T>(v[k]);
        store16(out + col, pack);
    }
}

// Rows a block of bwd_saved works on at once: a warp per row in the 32-thread tier (8 warps,
// 8 rows), one row per block otherwise.
template <int GROUP> __host__ __device__ constexpr int saved_rows_per_block() {
    return GROUP == 32 ? 8 : 1;
}

// N sums over a row's GROUP threads with one barrier (none for a warp per row). `scratch`
// holds 2 x N x 32 floats; `buffer` alternates 0, 1 from row to row (see above).
template <int GROUP, int N>
__device__ __forceinline__ void row_sum_n_one_barrier(float (&v)[N], float* scratch, int buffer) {
    warp_sum_n<N>(v);
    if constexpr (GROUP > 32) {
        constexpr int WARPS = GROUP / 32;
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        float* mine = scratch + buffer * N * 32;
        if (lane == 0) {
#pragma unroll
            for (int i = 0; i < N; ++i) mine[i * 32 + warp] = v[i];
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < N; ++i) {
            float total = 0.0f;
#pragma unroll
            for (int w = 0; w < WARPS; ++w) total += mine[i * 32 + w];  // same order everywhere
            v[i] = total;
        }
    }
}

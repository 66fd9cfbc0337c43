// day11: RMSNorm forward and backward (the challenge's RMSNorm days: warp and block reductions,
// a two-kernel split, a naive single-block version improved with the reduction's tricks).
//
//   y = x * rstd * w,   rstd = 1 / sqrt(mean(x^2) + eps)          (per row, w per column)
//   dx = rstd * (g - xhat * mean(g * xhat)),  g = w * dy,  xhat = x * rstd
//   dw = sum over rows of dy * xhat                               (a column sum)
//
// Storage f32, f16 or bf16; every sum and product is f32. The first three backward versions
// recompute each row's rstd from x (they read x anyway, and the row is in registers), so
// their inputs are x, w and dy only; bwd_saved reads the rstd a training forward saves.
//
// Forward versions (the path the challenge took, then the row in registers):
//   naive      one thread per row, two passes over its row
//   split      a block per row writes rstd, then an elementwise kernel scales
//   block      a block per row, sum then scale, one launch, scalar loads
//   vec_regs   the row in registers, 16-byte loads: x read once, y written once (day05)
// Backward versions:
//   bwd_split     a block per row writes dx and rstd; dw by a two-stage column sum that reads
//                 x and dy again (partials per block of 64 rows, then column_sums)
//   bwd_vec_regs  blocks loop over rows with the row in registers: dx, and each block's
//                 share of dw accumulated in registers, written once as a partial row;
//                 column_sums finishes (deterministic, no atomics)
//   bwd_vec_pipe  bwd_vec_regs with the next rows' x and dy already on their way into shared
//                 memory (cp.async, 4 rows ahead in 16-bit types, 1 in f32) while a row is
//                 reduced and written: more bytes in flight per SM than occupancy alone gives
//   bwd_saved     the forward's saved rstd read: one sum per row, one barrier, 128 threads x
//                 32 elements, the next row's x and dy loaded into registers meanwhile
//
// Run: cargo run --release -p day11 -- --rows 16384 --cols 4096 --dtype bf16 --kernel vec_regs
#include "common.cuh"
#include "dtype.cuh"
#include "norm.cuh"
#include "reduce.cuh"

// ---------------------------------------------------------------------------------------
// naive: grid(ceil(rows / 128)), block(128): thread r owns row r. Neighbouring threads read
// addresses a whole row apart, so every load is its own memory transaction.
// quote: naive
template <typename T>
__device__ __forceinline__ void rmsnorm_naive(const T* __restrict__ x, const T* __restrict__ w,
                                              T* __restrict__ y, index_t rows, index_t cols,
                                              float eps) {
    const index_t row = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const T* in = x + row * cols;
    T* out = y + row * cols;
    float sum = 0.0f;
    for (index_t c = 0; c < cols; ++c) {
        const float v = to_f32(in[c]);
        sum += v * v;
    }
    const float rstd = rsqrtf(sum / (float)cols + eps);
    for (index_t c = 0; c < cols; ++c) out[c] = from_f32<T>(to_f32(in[c]) * rstd * to_f32(w[c]));
}
// end quote: naive

// ---------------------------------------------------------------------------------------
// split, kernel 1: grid(rows), block(256): the block sums its row's squares (coalesced,
// strided by the block) and thread 0 writes the row's rstd.
template <typename T>
__device__ __forceinline__ void rmsnorm_rstd(const T* __restrict__ x, float* __restrict__ rstd,
                                             index_t cols, float eps) {
    __shared__ float scratch[32];
    const T* in = x + (index_t)blockIdx.x * cols;
    float sum = 0.0f;
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = to_f32(in[c]);
        sum += v * v;
    }
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0) rstd[blockIdx.x] = rsqrtf(sum / (float)cols + eps);
}

// split, kernel 2: grid(ceil(cols / 256), min(rows, 65535)), block(256): one thread per
// element; a block covers 256 columns of rows y, y + gridDim.y, ... The 2-D grid avoids a
// 64-bit division per element to find its row. x is read a second time from memory: the
// 128 MiB of the default problem do not stay in the 50 MiB L2 between the kernels.
// quote: split_scale
template <typename T>
__device__ __forceinline__ void rmsnorm_scale(const T* __restrict__ x, const T* __restrict__ w,
                                              const float* __restrict__ rstd, T* __restrict__ y,
                                              index_t rows, index_t cols) {
    const index_t c = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const float wc = to_f32(w[c]);
    for (index_t r = blockIdx.y; r < rows; r += gridDim.y)
        y[r * cols + c] = from_f32<T>(to_f32(x[r * cols + c]) * rstd[r] * wc);
}
// end quote: split_scale

// ---------------------------------------------------------------------------------------
// block: grid(rows), block(256): one launch, the row read twice by the same block; the
// second read mostly hits L1/L2 (the block read those 8 KB a moment ago).
// quote: block
template <typename T>
__device__ __forceinline__ void rmsnorm_block(const T* __restrict__ x, const T* __restrict__ w,
                                              T* __restrict__ y, index_t cols, float eps) {
    __shared__ float scratch[32];
    const T* in = x + (index_t)blockIdx.x * cols;
    T* out = y + (index_t)blockIdx.x * cols;
    float sum = 0.0f;
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = to_f32(in[c]);
        sum += v * v;
    }
    const float rstd = rsqrtf(block_sum(sum, scratch) / (float)cols + eps);
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x)
        out[c] = from_f32<T>(to_f32(in[c]) * rstd * to_f32(w[c]));
}
// end quote: block

// ---------------------------------------------------------------------------------------
// vec_regs: GROUP = 32 is a warp per row (8 rows per 256-thread block, grid(ceil(rows / 8))),
// otherwise a block of GROUP threads per row (grid(rows)). x is read once into registers, its
// squares summed, and y written from the same registers; w is read at the write, 16 bytes at
// a time, mostly from L1 (8 KB for 4096 bf16 columns, shared by every row the SM runs).
template <typename T, int GROUP, int EPT, bool VEC>
__device__ __forceinline__ void rmsnorm_regs(const T* __restrict__ x, const T* __restrict__ w,
                                             T* __restrict__ y, index_t rows, index_t cols,
                                             float eps) {
    // quote: regs_load
    __shared__ float scratch[32];
    const int t = threadIdx.x % GROUP;
    const index_t row = (index_t)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
    if (GROUP == 32 && row >= rows) return;  // whole warps; a block per row always has its row
    float v[EPT];
    load_row<T, GROUP, EPT, VEC>(x + row * cols, t, cols, v, 0.0f);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < EPT; ++i) sum += v[i] * v[i];
    const float rstd = rsqrtf(group_sum<GROUP>(sum, scratch) / (float)cols + eps);
    // end quote: regs_load
    // w pack by pack as each output pack is written: a whole w[EPT] array beside v[EPT]
    // would cost the 1024-thread tier more than its 64 registers.
    // quote: regs_store
    constexpr int N = 16 / sizeof(T);
    T* out = y + row * cols;
    if constexpr (VEC) {
#pragma unroll
        for (int p = 0; p < EPT / N; ++p) {
            const index_t col = ((index_t)p * GROUP + t) * N;
            if (col < cols) {
                const Pack16<T> wp = load16(w + col);
                Pack16<T> pack;
#pragma unroll
                for (int k = 0; k < N; ++k)
                    pack.v[k] = from_f32<T>(v[p * N + k] * rstd * to_f32(wp.v[k]));
                store16(out + col, pack);
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < EPT; ++i) {
            const index_t col = (index_t)i * GROUP + t;
            if (col < cols) out[col] = from_f32<T>(v[i] * rstd * to_f32(w[col]));
        }
    }
    // end quote: regs_store
}

// ---------------------------------------------------------------------------------------
// bwd_split, kernel 1: grid(rows), block(256): a block per row. Pass 1 sums x^2 and g * x
// (one block reduction for both); pass 2 reads the row again and writes dx; thread 0 saves
// rstd for the column sum.
template <typename T>
__device__ __forceinline__ void rmsnorm_bwd_dx_block(const T* __restrict__ x,
                                                     const T* __restrict__ w,
                                                     const T* __restrict__ dy, T* __restrict__ dx,
                                                     float* __restrict__ rstd_out, index_t cols,
                                                     float eps) {
    __shared__ float scratch[64];
    const index_t base = (index_t)blockIdx.x * cols;
    float sums[2] = {0.0f, 0.0f};  // sum(x^2), sum(g * x)
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = to_f32(x[base + c]);
        sums[0] += v * v;
        sums[1] += to_f32(w[c]) * to_f32(dy[base + c]) * v;
    }
    block_sum_n<2>(sums, scratch);
    const float rstd = rsqrtf(sums[0] / (float)cols + eps);
    const float mean_g_xhat = rstd * sums[1] / (float)cols;
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float g = to_f32(w[c]) * to_f32(dy[base + c]);
        const float xhat = to_f32(x[base + c]) * rstd;
        dx[base + c] = from_f32<T>(rstd * (g - xhat * mean_g_xhat));
    }
    if (threadIdx.x == 0) rstd_out[blockIdx.x] = rstd;
}

// bwd_split, kernel 2: grid(ceil(cols / 256), chunks), block(256): the first stage of the
// column sum. Block (bx, k) adds dy * x * rstd over rows [k * chunk_rows, (k + 1) *
// chunk_rows) for its 256 columns, one row after another, and writes partials[k][c].
template <typename T>
__device__ __forceinline__ void rmsnorm_bwd_dw_partials(const T* __restrict__ x,
                                                        const T* __restrict__ dy,
                                                        const float* __restrict__ rstd,
                                                        float* __restrict__ partials,
                                                        index_t rows, index_t cols,
                                                        index_t chunk_rows) {
    // quote: bwd_split_dw
    const index_t c = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const index_t begin = (index_t)blockIdx.y * chunk_rows;
    const index_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
    float sum = 0.0f;
    for (index_t r = begin; r < end; ++r)
        sum += to_f32(dy[r * cols + c]) * (to_f32(x[r * cols + c]) * rstd[r]);
    partials[(index_t)blockIdx.y * cols + c] = sum;
    // end quote: bwd_split_dw
}

// One row of the fused backward, from x and dy in registers (every thread of the block calls
// it: it holds a block reduction): sum(x^2) and sum(g * x) reduced together, dx written over
// x's registers, the row's dy * xhat added to the block's dw accumulators.
// quote: bwd_row
template <int EPT>
__device__ __forceinline__ void rmsnorm_bwd_row(float (&xv)[EPT], const float (&dyv)[EPT],
                                                const float (&wv)[EPT], float (&acc)[EPT],
                                                index_t cols, float eps, float* scratch) {
    float sums[2] = {0.0f, 0.0f};  // sum(x^2), sum(g * x)
#pragma unroll
    for (int i = 0; i < EPT; ++i) {
        sums[0] += xv[i] * xv[i];
        sums[1] += wv[i] * dyv[i] * xv[i];
    }
    block_sum_n<2>(sums, scratch);
    const float rstd = rsqrtf(sums[0] / (float)cols + eps);
    const float mean_g_xhat = rstd * sums[1] / (float)cols;
#pragma unroll
    for (int i = 0; i < EPT; ++i) {
        const float xhat = xv[i] * rstd;
        acc[i] += dyv[i] * xhat;
        xv[i] = rstd * (wv[i] * dyv[i] - xhat * mean_g_xhat);  // dx, in x's registers
    }
}
// end quote: bwd_row

// ---------------------------------------------------------------------------------------
// bwd_vec_regs: grid(blocks), block(GROUP): block b takes rows b, b + gridDim.x, ... (about
// rows / blocks of them). Per row: x and dy into registers (16-byte loads), sum(x^2) and
// sum(g * x) in one block reduction, dx written from registers. The block's share of dw
// stays in registers (acc) across all its rows, and is written once at the end as row b of
// `partials` (f32, gridDim.x x cols); column_sums adds those rows in a fixed order. w is read
// once per block.
template <typename T, int GROUP, int EPT, bool VEC>
__device__ __forceinline__ void rmsnorm_bwd_regs(const T* __restrict__ x, const T* __restrict__ w,
                                                 const T* __restrict__ dy, T* __restrict__ dx,
                                                 float* __restrict__ partials, index_t rows,
                                                 index_t cols, float eps) {
    __shared__ float scratch[64];
    const int t = threadIdx.x;
    // quote: bwd_regs
    float wv[EPT], acc[EPT];
    load_row<T, GROUP, EPT, VEC>(w, t, cols, wv, 0.0f);
#pragma unroll
    for (int i = 0; i < EPT; ++i) acc[i] = 0.0f;
    for (index_t row = blockIdx.x; row < rows; row += gridDim.x) {
        float xv[EPT], dyv[EPT];
        load_row<T, GROUP, EPT, VEC>(x + row * cols, t, cols, xv, 0.0f);
        load_row<T, GROUP, EPT, VEC>(dy + row * cols, t, cols, dyv, 0.0f);
        rmsnorm_bwd_row<EPT>(xv, dyv, wv, acc, cols, eps, scratch);
        store_row<T, GROUP, EPT, VEC>(dx + row * cols, t, cols, xv);
    }
    // The block's share of dw: one f32 partial row, in load_row's layout.
    store_partial<T, GROUP, EPT, VEC>(partials + (index_t)blockIdx.x * cols, t, cols, acc);
    // end quote: bwd_regs
}

// bwd_vec_pipe: bwd_vec_regs's work split and arithmetic, with x and dy of the block's rows
// staged norm_pipe_stages<T>() deep in dynamic shared memory ([stage][x | dy][packs]), so the
// loads of the rows ahead overlap this row's reductions and stores. 16-byte rows only.
template <typename T, int GROUP, int EPT>
__device__ __forceinline__ void rmsnorm_bwd_pipe(const T* __restrict__ x, const T* __restrict__ w,
                                                 const T* __restrict__ dy, T* __restrict__ dx,
                                                 float* __restrict__ partials, index_t rows,
                                                 index_t cols, float eps) {
    extern __shared__ uint4 staged[];
    __shared__ float scratch[64];
    const int t = threadIdx.x;
    stage_first_rows<T, GROUP, EPT>(x, dy, rows, t, cols, staged);
    float wv[EPT], acc[EPT];
    load_row<T, GROUP, EPT, true>(w, t, cols, wv, 0.0f);
#pragma unroll
    for (int i = 0; i < EPT; ++i) acc[i] = 0.0f;
    int s = 0;  // the stage holding `row`
    for (index_t row = blockIdx.x; row < rows; row += gridDim.x) {
        float xv[EPT], dyv[EPT];
        next_staged_rows<T, GROUP, EPT>(x, dy, row, rows, t, cols, staged, s, xv, dyv);
        rmsnorm_bwd_row<EPT>(xv, dyv, wv, acc, cols, eps, scratch);
        store_row<T, GROUP, EPT, true>(dx + row * cols, t, cols, xv);
    }
    store_partial<T, GROUP, EPT, true>(partials + (index_t)blockIdx.x * cols, t, cols, acc);
}

// ---------------------------------------------------------------------------------------
// bwd_saved: grid(blocks), block(GROUP; 256 = a warp per row, 8 rows, in the 32-thread
// tiers): the forward's rstd read (one f32 per row, as training saves it) instead of
// recomputed, so a row needs one sum, sum(g * x), reduced with one barrier (none for a warp).
// Row group j of block b takes rows b * R + j, then + gridDim.x * R, ... (R rows per block).
// Thread t's packs of x and dy stay packed in registers, and the next row's are loaded before
// this row is reduced and written. dw as bwd_vec_regs: each row group's share in registers,
// one partial row per row group at the end. 16-byte rows only.
template <typename T, int GROUP, int EPT>
__device__ __forceinline__ void rmsnorm_bwd_saved(const T* __restrict__ x, const T* __restrict__ w,
                                                  const T* __restrict__ dy,
                                                  const float* __restrict__ saved_rstd,
                                                  T* __restrict__ dx, float* __restrict__ partials,
                                                  index_t rows, index_t cols) {
    constexpr int N = 16 / sizeof(T), P = EPT / N, R = saved_rows_per_block<GROUP>();
    __shared__ float scratch[2 * 32];
    const int t = threadIdx.x % GROUP;
    const index_t group = (index_t)blockIdx.x * R + threadIdx.x / GROUP;
    const index_t stride = (index_t)gridDim.x * R;
    float wv[EPT], acc[EPT];
    load_row<T, GROUP, EPT, true>(w, t, cols, wv, 0.0f);  // 0 past the row: g is 0 there
#pragma unroll
    for (int i = 0; i < EPT; ++i) acc[i] = 0.0f;
    uint4 xp[P], dyp[P];
    if (group < rows) {
        load_packs<T, GROUP, EPT>(x + group * cols, t, cols, xp);
        load_packs<T, GROUP, EPT>(dy + group * cols, t, cols, dyp);
    }
    int buffer = 0;
    for (index_t row = group; row < rows; row += stride) {
        const index_t next = row + stride;
        uint4 xn[P], dyn[P];
        if (next < rows) {
            load_packs<T, GROUP, EPT>(x + next * cols, t, cols, xn);
            load_packs<T, GROUP, EPT>(dy + next * cols, t, cols, dyn);
        }
        const float rstd = saved_rstd[row];
        float sum[1] = {0.0f};  // sum(g * x)
#pragma unroll
        for (int p = 0; p < P; ++p) {
            float xv[N], dyv[N];
            unpack<T>(xp[p], xv);
            unpack<T>(dyp[p], dyv);
#pragma unroll
            for (int k = 0; k < N; ++k) sum[0] += wv[p * N + k] * dyv[k] * xv[k];
        }
        row_sum_n_one_barrier<GROUP, 1>(sum, scratch, buffer);
        buffer ^= 1;
        const float mean_g_xhat = rstd * sum[0] / (float)cols;
#pragma unroll
        for (int p = 0; p < P; ++p) {
            float xv[N], dyv[N], out[N];
            unpack<T>(xp[p], xv);
            unpack<T>(dyp[p], dyv);
#pragma unroll
            for (int k = 0; k < N; ++k) {
                const float xhat = xv[k] * rstd;
                acc[p * N + k] += dyv[k] * xhat;
                out[k] = rstd * (wv[p * N + k] * dyv[k] - xhat * mean_g_xhat);
            }
            store_packs<T, GROUP, EPT>(dx + row * cols, t, cols, p, out);
        }
#pragma unroll
        for (int p = 0; p < P; ++p) {
            xp[p] = xn[p];
            dyp[p] = dyn[p];
        }
    }
    store_partial<T, GROUP, EPT, true>(partials + group * cols, t, cols, acc);
}

// ---------------------------------------------------------------------------------------
// Instantiations. Names: op, method, dtype, then the tier (threads per row g, elements per
// thread e) and v (16-byte loads) or s (scalar loads, for widths no pack divides).
#define SIMPLE_KERNELS(T, NAME)                                                                \
    KERNEL void __launch_bounds__(128)                                                         \
        rmsnorm_naive_##NAME(const T* x, const T* w, T* y, index_t rows, index_t cols,         \
                             float eps) {                                                      \
        rmsnorm_naive<T>(x, w, y, rows, cols, eps);                                            \
    }                                                                                          \
    KERNEL void __launch_bounds__(256)                                                         \
        rmsnorm_rstd_##NAME(const T* x, float* rstd, index_t cols, float eps) {                \
        rmsnorm_rstd<T>(x, rstd, cols, eps);                                                   \
    }                                                                                          \
    KERNEL void __launch_bounds__(256) rmsnorm_scale_##NAME(                                   \
        const T* x, const T* w, const float* rstd, T* y, index_t rows, index_t cols) {         \
        rmsnorm_scale<T>(x, w, rstd, y, rows, cols);                                           \
    }                                                                                          \
    KERNEL void __launch_bounds__(256)                                                         \
        rmsnorm_block_##NAME(const T* x, const T* w, T* y, index_t cols, float eps) {          \
        rmsnorm_block<T>(x, w, y, cols, eps);                                                  \
    }                                                                                          \
    KERNEL void __launch_bounds__(256) rmsnorm_bwd_dx_block_##NAME(                            \
        const T* x, const T* w, const T* dy, T* dx, float* rstd, index_t cols, float eps) {    \
        rmsnorm_bwd_dx_block<T>(x, w, dy, dx, rstd, cols, eps);                                \
    }                                                                                          \
    KERNEL void __launch_bounds__(256)                                                         \
        rmsnorm_bwd_dw_partials_##NAME(const T* x, const T* dy, const float* rstd,             \
                                       float* partials, index_t rows, index_t cols,            \
                                       index_t chunk_rows) {                                   \
        rmsnorm_bwd_dw_partials<T>(x, dy, rstd, partials, rows, cols, chunk_rows);             \
    }                                                                                          \
    KERNEL void __launch_bounds__(32 * COLUMN_SLICES)                                          \
        column_sums_##NAME(const float* partials, T* out, index_t chunks, index_t cols) {      \
        column_sums<T>(partials, out, chunks, cols);                                           \
    }

#define REGS_TIER(T, NAME, GROUP, EPT, BLOCK, SUFFIX, VEC)                                     \
    KERNEL void __launch_bounds__(BLOCK) rmsnorm_regs_##NAME##_g##GROUP##_e##EPT##_##SUFFIX(   \
        const T* x, const T* w, T* y, index_t rows, index_t cols, float eps) {                 \
        rmsnorm_regs<T, GROUP, EPT, VEC>(x, w, y, rows, cols, eps);                            \
    }

// 1024 threads per SM (at most 64 registers each): each block works on one row at a time,
// so the rows in flight, and the bytes that cover the memory latency, come from occupancy.
#define BWD_TIER(T, NAME, GROUP, EPT, SUFFIX, VEC)                                             \
    KERNEL void __launch_bounds__(GROUP, 1024 / GROUP)                                         \
        rmsnorm_bwd_regs_##NAME##_g##GROUP##_e##EPT##_##SUFFIX(                                \
            const T* x, const T* w, const T* dy, T* dx, float* partials, index_t rows,         \
            index_t cols, float eps) {                                                         \
        rmsnorm_bwd_regs<T, GROUP, EPT, VEC>(x, w, dy, dx, partials, rows, cols, eps);         \
    }

#define BWD_PIPE_TIER(T, NAME, GROUP, EPT)                                                     \
    KERNEL void __launch_bounds__(GROUP, 1024 / GROUP)                                         \
        rmsnorm_bwd_pipe_##NAME##_g##GROUP##_e##EPT(const T* x, const T* w, const T* dy, T* dx, \
                                                   float* partials, index_t rows,              \
                                                   index_t cols, float eps) {                  \
        rmsnorm_bwd_pipe<T, GROUP, EPT>(x, w, dy, dx, partials, rows, cols, eps);              \
    }

// bwd_saved's kernel of a tier (NORM_BWD_SAVED_TIERS in norm.cuh lists them), with 2 blocks of
// 128 threads per SM at 4096 columns. Registers: x and dy packed (twice, the next row's too), w
// and the dw accumulators as floats.
#define BWD_SAVED_TIER(T, NAME, GROUP, EPT, BLOCK, MIN_BLOCKS)                                 \
    KERNEL void __launch_bounds__(BLOCK, MIN_BLOCKS)                                           \
        rmsnorm_bwd_saved_##NAME##_g##GROUP##_e##EPT(const T* x, const T* w, const T* dy,      \
                                                    const float* saved_rstd, T* dx,            \
                                                    float* partials, index_t rows,             \
                                                    index_t cols) {                            \
        rmsnorm_bwd_saved<T, GROUP, EPT>(x, w, dy, saved_rstd, dx, partials, rows, cols);      \
    }

NORM_KERNELS_EVERY_DTYPE(2)

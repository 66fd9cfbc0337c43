// day12: LayerNorm forward and backward (the challenge's day on a CUDA LayerNorm blog's kernels).
//
//   y = (x - mean) * rstd * w + b,   rstd = 1 / sqrt(mean((x - mean)^2) + eps)   (per row)
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = w * dy,  xhat = (x - mean) * rstd
//   dw = sum over rows of dy * xhat,   db = sum over rows of dy                  (column sums)
//
// Statistics. The textbook one-pass formula var = mean(x^2) - mean^2 subtracts two large
// numbers when |mean| >> std and loses every digit in f32. Two correct ways:
// - Welford: one pass, a running (count, mean, M2) updated per element and merged pairwise
//   across threads (Chan et al.), stable whatever the mean. It costs a division per element;
//   it pays off when the row can only be read once from memory (naive, welford_block).
// - Two passes over values already in registers: the mean first, then sum((x - mean)^2).
//   Exact as the reference, no division per element, and free when the row is in registers
//   (vec_regs, bwd_vec_regs): the second pass reads registers, not memory.
//
// Forward versions:
//   naive          one thread per row, Welford, then a write pass
//   welford_block  a block per row: per-thread Welford, merged by warp shuffles and across
//                  warps, then a write pass (scalar loads, the row read twice)
//   vec_regs       the row in registers with 16-byte loads, two-pass statistics from
//                  registers: x read once, y written once
// Backward versions (the first three recompute mean and rstd from x; bwd_saved reads them):
//   bwd_split      a block per row writes dx (and mean, rstd); dw and db by a two-stage column
//                  sum that reads x and dy again
//   bwd_vec_regs   blocks loop over rows with the row in registers; dx, and the block's shares
//                  of dw and db in registers, written once as partial rows; column_sums finishes
//   bwd_vec_pipe   bwd_vec_regs with the next rows' x and dy already on their way into shared
//                  memory (cp.async, 4 rows ahead in 16-bit types, 1 in f32) while a row is
//                  reduced and written: more bytes in flight per SM than occupancy alone gives
//   bwd_saved      the forward's saved mean and rstd read: one reduction of two sums and one
//                  barrier per row, x and dy staged three rows deep in shared memory
//
// Run: cargo run --release -p day12 -- --rows 16384 --cols 4096 --dtype bf16 --kernel vec_regs
#include "common.cuh"
#include "dtype.cuh"
#include "norm.cuh"
#include "reduce.cuh"

// ---------------------------------------------------------------------------------------
// Welford's running statistics: count, mean and M2 = sum((x - mean)^2) of the values seen.
// quote: welford
struct Welford {
    float n, mean, m2;
};

__device__ __forceinline__ Welford welford_add(Welford s, float x) {
    s.n += 1.0f;
    const float d = x - s.mean;
    s.mean += d / s.n;
    s.m2 += d * (x - s.mean);
    return s;
}

// Chan et al.'s merge of two sets' statistics; an empty set changes nothing.
__device__ __forceinline__ Welford welford_combine(Welford a, Welford b) {
    const float n = a.n + b.n;
    if (n == 0.0f) return a;
    const float d = b.mean - a.mean, fb = b.n / n;
    return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * a.n * fb};
}
// end quote: welford

// Block-wide merge, reduce.cuh's block_allreduce: `scratch` holds 32 Welford in shared memory.
// quote: block_welford
__device__ __forceinline__ Welford block_welford(Welford s, Welford* scratch) {
    return block_allreduce(s, scratch, Welford{0.0f, 0.0f, 0.0f}, welford_combine);
}
// end quote: block_welford

// ---------------------------------------------------------------------------------------
// naive: grid(ceil(rows / 128)), block(128): thread r owns row r (uncoalesced: neighbouring
// threads read a row apart). Welford reads the row once for the statistics, then once more
// to write.
// quote: naive
template <typename T>
__device__ __forceinline__ void layernorm_naive(const T* __restrict__ x, const T* __restrict__ w,
                                                const T* __restrict__ b, T* __restrict__ y,
                                                index_t rows, index_t cols, float eps) {
    const index_t row = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const T* in = x + row * cols;
    T* out = y + row * cols;
    Welford s = {0.0f, 0.0f, 0.0f};
    for (index_t c = 0; c < cols; ++c) s = welford_add(s, to_f32(in[c]));
    const float rstd = rsqrtf(s.m2 / (float)cols + eps);
    for (index_t c = 0; c < cols; ++c)
        out[c] = from_f32<T>((to_f32(in[c]) - s.mean) * rstd * to_f32(w[c]) + to_f32(b[c]));
}
// end quote: naive

// ---------------------------------------------------------------------------------------
// welford_block: grid(rows), block(256): each thread runs Welford over columns t, t + 256,
// ... (coalesced), the block merges the 256 summaries, then writes; the second read of the
// row mostly hits L1/L2.
template <typename T>
__device__ __forceinline__ void layernorm_welford_block(const T* __restrict__ x,
                                                        const T* __restrict__ w,
                                                        const T* __restrict__ b,
                                                        T* __restrict__ y, index_t cols,
                                                        float eps) {
    // quote: welford_block
    __shared__ Welford scratch[32];
    const T* in = x + (index_t)blockIdx.x * cols;
    T* out = y + (index_t)blockIdx.x * cols;
    Welford s = {0.0f, 0.0f, 0.0f};
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) s = welford_add(s, to_f32(in[c]));
    s = block_welford(s, scratch);
    const float rstd = rsqrtf(s.m2 / (float)cols + eps);
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x)
        out[c] = from_f32<T>((to_f32(in[c]) - s.mean) * rstd * to_f32(w[c]) + to_f32(b[c]));
    // end quote: welford_block
}

// ---------------------------------------------------------------------------------------
// vec_regs: GROUP = 32 is a warp per row (8 rows per 256-thread block), otherwise a block of
// GROUP threads per row. x is read once into registers (slots past the row hold 0 and are
// left out of the second sum); mean, then sum((x - mean)^2), both from registers; w and b
// are read pack by pack at the write, mostly from L1.
template <typename T, int GROUP, int EPT, bool VEC>
__device__ __forceinline__ void layernorm_regs(const T* __restrict__ x, const T* __restrict__ w,
                                               const T* __restrict__ b, T* __restrict__ y,
                                               index_t rows, index_t cols, float eps) {
    constexpr int N = 16 / sizeof(T);
    __shared__ float scratch[32];
    const int t = threadIdx.x % GROUP;
    const index_t row = (index_t)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
    if (GROUP == 32 && row >= rows) return;
    // quote: regs_stats
    float v[EPT];
    load_row<T, GROUP, EPT, VEC>(x + row * cols, t, cols, v, 0.0f);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < EPT; ++i) sum += v[i];
    const float mean = group_sum<GROUP>(sum, scratch) / (float)cols;
    const int valid = valid_slots<T, GROUP, EPT, VEC>(t, cols);  // padding must not add mean^2
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < EPT; ++i) {
        const float d = v[i] - mean;
        sq += i < valid ? d * d : 0.0f;
    }
    const float rstd = rsqrtf(group_sum<GROUP>(sq, scratch) / (float)cols + eps);
    // end quote: regs_stats
    T* out = y + row * cols;
    if constexpr (VEC) {
#pragma unroll
        for (int p = 0; p < EPT / N; ++p) {
            const index_t col = ((index_t)p * GROUP + t) * N;
            if (col < cols) {
                const Pack16<T> wp = load16(w + col), bp = load16(b + col);
                Pack16<T> pack;
#pragma unroll
                for (int k = 0; k < N; ++k)
                    pack.v[k] = from_f32<T>((v[p * N + k] - mean) * rstd * to_f32(wp.v[k]) +
                                            to_f32(bp.v[k]));
                store16(out + col, pack);
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < EPT; ++i) {
            const index_t col = (index_t)i * GROUP + t;
            if (col < cols)
                out[col] = from_f32<T>((v[i] - mean) * rstd * to_f32(w[col]) + to_f32(b[col]));
        }
    }
}

// ---------------------------------------------------------------------------------------
// bwd_split, kernel 1: grid(rows), block(256): a block per row, three reads of the row (the
// later ones mostly from L1/L2): Welford for mean and rstd; sum(g) and sum(g * xhat); dx.
// Thread 0 saves mean and rstd for the column sums.
template <typename T>
__device__ __forceinline__ void layernorm_bwd_dx_block(const T* __restrict__ x,
                                                       const T* __restrict__ w,
                                                       const T* __restrict__ dy,
                                                       T* __restrict__ dx,
                                                       float2* __restrict__ stats, index_t cols,
                                                       float eps) {
    __shared__ Welford scratch[32];
    __shared__ float sum_scratch[64];
    const index_t base = (index_t)blockIdx.x * cols;
    Welford s = {0.0f, 0.0f, 0.0f};
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) s = welford_add(s, to_f32(x[base + c]));
    s = block_welford(s, scratch);
    const float mean = s.mean, rstd = rsqrtf(s.m2 / (float)cols + eps);
    float sums[2] = {0.0f, 0.0f};  // sum(g), sum(g * xhat)
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float g = to_f32(w[c]) * to_f32(dy[base + c]);
        sums[0] += g;
        sums[1] += g * (to_f32(x[base + c]) - mean) * rstd;
    }
    block_sum_n<2>(sums, sum_scratch);
    const float mean_g = sums[0] / (float)cols, mean_g_xhat = sums[1] / (float)cols;
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float g = to_f32(w[c]) * to_f32(dy[base + c]);
        const float xhat = (to_f32(x[base + c]) - mean) * rstd;
        dx[base + c] = from_f32<T>(rstd * (g - mean_g - xhat * mean_g_xhat));
    }
    if (threadIdx.x == 0) stats[blockIdx.x] = make_float2(mean, rstd);
}

// bwd_split, kernel 2: grid(ceil(cols / 256), chunks), block(256): the first stage of both
// column sums over rows [k * chunk_rows, (k + 1) * chunk_rows), one row after another.
template <typename T>
__device__ __forceinline__ void layernorm_bwd_partials(const T* __restrict__ x,
                                                       const T* __restrict__ dy,
                                                       const float2* __restrict__ stats,
                                                       float* __restrict__ partials_w,
                                                       float* __restrict__ partials_b,
                                                       index_t rows, index_t cols,
                                                       index_t chunk_rows) {
    const index_t c = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const index_t begin = (index_t)blockIdx.y * chunk_rows;
    const index_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
    // quote: bwd_split_partials
    float sum_w = 0.0f, sum_b = 0.0f;
    for (index_t r = begin; r < end; ++r) {
        const float2 st = stats[r];
        const float d = to_f32(dy[r * cols + c]);
        sum_w += d * ((to_f32(x[r * cols + c]) - st.x) * st.y);
        sum_b += d;
    }
    partials_w[(index_t)blockIdx.y * cols + c] = sum_w;
    partials_b[(index_t)blockIdx.y * cols + c] = sum_b;
    // end quote: bwd_split_partials
}

// One row of the fused backward, from x and dy in registers (every thread of the block calls
// it: it holds two block reductions): the mean, then sum((x - mean)^2), sum(g) and
// sum(g * (x - mean)) together; dx written over x's registers; the row's shares of dw and db
// added to the block's accumulators. w comes from w_park (slot i of thread t at i * GROUP +
// t); `valid` is the thread's slots inside the row (valid_slots).
// quote: bwd_row
template <int GROUP, int EPT>
__device__ __forceinline__ void layernorm_bwd_row(float (&xv)[EPT], const float (&dyv)[EPT],
                                                  const float* w_park, int valid,
                                                  float (&acc_w)[EPT], float (&acc_b)[EPT],
                                                  index_t cols, float eps, float* scratch) {
    const int t = threadIdx.x;
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < EPT; ++i) sum += xv[i];
    const float mean = block_sum(sum, scratch) / (float)cols;
    float sums[3] = {0.0f, 0.0f, 0.0f};  // sum((x - mean)^2), sum(g), sum(g * (x - mean))
#pragma unroll
    for (int i = 0; i < EPT; ++i) {
        const float d = i < valid ? xv[i] - mean : 0.0f;  // padding must not add mean^2
        const float g = w_park[i * GROUP + t] * dyv[i];
        xv[i] = d;  // x - mean from here on (0 in padding slots)
        sums[0] += d * d;
        sums[1] += g;
        sums[2] += g * d;
    }
    block_sum_n<3>(sums, scratch);
    const float rstd = rsqrtf(sums[0] / (float)cols + eps);
    const float mean_g = sums[1] / (float)cols, mean_g_xhat = rstd * sums[2] / (float)cols;
#pragma unroll
    for (int i = 0; i < EPT; ++i) {
        const float xhat = xv[i] * rstd;
        acc_w[i] += dyv[i] * xhat;
        acc_b[i] += dyv[i];
        xv[i] = rstd * (w_park[i * GROUP + t] * dyv[i] - mean_g - xhat * mean_g_xhat);  // dx
    }
}
// end quote: bwd_row

// bwd_vec_regs: grid(blocks), block(GROUP): block k takes rows k, k + gridDim.x, ... Per
// row: x and dy into registers; the mean (one block sum), then sum((x - mean)^2), sum(g) and
// sum(g * (x - mean)) together (a second); dx from registers. The block's shares of dw and db
// stay in registers across its rows and are written once, as row k of each partials array.
// Unlike day11's, w waits in shared memory: five arrays of EPT floats spill at 64 registers.
// With STAGED, bwd_vec_pipe (16-byte rows only): the same work split and arithmetic, with x
// and dy of the block's rows staged norm_pipe_stages<T>() deep in dynamic shared memory
// ([stage][x | dy][packs]), so the loads of the rows ahead overlap this row's two reductions
// and its stores.
template <typename T, int GROUP, int EPT, bool VEC, bool STAGED>
__device__ __forceinline__ void layernorm_bwd_regs(const T* __restrict__ x,
                                                   const T* __restrict__ w,
                                                   const T* __restrict__ dy, T* __restrict__ dx,
                                                   float* __restrict__ partials_w,
                                                   float* __restrict__ partials_b, index_t rows,
                                                   index_t cols, float eps) {
    static_assert(VEC || !STAGED, "the staged rows are 16-byte packs");
    extern __shared__ uint4 staged[];  // STAGED: the rows on their way
    __shared__ float scratch[96];
    // STAGED: the first rows on their way while w is parked.
    if constexpr (STAGED) stage_first_rows<T, GROUP, EPT>(x, dy, rows, threadIdx.x, cols, staged);
    // quote: w_park
    // This thread's slots of w, parked in shared memory at [i * GROUP + t]: a warp reads 32
    // consecutive words (no bank conflicts), and the EPT registers they would take are what
    // keeps the kernel at 64 registers without spilling (x, dy and two accumulators remain).
    // Each thread reads back only what it wrote: no barrier needed.
    __shared__ float w_park[GROUP * EPT];
    const int t = threadIdx.x;
    {
        float wv[EPT];
        load_row<T, GROUP, EPT, VEC>(w, t, cols, wv, 0.0f);  // 0 past the row: g is 0 there
#pragma unroll
        for (int i = 0; i < EPT; ++i) w_park[i * GROUP + t] = wv[i];
    }
    // end quote: w_park
    const int valid = valid_slots<T, GROUP, EPT, VEC>(t, cols);
    float acc_w[EPT], acc_b[EPT];
#pragma unroll
    for (int i = 0; i < EPT; ++i) acc_w[i] = acc_b[i] = 0.0f;
    int s = 0;  // STAGED: the stage holding `row`
    for (index_t row = blockIdx.x; row < rows; row += gridDim.x) {
        float xv[EPT], dyv[EPT];
        if constexpr (STAGED) {
            next_staged_rows<T, GROUP, EPT>(x, dy, row, rows, t, cols, staged, s, xv, dyv);
        } else {
            load_row<T, GROUP, EPT, VEC>(x + row * cols, t, cols, xv, 0.0f);
            load_row<T, GROUP, EPT, VEC>(dy + row * cols, t, cols, dyv, 0.0f);
        }
        layernorm_bwd_row<GROUP, EPT>(xv, dyv, w_park, valid, acc_w, acc_b, cols, eps, scratch);
        store_row<T, GROUP, EPT, VEC>(dx + row * cols, t, cols, xv);
    }
    store_partial<T, GROUP, EPT, VEC>(partials_w + (index_t)blockIdx.x * cols, t, cols, acc_w);
    store_partial<T, GROUP, EPT, VEC>(partials_b + (index_t)blockIdx.x * cols, t, cols, acc_b);
}

// ---------------------------------------------------------------------------------------
// bwd_saved: day11's bwd_saved for LayerNorm. The forward's mean and rstd are read (f32,
// saved_stats = [mean | rstd], rows each) instead of recomputed, so a row needs sum(g) and
// sum(g * xhat) only: one reduction of two sums, one barrier (none for a warp per row),
// where bwd_vec_regs reduces twice with four barriers. Unlike day11's, the rows wait in
// dynamic shared memory, SAVED_STAGES per row group (this row and two on their way, by
// cp.async), not in registers: w and two accumulators already take 96 of a thread's
// registers, and with the next row packed in registers too (254 registers, 2 blocks per SM)
// an SM had one row ahead in flight per block. Each thread copies and reads only its own
// packs (no barrier guards the stages), and a pack past the row is zero-filled: g = 0 there.
#define SAVED_STAGES 3
template <typename T, int GROUP, int EPT>
__device__ __forceinline__ void layernorm_bwd_saved(const T* __restrict__ x,
                                                    const T* __restrict__ w,
                                                    const T* __restrict__ dy,
                                                    const float* __restrict__ saved_stats,
                                                    T* __restrict__ dx,
                                                    float* __restrict__ partials_w,
                                                    float* __restrict__ partials_b,
                                                    index_t rows, index_t cols) {
    constexpr int N = 16 / sizeof(T), P = EPT / N, R = saved_rows_per_block<GROUP>();
    constexpr int SLOTS = P * GROUP;  // packs of one input row
    extern __shared__ uint4 staged_all[];
    __shared__ float scratch[2 * 2 * 32];
    const int t = threadIdx.x % GROUP;
    const index_t group = (index_t)blockIdx.x * R + threadIdx.x / GROUP;
    const index_t stride = (index_t)gridDim.x * R;
    uint4* staged = staged_all + (threadIdx.x / GROUP) * SAVED_STAGES * 2 * SLOTS;
    auto stage = [&](index_t row, int s) {
        if (row < rows) {
#pragma unroll
            for (int p = 0; p < P; ++p) {
                const index_t col = ((index_t)p * GROUP + t) * N;
                const bool inside = col < cols;
                const index_t from = inside ? col : 0;
                cp_async_16_zfill(&staged[(2 * s) * SLOTS + p * GROUP + t],
                                  x + row * cols + from, inside);
                cp_async_16_zfill(&staged[(2 * s + 1) * SLOTS + p * GROUP + t],
                                  dy + row * cols + from, inside);
            }
        }
        cp_async_commit();  // an empty group past the last row keeps the count uniform
    };
#pragma unroll
    for (int s = 0; s < SAVED_STAGES - 1; ++s) stage(group + (index_t)s * stride, s);
    float wv[EPT], acc_w[EPT], acc_b[EPT];
    load_row<T, GROUP, EPT, true>(w, t, cols, wv, 0.0f);
#pragma unroll
    for (int i = 0; i < EPT; ++i) acc_w[i] = acc_b[i] = 0.0f;
    int buffer = 0, s = 0;  // s: the stage holding `row`
    for (index_t row = group; row < rows; row += stride) {
        // Refill the stage this thread finished reading last iteration, two rows ahead.
        stage(row + (index_t)(SAVED_STAGES - 1) * stride, s == 0 ? SAVED_STAGES - 1 : s - 1);
        cp_async_wait<SAVED_STAGES - 1>();  // all but the newest two groups: this row's
        const uint4* xs = &staged[(2 * s) * SLOTS + t];
        const uint4* dys = &staged[(2 * s + 1) * SLOTS + t];
        s = s == SAVED_STAGES - 1 ? 0 : s + 1;
        const float mean = saved_stats[row], rstd = saved_stats[rows + row];
        float sums[2] = {0.0f, 0.0f};  // sum(g), sum(g * xhat)
#pragma unroll
        for (int p = 0; p < P; ++p) {
            float xv[N], dyv[N];
            unpack<T>(xs[p * GROUP], xv);
            unpack<T>(dys[p * GROUP], dyv);
#pragma unroll
            for (int k = 0; k < N; ++k) {
                const float g = wv[p * N + k] * dyv[k];
                sums[0] += g;
                sums[1] += g * ((xv[k] - mean) * rstd);
            }
        }
        row_sum_n_one_barrier<GROUP, 2>(sums, scratch, buffer);
        buffer ^= 1;
        const float mean_g = sums[0] / (float)cols, mean_g_xhat = sums[1] / (float)cols;
#pragma unroll
        for (int p = 0; p < P; ++p) {
            float xv[N], dyv[N], out[N];
            unpack<T>(xs[p * GROUP], xv);
            unpack<T>(dys[p * GROUP], dyv);
#pragma unroll
            for (int k = 0; k < N; ++k) {
                const float xhat = (xv[k] - mean) * rstd;
                acc_w[p * N + k] += dyv[k] * xhat;
                acc_b[p * N + k] += dyv[k];
                out[k] = rstd * (wv[p * N + k] * dyv[k] - mean_g - xhat * mean_g_xhat);
            }
            store_packs<T, GROUP, EPT>(dx + row * cols, t, cols, p, out);
        }
    }
    cp_async_wait<0>();  // nothing in flight when the block ends
    store_partial<T, GROUP, EPT, true>(partials_w + group * cols, t, cols, acc_w);
    store_partial<T, GROUP, EPT, true>(partials_b + group * cols, t, cols, acc_b);
}

// ---------------------------------------------------------------------------------------
// Instantiations: op, method, dtype, then the tier (g threads per row, e elements per thread)
// and v (16-byte loads) or s (scalar loads, for widths no pack divides).
#define SIMPLE_KERNELS(T, NAME)                                                                \
    KERNEL void __launch_bounds__(128) layernorm_naive_##NAME(                                 \
        const T* x, const T* w, const T* b, T* y, index_t rows, index_t cols, float eps) {     \
        layernorm_naive<T>(x, w, b, y, rows, cols, eps);                                       \
    }                                                                                          \
    KERNEL void __launch_bounds__(256) layernorm_welford_block_##NAME(                         \
        const T* x, const T* w, const T* b, T* y, index_t cols, float eps) {                   \
        layernorm_welford_block<T>(x, w, b, y, cols, eps);                                     \
    }                                                                                          \
    KERNEL void __launch_bounds__(256) layernorm_bwd_dx_block_##NAME(                          \
        const T* x, const T* w, const T* dy, T* dx, float2* stats, index_t cols, float eps) {  \
        layernorm_bwd_dx_block<T>(x, w, dy, dx, stats, cols, eps);                            \
    }                                                                                          \
    KERNEL void __launch_bounds__(256)                                                         \
        layernorm_bwd_partials_##NAME(const T* x, const T* dy, const float2* stats,            \
                                      float* partials_w, float* partials_b, index_t rows,      \
                                      index_t cols, index_t chunk_rows) {                      \
        layernorm_bwd_partials<T>(x, dy, stats, partials_w, partials_b, rows, cols,            \
                                  chunk_rows);                                                 \
    }                                                                                          \
    KERNEL void __launch_bounds__(32 * COLUMN_SLICES)                                          \
        column_sums_##NAME(const float* partials, T* out, index_t chunks, index_t cols) {      \
        column_sums<T>(partials, out, chunks, cols);                                           \
    }

#define REGS_TIER(T, NAME, GROUP, EPT, BLOCK, SUFFIX, VEC)                                     \
    KERNEL void __launch_bounds__(BLOCK)                                                       \
        layernorm_regs_##NAME##_g##GROUP##_e##EPT##_##SUFFIX(                                  \
            const T* x, const T* w, const T* b, T* y, index_t rows, index_t cols, float eps) { \
        layernorm_regs<T, GROUP, EPT, VEC>(x, w, b, y, rows, cols, eps);                       \
    }

// 1024 threads per SM (at most 64 registers each), as day11's backward.
#define BWD_TIER(T, NAME, GROUP, EPT, SUFFIX, VEC)                                             \
    KERNEL void __launch_bounds__(GROUP, 1024 / GROUP)                                         \
        layernorm_bwd_regs_##NAME##_g##GROUP##_e##EPT##_##SUFFIX(                              \
            const T* x, const T* w, const T* dy, T* dx, float* partials_w, float* partials_b,  \
            index_t rows, index_t cols, float eps) {                                           \
        layernorm_bwd_regs<T, GROUP, EPT, VEC, false>(x, w, dy, dx, partials_w, partials_b,    \
                                                      rows, cols, eps);                        \
    }

#define BWD_PIPE_TIER(T, NAME, GROUP, EPT)                                                     \
    KERNEL void __launch_bounds__(GROUP, 1024 / GROUP)                                         \
        layernorm_bwd_pipe_##NAME##_g##GROUP##_e##EPT(                                         \
            const T* x, const T* w, const T* dy, T* dx, float* partials_w, float* partials_b,  \
            index_t rows, index_t cols, float eps) {                                           \
        layernorm_bwd_regs<T, GROUP, EPT, true, true>(x, w, dy, dx, partials_w, partials_b,    \
                                                      rows, cols, eps);                        \
    }

// bwd_saved's kernel of a tier (NORM_BWD_SAVED_TIERS in norm.cuh lists them), with 3 blocks of
// 128 threads per SM at 4096 columns: the rows are in shared memory, so 168 registers hold the
// rest unspilled.
#define BWD_SAVED_TIER(T, NAME, GROUP, EPT, BLOCK, MIN_BLOCKS)                                 \
    KERNEL void __launch_bounds__(BLOCK, MIN_BLOCKS)                                           \
        layernorm_bwd_saved_##NAME##_g##GROUP##_e##EPT(                                        \
            const T* x, const T* w, const T* dy, const float* saved_stats, T* dx,              \
            float* partials_w, float* partials_b, index_t rows, index_t cols) {                \
        layernorm_bwd_saved<T, GROUP, EPT>(x, w, dy, saved_stats, dx, partials_w, partials_b,  \
                                           rows, cols);                                        \
    }

NORM_KERNELS_EVERY_DTYPE(3)

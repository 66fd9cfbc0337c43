// day14: f32 GEMV, y = A x with A row-major m x n, at the memory bandwidth (the challenge's
// GEMV day).
//
// Every element of A is used once: 2 flops per 4 bytes, so GEMV is a streaming problem and the
// only question is whether A flows from HBM at the copy rate. x (n floats) is reused by every
// row: after its first touch it is served by L2 (and L1), so the least traffic is A once, x
// once and y once, and A is 99.9% of it on every default shape. What decides the speed is how
// the rows are spread over threads, because the shape of A varies from square to 1M x 64 to
// 64 x 1M:
//   - a warp per row fits long rows (8192): 32 lanes x 16 bytes per load, many loads in flight;
//   - a 64-float row is only 16 float4s: a warp per row leaves half its lanes idle, so several
//     rows share a warp (L lanes per row, 32 / L rows per warp);
//   - 64 rows of 1M floats are only 64 warps' worth of rows: not enough warps to fill 132 SMs,
//     so each row is split into column chunks over many warps, each writing a partial sum, and
//     a second kernel adds a row's partials in a fixed order (the same result every run, unlike
//     atomicAdd, whose order depends on timing).
//
// Versions:
//   warp_scalar  a warp per row, 4-byte loads, one load in flight per lane
//   warp_vec4    a warp per row, 16-byte loads of A (evict-first: A is never read again),
//                4 in flight per lane; a row of odd width starts off a 16-byte boundary, so its
//                first 0-3 and last 0-3 columns are done one by one (head and tail)
//   rows_vec4    L lanes per row (L = 1..32, chosen from n), 32 / L rows per warp; rows of 4L
//                floats (n <= 128, a multiple of 4) take gemv_narrow: one float4 per lane,
//                whole rows per warp load
//   split_row    warps over (16 rows x 512 columns) tiles writing partial sums, then a warp per
//                row adding them: a deterministic two-pass reduction
//
// Run: cargo run --release -p day14 -- --m 64 --n 1048576 --kernel split_row
#include "common.cuh"
#include "reduce.cuh"

// A is streamed: ld.global.cs (evict-first) so its lines do not push x out of L1 and L2.
__device__ __forceinline__ float4 load_streaming(const float4* p) { return __ldcs(p); }

// x[4k..4k+4) of the body: one 16-byte load where x is aligned at these columns (always, when n
// is a multiple of 4), four 4-byte loads where a row's odd start shifted it. A template
// parameter, not a run-time branch, so that the unrolled loop below has no branch between its
// loads and the compiler keeps them all in flight.
template <bool X_ALIGNED> __device__ __forceinline__ float4 load_x4(const float* x, index_t k) {
    if constexpr (X_ALIGNED) return reinterpret_cast<const float4*>(x)[k];
    const float* p = x + 4 * k;
    return make_float4(p[0], p[1], p[2], p[3]);
}

__device__ __forceinline__ float fma4(float4 a, float4 x, float sum) {
    sum = fmaf(a.x, x.x, sum);
    sum = fmaf(a.y, x.y, sum);
    sum = fmaf(a.z, x.z, sum);
    return fmaf(a.w, x.w, sum);
}

// The float4s lane, lane + lanes, ... of a 16-byte aligned body of `body` float4s: UNROLL of A
// and of x loaded before the first is used.
template <int UNROLL, bool X_ALIGNED>
__device__ __forceinline__ float dot_body(const float4* __restrict__ a4, const float* __restrict__ xb,
                                          index_t body, int lane, int lanes, float sum) {
    // quote: dot_body
    // One accumulator per load in flight: with a single one, each FMA waits for the previous
    // and the compiler spaces the loads out to match, leaving one or two in flight.
    float acc[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc[u] = 0.0f;
    index_t i = lane;
    for (; i + (index_t)(UNROLL - 1) * lanes < body; i += (index_t)UNROLL * lanes) {
        float4 av[UNROLL], xv[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) av[u] = load_streaming(a4 + i + (index_t)u * lanes);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) xv[u] = load_x4<X_ALIGNED>(xb, i + (index_t)u * lanes);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc[u] = fma4(av[u], xv[u], acc[u]);
    }
    for (; i < body; i += lanes) acc[0] = fma4(load_streaming(a4 + i), load_x4<X_ALIGNED>(xb, i), acc[0]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) sum += acc[u];
    return sum;
    // end quote: dot_body
}

// The part of dot(a[c0, c1), x[c0, c1)) that thread `lane` of `lanes` cooperating threads
// adds: columns before the first 16-byte boundary of a (0-3 of them) one by one, then the
// float4 body, then the 0-3 columns after the last float4.
template <int UNROLL>
__device__ __forceinline__ float dot_part(const float* __restrict__ a, const float* __restrict__ x,
                                          index_t c0, index_t c1, int lane, int lanes) {
    // quote: head_tail
    const index_t past_boundary = ((unsigned long long)(a + c0) >> 2) & 3;
    const index_t head_end = min(c1, c0 + ((4 - past_boundary) & 3));
    float sum = 0.0f;
    for (index_t c = c0 + lane; c < head_end; c += lanes) sum = fmaf(a[c], x[c], sum);

    const index_t body = (c1 - head_end) / 4;
    const float4* a4 = reinterpret_cast<const float4*>(a + head_end);
    const float* xb = x + head_end;
    if (((unsigned long long)xb & 15) == 0) {
        sum = dot_body<UNROLL, true>(a4, xb, body, lane, lanes, sum);
    } else {
        sum = dot_body<UNROLL, false>(a4, xb, body, lane, lanes, sum);
    }

    for (index_t c = head_end + 4 * body + lane; c < c1; c += lanes) sum = fmaf(a[c], x[c], sum);
    // end quote: head_tail
    return sum;
}

// Sum over the `lanes` consecutive lanes of a group (lanes a power of two <= 32): butterfly
// within the group only.
__device__ __forceinline__ float group_sum(float v, int lanes) {
    for (int offset = lanes / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_WARP, v, offset);
    return v;
}

// grid(ceil(m / 8)), block(256): warp w of block b computes row 8b + w; lane l adds columns
// l, l + 32, ... (a warp's 32 loads hit 128 contiguous bytes).
// quote: warp_scalar
KERNEL void gemv_warp_f32(const float* __restrict__ a, const float* __restrict__ x,
                          float* __restrict__ y, index_t m, index_t n) {
    const index_t row = (index_t)blockIdx.x * 8 + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= m) return;  // whole warps
    const float* ar = a + row * n;
    float sum = 0.0f;
    for (index_t c = lane; c < n; c += 32) sum = fmaf(ar[c], x[c], sum);
    sum = warp_sum(sum);
    if (lane == 0) y[row] = sum;
}
// end quote: warp_scalar

// grid(ceil(m / 8)), block(256): warp w of block b computes row 8b + w with 16-byte loads,
// 4 per lane in flight (a warp has 2 KB of the row in flight).
KERNEL void gemv_warp_f32x4(const float* __restrict__ a, const float* __restrict__ x,
                            float* __restrict__ y, index_t m, index_t n) {
    const index_t row = (index_t)blockIdx.x * 8 + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= m) return;
    float sum = dot_part<4>(a + row * n, x, 0, n, lane, 32);
    sum = warp_sum(sum);
    if (lane == 0) y[row] = sum;
}

// grid(ceil(m / (256 / L))), block(256): L lanes per row, 256 / L rows per block; lane l of a
// group adds float4s l, l + L, ... of its row (8 of them in flight: L is chosen so that a row
// is about 8 float4s per lane).
// quote: rows
template <int L>
__device__ __forceinline__ void gemv_rows(const float* __restrict__ a, const float* __restrict__ x,
                                          float* __restrict__ y, index_t m, index_t n) {
    const index_t row = (index_t)blockIdx.x * (256 / L) + threadIdx.x / L;
    const int lane = threadIdx.x % L;
    // Groups past the last row still join the shuffles below (they share warps with live rows).
    float sum = row < m ? dot_part<8>(a + row * n, x, 0, n, lane, L) : 0.0f;
    sum = group_sum(sum, L);
    if (row < m && lane == 0) y[row] = sum;
}
// end quote: rows

#define GEMV_ROWS(L)                                                                            \
    KERNEL void gemv_rows_f32x4_l##L(const float* __restrict__ a, const float* __restrict__ x,  \
                                     float* __restrict__ y, index_t m, index_t n) {             \
        gemv_rows<L>(a, x, y, m, n);                                                            \
    }
GEMV_ROWS(1)
GEMV_ROWS(2)
GEMV_ROWS(4)
GEMV_ROWS(8)
GEMV_ROWS(16)
GEMV_ROWS(32)

// rows_vec4 for narrow rows of whole float4s (n = 4L, L = 1, 2, ..., 32): L lanes per row with
// one float4 each, so each warp load covers 32 / L whole rows (512 contiguous bytes; the
// general kernel's L = 2 lanes of 8 float4s spread a load over 16 rows), and a lane's float4
// of x stays in a register. NARROW_LOADS loads in flight per lane: a warp takes NARROW_LOADS x
// 32 / L consecutive rows. grid(ceil(m / (8 x that))), block(256). A and x 16-byte aligned
// (the launcher takes this kernel only when n is a multiple of 4).
#define NARROW_LOADS 4
template <int L>
__device__ __forceinline__ void gemv_narrow(const float* __restrict__ a, const float* __restrict__ x,
                                            float* __restrict__ y, index_t m) {
    // quote: narrow
    constexpr int ROWS_PER_LOAD = 32 / L, ROWS_PER_WARP = NARROW_LOADS * ROWS_PER_LOAD;
    const int lane = threadIdx.x % 32, part = lane % L;
    const float4 xv = reinterpret_cast<const float4*>(x)[part];
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const index_t first = ((index_t)blockIdx.x * 8 + threadIdx.x / 32) * ROWS_PER_WARP + lane / L;
    float sum[NARROW_LOADS];
#pragma unroll
    for (int u = 0; u < NARROW_LOADS; ++u) {
        const index_t row = first + (index_t)u * ROWS_PER_LOAD;
        const float4 av = row < m ? load_streaming(a4 + row * L + part) : make_float4(0, 0, 0, 0);
        sum[u] = fma4(av, xv, 0.0f);
    }
    // Butterfly within each group of L lanes (every lane joins: rows past m hold 0).
#pragma unroll
    for (int offset = L / 2; offset > 0; offset >>= 1) {
#pragma unroll
        for (int u = 0; u < NARROW_LOADS; ++u) sum[u] += __shfl_xor_sync(FULL_WARP, sum[u], offset);
    }
    // end quote: narrow
    if (part == 0) {
#pragma unroll
        for (int u = 0; u < NARROW_LOADS; ++u) {
            const index_t row = first + (index_t)u * ROWS_PER_LOAD;
            if (row < m) y[row] = sum[u];
        }
    }
}

#define GEMV_NARROW(L)                                                                          \
    KERNEL void gemv_narrow_f32x4_l##L(const float* __restrict__ a, const float* __restrict__ x, \
                                       float* __restrict__ y, index_t m, index_t n) {           \
        gemv_narrow<L>(a, x, y, m);                                                             \
    }
GEMV_NARROW(1)
GEMV_NARROW(2)
GEMV_NARROW(4)
GEMV_NARROW(8)
GEMV_NARROW(16)
GEMV_NARROW(32)

// Tile of one warp in the split kernel: 16 rows x 512 columns (4 float4 per lane per row).
#define SPLIT_ROWS 16
#define SPLIT_WARP_COLS 512

// grid(ceil(m / 16), ceil(n / 4096)), block(256): block (r, c) covers rows [16r, 16r + 16) and
// columns [4096c, 4096c + 4096); its warp w takes columns [4096c + 512w, + 512) of each of
// those rows and writes their dot product to partial[row * parts + 8c + w] (parts =
// ceil(n / 512)). x's 512 columns come from L2 for the first row, then from L1.
// quote: split_partial
KERNEL void gemv_split_partial_f32x4(const float* __restrict__ a, const float* __restrict__ x,
                                     float* __restrict__ partial, index_t m, index_t n) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const index_t part = (index_t)blockIdx.y * 8 + warp;
    const index_t parts = (n + SPLIT_WARP_COLS - 1) / SPLIT_WARP_COLS;
    const index_t c0 = part * SPLIT_WARP_COLS;
    if (c0 >= n) return;  // whole warps
    const index_t c1 = min(n, c0 + SPLIT_WARP_COLS);
    const index_t r0 = (index_t)blockIdx.x * SPLIT_ROWS;
    const index_t r1 = min(m, r0 + SPLIT_ROWS);
    for (index_t row = r0; row < r1; ++row) {
        float sum = dot_part<4>(a + row * n, x, c0, c1, lane, 32);
        sum = warp_sum(sum);
        if (lane == 0) partial[row * parts + part] = sum;
    }
}
// end quote: split_partial

// grid(ceil(m / 8)), block(256): warp w of block b adds the `parts` partial sums of row 8b + w,
// lane l taking parts l, l + 32, ... in order, then the butterfly: a fixed order, so the same
// result on every run.
// quote: split_reduce
KERNEL void gemv_split_reduce_f32(const float* __restrict__ partial, float* __restrict__ y,
                                  index_t m, index_t parts) {
    const index_t row = (index_t)blockIdx.x * 8 + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= m) return;
    float sum = 0.0f;
    for (index_t p = lane; p < parts; p += 32) sum += partial[row * parts + p];
    sum = warp_sum(sum);
    if (lane == 0) y[row] = sum;
}
// end quote: split_reduce

// day21: 1D and 2D convolution, "same" output size, from one thread per output to a filter in
// constant memory and register-blocked tiles (one challenge log's days 12 and 13).
//
// A convolution here is PyTorch's conv1d/conv2d (a cross-correlation, the filter not flipped):
//   1D: y[i] = sum_j x[i + j - left] w[j],  left = (K - 1) / 2, right = K - 1 - left
//   2D: y[n][co][oy][ox] = sum_ci sum_ky sum_kx x[n][ci][oy + ky - top][ox + kx - left]
//                                                 * w[co][ci][ky][kx]
// with zeros outside the input: torch's padding="same" (for an even K, one more zero on the
// right or bottom than on the left or top). Every output reads K (or C_in KH KW) inputs and
// its neighbours read almost the same ones: each input is used K times. Read from global memory
// each time (naive), that is K times the traffic the problem needs; the versions below read
// each input from DRAM once and reuse it from faster memory.
//
// Versions (the same four for conv1d and conv2d; math in f32, storage f32 or bf16):
//   naive         one thread per output; inputs and filter from global memory (L1/L2 catch
//                 the reuse, at the cost of K load instructions per output)
//   smem_halo     a block stages its tile of inputs plus the halo (the K - 1 neighbours its
//                 edge outputs need) in shared memory once; the filter still from global
//   const_filter  smem_halo with the filter in __constant__ memory: every thread of a warp
//                 reads the same tap at the same time, which the constant cache broadcasts in
//                 one transaction (a global load would need the L1 path and a register)
//   vec_regs      each thread computes several adjacent outputs (and, for NCHW, 8 output
//                 channels) from a window of inputs held in registers, loaded with 16-byte
//                 loads: each input is loaded once per thread and used for every output it
//                 touches; the filter in __constant__ memory
//
// Run: cargo run --release -p day21 -- --op conv1d --kernel vec_regs
#include "common.cuh"
#include "dtype.cuh"
#include "mma.cuh"

// The filter of const_filter and vec_regs, copied here (by the launcher, on the stream, before
// each launch) from the global buffer every version is given. 8192 elements of each type: 32
// KB + 16 KB of the 64 KB of constant memory a module may declare. The launcher refuses a
// filter (C_out C_in KH KW) larger than this.
// quote: const_filter
#define CONST_FILTER_CAPACITY 8192
__constant__ float c_filter_f32[CONST_FILTER_CAPACITY];
__constant__ bf16_t c_filter_bf16[CONST_FILTER_CAPACITY];

template <typename T> __device__ __forceinline__ float const_tap(int i);
template <> __device__ __forceinline__ float const_tap<float>(int i) { return c_filter_f32[i]; }
template <> __device__ __forceinline__ float const_tap<bf16_t>(int i) {
    return to_f32(c_filter_bf16[i]);
}

// A tap from global memory or from the constant copy: the one difference between smem_halo and
// const_filter.
template <typename T, bool CONST_W>
__device__ __forceinline__ float tap(const T* __restrict__ w, int i) {
    if constexpr (CONST_W) return const_tap<T>(i);
    return to_f32(w[i]);
}
// end quote: const_filter

// ---------------------------------------------------------------------------------------------
// 1D
// ---------------------------------------------------------------------------------------------

#define TILE_1D 256

// quote: conv1d_naive
// grid(ceil(n / 256)), block(256): one thread per output.
template <typename T>
__device__ __forceinline__ void conv1d_naive(const T* __restrict__ x, const T* __restrict__ w,
                                             T* __restrict__ y, index_t n, int width) {
    const index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const long long left = (width - 1) / 2;
    float acc = 0.0f;
    for (int j = 0; j < width; ++j) {
        const long long k = (long long)i + j - left;
        if (k >= 0 && k < (long long)n) acc = fmaf(to_f32(x[k]), to_f32(w[j]), acc);
    }
    y[i] = from_f32<T>(acc);
}
// end quote: conv1d_naive

// quote: conv1d_tile
// grid(ceil(n / 256)), block(256), dynamic shared (256 + width - 1) floats: the block's 256
// inputs and its halo, loaded once (zeros outside x), then each thread reads its width
// neighbours from shared memory.
template <typename T, bool CONST_W>
__device__ __forceinline__ void conv1d_tile(const T* __restrict__ x, const T* __restrict__ w,
                                            T* __restrict__ y, index_t n, int width) {
    extern __shared__ float tile1d[];
    const long long base = (long long)blockIdx.x * TILE_1D - (width - 1) / 2;
    for (int t = threadIdx.x; t < TILE_1D + width - 1; t += TILE_1D) {
        const long long k = base + t;
        tile1d[t] = (k >= 0 && k < (long long)n) ? to_f32(x[k]) : 0.0f;
    }
    __syncthreads();
    const index_t i = (index_t)blockIdx.x * TILE_1D + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    for (int j = 0; j < width; ++j) acc = fmaf(tile1d[threadIdx.x + j], tap<T, CONST_W>(w, j), acc);
    y[i] = from_f32<T>(acc);
}
// end quote: conv1d_tile

// Outputs per vec_regs thread: two 16-byte packs of f32, one of bf16.
#define VEC_1D 8

// grid(ceil(n / (256 * 8))), block(256): thread t computes outputs [8t, 8t + 8) from a window
// of inputs loaded as whole 16-byte packs (the packs before and after its own 8 that hold its
// halo). Neighbouring threads load the same halo packs: that second read hits L1, DRAM sees
// each byte once. WMAX is the widest filter of the instance (3, 7, 15 or 31): the window and
// the unrolled tap loop are sized for it, so the window stays in registers (an index known at
// compile time), and the taps a narrower filter lacks are skipped by a warp-uniform branch
// (not multiplied by 0, which would turn an infinite input next door into NaN). Threads whose
// window would leave x (the first and last few) take a scalar path with bounds.
template <typename T, int WMAX>
__device__ __forceinline__ void conv1d_vec(const T* __restrict__ x, T* __restrict__ y, index_t n,
                                           int width) {
    // quote: conv1d_vec
    // P: elements per 16-byte pack. LMAX, RMAX: the widest filter's halo before and after.
    // The window is LP packs before the thread's own VP packs (its 8 outputs) and RP after, NP
    // in all.
    constexpr int P = 16 / sizeof(T);
    constexpr int LMAX = (WMAX - 1) / 2, RMAX = WMAX - 1 - LMAX;
    constexpr int LP = (LMAX + P - 1) / P, VP = VEC_1D / P, RP = (RMAX + P - 1) / P;
    constexpr int NP = LP + VP + RP;
    const int left = (width - 1) / 2;
    // Tap j sits at unrolled position k = j + shift, so that every filter of this instance
    // lines up with the window the same way.
    const int shift = LMAX - left;
    // g0: the thread's first output.
    const index_t g0 = ((index_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC_1D;
    if (g0 >= n) return;
    float acc[VEC_1D];
#pragma unroll
    for (int v = 0; v < VEC_1D; ++v) acc[v] = 0.0f;
    if (g0 >= (index_t)(LP * P) && g0 + (index_t)((VP + RP) * P) <= n) {
        float win[NP * P];
        const T* p = x + (g0 - LP * P);
        Pack16<T> packs[NP];
#pragma unroll
        for (int q = 0; q < NP; ++q) packs[q] = load16(p + q * P);
#pragma unroll
        for (int q = 0; q < NP; ++q)
#pragma unroll
            for (int e = 0; e < P; ++e) win[q * P + e] = to_f32(packs[q].v[e]);
#pragma unroll
        for (int k = 0; k < WMAX; ++k) {
            const int j = k - shift;
            if (j >= 0 && j < width) {
                const float t = const_tap<T>(j);
#pragma unroll
                for (int v = 0; v < VEC_1D; ++v) acc[v] = fmaf(win[LP * P - LMAX + v + k], t, acc[v]);
            }
        }
#pragma unroll
        for (int q = 0; q < VP; ++q) {
            Pack16<T> out;
#pragma unroll
            for (int e = 0; e < P; ++e) out.v[e] = from_f32<T>(acc[q * P + e]);
            store16(y + g0 + q * P, out);
        }
        return;
    }
    // end quote: conv1d_vec
    for (int v = 0; v < VEC_1D; ++v) {
        const index_t i = g0 + v;
        if (i >= n) return;
        float a = 0.0f;
        for (int j = 0; j < width; ++j) {
            const long long k = (long long)i + j - left;
            if (k >= 0 && k < (long long)n) a = fmaf(to_f32(x[k]), const_tap<T>(j), a);
        }
        y[i] = from_f32<T>(a);
    }
}

// The vectorized kernel of one filter width W (the widths the host's table compiles).
#define CONV1D_VEC_KERNEL(T, NAME, P, W)                                                           \
    KERNEL void conv1d_vec_##NAME##x##P##_w##W(const T* x, T* y, index_t n, int width) {           \
        conv1d_vec<T, W>(x, y, n, width);                                                          \
    }

#define CONV1D_KERNELS(T, NAME, P)                                                                 \
    KERNEL void conv1d_naive_##NAME(const T* x, const T* w, T* y, index_t n, int width) {          \
        conv1d_naive<T>(x, w, y, n, width);                                                        \
    }                                                                                              \
    KERNEL void conv1d_smem_##NAME(const T* x, const T* w, T* y, index_t n, int width) {           \
        conv1d_tile<T, false>(x, w, y, n, width);                                                  \
    }                                                                                              \
    KERNEL void conv1d_const_##NAME(const T* x, const T* w, T* y, index_t n, int width) {          \
        conv1d_tile<T, true>(x, w, y, n, width);                                                   \
    }                                                                                              \
    CONV1D_VEC_KERNEL(T, NAME, P, 3)                                                               \
    CONV1D_VEC_KERNEL(T, NAME, P, 7)                                                               \
    CONV1D_VEC_KERNEL(T, NAME, P, 15)                                                              \
    CONV1D_VEC_KERNEL(T, NAME, P, 31)

CONV1D_KERNELS(float, f32, 4)
CONV1D_KERNELS(bf16_t, bf16, 8)

// ---------------------------------------------------------------------------------------------
// 2D, NCHW: x [N][C_in][H][W], w [C_out][C_in][KH][KW], y [N][C_out][H][W]; one image with one
// filter is N = C_in = C_out = 1. Filters up to 7 x 7.
// ---------------------------------------------------------------------------------------------

#define BLOCK_X 32
#define BLOCK_Y 8
#define KMAX 7
#define KMAX_HALF 3 // the most zeros "same" padding puts before a row or column: (7 - 1) / 2

struct Conv2dShape {
    int n, cin, cout, h, w, kh, kw;
};

// grid(ceil(W / 32), ceil(H / 8), N C_out), block(32, 8): one thread per output.
template <typename T>
__device__ __forceinline__ void conv2d_naive(const T* __restrict__ x, const T* __restrict__ w,
                                             T* __restrict__ y, Conv2dShape s) {
    const int ox = blockIdx.x * BLOCK_X + threadIdx.x, oy = blockIdx.y * BLOCK_Y + threadIdx.y;
    const int b = blockIdx.z / s.cout, co = blockIdx.z % s.cout;
    if (ox >= s.w || oy >= s.h) return;
    const int top = (s.kh - 1) / 2, left = (s.kw - 1) / 2;
    const index_t plane = (index_t)s.h * s.w;
    float acc = 0.0f;
    for (int ci = 0; ci < s.cin; ++ci) {
        const T* xp = x + ((index_t)b * s.cin + ci) * plane;
        const T* wp = w + ((index_t)co * s.cin + ci) * s.kh * s.kw;
        for (int ky = 0; ky < s.kh; ++ky) {
            const int iy = oy + ky - top;
            if (iy < 0 || iy >= s.h) continue;
            for (int kx = 0; kx < s.kw; ++kx) {
                const int ix = ox + kx - left;
                if (ix >= 0 && ix < s.w)
                    acc = fmaf(to_f32(xp[(index_t)iy * s.w + ix]), to_f32(wp[ky * s.kw + kx]), acc);
            }
        }
    }
    y[((index_t)b * s.cout + co) * plane + (index_t)oy * s.w + ox] = from_f32<T>(acc);
}

// grid(ceil(W / 32), ceil(H / 8), N C_out), block(32, 8), dynamic shared (8 + KH - 1) x
// (32 + KW - 1) floats: per input channel, the block's 32 x 8 inputs and their halo staged
// once, then each thread reads its KH x KW window from shared memory. A warp is one row of 32,
// so its reads of a tap are 32 consecutive floats: no bank conflicts.
template <typename T, bool CONST_W>
__device__ __forceinline__ void conv2d_tile(const T* __restrict__ x, const T* __restrict__ w,
                                            T* __restrict__ y, Conv2dShape s) {
    extern __shared__ float tile2d[];
    const int tw = BLOCK_X + s.kw - 1, th = BLOCK_Y + s.kh - 1;
    const int top = (s.kh - 1) / 2, left = (s.kw - 1) / 2;
    const int x0 = blockIdx.x * BLOCK_X - left, y0 = blockIdx.y * BLOCK_Y - top;
    const int ox = blockIdx.x * BLOCK_X + threadIdx.x, oy = blockIdx.y * BLOCK_Y + threadIdx.y;
    const int b = blockIdx.z / s.cout, co = blockIdx.z % s.cout;
    const int tid = threadIdx.y * BLOCK_X + threadIdx.x;
    const index_t plane = (index_t)s.h * s.w;
    float acc = 0.0f;
    for (int ci = 0; ci < s.cin; ++ci) {
        const T* xp = x + ((index_t)b * s.cin + ci) * plane;
        for (int t = tid; t < th * tw; t += BLOCK_X * BLOCK_Y) {
            const int iy = y0 + t / tw, ix = x0 + t % tw;
            const bool inside = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w;
            tile2d[t] = inside ? to_f32(xp[(index_t)iy * s.w + ix]) : 0.0f;
        }
        __syncthreads();
        const int wbase = (co * s.cin + ci) * s.kh * s.kw;
        for (int ky = 0; ky < s.kh; ++ky)
            for (int kx = 0; kx < s.kw; ++kx)
                acc = fmaf(tile2d[(threadIdx.y + ky) * tw + threadIdx.x + kx],
                           tap<T, CONST_W>(w, wbase + ky * s.kw + kx), acc);
        // The next channel overwrites the tile: everyone must be done reading it.
        __syncthreads();
    }
    if (ox < s.w && oy < s.h) y[((index_t)b * s.cout + co) * plane + (index_t)oy * s.w + ox] = from_f32<T>(acc);
}

// grid(ceil(W / (32 P)), ceil(H / (8 OY)), N ceil(C_out / OC)), block(32, 8), dynamic shared
// (8 OY + KH - 1) rows x 34 packs of T. P = 16 / sizeof(T) (4 f32, 8 bf16).
// Thread (tx, ty) computes P adjacent columns x OY adjacent rows x OC output channels: its
// columns are the block's pack tx, so its row window is packs tx - 1, tx, tx + 1 (the halo of
// up to 3 columns each side fits in the neighbouring packs), three 16-byte shared loads that a
// warp issues over 512 consecutive bytes (no bank conflicts). Each input row in the window is
// loaded once and used for every (output row, tap column, output channel) it meets: P x KW x
// OC FMAs per loaded row for each output row. As in 1D, the tap loop is unrolled for 7
// columns with the ones a narrower filter lacks skipped by a uniform branch, so the window is
// indexed by compile-time constants and stays in registers. The tile is staged per input
// channel; taps come from constant memory (one address per warp: a broadcast).
// KH, KW: the filter's size fixed at compile time (0: read from the shape). Fixed, every loop
// over the filter unrolls, the taps of a channel are read once into registers, and what is
// left per output row window is 3 shared loads and the FMAs: the runtime-sized loops cost an
// index, a bounds test and a constant-memory load per tap, and kept the 5 x 5 kernel bound by
// its instructions, not by memory.
template <typename T, int OC, int OY, int KH = 0, int KW = 0>
__device__ __forceinline__ void conv2d_vec(const T* __restrict__ x, T* __restrict__ y,
                                           Conv2dShape s) {
    constexpr int P = 16 / sizeof(T);
    constexpr int PACKS = BLOCK_X + 2;
    constexpr bool FIXED = KH > 0 && KW > 0;
    if constexpr (FIXED) {
        s.kh = KH;  // the launcher takes this kernel only for this filter size
        s.kw = KW;
    }
    extern __shared__ uint4 tile_packs[];
    const int top = (s.kh - 1) / 2, left = (s.kw - 1) / 2;
    const int shift = KMAX_HALF - left;
    const int rows = BLOCK_Y * OY + s.kh - 1;
    const int groups = (s.cout + OC - 1) / OC;
    const int b = blockIdx.z / groups, co0 = (blockIdx.z % groups) * OC;
    // Pack q of a tile row holds columns xs + q P .. xs + q P + P - 1.
    const int xs = blockIdx.x * BLOCK_X * P - P;
    const int y0 = blockIdx.y * BLOCK_Y * OY - top;
    const int tid = threadIdx.y * BLOCK_X + threadIdx.x;
    const index_t plane = (index_t)s.h * s.w;
    // Whole packs of a row are inside or outside it when W is a multiple of P; otherwise the
    // tile is filled element by element.
    const bool packed_rows = s.w % P == 0;
    float acc[OC][OY][P];
#pragma unroll
    for (int c = 0; c < OC; ++c)
#pragma unroll
        for (int r = 0; r < OY; ++r)
#pragma unroll
            for (int e = 0; e < P; ++e) acc[c][r][e] = 0.0f;

    for (int ci = 0; ci < s.cin; ++ci) {
        const T* xp = x + ((index_t)b * s.cin + ci) * plane;
        if (FIXED && packed_rows) {
            // The fixed-size kernel stages its tile with cp.async: every pack's copy is issued
            // before any is waited for (the loop below waits a load latency per iteration, and
            // with the arithmetic unrolled that wait was half of the kernel's stalls). Packs
            // outside the image are zero-filled.
            // quote: conv2d_tile_packs
            for (int t = tid; t < rows * PACKS; t += BLOCK_X * BLOCK_Y) {
                const int iy = y0 + t / PACKS, ix = xs + (t % PACKS) * P;
                const bool inside = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w;
                const T* from = inside ? xp + (index_t)iy * s.w + ix : xp;
                cp_async_16_zfill(&tile_packs[t], from, inside);
            }
            cp_async_commit();
            cp_async_wait<0>();
            // end quote: conv2d_tile_packs
        } else {
            for (int t = tid; t < rows * PACKS; t += BLOCK_X * BLOCK_Y) {
                const int iy = y0 + t / PACKS, ix = xs + (t % PACKS) * P;
                Pack16<T> pack;
                const bool row_inside = iy >= 0 && iy < s.h;
                if (packed_rows) {
                    if (row_inside && ix >= 0 && ix < s.w) {
                        pack = load16(xp + (index_t)iy * s.w + ix);
                    } else {
#pragma unroll
                        for (int e = 0; e < P; ++e) pack.v[e] = from_f32<T>(0.0f);
                    }
                } else {
#pragma unroll
                    for (int e = 0; e < P; ++e) {
                        const bool inside = row_inside && ix + e >= 0 && ix + e < s.w;
                        pack.v[e] = inside ? xp[(index_t)iy * s.w + ix + e] : from_f32<T>(0.0f);
                    }
                }
                tile_packs[t] = *reinterpret_cast<const uint4*>(&pack);
            }
        }
        __syncthreads();
        const int wchan = ci * s.kh * s.kw;
        // The channel's taps in registers when the filter size is fixed (else unused).
        float taps[OC][FIXED ? KH : 1][FIXED ? KW : 1];
        if constexpr (FIXED) {
#pragma unroll
            for (int c = 0; c < OC; ++c)
#pragma unroll
                for (int ky = 0; ky < KH; ++ky)
#pragma unroll
                    for (int kx = 0; kx < KW; ++kx)
                        taps[c][ky][kx] = co0 + c < s.cout
                            ? const_tap<T>((co0 + c) * s.cin * KH * KW + wchan + ky * KW + kx)
                            : 0.0f;
        }
        // quote: conv2d_window
#pragma unroll
        for (int r = 0; r < OY + s.kh - 1; ++r) {
            float win[3 * P];
            const uint4* row = tile_packs + (threadIdx.y * OY + r) * PACKS + threadIdx.x;
#pragma unroll
            for (int q = 0; q < 3; ++q) {
                const uint4 raw = row[q];
                const Pack16<T> pack = *reinterpret_cast<const Pack16<T>*>(&raw);
#pragma unroll
                for (int e = 0; e < P; ++e) win[q * P + e] = to_f32(pack.v[e]);
            }
#pragma unroll
            for (int oy = 0; oy < OY; ++oy) {
                const int ky = r - oy;
                if (ky < 0 || ky >= s.kh) continue;
#pragma unroll
                for (int k = 0; k < KMAX; ++k) {
                    const int kx = k - shift;
                    if (kx < 0 || kx >= s.kw) continue;
#pragma unroll
                    for (int c = 0; c < OC; ++c) {
                        if (co0 + c >= s.cout) break;
                        float t;
                        if constexpr (FIXED) t = taps[c][ky][kx];
                        else t = const_tap<T>((co0 + c) * s.cin * s.kh * s.kw + wchan + ky * s.kw + kx);
#pragma unroll
                        for (int e = 0; e < P; ++e)
                            acc[c][oy][e] = fmaf(win[P - KMAX_HALF + e + k], t, acc[c][oy][e]);
                    }
                }
            }
        }
        // end quote: conv2d_window
        __syncthreads();
    }

    const int ox0 = blockIdx.x * BLOCK_X * P + threadIdx.x * P;
#pragma unroll
    for (int c = 0; c < OC; ++c) {
        if (co0 + c >= s.cout) break;
        T* yp = y + ((index_t)b * s.cout + co0 + c) * plane;
#pragma unroll
        for (int r = 0; r < OY; ++r) {
            const int oy = blockIdx.y * BLOCK_Y * OY + threadIdx.y * OY + r;
            if (oy >= s.h) break;
            if (packed_rows && ox0 + P <= s.w) {
                Pack16<T> out;
#pragma unroll
                for (int e = 0; e < P; ++e) out.v[e] = from_f32<T>(acc[c][r][e]);
                store16(yp + (index_t)oy * s.w + ox0, out);
            } else {
#pragma unroll
                for (int e = 0; e < P; ++e)
                    if (ox0 + e < s.w) yp[(index_t)oy * s.w + ox0 + e] = from_f32<T>(acc[c][r][e]);
            }
        }
    }
}

#define CONV2D_KERNELS(T, NAME, P)                                                                 \
    KERNEL void conv2d_naive_##NAME(const T* x, const T* w, T* y, Conv2dShape s) {                 \
        conv2d_naive<T>(x, w, y, s);                                                               \
    }                                                                                              \
    KERNEL void conv2d_smem_##NAME(const T* x, const T* w, T* y, Conv2dShape s) {                  \
        conv2d_tile<T, false>(x, w, y, s);                                                         \
    }                                                                                              \
    KERNEL void conv2d_const_##NAME(const T* x, const T* w, T* y, Conv2dShape s) {                 \
        conv2d_tile<T, true>(x, w, y, s);                                                          \
    }                                                                                              \
    KERNEL void conv2d_vec_##NAME##x##P##_oc1_oy4(const T* x, T* y, Conv2dShape s) {               \
        conv2d_vec<T, 1, 4>(x, y, s);                                                              \
    }                                                                                              \
    KERNEL void conv2d_vec_##NAME##x##P##_oc1_oy4_k5x5(const T* x, T* y, Conv2dShape s) {          \
        conv2d_vec<T, 1, 4, 5, 5>(x, y, s);                                                        \
    }                                                                                              \
    KERNEL void conv2d_vec_##NAME##x##P##_oc8_oy1(const T* x, T* y, Conv2dShape s) {               \
        conv2d_vec<T, 8, 1>(x, y, s);                                                              \
    }

CONV2D_KERNELS(float, f32, 4)
CONV2D_KERNELS(bf16_t, bf16, 8)

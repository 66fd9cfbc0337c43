// Day 9: optimized SGEMM, C = A B for row-major A (m x k), B (k x n), C (m x n), f32 with f32
// accumulation. One kernel per technique, each adding one idea to the one before it, so the
// table reads as the path from day 7's tiles to cuBLAS:
//
//   sgemm_tile1d         each thread computes 8 outputs in a column (1D register blocking)
//   sgemm_tile2d         each thread computes an 8 x 8 block (2D register blocking)
//   sgemm_vec4           16-byte global loads and stores, 16-byte shared loads of B
//   sgemm_transposed_a   A stored transposed in shared memory: 16-byte shared loads of A too
//   sgemm_double_buffer  two shared buffers: the next tile's loads overlap this tile's math
//   sgemm_warptile       warp tiles: each warp owns a 2D region, lanes 4 x 4 sub-tiles in it
//
// Every kernel takes any m, n, k: loads outside the matrices give 0 and stores are
// bounds-checked. Kernels with 16-byte accesses come in two forms: `_v` when k and n are
// multiples of 4 (so every row starts 16-byte aligned) and `_s`, the same kernel with 4-byte
// accesses, otherwise.
//
// Every tile comes from day09's table (tile.rs) as -DSG_... defines: the block-tiled kernels'
// BM x BN x BK and threads, and the warp-tile kernels themselves (SG_WARPTILES and
// SG_MULTISTAGES, one WARPTILE(...) or MULTISTAGE(...) below per tiling the table lists).
#include "common.cuh"

#if !defined(SG_TILE1D_BM) || !defined(SG_TILE2D_BM) || !defined(SG_VEC4_BM) ||          \
    !defined(SG_TRANSPOSED_A_BM) || !defined(SG_DOUBLE_BUFFER_BM) || !defined(SG_WARPTILES) || \
    !defined(SG_MULTISTAGES)
#error "sgemm.cu: compile it with the -DSG_ defines of day09's tile table (tile.rs)"
#endif

// ---------------------------------------------------------------------------------------------
// Loads and stores of 4 consecutive floats of a row, bounds-checked.

// M[r][c .. c+3] of a rows x cols matrix, 0 outside it. With VEC (cols % 4 == 0, c % 4 == 0)
// the four are in range together and one 16-byte load fetches them.
template <bool VEC>
__device__ __forceinline__ float4 load4(const float* M, int rows, int cols, int r, int c) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r >= rows) return v;
    const float* p = M + (index_t)r * cols + c;
    if (VEC) {
        if (c < cols) v = *reinterpret_cast<const float4*>(p);
    } else {
        if (c < cols) v.x = p[0];
        if (c + 1 < cols) v.y = p[1];
        if (c + 2 < cols) v.z = p[2];
        if (c + 3 < cols) v.w = p[3];
    }
    return v;
}

// M[r][c .. c+3] = v, dropping what falls outside the matrix.
template <bool VEC>
__device__ __forceinline__ void store4(float* M, int rows, int cols, int r, int c, float4 v) {
    if (r >= rows) return;
    float* p = M + (index_t)r * cols + c;
    if (VEC) {
        if (c < cols) *reinterpret_cast<float4*>(p) = v;
    } else {
        if (c < cols) p[0] = v.x;
        if (c + 1 < cols) p[1] = v.y;
        if (c + 2 < cols) p[2] = v.z;
        if (c + 3 < cols) p[3] = v.w;
    }
}

__device__ __forceinline__ float load1(const float* M, int rows, int cols, int r, int c) {
    return (r < rows && c < cols) ? M[(index_t)r * cols + c] : 0.0f;
}

// quote: outer_product
// acc += a b^T: the multiply-adds of one step of k on a thread's registers.
template <int TM, int TN>
__device__ __forceinline__ void outer_product(float (&acc)[TM][TN], const float (&a)[TM],
                                              const float (&b)[TN]) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
}
// end quote: outer_product

// ---------------------------------------------------------------------------------------------
// v1: 1D block tiling. A 64 x 64 tile of C per block of 512 threads; each thread keeps 8
// outputs of one column in registers. Per step of k, a thread loads one value of B from shared
// memory and reuses it for 8 multiply-adds (day 7 loaded 2 values per multiply-add).
// grid(ceil(n / 64), ceil(m / 64)), block(512): a 64 x 64 tile of C, 8 outputs per thread
KERNEL void __launch_bounds__(SG_TILE1D_THREADS)
    sgemm_tile1d(const float* A, const float* B, float* C, int m, int n, int k) {
    constexpr int BM = SG_TILE1D_BM, BN = SG_TILE1D_BN, BK = SG_TILE1D_BK, TM = 8;
    static_assert((BM / TM) * BN == SG_TILE1D_THREADS, "a thread per 8 outputs of a column");
    static_assert(BM * BK == SG_TILE1D_THREADS && BK * BN == SG_TILE1D_THREADS,
                  "one element of each tile per thread");
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    // This thread's outputs: rows trow*TM .. +TM of column tcol. A warp shares trow, so its
    // reads of As are broadcasts and its reads of Bs are 32 consecutive words.
    const int tcol = tid % BN, trow = tid / BN;
    // Its share of the loads: one element of each tile.
    const int a_r = tid / BK, a_c = tid % BK;
    const int b_r = tid / BN, b_c = tid % BN;
    float acc[TM] = {};
    for (int k0 = 0; k0 < k; k0 += BK) {
        As[a_r][a_c] = load1(A, m, k, row0 + a_r, k0 + a_c);
        Bs[b_r][b_c] = load1(B, k, n, k0 + b_r, col0 + b_c);
        __syncthreads();
        // quote: tile1d
#pragma unroll
        for (int l = 0; l < BK; ++l) {
            const float b = Bs[l][tcol];
#pragma unroll
            for (int i = 0; i < TM; ++i) acc[i] += As[trow * TM + i][l] * b;
        }
        // end quote: tile1d
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + trow * TM + i, c = col0 + tcol;
        if (r < m && c < n) C[(index_t)r * n + c] = acc[i];
    }
}

// ---------------------------------------------------------------------------------------------
// v2: 2D block tiling. A 128 x 128 tile per block of 256 threads; each thread an 8 x 8 block of
// outputs. Per step of k it loads 8 values of A and 8 of B into registers and does 64
// multiply-adds with them: 16 shared loads per 64 FMAs instead of 9 per 8.
// grid(ceil(n / 128), ceil(m / 128)), block(256): a 128 x 128 tile of C, 8 x 8 per thread
KERNEL void __launch_bounds__(SG_TILE2D_THREADS)
    sgemm_tile2d(const float* A, const float* B, float* C, int m, int n, int k) {
    constexpr int BM = SG_TILE2D_BM, BN = SG_TILE2D_BN, BK = SG_TILE2D_BK, TM = 8, TN = 8,
                  THREADS = SG_TILE2D_THREADS;
    static_assert((BM / TM) * (BN / TN) == THREADS, "a thread per 8 x 8 outputs");
    static_assert(BM * BK % THREADS == 0 && BK * BN % THREADS == 0,
                  "the tiles split evenly over the threads");
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int trow = tid / (BN / TN), tcol = tid % (BN / TN);
    float acc[TM][TN] = {};
    float regM[TM], regN[TN];
    for (int k0 = 0; k0 < k; k0 += BK) {
        // 1024 elements per tile, 4 per thread, consecutive threads on consecutive columns.
#pragma unroll
        for (int i = 0; i < BM * BK / THREADS; ++i) {
            const int idx = tid + i * THREADS;
            As[idx / BK][idx % BK] = load1(A, m, k, row0 + idx / BK, k0 + idx % BK);
        }
#pragma unroll
        for (int i = 0; i < BK * BN / THREADS; ++i) {
            const int idx = tid + i * THREADS;
            Bs[idx / BN][idx % BN] = load1(B, k, n, k0 + idx / BN, col0 + idx % BN);
        }
        __syncthreads();
        // quote: tile2d
#pragma unroll
        for (int l = 0; l < BK; ++l) {
#pragma unroll
            for (int i = 0; i < TM; ++i) regM[i] = As[trow * TM + i][l];
#pragma unroll
            for (int j = 0; j < TN; ++j) regN[j] = Bs[l][tcol * TN + j];
            outer_product(acc, regM, regN);
        }
        // end quote: tile2d
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int r = row0 + trow * TM + i, c = col0 + tcol * TN + j;
            if (r < m && c < n) C[(index_t)r * n + c] = acc[i][j];
        }
}

// ---------------------------------------------------------------------------------------------
// Where a thread of v3, v4 and v5 works: the block's BM x BN tile of C starts at (row0,
// col0); the thread owns the 8 x 8 outputs at (8 trow, 8 tcol) of it and loads one float4 of
// A's BM x BK tile (row a_r, columns a_c ..) and one of B's BK x BN tile (row b_r, columns
// b_c ..) per step of k. A macro rather than a struct: with a struct's constructor NVRTC
// orders v4's and v5's accumulator set-up differently.
#define BLOCK_8X8_THREAD(BM, BN, BK, THREADS)                                                  \
    static_assert((BM / 8) * (BN / 8) == THREADS, "a thread per 8 x 8 outputs");               \
    static_assert(THREADS * 4 == BM * BK && THREADS * 4 == BK * BN,                            \
                  "one float4 of each tile per thread");                                       \
    const int tid = threadIdx.x;                                                               \
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;                                  \
    const int trow = tid / (BN / 8), tcol = tid % (BN / 8);                                    \
    const int a_r = tid / (BK / 4), a_c = (tid % (BK / 4)) * 4;                                \
    const int b_r = tid / (BN / 4), b_c = (tid % (BN / 4)) * 4

// v3: v2 with 16-byte accesses: each thread loads one float4 of A's tile and one of B's
// (instead of 4 + 4 scalars), reads B's 8 values from shared memory as two float4, and stores
// C as float4. Fewer instructions for the same bytes; A is still read one word at a time.
template <bool VEC>
__device__ __forceinline__ void sgemm_vec4(const float* A, const float* B, float* C, int m, int n,
                                           int k) {
    constexpr int BM = SG_VEC4_BM, BN = SG_VEC4_BN, BK = SG_VEC4_BK, TM = 8, TN = 8;
    __shared__ float As[BM][BK];
    __shared__ __align__(16) float Bs[BK][BN];
    // One float4 of each tile per thread: A's 128 x 8 is 128 rows of 2, B's 8 x 128 is 8 rows
    // of 32.
    BLOCK_8X8_THREAD(BM, BN, BK, SG_VEC4_THREADS);
    float acc[TM][TN] = {};
    float regM[TM], regN[TN];
    for (int k0 = 0; k0 < k; k0 += BK) {
        // quote: vec4_load
        const float4 a = load4<VEC>(A, m, k, row0 + a_r, k0 + a_c);
        As[a_r][a_c + 0] = a.x;
        As[a_r][a_c + 1] = a.y;
        As[a_r][a_c + 2] = a.z;
        As[a_r][a_c + 3] = a.w;
        *reinterpret_cast<float4*>(&Bs[b_r][b_c]) = load4<VEC>(B, k, n, k0 + b_r, col0 + b_c);
        // end quote: vec4_load
        __syncthreads();
#pragma unroll
        for (int l = 0; l < BK; ++l) {
#pragma unroll
            for (int i = 0; i < TM; ++i) regM[i] = As[trow * TM + i][l];
            // quote: vec4_shared_b
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[l][tcol * TN]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[l][tcol * TN + 4]);
            regN[0] = b0.x, regN[1] = b0.y, regN[2] = b0.z, regN[3] = b0.w;
            regN[4] = b1.x, regN[5] = b1.y, regN[6] = b1.z, regN[7] = b1.w;
            // end quote: vec4_shared_b
            outer_product(acc, regM, regN);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + trow * TM + i;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const float4 v = make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
            store4<VEC>(C, m, n, r, col0 + tcol * TN + j, v);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// quote: transposed_a
// The shared tiles of transposed_a and later: A transposed (As[l][row]) so a thread's 8
// values of A at step l are consecutive words, read as two float4. Each row of As is padded by
// 4 words: the transposing stores of a warp (16 rows x 2 column groups) then fall in 32
// different banks instead of 2 to a bank.
template <int BM, int BN, int BK>
struct Tiles {
    float As[BK][BM + 4];
    float Bs[BK][BN];
};

// Stores a float4 of A (row r, columns c .. c+3 of the tile) transposed into As.
template <int BM, int BN, int BK>
__device__ __forceinline__ void store_a_transposed(Tiles<BM, BN, BK>& t, int r, int c, float4 a) {
    t.As[c + 0][r] = a.x;
    t.As[c + 1][r] = a.y;
    t.As[c + 2][r] = a.z;
    t.As[c + 3][r] = a.w;
}
// end quote: transposed_a

// quote: multiply_8x8
// The 8 x 8 inner product of transposed_a and double_buffer on one pair of tiles: at each l,
// two float4 of A and two of B, 64 FMAs.
template <int BM, int BN, int BK>
__device__ __forceinline__ void multiply_8x8(const Tiles<BM, BN, BK>& t, int trow, int tcol,
                                             float (&acc)[8][8]) {
#pragma unroll
    for (int l = 0; l < BK; ++l) {
        float regM[8], regN[8];
        *reinterpret_cast<float4*>(&regM[0]) = *reinterpret_cast<const float4*>(&t.As[l][trow * 8]);
        *reinterpret_cast<float4*>(&regM[4]) =
            *reinterpret_cast<const float4*>(&t.As[l][trow * 8 + 4]);
        *reinterpret_cast<float4*>(&regN[0]) = *reinterpret_cast<const float4*>(&t.Bs[l][tcol * 8]);
        *reinterpret_cast<float4*>(&regN[4]) =
            *reinterpret_cast<const float4*>(&t.Bs[l][tcol * 8 + 4]);
        outer_product(acc, regM, regN);
    }
}
// end quote: multiply_8x8

template <bool VEC>
__device__ __forceinline__ void store_8x8(float* C, int m, int n, int r0, int c0,
                                          const float (&acc)[8][8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; j += 4)
            store4<VEC>(C, m, n, r0 + i, c0 + j,
                        make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
}

// v4: v3 with A transposed in shared memory.
template <bool VEC>
__device__ __forceinline__ void sgemm_transposed_a(const float* A, const float* B, float* C, int m,
                                                   int n, int k) {
    constexpr int BM = SG_TRANSPOSED_A_BM, BN = SG_TRANSPOSED_A_BN, BK = SG_TRANSPOSED_A_BK;
    __shared__ __align__(16) Tiles<BM, BN, BK> t;
    BLOCK_8X8_THREAD(BM, BN, BK, SG_TRANSPOSED_A_THREADS);
    float acc[8][8] = {};
    for (int k0 = 0; k0 < k; k0 += BK) {
        store_a_transposed(t, a_r, a_c, load4<VEC>(A, m, k, row0 + a_r, k0 + a_c));
        *reinterpret_cast<float4*>(&t.Bs[b_r][b_c]) = load4<VEC>(B, k, n, k0 + b_r, col0 + b_c);
        __syncthreads();
        multiply_8x8(t, trow, tcol, acc);
        __syncthreads();
    }
    store_8x8<VEC>(C, m, n, row0 + trow * 8, col0 + tcol * 8, acc);
}

// v5: v4 with two pairs of shared tiles. The loads of tile i+1 are issued into registers
// before the math on tile i and stored to the other buffer after it, so global latency hides
// behind 512 FMAs per thread, and one barrier per step suffices: a buffer is rewritten only
// after the barrier that ends the step which read it.
template <bool VEC>
__device__ __forceinline__ void sgemm_double_buffer(const float* A, const float* B, float* C, int m,
                                                    int n, int k) {
    constexpr int BM = SG_DOUBLE_BUFFER_BM, BN = SG_DOUBLE_BUFFER_BN, BK = SG_DOUBLE_BUFFER_BK;
    __shared__ __align__(16) Tiles<BM, BN, BK> t[2];
    BLOCK_8X8_THREAD(BM, BN, BK, SG_DOUBLE_BUFFER_THREADS);
    float acc[8][8] = {};
    store_a_transposed(t[0], a_r, a_c, load4<VEC>(A, m, k, row0 + a_r, a_c));
    *reinterpret_cast<float4*>(&t[0].Bs[b_r][b_c]) = load4<VEC>(B, k, n, b_r, col0 + b_c);
    __syncthreads();
    // quote: double_buffer
    const int steps = (k + BK - 1) / BK;
    for (int s = 0; s < steps; ++s) {
        const int cur = s & 1;
        const bool more = s + 1 < steps;
        float4 a_next, b_next;
        if (more) {
            const int k1 = (s + 1) * BK;
            a_next = load4<VEC>(A, m, k, row0 + a_r, k1 + a_c);
            b_next = load4<VEC>(B, k, n, k1 + b_r, col0 + b_c);
        }
        multiply_8x8(t[cur], trow, tcol, acc);
        if (more) {
            store_a_transposed(t[cur ^ 1], a_r, a_c, a_next);
            *reinterpret_cast<float4*>(&t[cur ^ 1].Bs[b_r][b_c]) = b_next;
        }
        __syncthreads();
    }
    // end quote: double_buffer
    store_8x8<VEC>(C, m, n, row0 + trow * 8, col0 + tcol * 8, acc);
}

// ---------------------------------------------------------------------------------------------
// Where a lane's outputs are in a block tile of warp tiles, and the two things v6 and v7 do
// with them: the multiply-adds of one pair of shared tiles, and the final stores.
template <int BM, int BN, int BK, int WM, int WN, int LM, int THREADS>
struct WarpTile {
    // quote: warptile_lanes
    static constexpr int WARPS_N = BN / WN;
    static constexpr int LN = 32 / LM, SUB_M = 4 * LM, SUB_N = 4 * LN;
    static constexpr int M_ITER = WM / SUB_M, N_ITER = WN / SUB_N;
    static_assert(M_ITER * SUB_M == WM && N_ITER * SUB_N == WN, "sub-tiles cover the warp tile");
    static_assert((BM / WM) * (BN / WN) * 32 == THREADS, "one warp per warp tile");

    // This lane's first output in the block tile; sub-tile (i, j) adds (SUB_M i, SUB_N j).
    int wrow, wcol;
    float acc[M_ITER * 4][N_ITER * 4] = {};

    __device__ __forceinline__ WarpTile() {
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
        wrow = (warp / WARPS_N) * WM + (lane / LN) * 4;
        wcol = (warp % WARPS_N) * WN + (lane % LN) * 4;
    }
    // end quote: warptile_lanes

    // quote: warptile_multiply
    // At each step l: M_ITER float4 of A and N_ITER of B, then their outer product.
    __device__ __forceinline__ void multiply(const Tiles<BM, BN, BK>& t) {
#pragma unroll
        for (int l = 0; l < BK; ++l) {
            float regM[M_ITER * 4], regN[N_ITER * 4];
#pragma unroll
            for (int i = 0; i < M_ITER; ++i)
                *reinterpret_cast<float4*>(&regM[i * 4]) =
                    *reinterpret_cast<const float4*>(&t.As[l][wrow + i * SUB_M]);
#pragma unroll
            for (int j = 0; j < N_ITER; ++j)
                *reinterpret_cast<float4*>(&regN[j * 4]) =
                    *reinterpret_cast<const float4*>(&t.Bs[l][wcol + j * SUB_N]);
            outer_product(acc, regM, regN);
        }
    }
    // end quote: warptile_multiply

    // The lane's outputs into C, whose block tile starts at (row0, col0).
    template <bool VEC>
    __device__ __forceinline__ void store(float* C, int m, int n, int row0, int col0) const {
#pragma unroll
        for (int i = 0; i < M_ITER * 4; ++i)
#pragma unroll
            for (int j = 0; j < N_ITER; ++j) {
                const int r = row0 + wrow + (i / 4) * SUB_M + i % 4;
                const int c = col0 + wcol + j * SUB_N;
                store4<VEC>(C, m, n, r, c,
                            make_float4(acc[i][j * 4], acc[i][j * 4 + 1], acc[i][j * 4 + 2],
                                        acc[i][j * 4 + 3]));
            }
    }
};

// v6: warp tiling, with v5's double buffering. The block's BM x BN tile is split among its
// warps, WM x WN each; the 32 lanes of a warp form an LM x LN grid (8 x 4 or 4 x 8), each
// lane a 4 x 4 block of outputs, so a warp covers sub-tiles of 4 LM x 4 LN, WM / (4 LM) x
// WN / (4 LN) of them per lane. At each step l a warp then reads, per sub-tile row, LM distinct
// float4 of A, and per sub-tile column LN distinct float4 of B, contiguous (no conflict): v5's
// 8 x 8 blocks had lanes 32 bytes apart in B, two to a bank. The lanes' 4 x 4 blocks also sit
// closer together, so each warp touches fewer rows of A and columns of B.
template <int BM, int BN, int BK, int WM, int WN, int LM, int THREADS, bool VEC>
__device__ __forceinline__ void sgemm_warptile(const float* A, const float* B, float* C, int m,
                                               int n, int k) {
    constexpr int A_LOADS = BM * BK / 4 / THREADS, B_LOADS = BK * BN / 4 / THREADS;
    static_assert(A_LOADS * THREADS * 4 == BM * BK, "A's tile splits evenly into float4s");
    static_assert(B_LOADS * THREADS * 4 == BK * BN, "B's tile splits evenly into float4s");
    __shared__ __align__(16) Tiles<BM, BN, BK> t[2];

    const int tid = threadIdx.x;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    WarpTile<BM, BN, BK, WM, WN, LM, THREADS> out;

    float4 a_stage[A_LOADS], b_stage[B_LOADS];
    auto load_tiles = [&](int k0) {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int idx = tid + i * THREADS;
            const int r = idx / (BK / 4), c = (idx % (BK / 4)) * 4;
            a_stage[i] = load4<VEC>(A, m, k, row0 + r, k0 + c);
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            const int idx = tid + i * THREADS;
            const int r = idx / (BN / 4), c = (idx % (BN / 4)) * 4;
            b_stage[i] = load4<VEC>(B, k, n, k0 + r, col0 + c);
        }
    };
    auto store_tiles = [&](Tiles<BM, BN, BK>& dst) {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int idx = tid + i * THREADS;
            store_a_transposed(dst, idx / (BK / 4), (idx % (BK / 4)) * 4, a_stage[i]);
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            const int idx = tid + i * THREADS;
            *reinterpret_cast<float4*>(&dst.Bs[idx / (BN / 4)][(idx % (BN / 4)) * 4]) =
                b_stage[i];
        }
    };

    load_tiles(0);
    store_tiles(t[0]);
    __syncthreads();
    const int steps = (k + BK - 1) / BK;
    for (int s = 0; s < steps; ++s) {
        const int cur = s & 1;
        const bool more = s + 1 < steps;
        if (more) load_tiles((s + 1) * BK);
        out.multiply(t[cur]);
        if (more) store_tiles(t[cur ^ 1]);
        __syncthreads();
    }
    out.template store<VEC>(C, m, n, row0, col0);
}

// ---------------------------------------------------------------------------------------------
// v7: a multi-stage pipeline with cp.async. v6 carries the next tile through registers (a
// global load, then shared stores after the math); here the copy engine of the SM writes global
// data straight into shared memory (`cp.async`, sm_80+), STAGES tiles ahead, with no register
// staging and no shared store instructions. A is still transposed on the way: 4-byte copies
// can land anywhere. Each step waits for its own tile's copies (`cp.async.wait_group`), then
// one barrier makes them visible to the block and frees the slot the previous step read, which
// is where the copies for tile s + STAGES - 1 go next.

// Copies `bytes` (4 or 16) from global `src` to shared `dst` asynchronously; with `valid`
// false it writes zeros and reads nothing (src-size 0), which is how edges are padded.
__device__ __forceinline__ void cp_async_4(void* dst, const float* src, bool valid) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src),
                 "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_16(void* dst, const float* src, bool valid) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <int BM, int BN, int BK, int WM, int WN, int LM, int THREADS, int STAGES, bool VEC>
__device__ __forceinline__ void sgemm_multistage(const float* A, const float* B, float* C, int m,
                                                 int n, int k) {
    constexpr int A_LOADS = BM * BK / 4 / THREADS, B_LOADS = BK * BN / 4 / THREADS;
    static_assert(A_LOADS * THREADS * 4 == BM * BK && B_LOADS * THREADS * 4 == BK * BN,
                  "the tiles split evenly into groups of 4");
    // STAGES tiles do not fit the 48 KB of static shared memory: the launch asks for them.
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    Tiles<BM, BN, BK>* t = reinterpret_cast<Tiles<BM, BN, BK>*>(shared_bytes);

    const int tid = threadIdx.x;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    WarpTile<BM, BN, BK, WM, WN, LM, THREADS> out;
    const int steps = (k + BK - 1) / BK;

    // Issues the copies of tile `s` into its slot (nothing past the last tile), then commits
    // them as one group, so every step has exactly one group to wait for.
    auto issue = [&](int s) {
        if (s < steps) {
            Tiles<BM, BN, BK>& dst = t[s % STAGES];
            const int k0 = s * BK;
            // quote: multistage_copy_a
#pragma unroll
            for (int i = 0; i < A_LOADS; ++i) {
                const int idx = tid + i * THREADS;
                const int r = idx / (BK / 4), c = (idx % (BK / 4)) * 4;
                const int gr = row0 + r;
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const bool ok = gr < m && k0 + c + e < k;
                    cp_async_4(&dst.As[c + e][r], ok ? A + (index_t)gr * k + k0 + c + e : A, ok);
                }
            }
            // end quote: multistage_copy_a
#pragma unroll
            for (int i = 0; i < B_LOADS; ++i) {
                const int idx = tid + i * THREADS;
                const int r = idx / (BN / 4), c = (idx % (BN / 4)) * 4;
                const int gr = k0 + r, gc = col0 + c;
                if (VEC) {
                    const bool ok = gr < k && gc < n;
                    cp_async_16(&dst.Bs[r][c], ok ? B + (index_t)gr * n + gc : B, ok);
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const bool ok = gr < k && gc + e < n;
                        cp_async_4(&dst.Bs[r][c + e], ok ? B + (index_t)gr * n + gc + e : B, ok);
                    }
                }
            }
        }
        cp_async_commit();
    };

    // quote: multistage_loop
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) issue(s);
    for (int s = 0; s < steps; ++s) {
        // Tile s has landed (at most STAGES - 2 younger groups still in flight), and after the
        // barrier everyone has finished step s - 1, whose slot the next copies reuse.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        issue(s + STAGES - 1);
        out.multiply(t[s % STAGES]);
    }
    // end quote: multistage_loop
    cp_async_wait<0>();
    out.template store<VEC>(C, m, n, row0, col0);
}

// ---------------------------------------------------------------------------------------------
// The extern "C" entry points, `_v` (16-byte accesses) and `_s` (4-byte) of each.

// grid(ceil(n / 128), ceil(m / 128)), block(256): a 128 x 128 tile of C, 8 x 8 per thread
#define BOTH_FORMS(name, threads, min_blocks)                                                  \
    KERNEL void __launch_bounds__(threads, min_blocks)                                         \
        name##_v(const float* A, const float* B, float* C, int m, int n, int k) {              \
        name<true>(A, B, C, m, n, k);                                                          \
    }                                                                                          \
    KERNEL void __launch_bounds__(threads, min_blocks)                                         \
        name##_s(const float* A, const float* B, float* C, int m, int n, int k) {              \
        name<false>(A, B, C, m, n, k);                                                         \
    }

BOTH_FORMS(sgemm_vec4, SG_VEC4_THREADS, 1)
BOTH_FORMS(sgemm_transposed_a, SG_TRANSPOSED_A_THREADS, 1)
BOTH_FORMS(sgemm_double_buffer, SG_DOUBLE_BUFFER_THREADS, 2)

// Warp-tile configurations: block BM x BN x BK, warp WM x WN, lanes LM x (32 / LM), THREADS =
// 32 per warp; SG_WARPTILES instantiates those of day09's WARP_TILINGS. The first is the
// `warptile` version; `autotuned` times them all on the problem and keeps the fastest.
// MIN_BLOCKS asks ptxas to fit that many blocks per SM (registers capped to match).
// grid(ceil(n / BN), ceil(m / BM)), block(THREADS): a BM x BN tile of C, a WM x WN tile per warp
#define WARPTILE(BM, BN, BK, WM, WN, LM, THREADS, MIN_BLOCKS)                                  \
    KERNEL void __launch_bounds__(THREADS, MIN_BLOCKS)                                         \
        sgemm_warptile_##BM##x##BN##x##BK##_w##WM##x##WN##_l##LM##_v(                          \
            const float* A, const float* B, float* C, int m, int n, int k) {                   \
        sgemm_warptile<BM, BN, BK, WM, WN, LM, THREADS, true>(A, B, C, m, n, k);               \
    }                                                                                          \
    KERNEL void __launch_bounds__(THREADS, MIN_BLOCKS)                                         \
        sgemm_warptile_##BM##x##BN##x##BK##_w##WM##x##WN##_l##LM##_s(                          \
            const float* A, const float* B, float* C, int m, int n, int k) {                   \
        sgemm_warptile<BM, BN, BK, WM, WN, LM, THREADS, false>(A, B, C, m, n, k);              \
    }

SG_WARPTILES

// Multi-stage configurations: as WARPTILE, plus STAGES tiles in flight (dynamic shared memory
// of STAGES x the tile pair: SHARED_BYTES, what the launcher gives); SG_MULTISTAGES
// instantiates those of day09's WARP_TILINGS.
// grid(ceil(n / BN), ceil(m / BM)), block(THREADS), dynamic shared memory STAGES x (A and B
// tiles): a BM x BN tile of C, a WM x WN tile per warp
#define MULTISTAGE(BM, BN, BK, WM, WN, LM, THREADS, STAGES, MIN_BLOCKS, SHARED_BYTES)          \
    static_assert(STAGES * sizeof(Tiles<BM, BN, BK>) == SHARED_BYTES,                          \
                  "the launcher's dynamic shared memory holds STAGES pairs of tiles");         \
    KERNEL void __launch_bounds__(THREADS, MIN_BLOCKS)                                         \
        sgemm_multistage_##BM##x##BN##x##BK##_w##WM##x##WN##_l##LM##_s##STAGES##_v(            \
            const float* A, const float* B, float* C, int m, int n, int k) {                   \
        sgemm_multistage<BM, BN, BK, WM, WN, LM, THREADS, STAGES, true>(A, B, C, m, n, k);     \
    }                                                                                          \
    KERNEL void __launch_bounds__(THREADS, MIN_BLOCKS)                                         \
        sgemm_multistage_##BM##x##BN##x##BK##_w##WM##x##WN##_l##LM##_s##STAGES##_s(            \
            const float* A, const float* B, float* C, int m, int n, int k) {                   \
        sgemm_multistage<BM, BN, BK, WM, WN, LM, THREADS, STAGES, false>(A, B, C, m, n, k);    \
    }

SG_MULTISTAGES

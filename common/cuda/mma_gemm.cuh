// The block tile of the mma.sync GEMMs whose operands both run along k (A stored [m][k], B
// stored [n][k]): day 18's on bf16 and f16, day 23's on int8. 8 warps own a 128 x 128 tile of
// C as 2 (m) x 4 (n) warps of 64 x 32 outputs, each 4 m16 x 4 n8 mma tiles. A k step of the
// warps is 32 bytes of k: k16 of a 16-bit type (mma.m16n8k16, f32 accumulators), k32 of int8
// (mma.m16n8k32, int32 accumulators). Byte for byte the fragments of the two are the same (each
// register holds 4 bytes of one row, along k), so one ldmatrix addressing loads both, and the
// shared-memory tiles below are counted in 16-byte chunks of a row rather than in elements.
#pragma once
#include "mma.cuh"

// One warp's outputs: 4 m16 tiles down, 4 n8 tiles across.
constexpr int MMA_WARP_M = 64, MMA_WARP_N = 32;

// Where this thread's warp works: its block's BM x BN tile of C starts at row m0, column n0
// (tile blockIdx.y down, blockIdx.x across), and the warp is row wm, column wn of the block's
// 2 x 4 warps (warp w at w / 4, w % 4). A constructor fills it in place: a function returning
// it by value leaves a copy that makes the compiler schedule the main loop differently.
template <int BM, int BN> struct MmaTile {
    static_assert(BN == 4 * MMA_WARP_N, "4 warps across the tile: warp w is column w % 4");
    int wm, wn, m0, n0;
    __device__ __forceinline__ MmaTile() {
        const int warp = threadIdx.x / 32;
        wm = warp / 4;
        wn = warp % 4;
        m0 = blockIdx.y * BM;
        n0 = blockIdx.x * BN;
    }
    // The warp's first output row and column in C.
    __device__ __forceinline__ int row0() const { return m0 + wm * MMA_WARP_M; }
    __device__ __forceinline__ int col0() const { return n0 + wn * MMA_WARP_N; }
};

// quote: mma_s8
// mma.m16n8k32 with int8 operands (PTX ISA, "Matrix fragments for mma.m16n8k32"), lane l,
// g = l / 4, t = l % 4; each register holds 4 consecutive k of one row:
//   A (16 x 32): a0 = A[g][4t..4t+3]  a1 = A[g+8][4t..]  a2 = A[g][16+4t..]  a3 = A[g+8][16+4t..]
//   B (32 x 8, "col"): b0 = B[4t..4t+3][g]  b1 = B[16+4t..][g]
//   C (16 x 8, s32): c0, c1 = C[g][2t, 2t+1]  c2, c3 = C[g+8][2t, 2t+1]
// Byte for byte these are the fragments of mma.m16n8k16 with 16-bit elements (mma.cuh), so
// ldmatrix (8 x 16-byte rows per matrix) loads them exactly as it loads bf16.
__device__ __forceinline__ void mma_s8_16832(int (&d)[4], const unsigned (&a)[4], unsigned b0,
                                             unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// end quote: mma_s8

// The mma of one m16 x n8 tile over 32 bytes of k: m16n8k16 on a 16-bit T into f32,
// m16n8k32 on int8 into int32.
template <typename T, typename Acc>
__device__ __forceinline__ void mma_32_bytes(Acc (&d)[4], const unsigned (&a)[4], unsigned b0,
                                             unsigned b1) {
    if constexpr (sizeof(T) == 1) {
        mma_s8_16832(d, a, b0, b1);
    } else {
        mma_16816<T>(d, a, b0, b1);
    }
}

// quote: warp_mma_step
// One k step of a warp (32 bytes of k: chunks `chunk` and chunk + 1 of its rows): A fragments
// of its 4 m16 tiles and B fragments of its 4 n8 tiles by ldmatrix, then the 16 mma.
// `a_row(r, c)` / `b_row(r, c)` give the shared-memory address of 16-byte chunk c of the
// warp's row r (A: 0..63, B: 0..31), so any tile layout (padded, swizzled) can feed it.
template <typename T, typename Acc, typename RowA, typename RowB>
__device__ __forceinline__ void warp_mma_step(Acc (&acc)[4][4][4], RowA a_row, RowB b_row,
                                              int chunk) {
    const int lane = threadIdx.x % 32, quad = lane / 8, r8 = lane % 8;
    unsigned a[4][4], b[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        // Matrices 0..3 of ldmatrix.x4: rows 0-7 / 8-15 of the m16 tile, chunk 0 / 1 of the
        // step (k 0-7 / 8-15 of a 16-bit type, k 0-15 / 16-31 of int8).
        ldmatrix_x4(a[i], a_row(i * 16 + (quad % 2) * 8 + r8, chunk + quad / 2));
    }
#pragma unroll
    for (int j = 0; j < 4; j += 2) {
        // Matrices 0..3: n-tile j (chunk 0, chunk 1), n-tile j + 1 (the same). B is [n][k],
        // so a plain (untransposed) ldmatrix gives the "col" B fragment directly.
        unsigned r[4];
        ldmatrix_x4(r, b_row(j * 8 + (quad / 2) * 8 + r8, chunk + quad % 2));
        b[j][0] = r[0];
        b[j][1] = r[1];
        b[j + 1][0] = r[2];
        b[j + 1][1] = r[3];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_32_bytes<T>(acc[i][j], a[i], b[j][0], b[j][1]);
}
// end quote: warp_mma_step

// Hands each pair of neighbouring outputs of a warp's accumulators to `store(row, col, v0, v1)`
// (columns col and col + 1 of row `row` of C): the mma C layout, c0, c1 in row g and c2, c3 in
// row g + 8 of each m16 x n8 tile, columns 2t and 2t + 1 (g = lane / 4, t = lane % 4). row0,
// col0: the warp's first output (MmaTile::row0, col0).
template <typename Acc, typename Store>
__device__ __forceinline__ void for_each_output_pair(const Acc (&acc)[4][4][4], int row0,
                                                     int col0, Store store) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int row = row0 + i * 16 + g, col = col0 + j * 8 + 2 * t;
            store(row, col, acc[i][j][0], acc[i][j][1]);
            store(row + 8, col, acc[i][j][2], acc[i][j][3]);
        }
}

// ---- the cp.async ring ---------------------------------------------------------------------
// A stage holds ROWS rows of A and ROWS of B (the tile is square), each row 128 bytes of k: 8
// chunks of 16 bytes, one line of the 32 banks. Where a chunk lives in a stage's tile is the
// caller's `at(r, c)`: the offset of chunk c of row r from the tile's start, in elements (days
// 18 and 23 swizzle the chunks so that ldmatrix's 8 rows fall in 8 different bank groups).

// One stage: rows m0.. of A and n0.. of B (ROWS of each), 128 bytes of k from element k0, into
// the tiles `sa` and `sb`; THREADS threads copy ROWS * 8 / THREADS chunks of each. Rows past m
// or n and k past the end are zero-filled, and zeros add nothing to the products; k is a whole
// number of chunks (the hosts refuse other k), so a chunk is wholly inside or wholly outside.
template <int ROWS, int THREADS, typename T, typename At>
__device__ __forceinline__ void load_stage_async(T* sa, T* sb, const T* a, const T* b, int m,
                                                 int n, int k, int m0, int n0, int k0, At at) {
    constexpr int PER_CHUNK = 16 / (int)sizeof(T);  // elements of a chunk
#pragma unroll
    for (int i = 0; i < ROWS * 8 / THREADS; ++i) {
        const int chunk = threadIdx.x + i * THREADS, r = chunk / 8, c = chunk % 8;
        const int col = k0 + c * PER_CHUNK;
        const bool in_k = col < k;
        const int ra = m0 + r, rb = n0 + r;
        const bool va = in_k && ra < m, vb = in_k && rb < n;
        cp_async_16_zfill(sa + at(r, c), a + (va ? (index_t)ra * k + col : 0), va);
        cp_async_16_zfill(sb + at(r, c), b + (vb ? (index_t)rb * k + col : 0), vb);
    }
}

// quote: mma_ring_main_loop
// The block's main loop over all of k: `smem` holds the ring's STAGES tiles of A, then its
// STAGES tiles of B (BM rows x 128 bytes each, laid out by `at`). cp_async_ring keeps the
// loads of STAGES - 1 steps in flight while each warp adds the products of a landed step into
// its 64 x 32 accumulators `acc` (f32 for a 16-bit T, int32 for int8).
template <int THREADS, int STAGES, typename T, int BM, typename Acc, typename At>
__device__ __forceinline__ void mma_ring_main_loop(Acc (&acc)[4][4][4], T* smem, const T* a,
                                                   const T* b, int m, int n, int k,
                                                   const MmaTile<BM, BM>& t, At at) {
    constexpr int BK = 128 / (int)sizeof(T), TILE = BM * BK;  // k of a step, elements of a tile
    T* sa = smem;
    T* sb = sa + STAGES * TILE;
    const int steps = (k + BK - 1) / BK;
    auto load = [&](int slot, int step) {
        load_stage_async<BM, THREADS>(sa + slot * TILE, sb + slot * TILE, a, b, m, n, k, t.m0,
                                      t.n0, step * BK, at);
    };
    auto compute = [&](int slot) {
        const T* ta = sa + slot * TILE;
        const T* tb = sb + slot * TILE;
        auto a_row = [&](int r, int c) { return ta + at(t.wm * MMA_WARP_M + r, c); };
        auto b_row = [&](int r, int c) { return tb + at(t.wn * MMA_WARP_N + r, c); };
#pragma unroll
        for (int chunk = 0; chunk < 8; chunk += 2) warp_mma_step<T>(acc, a_row, b_row, chunk);
    };
    cp_async_ring<STAGES>(steps, load, compute);
}
// end quote: mma_ring_main_loop

// day15, part 2: the INT8 matmul that quantized tensors are made for.
//
//   C[i][j] = sum_l (A[i][l] - za) (B[l][j] - zb)       exact, in int32
// A is m x k row-major; B is given transposed, B^T n x k row-major, so that both operands run
// along k in memory (the "TN" layout int8 GEMMs use: four consecutive k of a row are one
// 32-bit word). The zero points are taken out of the inner loop by expanding the product:
//   C = sum a b - zb * rowsum(A)[i] - za * colsum(B)[j] + k za zb
// so the loop multiplies raw int8 bytes, four per instruction with dp4a (four 8-bit products
// summed into a 32-bit accumulator). |a - za| <= 255 and |b - zb| <= 255, so every output fits
// in int32 for k <= 33025 (the launcher refuses more); the expansion's terms may wrap, which
// is why they are added as unsigned (modular) integers: the exact result fits, so it is right.
//
// Versions:
//   naive        one thread per output, one byte of A and B per step, zero points subtracted
//   dp4a_tiled   128 x 128 block tile, 32 k-bytes per stage in shared memory stored k-word
//                major, an 8 x 8 thread tile (two 4-wide halves, conflict-free 16-byte shared
//                loads), 64 dp4a per k-word; row and column sums accumulated while loading
//
// Run: cargo run --release -p day15 -- --op int8_matmul --kernel dp4a_tiled
#include "common.cuh"

// The naive kernel's square block and the tiled kernel's block tile and threads come from the
// launcher's table (int8_matmul.rs) as -DINT8_MATMUL_... defines.
#if !defined(INT8_MATMUL_NAIVE_BLOCK) || !defined(INT8_MATMUL_TILE) ||                         \
    !defined(INT8_MATMUL_TILED_THREADS)
#error "int8_matmul.cu: compile it with the -DINT8_MATMUL_ defines of day15's int8_matmul.rs"
#endif

// grid(ceil(n / 16), ceil(m / 16)), block(16, 16): thread (x, y) computes C[row][col].
KERNEL void int8_matmul_naive(const signed char* __restrict__ a,
                              const signed char* __restrict__ b_t, int* __restrict__ c, int za,
                              int zb, int m, int n, int k) {
    const int col = blockIdx.x * INT8_MATMUL_NAIVE_BLOCK + threadIdx.x,
              row = blockIdx.y * INT8_MATMUL_NAIVE_BLOCK + threadIdx.y;
    if (row >= m || col >= n) return;
    const signed char* a_row = a + (index_t)row * k;
    const signed char* b_row = b_t + (index_t)col * k;
    int acc = 0;
    for (int l = 0; l < k; ++l) acc += ((int)a_row[l] - za) * ((int)b_row[l] - zb);
    c[(index_t)row * n + col] = acc;
}

#define BM INT8_MATMUL_TILE
#define BN INT8_MATMUL_TILE
#define BK 32               // k-bytes per stage: 8 words
#define BKW (BK / 4)
#define PAD 4               // words: keeps the two 16-byte halves of a loader warp on distinct banks
#define TILED_THREADS INT8_MATMUL_TILED_THREADS  // 16 x 16 threads, 8 x 8 outputs each
static_assert((BM / 8) * (BN / 8) == TILED_THREADS, "a thread per 8 x 8 outputs of the tile");

// Loads the 128 rows x 32 bytes of one operand's stage into `tile` (k-word major:
// tile[w][row] holds bytes 4w..4w+3 of the row) and adds each row's bytes to `sums`.
// Thread t loads 16 bytes: row t / 2, bytes 16 (t % 2) .. +15. Bytes past the matrix are 0,
// which adds nothing to the products or to the sums.
__device__ __forceinline__ void load_stage(const signed char* __restrict__ src, int rows, int k,
                                           int row0, int k0, int (*tile)[BM + PAD], int* sums) {
    const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
    const int row = row0 + r, kb = k0 + 16 * half;
    int w[4] = {0, 0, 0, 0};
    if (row < rows) {
        const signed char* p = src + (index_t)row * k + kb;
        if ((k & 15) == 0 && kb + 16 <= k) {
            const int4 v = *reinterpret_cast<const int4*>(p);
            w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
        } else {
#pragma unroll
            for (int j = 0; j < 16; ++j)
                if (kb + j < k) w[j >> 2] |= ((int)(unsigned char)p[j]) << (8 * (j & 3));
        }
    }
    // quote: row_sums
    int s = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        tile[4 * half + j][r] = w[j];
        s = __dp4a(w[j], 0x01010101, s);
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);  // the other half of the row
    if (half == 0) sums[r] += s;
    // end quote: row_sums
}

// grid(ceil(n / 128), ceil(m / 128)), block(256): thread (ty, tx) = (t / 16, t % 16) owns
// rows {4 ty .. 4 ty + 3} and {64 + 4 ty .. +3} and the same pattern of columns with tx.
KERNEL void __launch_bounds__(TILED_THREADS)
    int8_matmul_dp4a_tiled(const signed char* __restrict__ a,
                           const signed char* __restrict__ b_t, int* __restrict__ c, int za,
                           int zb, int m, int n, int k) {
    __shared__ __align__(16) int as[BKW][BM + PAD];
    __shared__ __align__(16) int bs[BKW][BN + PAD];
    __shared__ int row_sums[BM], col_sums[BN];
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    if (threadIdx.x < BM) row_sums[threadIdx.x] = 0, col_sums[threadIdx.x] = 0;
    __syncthreads();

    int acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0;

    for (int k0 = 0; k0 < k; k0 += BK) {
        load_stage(a, m, k, row0, k0, as, row_sums);
        load_stage(b_t, n, k, col0, k0, bs, col_sums);
        __syncthreads();
        // quote: dp4a_loop
#pragma unroll
        for (int w = 0; w < BKW; ++w) {
            int av[8], bv[8];
            *reinterpret_cast<int4*>(&av[0]) = *reinterpret_cast<const int4*>(&as[w][4 * ty]);
            *reinterpret_cast<int4*>(&av[4]) = *reinterpret_cast<const int4*>(&as[w][64 + 4 * ty]);
            *reinterpret_cast<int4*>(&bv[0]) = *reinterpret_cast<const int4*>(&bs[w][4 * tx]);
            *reinterpret_cast<int4*>(&bv[4]) = *reinterpret_cast<const int4*>(&bs[w][64 + 4 * tx]);
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = __dp4a(av[i], bv[j], acc[i][j]);
        }
        // end quote: dp4a_loop
        __syncthreads();
    }

    // quote: zero_points
    // C = sum a b - zb rowsum - za colsum + k za zb, in modular (unsigned) arithmetic.
    const unsigned kzz = (unsigned)k * (unsigned)za * (unsigned)zb;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = (i < 4 ? 4 * ty : 64 + 4 * ty - 4) + i;
        const int row = row0 + r;
        if (row >= m) continue;
        const unsigned row_term = (unsigned)zb * (unsigned)row_sums[r];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int cl = (j < 4 ? 4 * tx : 64 + 4 * tx - 4) + j;
            const int col = col0 + cl;
            if (col < n) {
                const unsigned v = (unsigned)acc[i][j] - row_term -
                                   (unsigned)za * (unsigned)col_sums[cl] + kzz;
                c[(index_t)row * n + col] = (int)v;
            }
        }
    }
    // end quote: zero_points
}

// day24: C = A W^T with A bf16 (M x K), W in NVFP4 (N x K, K a multiple of 16), C f32.
//
// There is no FP4 multiply on an H100, so each tile of W is decoded once into shared memory
// as bf16 and fed to the bf16 tensor cores (mma.sync m16n8k16, the sm_80+ path of day 18).
// The decoded value is code * scale: at most 6 significant bits, so bf16 holds it exactly
// and the tensor cores see the exact NVFP4 weights; the tensor scale multiplies the f32
// accumulator once at the end. The decode costs a few integer ops per weight, paid once per
// 128-row tile of A: for a large M it hides under the MMAs; the gain of the format here is
// the memory (W in 0.28x the bytes), not speed.
//
// Version:
//   mma_bf16  block tile 128 x 128 x 32, 8 warps of 64 x 32, two shared-memory stages: A by
//             cp.async, W loaded to registers a tile ahead, decoded and stored after the MMAs
//
// Run: cargo run --release -p day24 -- --op gemm --m 4096 --n 4096 --k 4096
#include "mma.cuh"

#define BM 128
#define BN 128
#define BK 32
// Rows of the shared tiles are BK + 8 bf16 = 80 bytes: 16-byte aligned for ldmatrix and cp.async,
// and 8 consecutive rows start in 8 different 16-byte bank groups (no conflicts).
#define LDS (BK + 8)

// W's share of one thread for one k-tile: 16 codes (8 bytes) of one row and their scale.
struct WPart {
    uint2 codes;
    unsigned scale;
};

// Thread t of 256 takes row t / 2 of the W tile, codes [16 (t % 2), + 16) of the tile's 32.
__device__ __forceinline__ WPart load_w(const unsigned char* __restrict__ packed,
                                        const unsigned char* __restrict__ scales, index_t n,
                                        index_t k, index_t n0, index_t k0, int t) {
    const index_t row = n0 + t / 2;
    const index_t kk = k0 + 16 * (t % 2);
    WPart p = {make_uint2(0, 0), 0};
    if (row < n && kk < k) {  // K is a multiple of 16: a half-tile is wholly in or out
        p.codes = __ldcs(reinterpret_cast<const uint2*>(packed + row * (k / 2) + kk / 2));
        p.scale = __ldcs(scales + row * (k / 16) + kk / 16);
    }
    return p;
}

// Decodes a thread's 16 codes to bf16 code * scale (exact) into Ws[row][16 (t % 2) ..].
__device__ __forceinline__ void store_w(bf16_t (*ws)[LDS], WPart p, int t) {
    const float scale = e4m3_value(p.scale) * 16384.0f;  // the 2^14 of the f16 decode
    unsigned out[8];
    const unsigned words[2] = {p.codes.x, p.codes.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        // Codes J and J + 4 of a word come out of one decode; bf16 pairs are (2j, 2j + 1).
        float v[8];
        float2 f;
        f = f16x2_to_f32x2(e2m1_pair_f16x2<0>(words[i]));
        v[0] = f.x, v[4] = f.y;
        f = f16x2_to_f32x2(e2m1_pair_f16x2<1>(words[i]));
        v[1] = f.x, v[5] = f.y;
        f = f16x2_to_f32x2(e2m1_pair_f16x2<2>(words[i]));
        v[2] = f.x, v[6] = f.y;
        f = f16x2_to_f32x2(e2m1_pair_f16x2<3>(words[i]));
        v[3] = f.x, v[7] = f.y;
#pragma unroll
        for (int j = 0; j < 4; ++j) out[4 * i + j] = pack2<bf16_t>(v[2 * j] * scale, v[2 * j + 1] * scale);
    }
    uint4* dst = reinterpret_cast<uint4*>(&ws[t / 2][16 * (t % 2)]);
    dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
    dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
}

// A tile (BM x BK bf16, 512 chunks of 16 bytes): two chunks per thread by cp.async; rows past
// M and columns past K are zero-filled.
__device__ __forceinline__ void load_a(bf16_t (*as)[LDS], const bf16_t* __restrict__ a, index_t m,
                                       index_t k, index_t m0, index_t k0, int t) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int chunk = t + 256 * i;
        const int r = chunk / 4, c = 8 * (chunk % 4);
        const bool valid = m0 + r < m && k0 + c < k;
        const bf16_t* src = valid ? a + (m0 + r) * k + k0 + c : a;
        cp_async_16_zfill(&as[r][c], src, valid);
    }
}

// grid(ceil(N / 128), ceil(M / 128)), block(256): block (x, y) computes C[128y.., 128x..];
// warp w computes the 64 x 32 sub-tile at rows 64 (w / 4), columns 32 (w % 4): 4 x 4 mma
// tiles of 16 x 8 per 16-wide k step.
KERNEL void __launch_bounds__(256) gemm_nvfp4_mma_bf16(const bf16_t* __restrict__ a,
                                                       const unsigned char* __restrict__ packed,
                                                       const unsigned char* __restrict__ scales,
                                                       const float* __restrict__ tensor_scale,
                                                       float* __restrict__ c, index_t m, index_t n,
                                                       index_t k) {
    __shared__ __align__(16) bf16_t As[2][BM][LDS];
    __shared__ __align__(16) bf16_t Ws[2][BN][LDS];
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    const index_t m0 = (index_t)blockIdx.y * BM, n0 = (index_t)blockIdx.x * BN;
    const int wm = 64 * (warp / 4), wn = 32 * (warp % 4);
    const index_t tiles = (k + BK - 1) / BK;

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

    load_a(As[0], a, m, k, m0, 0, t);
    cp_async_commit();
    store_w(Ws[0], load_w(packed, scales, n, k, n0, 0, t), t);

    for (index_t kt = 0; kt < tiles; ++kt) {
        const int s = kt & 1;
        const bool next = kt + 1 < tiles;
        // Stage s ^ 1 was last read by the MMAs of tile kt - 1, which every thread finished
        // before the barrier at the end of that iteration.
        WPart w_next = {make_uint2(0, 0), 0};
        if (next) {
            load_a(As[s ^ 1], a, m, k, m0, (kt + 1) * BK, t);
            w_next = load_w(packed, scales, n, k, n0, (kt + 1) * BK, t);  // in flight during the MMAs
        }
        cp_async_commit();
        cp_async_wait<1>();  // tile kt's A has landed (the group just committed may not have)
        __syncthreads();

#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned af[4][4], bfrag[4][2];
#pragma unroll
            for (int i = 0; i < 4; ++i) ldmatrix_x4(af[i], &As[s][wm + 16 * i + lane % 16][kk + 8 * (lane / 16)]);
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                // Matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
                unsigned r[4];
                ldmatrix_x4(r, &Ws[s][wn + 16 * j + 8 * (lane / 16) + lane % 8][kk + 8 * ((lane / 8) % 2)]);
                bfrag[2 * j][0] = r[0], bfrag[2 * j][1] = r[1];
                bfrag[2 * j + 1][0] = r[2], bfrag[2 * j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) mma_16816<bf16_t>(acc[i][j], af[i], bfrag[j][0], bfrag[j][1]);
        }
        if (next) store_w(Ws[s ^ 1], w_next, t);
        __syncthreads();
    }

    // C fragment: c0, c1 at (g, 2q), (g, 2q + 1); c2, c3 at (g + 8, ...), g = lane / 4, q = lane % 4.
    const float ts = *tensor_scale;
    const int g = lane / 4, q = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const index_t row = m0 + wm + 16 * i + g + 8 * (r / 2);
                const index_t col = n0 + wn + 8 * j + 2 * q + r % 2;
                if (row < m && col < n) c[row * n + col] = acc[i][j][r] * ts;
            }
        }
    }
}

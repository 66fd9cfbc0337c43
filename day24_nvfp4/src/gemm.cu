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
// Versions:
//   mma_bf16  block tile 128 x 128 x 32, 8 warps of 64 x 32, two shared-memory stages: A by
//             cp.async, W loaded to registers a tile ahead, decoded and stored after the MMAs
//   wgmma_rs  (Hopper) C^T = W A^T on wgmma: W decoded straight into register fragments, A by
//             the TMA into a ring of shared-memory stages; see below
//
// Run: cargo run --release -p day24 -- --op gemm --m 4096 --n 4096 --k 4096
#include "mma.cuh"

// mma_bf16's block tile and threads come from the launcher (gemm.rs) as defines; its warps,
// loaders and decode below are written for exactly these.
#if !defined(GEMM_MMA_TILE) || !defined(GEMM_MMA_THREADS)
#error "gemm.cu: compile it with the -DGEMM_MMA_ defines of day24's gemm.rs"
#endif
static_assert(GEMM_MMA_TILE == 128 && GEMM_MMA_THREADS == 256, "8 warps of 64 x 32 outputs");
#define BM GEMM_MMA_TILE
#define BN GEMM_MMA_TILE
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

// quote: store_w
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
// end quote: store_w

// A tile (BM x BK bf16, 512 chunks of 16 bytes): two chunks per thread by cp.async; rows past
// M and columns past K are zero-filled.
__device__ __forceinline__ void load_a(bf16_t (*as)[LDS], const bf16_t* __restrict__ a, index_t m,
                                       index_t k, index_t m0, index_t k0, int t) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int chunk = t + GEMM_MMA_THREADS * i;
        const int r = chunk / 4, c = 8 * (chunk % 4);
        const bool valid = m0 + r < m && k0 + c < k;
        const bf16_t* src = valid ? a + (m0 + r) * k + k0 + c : a;
        cp_async_16_zfill(&as[r][c], src, valid);
    }
}

// grid(ceil(N / 128), ceil(M / 128)), block(256): block (x, y) computes C[128y.., 128x..];
// warp w computes the 64 x 32 sub-tile at rows 64 (w / 4), columns 32 (w % 4): 4 x 4 mma
// tiles of 16 x 8 per 16-wide k step.
KERNEL void __launch_bounds__(GEMM_MMA_THREADS) gemm_nvfp4_mma_bf16(const bf16_t* __restrict__ a,
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

// ---------------------------------------------------------------------------------------------
// wgmma_rs (sm_90a only; the host compiles this file for sm_90a on Hopper).
//
// The product is turned around: C^T = W A^T, so the NVFP4 weights are wgmma's A operand and
// come from registers ("RS"), where each consumer thread decodes its own fragment, and the
// activations are the B operand, read by the tensor cores from shared memory where the TMA put
// them. A CTA owns 128 rows of W (two consumer warpgroups of 64) x 256 rows of A (the wgmma's
// n), persistent over the tiles; the decoded weights never touch shared memory.
//
// Two warpgroups of 256 threads and no producer warp: each thread may hold 255 registers,
// which the accumulators (128), two fragment sets (32) and a step's codes need. A third
// warpgroup (or even a ninth warp) would cap every thread at 168: registers are split among
// the SM's four quarters, and setmaxnreg moves them between warpgroups only at run time;
// ptxas allocates within the launch bound.
//
// The loads run WG_STAGES - 1 k-steps of 128 ahead in a ring of stages, over the CTA's whole
// sequence of (tile, k-step) pairs, so the next tile's first stages fill during this tile's
// last steps and its epilogue:
//   thread 0: waits until both warpgroups freed the stage (empty[s]), then the TMA brings A's
//     two 256 x 64 bf16 boxes (128-byte swizzle, 64 KiB), counted in bytes on full[s]
//   every thread: cp.async of its own rows' codes (2 x 8 bytes of row r and of row r + 8): a
//     warp loads exactly the 16 rows x 64 bytes it decodes, so only the warp waits for them
//   per step, in two halves of 64 k: wait full[s] and this thread's cp.async group -> decode
//     half 0's 4 fragments (rows r, r + 8 of the warp's 16, k 2t.., 2t + 8.. of each k16) with
//     the rows' scales (loaded from global memory a step ahead) -> 4 wgmma m64n256k16, A from
//     registers -> wait for the previous half, free the previous step's stage and issue the
//     loads of the step WG_STAGES - 1 ahead into it -> the same for half 1
// The halves use two fragment sets, so one half is decoded while the other's wgmma still reads
// its set. The per-step work (barriers, loads, addresses) is paid once per 128 k: a warp's
// instructions, not the tensor cores, set this kernel's pace.
//
// The tile sizes and the ring's depth come from the host (gemm.rs, `-D`), which sizes the grid,
// the TMA box and the shared memory from the same numbers; the decode below is written for
// them, as the asserts say.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "hopper.cuh"

#if !defined(WG_TILE_N) || !defined(WG_TILE_M) || !defined(WG_TILE_K) || !defined(WG_BOX_K) || \
    !defined(WG_STAGES) || !defined(WG_THREADS)
#error "gemm.cu: compile it with the -DWG_ defines of day24's gemm.rs (the wgmma_rs tile)"
#endif
static_assert(WG_THREADS == 256, "two consumer warpgroups, no producer warp");
static_assert(WG_TILE_N == 128, "two consumer warpgroups of 64 W rows (wgmma's m)");
static_assert(WG_TILE_M == 256, "the activations' rows are wgmma's n: at most 256");
static_assert(WG_BOX_K == 64, "a TMA box is one 128-byte swizzle row of bf16");
static_assert(WG_TILE_K == 2 * WG_BOX_K,
              "a step is two boxes, each 4 k16 of one fragment set (two halves of 32 code bytes)");
constexpr int WG_A_BOX = WG_TILE_M * WG_BOX_K * 2;      // bytes of one box of activations
constexpr int WG_A_STAGE = 2 * WG_A_BOX;                // bytes of activations per stage
constexpr int WG_W_STAGE = WG_TILE_N * WG_TILE_K / 2;   // bytes of codes per stage
constexpr int WG_CODE_ROW = WG_TILE_K / 2;              // 64 bytes of one W row per stage
constexpr int WG_CODE_HALF = WG_CODE_ROW / 2;           // a half-step's 32 bytes of a row
static_assert(WG_A_STAGE % 1024 == 0, "each activation tile starts on a swizzle period");

// quote: e2m1_tables
// The e2m1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 as bf16, split into byte tables for `prmt`:
// the low bytes (00 00 80 C0 00 40 80 C0) and the high bytes (00 3F 3F 3F 40 40 40 40),
// entries 0..3 in the first word, 4..7 in the second.
constexpr unsigned E2M1_BF16_LO0 = 0xC0800000u, E2M1_BF16_LO1 = 0xC0804000u;
constexpr unsigned E2M1_BF16_HI0 = 0x3F3F3F00u, E2M1_BF16_HI1 = 0x40404040u;
// end quote: e2m1_tables

// The four table words, passed down to the decode.
struct E2m1Tables {
    unsigned lo0, lo1, hi0, hi1;
};

__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned selector) {
    unsigned d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
    return d;
}

// a x b for two bf16 pairs, exact here (at most 6 significant bits): fma with -0 leaves every
// product, +0 and -0 included, as it is.
__device__ __forceinline__ unsigned bf16x2_mul(unsigned a, unsigned b) {
    unsigned d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
    return d;
}

// Two e4m3 scales (bytes 0 and 1 of `two`) as bf16 pairs (s0, s0) and (s1, s1), exact; the
// e4m3 NaN stays NaN.
__device__ __forceinline__ void e4m3x2_to_bf16_pairs(unsigned two, unsigned& s0, unsigned& s1) {
    const float2 f = e4m3x2_to_f32x2(two);
    asm("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(s0) : "f"(f.x));
    asm("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(s1) : "f"(f.y));
}

// One k16 step's register A fragment (wgmma's layout: a[0] = row r, k 2t and 2t + 1; a[1] the
// same 8 rows lower; a[2], a[3] the same at k + 8), code x scale in bf16.
//   lo0, hi0: the words of row r holding codes 0..7 and 8..15 of this k16 (byte t of each is
//             the pair at k 2t and at 2t + 8); lo1, hi1 the same of row r + 8
//   select_t: t | (t + 4) << 4, the prmt selector of byte t of two words
//   scale0, scale1: the block scales of rows r and r + 8 as bf16 pairs
// The four bytes of codes go into one word X (nibbles: row r k 2t, 2t+1, 2t+8, 2t+9, then the
// same of row r + 8). Their magnitudes index the byte tables (one prmt gives four bytes), the
// sign bits come from a prmt in sign-replicate mode (selector bit 3: the top bit of the chosen
// byte, repeated; X << 4 brings the even codes' sign bits to the top), and a last prmt
// interleaves low and high bytes into bf16 pairs. 22 instructions for 8 weights.
// quote: decode_fragment
__device__ __forceinline__ void decode_fragment(unsigned lo0, unsigned hi0, unsigned lo1,
                                                unsigned hi1, unsigned select_t, unsigned scale0,
                                                unsigned scale1, const E2m1Tables& t,
                                                unsigned (&a)[4]) {
    const unsigned x = prmt(prmt(lo0, hi0, select_t), prmt(lo1, hi1, select_t), 0x5410);
    const unsigned magnitude = x & 0x77777777u;
    const unsigned low_r = prmt(t.lo0, t.lo1, magnitude);
    const unsigned low_r8 = prmt(t.lo0, t.lo1, magnitude >> 16);
    unsigned high_r = prmt(t.hi0, t.hi1, magnitude);
    unsigned high_r8 = prmt(t.hi0, t.hi1, magnitude >> 16);
    const unsigned x4 = x << 4;
    high_r |= prmt(x4, x, 0xD9C8) & 0x80808080u;   // signs of nibbles 0, 1, 2, 3
    high_r8 |= prmt(x4, x, 0xFBEA) & 0x80808080u;  // signs of nibbles 4, 5, 6, 7
    a[0] = bf16x2_mul(prmt(low_r, high_r, 0x5140), scale0);
    a[2] = bf16x2_mul(prmt(low_r, high_r, 0x7362), scale0);
    a[1] = bf16x2_mul(prmt(low_r8, high_r8, 0x5140), scale1);
    a[3] = bf16x2_mul(prmt(low_r8, high_r8, 0x7362), scale1);
}
// end quote: decode_fragment

// 8 bytes of codes (16 weights, one block) by cp.async; zeros when `valid` is false.
__device__ __forceinline__ void cp_async_8_zfill(unsigned dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 8u : 0u)
                 : "memory");
}

// 16 bytes of shared memory at a 32-bit shared address.
__device__ __forceinline__ uint4 lds128(unsigned address) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(address));
    return v;
}

// One consumer k-step: decode the fragments of the stage's codes (rows r and r + 8 at shared
// addresses codes_r, codes_r8) into `a`, then the wgmma on the stage's activations.
__device__ __forceinline__ void consume_step(float (&d)[WG_TILE_M / 2], unsigned (&a)[4][4],
                                             unsigned codes_r, unsigned codes_r8,
                                             const unsigned char* act, unsigned scales_r,
                                             unsigned scales_r8, unsigned select_t,
                                             const E2m1Tables& tables, bool first) {
    const uint4 r_lo = lds128(codes_r), r_hi = lds128(codes_r + 16);
    const uint4 r8_lo = lds128(codes_r8), r8_hi = lds128(codes_r8 + 16);
    const unsigned wr[8] = {r_lo.x, r_lo.y, r_lo.z, r_lo.w, r_hi.x, r_hi.y, r_hi.z, r_hi.w};
    const unsigned wr8[8] = {r8_lo.x, r8_lo.y, r8_lo.z, r8_lo.w, r8_hi.x, r8_hi.y, r8_hi.z, r8_hi.w};
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        unsigned s0, s1;
        e4m3x2_to_bf16_pairs(prmt(scales_r, scales_r8, kk | (kk + 4) << 4), s0, s1);
        decode_fragment(wr[2 * kk], wr[2 * kk + 1], wr8[2 * kk], wr8[2 * kk + 1], select_t, s0,
                        s1, tables, a[kk]);
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
        wgmma_m64k16_rs<WG_TILE_M, bf16_t>(d, a[kk], wgmma_descriptor_k_major_sw128(act + 32 * kk),
                                           !first || kk > 0);
    wgmma_commit();
}

// A walk over the CTA's sequence of (tile, k-step) pairs (tile slot i is tile blockIdx.x + i
// gridDim.x), carrying what one thread reads at each step: the TMA's coordinates, and the
// addresses of its rows' codes (block t4 of rows r and r + 8) and scales. A step adds to them;
// a new tile (every `steps` steps) works them out again, with the tile order's divisions.
struct StepCursor {
    int slot, step;
    int m0, k0;                          // the A box: rows m0.., k k0..
    const unsigned char* code[2];        // 8 bytes of codes of rows r, r + 8 (when in n)
    const unsigned char* scale[2];       // 4 scale bytes of rows r, r + 8 (when in n)
    bool in_n[2];
    int code_k;                          // the k of this thread's block of codes

    __device__ __forceinline__ void place(const unsigned char* packed,
                                          const unsigned char* scales, int n, int k, int r,
                                          int t4, int tiles_n, int tiles_m) {
        const int t = blockIdx.x + slot * gridDim.x;
        int tn = 0, tm = 0;  // W rows are the grid's "rows": a group of 8 tiles shares W in L2
        if (t < tiles_n * tiles_m) tile_coords(t, tiles_n, tiles_m, tn, tm);
        m0 = tm * WG_TILE_M;
        k0 = 0;
        code_k = 16 * t4;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = tn * WG_TILE_N + r + 8 * h;
            in_n[h] = row < n;
            code[h] = packed + (index_t)(in_n[h] ? row : 0) * (k / 2) + 8 * t4;
            scale[h] = scales + (index_t)(in_n[h] ? row : 0) * (k / 16);
        }
    }
    __device__ __forceinline__ void advance(const unsigned char* packed,
                                            const unsigned char* scales, int n, int k, int r,
                                            int t4, int steps, int tiles_n, int tiles_m) {
        if (++step == steps) {
            step = 0;
            ++slot;
            place(packed, scales, n, k, r, t4, tiles_n, tiles_m);
        } else {
            k0 += WG_TILE_K;
            code_k += WG_TILE_K;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                code[h] += WG_TILE_K / 2;
                scale[h] += WG_TILE_K / 16;
            }
        }
    }
};

// The 4 scale bytes at `p` (blocks first .. first + 3 of a row of `blocks`), one byte per k16;
// 0 past the matrix, in n or in k (its codes are zero-filled too, so those weights decode to
// 0). One 32-bit load when every row's scales start 4-byte aligned (K a multiple of 64).
__device__ __forceinline__ unsigned load_step_scales(const unsigned char* p, bool in_n, int first,
                                                     int blocks) {
    if (!in_n || first >= blocks) return 0;
    if (blocks % 4 == 0) return __ldg(reinterpret_cast<const unsigned*>(p));
    unsigned v = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i)
        if (first + i < blocks) v |= (unsigned)__ldg(p + i) << (8 * i);
    return v;
}

// grid(min(tiles, SMs)), block(256), dynamic shared WG_STAGES x (64 + 8) KiB + barriers + 1 KiB
// of alignment. map_a covers A as [1][m][k] bf16 in boxes of 64 k x 256 rows, 128-byte swizzle.
// C[m][n] = tensor_scale x sum_k A[m][k] W[n][k]; K a multiple of 16; any m, n.
KERNEL void __launch_bounds__(WG_THREADS, 1)
    gemm_nvfp4_wgmma_rs(const __grid_constant__ Nvfp4GemmParams params) {
    // The launch's parameters by name (gemm_params.cuh, written from the launcher's
    // declaration); the map stays in parameter space, where the TMA reads it.
    const TmaDescriptor& map_a = params.map_a;
    const unsigned char* __restrict__ packed = params.packed;
    const unsigned char* __restrict__ scales = params.scales;
    const float* __restrict__ tensor_scale = params.tensor_scale;
    float* __restrict__ c = params.c;
    const int m = params.m, n = params.n, k = params.k;
    // The 128-byte swizzle pattern repeats every 1024 bytes: tiles start on that boundary.
    unsigned char* act = aligned_dynamic_shared();
    unsigned char* codes = act + WG_STAGES * WG_A_STAGE;
    unsigned long long* full =
        reinterpret_cast<unsigned long long*>(codes + WG_STAGES * WG_W_STAGE);
    unsigned long long* empty = full + WG_STAGES;

    const int tiles_n = (n + WG_TILE_N - 1) / WG_TILE_N, tiles_m = (m + WG_TILE_M - 1) / WG_TILE_M;
    const int tiles = tiles_n * tiles_m;
    const int steps = (k + WG_TILE_K - 1) / WG_TILE_K;  // k-steps per tile
    const int my_tiles = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const int total = my_tiles * steps;  // this CTA's k-steps over all its tiles
    if (threadIdx.x == 0) {
        for (int s = 0; s < WG_STAGES; ++s) {
            mbarrier_init(&full[s], 1);   // thread 0's expect_tx, then the TMA's bytes
            mbarrier_init(&empty[s], 2);  // each warpgroup, once its wgmma read the stage
        }
        fence_barrier_init();
    }
    __syncthreads();

    const int consumer = threadIdx.x / 128;
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int r = consumer * 64 + warp * 16 + lane / 4;  // this thread's W rows r, r + 8 of the tile
    const int t4 = lane % 4;
    const unsigned select_t = t4 | (t4 + 4) << 4;
    const E2m1Tables tables = {E2M1_BF16_LO0, E2M1_BF16_LO1, E2M1_BF16_HI0, E2M1_BF16_HI1};

    // The loads of step g into stage g % WG_STAGES, for consecutive g; every thread commits
    // one cp.async group per call (empty past the end) so that "wait for the group of step g"
    // is one count.
    StepCursor loads = {0, 0};
    loads.place(packed, scales, n, k, r, t4, tiles_n, tiles_m);
    const unsigned code_dst = smem_u32(codes) + r * WG_CODE_ROW + 8 * t4;  // + stage, + 8 rows
    auto load_step = [&](int g) {
        if (g < total) {
            const int stage = g % WG_STAGES;
            if (threadIdx.x == 0) {
                // Step g - WG_STAGES used this stage; its release is empty's (g / STAGES - 1)-th
                // phase. The first pass over the ring waits for nothing.
                if (g >= WG_STAGES) mbarrier_wait(&empty[stage], (g / WG_STAGES - 1) & 1);
                mbarrier_arrive_expect_tx(&full[stage], WG_A_STAGE);  // zero-filled edges count
                tma_load_3d(act + stage * WG_A_STAGE, &map_a, &full[stage], loads.k0, loads.m0, 0);
                tma_load_3d(act + stage * WG_A_STAGE + WG_A_BOX, &map_a, &full[stage],
                            loads.k0 + WG_BOX_K, loads.m0, 0);
            }
            // Blocks t4 and t4 + 4 (16 codes, 8 bytes each: one per half-step) of rows r and
            // r + 8; past n or k: zeros.
            const unsigned dst = code_dst + stage * WG_W_STAGE;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    // else read nothing, write zeros
                    const bool valid = loads.in_n[h] && loads.code_k + half * WG_BOX_K < k;
                    cp_async_8_zfill(dst + 8 * h * WG_CODE_ROW + half * WG_CODE_HALF,
                                     valid ? loads.code[h] + half * WG_CODE_HALF : packed, valid);
                }
            }
            loads.advance(packed, scales, n, k, r, t4, steps, tiles_n, tiles_m);
        }
        cp_async_commit();
    };
    // The scales of rows r and r + 8 of consecutive steps, one step ahead: per half-step 4
    // bytes of each row, s[half][row].
    StepCursor scale_steps = {0, 0};
    scale_steps.place(packed, scales, n, k, r, t4, tiles_n, tiles_m);
    auto load_scales = [&](int g, unsigned (&s)[2][2]) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                s[half][h] = g < total ? load_step_scales(scale_steps.scale[h] + 4 * half,
                                                          scale_steps.in_n[h],
                                                          8 * scale_steps.step + 4 * half, k / 16)
                                       : 0;
            }
        }
        if (g < total) scale_steps.advance(packed, scales, n, k, r, t4, steps, tiles_n, tiles_m);
    };

    for (int g = 0; g < WG_STAGES - 1; ++g) load_step(g);
    unsigned s[2][2];
    load_scales(0, s);
    const float ts = *tensor_scale;
    float d[WG_TILE_M / 2];
    // The two fragment sets: a0 for the first half of every step, a1 for the second.
    unsigned a0[4][4] = {}, a1[4][4] = {};
    const unsigned code_rows = smem_u32(codes) + r * WG_CODE_ROW;  // row r of stage 0
    // Step g: half 0 (a0, the first box), then half 1 (a1, the second box). Each half's wgmma
    // runs while the next half is decoded; a wait for all but the newest group frees the
    // other fragment set, and the first of the step frees the previous step's stage.
    auto run_step = [&](int g, bool first) {
        const int stage = g % WG_STAGES;
        unsigned next[2][2];
        load_scales(g + 1, next);
        mbarrier_wait(&full[stage], (g / WG_STAGES) & 1);
        cp_async_wait<WG_STAGES - 2>();  // this thread's codes of step g (later groups may fly)
        __syncwarp();                    // and the other lanes' of the warp's rows
        const unsigned w = code_rows + stage * WG_W_STAGE;
        const unsigned char* x = act + stage * WG_A_STAGE;
        consume_step(d, a0, w, w + 8 * WG_CODE_ROW, x, s[0][0], s[0][1], select_t, tables, first);
        wgmma_wait<1>();  // step g - 1's second half is done: a1 and that step's stage are free
        wgmma_fence_operands(d);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) wgmma_fence_operands(a1[kk]);
        if (g > 0 && threadIdx.x % 128 == 0) mbarrier_arrive(&empty[(g - 1) % WG_STAGES]);
        __syncwarp();  // every lane has read the stage's codes before any overwrites them
        load_step(g + WG_STAGES - 1);
        consume_step(d, a1, w + WG_CODE_HALF, w + 8 * WG_CODE_ROW + WG_CODE_HALF, x + WG_A_BOX,
                     s[1][0], s[1][1], select_t, tables, false);
        wgmma_wait<1>();  // the first half is done: a0 is free
        wgmma_fence_operands(d);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) wgmma_fence_operands(a0[kk]);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            s[half][0] = next[half][0];
            s[half][1] = next[half][1];
        }
    };
    // Tiles outside, their k-steps inside, and the epilogue after the inner loop, rather than
    // one loop over every (tile, step) with the epilogue under an `if (last step)`: ptxas
    // serializes every wgmma of a kernel where one of them, or a use of their accumulators,
    // sits on a path it cannot prove uniform.
    for (int slot = 0, g = 0; slot < my_tiles; ++slot) {
        for (int step = 0; step < steps; ++step, ++g) run_step(g, step == 0);
        wgmma_wait<0>();
        wgmma_fence_operands(d);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            wgmma_fence_operands(a0[kk]);
            wgmma_fence_operands(a1[kk]);
        }
        // d[4j + h] = D[r][8j + 2 t4 + h] and d[4j + 2 + h] = D[r + 8][...]: D's rows are W's
        // (C's columns), its columns A's (C's rows). A warp's store covers 8 consecutive
        // columns of C in 4 rows: four 32-byte pieces.
        int tn, tm;
        tile_coords(blockIdx.x + slot * gridDim.x, tiles_n, tiles_m, tn, tm);
        const int col = tn * WG_TILE_N + r;
#pragma unroll
        for (int j = 0; j < WG_TILE_M / 8; ++j) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = tm * WG_TILE_M + 8 * j + 2 * t4 + h;
                if (row < m) {
                    float* out = c + (index_t)row * n;
                    if (col < n) __stcs(out + col, d[4 * j + h] * ts);
                    if (col + 8 < n) __stcs(out + col + 8, d[4 * j + 2 + h] * ts);
                }
            }
        }
    }
    // No cp.async may still be writing when the block leaves.
    cp_async_wait<0>();
}
#endif

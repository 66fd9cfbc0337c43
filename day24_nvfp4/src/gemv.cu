// day24: y = W x with W stored in NVFP4 (N rows x K, K a multiple of 16), x bf16, y f32.
//
// A GEMV reads every weight once and does 2 flops with it: its speed is the speed at which W
// leaves HBM. NVFP4 is 4.5 bits per weight (4 for the code, 8 per 16 for the scale) against
// bf16's 16, so the same matrix streams in 0.28x the bytes: up to 3.55x faster, on any GPU,
// with no FP4 arithmetic at all. The H100 has no FP4 tensor cores (Blackwell does); here the
// codes are decoded in registers and multiplied in f32. The decode must stay cheaper than the
// bytes it saves: two shifts, two logic ops and two f16 -> f32 conversions per pair of codes
// (nvfp4_format.cuh), and the block's scale once per 16 values.
//
// Versions:
//   bf16_warp     the baseline: W in bf16, a warp per row, 16-byte loads (8 weights), 4 in
//                 flight per lane
//   nvfp4_warp    a warp per row, 16-byte loads (32 codes = 2 blocks) and their 2 scale bytes,
//                 2 chunks in flight per lane, 64 registers (50% occupancy)
//   nvfp4_rows2   a warp per 2 rows: each lane's x (64 bytes per chunk) is loaded and turned
//                 into f32 once for 2 rows; 2 chunks of each row in flight, 64 registers
//   nvfp4_rows4   a warp per 4 rows: x turned into f32 once for 4 rows; 80 registers (37.5%)
// In all three the two scale bytes of a chunk go through the hardware e4m3x2 -> f16x2
// conversion, and the 2^14 that the code decode leaves out is applied once per row at the end.
// When K is not a multiple of 32 a row's packed bytes are only 8-byte aligned: the same
// kernels then load 8 bytes (one block) at a time (`_u2` instead of `_u4`).
//
// Run: cargo run --release -p day24 -- --op gemv --n 14336 --k 4096
#include "reduce.cuh"

// x[8c .. 8c + 8) as f32, from one 16-byte load of 8 bf16 (bf16 -> f32 is a shift).
__device__ __forceinline__ void bf16x8_to_f32(uint4 v, float (&out)[8]) {
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        out[2 * j] = __uint_as_float(w[j] << 16);
        out[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
    }
}

// ---- the bf16 baseline ----------------------------------------------------------------------

__device__ __forceinline__ float dot_bf16x8(uint4 a, uint4 x, float acc) {
    float af[8], xf[8];
    bf16x8_to_f32(a, af);
    bf16x8_to_f32(x, xf);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc = fmaf(af[j], xf[j], acc);
    return acc;
}

// A block's warps come from the launcher (gemv.rs) as a define: one row (or ROWS rows) each.
#ifndef GEMV_WARPS
#error "gemv.cu: compile it with the -DGEMV_WARPS define of day24's gemv.rs"
#endif
#define GEMV_THREADS (32 * GEMV_WARPS)

// grid(ceil(n / 8)), block(256): warp w of block b computes row 8b + w; lane l takes the
// 8-weight chunks l, l + 32, ... (a warp's 32 loads are 512 contiguous bytes of the row).
KERNEL void gemv_bf16_warp_x8(const bf16_t* __restrict__ w, const bf16_t* __restrict__ x,
                              float* __restrict__ y, index_t n, index_t k) {
    const index_t row = (index_t)blockIdx.x * GEMV_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= n) return;  // whole warps
    const uint4* w8 = reinterpret_cast<const uint4*>(w + row * k);
    const uint4* x8 = reinterpret_cast<const uint4*>(x);
    const index_t chunks = k / 8;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    index_t i = lane;
    for (; i + 96 < chunks; i += 128) {
        uint4 a[4], b[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) a[u] = __ldcs(w8 + i + 32 * u);
#pragma unroll
        for (int u = 0; u < 4; ++u) b[u] = x8[i + 32 * u];
#pragma unroll
        for (int u = 0; u < 4; ++u) acc[u] = dot_bf16x8(a[u], b[u], acc[u]);
    }
    for (; i < chunks; i += 32) acc[0] = dot_bf16x8(__ldcs(w8 + i), x8[i], acc[0]);
    const float sum = warp_sum((acc[0] + acc[1]) + (acc[2] + acc[3]));
    if (lane == 0) y[row] = sum;
}

// ---- NVFP4 ----------------------------------------------------------------------------------

// One load of packed codes: WORDS 32-bit words, 8 codes each (WORDS = 4: 16 bytes, two
// blocks; WORDS = 2: 8 bytes, one block), and its WORDS / 2 scale bytes.
template <int WORDS> struct Chunk {
    unsigned w[WORDS];
    unsigned scales;  // the scale bytes, first block in the low byte
};

template <int WORDS>
__device__ __forceinline__ Chunk<WORDS> load_chunk(const unsigned char* packed_row,
                                                   const unsigned char* scale_row, index_t c) {
    Chunk<WORDS> ch;
    if constexpr (WORDS == 4) {
        const uint4 v = __ldcs(reinterpret_cast<const uint4*>(packed_row) + c);
        ch.w[0] = v.x, ch.w[1] = v.y, ch.w[2] = v.z, ch.w[3] = v.w;
        ch.scales = __ldcs(reinterpret_cast<const unsigned short*>(scale_row) + c);
    } else {
        const uint2 v = __ldcs(reinterpret_cast<const uint2*>(packed_row) + c);
        ch.w[0] = v.x, ch.w[1] = v.y;
        ch.scales = __ldcs(scale_row + c);
    }
    return ch;
}

// Adds codes J and J + 4 of a word, decoded together, times their x to `s`.
template <int J>
__device__ __forceinline__ float dot_code_pair(unsigned w, const float (&xf)[8], float s) {
    const float2 f = f16x2_to_f32x2(e2m1_pair_f16x2<J>(w));
    return fmaf(f.y, xf[J + 4], fmaf(f.x, xf[J], s));
}

// Adds one word's 8 codes times x (8 f32) to `s`.
__device__ __forceinline__ float dot_word(unsigned w, const float (&xf)[8], float s) {
    s = dot_code_pair<0>(w, xf, s);
    s = dot_code_pair<1>(w, xf, s);
    s = dot_code_pair<2>(w, xf, s);
    return dot_code_pair<3>(w, xf, s);
}

// Adds one chunk of ROWS rows (their codes and scales) times x to the rows' accumulators.
// Each block of 16 is summed in f32 (a code times a bf16 is exact), then scaled once:
// acc += sum * scale. The codes were decoded as value * 2^-14 (nvfp4_format.cuh) and the
// scale is not multiplied back here: every accumulator is the exact 2^-14 multiple of what
// it would be with the factor applied per block (scaling by a power of two commutes with
// f32 rounding outside the subnormal range), and the caller multiplies the final sum by 2^14.
// x (WORDS 16-byte loads of 8 bf16, from L1: every row reads the same 16 KiB) is loaded
// here, where it is used, and turned into f32 once for all ROWS rows: it does not hold
// registers across the loads of W, which are the ones whose latency matters.
// quote: add_chunk
template <int ROWS, int WORDS>
__device__ __forceinline__ void add_chunk(const Chunk<WORDS> (&ch)[ROWS], const uint4* __restrict__ x8,
                                          index_t c, float (&acc)[ROWS]) {
    float2 scale[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) scale[r] = e4m3x2_to_f32x2(ch[r].scales);
#pragma unroll
    for (int b = 0; b < WORDS / 2; ++b) {
        float s[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) s[r] = 0.0f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float xf[8];
            bf16x8_to_f32(x8[c * WORDS + 2 * b + h], xf);  // once for all ROWS rows
#pragma unroll
            for (int r = 0; r < ROWS; ++r) s[r] = dot_word(ch[r].w[2 * b + h], xf, s[r]);
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[r] = fmaf(s[r], b == 0 ? scale[r].x : scale[r].y, acc[r]);
    }
}
// end quote: add_chunk

// grid(ceil(n / (8 ROWS))), block(256): warp w of block b computes rows ROWS (8b + w) ..
// + ROWS; lane l takes chunks l, l + 32, ... of those rows (consecutive lanes, consecutive
// 16 or 8 bytes of a row). The main loop loads UNROLL chunks of every row, with no branch
// between the loads, before it uses the first; the tail takes the last 0..UNROLL-1 one by
// one. y = (the warp's sum of acc) * 2^14 * tensor_scale.
template <int ROWS, int WORDS, int UNROLL>
__device__ __forceinline__ void gemv_nvfp4(const unsigned char* __restrict__ packed,
                                           const unsigned char* __restrict__ scales,
                                           const bf16_t* __restrict__ x,
                                           const float* __restrict__ tensor_scale,
                                           float* __restrict__ y, index_t n, index_t k) {
    const index_t row0 = ((index_t)blockIdx.x * GEMV_WARPS + threadIdx.x / 32) * ROWS;
    const int lane = threadIdx.x % 32;
    if (row0 >= n) return;  // whole warps
    const unsigned char* packed_row[ROWS];
    const unsigned char* scale_row[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        // Rows past the end read the last row again; their sums are never stored.
        const index_t row = min(row0 + r, n - 1);
        packed_row[r] = packed + row * (k / 2);
        scale_row[r] = scales + row * (k / 16);
    }
    const uint4* x8 = reinterpret_cast<const uint4*>(x);
    const index_t chunks = k / (8 * WORDS);
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;

    index_t c = lane;
    for (; c + 32 * (UNROLL - 1) < chunks; c += 32 * UNROLL) {
        Chunk<WORDS> ch[UNROLL][ROWS];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
#pragma unroll
            for (int r = 0; r < ROWS; ++r) ch[u][r] = load_chunk<WORDS>(packed_row[r], scale_row[r], c + 32 * u);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) add_chunk<ROWS, WORDS>(ch[u], x8, c + 32 * u, acc);
    }
    for (; c < chunks; c += 32) {
        Chunk<WORDS> ch[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) ch[r] = load_chunk<WORDS>(packed_row[r], scale_row[r], c);
        add_chunk<ROWS, WORDS>(ch, x8, c, acc);
    }
    const float ts = *tensor_scale;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const float sum = warp_sum(acc[r]);
        // sum * 2^14 is exact (the factor the decode left out), then one rounding for ts.
        if (lane == 0 && row0 + r < n) y[row0 + r] = (sum * 16384.0f) * ts;
    }
}

#define GEMV_NVFP4(NAME, ROWS, WORDS, UNROLL, MIN_BLOCKS)                                            \
    KERNEL void __launch_bounds__(GEMV_THREADS, MIN_BLOCKS) NAME(const unsigned char* __restrict__ packed, const unsigned char* __restrict__ scales, \
                     const bf16_t* __restrict__ x, const float* __restrict__ tensor_scale,          \
                     float* __restrict__ y, index_t n, index_t k) {                                 \
        gemv_nvfp4<ROWS, WORDS, UNROLL>(packed, scales, x, tensor_scale, y, n, k);                   \
    }
// quote: gemv_versions
// GEMV_NVFP4(name, rows per warp, 32-bit words per load, chunks in flight, MIN_BLOCKS): _u4
// loads 16-byte chunks (two blocks); _u2 8-byte chunks (one block), the path for K not a
// multiple of 32. MIN_BLOCKS caps the registers (65536 / (256 MIN_BLOCKS)) so that the
// occupancy the decode needs to hide its latency is there; each choice was checked for zero
// spills.
GEMV_NVFP4(gemv_nvfp4_warp_u4, 1, 4, 2, 4)   // 64 registers: 4 blocks (50%)
GEMV_NVFP4(gemv_nvfp4_warp_u2, 1, 2, 4, 4)
GEMV_NVFP4(gemv_nvfp4_rows2_u4, 2, 4, 2, 4)  // 64 registers: 4 blocks (50%)
GEMV_NVFP4(gemv_nvfp4_rows2_u2, 2, 2, 4, 4)
GEMV_NVFP4(gemv_nvfp4_rows4_u4, 4, 4, 2, 3)  // 80 registers: 3 blocks (37.5%); at 64 it spills
GEMV_NVFP4(gemv_nvfp4_rows4_u2, 4, 2, 2, 3)
// end quote: gemv_versions

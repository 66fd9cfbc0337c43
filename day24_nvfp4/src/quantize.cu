// day24: bf16 -> NVFP4 and back. The format (nvfp4_format.cuh, in front of this file):
// e2m1 codes two per byte, an e4m3 scale per 16 values along a row, one f32 tensor scale.
//
//   amax_finite_bf16      pass 1: the largest finite |x| of the tensor (atomicMax on the
//                         bits: max is order-free, so the result is the same every run)
//   quantize_nvfp4_bf16   pass 2: a thread per block of 16 values: its scale, its 16 codes
//   dequantize_nvfp4_bf16 a thread per block of 16: (code * scale) * tensor_scale -> bf16
//
// The arithmetic is the CPU reference's, step for step in f32 (IEEE division, no fast math),
// so the bytes are compared exactly. A block with NaN or infinity gets the e4m3 NaN as its
// scale and code 0 everywhere (the format has no infinity; see the reference's docs).
//
// Run: cargo run --release -p day24 -- --op quantize,dequantize
#include "mma.cuh"
#include "reduce.cuh"

// grid(waves), block(256): grid-stride over 8-value chunks (16-byte loads); each warp's
// largest finite |x| goes to *amax_bits with one atomicMax (non-negative floats order like
// their bits). *amax_bits must be 0 before the launch (the launcher clears it).
KERNEL void amax_finite_bf16(const bf16_t* __restrict__ x, unsigned* __restrict__ amax_bits,
                             index_t chunks) {
    const uint4* x8 = reinterpret_cast<const uint4*>(x);
    unsigned best = 0;
    for (index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x; i < chunks;
         i += (index_t)gridDim.x * blockDim.x) {
        const uint4 v = x8[i];
        const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const unsigned bits = (words[j] >> (16 * h)) & 0x7FFF;  // |x| as bf16 bits
                if (!bf16_bits_non_finite(bits)) best = max(best, bits);
            }
        }
    }
    // bf16 magnitude bits order like their values; as f32 bits they are << 16.
    for (int offset = 16; offset > 0; offset >>= 1) best = max(best, __shfl_xor_sync(FULL_WARP, best, offset));
    if ((threadIdx.x & 31) == 0 && best != 0) atomicMax(amax_bits, best << 16);
}

// v / d rounded to nearest even, as __fdiv_rn gives it, from r = RN(1 / d): q0 = RN(v r) is
// within one ulp of v / d, the residual v - q0 d is exact (one FMA), and RN(q0 + residual r)
// is then the correctly rounded quotient (Markstein's theorem; see e.g. Muller et al.,
// Handbook of Floating-Point Arithmetic, on division by FMA). The theorem needs no underflow:
// with d >= 2^-100 (the caller's condition) and |v / d| >= 1/8 every intermediate is normal,
// and a quotient under 1/8 encodes to magnitude 0 either way, its sign taken from v as the
// IEEE quotient's would be (the residual step can turn -0 into +0). Checked on the CPU against
// IEEE division on 2e8 random and threshold-tie cases before it went in.
// quote: quotient_rn
__device__ __forceinline__ float quotient_rn(float v, float d, float r) {
    const float q0 = __fmul_rn(v, r);
    const float residual = __fmaf_rn(-q0, d, v);
    return copysignf(__fmaf_rn(residual, r, q0), v);
}
// end quote: quotient_rn

// grid(ceil(blocks / 256)), block(256): thread t quantizes block t (16 values: 32 bytes in,
// 8 bytes of codes and 1 scale byte out). Thread 0 also writes the tensor scale.
KERNEL void quantize_nvfp4_bf16(const bf16_t* __restrict__ x, const unsigned* __restrict__ amax_bits,
                                unsigned char* __restrict__ packed, unsigned char* __restrict__ scales,
                                float* __restrict__ tensor_scale, index_t blocks) {
    const index_t b = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    const float ts = tensor_scale_of(*amax_bits);
    if (b == 0) *tensor_scale = ts;
    if (b >= blocks) return;
    const uint4* src = reinterpret_cast<const uint4*>(x) + 2 * b;
    const uint4 lo = __ldcs(src), hi = __ldcs(src + 1);
    const unsigned words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    float v[16];
    bool non_finite = false;
    float block_amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const unsigned bits = (words[i / 2] >> (16 * (i % 2))) & 0xFFFF;
        non_finite |= bf16_bits_non_finite(bits);
        v[i] = __uint_as_float(bits << 16);
        block_amax = fmaxf(block_amax, fabsf(v[i]));
    }
    // quote: quantize_block
    unsigned scale;
    uint2 codes = make_uint2(0, 0);
    if (non_finite) {
        scale = 0x7F;  // e4m3 NaN: the block reads back as NaN
    } else {
        scale = e4m3_encode(__fdiv_rn(block_amax, 6.0f * ts));
        const float denominator = e4m3_value(scale) * ts;
        if (denominator >= 0x1p-100f) {
            // The 16 quotients share their divisor: one correctly rounded reciprocal, then
            // three instructions per value instead of a full IEEE division (~8).
            const float r = __frcp_rn(denominator);
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                const unsigned c = e2m1_encode(quotient_rn(v[i], denominator, r));
                if (i < 8) codes.x |= c << (4 * i);
                else codes.y |= c << (4 * (i - 8));
            }
        } else if (denominator != 0.0f) {  // a zero block (or one below e4m3's range) stays 0
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                const unsigned c = e2m1_encode(__fdiv_rn(v[i], denominator));
                if (i < 8) codes.x |= c << (4 * i);
                else codes.y |= c << (4 * (i - 8));
            }
        }
    }
    reinterpret_cast<uint2*>(packed)[b] = codes;
    scales[b] = (unsigned char)scale;
    // end quote: quantize_block
}

// grid(ceil(blocks / 256)), block(256): thread t dequantizes block t: 8 bytes of codes and a
// scale byte in, 16 bf16 (two 16-byte stores) out. code * scale is exact (at most 6
// significant bits); the product with the tensor scale rounds in f32, then to bf16.
KERNEL void dequantize_nvfp4_bf16(const unsigned char* __restrict__ packed,
                                  const unsigned char* __restrict__ scales,
                                  const float* __restrict__ tensor_scale, bf16_t* __restrict__ y,
                                  index_t blocks) {
    const index_t b = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= blocks) return;
    const uint2 codes = __ldcs(reinterpret_cast<const uint2*>(packed) + b);
    const float scale = e4m3_value(scales[b]);
    const float ts = *tensor_scale;
    unsigned out[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const unsigned word = i < 4 ? codes.x : codes.y;
        const int pos = 2 * (i % 4);
        const float a = (e2m1_value(word >> (4 * pos)) * scale) * ts;
        const float c = (e2m1_value(word >> (4 * pos + 4)) * scale) * ts;
        out[i] = pack2<bf16_t>(a, c);
    }
    uint4* dst = reinterpret_cast<uint4*>(y) + 2 * b;
    __stcs(dst, make_uint4(out[0], out[1], out[2], out[3]));
    __stcs(dst + 1, make_uint4(out[4], out[5], out[6], out[7]));
}

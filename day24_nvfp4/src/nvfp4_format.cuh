// The NVFP4 format on the device: decoding e2m1 codes and e4m3 scales, encoding both. Every
// kernel file of day 24 starts with this text (lib.rs puts it in front of each .cu), and the
// CPU reference (src/reference.rs) does the same steps in the same f32 order.
//
// Layout of a row of K values (K a multiple of 16):
//   packed  K / 2 bytes, byte i = code[2i] | code[2i + 1] << 4 (even index in the low nibble),
//           so a little-endian 32-bit word holds codes 0..7 of its 8 values in nibbles 0..7;
//   scales  K / 16 e4m3 bytes, one per 16 consecutive values;
//   one f32 tensor scale for the whole matrix.
#include "common.cuh"
#include "dtype.cuh"

// ---- e2m1 -> f16 bits, two codes per instruction group -------------------------------------
// An e2m1 magnitude `e e m` (exponent bias 1) placed in f16 bits 11..9 is a valid f16 whose
// exponent field is `e` and whose top mantissa bit is `m`: its value is the e2m1 value times
// 2^-14 (exponent bias 15 instead of 1). That holds for e = 0 too, where f16's subnormals give
// 0 and 0.5 * 2^-14. The sign bit 3 of the code goes to f16 bit 15. So decoding is a shift and
// a mask, and the 2^-14 is folded into the block's scale.
//
// quote: e2m1_decode
// Pair J (0..3) of a word: codes J and J + 4, which sit 16 bits apart, so one shift moves both
// into the two halves of an f16x2 at once (code J in the low half).
template <int J> __device__ __forceinline__ unsigned e2m1_pair_f16x2(unsigned w) {
    unsigned magnitude;
    if constexpr (J < 3) {
        magnitude = w << (9 - 4 * J);
    } else {
        magnitude = w >> 3;
    }
    const unsigned sign = w << (12 - 4 * J);
    return (magnitude & 0x0E000E00u) | (sign & 0x80008000u);
}
// end quote: e2m1_decode

// The two halves of an f16x2 as f32 (exact).
__device__ __forceinline__ float2 f16x2_to_f32x2(unsigned v) {
    float lo, hi;
    asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
        : "=f"(lo), "=f"(hi)
        : "r"(v));
    return make_float2(lo, hi);
}

// The e2m1 value of one code (low 4 bits of `code`), exact.
__device__ __forceinline__ float e2m1_value(unsigned code) {
    return f16x2_to_f32x2(e2m1_pair_f16x2<0>(code & 0xF)).x * 16384.0f;
}

// ---- e4m3 -----------------------------------------------------------------------------------
// The same trick one size up: the 7 magnitude bits `eeee mmm` in f32 bits 26..20 make an f32
// equal to the e4m3 value times 2^-120 (subnormals included). 0x7f and 0xff are NaN.
__device__ __forceinline__ float e4m3_value(unsigned b) {
    const unsigned magnitude = b & 0x7F;
    float v = __uint_as_float(magnitude << 20) * 0x1p120f;
    if (magnitude == 0x7F) v = __int_as_float(0x7FFFFFFF);
    return (b & 0x80) ? -v : v;
}

// Two e4m3 bytes (bytes 0 and 1 of `two`) as f32 (exact; the e4m3 NaN stays NaN), by the
// hardware conversion of two e4m3 to an f16x2 (sm_89+; f16 holds every e4m3 value): three
// instructions for two scales, where e4m3_value takes about eight per scale. Byte 0 lands in
// .x. A high byte of 0 decodes to 0.
__device__ __forceinline__ float2 e4m3x2_to_f32x2(unsigned two) {
    unsigned h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"((unsigned short)two));
    return f16x2_to_f32x2(h);
}

// Round to nearest even e4m3, saturating at +-448 (sm_89+ has the conversion in hardware).
__device__ __forceinline__ unsigned e4m3_encode(float v) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(v));
    return r & 0xFF;  // the second source lands in the low byte
}

// Round to nearest even e2m1 code, saturating at +-6, sign kept (-0 is code 8). Each
// comparison passes one midpoint between neighbouring magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}:
// strict where the code below is even (a tie stays there), >= where the code above is even.
__device__ __forceinline__ unsigned e2m1_encode(float v) {
    const float a = fabsf(v);
    const unsigned magnitude = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) +
                               (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
    return magnitude | ((__float_as_uint(v) >> 28) & 8);
}

// A bf16 that is NaN or infinite: all exponent bits set.
__device__ __forceinline__ bool bf16_bits_non_finite(unsigned bits) { return (bits & 0x7F80) == 0x7F80; }

// tensor_scale = amax / (6 * 448), or 1 for a tensor with no finite non-zero value.
__device__ __forceinline__ float tensor_scale_of(unsigned amax_bits) {
    const float amax = __uint_as_float(amax_bits);
    return amax == 0.0f ? 1.0f : __fdiv_rn(amax, 2688.0f);
}

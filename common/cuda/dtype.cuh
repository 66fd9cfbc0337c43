// Storage types and their conversion to and from f32, where every kernel does its math.
//
// NVRTC 13.0 ships without cuda_fp16.h and cuda_bf16.h, so the half types are plain 16-bit
// containers here and the conversions are single PTX instructions: cvt for f16 (sm_53+) and
// for f32 -> bf16 (sm_80+); bf16 -> f32 is exact, a shift of the bits.
#pragma once
#include "common.cuh"

struct f16_t {
    unsigned short bits;
};
struct bf16_t {
    unsigned short bits;
};

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(f16_t v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
}
__device__ __forceinline__ float to_f32(bf16_t v) {
    return __uint_as_float(((unsigned)v.bits) << 16);
}

// Round to nearest even, as torch does.
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ f16_t from_f32<f16_t>(float v) {
    f16_t r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
    return r;
}
template <> __device__ __forceinline__ bf16_t from_f32<bf16_t>(float v) {
    bf16_t r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
    return r;
}

// 16 bytes of T, the widest load a thread can issue: 4 floats or 8 halves. Loads and stores
// go through uint4 so the compiler emits one 128-bit instruction (LDG.E.128 / STG.E.128).
template <typename T> struct __align__(16) Pack16 {
    static constexpr int N = 16 / sizeof(T);
    T v[N];
};

template <typename T> __device__ __forceinline__ Pack16<T> load16(const T* p) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    Pack16<T> pack;
    *reinterpret_cast<uint4*>(&pack) = raw;
    return pack;
}

template <typename T> __device__ __forceinline__ void store16(T* p, const Pack16<T>& pack) {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&pack);
}

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

// N consecutive elements of T: one 16-byte access when N = 16 / sizeof(T), one element when
// N = 1, so that a kernel templated on N serves rows that start 16-byte aligned and rows that
// do not (days 13 and 22). A load marked EVICT_FIRST (__ldcs) is of data read only once. A
// store also takes 8 bytes (four 16-bit elements from a float4's worth, day 20's dQ).
template <typename T, int N> struct alignas(N * sizeof(T)) Elems {
    T v[N];
};
constexpr bool EVICT_FIRST = true;
template <typename T, int N, bool EVICT = false>
__device__ __forceinline__ Elems<T, N> load_elems(const T* p) {
    Elems<T, N> r;
    if constexpr (N == 1) {
        r.v[0] = *p;
    } else {
        static_assert(N * sizeof(T) == 16, "N elements of 16 bytes, or one");
        uint4 raw;
        if constexpr (EVICT) raw = __ldcs(reinterpret_cast<const uint4*>(p));
        else raw = *reinterpret_cast<const uint4*>(p);
        r = *reinterpret_cast<const Elems<T, N>*>(&raw);
    }
    return r;
}
template <typename T, int N> __device__ __forceinline__ void store_elems(T* p, const Elems<T, N>& e) {
    if constexpr (N == 1) {
        *p = e.v[0];
    } else if constexpr (N * sizeof(T) == 8) {
        *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(&e);
    } else {
        static_assert(N * sizeof(T) == 16, "N elements of 16 or 8 bytes, or one");
        *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&e);
    }
}

// quote: load_row
// A row into registers, as the register kernels of days 5, 11 and 12 hold it: GROUP threads
// share the row and thread t fills v[EPT]. With VEC, 16-byte packs t, t + GROUP, ... (N
// elements each), all loads in flight together; without, columns t, t + GROUP, ... Both
// layouts are coalesced. A slot past the row's end holds `fill`, chosen so that no later loop
// tests the bound: -inf for a softmax (the max ignores it, the sum counts it as 0), 0 for a
// norm (it adds nothing to any sum).
template <typename T, int GROUP, int EPT, bool VEC>
__device__ __forceinline__ void load_row(const T* __restrict__ in, int t, index_t cols,
                                         float (&v)[EPT], float fill) {
    constexpr int N = 16 / sizeof(T);
    if constexpr (VEC) {
#pragma unroll
        for (int p = 0; p < EPT / N; ++p) {
            const index_t col = ((index_t)p * GROUP + t) * N;
            if (col < cols) {
                const Pack16<T> pack = load16(in + col);
#pragma unroll
                for (int k = 0; k < N; ++k) v[p * N + k] = to_f32(pack.v[k]);
            } else {
#pragma unroll
                for (int k = 0; k < N; ++k) v[p * N + k] = fill;
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < EPT; ++i) {
            const index_t col = (index_t)i * GROUP + t;
            v[i] = col < cols ? to_f32(in[col]) : fill;
        }
    }
}
// end quote: load_row

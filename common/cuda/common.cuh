// Device helpers shared by every day's kernels.
//
// NVRTC compiles without the host's headers (no <cmath>, <cfloat>, <cstdint>), so the few
// constants and types kernels need are defined here. The Rust side embeds this file in every
// binary (common/src/gpu/nvrtc.rs), so a day's kernels compile on a host that has only the driver
// and NVRTC.
#pragma once

// Element counts and offsets are 64-bit: 32768 x 65536 floats already overflow a 32-bit int.
typedef unsigned long long index_t;

// IEEE infinities by bit pattern (INFINITY is a host-header macro).
#define POS_INF __int_as_float(0x7f800000)
#define NEG_INF __int_as_float(0xff800000)

// Every kernel is extern "C" so the host finds it by its plain name.
#define KERNEL extern "C" __global__

// The kernels' exponentials are powers of 2 (one MUFU.EX2 instruction each): e^x is
// 2^(x log2 e), and a log-sum-exp kept in base 2 is turned back with ln 2.
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

// 2^x by PTX's ex2.approx (MUFU.EX2; within 2 ulp, the bound exp2f has); 2^-inf = 0. The .ftz
// form flushes a subnormal result to 0, which spares ptxas the rescaling it would otherwise
// wrap around the instruction: no kernel here keeps a value under 2^-126.
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

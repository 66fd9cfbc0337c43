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

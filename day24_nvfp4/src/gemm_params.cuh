// Generated from
//   - the kernel_params! declarations in day24_nvfp4/src/gemm.rs
// Edit those, then run `DAYS_OF_GPU_WRITE_GENERATED=1 cargo test` to write this file
// again. A test fails while this file and they differ.
#pragma once
#include "hopper.cuh"

// What one launch of `wgmma_rs` is told: C [m, n] f32 = A [m, k] bf16 times W^T, W [n, k]
// in NVFP4 (codes, an e4m3 scale per 16 and one tensor scale).
struct Nvfp4GemmParams {
    // A as the TMA reads it.
    TmaDescriptor map_a;
    // W's codes (two a byte, rows of k / 2 bytes), its scales (rows of k / 16) and its
    // tensor scale (one float).
    const unsigned char* packed;
    const unsigned char* scales;
    const float* tensor_scale;
    float* c;
    int m, n, k;
};

static_assert(sizeof(Nvfp4GemmParams) == 192 && alignof(Nvfp4GemmParams) == 64, "Nvfp4GemmParams: 192 bytes, aligned to 64, on the host");

// Generated from
//   - the kernel_params! declarations in day18_tensor_core_gemm/src/gemm.rs
// Edit those, then run `DAYS_OF_GPU_WRITE_GENERATED=1 cargo test` to write this file
// again. A test fails while this file and they differ.
#pragma once
#include "hopper.cuh"

// What one launch of an `mma.sync` version is told: C = alpha A B^T + beta C for one
// product, A [m, k], B [n, k] and C [m, n] rows `stride_a`, `stride_b`, `stride_c`
// elements apart.
template <typename T>
struct MmaParams {
    const T* a;
    const T* b;
    T* c;
    int m, n, k;
    unsigned long long stride_a, stride_b, stride_c;
    float alpha, beta;
};

static_assert(sizeof(MmaParams<bf16_t>) == 72 && alignof(MmaParams<bf16_t>) == 8, "MmaParams<bf16_t>: 72 bytes, aligned to 8, on the host");
static_assert(sizeof(MmaParams<f16_t>) == 72 && alignof(MmaParams<f16_t>) == 8, "MmaParams<f16_t>: 72 bytes, aligned to 8, on the host");

// What one launch of a `wgmma` version is told: `batch` products C = alpha op(A) op(B) +
// beta C, each m x n x k, the operands' layouts compiled into the kernel.
template <typename T>
struct WgmmaParams {
    // A, B and C as the TMA reads and writes them (the versions that store C from
    // registers are given A's map here, and leave it unread).
    TmaDescriptor map_a, map_b, map_c;
    // C for the stores from registers: product i at `c + i stride_c`.
    T* c;
    int m, n, k, batch;
    unsigned long long stride_c;
    float alpha, beta;
};

static_assert(sizeof(WgmmaParams<bf16_t>) == 448 && alignof(WgmmaParams<bf16_t>) == 64, "WgmmaParams<bf16_t>: 448 bytes, aligned to 64, on the host");
static_assert(sizeof(WgmmaParams<f16_t>) == 448 && alignof(WgmmaParams<f16_t>) == 64, "WgmmaParams<f16_t>: 448 bytes, aligned to 64, on the host");

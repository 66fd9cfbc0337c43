// Generated from the kernel_params! declarations in
// day18_tensor_core_gemm/src/gemm.rs: edit those, then run
// `DAYS_OF_GPU_WRITE_GENERATED=1 cargo test` to write this file again. A test fails
// while this file and the declarations differ.
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
    int m;
    int n;
    int k;
    unsigned long long stride_a;
    unsigned long long stride_b;
    unsigned long long stride_c;
    float alpha;
    float beta;
};

static_assert(sizeof(MmaParams<bf16_t>) == 72 && alignof(MmaParams<bf16_t>) == 8, "MmaParams<bf16_t>: 72 bytes, aligned to 8, on the host");
namespace host_layout_MmaParams {
using P = MmaParams<bf16_t>;
static_assert(sizeof(P::a) == 8 && alignof(decltype(P::a)) == 8, "MmaParams::a");
static_assert(sizeof(P::b) == 8 && alignof(decltype(P::b)) == 8, "MmaParams::b");
static_assert(sizeof(P::c) == 8 && alignof(decltype(P::c)) == 8, "MmaParams::c");
static_assert(sizeof(P::m) == 4 && alignof(decltype(P::m)) == 4, "MmaParams::m");
static_assert(sizeof(P::n) == 4 && alignof(decltype(P::n)) == 4, "MmaParams::n");
static_assert(sizeof(P::k) == 4 && alignof(decltype(P::k)) == 4, "MmaParams::k");
static_assert(sizeof(P::stride_a) == 8 && alignof(decltype(P::stride_a)) == 8, "MmaParams::stride_a");
static_assert(sizeof(P::stride_b) == 8 && alignof(decltype(P::stride_b)) == 8, "MmaParams::stride_b");
static_assert(sizeof(P::stride_c) == 8 && alignof(decltype(P::stride_c)) == 8, "MmaParams::stride_c");
static_assert(sizeof(P::alpha) == 4 && alignof(decltype(P::alpha)) == 4, "MmaParams::alpha");
static_assert(sizeof(P::beta) == 4 && alignof(decltype(P::beta)) == 4, "MmaParams::beta");
}
static_assert(sizeof(MmaParams<f16_t>) == 72 && alignof(MmaParams<f16_t>) == 8, "MmaParams<f16_t>: 72 bytes, aligned to 8, on the host");

// What one launch of a `wgmma` version is told: `batch` products C = alpha op(A) op(B) +
// beta C, each m x n x k, the operands' layouts compiled into the kernel.
template <typename T>
struct WgmmaParams {
    // A, B and C as the TMA reads and writes them (the versions that store C from
    // registers are given A's map here, and leave it unread).
    TmaDescriptor map_a;
    TmaDescriptor map_b;
    TmaDescriptor map_c;
    // C for the stores from registers: product i at `c + i stride_c`.
    T* c;
    int m;
    int n;
    int k;
    int batch;
    unsigned long long stride_c;
    float alpha;
    float beta;
};

static_assert(sizeof(WgmmaParams<bf16_t>) == 448 && alignof(WgmmaParams<bf16_t>) == 64, "WgmmaParams<bf16_t>: 448 bytes, aligned to 64, on the host");
namespace host_layout_WgmmaParams {
using P = WgmmaParams<bf16_t>;
static_assert(sizeof(P::map_a) == 128 && alignof(decltype(P::map_a)) == 64, "WgmmaParams::map_a");
static_assert(sizeof(P::map_b) == 128 && alignof(decltype(P::map_b)) == 64, "WgmmaParams::map_b");
static_assert(sizeof(P::map_c) == 128 && alignof(decltype(P::map_c)) == 64, "WgmmaParams::map_c");
static_assert(sizeof(P::c) == 8 && alignof(decltype(P::c)) == 8, "WgmmaParams::c");
static_assert(sizeof(P::m) == 4 && alignof(decltype(P::m)) == 4, "WgmmaParams::m");
static_assert(sizeof(P::n) == 4 && alignof(decltype(P::n)) == 4, "WgmmaParams::n");
static_assert(sizeof(P::k) == 4 && alignof(decltype(P::k)) == 4, "WgmmaParams::k");
static_assert(sizeof(P::batch) == 4 && alignof(decltype(P::batch)) == 4, "WgmmaParams::batch");
static_assert(sizeof(P::stride_c) == 8 && alignof(decltype(P::stride_c)) == 8, "WgmmaParams::stride_c");
static_assert(sizeof(P::alpha) == 4 && alignof(decltype(P::alpha)) == 4, "WgmmaParams::alpha");
static_assert(sizeof(P::beta) == 4 && alignof(decltype(P::beta)) == 4, "WgmmaParams::beta");
}
static_assert(sizeof(WgmmaParams<f16_t>) == 448 && alignof(WgmmaParams<f16_t>) == 64, "WgmmaParams<f16_t>: 448 bytes, aligned to 64, on the host");

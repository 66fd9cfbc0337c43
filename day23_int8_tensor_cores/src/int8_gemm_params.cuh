// Generated from the kernel_params! declarations in
// day23_int8_tensor_cores/src/gemm.rs: edit those, then run
// `DAYS_OF_GPU_WRITE_GENERATED=1 cargo test` to write this file again. A test fails
// while this file and the declarations differ.
#pragma once
#include "hopper.cuh"

// The epilogue's inputs, which every GEMM kernel takes after (m, n, k): C = scale_a
// scale_b (A B^T - za col_sums - zb row_sums + k za zb), the sums null where their
// correction is 0 everywhere.
struct Int8Epilogue {
    // A's row sums (m ints) and B's (n ints), or null.
    const int* row_sums;
    const int* col_sums;
    // B's zero point per column, step 1 (per channel) or 0 (one for all).
    const int* zb;
    int zb_step;
    // A's zero point.
    int za;
    // B's scale per column, step 1 or 0, and A's scale (bf16 out only).
    const float* scale_b;
    int scale_b_step;
    float scale_a;
};

static_assert(sizeof(Int8Epilogue) == 48 && alignof(Int8Epilogue) == 8, "Int8Epilogue: 48 bytes, aligned to 8, on the host");
namespace host_layout_Int8Epilogue {
using P = Int8Epilogue;
static_assert(sizeof(P::row_sums) == 8 && alignof(decltype(P::row_sums)) == 8, "Int8Epilogue::row_sums");
static_assert(sizeof(P::col_sums) == 8 && alignof(decltype(P::col_sums)) == 8, "Int8Epilogue::col_sums");
static_assert(sizeof(P::zb) == 8 && alignof(decltype(P::zb)) == 8, "Int8Epilogue::zb");
static_assert(sizeof(P::zb_step) == 4 && alignof(decltype(P::zb_step)) == 4, "Int8Epilogue::zb_step");
static_assert(sizeof(P::za) == 4 && alignof(decltype(P::za)) == 4, "Int8Epilogue::za");
static_assert(sizeof(P::scale_b) == 8 && alignof(decltype(P::scale_b)) == 8, "Int8Epilogue::scale_b");
static_assert(sizeof(P::scale_b_step) == 4 && alignof(decltype(P::scale_b_step)) == 4, "Int8Epilogue::scale_b_step");
static_assert(sizeof(P::scale_a) == 4 && alignof(decltype(P::scale_a)) == 4, "Int8Epilogue::scale_a");
}

// What one launch of the `mma.sync` version is told: A [m, k] and B [n, k] int8, C [m, n].
template <typename T>
struct Int8MmaParams {
    const signed char* a;
    const signed char* b;
    T* c;
    int m;
    int n;
    int k;
    Int8Epilogue epilogue;
};

static_assert(sizeof(Int8MmaParams<int>) == 88 && alignof(Int8MmaParams<int>) == 8, "Int8MmaParams<int>: 88 bytes, aligned to 8, on the host");
namespace host_layout_Int8MmaParams {
using P = Int8MmaParams<int>;
static_assert(sizeof(P::a) == 8 && alignof(decltype(P::a)) == 8, "Int8MmaParams::a");
static_assert(sizeof(P::b) == 8 && alignof(decltype(P::b)) == 8, "Int8MmaParams::b");
static_assert(sizeof(P::c) == 8 && alignof(decltype(P::c)) == 8, "Int8MmaParams::c");
static_assert(sizeof(P::m) == 4 && alignof(decltype(P::m)) == 4, "Int8MmaParams::m");
static_assert(sizeof(P::n) == 4 && alignof(decltype(P::n)) == 4, "Int8MmaParams::n");
static_assert(sizeof(P::k) == 4 && alignof(decltype(P::k)) == 4, "Int8MmaParams::k");
static_assert(sizeof(P::epilogue) == 48 && alignof(decltype(P::epilogue)) == 8, "Int8MmaParams::epilogue");
}
static_assert(sizeof(Int8MmaParams<bf16_t>) == 88 && alignof(Int8MmaParams<bf16_t>) == 8, "Int8MmaParams<bf16_t>: 88 bytes, aligned to 8, on the host");

// What one launch of a `wgmma` version is told: A [m, k] and B [n, k] as the TMA reads
// them, and C [m, n].
template <typename T>
struct Int8WgmmaParams {
    TmaDescriptor map_a;
    TmaDescriptor map_b;
    // C's map, for the TMA-store version (the other is given A's, and leaves it unread).
    TmaDescriptor map_c;
    // C, for the stores from registers (the TMA-store version writes only through map_c).
    T* c;
    int m;
    int n;
    int k;
    Int8Epilogue epilogue;
};

static_assert(sizeof(Int8WgmmaParams<int>) == 512 && alignof(Int8WgmmaParams<int>) == 64, "Int8WgmmaParams<int>: 512 bytes, aligned to 64, on the host");
namespace host_layout_Int8WgmmaParams {
using P = Int8WgmmaParams<int>;
static_assert(sizeof(P::map_a) == 128 && alignof(decltype(P::map_a)) == 64, "Int8WgmmaParams::map_a");
static_assert(sizeof(P::map_b) == 128 && alignof(decltype(P::map_b)) == 64, "Int8WgmmaParams::map_b");
static_assert(sizeof(P::map_c) == 128 && alignof(decltype(P::map_c)) == 64, "Int8WgmmaParams::map_c");
static_assert(sizeof(P::c) == 8 && alignof(decltype(P::c)) == 8, "Int8WgmmaParams::c");
static_assert(sizeof(P::m) == 4 && alignof(decltype(P::m)) == 4, "Int8WgmmaParams::m");
static_assert(sizeof(P::n) == 4 && alignof(decltype(P::n)) == 4, "Int8WgmmaParams::n");
static_assert(sizeof(P::k) == 4 && alignof(decltype(P::k)) == 4, "Int8WgmmaParams::k");
static_assert(sizeof(P::epilogue) == 48 && alignof(decltype(P::epilogue)) == 8, "Int8WgmmaParams::epilogue");
}
static_assert(sizeof(Int8WgmmaParams<bf16_t>) == 512 && alignof(Int8WgmmaParams<bf16_t>) == 64, "Int8WgmmaParams<bf16_t>: 512 bytes, aligned to 64, on the host");

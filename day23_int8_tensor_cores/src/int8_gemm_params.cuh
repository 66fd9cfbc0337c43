// Generated from
//   - the kernel_params! declarations in day23_int8_tensor_cores/src/gemm.rs
// Edit those, then run `DAYS_OF_GPU_WRITE_GENERATED=1 cargo test` to write this file
// again. A test fails while this file and they differ.
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

// What one launch of the `mma.sync` version is told: A [m, k] and B [n, k] int8, C [m, n].
template <typename T>
struct Int8MmaParams {
    const signed char* a;
    const signed char* b;
    T* c;
    int m, n, k;
    Int8Epilogue epilogue;
};

static_assert(sizeof(Int8MmaParams<int>) == 88 && alignof(Int8MmaParams<int>) == 8, "Int8MmaParams<int>: 88 bytes, aligned to 8, on the host");
static_assert(sizeof(Int8MmaParams<bf16_t>) == 88 && alignof(Int8MmaParams<bf16_t>) == 8, "Int8MmaParams<bf16_t>: 88 bytes, aligned to 8, on the host");

// What one launch of a `wgmma` version is told: A [m, k] and B [n, k] as the TMA reads
// them, and C [m, n].
template <typename T>
struct Int8WgmmaParams {
    TmaDescriptor map_a, map_b;
    // C's map, for the TMA-store version (the other is given A's, and leaves it unread).
    TmaDescriptor map_c;
    // C, for the stores from registers (the TMA-store version writes only through map_c).
    T* c;
    int m, n, k;
    Int8Epilogue epilogue;
};

static_assert(sizeof(Int8WgmmaParams<int>) == 512 && alignof(Int8WgmmaParams<int>) == 64, "Int8WgmmaParams<int>: 512 bytes, aligned to 64, on the host");
static_assert(sizeof(Int8WgmmaParams<bf16_t>) == 512 && alignof(Int8WgmmaParams<bf16_t>) == 64, "Int8WgmmaParams<bf16_t>: 512 bytes, aligned to 64, on the host");

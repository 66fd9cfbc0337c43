// Generated from
//   - the kernel_params! declarations in day19_fused_linear_cross_entropy/src/cross_entropy.rs
// Edit those, then run `DAYS_OF_GPU_WRITE_GENERATED=1 cargo test` to write this file
// again. A test fails while this file and they differ.
#pragma once
#include "hopper.cuh"

// What a row kernel of the loss is told: a chunk's rows of logits, their targets, and
// where the gradient, each row's loss and 1/N are.
struct CeRowParams {
    // The logits [rows, vocab]. The gradient may be the same memory (the fused loss
    // writes each row's gradient over its logits), so the kernels never take these two
    // as `__restrict__`.
    const bf16_t* logits;
    // The gradient [rows, vocab], congruent to the logits modulo 16 bytes.
    bf16_t* grad;
    // Each row's target class (or the ignore index).
    const int* targets;
    // Each row's loss, times 1/N.
    float* row_loss;
    // 1/N, N the rows whose target is not ignored (0 when all are).
    const float* inv_count;
    unsigned long long vocab;
    // The rows: the persistent kernels (cluster_stream) walk them; the others have one
    // row per block or cluster of the grid.
    unsigned long long rows;
    // Label smoothing.
    float eps;
    // The z-loss weight.
    float z_loss;
    int ignore_index;
};

static_assert(sizeof(CeRowParams) == 72 && alignof(CeRowParams) == 8, "CeRowParams: 72 bytes, aligned to 8, on the host");

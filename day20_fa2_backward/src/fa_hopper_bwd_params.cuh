// Generated from the kernel_params! declarations in
// day20_fa2_backward/src/fa_hopper_bwd.rs: edit those, then run
// `DAYS_OF_GPU_WRITE_GENERATED=1 cargo test` to write this file again. A test fails
// while this file and the declarations differ.
#pragma once
#include "hopper.cuh"

// What one launch of the backward's main kernel is told: one attention backward of the
// whole batch, dQ accumulated in f32 (the preprocess kernel zeroed it), dK and dV written.
template <typename T>
struct FaHopperBwdParams {
    // Q and dO [tokens, heads, d], K and V [tokens, kv_heads, d], in boxes of a step's
    // query rows (Q, dO) and a block's keys (K, V), as the TMA reads them.
    TmaDescriptor map_q;
    TmaDescriptor map_k;
    TmaDescriptor map_v;
    TmaDescriptor map_do;
    // L in log2 units and D = rowsum(dO * O), transposed: [heads x batch, pitch].
    TmaDescriptor map_lse2;
    TmaDescriptor map_delta;
    // The f32 dQ accumulator [tokens, heads, d], which the TMA adds tiles into.
    TmaDescriptor map_dq;
    // dK and dV [tokens, kv_heads, d].
    T* dk;
    T* dv;
    // One counter per (sequence, head, query tile), zero at launch, for the ordered mode.
    int* semaphores;
    // 1: dQ added in a fixed order (deterministic); 0: as the blocks come.
    int ordered;
    // The sequences' cumulative lengths: batch + 1 of each.
    const int* cu_q;
    const int* cu_k;
    int heads;
    int kv_heads;
    // The softmax scale (not times log2(e)).
    float scale;
    // 1: the bottom-right causal mask; 0: none.
    int causal;
    // Query tiles of the longest sequence.
    int q_tiles;
    // How many KV heads one section of the grid's renumbered blocks covers (>= 1).
    int head_section;
};

static_assert(sizeof(FaHopperBwdParams<bf16_t>) == 1024 && alignof(FaHopperBwdParams<bf16_t>) == 64, "FaHopperBwdParams<bf16_t>: 1024 bytes, aligned to 64, on the host");
static_assert(sizeof(FaHopperBwdParams<f16_t>) == 1024 && alignof(FaHopperBwdParams<f16_t>) == 64, "FaHopperBwdParams<f16_t>: 1024 bytes, aligned to 64, on the host");

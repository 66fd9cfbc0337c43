// Generated from the kernel_params! declarations in
// day10_fa2_forward/src/fa_hopper.rs: edit those, then run
// `DAYS_OF_GPU_WRITE_GENERATED=1 cargo test` to write this file again. A test fails
// while this file and the declarations differ.
#pragma once
#include "hopper.cuh"

// What one launch of fa_hopper is told: the whole batch of one attention forward.
template <typename T>
struct FaHopperParams {
    // Q [tokens, heads, d], K and V [tokens, kv_heads, d] as the TMA reads them, in boxes
    // of a block's query rows (Q) and a key tile's keys (K, V).
    TmaDescriptor map_q;
    TmaDescriptor map_k;
    TmaDescriptor map_v;
    // O [tokens, heads, d] and L [tokens, heads], natural log, -inf on a row with no key.
    T* o;
    float* lse;
    // The sequences' cumulative lengths: batch + 1 of each.
    const int* cu_q;
    const int* cu_k;
    int heads;
    int kv_heads;
    // The softmax scale times log2(e).
    float scale_log2;
    // 1: the bottom-right causal mask; 0: none.
    int causal;
    // Query tiles of the longest sequence, and work items (q_tiles x heads x batch).
    int q_tiles;
    int items;
    // [next ticket, producers done], 0 and 0 between launches.
    int* tickets;
};

static_assert(sizeof(FaHopperParams<bf16_t>) == 448 && alignof(FaHopperParams<bf16_t>) == 64, "FaHopperParams<bf16_t>: 448 bytes, aligned to 64, on the host");
static_assert(sizeof(FaHopperParams<f16_t>) == 448 && alignof(FaHopperParams<f16_t>) == 64, "FaHopperParams<f16_t>: 448 bytes, aligned to 64, on the host");

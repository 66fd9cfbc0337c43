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
namespace host_layout_FaHopperParams {
using P = FaHopperParams<bf16_t>;
static_assert(sizeof(P::map_q) == 128 && alignof(decltype(P::map_q)) == 64, "FaHopperParams::map_q");
static_assert(sizeof(P::map_k) == 128 && alignof(decltype(P::map_k)) == 64, "FaHopperParams::map_k");
static_assert(sizeof(P::map_v) == 128 && alignof(decltype(P::map_v)) == 64, "FaHopperParams::map_v");
static_assert(sizeof(P::o) == 8 && alignof(decltype(P::o)) == 8, "FaHopperParams::o");
static_assert(sizeof(P::lse) == 8 && alignof(decltype(P::lse)) == 8, "FaHopperParams::lse");
static_assert(sizeof(P::cu_q) == 8 && alignof(decltype(P::cu_q)) == 8, "FaHopperParams::cu_q");
static_assert(sizeof(P::cu_k) == 8 && alignof(decltype(P::cu_k)) == 8, "FaHopperParams::cu_k");
static_assert(sizeof(P::heads) == 4 && alignof(decltype(P::heads)) == 4, "FaHopperParams::heads");
static_assert(sizeof(P::kv_heads) == 4 && alignof(decltype(P::kv_heads)) == 4, "FaHopperParams::kv_heads");
static_assert(sizeof(P::scale_log2) == 4 && alignof(decltype(P::scale_log2)) == 4, "FaHopperParams::scale_log2");
static_assert(sizeof(P::causal) == 4 && alignof(decltype(P::causal)) == 4, "FaHopperParams::causal");
static_assert(sizeof(P::q_tiles) == 4 && alignof(decltype(P::q_tiles)) == 4, "FaHopperParams::q_tiles");
static_assert(sizeof(P::items) == 4 && alignof(decltype(P::items)) == 4, "FaHopperParams::items");
static_assert(sizeof(P::tickets) == 8 && alignof(decltype(P::tickets)) == 8, "FaHopperParams::tickets");
}
static_assert(sizeof(FaHopperParams<f16_t>) == 448 && alignof(FaHopperParams<f16_t>) == 64, "FaHopperParams<f16_t>: 448 bytes, aligned to 64, on the host");

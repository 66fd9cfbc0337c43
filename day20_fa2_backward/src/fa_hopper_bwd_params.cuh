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
namespace host_layout_FaHopperBwdParams {
using P = FaHopperBwdParams<bf16_t>;
static_assert(sizeof(P::map_q) == 128 && alignof(decltype(P::map_q)) == 64, "FaHopperBwdParams::map_q");
static_assert(sizeof(P::map_k) == 128 && alignof(decltype(P::map_k)) == 64, "FaHopperBwdParams::map_k");
static_assert(sizeof(P::map_v) == 128 && alignof(decltype(P::map_v)) == 64, "FaHopperBwdParams::map_v");
static_assert(sizeof(P::map_do) == 128 && alignof(decltype(P::map_do)) == 64, "FaHopperBwdParams::map_do");
static_assert(sizeof(P::map_lse2) == 128 && alignof(decltype(P::map_lse2)) == 64, "FaHopperBwdParams::map_lse2");
static_assert(sizeof(P::map_delta) == 128 && alignof(decltype(P::map_delta)) == 64, "FaHopperBwdParams::map_delta");
static_assert(sizeof(P::map_dq) == 128 && alignof(decltype(P::map_dq)) == 64, "FaHopperBwdParams::map_dq");
static_assert(sizeof(P::dk) == 8 && alignof(decltype(P::dk)) == 8, "FaHopperBwdParams::dk");
static_assert(sizeof(P::dv) == 8 && alignof(decltype(P::dv)) == 8, "FaHopperBwdParams::dv");
static_assert(sizeof(P::semaphores) == 8 && alignof(decltype(P::semaphores)) == 8, "FaHopperBwdParams::semaphores");
static_assert(sizeof(P::ordered) == 4 && alignof(decltype(P::ordered)) == 4, "FaHopperBwdParams::ordered");
static_assert(sizeof(P::cu_q) == 8 && alignof(decltype(P::cu_q)) == 8, "FaHopperBwdParams::cu_q");
static_assert(sizeof(P::cu_k) == 8 && alignof(decltype(P::cu_k)) == 8, "FaHopperBwdParams::cu_k");
static_assert(sizeof(P::heads) == 4 && alignof(decltype(P::heads)) == 4, "FaHopperBwdParams::heads");
static_assert(sizeof(P::kv_heads) == 4 && alignof(decltype(P::kv_heads)) == 4, "FaHopperBwdParams::kv_heads");
static_assert(sizeof(P::scale) == 4 && alignof(decltype(P::scale)) == 4, "FaHopperBwdParams::scale");
static_assert(sizeof(P::causal) == 4 && alignof(decltype(P::causal)) == 4, "FaHopperBwdParams::causal");
static_assert(sizeof(P::q_tiles) == 4 && alignof(decltype(P::q_tiles)) == 4, "FaHopperBwdParams::q_tiles");
static_assert(sizeof(P::head_section) == 4 && alignof(decltype(P::head_section)) == 4, "FaHopperBwdParams::head_section");
}
static_assert(sizeof(FaHopperBwdParams<f16_t>) == 1024 && alignof(FaHopperBwdParams<f16_t>) == 64, "FaHopperBwdParams<f16_t>: 1024 bytes, aligned to 64, on the host");

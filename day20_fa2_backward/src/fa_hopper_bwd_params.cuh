// Generated from
//   - the kernel_params! declarations in day20_fa2_backward/src/fa_hopper_bwd.rs
//   - the tile table (BACKWARD_TILES) in day20_fa2_backward/src/hopper_tile.rs
// Edit those, then run `DAYS_OF_GPU_WRITE_GENERATED=1 cargo test` to write this file
// again. A test fails while this file and they differ.
#pragma once
#include "hopper.cuh"

// What one launch of the backward's main kernel is told: one attention backward of the
// whole batch, dQ accumulated in f32 (the preprocess kernel zeroed it), dK and dV written.
template <typename T>
struct FaHopperBwdParams {
    // Q and dO [tokens, heads, d], K and V [tokens, kv_heads, d], in boxes of a step's
    // query rows (Q, dO) and a block's keys (K, V), as the TMA reads them.
    TmaDescriptor map_q, map_k, map_v, map_do;
    // L in log2 units and D = rowsum(dO * O), transposed: [heads x batch, pitch].
    TmaDescriptor map_lse2, map_delta;
    // The f32 dQ accumulator [tokens, heads, d], which the TMA adds tiles into.
    TmaDescriptor map_dq;
    // dK and dV as the TMA writes them, in boxes of one consumer's 64 keys: the keys of a
    // consumer whose 64 keys all lie inside their sequence.
    TmaDescriptor map_dk, map_dv;
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
    int heads, kv_heads;
    // The softmax scale (not times log2(e)).
    float scale;
    // 1: the bottom-right causal mask; 0: none.
    int causal;
    // Query tiles of the longest sequence.
    int q_tiles;
    // How many KV heads one section of the grid's renumbered blocks covers (>= 1).
    int head_section;
    // The tiles' grid (hopper_grid): key tiles of the longest sequence x kv_heads x batch.
    int key_tiles, batch;
    // The next tile to draw and the blocks done, 0 and 0 at launch (the last block sets
    // them back).
    int* tickets;
};

static_assert(sizeof(FaHopperBwdParams<bf16_t>) == 1280 && alignof(FaHopperBwdParams<bf16_t>) == 64, "FaHopperBwdParams<bf16_t>: 1280 bytes, aligned to 64, on the host");
static_assert(sizeof(FaHopperBwdParams<f16_t>) == 1280 && alignof(FaHopperBwdParams<f16_t>) == 64, "FaHopperBwdParams<f16_t>: 1280 bytes, aligned to 64, on the host");

// fa_hopper_bwd's shared memory per head dim D, one specialization per tile of day 20's
// BACKWARD_TILES: K and V, the Q/dO ring, dS^T (and P^T), the dQ tiles (unless dQ goes through
// the stage), the L/D ring, the barriers.
template <typename T, int KEY> struct BhShared;

template <typename T> struct BhShared<T, 64> {
    // K: [1][64-dim box][key][dim]
    alignas(1024) T k[1][1][128][64];
    // V, as K
    alignas(1024) T v[1][1][128][64];
    // Q: [stage][64-dim box][query][dim]
    alignas(1024) T q[2][1][128][64];
    // dO, as Q
    alignas(1024) T d_o[2][1][128][64];
    // dS^T: [buffer][64-query box][key][query], the A operand of dQ = dS K
    alignas(1024) T ds[2][2][128][64];
    // dQ: [consumer][32-column box][query][column], f32, read by the TMA's reduce-adds
    alignas(1024) float dq[2][2][64][32];
    // L in log2 units: [stage][query]
    alignas(128) float lse2[2][128];
    // D = rowsum(dO * O): [stage][query]
    alignas(128) float delta[2][128];
    // K and V have arrived
    unsigned long long kv_full[1];
    // Per stage: Q, dO, L and D have arrived
    unsigned long long q_full[2];
    // Per stage: every consumer warp is done with it
    unsigned long long q_empty[2];
    // Per consumer (dQ through the stage: per stage and consumer): its dQ is written
    unsigned long long dq_full[2];
    // Per consumer: the TMA has read its dQ tile
    unsigned long long dq_empty[2];
    // Persistent: every product of the tile is done with K and V
    unsigned long long kv_empty[1];
    // Persistent: the producer has written the next tile's number
    unsigned long long tile_full[1];
    // Persistent: every reader has read it
    unsigned long long tile_empty[1];
    // Persistent: the next tile's number, -1 when there is none (the producer draws them)
    int tile_slot[1];
    // Each member's byte offset from the struct's start.
    struct at {
        static constexpr unsigned k = 0;
        static constexpr unsigned v = 16384;
        static constexpr unsigned q = 32768;
        static constexpr unsigned d_o = 65536;
        static constexpr unsigned ds = 98304;
        static constexpr unsigned dq = 163840;
        static constexpr unsigned lse2 = 196608;
        static constexpr unsigned delta = 197632;
        static constexpr unsigned kv_full = 198656;
        static constexpr unsigned q_full = 198664;
        static constexpr unsigned q_empty = 198680;
        static constexpr unsigned dq_full = 198696;
        static constexpr unsigned dq_empty = 198712;
        static constexpr unsigned kv_empty = 198728;
        static constexpr unsigned tile_full = 198736;
        static constexpr unsigned tile_empty = 198744;
        static constexpr unsigned tile_slot = 198752;
    };
};
static_assert(sizeof(BhShared<bf16_t, 64>) == 199680 && alignof(BhShared<bf16_t, 64>) == 1024, "BhShared<bf16_t, 64>: 199680 bytes, aligned to 1024, on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::k) == 16384, "BhShared<bf16_t, 64>::k: 16384 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::v) == 16384, "BhShared<bf16_t, 64>::v: 16384 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::q) == 32768, "BhShared<bf16_t, 64>::q: 32768 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::d_o) == 32768, "BhShared<bf16_t, 64>::d_o: 32768 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::ds) == 65536, "BhShared<bf16_t, 64>::ds: 65536 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::dq) == 32768, "BhShared<bf16_t, 64>::dq: 32768 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::lse2) == 1024, "BhShared<bf16_t, 64>::lse2: 1024 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::delta) == 1024, "BhShared<bf16_t, 64>::delta: 1024 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::kv_full) == 8, "BhShared<bf16_t, 64>::kv_full: 8 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::q_full) == 16, "BhShared<bf16_t, 64>::q_full: 16 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::q_empty) == 16, "BhShared<bf16_t, 64>::q_empty: 16 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::dq_full) == 16, "BhShared<bf16_t, 64>::dq_full: 16 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::dq_empty) == 16, "BhShared<bf16_t, 64>::dq_empty: 16 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::kv_empty) == 8, "BhShared<bf16_t, 64>::kv_empty: 8 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::tile_full) == 8, "BhShared<bf16_t, 64>::tile_full: 8 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::tile_empty) == 8, "BhShared<bf16_t, 64>::tile_empty: 8 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 64>::tile_slot) == 4, "BhShared<bf16_t, 64>::tile_slot: 4 bytes on the host");
static_assert(alignof(int) == 4, "int: aligned to 4 on the host");
static_assert(alignof(unsigned long long) == 8, "unsigned long long: aligned to 8 on the host");

template <typename T> struct BhShared<T, 128> {
    // K: [1][64-dim box][key][dim]
    alignas(1024) T k[1][2][128][64];
    // V, as K
    alignas(1024) T v[1][2][128][64];
    // Q: [stage][64-dim box][query][dim]
    alignas(1024) T q[2][2][64][64];
    // dO, as Q
    alignas(1024) T d_o[2][2][64][64];
    // dS^T: [buffer][64-query box][key][query], the A operand of dQ = dS K
    alignas(1024) T ds[2][1][128][64];
    // dQ: [consumer][32-column box][query][column], f32, read by the TMA's reduce-adds
    alignas(1024) float dq[2][2][64][32];
    // L in log2 units: [stage][query]
    alignas(128) float lse2[2][64];
    // D = rowsum(dO * O): [stage][query]
    alignas(128) float delta[2][64];
    // K and V have arrived
    unsigned long long kv_full[1];
    // Per stage: Q, dO, L and D have arrived
    unsigned long long q_full[2];
    // Per stage: every consumer warp is done with it
    unsigned long long q_empty[2];
    // Per consumer (dQ through the stage: per stage and consumer): its dQ is written
    unsigned long long dq_full[2];
    // Per consumer: the TMA has read its dQ tile
    unsigned long long dq_empty[2];
    // Persistent: every product of the tile is done with K and V
    unsigned long long kv_empty[1];
    // Persistent: the producer has written the next tile's number
    unsigned long long tile_full[1];
    // Persistent: every reader has read it
    unsigned long long tile_empty[1];
    // Persistent: the next tile's number, -1 when there is none (the producer draws them)
    int tile_slot[1];
    // Each member's byte offset from the struct's start.
    struct at {
        static constexpr unsigned k = 0;
        static constexpr unsigned v = 32768;
        static constexpr unsigned q = 65536;
        static constexpr unsigned d_o = 98304;
        static constexpr unsigned ds = 131072;
        static constexpr unsigned dq = 163840;
        static constexpr unsigned lse2 = 196608;
        static constexpr unsigned delta = 197120;
        static constexpr unsigned kv_full = 197632;
        static constexpr unsigned q_full = 197640;
        static constexpr unsigned q_empty = 197656;
        static constexpr unsigned dq_full = 197672;
        static constexpr unsigned dq_empty = 197688;
        static constexpr unsigned kv_empty = 197704;
        static constexpr unsigned tile_full = 197712;
        static constexpr unsigned tile_empty = 197720;
        static constexpr unsigned tile_slot = 197728;
    };
};
static_assert(sizeof(BhShared<bf16_t, 128>) == 198656 && alignof(BhShared<bf16_t, 128>) == 1024, "BhShared<bf16_t, 128>: 198656 bytes, aligned to 1024, on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::k) == 32768, "BhShared<bf16_t, 128>::k: 32768 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::v) == 32768, "BhShared<bf16_t, 128>::v: 32768 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::q) == 32768, "BhShared<bf16_t, 128>::q: 32768 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::d_o) == 32768, "BhShared<bf16_t, 128>::d_o: 32768 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::ds) == 32768, "BhShared<bf16_t, 128>::ds: 32768 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::dq) == 32768, "BhShared<bf16_t, 128>::dq: 32768 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::lse2) == 512, "BhShared<bf16_t, 128>::lse2: 512 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::delta) == 512, "BhShared<bf16_t, 128>::delta: 512 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::kv_full) == 8, "BhShared<bf16_t, 128>::kv_full: 8 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::q_full) == 16, "BhShared<bf16_t, 128>::q_full: 16 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::q_empty) == 16, "BhShared<bf16_t, 128>::q_empty: 16 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::dq_full) == 16, "BhShared<bf16_t, 128>::dq_full: 16 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::dq_empty) == 16, "BhShared<bf16_t, 128>::dq_empty: 16 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::kv_empty) == 8, "BhShared<bf16_t, 128>::kv_empty: 8 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::tile_full) == 8, "BhShared<bf16_t, 128>::tile_full: 8 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::tile_empty) == 8, "BhShared<bf16_t, 128>::tile_empty: 8 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 128>::tile_slot) == 4, "BhShared<bf16_t, 128>::tile_slot: 4 bytes on the host");
static_assert(alignof(int) == 4, "int: aligned to 4 on the host");
static_assert(alignof(unsigned long long) == 8, "unsigned long long: aligned to 8 on the host");

template <typename T> struct BhShared<T, 256> {
    // K: [1][64-dim box][key][dim]
    alignas(1024) T k[1][4][64][64];
    // V, as K
    alignas(1024) T v[1][4][64][64];
    // Q: [stage][64-dim box][query][dim]; once the step's products are done, dQ too
    alignas(1024) T q[2][4][64][64];
    // dO, as Q
    alignas(1024) T d_o[2][4][64][64];
    // dS^T: [buffer][64-query box][key][query], the A operand of dQ = dS K
    alignas(1024) T ds[2][1][64][64];
    // P^T, as dS^T (split head dim only: the A operand of dV += P^T dO)
    alignas(1024) T pt[2][1][64][64];
    // L in log2 units: [stage][query]
    alignas(128) float lse2[2][64];
    // D = rowsum(dO * O): [stage][query]
    alignas(128) float delta[2][64];
    // K and V have arrived
    unsigned long long kv_full[1];
    // Per stage: Q, dO, L and D have arrived
    unsigned long long q_full[2];
    // Per stage: the dQ writer's TMA has read the step's dQ
    unsigned long long q_empty[2];
    // Per consumer (dQ through the stage: per stage and consumer): its dQ is written
    unsigned long long dq_full[4];
    // Each member's byte offset from the struct's start.
    struct at {
        static constexpr unsigned k = 0;
        static constexpr unsigned v = 32768;
        static constexpr unsigned q = 65536;
        static constexpr unsigned d_o = 131072;
        static constexpr unsigned ds = 196608;
        static constexpr unsigned pt = 212992;
        static constexpr unsigned lse2 = 229376;
        static constexpr unsigned delta = 229888;
        static constexpr unsigned kv_full = 230400;
        static constexpr unsigned q_full = 230408;
        static constexpr unsigned q_empty = 230424;
        static constexpr unsigned dq_full = 230440;
    };
};
static_assert(sizeof(BhShared<bf16_t, 256>) == 231424 && alignof(BhShared<bf16_t, 256>) == 1024, "BhShared<bf16_t, 256>: 231424 bytes, aligned to 1024, on the host");
static_assert(sizeof(BhShared<bf16_t, 256>::k) == 32768, "BhShared<bf16_t, 256>::k: 32768 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 256>::v) == 32768, "BhShared<bf16_t, 256>::v: 32768 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 256>::q) == 65536, "BhShared<bf16_t, 256>::q: 65536 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 256>::d_o) == 65536, "BhShared<bf16_t, 256>::d_o: 65536 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 256>::ds) == 16384, "BhShared<bf16_t, 256>::ds: 16384 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 256>::pt) == 16384, "BhShared<bf16_t, 256>::pt: 16384 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 256>::lse2) == 512, "BhShared<bf16_t, 256>::lse2: 512 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 256>::delta) == 512, "BhShared<bf16_t, 256>::delta: 512 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 256>::kv_full) == 8, "BhShared<bf16_t, 256>::kv_full: 8 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 256>::q_full) == 16, "BhShared<bf16_t, 256>::q_full: 16 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 256>::q_empty) == 16, "BhShared<bf16_t, 256>::q_empty: 16 bytes on the host");
static_assert(sizeof(BhShared<bf16_t, 256>::dq_full) == 32, "BhShared<bf16_t, 256>::dq_full: 32 bytes on the host");
static_assert(alignof(unsigned long long) == 8, "unsigned long long: aligned to 8 on the host");

// Generated from
//   - the kernel_params! declarations in day10_fa2_forward/src/fa_hopper.rs
//   - the tile table (HOPPER_TILES) in day10_fa2_forward/src/hopper_tile.rs
// Edit those, then run `DAYS_OF_GPU_WRITE_GENERATED=1 cargo test` to write this file
// again. A test fails while this file and they differ.
#pragma once
#include "hopper.cuh"

// What one launch of fa_hopper is told: the whole batch of one attention forward.
template <typename T>
struct FaHopperParams {
    // Q [tokens, heads, d], K and V [tokens, kv_heads, d] as the TMA reads them, in boxes
    // of a block's query rows (Q) and a key tile's keys (K, V).
    TmaDescriptor map_q, map_k, map_v;
    // O as the TMA writes it, in boxes of one consumer's 64 query rows: the rows of a
    // consumer whose 64 rows all lie inside their sequence (with two Q stages).
    TmaDescriptor map_o;
    // O [tokens, heads, d] and L [tokens, heads], natural log, -inf on a row with no key.
    T* o;
    float* lse;
    // The sequences' cumulative lengths: batch + 1 of each.
    const int* cu_q;
    const int* cu_k;
    int heads, kv_heads;
    // The softmax scale times log2(e).
    float scale_log2;
    // 1: the bottom-right causal mask; 0: none.
    int causal;
    // Query tiles of the longest sequence, and work items (q_tiles x heads x batch).
    int q_tiles, items;
    // [next ticket, producers done], 0 and 0 between launches.
    int* tickets;
};

static_assert(sizeof(FaHopperParams<bf16_t>) == 576 && alignof(FaHopperParams<bf16_t>) == 64, "FaHopperParams<bf16_t>: 576 bytes, aligned to 64, on the host");
static_assert(sizeof(FaHopperParams<f16_t>) == 576 && alignof(FaHopperParams<f16_t>) == 64, "FaHopperParams<f16_t>: 576 bytes, aligned to 64, on the host");

#include "attention.cuh"  // ItemSlot

// fa_hopper's shared memory per tile (head dim D, NC consumers), one specialization per
// tile of day 10's HOPPER_TILES: the Q ring, the K and V rings, their barriers and the item slots.
template <typename T, int D, int NC> struct FhShared;

template <typename T> struct FhShared<T, 64, 3> {
    // Q: [Q stage][64-dim box][query row][dim]
    alignas(1024) T q[2][1][192][64];
    // K: [stage][64-dim box][key][dim]
    alignas(1024) T k[2][1][128][64];
    // V, as K
    alignas(1024) T v[2][1][128][64];
    // Per Q stage: the item's Q has arrived (the producer's arrival + the TMA's bytes)
    unsigned long long q_full[2];
    // Per Q stage: every consumer warp is done with its Q and its slot
    unsigned long long q_empty[2];
    // Per stage: K has arrived
    unsigned long long k_full[2];
    // Per stage: V has arrived
    unsigned long long v_full[2];
    // Per stage: every consumer's S products read K
    unsigned long long k_empty[2];
    // Per stage: every consumer's P V products read V
    unsigned long long v_empty[2];
    // Per Q stage: the item the producer hands the consumers (attention.cuh)
    alignas(16) ItemSlot slots[2];
    // Each member's byte offset from the struct's start.
    struct at {
        static constexpr unsigned q = 0;
        static constexpr unsigned k = 49152;
        static constexpr unsigned v = 81920;
        static constexpr unsigned q_full = 114688;
        static constexpr unsigned q_empty = 114704;
        static constexpr unsigned k_full = 114720;
        static constexpr unsigned v_full = 114736;
        static constexpr unsigned k_empty = 114752;
        static constexpr unsigned v_empty = 114768;
        static constexpr unsigned slots = 114784;
    };
};
static_assert(sizeof(FhShared<bf16_t, 64, 3>) == 115712 && alignof(FhShared<bf16_t, 64, 3>) == 1024, "FhShared<bf16_t, 64, 3>: 115712 bytes, aligned to 1024, on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 3>::q) == 49152, "FhShared<bf16_t, 64, 3>::q: 49152 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 3>::k) == 32768, "FhShared<bf16_t, 64, 3>::k: 32768 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 3>::v) == 32768, "FhShared<bf16_t, 64, 3>::v: 32768 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 3>::q_full) == 16, "FhShared<bf16_t, 64, 3>::q_full: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 3>::q_empty) == 16, "FhShared<bf16_t, 64, 3>::q_empty: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 3>::k_full) == 16, "FhShared<bf16_t, 64, 3>::k_full: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 3>::v_full) == 16, "FhShared<bf16_t, 64, 3>::v_full: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 3>::k_empty) == 16, "FhShared<bf16_t, 64, 3>::k_empty: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 3>::v_empty) == 16, "FhShared<bf16_t, 64, 3>::v_empty: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 3>::slots) == 64, "FhShared<bf16_t, 64, 3>::slots: 64 bytes on the host");
static_assert(alignof(unsigned long long) == 8, "unsigned long long: aligned to 8 on the host");

template <typename T> struct FhShared<T, 64, 2> {
    // Q: [Q stage][64-dim box][query row][dim]
    alignas(1024) T q[2][1][128][64];
    // K: [stage][64-dim box][key][dim]
    alignas(1024) T k[2][1][128][64];
    // V, as K
    alignas(1024) T v[2][1][128][64];
    // Per Q stage: the item's Q has arrived (the producer's arrival + the TMA's bytes)
    unsigned long long q_full[2];
    // Per Q stage: every consumer warp is done with its Q and its slot
    unsigned long long q_empty[2];
    // Per stage: K has arrived
    unsigned long long k_full[2];
    // Per stage: V has arrived
    unsigned long long v_full[2];
    // Per stage: every consumer's S products read K
    unsigned long long k_empty[2];
    // Per stage: every consumer's P V products read V
    unsigned long long v_empty[2];
    // Per Q stage: the item the producer hands the consumers (attention.cuh)
    alignas(16) ItemSlot slots[2];
    // Each member's byte offset from the struct's start.
    struct at {
        static constexpr unsigned q = 0;
        static constexpr unsigned k = 32768;
        static constexpr unsigned v = 65536;
        static constexpr unsigned q_full = 98304;
        static constexpr unsigned q_empty = 98320;
        static constexpr unsigned k_full = 98336;
        static constexpr unsigned v_full = 98352;
        static constexpr unsigned k_empty = 98368;
        static constexpr unsigned v_empty = 98384;
        static constexpr unsigned slots = 98400;
    };
};
static_assert(sizeof(FhShared<bf16_t, 64, 2>) == 99328 && alignof(FhShared<bf16_t, 64, 2>) == 1024, "FhShared<bf16_t, 64, 2>: 99328 bytes, aligned to 1024, on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 2>::q) == 32768, "FhShared<bf16_t, 64, 2>::q: 32768 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 2>::k) == 32768, "FhShared<bf16_t, 64, 2>::k: 32768 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 2>::v) == 32768, "FhShared<bf16_t, 64, 2>::v: 32768 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 2>::q_full) == 16, "FhShared<bf16_t, 64, 2>::q_full: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 2>::q_empty) == 16, "FhShared<bf16_t, 64, 2>::q_empty: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 2>::k_full) == 16, "FhShared<bf16_t, 64, 2>::k_full: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 2>::v_full) == 16, "FhShared<bf16_t, 64, 2>::v_full: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 2>::k_empty) == 16, "FhShared<bf16_t, 64, 2>::k_empty: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 2>::v_empty) == 16, "FhShared<bf16_t, 64, 2>::v_empty: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 64, 2>::slots) == 64, "FhShared<bf16_t, 64, 2>::slots: 64 bytes on the host");
static_assert(alignof(unsigned long long) == 8, "unsigned long long: aligned to 8 on the host");

template <typename T> struct FhShared<T, 128, 2> {
    // Q: [Q stage][64-dim box][query row][dim]
    alignas(1024) T q[2][2][128][64];
    // K: [stage][64-dim box][key][dim]
    alignas(1024) T k[2][2][128][64];
    // V, as K
    alignas(1024) T v[2][2][128][64];
    // Per Q stage: the item's Q has arrived (the producer's arrival + the TMA's bytes)
    unsigned long long q_full[2];
    // Per Q stage: every consumer warp is done with its Q and its slot
    unsigned long long q_empty[2];
    // Per stage: K has arrived
    unsigned long long k_full[2];
    // Per stage: V has arrived
    unsigned long long v_full[2];
    // Per stage: every consumer's S products read K
    unsigned long long k_empty[2];
    // Per stage: every consumer's P V products read V
    unsigned long long v_empty[2];
    // Per Q stage: the item the producer hands the consumers (attention.cuh)
    alignas(16) ItemSlot slots[2];
    // Each member's byte offset from the struct's start.
    struct at {
        static constexpr unsigned q = 0;
        static constexpr unsigned k = 65536;
        static constexpr unsigned v = 131072;
        static constexpr unsigned q_full = 196608;
        static constexpr unsigned q_empty = 196624;
        static constexpr unsigned k_full = 196640;
        static constexpr unsigned v_full = 196656;
        static constexpr unsigned k_empty = 196672;
        static constexpr unsigned v_empty = 196688;
        static constexpr unsigned slots = 196704;
    };
};
static_assert(sizeof(FhShared<bf16_t, 128, 2>) == 197632 && alignof(FhShared<bf16_t, 128, 2>) == 1024, "FhShared<bf16_t, 128, 2>: 197632 bytes, aligned to 1024, on the host");
static_assert(sizeof(FhShared<bf16_t, 128, 2>::q) == 65536, "FhShared<bf16_t, 128, 2>::q: 65536 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 128, 2>::k) == 65536, "FhShared<bf16_t, 128, 2>::k: 65536 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 128, 2>::v) == 65536, "FhShared<bf16_t, 128, 2>::v: 65536 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 128, 2>::q_full) == 16, "FhShared<bf16_t, 128, 2>::q_full: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 128, 2>::q_empty) == 16, "FhShared<bf16_t, 128, 2>::q_empty: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 128, 2>::k_full) == 16, "FhShared<bf16_t, 128, 2>::k_full: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 128, 2>::v_full) == 16, "FhShared<bf16_t, 128, 2>::v_full: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 128, 2>::k_empty) == 16, "FhShared<bf16_t, 128, 2>::k_empty: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 128, 2>::v_empty) == 16, "FhShared<bf16_t, 128, 2>::v_empty: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 128, 2>::slots) == 64, "FhShared<bf16_t, 128, 2>::slots: 64 bytes on the host");
static_assert(alignof(unsigned long long) == 8, "unsigned long long: aligned to 8 on the host");

template <typename T> struct FhShared<T, 256, 2> {
    // Q: [Q stage][64-dim box][query row][dim]
    alignas(1024) T q[1][4][128][64];
    // K: [stage][64-dim box][key][dim]
    alignas(1024) T k[2][4][80][64];
    // V, as K
    alignas(1024) T v[2][4][80][64];
    // Per Q stage: the item's Q has arrived (the producer's arrival + the TMA's bytes)
    unsigned long long q_full[1];
    // Per Q stage: every consumer warp is done with its Q and its slot
    unsigned long long q_empty[1];
    // Per stage: K has arrived
    unsigned long long k_full[2];
    // Per stage: V has arrived
    unsigned long long v_full[2];
    // Per stage: every consumer's S products read K
    unsigned long long k_empty[2];
    // Per stage: every consumer's P V products read V
    unsigned long long v_empty[2];
    // Per Q stage: the item the producer hands the consumers (attention.cuh)
    alignas(16) ItemSlot slots[1];
    // Each member's byte offset from the struct's start.
    struct at {
        static constexpr unsigned q = 0;
        static constexpr unsigned k = 65536;
        static constexpr unsigned v = 147456;
        static constexpr unsigned q_full = 229376;
        static constexpr unsigned q_empty = 229384;
        static constexpr unsigned k_full = 229392;
        static constexpr unsigned v_full = 229408;
        static constexpr unsigned k_empty = 229424;
        static constexpr unsigned v_empty = 229440;
        static constexpr unsigned slots = 229456;
    };
};
static_assert(sizeof(FhShared<bf16_t, 256, 2>) == 230400 && alignof(FhShared<bf16_t, 256, 2>) == 1024, "FhShared<bf16_t, 256, 2>: 230400 bytes, aligned to 1024, on the host");
static_assert(sizeof(FhShared<bf16_t, 256, 2>::q) == 65536, "FhShared<bf16_t, 256, 2>::q: 65536 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 256, 2>::k) == 81920, "FhShared<bf16_t, 256, 2>::k: 81920 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 256, 2>::v) == 81920, "FhShared<bf16_t, 256, 2>::v: 81920 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 256, 2>::q_full) == 8, "FhShared<bf16_t, 256, 2>::q_full: 8 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 256, 2>::q_empty) == 8, "FhShared<bf16_t, 256, 2>::q_empty: 8 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 256, 2>::k_full) == 16, "FhShared<bf16_t, 256, 2>::k_full: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 256, 2>::v_full) == 16, "FhShared<bf16_t, 256, 2>::v_full: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 256, 2>::k_empty) == 16, "FhShared<bf16_t, 256, 2>::k_empty: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 256, 2>::v_empty) == 16, "FhShared<bf16_t, 256, 2>::v_empty: 16 bytes on the host");
static_assert(sizeof(FhShared<bf16_t, 256, 2>::slots) == 32, "FhShared<bf16_t, 256, 2>::slots: 32 bytes on the host");
static_assert(alignof(unsigned long long) == 8, "unsigned long long: aligned to 8 on the host");

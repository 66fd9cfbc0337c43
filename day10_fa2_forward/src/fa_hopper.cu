// Day 10, fa_hopper: the FlashAttention forward on Hopper's own path (sm_90a only; the host
// compiles this file for sm_90a on an H100 and falls back to fa2_mma elsewhere). The
// algorithm is attention.cu's (online softmax over key tiles, one normalisation at the end);
// what changes is how the tiles move and who multiplies them, FlashAttention-3's ideas:
//
//   - the TMA copies Q once and K, V tile by tile into 128-byte-swizzled shared memory, each
//     copy counted on an mbarrier: no thread computes an address or waits on a load;
//   - warp specialisation: warpgroup 0 is the producer (one thread issues every copy, the
//     rest give their registers back); the others are consumers, 64 query rows each (two
//     for head dims 128 and 256, three for 64);
//   - wgmma: S = Q K^T reads both operands from shared memory (64 x keys per tile per
//     instruction, the whole warpgroup), O += P V takes P from registers (the S accumulators
//     rounded to 16 bits are already a register A operand) and V from shared memory, MN-major;
//   - overlap inside a warpgroup: while O += P_{n-1} V_{n-1} runs on the tensor cores, the
//     warpgroup is already computing S_n's softmax;
//   - overlap between warpgroups: the consumers take turns issuing their products (named
//     barriers pass the turn on), so one's exponentials run under another's matrix products;
//   - persistent blocks: one block per SM; each draws its next work item (query tile, head,
//     sequence) from a counter, so causal items (the longest first) spread evenly, and the
//     producer loads the next item's Q (a second Q stage) and K, V while the consumers finish
//     the last (whose O they store under the next item's first S product).
//
// Per block: 64 query rows per consumer warpgroup, block 128 x (1 + consumers). Key tiles of
// 128 keys (80 at head dim 256) in a ring of 2 stages; a Q stage and its item slot are freed
// (q_empty, lane 0 of every consumer warp arriving) after the item's last S product, or, where
// O leaves through the stage, once the TMA has read O from it:
//
//   producer:   per item: draw a ticket; wait q_empty[q] -> item slot, TMA Q -> q_full[q];
//               per key tile n: wait k_empty[s] -> TMA K -> k_full[s]
//                               wait v_empty[s] -> TMA V -> v_full[s]
//   consumer:   per item: wait q_full[q], read the slot; first S_0 (the last item's O
//               stored under it) and its softmax;
//               per key tile n: turn: issue S_n = Q K_n^T, O += P_{n-1} V_{n-1}; pass turn;
//               wait for S_n -> free k_empty[s_n]; softmax(S_n) (exp2 under the P V
//               products); wait for P V -> free v_empty; rescale O; P_n = S_n in 16 bits;
//               the last P V (L stored under it); O held for the next item, or stored
//
// Layout as attention.cu: Q, O [total_q, heads, D], K, V [total_k, kv_heads, D] (the tensor
// maps cover them as [heads][tokens][D], boxes of 64 dims x a tile's tokens of one head), L
// [total_q, heads] f32. Copies past a sequence's end read the next sequence's tokens (or
// zeros past the tensor's end): those keys are masked like causal ones, those query rows are
// never stored.
#include "common.cuh"
#include "dtype.cuh"
#include "mma.cuh"        // pack2
#include "reduce.cuh"     // FULL_WARP
#include "attention.cuh"  // Sequence, key_end
#include "hopper.cuh"

constexpr int FH_BOX = 64;  // head-dim elements of one 128-byte swizzle row
// Named barriers: 1 + c is consumer c's turn (consumer_barrier), 1 + FH_MAX_CONSUMERS + c its
// own epilogue's.
constexpr int FH_MAX_CONSUMERS = 4;
__device__ __forceinline__ constexpr int epilogue_barrier(int consumer) {
    return 1 + FH_MAX_CONSUMERS + consumer;
}

// The tile configuration comes from the host, as defines, one set per tile: head dim D with NC
// consumer warpgroups (64 query rows each; head dim 64 has two tiles, of 3 and of 2):
//   FH_D<D>_C<NC>_CONSUMERS   NC again, checked
//   FH_D<D>_C<NC>_KEYS        keys per K/V tile
//   FH_D<D>_C<NC>_STAGES      K/V tiles in flight (the ring)
//   FH_D<D>_C<NC>_Q_STAGES    Q tiles in flight (2: the next item's Q arrives during this one)
//   FH_D<D>_C<NC>_REGISTERS   registers per consumer thread after setmaxnreg
// and FH_PRODUCER_REGISTERS, what the producer keeps. `HOPPER_TILES` in src/hopper_tile.rs is
// the one table they come from: the launcher derives its block size, shared memory and TMA
// boxes from it too, and the static_asserts below check that the tile fits an SM. The shared
// memory is the struct FhShared<T, D, NC> of fa_hopper_params.cuh, written from the same table;
// the kernel checks its rings against these defines (a header older than the table fails to
// compile, as does a build without the defines: the file stops here).
#if !defined(FH_PRODUCER_REGISTERS) || !defined(FH_D64_C3_KEYS) || !defined(FH_D64_C2_KEYS) || \
    !defined(FH_D128_C2_KEYS) || !defined(FH_D256_C2_KEYS)
#error "fa_hopper.cu: compile it with the -DFH_ defines of day10's HopperTile table"
#endif

template <int D, int NC> struct FhTile;
#define FH_TILE(D, NC)                                                                             \
    template <> struct FhTile<D, NC> {                                                             \
        static constexpr int CONSUMERS = FH_D##D##_C##NC##_CONSUMERS,                              \
                             KEYS = FH_D##D##_C##NC##_KEYS, STAGES = FH_D##D##_C##NC##_STAGES,     \
                             Q_STAGES = FH_D##D##_C##NC##_Q_STAGES,                                \
                             CONSUMER_REGISTERS = FH_D##D##_C##NC##_REGISTERS;                     \
        static_assert(CONSUMERS == NC, "the tile's consumers are its name's");                     \
    };
FH_TILE(64, 3)
FH_TILE(64, 2)
FH_TILE(128, 2)
FH_TILE(256, 2)
#undef FH_TILE

// Why the host's table has the values it has (`HOPPER_TILES`): head dim 64 halves the
// matrix work per key tile but not the softmax's, so it takes three consumers (192 rows) to
// keep more exponentials in flight under the products, except on short problems (causal up to
// 4096 queries, any up to 1024), where two (128 rows) waste fewer masked rows on the diagonal
// and at a sequence's end; head dim 128 needs the registers for its O accumulators (64 per
// thread) and takes two, 240 registers each;
// head dim 256 holds 128 accumulators per thread and takes key tiles of 80, the most for which
// Q and two stages of K and V fit in shared memory (226 of 227 KiB; 80 keys measured 5-8%
// faster than 64, whose S products of N = 64 left more of each step to its fixed costs).
// Producer 24 + consumers 240 (two) or 160 (three) share the 64 K registers of an SM:
// setmaxnreg moves them.
template <int D, int NC> struct FhConfig : FhTile<D, NC> {
    using Tile = FhTile<D, NC>;
    static constexpr int BM = 64 * Tile::CONSUMERS;  // query rows per CTA
    static constexpr int BN = Tile::KEYS;            // keys per K/V tile
    static constexpr int THREADS = 128 * (1 + Tile::CONSUMERS);
    static_assert(D % FH_BOX == 0, "the head dim is a whole number of 64-element boxes");
    static_assert(Tile::CONSUMERS >= 1 && BM <= 256, "a TMA box of Q has at most 256 rows");
    static_assert(Tile::CONSUMERS <= FH_MAX_CONSUMERS, "named barriers for at most 4 consumers");
    // P V takes 16 keys per k-step; a K or V box of BN rows of 128 bytes stays on the swizzle's
    // 1024-byte period when BN % 8 == 0; a box and a wgmma's N are at most 256.
    static_assert(BN % 16 == 0 && BN >= 16 && BN <= 256,
                  "keys per tile: a multiple of 16, at most 256");
    static_assert(Tile::STAGES >= 1, "at least one K/V stage");
    static_assert(Tile::Q_STAGES >= 1, "at least one Q stage");
    // setmaxnreg takes multiples of 8 in 24..256; the SM has 64 K registers for the block.
    static_assert(FH_PRODUCER_REGISTERS % 8 == 0 && FH_PRODUCER_REGISTERS >= 24, "setmaxnreg");
    static_assert(Tile::CONSUMER_REGISTERS % 8 == 0 && Tile::CONSUMER_REGISTERS <= 256,
                  "setmaxnreg");
    static_assert(128 * FH_PRODUCER_REGISTERS +
                          Tile::CONSUMERS * 128 * Tile::CONSUMER_REGISTERS <= 65536,
                  "producer and consumer registers fit the SM's register file");
};

// A block's work item: query tile `tile` of head `h` of sequence `b`. Items are numbered with
// the query tile fastest, so the blocks running at once read the K and V of a few heads (which
// stay in L2). Causal: the tiles of a head are numbered last row first, the longest first.
struct WorkItem {
    int tile, h, b;
};
__device__ __forceinline__ WorkItem work_item(int w, int q_tiles, int heads, int causal) {
    const int in_head = w % q_tiles, hb = w / q_tiles;
    return {causal ? q_tiles - 1 - in_head : in_head, hb % heads, hb / heads};
}

// The slot through which the producer hands the consumers an item: ItemSlot, attention.cuh.

// Tickets: block w's first item is item w; after it, each producer draws the next unclaimed
// item from a counter in global memory, so a block that drew short items draws more of them
// (causal items differ up to q_tiles-fold in cost; a fixed share per block left some blocks
// all the long ones).
// quote: fh_tickets
__device__ __forceinline__ int next_ticket(int* tickets) {
    return gridDim.x + atomicAdd(tickets, 1);
}
// end quote: fh_tickets

// The producer (one thread): draws the block's items (tickets), hands each to the consumers
// through its slot, and loads its Q and then its K and V tiles through the rings, an item ahead
// of the consumers. grid(min(items, SMs)) persistent blocks walk the q_tiles x heads x batch
// items. `tickets` is [next, producers done], 0 and 0 at launch; the last producer to finish
// sets both back to 0 for the next launch.
template <typename T, int D, int NC>
__device__ __forceinline__ void fh_producer(const FaHopperParams<T>& params,
                                            FhShared<T, D, NC>& shared) {
    using C = FhConfig<D, NC>;
    using S = FhShared<T, D, NC>;
    constexpr int FH_BM = C::BM, FH_BN = C::BN, STAGES = C::STAGES, Q_STAGES = C::Q_STAGES;
    // The launch's parameters by name (fa_hopper_params.cuh, written from the launcher's
    // declaration, says what each is); the maps stay in parameter space, where the TMA reads them.
    const TmaDescriptor *map_q = &params.map_q, *map_k = &params.map_k, *map_v = &params.map_v;
    const int *cu_q = params.cu_q, *cu_k = params.cu_k;
    const int heads = params.heads, kv_heads = params.kv_heads, causal = params.causal;
    const int q_tiles = params.q_tiles, items = params.items;
    int* tickets = params.tickets;
    ItemSlot* slots = shared.slots;
    // The bytes a copy delivers are those of the member it fills: a stage of Q, K or V
    // (all its boxes), one box.
    constexpr unsigned Q_BYTES = sizeof(S::q[0]), TILE_BYTES = sizeof(S::k[0]);
    constexpr unsigned BOX_BYTES_Q = sizeof(S::q[0][0]), BOX_BYTES_KV = sizeof(S::k[0][0]);
    static_assert(sizeof(S::v[0]) == TILE_BYTES, "K and V tiles of one size");
    // 32-bit shared-memory addresses (a member's offset from the storage's): pointers
    // would take two of the 24 registers each.
    const unsigned smem = smem_u32(&shared);
    const auto bar = [&](unsigned member, int stage) { return smem + member + 8 * stage; };
    PipelineCount<STAGES> ring;
    PipelineCount<Q_STAGES> q_ring;
    // quote: fh_refill
    // Stage st of the K or V ring (`tile`, its barriers `full` and `empty`): once the consumers
    // have freed it, the key tile at key0 of KV head kvh, its boxes counted on `full`.
    const auto refill = [&](unsigned tile, unsigned full, unsigned empty, const TmaDescriptor* map,
                            int st, int key0, int kvh) {
        mbarrier_wait(bar(empty, st), ring.phase() ^ 1);
        mbarrier_arrive_expect_tx(bar(full, st), TILE_BYTES);
#pragma unroll
        for (int box = 0; box < D / FH_BOX; ++box)
            tma_load_3d(smem + tile + st * TILE_BYTES + box * BOX_BYTES_KV, map, bar(full, st),
                        box * FH_BOX, key0, kvh);
    };
    // end quote: fh_refill
    // quote: fh_producer_item
    // The ticket after this item's is drawn an item ahead: the counter's answer (a round
    // trip to L2 that every block contends for) arrives under this item's loads.
    int w = blockIdx.x, next = next_ticket(tickets);
#pragma unroll 1
    for (;; w = next, next = next_ticket(tickets)) {
        WorkItem wi{};
        if (w < items) {
            wi = work_item(w, q_tiles, heads, causal);
            // Items past a shorter sequence's end hold no rows.
            if (wi.tile * FH_BM >= cu_q[wi.b + 1] - cu_q[wi.b]) continue;
        }
        const int qs = q_ring.stage();
        // Its last item is done with it: its S products, and the TMA's read of O stored through it.
        mbarrier_wait(bar(S::at::q_empty, qs), q_ring.phase() ^ 1);
        ItemSlot& slot = slots[qs];
        if (w >= items) {
            slot.i0 = -1;
            mbarrier_arrive(bar(S::at::q_full, qs));  // no bytes: "no more work"
            break;
        }
        const Sequence s = sequence(cu_q, cu_k, wi.b);
        slot.i0 = wi.tile * FH_BM;
        slot.h = wi.h;
        slot.s = s;
        mbarrier_arrive_expect_tx(bar(S::at::q_full, qs), Q_BYTES);
#pragma unroll
        for (int box = 0; box < D / FH_BOX; ++box)
            tma_load_3d(smem + S::at::q + qs * Q_BYTES + box * BOX_BYTES_Q, map_q,
                        bar(S::at::q_full, qs), box * FH_BOX, s.q0 + wi.tile * FH_BM, wi.h);
        q_ring.advance();
        // end quote: fh_producer_item
        // quote: fh_producer_kv
        const int kvh = wi.h / (heads / kv_heads);
        const int keys = key_end(min(wi.tile * FH_BM + FH_BM, s.lq) - 1, s, causal);
#pragma unroll 1  // unrolled, the loop needs more than the producer's 24 registers
        for (int key0 = s.k0; key0 < s.k0 + keys; key0 += FH_BN) {
            const int st = ring.stage();
            // K first: the consumers' S = Q K^T waits on K's barrier alone.
            refill(S::at::k, S::at::k_full, S::at::k_empty, map_k, st, key0, kvh);
            refill(S::at::v, S::at::v_full, S::at::v_empty, map_v, st, key0, kvh);
            ring.advance();
        }
        // end quote: fh_producer_kv
    }
    tickets_done(tickets);  // the last producer sets the counter back for the next launch
}

// A consumer warpgroup: 64 query rows of each item the producer hands the block, its O in
// registers. Its state lives in these members (the compiler keeps them all in registers: every
// index into the arrays is a constant once the loops are unrolled), its steps are the member
// functions, and run() is the loop over items.
template <typename T, int D, int NC>
struct FhConsumer {
    using C = FhConfig<D, NC>;
    using S = FhShared<T, D, NC>;
    static constexpr int FH_BM = C::BM, FH_BN = C::BN, STAGES = C::STAGES, Q_STAGES = C::Q_STAGES;

    S& shared;
    const TmaDescriptor* map_o;
    T* o;
    float* lse;
    const int heads, causal;
    const float scale_log2;
    const int consumer, tid, warp, lane, g, t;

    float acc[D / 2];           // O, 64 x D per warpgroup
    float sc[FH_BN / 2];        // S, then P in f32, 64 x FH_BN
    unsigned p[FH_BN / 16][4];  // P in 16 bits: one register A operand per 16 keys
    float m[2], l[2], alpha[2];
    int end[2], unmasked;
    // The item in hand: its slot, its Q stage and key tiles, and where its rows go (this
    // thread's two rows are row0 and row0 + 8 of the accumulator layout; `token0` is row0's
    // index into O / D, `rows_left` how many of the sequence's rows remain from row0).
    ItemSlot it{};
    PipelineCount<STAGES> ring, before;  // the stage of the next S, and of the tile whose P V is pending
    PipelineCount<Q_STAGES> q_ring;
    int q_stage = 0, tiles = 0, rows_left = 0;
    index_t token0 = 0;
    // O goes out through this consumer's 64 rows of the item's Q stage and the TMA (two Q
    // stages, so the next item's Q is not held up, and all 64 rows inside the sequence: a box
    // past its end would write the next sequence's rows); the Q stage is then freed only
    // after those stores have read it. Two-consumer tiles only: head dim 64's three
    // consumers measured 3-5% slower with it, and spilled at 160 registers (the notes).
    static constexpr bool O_THROUGH_SMEM = Q_STAGES > 1 && C::CONSUMERS == 2;
    bool o_through_q = false;
    // The rows' factors 1 / l (finish_rows, under the last P V), kept until the item's O is
    // staged, which may be in the next item's first tile.
    float inv[2];
    // An item's O held in the accumulators until its store through its Q stage, which runs
    // under the next item's first S: that stage (-1: none), the item's first row of this
    // consumer's in O, and its head.
    int held_stage = -1, held_row = 0, held_h = 0;

    __device__ __forceinline__ FhConsumer(const FaHopperParams<T>& params, S& shared, int consumer)
        : shared(shared), map_o(&params.map_o), o(params.o), lse(params.lse), heads(params.heads),
          causal(params.causal), scale_log2(params.scale_log2), consumer(consumer),
          tid(threadIdx.x % 128), warp(tid / 32), lane(tid % 32), g(lane / 4), t(lane % 4) {}

    // quote: fh_descriptor
    // The descriptor of the tile at `byte_offset` from `tile` (which starts on a 1024-byte
    // boundary; `leading`: 16 for K-major, the distance between boxes for MN-major): the tile's
    // base plus a constant, one add per operand. Head dim 64 encodes each address whole (mask,
    // shift, or): the add measured slower there, for a reason not yet found (the notes).
    __device__ __forceinline__ unsigned long long descriptor(const void* tile, int byte_offset,
                                                             int leading) const {
        const char* at = static_cast<const char*>(tile) + byte_offset;
        if constexpr (D == 64)
            return leading == 16 ? wgmma_descriptor_k_major_sw128(at)
                                 : wgmma_descriptor_mn_major_sw128(at, leading);
        else
            return wgmma_desc(smem_u32(tile) >> 4, byte_offset, leading);
    }
    // end quote: fh_descriptor
    // quote: fh_issue_scores
    // S = Q K^T over the head dim: a k16 step is 16 dims (32 bytes) along a box of FH_BOX = 64
    // dims, the boxes FH_BM (Q) or FH_BN (K) rows of 128 bytes apart.
    __device__ __forceinline__ void issue_scores(int stage) {
        const T* q = &shared.q[q_stage][0][consumer * 64][0];
        const T* k = &shared.k[stage][0][0][0];
        constexpr int Q_BOX = sizeof(S::q[0][0]), K_BOX = sizeof(S::k[0][0]);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const int box = kk / 4, within = (kk % 4) * 32;
            wgmma_m64k16<FH_BN, T>(sc, descriptor(q, box * Q_BOX + within, 16),
                                   descriptor(k, box * K_BOX + within, 16), kk > 0);
        }
        wgmma_commit();
    }
    // end quote: fh_issue_scores
    // quote: fh_issue_pv
    // O += P V over the tile's keys: V is MN-major (d runs along memory), a k16 step is 16
    // key rows (2048 bytes) down, the boxes of 64 dims FH_BN x 128 bytes apart. One wgmma of
    // N = D per 16 keys: n64, n128 or n256 (4 boxes of V side by side).
    __device__ __forceinline__ void issue_pv(int stage) {
        const T* v = &shared.v[stage][0][0][0];
        constexpr int KEY_ROW_BYTES = FH_BOX * sizeof(T), V_BOX = sizeof(S::v[0][0]);
#pragma unroll
        for (int kk = 0; kk < FH_BN / 16; ++kk)
            wgmma_m64k16_rs<D, T, 1>(acc, p[kk], descriptor(v, kk * 16 * KEY_ROW_BYTES, V_BOX), 1);
        wgmma_commit();
    }
    // end quote: fh_issue_pv
    // Masks S_n (row r of the thread's two sees keys before end[r]), finds the new row maxima,
    // turns S into unnormalised P (f32, in place) and updates the row sums; `alpha` is what O
    // must be multiplied by before P_n V_n is added. Element e of 8-column block j is row e / 2
    // of the thread's two, key 8j + 2t + e % 2.
    __device__ __forceinline__ void softmax(int n) {
        const int j0 = n * FH_BN;
        if (j0 + FH_BN > unmasked)
            mask_fragment<FH_BN / 8>(sc, t, NEG_INF, [&](int r, int key) { return j0 + key < end[r]; });
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            // Four independent chains, not one of FH_BN / 4 dependent maxima.
            float part[4] = {m[r], NEG_INF, NEG_INF, NEG_INF};
#pragma unroll
            for (int j = 0; j < FH_BN / 8; ++j)
                part[j % 4] = fmaxf(part[j % 4], fmaxf(sc[4 * j + 2 * r], sc[4 * j + 2 * r + 1]));
            float mx = fmaxf(fmaxf(part[0], part[1]), fmaxf(part[2], part[3]));
            mx = fmaxf(mx, __shfl_xor_sync(FULL_WARP, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(FULL_WARP, mx, 2));
            // quote: fh_softmax
            // Scores stay unscaled; exp2 takes scale * log2(e) * (s - max) as one FMA. While
            // a row has seen no key, exponentiate against 0: every p is exp2(-inf) = 0.
            const float base = mx == NEG_INF ? 0.0f : mx * scale_log2;
            alpha[r] = ex2_approx(m[r] * scale_log2 - base);  // 0 while m was -inf
            m[r] = mx;
            float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < FH_BN / 8; ++j) {
                sc[4 * j + 2 * r] = ex2_approx(fmaf(sc[4 * j + 2 * r], scale_log2, -base));
                sc[4 * j + 2 * r + 1] = ex2_approx(fmaf(sc[4 * j + 2 * r + 1], scale_log2, -base));
                sums[j % 4] += sc[4 * j + 2 * r] + sc[4 * j + 2 * r + 1];
            }
            const float sum = (sums[0] + sums[1]) + (sums[2] + sums[3]);
            // This lane's share of the row sum; the 4 lanes of a row add theirs at the end.
            l[r] = l[r] * alpha[r] + sum;
            // end quote: fh_softmax
        }
    }
    // quote: fh_pack
    __device__ __forceinline__ void rescale_and_pack() {
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
            acc[4 * j] *= alpha[0];
            acc[4 * j + 1] *= alpha[0];
            acc[4 * j + 2] *= alpha[1];
            acc[4 * j + 3] *= alpha[1];
        }
        // Two 8-key blocks of the accumulator are one k16 step of the A operand.
#pragma unroll
        for (int kk = 0; kk < FH_BN / 16; ++kk) {
            p[kk][0] = pack2<T>(sc[8 * kk], sc[8 * kk + 1]);
            p[kk][1] = pack2<T>(sc[8 * kk + 2], sc[8 * kk + 3]);
            p[kk][2] = pack2<T>(sc[8 * kk + 4], sc[8 * kk + 5]);
            p[kk][3] = pack2<T>(sc[8 * kk + 6], sc[8 * kk + 7]);
        }
    }
    // end quote: fh_pack
    __device__ __forceinline__ void release(unsigned long long* bar) {
        if (tid == 0) mbarrier_arrive(bar);
    }
    // Taking turns: consumer c issues a step's two products only after consumer c - 1 has
    // issued its own (named barrier 1 + c: its 128 threads wait, the previous consumer's 128
    // arrive), so the tensor cores run one warpgroup's products while the others compute
    // their softmax, instead of all warpgroups issuing at once and then all waiting on the
    // exponentials together. Every consumer takes the same number of turns (the block's
    // items and tiles), so the cycle never waits on one that has left.
    // quote: fh_turns
    __device__ __forceinline__ void take_turn() {
        named_barrier_sync(consumer_barrier(consumer), 256);
    }
    __device__ __forceinline__ void pass_turn() {
        named_barrier_arrive(consumer_barrier((consumer + 1) % C::CONSUMERS), 256);
    }
    // Consumer 0 goes first.
    __device__ __forceinline__ void start_turns() {
        if (consumer == 0) named_barrier_arrive(consumer_barrier(0), 256);
    }
    // end quote: fh_turns


    // quote: fh_take_item
    // The item's Q stage and slot: each warp's reader of the slot arrives (the slot's comment
    // says why). The S products that read the Q tile have completed (wgmma_wait) before this;
    // where O is stored through the stage, so have the TMA's reads of it (store_held).
    __device__ __forceinline__ void release_q(int stage) {
        if (lane == 0) mbarrier_arrive(&shared.q_empty[stage]);
    }
    __device__ __forceinline__ void release_q() { release_q(q_stage); }
    // Waits for the next item's Q and reads the item (lane 0 from the slot, the other lanes
    // from it); false when there is no more work.
    __device__ __forceinline__ bool take_item(int& stage) {
        stage = q_ring.stage();
        mbarrier_wait(&shared.q_full[stage], q_ring.phase());
        q_ring.advance();
        if (lane == 0) {
            const ItemSlot& slot = shared.slots[stage];
            it.i0 = slot.i0;
            it.h = slot.h;
            it.s = slot.s;
        }
        it.i0 = __shfl_sync(FULL_WARP, it.i0, 0);
        it.h = __shfl_sync(FULL_WARP, it.h, 0);
        it.s.q0 = __shfl_sync(FULL_WARP, it.s.q0, 0);
        it.s.lq = __shfl_sync(FULL_WARP, it.s.lq, 0);
        it.s.k0 = __shfl_sync(FULL_WARP, it.s.k0, 0);
        it.s.lk = __shfl_sync(FULL_WARP, it.s.lk, 0);
        return it.i0 >= 0;
    }
    // end quote: fh_take_item
    __device__ __forceinline__ int tiles_of() {
        const int keys = key_end(min(it.i0 + FH_BM, it.s.lq) - 1, it.s, causal);
        return (keys + FH_BN - 1) / FH_BN;
    }
    // Makes the item taken (in Q stage `stage`) the one in hand: its masks, rows and fresh
    // statistics.
    __device__ __forceinline__ void begin(int stage) {
        q_stage = stage;
        tiles = tiles_of();
        const int row0 = it.i0 + consumer * 64 + warp * 16 + g;
        end[0] = key_end(row0, it.s, causal);
        end[1] = key_end(row0 + 8, it.s, causal);
        // Keys every row of this warpgroup sees: tiles before them need no mask.
        unmasked = key_end(it.i0 + consumer * 64, it.s, causal);
        rows_left = it.s.lq - row0;
        token0 = (index_t)(it.s.q0 + row0) * heads + it.h;
        o_through_q = O_THROUGH_SMEM && it.s.lq - (it.i0 + consumer * 64) >= 64;
        m[0] = m[1] = NEG_INF;
        l[0] = l[1] = 0.0f;
    }
    // The end of row r's sum: the 4 lanes of the row add their shares (every lane takes part).
    __device__ __forceinline__ void finish_row_sum(int r) {
        l[r] += __shfl_xor_sync(FULL_WARP, l[r], 1);
        l[r] += __shfl_xor_sync(FULL_WARP, l[r], 2);
    }
    // What O's row r is multiplied by, 1 / l, and its L (natural log); 0 and -inf for a row
    // that saw no key.
    __device__ __forceinline__ float row_inverse(int r) const {
        return l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    }
    __device__ __forceinline__ float row_lse(int r) const {
        return l[r] > 0.0f ? (m[r] * scale_log2 + log2f(l[r])) * LN2 : NEG_INF;
    }
    // O = acc / l, straight from the accumulators: the thread holds columns 8j + 2t, +1 of its
    // two rows. Where this is how every row leaves (tiles without O_THROUGH_SMEM), the 4 lanes
    // of a row trade words (quad_transpose) so that each stores 16 contiguous bytes, a quarter
    // of the store instructions; the exchange runs on every lane, the stores only where the
    // row exists. The other tiles come here only for rows at a sequence's end and store each
    // lane's four bytes as they are. Rows past the sequence's end are not stored.
    __device__ __forceinline__ void store() {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const bool inside = 8 * r < rows_left;
            // Only the shared-memory tiles skip a row here: the 16-byte path's exchange needs
            // every lane.
            if (O_THROUGH_SMEM && !inside) continue;
            const index_t row = token0 + (index_t)(8 * r) * heads;
            if constexpr (O_THROUGH_SMEM) {
                unsigned* out = reinterpret_cast<unsigned*>(o + row * D);
#pragma unroll
                for (int j = 0; j < D / 8; ++j)
                    out[4 * j + t] = pack2<T>(acc[4 * j + 2 * r] * inv[r], acc[4 * j + 2 * r + 1] * inv[r]);
            } else {
                uint4* out = reinterpret_cast<uint4*>(o + row * D);
#pragma unroll
                for (int jj = 0; jj < D / 32; ++jj) {
                    unsigned x[4];
#pragma unroll
                    for (int k = 0; k < 4; ++k) {
                        const int j = 4 * jj + k;
                        x[k] = pack2<T>(acc[4 * j + 2 * r] * inv[r], acc[4 * j + 2 * r + 1] * inv[r]);
                    }
                    quad_transpose(x, t);
                    if (inside) out[4 * jj + t] = make_uint4(x[0], x[1], x[2], x[3]);
                }
            }
        }
    }
    // quote: fh_finish_rows
    // The rows' sums, their factors 1 / l and their L, once the last softmax is done: issued
    // under the last P V, which does not touch them (at once for an item without key tiles).
    __device__ __forceinline__ void finish_rows() {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            finish_row_sum(r);
            inv[r] = row_inverse(r);
            if (t == 0 && 8 * r < rows_left) lse[token0 + (index_t)(8 * r) * heads] = row_lse(r);
        }
    }
    // end quote: fh_finish_rows
    // quote: fh_store_through_q
    // O = acc / l through shared memory: this consumer's 64 rows of the item's Q stage (its S
    // products have read them) take O in the TMA's swizzled layout, stmatrix writing four 8 x 8
    // blocks at a time; one thread then stores every 64-dim box with the TMA. The item's O
    // stays in the accumulators (hold) until the next item's first tile: staged before its S
    // is issued, stored while that S runs (at once if that item has no key tile, or after the
    // last item).
    __device__ __forceinline__ void hold() {
        held_stage = q_stage;
        held_row = it.s.q0 + it.i0 + consumer * 64;
        held_h = it.h;
    }
    // The held O, divided by l and rounded, into the consumer's rows of its Q stage.
    __device__ __forceinline__ void stage_held() {
        if (!O_THROUGH_SMEM || held_stage < 0) return;
        const int box_row = consumer * 64 + warp * 16 + 8 * ((lane / 8) % 2) + lane % 8;
#pragma unroll
        for (int box = 0; box < D / FH_BOX; ++box) {
            unsigned char* tile = reinterpret_cast<unsigned char*>(&shared.q[held_stage][box][0][0]);
            stmatrix_box<T>(tile, box_row, lane, acc, box * (FH_BOX / 8), inv);
        }
        fence_proxy_async_shared();  // these writes, before the TMA reads them
    }
    // Once every warp of the consumer has staged its rows, one thread stores each box and
    // waits until the TMA has read them; then every warp frees the stage (warp 0's arrival,
    // its lane 0 being that thread, comes after the wait), and the producer may load a Q there.
    __device__ __forceinline__ void store_held() {
        if (!O_THROUGH_SMEM || held_stage < 0) return;
        named_barrier_sync(epilogue_barrier(consumer), 128);
        if (tid == 0) {
#pragma unroll
            for (int box = 0; box < D / FH_BOX; ++box)
                tma_store_3d(map_o, &shared.q[held_stage][box][consumer * 64][0], box * FH_BOX,
                             held_row, held_h);
            bulk_commit();
            bulk_wait_read<0>();
        }
        release_q(held_stage);
        held_stage = -1;
    }
    // end quote: fh_store_through_q
    // O starts at 0, once the last item's O held in the accumulators has been staged.
    __device__ __forceinline__ void clear_o() {
#pragma unroll
        for (int i = 0; i < D / 2; ++i) acc[i] = 0.0f;
    }
    // quote: fh_first_tile
    // The first S of the item in hand, with no P V to hide under: the last item's O, staged
    // just before, is stored while it runs.
    __device__ __forceinline__ void first_tile() {
        if (tiles == 0) {
            stage_held();
            store_held();
            clear_o();  // no P V: the rows are 0
            if (!o_through_q) release_q();  // no S product reads this Q
            return;
        }
        mbarrier_wait(&shared.k_full[ring.stage()], ring.phase());
        stage_held();
        clear_o();
        wgmma_fence();
        issue_scores(ring.stage());
        store_held();  // reads shared memory and the barriers, not the product's registers
        wgmma_wait<0>();
        wgmma_fence_operands(sc);
        release(&shared.k_empty[ring.stage()]);
        if (tiles == 1 && !o_through_q) release_q();
        softmax(0);
        rescale_and_pack();
        ring.advance();
    }
    // end quote: fh_first_tile
    // The last P V of the item in hand, with no softmax to hide: the rows are finished under it.
    __device__ __forceinline__ void last_pv() {
        mbarrier_wait(&shared.v_full[before.stage()], before.phase());
        wgmma_fence();
        issue_pv(before.stage());
        finish_rows();
        wgmma_wait<0>();
        wgmma_fence_operands(acc);
#pragma unroll
        for (int kk = 0; kk < FH_BN / 16; ++kk) wgmma_fence_operands(p[kk]);
        release(&shared.v_empty[before.stage()]);
        before.advance();
    }


    // quote: fh_main_loop
    // Items one after another: the first S of an item (the last item's O stored under it), its
    // steps (S_n beside P_{n-1} V_{n-1}, each a turn), its last P V (its rows finished under
    // it), then its O held for the next item's first S or stored from registers.
    __device__ __forceinline__ void run() {
        start_turns();
        int stage;
        while (take_item(stage)) {
            begin(stage);
            first_tile();
#pragma unroll 1
            for (int n = 1; n < tiles; ++n) {
                take_turn();
                mbarrier_wait(&shared.k_full[ring.stage()], ring.phase());
                wgmma_fence();
                issue_scores(ring.stage());
                mbarrier_wait(&shared.v_full[before.stage()], before.phase());
                issue_pv(before.stage());
                pass_turn();
                wgmma_wait<1>();  // S_n is done; P_{n-1} V_{n-1} may still run
                wgmma_fence_operands(sc);
                release(&shared.k_empty[ring.stage()]);
                if (n == tiles - 1 && !o_through_q) release_q();  // the producer may load a Q here
                softmax(n);
                wgmma_wait<0>();
                wgmma_fence_operands(acc);
#pragma unroll
                for (int kk = 0; kk < FH_BN / 16; ++kk) wgmma_fence_operands(p[kk]);
                release(&shared.v_empty[before.stage()]);
                rescale_and_pack();
                before.advance();
                ring.advance();
            }
            if (tiles > 0) last_pv();
            else finish_rows();
            if (o_through_q) hold();
            else store();
        }
        stage_held();
        store_held();  // it waits until the TMA has read the last O, before the block exits
    }
    // end quote: fh_main_loop
};

// The kernel: shared memory and its barriers, then the producer warpgroup (one thread of it
// loads) and the consumer warpgroups.
template <typename T, int D, int NC>
__device__ __forceinline__ void fa_hopper(const FaHopperParams<T>& params) {
    using C = FhConfig<D, NC>;
    using S = FhShared<T, D, NC>;
    // Shared memory: FhShared<T, D, NC> (fa_hopper_params.cuh, written from the host's table),
    // which the host launches with, and the slack that aligns it.
    static_assert(sizeof(S) + SHARED_ALIGNMENT_SLACK <= 227 * 1024,
                  "at most 227 KiB of shared memory per block on sm_90");
    // The header's rings are the defines' tile: a stage of Q is the block's rows, one of K or V
    // the tile's keys, each row D wide; as many stages and barriers as the ring has.
    static_assert(sizeof(S::q[0]) == C::BM * D * sizeof(T) && sizeof(S::q) == C::Q_STAGES * sizeof(S::q[0]) &&
                      sizeof(S::q_full) == 8 * C::Q_STAGES && sizeof(S::slots) == C::Q_STAGES * sizeof(ItemSlot),
                  "FhShared's Q ring is the tile's (fa_hopper_params.cuh older than the table?)");
    static_assert(sizeof(S::k[0]) == C::BN * D * sizeof(T) && sizeof(S::k) == C::STAGES * sizeof(S::k[0]) &&
                      sizeof(S::v) == sizeof(S::k) && sizeof(S::k_full) == 8 * C::STAGES,
                  "FhShared's K and V rings are the tile's (fa_hopper_params.cuh older than the table?)");
    S& shared = shared_storage<S>();

    // quote: fh_barriers
    if (threadIdx.x == 0) {
        for (int st = 0; st < C::Q_STAGES; ++st) {
            mbarrier_init(&shared.q_full[st], 1);  // the producer's arrival (+ the TMA's bytes)
            mbarrier_init(&shared.q_empty[st], C::CONSUMERS * 4);  // lane 0 of every consumer warp
        }
        for (int st = 0; st < C::STAGES; ++st) {
            mbarrier_init(&shared.k_full[st], 1);
            mbarrier_init(&shared.v_full[st], 1);
            mbarrier_init(&shared.k_empty[st], C::CONSUMERS);
            mbarrier_init(&shared.v_empty[st], C::CONSUMERS);
        }
        fence_barrier_init();
    }
    __syncthreads();
    // end quote: fh_barriers

    // quote: fh_producer_registers
    if (threadIdx.x < 128) {
        // ---- producer: while the consumers work on an item, it already loads the next ----
        warpgroup_registers_release<FH_PRODUCER_REGISTERS>();
        if (threadIdx.x != 0) return;
        // end quote: fh_producer_registers
        fh_producer<T, D, NC>(params, shared);
        return;
    }

    // ---- consumers ----
    // quote: fh_consumer_registers
    warpgroup_registers_claim<C::CONSUMER_REGISTERS>();
    FhConsumer<T, D, NC> consumer(params, shared, threadIdx.x / 128 - 1);
    // end quote: fh_consumer_registers
    consumer.run();
}

// One extern "C" entry per (dtype, tile): `fa_hopper_<dtype>_d<D>_c<NC>`; the launcher picks
// by name. The parameters are one struct, `__grid_constant__` so that the TMA reads the maps in
// it from parameter space.
#define FA_HOPPER_KERNEL(T, name, D, NC)                                                        \
    KERNEL void __launch_bounds__(FhConfig<D, NC>::THREADS, 1)                                  \
        fa_hopper_##name##_d##D##_c##NC(const __grid_constant__ FaHopperParams<T> params) {     \
        fa_hopper<T, D, NC>(params);                                                            \
    }

FA_HOPPER_KERNEL(bf16_t, bf16, 64, 3)
FA_HOPPER_KERNEL(bf16_t, bf16, 64, 2)
FA_HOPPER_KERNEL(bf16_t, bf16, 128, 2)
FA_HOPPER_KERNEL(bf16_t, bf16, 256, 2)
FA_HOPPER_KERNEL(f16_t, f16, 64, 3)
FA_HOPPER_KERNEL(f16_t, f16, 64, 2)
FA_HOPPER_KERNEL(f16_t, f16, 128, 2)
FA_HOPPER_KERNEL(f16_t, f16, 256, 2)

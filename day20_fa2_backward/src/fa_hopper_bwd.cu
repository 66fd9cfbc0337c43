// Day 20, fa_hopper: the FlashAttention backward on Hopper's own path (sm_90a only; the host
// compiles this file for sm_90a on an H100 and refuses the version elsewhere). The algorithm
// is attention_bwd.cu's fa2 one (a key tile keeps its dK and dV in registers and walks the
// query tiles that see it, rebuilding P from L); what changes is day 10's fa_hopper toolbox:
//
//   - persistent blocks: each draws key tiles from a counter until none is left (head dim 256:
//     a block per tile, the one-tile form below);
//   - the TMA copies a tile's K and V once, then Q, dO, L and D query tile by query tile
//     through a ring of 2 stages, each copy counted on an mbarrier;
//   - warp specialisation: warpgroup 0 is the producer (one thread issues every copy, another
//     is the dQ writer below), the other two are consumers, 64 of the tile's 128 keys each;
//   - all five products on wgmma, transposed so that every operand is either in shared memory
//     as the TMA wrote it or in registers as the previous product left it:
//       S^T  = K Q^T      (64 keys x BM queries; A = K rows, B = Q, both K-major)
//       dP^T = V dO^T     (the same with V and dO)
//       dV  += P^T dO     (A = P^T from S^T's accumulators, B = dO MN-major)
//       dK  += dS^T Q     (A = dS^T from dP^T's accumulators, B = Q MN-major)
//       dQ   = dS K       (A = dS: dS^T written to shared memory by both consumers, read
//                          MN-major; B = K MN-major); each consumer makes half of the tile
//   - dQ leaves through shared memory: each consumer writes its f32 half tile there and a dQ
//     writer thread of the producer warpgroup adds it into the f32 accumulator in global
//     memory with TMA reduce-adds (one instruction per 32 x 64 box, no per-element atomics
//     issued by the math warps, and no wait for them either). Head dim 256 writes it into the
//     step's spent Q/dO stage instead (below), so that its ring has two stages.
//   - dK and dV leave once, after the walk, through staging boxes in shared memory (buffers
//     no product of the tile reads any more; K and V themselves in the one-tile form) and TMA
//     stores, while the next tile's K and V load.
//
// Tiles: 128 keys each; BM = 64 queries per step at head dim 128 (the register file holds
// dK and dV of 64 x 128 per consumer), 128 at head dim 64. Head dim 256 splits the work the
// other way (below: "split head dim"). Per query tile, per consumer:
//
//   wait q_full[s] -> issue S^T, dP^T -> wait S^T: P = exp2(S scale log2e - L log2e) (masked)
//   -> wait dP^T: dS = P (dP - D) -> dS^T to shared memory -> issue dV += P^T dO -> both
//   consumers meet -> issue dQ = dS K -> wait dV -> issue dK += dS^T Q -> wait dQ -> wait
//   dq_empty -> dQ to shared memory -> dq_full (the writer's TMA reduce-add into dq_accum)
//   -> wait dK -> free q_empty[s]
//
// Head dim 256: P^T and dS^T to shared memory -> meet -> issue dV, dQ, dK -> wait dV and dQ
// -> dQ's first half into the stage's dO -> wait dK -> its second half into the stage's Q ->
// dq_full (the writer frees q_empty[s] once its TMA has read them).
//
// Split head dim (head dim 256): dK and dV of 64 keys x 256 would take 256 registers a thread,
// so a block owns 64 keys and both consumers work on all of them: consumer w makes S^T and dP^T
// for queries 32w .. 32w + 31 of the 64 (no product is computed twice), writes P^T and dS^T to
// shared memory, and after the meeting owns columns 128w .. 128w + 127 of dV, dK and dQ, all
// three products reading their A operand (P^T, dS^T, dS) from shared memory. From the meeting
// on, a consumer reads only its own columns of the step's Q and dO: 64 queries x 128 columns
// of 16-bit elements, 16 KiB of each, the bytes of its 64 x 128 f32 dQ. So dQ has no tile of
// its own: its first half goes into the consumer's columns of dO once dV is done, its second
// into those of Q once dK is, and the dQ writer hands the stage back to the producer once its
// TMA has read them (in the deterministic mode, once its adds are complete). The 64 KiB that
// dQ tiles would take are the ring's second Q/dO stage.
//
// Deterministic mode: the reduce-adds into one dQ tile are ordered by key tile. A counter per
// (query tile, head, sequence) says how many key-tile halves have added theirs; a key tile
// adds after the counter reaches twice its rank and bumps it by two once both halves are
// complete. Without a mask the rank is the key tile n (ascending); causal, it is k - n, k the
// last key tile the query tile sees (descending): key tile n + 1 starts its walk at a later
// query tile, so it reaches each tile before key tile n does and nobody waits in a chain.
// Blocks are numbered so that the tiles a block waits for were scheduled before it: kv head
// fastest within sections of heads whose Q, dO and dQ fit the L2 (a wave then holds few key
// tiles of many heads, a short chain; in either mode the heads' tiles are shared in the L2),
// and causal, the last key tile of a head first.
//
// Layouts as attention_bwd.cu: Q, dO [total_q, heads, D] (maps [heads][tokens][D], boxes of 64
// dims x BM tokens), K, V [total_k, kv_heads, D] (boxes of 64 dims x 128 tokens); dq_accum
// [total_q, heads, D] f32 (boxes of 32 floats x 64 tokens); L and D transposed by the
// preprocessing kernel to [heads][batch][pitch] f32, L already in log2 units (boxes of BM).
// Copies past a sequence's end read the next sequence's rows (zeros past the tensor): those
// keys and queries are masked (P = 0, so their dS, dQ rows and dK, dV terms are exactly 0).
#include "common.cuh"
#include "dtype.cuh"
#include "mma.cuh"        // pack2
#include "attention.cuh"  // Sequence, key_end, visible, first_query
#include "hopper.cuh"

// The tile per head dim comes from the launcher's table (`BACKWARD_TILES` in
// src/hopper_tile.rs) as NVRTC defines: BH_CONSUMERS (the block's consumer warpgroups),
// BH_DS_STAGES (dS^T buffers), BH_PRODUCER_REGISTERS, BH_PREPROCESS_ROWS and
// BH_PREPROCESS_THREADS (query rows and threads per block of the preprocess kernel, which size
// its launch), and per head dim BH_D<d>_KEYS (keys per
// tile), _QUERIES (queries per step), _STAGES (the Q/dO ring), _REGISTERS (per consumer
// thread), _PERSISTENT (1: persistent blocks; 0: a block per tile) and _DQ_IN_STAGE (1: dQ
// leaves through the step's Q/dO stage; 0: through dQ tiles of its own). The static_asserts
// below check that the tile is one this code handles. The shared memory is the struct
// BhShared<T, D> of fa_hopper_bwd_params.cuh, written from the same table; the kernel checks
// its members against these defines (a header older than the table fails to compile).
#if !defined(BH_CONSUMERS) || !defined(BH_DS_STAGES) ||                                       \
    !defined(BH_PRODUCER_REGISTERS) || !defined(BH_D64_KEYS) || !defined(BH_D64_QUERIES) ||    \
    !defined(BH_D64_STAGES) || !defined(BH_D64_REGISTERS) || !defined(BH_D64_PERSISTENT) ||     \
    !defined(BH_D128_KEYS) || !defined(BH_D128_QUERIES) || !defined(BH_D128_STAGES) ||          \
    !defined(BH_D128_REGISTERS) || !defined(BH_D128_PERSISTENT) || !defined(BH_D256_KEYS) ||    \
    !defined(BH_D256_QUERIES) || !defined(BH_D256_STAGES) || !defined(BH_D256_REGISTERS) ||     \
    !defined(BH_D256_PERSISTENT) || !defined(BH_D64_DQ_IN_STAGE) ||                            \
    !defined(BH_D128_DQ_IN_STAGE) || !defined(BH_D256_DQ_IN_STAGE) ||                          \
    !defined(BH_PREPROCESS_ROWS) || !defined(BH_PREPROCESS_THREADS)
#error "fa_hopper_bwd.cu: compile it with the -DBH_ defines of day20's BackwardTile table"
#endif

constexpr int BH_BOX = 64;      // head-dim elements of one 128-byte swizzle row
constexpr int BH_DQ_BOX = 32;   // f32 columns of one 128-byte swizzle row of the dQ tile
constexpr int BH_THREADS = 128 * (1 + BH_CONSUMERS);  // producer + consumer warpgroups
static_assert(BH_CONSUMERS == 2,
              "two consumer warpgroups: dQ's split (a half of the head dim or of the queries "
              "each) and the split head dim's (half the queries, then half the columns) assume "
              "two");
// Two dS^T buffers are what lets one barrier per step suffice: a consumer writes buffer
// n % 2 at step n only after passing step n - 1's barrier, which every consumer reaches after
// its dQ product of step n - 2 (the last reader of that buffer) has completed.
static_assert(BH_DS_STAGES == 2, "one barrier per step needs two dS^T buffers");
static_assert(BH_PRODUCER_REGISTERS % 8 == 0 && BH_PRODUCER_REGISTERS >= 24, "setmaxnreg");

template <int D> struct BhTile;
#define BH_TILE(D)                                                                              \
    template <> struct BhTile<D> {                                                              \
        static constexpr int KEYS = BH_D##D##_KEYS, QUERIES = BH_D##D##_QUERIES,                 \
                             STAGES = BH_D##D##_STAGES,                                         \
                             REGISTERS = BH_D##D##_REGISTERS;                                   \
        static constexpr bool PERSISTENT = BH_D##D##_PERSISTENT != 0;                            \
        static constexpr bool DQ_IN_STAGE = BH_D##D##_DQ_IN_STAGE != 0;                        \
    };
BH_TILE(64)
BH_TILE(128)
BH_TILE(256)
#undef BH_TILE

template <int D> struct BhConfig : BhTile<D> {
    // Keys per block and queries per step: a consumer holds dK and dV (DW / 2 + DW / 2 f32 per
    // thread) across the loop and S^T, dP^T (QW / 2 each) per step.
    static constexpr int BN = BhTile<D>::KEYS, BM = BhTile<D>::QUERIES;
    // Split head dim: both consumers take the block's 64 keys, each half of the queries of S^T
    // and dP^T and half of the columns of dV, dK and dQ. Otherwise each takes 64 keys whole.
    static constexpr bool SPLIT = BN == 64;
    static constexpr int QW = SPLIT ? BM / 2 : BM;  // queries of this consumer's S^T, dP^T
    static constexpr int DW = SPLIT ? D / 2 : D;    // columns of this consumer's dK, dV
    static constexpr int DQ_COLS = SPLIT ? D / 2 : 64;  // columns of this consumer's dQ tile
    static_assert(D % BH_BOX == 0, "the head dim is a whole number of 64-element boxes");
    static_assert(BN == 64 * BH_CONSUMERS || (BN == 64 && D == 256),
                  "64 keys per consumer, or the split head dim's 64 keys at head dim 256");
    static_assert(BM == 64 || BM == 128,
                  "queries per step: whole 64-query boxes of dS^T, at most 128 (one dQ "
                  "product of 64 rows per consumer at head dim 64)");
    static_assert(SPLIT ? BM == 64 : D == 128 ? BM == 64 : BM == 128,
                  "dQ's split: head dim 128 halves the columns of 64 queries, 64 halves 128 "
                  "queries, the split head dim halves the columns of 64 queries");
    static_assert(BhTile<D>::STAGES >= 1, "at least one query tile in flight");
    static_assert(!BhTile<D>::PERSISTENT || !SPLIT,
                  "persistent blocks stage dK and dV in dS^T and dQ buffers laid out for 64 "
                  "keys a consumer (store_through_staging)");
    static_assert(!BhTile<D>::DQ_IN_STAGE || (SPLIT && !BhTile<D>::PERSISTENT),
                  "dQ through the stage: the split head dim's one-tile form (a consumer's columns "
                  "of a stage are the bytes of its dQ only where it owns half the head dim)");
    static_assert(BhTile<D>::REGISTERS % 8 == 0 && BhTile<D>::REGISTERS <= 256, "setmaxnreg");
    static_assert(128 * BH_PRODUCER_REGISTERS + BH_CONSUMERS * 128 * BhTile<D>::REGISTERS <=
                      65536,
                  "producer and consumer registers fit the SM's register file");
};

// wgmma descriptors are built from one 32-bit register (`wgmma_desc`): every tile
// sits at a constant offset from the 1024-byte aligned base. Built inside the loop from an
// opaque base (`bh_fresh`): otherwise the compiler hoists every k-step's 64-bit descriptor out
// of the loop and spills them.
__device__ __forceinline__ unsigned bh_fresh(unsigned v) {
    asm volatile("" : "+r"(v));
    return v;
}

// Shared-memory accesses by 32-bit address: the aligned base is computed through an integer,
// which leaves plain pointers generic (64-bit addresses, and the compiler keeps a dozen of
// them live and spills).
__device__ __forceinline__ void bh_st_u32(unsigned address, unsigned v) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(address), "r"(v) : "memory");
}
__device__ __forceinline__ void bh_st_f32x2(unsigned address, float a, float b) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(address), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ unsigned bh_ld_u32(unsigned address) {
    unsigned v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(address) : "memory");
    return v;
}
__device__ __forceinline__ float2 bh_ld_f32x2(unsigned address) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(address) : "memory");
    return v;
}

// ---------------------------------------------------------------------------------------------
// preprocess: D = rowsum(dO * O) and L log2 e, both transposed to [heads][batch][pitch] (a
// row per head and sequence, pitch = the longest sequence rounded up to 4): a query tile's
// values are one TMA box, and its start is 16-byte aligned, as the TMA requires of a box's
// innermost coordinate. A row that sees no key (L = -inf) gets L2 = +inf, so that
// exp2(s - L2) = 0 without a test. dq_accum zeroed (every mode adds into it).
// grid(ceil(max lq / BH_PREPROCESS_ROWS), heads, batch), block(BH_PREPROCESS_THREADS): a block
// takes BH_PREPROCESS_ROWS query rows of one head and sequence. A row's 16-byte pieces of O and
// dO (8 elements each; both start 16-byte aligned, which the launcher checks) lie on D / 8
// neighbouring threads, so a pass of the block covers BH_PREPROCESS_THREADS / (D / 8) rows, and
// up to four passes' loads are issued before the first is used. The block's bytes in flight are
// what sets the speed: with a warp per row and 16-byte loads, head dim 64 took 107 us where 128
// took 74 for the same bytes (day 20's notes); 64 rows a block bring it to 84.
template <typename T, int D>
__device__ __forceinline__ void bh_preprocess_rows(const T* __restrict__ o,
                                                   const T* __restrict__ d_o, const float* lse,
                                                   float* delta_t, float* lse2_t,
                                                   float* __restrict__ dq_accum, const int* cu_q,
                                                   int pitch) {
    constexpr int PIECES = D / 8;                                 // 16-byte pieces of a row
    constexpr int PER_PASS = BH_PREPROCESS_THREADS / PIECES;      // rows a pass covers
    constexpr int PASSES = BH_PREPROCESS_ROWS / PER_PASS;
    static_assert(PIECES <= 32 && BH_PREPROCESS_THREADS % 32 == 0 &&
                      BH_PREPROCESS_ROWS % PER_PASS == 0,
                  "a row's pieces within one warp, whole warps, whole passes");
    const int b = blockIdx.z, h = blockIdx.y, heads = gridDim.y;
    const int q0 = cu_q[b], lq = cu_q[b + 1] - q0;
    const int piece = threadIdx.x % PIECES;
    const int first = blockIdx.x * BH_PREPROCESS_ROWS + threadIdx.x / PIECES;
    // At most four passes' loads in flight a thread (head dim 256 takes its eight in two
    // rounds), so that three blocks fit an SM without spills.
    constexpr int IN_FLIGHT = PASSES < 4 ? PASSES : 4;
#pragma unroll
    for (int round = 0; round < PASSES; round += IN_FLIGHT) {
        // Held as loaded, 16 bytes in four registers, and unpacked only when used.
        uint4 o8[IN_FLIGHT], g8[IN_FLIGHT];
#pragma unroll
        for (int p = 0; p < IN_FLIGHT; ++p) {
            const int i = first + (round + p) * PER_PASS;
            o8[p] = g8[p] = make_uint4(0, 0, 0, 0);
            if (i < lq) {
                const index_t at = ((index_t)(q0 + i) * heads + h) * D + piece * 8;
                o8[p] = *reinterpret_cast<const uint4*>(o + at);
                g8[p] = *reinterpret_cast<const uint4*>(d_o + at);
            }
        }
#pragma unroll
        for (int p = 0; p < IN_FLIGHT; ++p) {
            const int i = first + (round + p) * PER_PASS;
            const Pack16<T> o_row = *reinterpret_cast<const Pack16<T>*>(&o8[p]);
            const Pack16<T> g_row = *reinterpret_cast<const Pack16<T>*>(&g8[p]);
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < 8; ++k) acc += to_f32(o_row.v[k]) * to_f32(g_row.v[k]);
            // The row's pieces: every lane takes part (a row past the end holds zeros).
#pragma unroll
            for (int lanes = PIECES / 2; lanes > 0; lanes /= 2)
                acc += __shfl_xor_sync(0xffffffffu, acc, lanes);
            if (i >= lq) continue;
            const index_t row = (index_t)(q0 + i) * heads + h;
            // The row's D floats of dq_accum as 2 x PIECES float4s, quads piece and PIECES +
            // piece, so that each store instruction covers whole 32-byte sectors (measured no
            // slower than a thread's two neighbouring quads, within the runs' spread).
            float4* zero = reinterpret_cast<float4*>(dq_accum + row * D);
            zero[piece] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            zero[PIECES + piece] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (piece == 0) {
                const index_t t_at = ((index_t)h * gridDim.z + b) * pitch + i;
                delta_t[t_at] = acc;
                const float l = lse[row];
                lse2_t[t_at] = l == NEG_INF ? POS_INF : l * LOG2E;
            }
        }
    }
}

template <typename T>
__device__ __forceinline__ void bh_preprocess(const T* o, const T* d_o, const float* lse,
                                              float* delta_t, float* lse2_t, float* dq_accum,
                                              const int* cu_q, int d, int pitch) {
    // The head dims the tiles take (the launcher refuses the others, and any other does nothing).
    if (d == 64) bh_preprocess_rows<T, 64>(o, d_o, lse, delta_t, lse2_t, dq_accum, cu_q, pitch);
    else if (d == 128) bh_preprocess_rows<T, 128>(o, d_o, lse, delta_t, lse2_t, dq_accum, cu_q, pitch);
    else if (d == 256) bh_preprocess_rows<T, 256>(o, d_o, lse, delta_t, lse2_t, dq_accum, cu_q, pitch);
}

#define BH_PREPROCESS(T, name)                                                                  \
    KERNEL void __launch_bounds__(BH_PREPROCESS_THREADS, 3)                                     \
        fa_hopper_bwd_preprocess_##name(const T* o, const T* d_o, const float* lse,             \
                                        float* delta_t, float* lse2_t, float* dq_accum,         \
                                        const int* cu_q, int d, int pitch) {                    \
        bh_preprocess(o, d_o, lse, delta_t, lse2_t, dq_accum, cu_q, d, pitch);                  \
    }
BH_PREPROCESS(bf16_t, bf16)
BH_PREPROCESS(f16_t, f16)

// ---------------------------------------------------------------------------------------------
// The main kernel: min(tiles, SMs) persistent blocks of BH_THREADS (head dim 256: a block per
// tile), the tiles numbered as a grid(ceil(max lk / keys per tile), kv_heads, batch) would be.

// The query tiles key tile j0 contributes to: from the first query that sees key j0 (causal)
// to the end of the sequence. A key tile n visits a prefix of the tiles key tile n + 1 visits,
// so every query tile's contributors are key tiles 0 .. some n (the deterministic order).
__device__ __forceinline__ int bh_first_tile(int j0, const Sequence& s, int causal, int bm) {
    return first_query(j0, s, causal) / bm;
}

// Step i (m_first <= i < m_end) of a block's walk over its query tiles: tile i + rotation,
// wrapped into [m_first, m_end).
__device__ __forceinline__ int bh_walk(int i, int rotation, int m_first, int m_end) {
    const int m = i + rotation;
    return m < m_end ? m : m - (m_end - m_first);
}

// Where box `box` (32 columns x 64 queries of f32, 8 KiB) of consumer wg's dQ of a step lies,
// from the storage's start: in the consumer's dQ tile, or in the step's stage `st` (dQ through
// the stage, head dim 256: boxes 0 and 1 in the consumer's columns of dO, 2 and 3 in its
// columns of Q; each 64-dim box of either holds one 32-column box of f32). After the step's
// meeting each consumer reads only its own columns of the stage, and of those dO is free once
// dV is done, Q once dK is.
template <typename T, int D>
__device__ __forceinline__ unsigned bh_dq_box(int st, int wg, int box) {
    using S = BhShared<T, D>;
    if constexpr (BhConfig<D>::DQ_IN_STAGE) {
        constexpr unsigned BOX = sizeof(S::q[0][0]);
        static_assert(BOX == 64 * BH_DQ_BOX * sizeof(float), "a 64-dim box of Q holds a dQ box");
        return (box < 2 ? S::at::d_o : S::at::q) + st * sizeof(S::q[0]) + (2 * wg + box % 2) * BOX;
    } else {
        return S::at::dq + wg * sizeof(S::dq[0]) + box * sizeof(S::dq[0][0]);
    }
}

// The deterministic order's turns. Key tile n's rank among the key tiles that add into query
// tile m (bm queries): n, or causal k - n, k the last key tile the query tile sees.
__device__ __forceinline__ int bh_rank(const Sequence& s, int causal, int n, int m, int bm,
                                       int bn) {
    const int last_row = min((m + 1) * bm, s.lq) - 1;
    return causal ? (key_end(last_row, s, causal) - 1) / bn - n : n;
}
// Waits until the query tile's counter reaches `turn`: the adds it counts are then visible.
__device__ __forceinline__ void bh_wait_turn(const int* counter, int turn) {
    int seen;
    do {
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
    } while (seen < turn);
}
// Counts `adds` more into the counter, after (release) the adds this thread has issued or seen.
__device__ __forceinline__ void bh_pass_turn(int* counter, int adds) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(counter), "r"(adds) : "memory");
}

// The dQ writer (one thread of the producer warpgroup): for every step of the block (the query
// tiles in bh_walk's order, as the consumers walk them), for each consumer, waits for its dQ
// half tile in shared memory, adds it into dq_accum with TMA reduce-adds (head dim 128: the
// consumer's 64 columns of the 64 queries; 64: all columns of its 64 queries; 256: its 128
// columns of the 64 queries), and hands the buffer back once the TMA has read it (head dim 256:
// the step's Q/dO stage, to the producer; in the deterministic mode once the adds are
// complete). Deterministic mode: first waits until the key tiles ranked before this one have
// added theirs into this query tile (the counter at twice the rank), adds both halves (they
// cover different elements, so their order does not matter), and bumps the counter by two once
// both are complete in global memory: one wait on other blocks and one on the adds per step.
// Only this thread waits on other blocks; the consumers go on with the next step meanwhile.
//
// It runs on the producer's 24 registers, so it holds shared memory as one 32-bit address
// (`storage`, the members at their offsets from it) and walks the block's (head, query tile)
// steps.
template <typename T, int D>
__device__ __forceinline__ void bh_dq_writer(const TmaDescriptor* map_dq, unsigned storage,
                                             int* semaphores, int ordered,
                                             const Sequence& s, int causal, int n, int h0,
                                             int group, int heads, int m_first, int rotation,
                                             int m_end, int q_tiles, int z, unsigned& phase) {
    using C = BhConfig<D>;
    using S = BhShared<T, D>;
    constexpr int BM = C::BM, BOXES = C::DQ_COLS / BH_DQ_BOX;
    const unsigned dq_full = storage + S::at::dq_full;
    // dQ through the stage (a block of one tile, its ring from stage 0): `phase` counts the
    // steps modulo 4; a step's stage is its parity (bit 0), and the stage's dq_full barriers
    // (one per stage and consumer, so that a consumer never completes one twice before the
    // writer has waited: its next arrival there needs the stage back) complete every other
    // step (bit 1). Otherwise dq_full completes every step: `phase` is its parity.
    static_assert(!C::DQ_IN_STAGE || C::STAGES == 2, "the stage is the step's parity");
    for (int h = h0; h < h0 + group; ++h)
    for (int i = m_first; i < m_end; ++i) {
        const int m = bh_walk(i, rotation, m_first, m_end);
        int* counter = semaphores + ((index_t)z * heads + h) * q_tiles + m;
        const int st = C::DQ_IN_STAGE ? phase & 1 : 0;
        for (int wg = 0; wg < BH_CONSUMERS; ++wg) {
            mbarrier_wait(dq_full + 8 * (st * BH_CONSUMERS + wg), C::DQ_IN_STAGE ? phase >> 1 : phase);
            if (ordered && wg == 0) {
                // The tiles ranked before, whole.
                bh_wait_turn(counter, BH_CONSUMERS * bh_rank(s, causal, n, m, BM, C::BN));
                fence_proxy_async_global();
            }
            const int x0 = D == 64 ? 0 : wg * C::DQ_COLS;
            const int y0 = s.q0 + m * BM + (BM == 128 ? wg * 64 : 0);
            // Rolled, as the producer's loads: this thread has 24 registers.
#pragma unroll 1
            for (int box = 0; box < BOXES; ++box)
                tma_reduce_add_3d(map_dq, storage + bh_dq_box<T, D>(st, wg, box),
                                  x0 + box * BH_DQ_BOX, y0, h);
            bulk_commit();
            if constexpr (!C::DQ_IN_STAGE) {
                if (!ordered) {
                    bulk_wait_read<0>();
                    mbarrier_arrive(storage + S::at::dq_empty + 8 * wg);
                }
            }
        }
        if (ordered) {
            bulk_wait<0>();  // both halves' adds are in global memory
            fence_proxy_async_global();
            bh_pass_turn(counter, BH_CONSUMERS);
        } else if (C::DQ_IN_STAGE) {
            bulk_wait_read<0>();
        }
        if constexpr (C::DQ_IN_STAGE) {
            mbarrier_arrive(storage + S::at::q_empty + 8 * st);  // the stage is read
        } else if (ordered) {
            for (int wg = 0; wg < BH_CONSUMERS; ++wg)
                mbarrier_arrive(storage + S::at::dq_empty + 8 * wg);
        }
        phase = C::DQ_IN_STAGE ? (phase + 1) & 3 : phase ^ 1;
    }
}

// The block's work: key tile n (its first key j0) of kv head kvh of sequence s, and the query
// tiles that see it, m_first .. m_end - 1, walked in bh_walk's order from `rotation` for each
// of the kv head's `group` query heads.
struct BhBlock {
    Sequence s;
    int z, n, j0, kvh, group;
    int m_first, m_end, rotation;
};

// Which block this is: kv head fastest within sections of head_section kv heads (the header's
// order; the blocks running side by side share their heads' Q and dO in the L2), key tiles in
// order (causal: the longest first), or in deterministic mode causal, the last key tile first,
// as the ordered dQ adds need. False for a tile past the sequence's last key tile. Tile
// `tile` of the launch's key_tiles x kv_heads x batch, numbered as a grid of that shape would
// number its blocks.
template <typename T, int D>
__device__ __forceinline__ bool bh_block(const FaHopperBwdParams<T>& params, int tile, BhBlock& b) {
    constexpr int BN = BhConfig<D>::BN, BM = BhConfig<D>::BM;
    const int kv_heads = params.kv_heads, head_section = params.head_section;
    const int ordered = params.ordered, causal = params.causal;
    const int gx = params.key_tiles, per_z = gx * kv_heads;
    const int z = tile / per_z;
    const Sequence s = sequence(params.cu_q, params.cu_k, z);
    // quote: block_order
    const int key_tiles = (s.lk + BN - 1) / BN;
    const int at = tile - z * per_z;
    const int first = at / (head_section * gx) * head_section;
    const int heads_here = min(head_section, kv_heads - first);
    const int within = at - first * gx;
    const int kvh = first + within % heads_here;
    int n = within / heads_here;
    if (ordered && causal && n < key_tiles) n = key_tiles - 1 - n;
    if (n >= key_tiles) return false;  // past this sequence's keys: skipped, or no work
    const int j0 = n * BN;
    // end quote: block_order
    const int m_first = bh_first_tile(j0, s, causal, BM);
    const int m_end = (s.lq + BM - 1) / BM;
    // Fast mode: key tile n starts its walk n query tiles in (and wraps), so that the key
    // tiles running side by side add into different dQ tiles rather than all into the same
    // one at once. Deterministic mode: in order (the ranks assume it). Head dim 64 walks in
    // order: its consumers have no registers for the wrap (they spilled 92 bytes more).
    constexpr bool STAGGER = D != 64;
    const int rotation = !STAGGER || ordered || m_end <= m_first ? 0 : n % (m_end - m_first);
    b = {s, z, n, j0, kvh, params.heads / kv_heads, m_first, m_end, rotation};
    return true;
}

// The loading thread of the producer warpgroup: K and V of the block's keys once, then Q, dO,
// L and D of every step through the ring.
template <typename T, int D>
__device__ __forceinline__ void bh_producer(const FaHopperBwdParams<T>& params,
                                            BhShared<T, D>& shared, const BhBlock& b,
                                            PipelineState<BhConfig<D>::STAGES>& ring,
                                            unsigned kv_parity) {
    using C = BhConfig<D>;
    using S = BhShared<T, D>;
    constexpr int BM = C::BM, STAGES = C::STAGES, BOXES = D / BH_BOX;
    // The maps stay in parameter space, where the TMA reads them.
    const TmaDescriptor *map_q = &params.map_q, *map_k = &params.map_k, *map_v = &params.map_v;
    const TmaDescriptor *map_do = &params.map_do, *map_lse2 = &params.map_lse2;
    const TmaDescriptor *map_delta = &params.map_delta;
    const Sequence& s = b.s;
    const int kvh = b.kvh, group = b.group, m_first = b.m_first, m_end = b.m_end;
    const int rotation = b.rotation;
    // K and V: persistent, once the last tile's products are done with them (kv_empty), after
    // this tile's first Q and dO are on their way; a block of one tile loads them first, as
    // its consumers need them first (and its step loop then keeps no flag in the producer's 24
    // registers). The bytes a barrier expects are those of the members its copies fill.
    const auto load_kv = [&]() {
        if constexpr (C::PERSISTENT) mbarrier_wait(shared.kv_empty, kv_parity ^ 1);
        mbarrier_arrive_expect_tx(shared.kv_full, sizeof(S::k) + sizeof(S::v));
#pragma unroll 1
        for (int box = 0; box < BOXES; ++box) {
            tma_load_3d(shared.k[0][box], map_k, shared.kv_full, box * BH_BOX, s.k0 + b.j0, kvh);
            tma_load_3d(shared.v[0][box], map_v, shared.kv_full, box * BH_BOX, s.k0 + b.j0, kvh);
        }
    };
    bool kv_loaded = !C::PERSISTENT;
    if (kv_loaded) load_kv();
    // quote: producer
    // The bytes a stage's barrier expects are those of the members its copies fill. The
    // producer keeps 32-bit shared-memory addresses (the members at their offsets from
    // the storage's): pointers would take two of its 24 registers each.
    constexpr unsigned STAGE_BYTES =
        sizeof(S::q[0]) + sizeof(S::d_o[0]) + sizeof(S::lse2[0]) + sizeof(S::delta[0]);
    constexpr unsigned Q_STAGE = sizeof(S::q[0]), Q_BOX = sizeof(S::q[0][0]),
                       LD_STAGE = sizeof(S::lse2[0]);
    const unsigned smem = smem_u32(&shared);
    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int i = m_first; i < m_end; ++i) {
            const int m = bh_walk(i, rotation, m_first, m_end);
            const int st = ring.stage(), row0 = s.q0 + m * BM;
            const unsigned full = smem + S::at::q_full + 8 * st;
            mbarrier_wait(smem + S::at::q_empty + 8 * st, ring.phase() ^ 1);
            mbarrier_arrive_expect_tx(full, STAGE_BYTES);
            // Rolled: unrolled, the producer's 24 registers spill the boxes' addresses.
#pragma unroll 1
            for (int box = 0; box < BOXES; ++box) {
                const unsigned at = st * Q_STAGE + box * Q_BOX;
                tma_load_3d(smem + S::at::q + at, map_q, full, box * BH_BOX, row0, h);
                tma_load_3d(smem + S::at::d_o + at, map_do, full, box * BH_BOX, row0, h);
            }
            const int span = h * params.batch + b.z;  // L, D row of (head, sequence)
            tma_load_3d(smem + S::at::lse2 + st * LD_STAGE, map_lse2, full, m * BM, span, 0);
            tma_load_3d(smem + S::at::delta + st * LD_STAGE, map_delta, full, m * BM, span, 0);
            ring.advance();
            if (!kv_loaded) {
                load_kv();
                kv_loaded = true;
            }
        }
    }
    if (!kv_loaded) load_kv();  // a tile no query sees: its consumers still wait for K and V
    // end quote: producer
}

// One step's operands in shared memory: its Q/dO stage `st`, its first query `i0`, where its
// Q and dO tiles start, and the storage's base as wgmma descriptors (`b16`, in 16-byte units)
// and as shared-memory addresses (`b32`) take it.
struct BhStep {
    int st, i0, q_at, do_at;
    unsigned b16, b32;
};

// A consumer warpgroup: its keys' dK and dV in registers for the whole kernel, and per step
// the five products. Its state lives in these members (in registers: every index into the
// arrays is a constant once the loops are unrolled); the steps are the member functions, and
// run() walks the block's query tiles.
template <typename T, int D>
struct BhConsumer {
    using C = BhConfig<D>;
    using S = BhShared<T, D>;
    static constexpr int BN = C::BN, BM = C::BM, STAGES = C::STAGES;
    static constexpr bool SPLIT = C::SPLIT;
    static constexpr int QW = C::QW, DW = C::DW, DQ_COLS = C::DQ_COLS;
    // Members by offset from the storage's base, and the bytes of one stage or buffer of each.
    static constexpr int Q_STAGE = sizeof(S::q[0]), DS_BUFFER = sizeof(S::ds[0]);
    static_assert(sizeof(S::d_o[0]) == Q_STAGE, "Q and dO stages of one size");
    static constexpr int A_BOX = BM == 128 ? 1 : 0;
    static constexpr int K_ROWS = S::at::k, V_ROWS = S::at::v;  // + this consumer's keys

    S& shared;
    const BhBlock& b;
    const float scale, scale_log2;
    const int causal;
    const int wg, tid, warp, lane, g, t;
    // This consumer's keys (the block's rows of K and V it multiplies), the first of its
    // queries in a step, and the first of its columns of dV, dK and dQ.
    const int key_row0, query0, col0;
    // This thread's two keys (accumulator rows) of S^T, dP^T, dV and dK.
    const int key0;
    // Keys of this consumer that every query of a tile starting at i0 sees: no mask needed.
    const int wg_key_end;
    // The first 64-column box of K that this consumer's dQ product reads, and its key rows of
    // 128 bytes into each K or V box.
    const int dq_box0, wg_rows;
    const unsigned base32, base16;
    // The first query that sees each of the thread's two keys (lq: none does), so that the
    // mask is two compares: query i sees key j iff seen_from[j] <= i < lq (attention.cuh's
    // rule, bottom-right causal; without the mask every query sees every key < lk).
    int seen_from[2];
    float dv_acc[DW / 2], dk_acc[DW / 2];

    __device__ __forceinline__ BhConsumer(const FaHopperBwdParams<T>& params, S& shared,
                                          const BhBlock& b, int wg)
        : shared(shared), b(b), scale(params.scale), scale_log2(params.scale * LOG2E),
          causal(params.causal), wg(wg),
          tid(threadIdx.x % 128), warp(tid / 32), lane(tid % 32), g(lane / 4), t(lane % 4),
          key_row0(SPLIT ? 0 : wg * 64), query0(SPLIT ? wg * QW : 0), col0(SPLIT ? wg * DW : 0),
          key0(b.j0 + key_row0 + warp * 16 + g), wg_key_end(b.j0 + key_row0 + 64),
          dq_box0(SPLIT ? wg * (DQ_COLS / BH_BOX) : D == 128 ? wg : 0), wg_rows(key_row0 * 128),
          base32(smem_u32(&shared)), base16((base32 & 0x3FFFF) >> 4) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int key = key0 + 8 * r;
            seen_from[r] = key < b.s.lk ? first_query(key, b.s, causal) : b.s.lq;
        }
#pragma unroll
        for (int i = 0; i < DW / 2; ++i) dv_acc[i] = dk_acc[i] = 0.0f;
    }

    // acc = keys (K or V, this consumer's rows from `keys_at`) times the queries' rows (Q or dO,
    // from `queries_at`) transposed, over the head dim: k16 steps 32 bytes apart inside a 64-wide
    // box, the boxes BN (keys) or BM (queries) rows of 128 bytes apart; one wgmma group.
    __device__ __forceinline__ void issue_transposed(const BhStep& step, float (&acc)[QW / 2],
                                                     int keys_at, int queries_at) {
        const int my_queries = query0 * 128;  // this consumer's query rows in each box
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const int box = kk / 4, within = (kk % 4) * 32;
            wgmma_m64k16<QW, T>(acc, wgmma_desc(step.b16, keys_at + wg_rows + box * BN * 128 + within, 16),
                                wgmma_desc(step.b16, queries_at + my_queries + box * BM * 128 + within, 16), kk > 0);
        }
        wgmma_commit();
    }

    // S^T = K Q^T and dP^T = V dO^T, two groups: S^T can be waited for alone.
    __device__ __forceinline__ void issue_scores(const BhStep& step, float (&sc)[QW / 2],
                                                 float (&dp)[QW / 2]) {
        wgmma_fence();
        issue_transposed(step, sc, K_ROWS, step.q_at);
        issue_transposed(step, dp, V_ROWS, step.do_at);
    }

    // P = exp2(S scale log2 e - L log2 e), 0 where masked, while dP^T runs; then dS = P (dP - D)
    // in place of dP. Element e of 8-column block j: key key0 + 8 (e / 2), query
    // i0 + query0 + 8j + 2t + e % 2.
    __device__ __forceinline__ void probabilities(BhStep& step, float (&sc)[QW / 2],
                                                  float (&dp)[QW / 2]) {
        const Sequence& s = b.s;
        const int i0 = step.i0, st = step.st;
        step.b32 = bh_fresh(base32);
        const unsigned l2 = step.b32 + S::at::lse2 + (st * BM + query0) * 4 + 8 * t;
        const unsigned dl = step.b32 + S::at::delta + (st * BM + query0) * 4 + 8 * t;
        const bool needs_mask = i0 + BM > s.lq || wg_key_end > key_end(i0, s, causal);
        wgmma_wait<1>();
        wgmma_fence_operands(sc);
#pragma unroll
        for (int j = 0; j < QW / 8; ++j) {
            const float2 lse2 = bh_ld_f32x2(l2 + 32 * j);
#pragma unroll
            for (int e = 0; e < 4; ++e)
                sc[4 * j + e] = ex2_approx(fmaf(sc[4 * j + e], scale_log2, -(e % 2 ? lse2.y : lse2.x)));
        }
        if (needs_mask)
            mask_fragment<QW / 8>(sc, t, 0.0f, [&](int r, int query) {
                const int i = i0 + query0 + query;
                return i >= seen_from[r] && i < s.lq;
            });
        wgmma_wait<0>();
        wgmma_fence_operands(dp);
#pragma unroll
        for (int j = 0; j < QW / 8; ++j) {
            const float2 delta = bh_ld_f32x2(dl + 32 * j);
#pragma unroll
            for (int e = 0; e < 4; ++e)
                dp[4 * j + e] = sc[4 * j + e] * (dp[4 * j + e] - (e % 2 ? delta.y : delta.x));
        }
    }

    // P^T and dS^T as 16-bit A operands: two 8-query accumulator blocks are one k16 step
    // (register x: key + 8 (x % 2), queries 16kk + 8 (x / 2) + 2t, +1). From here on only these
    // halves live: S^T's and dP^T's f32 registers are free before any of the three products
    // is issued (issued earlier, they kept ptxas from leaving the products asynchronous:
    // C7512).
    __device__ __forceinline__ void pack(const float (&sc)[QW / 2], const float (&dp)[QW / 2],
                                         unsigned (&pa)[QW / 16][4], unsigned (&da)[QW / 16][4]) {
#pragma unroll
        for (int kk = 0; kk < QW / 16; ++kk)
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                pa[kk][x] = pack2<T>(sc[8 * kk + 2 * x], sc[8 * kk + 2 * x + 1]);
                da[kk][x] = pack2<T>(dp[8 * kk + 2 * x], dp[8 * kk + 2 * x + 1]);
            }
    }

    // dS^T to shared memory (buffer ds_stage) as the MN-major A operand of dQ = dS K: key rows
    // of 128 bytes (64 queries, one box per 64 queries), 16-byte chunks swizzled by key % 8.
    // One stmatrix per k16 step: the four 8 x 8 blocks of the warp's 16 keys x 16 queries, each
    // row one 16-byte chunk. Lane l names row l % 8 of 8 x 8 block l / 8, blocks in the
    // accumulator's order (keys +8 for odd blocks, queries +8 for the upper two). Split head
    // dim: P^T goes beside it, in the same layout (the K-major A operand of dV, as dS^T is dK's).
    __device__ __forceinline__ void store_ds(const BhStep& step, int ds_stage,
                                             const unsigned (&pa)[QW / 16][4],
                                             const unsigned (&da)[QW / 16][4]) {
        const int key = key_row0 + warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
        const unsigned row = step.b32 + S::at::ds + ds_stage * DS_BUFFER + (key / 8) * 1024 +
                             (key % 8) * 128;
#pragma unroll
        for (int kk = 0; kk < QW / 16; ++kk) {
            const int q = query0 + 16 * kk + 8 * (lane / 16), box = q / 64, chunk = (q % 64) / 8;
            const unsigned at = row + box * BN * 128 + ((chunk ^ (key % 8)) * 16);
            stmatrix_x4(at, da[kk]);
            if constexpr (SPLIT) stmatrix_x4(at + (S::at::pt - S::at::ds), pa[kk]);
        }
        fence_proxy_async_shared();
    }

    // dV += P^T dO, dQ = dS K, dK += dS^T Q, where each consumer has 64 keys of its own (head
    // dims 64 and 128): P^T and dS^T from registers.
    __device__ __forceinline__ void products(const BhStep& step, int ds_stage,
                                             unsigned (&pa)[QW / 16][4],
                                             unsigned (&da)[QW / 16][4], float (&dq)[DQ_COLS / 2]) {
        const unsigned b16 = step.b16;
        const int q_at = step.q_at, do_at = step.do_at;
        const int ds_at = S::at::ds + ds_stage * DS_BUFFER;
        // quote: consumer_products
        // dV += P^T dO: B is MN-major (dims along memory), a k16 step is 16 query rows
        // (2048 bytes) down, the 64-dim boxes BM x 128 bytes apart. It runs while the
        // consumers meet.
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk)
            wgmma_m64k16_rs<D, T, 1>(dv_acc, pa[kk], wgmma_desc(b16, do_at + kk * 2048, BM * 128), 1);
        wgmma_commit();

        named_barrier_sync(ALL_CONSUMERS_BARRIER, 128 * BH_CONSUMERS);  // all of dS^T written

        // dQ = dS K over the tile's keys. Head dim 128: this consumer's 64 columns (K
        // box wg) of all 64 queries; head dim 64: all 64 columns of its 64 queries (dS
        // box wg). Both operands MN-major, k16 steps 16 key rows down.
        const int my_ds = ds_at + A_BOX * wg * BN * 128;
        const int k_at = S::at::k + dq_box0 * BN * 128;
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
            wgmma_m64k16<64, T, 1, 1>(dq, wgmma_desc(b16, my_ds + kk * 2048, BN * 128),
                                      wgmma_desc(b16, k_at + kk * 2048, BN * 128), kk > 0);
        wgmma_commit();
        wgmma_wait<1>();  // dV is done: P^T's registers are free
        wgmma_fence_operands(dv_acc);
#pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) wgmma_fence_operands(pa[kk]);

        // dK += dS^T Q, the same shape as dV; it runs while dQ goes to shared memory.
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk)
            wgmma_m64k16_rs<D, T, 1>(dk_acc, da[kk], wgmma_desc(b16, q_at + kk * 2048, BM * 128), 1);
        wgmma_commit();
        wgmma_wait<1>();  // dQ is done
        wgmma_fence_operands(dq);
        // end quote: consumer_products
    }

    // acc (DW columns) += A B over the block's queries, one wgmma group: A P^T or dS^T at
    // `a_at` (K-major, k16 steps 32 bytes along a row, the boxes BN rows of 128 bytes apart),
    // B dO or Q at `b_at` (MN-major, k16 steps 16 query rows down, boxes BM x 128 bytes apart).
    __device__ __forceinline__ void accumulate_split(float (&acc)[DW / 2], unsigned b16, int a_at,
                                                     int b_at) {
#pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) {
            const int a = (kk / 4) * BN * 128 + (kk % 4) * 32;
            wgmma_m64k16<DW, T, 0, 1>(acc, wgmma_desc(b16, a_at + a, 16),
                                      wgmma_desc(b16, b_at + kk * 2048, BM * 128), 1);
        }
        wgmma_commit();
    }

    // The same three products where the consumers split the head dim (head dim 256): dV +=
    // P^T dO and dK += dS^T Q over this consumer's DW columns, A being P^T or dS^T (K-major:
    // queries along memory, k16 steps 32 bytes along a row), B dO or Q from this consumer's
    // first column box (MN-major, k16 steps 16 query rows down, the boxes BM x 128 bytes
    // apart); dQ = dS K between them, as above with this consumer's DQ_COLS columns of K.
    __device__ __forceinline__ void products_split(const BhStep& step, int ds_stage,
                                                   float (&dq)[DQ_COLS / 2]) {
        const unsigned b16 = step.b16;
        const int q_at = step.q_at, do_at = step.do_at;
        const int ds_at = S::at::ds + ds_stage * DS_BUFFER;
        named_barrier_sync(ALL_CONSUMERS_BARRIER, 128 * BH_CONSUMERS);  // P^T, dS^T written
        const int pt_at = S::at::pt + ds_stage * DS_BUFFER;
        const int my_cols = (col0 / BH_BOX) * BM * 128;
        wgmma_fence();
        accumulate_split(dv_acc, b16, pt_at, do_at + my_cols);  // dV += P^T dO
        const int k_at = S::at::k + dq_box0 * BN * 128;
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
            wgmma_m64k16<DQ_COLS, T, 1, 1>(dq, wgmma_desc(b16, ds_at + kk * 2048, BN * 128),
                                           wgmma_desc(b16, k_at + kk * 2048, BN * 128), kk > 0);
        wgmma_commit();
        accumulate_split(dk_acc, b16, ds_at, q_at + my_cols);  // dK += dS^T Q
        wgmma_wait<1>();  // dV and dQ are done
        wgmma_fence_operands(dv_acc);
        wgmma_fence_operands(dq);
    }

    // quote: consumer_dq_out
    // Columns 8 j0 .. 8 j1 - 1 of this consumer's dQ to shared memory, in 32-column boxes of
    // 64 rows, 128-byte swizzled, as the TMA's reduce-add reads a box: row `row` of box k at
    // row_at(k, row).
    template <typename RowAt>
    __device__ __forceinline__ void dq_boxes(RowAt row_at, int j0, int j1,
                                             const float (&dq)[DQ_COLS / 2]) {
#pragma unroll
        for (int j = j0; j < j1; ++j)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = warp * 16 + g + 8 * r, c = 8 * (j % 4) + 2 * t;
                const unsigned at = row_at(j / 4, row) + (((c / 4) ^ (row % 8)) * 16) + (c % 4) * 4;
                bh_st_f32x2(at, dq[4 * j + 2 * r], dq[4 * j + 2 * r + 1]);
            }
    }

    // dQ to its tile in shared memory once the dQ writer's TMA has read the last one; the
    // writer adds it into dq_accum.
    __device__ __forceinline__ void dq_out(const BhStep& step, unsigned dq_phase,
                                           const float (&dq)[DQ_COLS / 2]) {
        const unsigned my_dq = step.b32 + bh_dq_box<T, D>(0, wg, 0);
        mbarrier_wait(&shared.dq_empty[wg], dq_phase ^ 1);
        const auto row_at = [&](int box, int row) {
            return my_dq + (box * BH_DQ_BOX * 64 + row * BH_DQ_BOX) * 4;
        };
        dq_boxes(row_at, 0, DQ_COLS / 8, dq);
        fence_proxy_async_shared();
        mbarrier_arrive(&shared.dq_full[wg]);
    }
    // end quote: consumer_dq_out

    // quote: consumer_dq_to_stage
    // Head dim 256: dQ to the step's stage (bh_dq_box), in two halves. Boxes 0 and 1 once dV
    // is done (this consumer's columns of dO are free), 2 and 3 once dK is (its columns of Q);
    // then the dQ writer is told, and it hands the stage back to the producer once its TMA has
    // read them.
    __device__ __forceinline__ void dq_to_stage(const BhStep& step, int half,
                                                const float (&dq)[DQ_COLS / 2]) {
        const auto row_at = [&](int box, int row) {
            return step.b32 + bh_dq_box<T, D>(step.st, wg, box) + row * BH_DQ_BOX * 4;
        };
        dq_boxes(row_at, 8 * half, 8 * half + 8, dq);
        if (half == 1) {
            fence_proxy_async_shared();
            mbarrier_arrive(&shared.dq_full[step.st * BH_CONSUMERS + wg]);
        }
    }
    // end quote: consumer_dq_to_stage

    // The tile's steps: per query head of the kv head, per query tile, the five products. The
    // ring, dQ's phase and the dS^T buffer go on from the block's previous tile.
    // dQ's buffer is used once a step, and once more by each staged epilogue: its phase is the
    // step's parity (the dS^T buffer's) flipped by the epilogues staged so far (`tiles`, bit 1).
    // `tiles` bit 0 is K and V's phase.
    __device__ __forceinline__ static int step_parity(const PipelineState<STAGES>& ring) {
        static_assert(STAGES == 1 || STAGES == 2, "dS^T's buffer follows the ring");
        return STAGES == 2 ? ring.stage() : (int)ring.phase();
    }
    __device__ __forceinline__ void run(PipelineState<STAGES>& ring, unsigned tiles) {
        mbarrier_wait(shared.kv_full, tiles & 1);
        for (int h = b.kvh * b.group; h < (b.kvh + 1) * b.group; ++h) {
            for (int i = b.m_first; i < b.m_end; ++i) {
                const int m = bh_walk(i, b.rotation, b.m_first, b.m_end);
                const int st = ring.stage();
                // The dS^T buffer alternates step by step, as the ring's stage (two stages) or
                // its phase (one) does.
                const int ds_stage = step_parity(ring);
                const unsigned dq_phase = ds_stage ^ ((tiles >> 1) & 1);
                BhStep step{st, m * BM, S::at::q + st * Q_STAGE, S::at::d_o + st * Q_STAGE, 0, 0};
                float sc[QW / 2], dp[QW / 2];
                mbarrier_wait(&shared.q_full[st], ring.phase());
                step.b16 = bh_fresh(base16);
                issue_scores(step, sc, dp);
                probabilities(step, sc, dp);
                unsigned pa[QW / 16][4], da[QW / 16][4];
                pack(sc, dp, pa, da);
                store_ds(step, ds_stage, pa, da);
                float dq[DQ_COLS / 2];
                if constexpr (!SPLIT)
                    products(step, ds_stage, pa, da, dq);
                else
                    products_split(step, ds_stage, dq);
                if constexpr (C::DQ_IN_STAGE)
                    dq_to_stage(step, 0, dq);  // dV is done
                else
                    dq_out(step, dq_phase, dq);
                wgmma_wait<0>();  // dK is done: Q, dO, L and D of this stage are read
                wgmma_fence_operands(dk_acc);
                if constexpr (!SPLIT) {
#pragma unroll
                    for (int kk = 0; kk < BM / 16; ++kk) wgmma_fence_operands(da[kk]);
                }
                if constexpr (C::DQ_IN_STAGE)
                    dq_to_stage(step, 1, dq);  // the dQ writer frees the stage
                else if (lane == 0)
                    mbarrier_arrive(&shared.q_empty[st]);
                ring.advance();
            }
        }
    }

    // Whether this consumer's 64 keys all lie inside the sequence, so that dK and dV can leave
    // by whole TMA boxes (a box past the sequence's end would write the next sequence's keys).
    __device__ __forceinline__ bool whole_keys() const {
        return b.j0 + key_row0 + 64 <= b.s.lk;
    }

    // Box `i` of this consumer's staged dK (i < DW / 64) and dV (the next DW / 64): 64 keys x
    // 64 dims, 8 KiB. A block of one tile stages them where its rows of K and V were: no tile
    // comes after. A persistent block's K and V are the next tile's, loading meanwhile, so it
    // stages them in buffers that no product of the tile reads any more and that no other
    // consumer writes before this one's next tile: its rows of the two dS^T buffers and its dQ
    // tile (head dim 128), its rows of dS^T (64).
    __device__ __forceinline__ unsigned char* staging_box(int i) {
        if constexpr (!C::PERSISTENT) {
            constexpr int BOXES = DW / BH_BOX;
            const int box = col0 / BH_BOX + i % BOXES;
            return reinterpret_cast<unsigned char*>(i < BOXES ? &shared.k[0][box][key_row0][0]
                                                              : &shared.v[0][box][key_row0][0]);
        } else if constexpr (D == 128) {
            unsigned char* dq_tile = reinterpret_cast<unsigned char*>(&shared.dq[wg][0][0][0]);
            static_assert(sizeof(S::dq[0]) == 2 * 8192 && BH_DS_STAGES == 2, "4 boxes");
            return i < 2 ? reinterpret_cast<unsigned char*>(&shared.ds[i][0][key_row0][0])
                         : dq_tile + (i - 2) * 8192;
        } else {
            static_assert(D == 64 && sizeof(S::ds[0]) == 2 * 128 * 64 * sizeof(T), "2 boxes");
            return reinterpret_cast<unsigned char*>(&shared.ds[0][i][key_row0][0]);
        }
    }

    // quote: consumer_store_through_staging
    // dK = scale dS^T Q and dV through shared memory: stmatrix writes the packed accumulators
    // in the TMA's swizzled layout, four 8 x 8 blocks at a time, into staging boxes (above),
    // then one thread stores each 64-dim box of the 64 keys with the TMA. In a persistent
    // block its dQ tile is taken as a step's dQ is (dq_empty, then the writer's part played by
    // this consumer's arrival once the TMA has read the boxes), and the consumer goes on only
    // then: its next tile writes these buffers again. The caller has made sure that no product
    // still reads the boxes' buffers (a block of one tile stages in K and V, whose rows the
    // other consumer's dQ reads; a persistent block in this consumer's rows of dS^T, which
    // that dQ reads too, and in its dQ tile).
    __device__ __forceinline__ void store_through_staging(const TmaDescriptor* map_dk,
                                                          const TmaDescriptor* map_dv,
                                                          unsigned dq_phase) {
        const int box_row = warp * 16 + 8 * ((lane / 8) % 2) + lane % 8;
        constexpr int BOXES = DW / BH_BOX;
        const int box0 = col0 / BH_BOX;
        const float dk_scale[2] = {scale, scale}, dv_scale[2] = {1.0f, 1.0f};
        if constexpr (C::PERSISTENT)
            mbarrier_wait(&shared.dq_empty[wg], dq_phase ^ 1);  // the writer has read the last dQ
#pragma unroll
        for (int box = 0; box < BOXES; ++box) {
            stmatrix_box<T>(staging_box(box), box_row, lane, dk_acc, box * (BH_BOX / 8), dk_scale);
            stmatrix_box<T>(staging_box(BOXES + box), box_row, lane, dv_acc, box * (BH_BOX / 8),
                            dv_scale);
        }
        fence_proxy_async_shared();  // these writes, before the TMA reads them
        named_barrier_sync(consumer_barrier(wg), 128);
        if (tid == 0) {
            const int token = b.s.k0 + b.j0 + key_row0;
#pragma unroll
            for (int box = 0; box < BOXES; ++box) {
                const int x = (box0 + box) * BH_BOX;
                tma_store_3d(map_dk, staging_box(box), x, token, b.kvh);
                tma_store_3d(map_dv, staging_box(BOXES + box), x, token, b.kvh);
            }
            bulk_commit();
            bulk_wait_read<0>();  // the boxes are read: the buffers may be written again
            if constexpr (C::PERSISTENT) mbarrier_arrive(&shared.dq_empty[wg]);
        }
        if constexpr (C::PERSISTENT) named_barrier_sync(consumer_barrier(wg), 128);
    }
    // end quote: consumer_store_through_staging

    // dK = scale dS^T Q and dV, this thread's two keys and this consumer's columns, straight
    // from the accumulators (the keys of a consumer that the sequence's end cuts).
    __device__ __forceinline__ void store(T* dk, T* dv, int kv_heads) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int key = key0 + 8 * r;
            if (key >= b.s.lk) continue;
            const index_t token = (index_t)(b.s.k0 + key) * kv_heads + b.kvh;
            unsigned* out_k = reinterpret_cast<unsigned*>(dk + token * D + col0);
            unsigned* out_v = reinterpret_cast<unsigned*>(dv + token * D + col0);
#pragma unroll
            for (int j = 0; j < DW / 8; ++j) {
                out_k[4 * j + t] = pack2<T>(dk_acc[4 * j + 2 * r] * scale, dk_acc[4 * j + 2 * r + 1] * scale);
                out_v[4 * j + t] = pack2<T>(dv_acc[4 * j + 2 * r], dv_acc[4 * j + 2 * r + 1]);
            }
        }
    }
};

// The tile slot's readers: every consumer thread and the dQ writer.
constexpr int BH_TILE_READERS = 128 * BH_CONSUMERS + 1;

// The next tile from the slot (-1: none left). Each reader waits, reads and frees the slot
// itself: the producer writes the next tile only once every reader has read this one.
// quote: take_tile
template <typename S>
__device__ __forceinline__ int bh_take_tile(S& shared, unsigned& parity) {
    mbarrier_wait(shared.tile_full, parity);
    parity ^= 1;
    const int tile = (int)bh_ld_u32(smem_u32(&shared) + S::at::tile_slot);
    mbarrier_arrive(shared.tile_empty);
    return tile;
}
// end quote: take_tile

// The producer's tiles, each drawn from the counter once the last one's loads are issued (so
// that the tiles in flight are about one a block), the first too, so that every tile is owned by
// a block that runs (the ordered mode's waits must never be on a block that has no SM yet);
// tiles past a shorter sequence's end are skipped. Each is written to the slot once every
// reader has read the one before, then loaded. -1 tells the readers there is no more; the last
// producer to finish sets the counter back for the next launch.
template <typename T, int D>
__device__ __forceinline__ void bh_producer_tiles(const FaHopperBwdParams<T>& params,
                                                  BhShared<T, D>& shared) {
    const int tiles = params.key_tiles * params.kv_heads * params.batch;
    int* tickets = params.tickets;
    PipelineState<BhConfig<D>::STAGES> ring;
    unsigned kv_parity = 0, slot_parity = 0;
    BhBlock b;
    // quote: producer_tiles
    // A grid with a block for every tile: each block takes its own, blockIdx.x, with no draw
    // to wait for at its start.
    const bool one_each = (int)gridDim.x >= tiles;
    for (int tile = one_each ? (int)blockIdx.x : atomicAdd(tickets, 1);;
         tile = one_each ? tiles : atomicAdd(tickets, 1)) {
        if (tile < tiles && !bh_block<T, D>(params, tile, b)) continue;
        mbarrier_wait(shared.tile_empty, slot_parity ^ 1);
        bh_st_u32(smem_u32(&shared) + BhShared<T, D>::at::tile_slot, tile < tiles ? tile : -1);
        mbarrier_arrive(shared.tile_full);  // release: the slot's write is seen with it
        slot_parity ^= 1;
        if (tile >= tiles) break;
        bh_producer<T, D>(params, shared, b, ring, kv_parity);
        kv_parity ^= 1;
    }
    // end quote: producer_tiles
    if (!one_each) tickets_done(tickets);  // one_each drew nothing
}

// Persistent blocks: the producer draws tiles of the key_tiles x kv_heads x batch (numbered
// as a grid of that shape numbers its blocks) and hands each to the consumers and the dQ
// writer through the tile slot. Tiles are drawn in order by running blocks, so a tile of the
// ordered mode waits only for tiles a running or ended block took, and the tiles in flight at
// once are consecutive, as the blocks of a grid with one per tile would be.
// Three things keep ptxas building the steps' wgmma descriptors in uniform registers once a
// loop runs around the tiles (without them the step loop at hd128 executes 11% more
// instructions): `b` starts defined, the tile slot is read and written by 32-bit shared
// addresses (a generic pointer's volatile access is not seen as the same for the warp), and
// the epilogue is chosen by a warp vote (`whole_keys` comes from threadIdx).
template <typename T, int D>
__device__ __forceinline__ void bh_persistent_block(const FaHopperBwdParams<T>& params,
                                                    BhShared<T, D>& shared) {
    using C = BhConfig<D>;
    BhBlock b{};
    if (threadIdx.x < 128) {
        // ---- producer ----
        warpgroup_registers_release<BH_PRODUCER_REGISTERS>();
        if (threadIdx.x == 32) {
            unsigned phase = 0, slot_parity = 0;
            for (int tile; (tile = bh_take_tile(shared, slot_parity)) >= 0;) {
                bh_block<T, D>(params, tile, b);
                bh_dq_writer<T, D>(&params.map_dq, smem_u32(&shared), params.semaphores,
                                   params.ordered, b.s, params.causal, b.n, b.kvh * b.group,
                                   b.group, params.heads, b.m_first, b.rotation, b.m_end,
                                   params.q_tiles, b.z, phase);
            }
            bulk_wait<0>();  // shared memory must outlive the last add's reads
        } else if (threadIdx.x == 0) {
            bh_producer_tiles<T, D>(params, shared);
        }
        return;
    }

    // ---- consumers ----
    warpgroup_registers_claim<C::REGISTERS>();
    PipelineState<C::STAGES> ring;
    unsigned parities = 0;  // bit 0: K and V's phase; bit 1: staged epilogues (BhConsumer::run)
    unsigned slot_parity = 0;
    for (int tile; (tile = bh_take_tile(shared, slot_parity)) >= 0;) {
        bh_block<T, D>(params, tile, b);
        BhConsumer<T, D> consumer(params, shared, b, threadIdx.x / 128 - 1);
        consumer.run(ring, parities);
        parities ^= 1;
        // Every product of both consumers is complete: K and V may be loaded again, dS^T
        // written.
        named_barrier_sync(ALL_CONSUMERS_BARRIER, 128 * BH_CONSUMERS);
        if (threadIdx.x % 128 == 0) mbarrier_arrive(shared.kv_empty);
        if (__all_sync(0xffffffffu, consumer.whole_keys())) {  // the same for the warp
            consumer.store_through_staging(
                &params.map_dk, &params.map_dv,
                BhConsumer<T, D>::step_parity(ring) ^ ((parities >> 1) & 1));
            parities ^= 2;
        } else
            consumer.store(params.dk, params.dv, params.kv_heads);
    }
}

// A block per tile (head dim 256): the grid's block (x, y, z) is the tile its number
// x + key_tiles (y + kv_heads z) names. K and V are loaded once and stage dK and dV at the end.
template <typename T, int D>
__device__ __forceinline__ void bh_one_tile_block(const FaHopperBwdParams<T>& params,
                                                  BhShared<T, D>& shared) {
    using C = BhConfig<D>;
    BhBlock b{};
    const int tile = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (!bh_block<T, D>(params, tile, b)) return;  // the whole block: no barrier waits on it
    if (threadIdx.x < 128) {
        // ---- producer ----
        warpgroup_registers_release<BH_PRODUCER_REGISTERS>();
        if (threadIdx.x == 32) {
            unsigned phase = 0;
            bh_dq_writer<T, D>(&params.map_dq, smem_u32(&shared), params.semaphores,
                               params.ordered, b.s, params.causal, b.n, b.kvh * b.group, b.group,
                               params.heads, b.m_first, b.rotation, b.m_end, params.q_tiles, b.z,
                               phase);
            bulk_wait<0>();  // shared memory must outlive the last add's reads
        } else if (threadIdx.x == 0) {
            PipelineState<C::STAGES> ring;
            bh_producer<T, D>(params, shared, b, ring, 0);
        }
        return;
    }

    // ---- consumers ----
    warpgroup_registers_claim<C::REGISTERS>();
    PipelineState<C::STAGES> ring;
    BhConsumer<T, D> consumer(params, shared, b, threadIdx.x / 128 - 1);
    consumer.run(ring, 0);
    // Every product of both consumers is complete: K and V may be overwritten.
    named_barrier_sync(ALL_CONSUMERS_BARRIER, 128 * BH_CONSUMERS);
    if (consumer.whole_keys())
        consumer.store_through_staging(&params.map_dk, &params.map_dv, 0);
    else
        consumer.store(params.dk, params.dv, params.kv_heads);
}

template <typename T, int D>
__device__ __forceinline__ void fa_hopper_bwd(const FaHopperBwdParams<T>& params) {
    using C = BhConfig<D>;
    using S = BhShared<T, D>;
    // Shared memory: BhShared<T, D> (fa_hopper_bwd_params.cuh, written from the host's table),
    // which the host launches with, and the slack that aligns it.
    constexpr unsigned SHARED_BYTES = sizeof(S) + SHARED_ALIGNMENT_SLACK;
    static_assert(SHARED_BYTES <= 227 * 1024, "at most 227 KiB of shared memory per block on sm_90");
    // The header's members are the defines' tile: K and V of the block's keys, a Q/dO stage of
    // the step's queries, dS^T of both, a consumer's dQ tile (none when dQ goes through the
    // stage), L and D of a stage.
    static_assert(sizeof(S::k) == C::BN * D * sizeof(T) && sizeof(S::v) == sizeof(S::k) &&
                      sizeof(S::q[0]) == C::BM * D * sizeof(T) && sizeof(S::q) == C::STAGES * sizeof(S::q[0]) &&
                      sizeof(S::d_o) == sizeof(S::q) && sizeof(S::ds) == BH_DS_STAGES * C::BN * C::BM * sizeof(T) &&
                      sizeof(S::lse2) == C::STAGES * C::BM * sizeof(float) && sizeof(S::delta) == sizeof(S::lse2) &&
                      sizeof(S::q_full) == 8 * C::STAGES,
                  "BhShared is the tile's (fa_hopper_bwd_params.cuh older than the table?)");
    static_assert(sizeof(S::dq_full) == 8 * BH_CONSUMERS * (C::DQ_IN_STAGE ? C::STAGES : 1),
                  "a dq_full barrier per consumer (dQ through the stage: per stage and consumer)");
    if constexpr (!C::DQ_IN_STAGE)
        static_assert(sizeof(S::dq) == BH_CONSUMERS * 64 * C::DQ_COLS * sizeof(float),
                      "BhShared's dQ tiles are the tile's");
    S& shared = shared_storage<S>();

    // The block size and the shared memory actually given are checked here, so a launch that
    // disagrees with the tile stops rather than corrupting memory.
    unsigned dynamic_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
    if (dynamic_bytes < SHARED_BYTES || blockDim.x != BH_THREADS) __trap();

    if (threadIdx.x == 0) {
        mbarrier_init(shared.kv_full, 1);
        if constexpr (C::PERSISTENT) {
            mbarrier_init(shared.kv_empty, BH_CONSUMERS);  // a thread of each, after the products
            mbarrier_init(shared.tile_full, 1);
            mbarrier_init(shared.tile_empty, BH_TILE_READERS);
        }
        for (int st = 0; st < C::STAGES; ++st) {
            mbarrier_init(&shared.q_full[st], 1);  // the producer's arrival (+ the TMA's bytes)
            // One arrival per consumer warp, each after its own wait for the products that
            // read the stage; dQ through the stage: the dQ writer's, once the TMA has read it.
            mbarrier_init(&shared.q_empty[st], C::DQ_IN_STAGE ? 1 : 4 * BH_CONSUMERS);
        }
        // Every thread of the consumer, after its writes.
        for (int i = 0; i < (int)(sizeof(S::dq_full) / 8); ++i) mbarrier_init(&shared.dq_full[i], 128);
        // The dQ writer, once the TMA has read them.
        if constexpr (!C::DQ_IN_STAGE)
            for (int wg = 0; wg < BH_CONSUMERS; ++wg) mbarrier_init(&shared.dq_empty[wg], 1);
        fence_barrier_init();
    }
    __syncthreads();

    if constexpr (C::PERSISTENT)
        bh_persistent_block<T, D>(params, shared);
    else
        bh_one_tile_block<T, D>(params, shared);
}

// One extern "C" entry per (dtype, head dim). The parameters are one struct, `__grid_constant__`
// so that the TMA reads the maps in it from parameter space.
#define FA_HOPPER_BWD_KERNEL(T, name, D)                                                        \
    KERNEL void __launch_bounds__(BH_THREADS, 1)                                                \
        fa_hopper_bwd_##name##_d##D(const __grid_constant__ FaHopperBwdParams<T> params) {      \
        fa_hopper_bwd<T, D>(params);                                                            \
    }

FA_HOPPER_BWD_KERNEL(bf16_t, bf16, 64)
FA_HOPPER_BWD_KERNEL(bf16_t, bf16, 128)
FA_HOPPER_BWD_KERNEL(bf16_t, bf16, 256)
FA_HOPPER_BWD_KERNEL(f16_t, f16, 64)
FA_HOPPER_BWD_KERNEL(f16_t, f16, 128)
FA_HOPPER_BWD_KERNEL(f16_t, f16, 256)

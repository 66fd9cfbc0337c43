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
//     warpgroup is already computing S_n's softmax; the consumer warpgroups interleave as
//     well, one's exponentials under another's matrix products;
//   - persistent blocks (without a mask): one block per SM walks a share of the work items
//     (query tile, head, sequence); the producer loads the next item's Q and K, V while the
//     consumers finish and store the last.
//
// Per block: 64 query rows per consumer warpgroup, block 128 x (1 + consumers). Key tiles of
// 128 keys (64 at head dim 256) in a ring of 2 stages; Q is freed (q_empty) after an item's
// last S product:
//
//   producer:   per item: wait q_empty -> TMA Q -> q_full;
//               per key tile n: wait k_empty[s] -> TMA K -> k_full[s]
//                               wait v_empty[s] -> TMA V -> v_full[s]
//   consumer:   wait k_full[s_n]; issue S_n = Q K_n^T; wait v_full[s_{n-1}];
//               issue O += P_{n-1} V_{n-1}; wait for S_n -> free k_empty[s_n];
//               softmax(S_n) (exp2 under the P V product); wait for P V -> free v_empty;
//               rescale O; P_n = S_n in 16 bits
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

// The tile configuration comes from the host, as defines, one set per head dim D:
//   FH_D<D>_CONSUMERS      consumer warpgroups, 64 query rows each
//   FH_D<D>_KEYS           keys per K/V tile
//   FH_D<D>_STAGES         K/V tiles in flight (the ring)
//   FH_D<D>_REGISTERS      registers per consumer thread after setmaxnreg
//   FH_D<D>_SHARED_BYTES   the dynamic shared memory the host launches with
// and FH_PRODUCER_REGISTERS, what the producer keeps. `HOPPER_TILES` in src/hopper_tile.rs is
// the one table they come from: the launcher derives its block size, shared memory and TMA
// boxes from it too, and the static_asserts below check that both sides agree and that the
// tile fits an SM. Without the defines the file stops here, so no build runs on stale numbers.
#if !defined(FH_PRODUCER_REGISTERS) ||                                                        \
    !defined(FH_D64_CONSUMERS) || !defined(FH_D64_KEYS) || !defined(FH_D64_STAGES) ||         \
    !defined(FH_D64_REGISTERS) || !defined(FH_D64_SHARED_BYTES) ||                            \
    !defined(FH_D128_CONSUMERS) || !defined(FH_D128_KEYS) || !defined(FH_D128_STAGES) ||      \
    !defined(FH_D128_REGISTERS) || !defined(FH_D128_SHARED_BYTES) ||                          \
    !defined(FH_D256_CONSUMERS) || !defined(FH_D256_KEYS) || !defined(FH_D256_STAGES) ||      \
    !defined(FH_D256_REGISTERS) || !defined(FH_D256_SHARED_BYTES)
#error "fa_hopper.cu: compile it with the -DFH_ defines of day10's HopperTile table"
#endif

template <int D> struct FhTile;
#define FH_TILE(D)                                                                                 \
    template <> struct FhTile<D> {                                                                 \
        static constexpr int CONSUMERS = FH_D##D##_CONSUMERS, KEYS = FH_D##D##_KEYS,               \
                             STAGES = FH_D##D##_STAGES,                                            \
                             CONSUMER_REGISTERS = FH_D##D##_REGISTERS,                             \
                             SHARED_BYTES = FH_D##D##_SHARED_BYTES;                                \
    };
FH_TILE(64)
FH_TILE(128)
FH_TILE(256)
#undef FH_TILE

// Why the host's table has the values it has (`HOPPER_TILES`): head dim 64 halves the
// matrix work per key tile but not the softmax's, so it takes three consumers (192 rows) to
// keep more exponentials in flight under the products; head dim 128 needs the registers for
// its O accumulators (64 per thread) and takes two, 240 registers each; head dim 256 holds 128
// accumulators per thread and halves its key tiles to 64 so that Q and two stages of K and V
// fit in shared memory. Producer 24 + consumers 240 (two) or 160 (three) share the 64 K
// registers of an SM: setmaxnreg moves them.
template <int D> struct FhConfig : FhTile<D> {
    using Tile = FhTile<D>;
    static constexpr int BM = 64 * Tile::CONSUMERS;  // query rows per CTA
    static constexpr int BN = Tile::KEYS;            // keys per K/V tile
    static constexpr int THREADS = 128 * (1 + Tile::CONSUMERS);
    static_assert(D % FH_BOX == 0, "the head dim is a whole number of 64-element boxes");
    static_assert(Tile::CONSUMERS >= 1 && BM <= 256, "a TMA box of Q has at most 256 rows");
    // P V takes 16 keys per k-step; a K or V box of BN rows of 128 bytes stays on the swizzle's
    // 1024-byte period when BN % 8 == 0; a box and a wgmma's N are at most 256.
    static_assert(BN % 16 == 0 && BN >= 16 && BN <= 256,
                  "keys per tile: a multiple of 16, at most 256");
    static_assert(Tile::STAGES >= 1, "at least one K/V stage");
    // setmaxnreg takes multiples of 8 in 24..256; the SM has 64 K registers for the block.
    static_assert(FH_PRODUCER_REGISTERS % 8 == 0 && FH_PRODUCER_REGISTERS >= 24, "setmaxnreg");
    static_assert(Tile::CONSUMER_REGISTERS % 8 == 0 && Tile::CONSUMER_REGISTERS <= 256,
                  "setmaxnreg");
    static_assert(128 * FH_PRODUCER_REGISTERS +
                          Tile::CONSUMERS * 128 * Tile::CONSUMER_REGISTERS <= 65536,
                  "producer and consumer registers fit the SM's register file");
};

// Shared memory, from a 1024-byte aligned base (the swizzle pattern repeats every 1024 bytes):
// Q as D / 64 boxes of [BM rows][64], then the K ring and the V ring, each stage D / 64 boxes
// of [BN keys][64], then the barriers (q_full, q_empty, and full and empty per stage for K and
// for V). The host adds the same 1024 bytes of alignment slack and launches with exactly that.
template <int D> struct FhLayout {
    using C = FhConfig<D>;
    static constexpr int BOXES = D / FH_BOX;
    static constexpr int Q_ELEMS = C::BM * D, KV_ELEMS = C::BN * D;
    static constexpr int K_OFFSET = Q_ELEMS * 2;
    static constexpr int V_OFFSET = K_OFFSET + C::STAGES * KV_ELEMS * 2;
    static constexpr int BARRIER_OFFSET = V_OFFSET + C::STAGES * KV_ELEMS * 2;
    static constexpr int BYTES = BARRIER_OFFSET + 8 * (2 + 4 * C::STAGES) + 1024;
    static_assert(BYTES == C::SHARED_BYTES,
                  "the host launches with the shared memory this layout takes");
    static_assert(BYTES <= 227 * 1024, "at most 227 KiB of shared memory per block on sm_90");
};

__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

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

// A position in the K/V ring: which stage, and the parity of the phase it is in. Producer and
// consumers walk the same tiles of the same items, so each counts its own and they agree.
struct Ring {
    int stage = 0;
    unsigned phase = 0;
    __device__ __forceinline__ void advance(int stages) {
        if (++stage == stages) {
            stage = 0;
            phase ^= 1;
        }
    }
};

// grid(min(items, SMs)) persistent blocks, or grid(items) (one item each); either way block w
// takes items w, w + gridDim.x, ... of the q_tiles x heads x batch items.
template <typename T, int D>
__device__ __forceinline__ void fa_hopper(const TmaDescriptor* map_q, const TmaDescriptor* map_k,
                                          const TmaDescriptor* map_v, T* o, float* lse,
                                          const int* cu_q, const int* cu_k, int heads,
                                          int kv_heads, float scale_log2, int causal,
                                          int q_tiles, int items) {
    using L = FhLayout<D>;
    using C = FhConfig<D>;
    constexpr int FH_BM = C::BM, FH_BN = C::BN, STAGES = C::STAGES;
    extern __shared__ unsigned char fh_smem_raw[];
    unsigned char* base = reinterpret_cast<unsigned char*>(
        (reinterpret_cast<unsigned long long>(fh_smem_raw) + 1023) & ~1023ull);
    T* sq = reinterpret_cast<T*>(base);
    T* sk = reinterpret_cast<T*>(base + L::K_OFFSET);
    T* sv = reinterpret_cast<T*>(base + L::V_OFFSET);
    unsigned long long* q_full = reinterpret_cast<unsigned long long*>(base + L::BARRIER_OFFSET);
    unsigned long long* q_empty = q_full + 1;
    unsigned long long* k_full = q_empty + 1;
    unsigned long long* v_full = k_full + STAGES;
    unsigned long long* k_empty = v_full + STAGES;
    unsigned long long* v_empty = k_empty + STAGES;

    if (threadIdx.x == 0) {
        mbarrier_init(q_full, 1);  // the producer's arrival (+ the TMA's bytes)
        mbarrier_init(q_empty, C::CONSUMERS);  // one arrival per consumer warpgroup
        for (int st = 0; st < STAGES; ++st) {
            mbarrier_init(&k_full[st], 1);
            mbarrier_init(&v_full[st], 1);
            mbarrier_init(&k_empty[st], C::CONSUMERS);
            mbarrier_init(&v_empty[st], C::CONSUMERS);
        }
        fence_barrier_init();
    }
    __syncthreads();

    if (threadIdx.x < 128) {
        // ---- producer: while the consumers finish an item, it already loads the next ----
        warpgroup_registers_release<FH_PRODUCER_REGISTERS>();
        if (threadIdx.x != 0) return;
        constexpr unsigned TILE_BYTES = L::KV_ELEMS * sizeof(T);
        Ring ring;
        unsigned q_phase = 0;
        for (int w = blockIdx.x; w < items; w += gridDim.x) {
            const WorkItem item = work_item(w, q_tiles, heads, causal);
            const Sequence s = sequence(cu_q, cu_k, item.b);
            const int i0 = item.tile * FH_BM;
            if (i0 >= s.lq) continue;
            const int kvh = item.h / (heads / kv_heads);
            const int keys = key_end(min(i0 + FH_BM, s.lq) - 1, s, causal);
            const int tiles = (keys + FH_BN - 1) / FH_BN;
            mbarrier_wait(q_empty, q_phase ^ 1);  // the previous item's S products are done
            mbarrier_arrive_expect_tx(q_full, L::Q_ELEMS * sizeof(T));
#pragma unroll
            for (int box = 0; box < L::BOXES; ++box)
                tma_load_3d(sq + box * FH_BM * FH_BOX, map_q, q_full, box * FH_BOX, s.q0 + i0,
                            item.h);
            q_phase ^= 1;
            for (int n = 0; n < tiles; ++n) {
                const int key0 = s.k0 + n * FH_BN, st = ring.stage;
                mbarrier_wait(&k_empty[st], ring.phase ^ 1);
                mbarrier_arrive_expect_tx(&k_full[st], TILE_BYTES);
#pragma unroll
                for (int box = 0; box < L::BOXES; ++box)
                    tma_load_3d(sk + st * L::KV_ELEMS + box * FH_BN * FH_BOX, map_k, &k_full[st],
                                box * FH_BOX, key0, kvh);
                mbarrier_wait(&v_empty[st], ring.phase ^ 1);
                mbarrier_arrive_expect_tx(&v_full[st], TILE_BYTES);
#pragma unroll
                for (int box = 0; box < L::BOXES; ++box)
                    tma_load_3d(sv + st * L::KV_ELEMS + box * FH_BN * FH_BOX, map_v, &v_full[st],
                                box * FH_BOX, key0, kvh);
                ring.advance(STAGES);
            }
        }
        return;
    }

    // ---- consumers ----
    warpgroup_registers_claim<C::CONSUMER_REGISTERS>();
    const int consumer = threadIdx.x / 128 - 1;
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const T* q_rows = sq + consumer * 64 * FH_BOX;  // this warpgroup's rows of each Q box

    float acc[D / 2];           // O, 64 x D per warpgroup
    float sc[FH_BN / 2];        // S, then P in f32, 64 x FH_BN
    unsigned p[FH_BN / 16][4];  // P in 16 bits: one register A operand per 16 keys
    float m[2], l[2], alpha[2];
    int end[2], unmasked;

    // S = Q K^T over the head dim: k16 steps 32 bytes apart inside a 64-wide box.
    auto issue_scores = [&](int stage) {
        const T* kt = sk + stage * L::KV_ELEMS;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const int box = kk / 4, within = (kk % 4) * 16;
            wgmma_m64k16<FH_BN, T>(
                sc, wgmma_descriptor_k_major_sw128(q_rows + box * FH_BM * FH_BOX + within),
                wgmma_descriptor_k_major_sw128(kt + box * FH_BN * FH_BOX + within), kk > 0);
        }
        wgmma_commit();
    };
    // O += P V over the tile's keys: V is MN-major (d runs along memory), a k16 step is 16
    // key rows (2048 bytes) down, the boxes of 64 dims FH_BN x 128 bytes apart. One wgmma of
    // N = D per 16 keys: n64, n128 or n256 (4 boxes of V side by side).
    auto issue_pv = [&](int stage) {
        const T* vt = sv + stage * L::KV_ELEMS;
#pragma unroll
        for (int kk = 0; kk < FH_BN / 16; ++kk)
            wgmma_m64k16_rs<D, T, 1>(
                acc, p[kk], wgmma_descriptor_mn_major_sw128(vt + kk * 16 * FH_BOX, FH_BN * 128), 1);
        wgmma_commit();
    };
    // Masks S_n, finds the new row maxima, turns S into unnormalised P (f32, in place) and
    // updates the row sums; `alpha` is what O must be multiplied by before P_n V_n is added.
    // Element e of 8-column block j is row e / 2 of the thread's two, key 8j + 2t + e % 2.
    auto softmax = [&](int n) {
        const int j0 = n * FH_BN;
        if (j0 + FH_BN > unmasked) {
#pragma unroll
            for (int j = 0; j < FH_BN / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (j0 + 8 * j + 2 * t + (e % 2) >= end[e / 2]) sc[4 * j + e] = NEG_INF;
        }
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
            // Scores stay unscaled; exp2 takes scale * log2(e) * (s - max) as one FMA. While
            // a row has seen no key, exponentiate against 0: every p is exp2(-inf) = 0.
            const float base = mx == NEG_INF ? 0.0f : mx * scale_log2;
            alpha[r] = exp2_approx(m[r] * scale_log2 - base);  // 0 while m was -inf
            m[r] = mx;
            float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < FH_BN / 8; ++j) {
                sc[4 * j + 2 * r] = exp2_approx(fmaf(sc[4 * j + 2 * r], scale_log2, -base));
                sc[4 * j + 2 * r + 1] = exp2_approx(fmaf(sc[4 * j + 2 * r + 1], scale_log2, -base));
                sums[j % 4] += sc[4 * j + 2 * r] + sc[4 * j + 2 * r + 1];
            }
            const float sum = (sums[0] + sums[1]) + (sums[2] + sums[3]);
            // This lane's share of the row sum; the 4 lanes of a row add theirs at the end.
            l[r] = l[r] * alpha[r] + sum;
        }
    };
    auto rescale_and_pack = [&]() {
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
    };
    auto release = [&](unsigned long long* bar) {
        if (tid == 0) mbarrier_arrive(bar);
    };

    Ring ring;  // the stage of the item's first tile
    unsigned q_phase = 0;
    for (int w = blockIdx.x; w < items; w += gridDim.x) {
        const WorkItem item = work_item(w, q_tiles, heads, causal);
        const Sequence s = sequence(cu_q, cu_k, item.b);
        const int i0 = item.tile * FH_BM;
        if (i0 >= s.lq) continue;
        // Every consumer walks every tile any row of the block sees: they share the ring.
        const int keys = key_end(min(i0 + FH_BM, s.lq) - 1, s, causal);
        const int tiles = (keys + FH_BN - 1) / FH_BN;
        // This thread's two rows of S and O: row0 and row0 + 8 (the accumulator layout).
        const int row0 = i0 + consumer * 64 + warp * 16 + g;
        end[0] = key_end(row0, s, causal);
        end[1] = key_end(row0 + 8, s, causal);
        // Keys every row of this warpgroup sees: tiles before them need no mask.
        unmasked = key_end(i0 + consumer * 64, s, causal);
#pragma unroll
        for (int i = 0; i < D / 2; ++i) acc[i] = 0.0f;
        m[0] = m[1] = NEG_INF;
        l[0] = l[1] = 0.0f;

        mbarrier_wait(q_full, q_phase);
        q_phase ^= 1;
        if (tiles == 0) release(q_empty);
        Ring before = ring;  // the stage of tile n - 1 in the loop
        if (tiles > 0) {
            mbarrier_wait(&k_full[ring.stage], ring.phase);
            wgmma_fence();
            issue_scores(ring.stage);
            wgmma_wait<0>();
            wgmma_fence_operands(sc);
            release(&k_empty[ring.stage]);
            if (tiles == 1) release(q_empty);
            softmax(0);
            rescale_and_pack();
            ring.advance(STAGES);
        }
        for (int n = 1; n < tiles; ++n) {
            mbarrier_wait(&k_full[ring.stage], ring.phase);
            wgmma_fence();
            issue_scores(ring.stage);
            mbarrier_wait(&v_full[before.stage], before.phase);
            issue_pv(before.stage);
            wgmma_wait<1>();  // S_n is done; P_{n-1} V_{n-1} may still run
            wgmma_fence_operands(sc);
            release(&k_empty[ring.stage]);
            if (n == tiles - 1) release(q_empty);  // the producer may load the next Q
            softmax(n);
            wgmma_wait<0>();
            wgmma_fence_operands(acc);
#pragma unroll
            for (int kk = 0; kk < FH_BN / 16; ++kk) wgmma_fence_operands(p[kk]);
            release(&v_empty[before.stage]);
            rescale_and_pack();
            before.advance(STAGES);
            ring.advance(STAGES);
        }
        if (tiles > 0) {
            mbarrier_wait(&v_full[before.stage], before.phase);
            wgmma_fence();
            issue_pv(before.stage);
            wgmma_wait<0>();
            wgmma_fence_operands(acc);
            release(&v_empty[before.stage]);
        }

        // O = acc / l, straight from the accumulators: thread holds columns 8j + 2t, +1 of
        // its two rows. Rows past the sequence's end are not stored.
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            l[r] += __shfl_xor_sync(FULL_WARP, l[r], 1);
            l[r] += __shfl_xor_sync(FULL_WARP, l[r], 2);
            const int i = row0 + 8 * r;
            if (i >= s.lq) continue;
            const index_t token = (index_t)(s.q0 + i) * heads + item.h;
            const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
            unsigned* out = reinterpret_cast<unsigned*>(o + token * D);
#pragma unroll
            for (int j = 0; j < D / 8; ++j)
                out[4 * j + t] = pack2<T>(acc[4 * j + 2 * r] * inv, acc[4 * j + 2 * r + 1] * inv);
            if (t == 0)
                lse[token] = l[r] > 0.0f ? (m[r] * scale_log2 + log2f(l[r])) * LN2 : NEG_INF;
        }
    }
}

// One extern "C" entry per (dtype, head dim); the launcher picks by name. The maps are
// kernel parameters (`__grid_constant__`) so the TMA reads them from parameter space.
#define FA_HOPPER_KERNEL(T, name, D)                                                            \
    KERNEL void __launch_bounds__(FhConfig<D>::THREADS, 1)                                      \
        fa_hopper_##name##_d##D(const __grid_constant__ TmaDescriptor map_q,                    \
                                const __grid_constant__ TmaDescriptor map_k,                    \
                                const __grid_constant__ TmaDescriptor map_v, T* o, float* lse,  \
                                const int* cu_q, const int* cu_k, int heads, int kv_heads,      \
                                float scale_log2, int causal, int q_tiles, int items) {         \
        fa_hopper<T, D>(&map_q, &map_k, &map_v, o, lse, cu_q, cu_k, heads, kv_heads,            \
                        scale_log2, causal, q_tiles, items);                                    \
    }

FA_HOPPER_KERNEL(bf16_t, bf16, 64)
FA_HOPPER_KERNEL(bf16_t, bf16, 128)
FA_HOPPER_KERNEL(bf16_t, bf16, 256)
FA_HOPPER_KERNEL(f16_t, f16, 64)
FA_HOPPER_KERNEL(f16_t, f16, 128)
FA_HOPPER_KERNEL(f16_t, f16, 256)

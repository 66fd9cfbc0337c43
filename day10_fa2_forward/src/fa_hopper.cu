// Day 10, fa_hopper: the FlashAttention forward on Hopper's own path (sm_90a only; the host
// compiles this file for sm_90a on an H100 and falls back to fa2_mma elsewhere). The
// algorithm is attention.cu's (online softmax over key tiles, one normalisation at the end);
// what changes is how the tiles move and who multiplies them, FlashAttention-3's ideas:
//
//   - the TMA copies Q once and K, V tile by tile into 128-byte-swizzled shared memory, each
//     copy counted on an mbarrier: no thread computes an address or waits on a load;
//   - warp specialisation: warpgroup 0 is the producer (one thread issues every copy, the
//     rest give their registers back); warpgroups 1 and 2 are consumers, 64 query rows each;
//   - wgmma: S = Q K^T reads both operands from shared memory (64 x 128 per instruction, the
//     whole warpgroup), O += P V takes P from registers (the S accumulators rounded to 16
//     bits are already a register A operand) and V from shared memory, MN-major;
//   - overlap inside a warpgroup: while O += P_{n-1} V_{n-1} runs on the tensor cores, the
//     warpgroup is already computing S_n's softmax; the two consumer warpgroups interleave as
//     well, one's exponentials under the other's matrix products.
//
// Per CTA: 128 query rows of one head of one sequence (grid(ceil(max lq / 128), heads,
// batch), block 384). Key tiles of 128 keys in a ring of 2 stages:
//
//   producer:   Q -> q_full;  for each tile n: wait k_empty[s] -> TMA K -> k_full[s]
//                                              wait v_empty[s] -> TMA V -> v_full[s]
//   consumer:   wait k_full[s_n]; issue S_n = Q K_n^T; wait v_full[s_{n-1}];
//               issue O += P_{n-1} V_{n-1}; wait for S_n -> free k_empty[s_n];
//               softmax(S_n) (exp2 under the P V product); wait for P V -> free v_empty;
//               rescale O; P_n = S_n in 16 bits
//
// Layout as attention.cu: Q, O [total_q, heads, D], K, V [total_k, kv_heads, D] (the tensor
// maps cover them as [heads][tokens][D], boxes of 64 dims x 128 tokens of one head), L
// [total_q, heads] f32. Copies past a sequence's end read the next sequence's tokens (or
// zeros past the tensor's end): those keys are masked like causal ones, those query rows are
// never stored.
#include "common.cuh"
#include "dtype.cuh"
#include "mma.cuh"        // pack2
#include "reduce.cuh"     // FULL_WARP
#include "attention.cuh"  // Sequence, key_end
#include "hopper.cuh"

constexpr int FH_BM = 128;         // query rows per CTA
constexpr int FH_BN = 128;         // keys per tile
constexpr int FH_STAGES = 2;       // K/V tiles in flight
constexpr int FH_CONSUMERS = 2;    // warpgroups of 64 query rows
constexpr int FH_THREADS = 128 * (1 + FH_CONSUMERS);
constexpr int FH_BOX = 64;         // head-dim elements of one 128-byte swizzle row

// Shared memory, from a 1024-byte aligned base (the swizzle pattern repeats every 1024 bytes):
// Q as D / 64 boxes of [128 rows][64], then the K ring and the V ring, each stage D / 64 boxes
// of [128 keys][64], then the barriers. The host adds the same 1024 bytes of alignment slack.
template <int D> struct FhLayout {
    static constexpr int BOXES = D / FH_BOX;
    static constexpr int Q_ELEMS = FH_BM * D, KV_ELEMS = FH_BN * D;
    static constexpr int K_OFFSET = Q_ELEMS * 2;
    static constexpr int V_OFFSET = K_OFFSET + FH_STAGES * KV_ELEMS * 2;
    static constexpr int BARRIER_OFFSET = V_OFFSET + FH_STAGES * KV_ELEMS * 2;
};

__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

template <typename T, int D>
__device__ __forceinline__ void fa_hopper(const TmaDescriptor* map_q, const TmaDescriptor* map_k,
                                          const TmaDescriptor* map_v, T* o, float* lse,
                                          const int* cu_q, const int* cu_k, int heads,
                                          int kv_heads, float scale_log2, int causal) {
    using L = FhLayout<D>;
    static_assert(D % FH_BOX == 0, "the head dim is a whole number of 64-element boxes");
    extern __shared__ unsigned char fh_smem_raw[];
    unsigned char* base = reinterpret_cast<unsigned char*>(
        (reinterpret_cast<unsigned long long>(fh_smem_raw) + 1023) & ~1023ull);
    T* sq = reinterpret_cast<T*>(base);
    T* sk = reinterpret_cast<T*>(base + L::K_OFFSET);
    T* sv = reinterpret_cast<T*>(base + L::V_OFFSET);
    unsigned long long* q_full = reinterpret_cast<unsigned long long*>(base + L::BARRIER_OFFSET);
    unsigned long long* k_full = q_full + 1;
    unsigned long long* v_full = k_full + FH_STAGES;
    unsigned long long* k_empty = v_full + FH_STAGES;
    unsigned long long* v_empty = k_empty + FH_STAGES;

    const Sequence s = sequence(cu_q, cu_k, blockIdx.z);
    // Causal blocks further down a sequence have more keys to visit: start those first.
    const int tile = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int i0 = tile * FH_BM;
    if (i0 >= s.lq) return;  // the whole block leaves, before any barrier exists
    const int h = blockIdx.y, kvh = h / (heads / kv_heads);
    // Both consumers walk every tile any row of the block sees: they share the ring.
    const int keys = key_end(min(i0 + FH_BM, s.lq) - 1, s, causal);
    const int tiles = (keys + FH_BN - 1) / FH_BN;

    if (threadIdx.x == 0) {
        mbarrier_init(q_full, 1);
        for (int st = 0; st < FH_STAGES; ++st) {
            mbarrier_init(&k_full[st], 1);  // the producer's arrival (+ the TMA's bytes)
            mbarrier_init(&v_full[st], 1);
            mbarrier_init(&k_empty[st], FH_CONSUMERS);  // one arrival per consumer warpgroup
            mbarrier_init(&v_empty[st], FH_CONSUMERS);
        }
        fence_barrier_init();
    }
    __syncthreads();

    if (threadIdx.x < 128) {
        // ---- producer ----
        warpgroup_registers_release<24>();
        if (threadIdx.x == 0) {
            constexpr unsigned TILE_BYTES = L::KV_ELEMS * sizeof(T);
            mbarrier_arrive_expect_tx(q_full, L::Q_ELEMS * sizeof(T));
#pragma unroll
            for (int box = 0; box < L::BOXES; ++box)
                tma_load_3d(sq + box * FH_BM * FH_BOX, map_q, q_full, box * FH_BOX, s.q0 + i0, h);
            int stage = 0;
            unsigned phase = 0;
            for (int n = 0; n < tiles; ++n) {
                const int key0 = s.k0 + n * FH_BN;
                mbarrier_wait(&k_empty[stage], phase ^ 1);
                mbarrier_arrive_expect_tx(&k_full[stage], TILE_BYTES);
#pragma unroll
                for (int box = 0; box < L::BOXES; ++box)
                    tma_load_3d(sk + stage * L::KV_ELEMS + box * FH_BN * FH_BOX, map_k,
                                &k_full[stage], box * FH_BOX, key0, kvh);
                mbarrier_wait(&v_empty[stage], phase ^ 1);
                mbarrier_arrive_expect_tx(&v_full[stage], TILE_BYTES);
#pragma unroll
                for (int box = 0; box < L::BOXES; ++box)
                    tma_load_3d(sv + stage * L::KV_ELEMS + box * FH_BN * FH_BOX, map_v,
                                &v_full[stage], box * FH_BOX, key0, kvh);
                if (++stage == FH_STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
            }
        }
        return;
    }

    // ---- consumers ----
    warpgroup_registers_claim<240>();
    const int consumer = threadIdx.x / 128 - 1;
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    // This thread's two rows of S and O: row0 and row0 + 8 (the accumulator layout).
    const int row0 = i0 + consumer * 64 + warp * 16 + g;
    const int end[2] = {key_end(row0, s, causal), key_end(row0 + 8, s, causal)};
    // Keys every row of this warpgroup sees: tiles before them need no mask.
    const int unmasked = key_end(i0 + consumer * 64, s, causal);
    const T* q_rows = sq + consumer * 64 * FH_BOX;  // this warpgroup's rows of each Q box

    float acc[D / 2];      // O, 64 x D per warpgroup
    float sc[FH_BN / 2];   // S, then P in f32, 64 x 128
    unsigned p[FH_BN / 16][4];  // P in 16 bits: one register A operand per 16 keys
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc[i] = 0.0f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f}, alpha[2];

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
    // key rows (2048 bytes) down, the boxes of 64 dims FH_BN x 128 bytes apart.
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
            float mx = m[r];
#pragma unroll
            for (int j = 0; j < FH_BN / 8; ++j)
                mx = fmaxf(mx, fmaxf(sc[4 * j + 2 * r], sc[4 * j + 2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(FULL_WARP, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(FULL_WARP, mx, 2));
            // Scores stay unscaled; exp2 takes scale * log2(e) * (s - max) as one FMA. While
            // a row has seen no key, exponentiate against 0: every p is exp2(-inf) = 0.
            const float base = mx == NEG_INF ? 0.0f : mx * scale_log2;
            alpha[r] = exp2_approx(m[r] * scale_log2 - base);  // 0 while m was -inf
            m[r] = mx;
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < FH_BN / 8; ++j) {
                sc[4 * j + 2 * r] = exp2_approx(fmaf(sc[4 * j + 2 * r], scale_log2, -base));
                sc[4 * j + 2 * r + 1] = exp2_approx(fmaf(sc[4 * j + 2 * r + 1], scale_log2, -base));
                sum += sc[4 * j + 2 * r] + sc[4 * j + 2 * r + 1];
            }
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

    mbarrier_wait(q_full, 0);
    if (tiles > 0) {
        mbarrier_wait(&k_full[0], 0);
        wgmma_fence();
        issue_scores(0);
        wgmma_wait<0>();
        wgmma_fence_operands(sc);
        release(&k_empty[0]);
        softmax(0);
        rescale_and_pack();
    }
    for (int n = 1; n < tiles; ++n) {
        const int stage = n % FH_STAGES, before = (n - 1) % FH_STAGES;
        const unsigned phase = (n / FH_STAGES) & 1, phase_before = ((n - 1) / FH_STAGES) & 1;
        mbarrier_wait(&k_full[stage], phase);
        wgmma_fence();
        issue_scores(stage);
        mbarrier_wait(&v_full[before], phase_before);
        issue_pv(before);
        wgmma_wait<1>();  // S_n is done; P_{n-1} V_{n-1} may still run
        wgmma_fence_operands(sc);
        release(&k_empty[stage]);
        softmax(n);
        wgmma_wait<0>();
        wgmma_fence_operands(acc);
#pragma unroll
        for (int kk = 0; kk < FH_BN / 16; ++kk) wgmma_fence_operands(p[kk]);
        release(&v_empty[before]);
        rescale_and_pack();
    }
    if (tiles > 0) {
        const int last = (tiles - 1) % FH_STAGES;
        mbarrier_wait(&v_full[last], ((tiles - 1) / FH_STAGES) & 1);
        wgmma_fence();
        issue_pv(last);
        wgmma_wait<0>();
        wgmma_fence_operands(acc);
        release(&v_empty[last]);
    }

    // O = acc / l, straight from the accumulators: thread holds columns 8j + 2t, +1 of its
    // two rows. Rows past the sequence's end are not stored.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(FULL_WARP, l[r], 1);
        l[r] += __shfl_xor_sync(FULL_WARP, l[r], 2);
        const int i = row0 + 8 * r;
        if (i >= s.lq) continue;
        const index_t token = (index_t)(s.q0 + i) * heads + h;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        unsigned* out = reinterpret_cast<unsigned*>(o + token * D);
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
            out[4 * j + t] = pack2<T>(acc[4 * j + 2 * r] * inv, acc[4 * j + 2 * r + 1] * inv);
        if (t == 0) lse[token] = l[r] > 0.0f ? (m[r] * scale_log2 + log2f(l[r])) * LN2 : NEG_INF;
    }
}

// One extern "C" entry per (dtype, head dim); the launcher picks by name. The maps are
// kernel parameters (`__grid_constant__`) so the TMA reads them from parameter space.
#define FA_HOPPER_KERNEL(T, name, D)                                                            \
    KERNEL void __launch_bounds__(FH_THREADS, 1)                                                \
        fa_hopper_##name##_d##D(const __grid_constant__ TmaDescriptor map_q,                    \
                                const __grid_constant__ TmaDescriptor map_k,                    \
                                const __grid_constant__ TmaDescriptor map_v, T* o, float* lse,  \
                                const int* cu_q, const int* cu_k, int heads, int kv_heads,      \
                                float scale_log2, int causal) {                                 \
        fa_hopper<T, D>(&map_q, &map_k, &map_v, o, lse, cu_q, cu_k, heads, kv_heads,            \
                        scale_log2, causal);                                                    \
    }

FA_HOPPER_KERNEL(bf16_t, bf16, 64)
FA_HOPPER_KERNEL(bf16_t, bf16, 128)
FA_HOPPER_KERNEL(f16_t, f16, 64)
FA_HOPPER_KERNEL(f16_t, f16, 128)

// Day 20: FlashAttention-2, backward. Given Q, K, V, the forward's O and log-sum-exp L, and
// the output gradient dO: dQ, dK, dV, without ever storing the attention matrix.
//
//   P = exp(scale Q K^T - L)   (rebuilt from L; 0 where masked)     D = rowsum(dO * O)
//   dV = P^T dO    dP = dO V^T    dS = P * (dP - D)    dQ = scale dS K    dK = scale dS^T Q
//
//   preprocess  D = rowsum(dO * O) in f32 (one warp per row), and dQ's f32 accumulator zeroed.
//   naive       P and dS materialized (f32, batch x heads x lq x lk each), then dQ, and dK/dV
//               summed over each kv group, as plain dot products through memory.
//   fa2_scalar  FlashAttention-2's backward in f32 arithmetic: one block per (key tile of 32,
//               kv head, sequence) keeps its dK and dV in registers and loops over the query
//               heads of its group and their query tiles; dQ is added into an f32 buffer with
//               atomics (or, deterministic, computed by a second kernel over the key tiles).
//   fa2_mma     the same on tensor cores: S^T, dP^T, dV, dK and dQ as mma.sync products, P and
//               dS handed from accumulator registers to the next product's A fragments, dS^T
//               through shared memory for dQ, the next Q/dO tile in flight with cp.async.
//
//   cargo run --release -p day20 -- --kernel fa2_mma --seqlen 4096 --head-dim 128 --causal
//
// Layout as day 10: Q, O, dO, dQ are [total_q, heads, D]; K, V, dK, dV [total_k, kv_heads, D];
// L and D are [total_q, heads] f32; cu_q / cu_k hold where each sequence starts. The causal
// mask is aligned bottom-right; a row that sees no key has L = -inf and gets dQ = 0.
//
// Deterministic mode: no float atomics anywhere. dK and dV are summed over a kv group inside
// one block, in a fixed order, in both modes; dQ, which every key tile contributes to, is then
// computed by its own kernel (`*_bwd_dq`), one block per query tile looping over the key
// tiles: S and dP are computed twice, 7 matrix products instead of 5.
#include "common.cuh"
#include "dtype.cuh"
#include "mma.cuh"
#include "reduce.cuh"
#include "attention.cuh"  // Sequence, key_end, visible, first_query

// The flash versions' tiles come from the host as NVRTC defines (attention_bwd.rs's
// FA2_SCALAR_BWD and FA2_MMA_BWD, the one table both sides read): the launcher sizes its grids,
// blocks and shared memory from the same numbers, and the static_asserts below check that this
// file's layouts agree. Without the defines the file stops here.
#if !defined(FA2B_THREADS) || !defined(FA2B_SCALAR_QUERIES) || !defined(FA2B_SCALAR_KEYS) ||   \
    !defined(FA2B_MMA_QUERIES) || !defined(FA2B_MMA_KEYS) || !defined(FA2B_MMA_PAD) ||         \
    !defined(FA2B_MMA_D64_SHARED_BYTES) || !defined(FA2B_MMA_D64_DQ_SHARED_BYTES) ||           \
    !defined(FA2B_MMA_D128_SHARED_BYTES) || !defined(FA2B_MMA_D128_DQ_SHARED_BYTES)
#error "attention_bwd.cu: compile it with the -DFA2B_ defines of day20's backward FlashTile table"
#endif
static_assert(FA2B_THREADS == 128, "four warps per block");

// The dynamic shared memory the host launches fa2_mma's two passes with, per head dim
// (enumerators: a compile-time number that takes no storage in the module).
template <int D> struct Fa2MmaBwdHost;
template <> struct Fa2MmaBwdHost<64> {
    enum : int {
        SHARED_BYTES = FA2B_MMA_D64_SHARED_BYTES,
        DQ_SHARED_BYTES = FA2B_MMA_D64_DQ_SHARED_BYTES
    };
};
template <> struct Fa2MmaBwdHost<128> {
    enum : int {
        SHARED_BYTES = FA2B_MMA_D128_SHARED_BYTES,
        DQ_SHARED_BYTES = FA2B_MMA_D128_DQ_SHARED_BYTES
    };
};

// ---------------------------------------------------------------------------------------------
// preprocess: D[row] = dO[row] . O[row] (f32), and dq_accum[row] = 0 when zero_dq.
// grid(ceil(rows / 8)), block(256): one warp per (token, head) row.
template <typename T>
__device__ __forceinline__ void bwd_preprocess(const T* o, const T* d_o, float* delta,
                                               float* dq_accum, int rows, int d, int zero_dq) {
    const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const index_t at = (index_t)row * d;
    float acc = 0.0f;
    for (int c = lane; c < d; c += 32) {
        acc += to_f32(o[at + c]) * to_f32(d_o[at + c]);
        if (zero_dq) dq_accum[at + c] = 0.0f;
    }
    acc = warp_sum(acc);
    if (lane == 0) delta[row] = acc;
}

KERNEL void attention_bwd_preprocess_bf16(const bf16_t* o, const bf16_t* d_o, float* delta,
                                          float* dq_accum, int rows, int d, int zero_dq) {
    bwd_preprocess(o, d_o, delta, dq_accum, rows, d, zero_dq);
}
KERNEL void attention_bwd_preprocess_f16(const f16_t* o, const f16_t* d_o, float* delta,
                                         float* dq_accum, int rows, int d, int zero_dq) {
    bwd_preprocess(o, d_o, delta, dq_accum, rows, d, zero_dq);
}

// dQ = scale * dq_accum, rounded to the storage type, after the atomics of a flash kernel.
// grid-stride, any launch. Four elements a thread per step where both buffers start 16-byte
// aligned (dq_accum is the workspace's own allocation, dQ the start of the caller's gradients;
// checked here, as a caller may hand any): a 16-byte load and an 8-byte store, so that each
// warp instruction covers whole sectors, and two steps' loads in flight before either is
// stored. The elements past the last whole four, or all of them otherwise, one by one.
template <typename T>
__device__ __forceinline__ void bwd_store_scaled(T* dq, index_t quad, float4 a, float scale) {
    Elems<T, 4> out;
    out.v[0] = from_f32<T>(a.x * scale);
    out.v[1] = from_f32<T>(a.y * scale);
    out.v[2] = from_f32<T>(a.z * scale);
    out.v[3] = from_f32<T>(a.w * scale);
    store_elems(dq + 4 * quad, out);
}
template <typename T>
__device__ __forceinline__ void bwd_convert_dq(const float* __restrict__ dq_accum,
                                               T* __restrict__ dq, index_t n, float scale) {
    const index_t first = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    const index_t stride = (index_t)gridDim.x * blockDim.x;
    const bool aligned = ((reinterpret_cast<unsigned long long>(dq_accum) |
                           reinterpret_cast<unsigned long long>(dq)) % 16) == 0;
    const index_t quads = aligned ? n / 4 : 0;
    const float4* in = reinterpret_cast<const float4*>(dq_accum);
    for (index_t q = first; q < quads; q += 2 * stride) {
        const bool second = q + stride < quads;
        const float4 a = in[q];
        const float4 b = second ? in[q + stride] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        bwd_store_scaled(dq, q, a, scale);
        if (second) bwd_store_scaled(dq, q + stride, b, scale);
    }
    for (index_t e = 4 * quads + first; e < n; e += stride)
        dq[e] = from_f32<T>(dq_accum[e] * scale);
}

KERNEL void attention_bwd_convert_dq_bf16(const float* dq_accum, bf16_t* dq, index_t n,
                                          float scale) {
    bwd_convert_dq(dq_accum, dq, n, scale);
}
KERNEL void attention_bwd_convert_dq_f16(const float* dq_accum, f16_t* dq, index_t n,
                                         float scale) {
    bwd_convert_dq(dq_accum, dq, n, scale);
}

// ---------------------------------------------------------------------------------------------
// naive, step 1: P[b, h, i, j] = exp(scale q_i . k_j - L_i) and dS = P (dO_i . v_j - D_i), both
// f32, 0 where the mask hides key j. grid(ceil(max lk / 16), ceil(max lq / 16), batch * heads),
// block(16, 16): one thread per score. `s_offset[b]` is where sequence b's [heads, lq, lk]
// block of P (and of dS) starts.
template <typename T>
__device__ __forceinline__ void bwd_naive_scores(const T* q, const T* k, const T* v,
                                                 const T* d_o, const float* lse,
                                                 const float* delta, float* probs,
                                                 float* dscores, const int* cu_q, const int* cu_k,
                                                 const index_t* s_offset, int heads,
                                                 int kv_heads, int d, float scale, int causal) {
    const int b = blockIdx.z / heads, h = blockIdx.z % heads;
    const Sequence s = sequence(cu_q, cu_k, b);
    const int i = blockIdx.y * 16 + threadIdx.y, j = blockIdx.x * 16 + threadIdx.x;
    if (i >= s.lq || j >= s.lk) return;
    const int kvh = h / (heads / kv_heads);
    const index_t row = (index_t)(s.q0 + i) * heads + h;
    float p = 0.0f, ds = 0.0f;
    if (j < key_end(i, s, causal)) {
        const T* qi = q + row * d;
        const T* gi = d_o + row * d;
        const T* kj = k + ((index_t)(s.k0 + j) * kv_heads + kvh) * d;
        const T* vj = v + ((index_t)(s.k0 + j) * kv_heads + kvh) * d;
        // quote: naive_scores
        float score = 0.0f, dp = 0.0f;
        for (int c = 0; c < d; ++c) {
            score += to_f32(qi[c]) * to_f32(kj[c]);
            dp += to_f32(gi[c]) * to_f32(vj[c]);
        }
        p = expf(score * scale - lse[row]);
        ds = p * (dp - delta[row]);
        // end quote: naive_scores
    }
    const index_t at = s_offset[b] + ((index_t)h * s.lq + i) * s.lk + j;
    probs[at] = p;
    dscores[at] = ds;
}

// naive, step 2: dQ[i, h, c] = scale sum_j dS[i, j] K[j, c], day 10's O = P V with dS for P
// (naive_row_times_keys, attention.cuh). grid(max lq, heads, batch), block(D): one block per
// query row, one thread per column.

// naive, step 3: dV[j, g, c] = sum_{h of group g} sum_i P[h, i, j] dO[i, h, c] and
// dK[j, g, c] = scale sum_h sum_i dS[h, i, j] Q[i, h, c] (masked entries of P and dS are 0).
// grid(max lk, kv_heads, batch), block(D): one block per key row, one thread per column.
template <typename T>
__device__ __forceinline__ void bwd_naive_dkv(const float* probs, const float* dscores,
                                              const T* q, const T* d_o, T* dk, T* dv,
                                              const int* cu_q, const int* cu_k,
                                              const index_t* s_offset, int heads, int kv_heads,
                                              float scale) {
    const int b = blockIdx.z, kvh = blockIdx.y, j = blockIdx.x, c = threadIdx.x, d = blockDim.x;
    const Sequence s = sequence(cu_q, cu_k, b);
    if (j >= s.lk) return;
    const int group = heads / kv_heads;
    float acc_k = 0.0f, acc_v = 0.0f;
    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        const index_t base = s_offset[b] + (index_t)h * s.lq * s.lk + j;
        for (int i = 0; i < s.lq; ++i) {
            const index_t row = ((index_t)(s.q0 + i) * heads + h) * d + c;
            acc_v += probs[base + (index_t)i * s.lk] * to_f32(d_o[row]);
            acc_k += dscores[base + (index_t)i * s.lk] * to_f32(q[row]);
        }
    }
    const index_t at = ((index_t)(s.k0 + j) * kv_heads + kvh) * d + c;
    dk[at] = from_f32<T>(acc_k * scale);
    dv[at] = from_f32<T>(acc_v);
}

#define NAIVE_KERNELS(T, name)                                                                 \
    KERNEL void attention_bwd_scores_##name(                                                   \
        const T* q, const T* k, const T* v, const T* d_o, const float* lse, const float* delta, \
        float* probs, float* dscores, const int* cu_q, const int* cu_k, const index_t* s_offset, \
        int heads, int kv_heads, int d, float scale, int causal) {                             \
        bwd_naive_scores(q, k, v, d_o, lse, delta, probs, dscores, cu_q, cu_k, s_offset, heads, \
                         kv_heads, d, scale, causal);                                          \
    }                                                                                          \
    KERNEL void attention_bwd_dq_##name(const float* dscores, const T* k, T* dq, const int* cu_q, \
                                        const int* cu_k, const index_t* s_offset, int heads,   \
                                        int kv_heads, float scale) {                           \
        naive_row_times_keys(dscores, k, dq, cu_q, cu_k, s_offset, heads, kv_heads, scale);    \
    }                                                                                          \
    KERNEL void attention_bwd_dkv_##name(const float* probs, const float* dscores, const T* q,  \
                                         const T* d_o, T* dk, T* dv, const int* cu_q,           \
                                         const int* cu_k, const index_t* s_offset, int heads,  \
                                         int kv_heads, float scale) {                          \
        bwd_naive_dkv(probs, dscores, q, d_o, dk, dv, cu_q, cu_k, s_offset, heads, kv_heads,   \
                      scale);                                                                  \
    }

NAIVE_KERNELS(bf16_t, bf16)
NAIVE_KERNELS(f16_t, f16)

// ---------------------------------------------------------------------------------------------
// fa2_scalar. Tiles of SBR = 8 queries and SBC = 32 keys; 4 warps. For a tile pair, lane j of
// warp w scores key j against queries 2w and 2w + 1 (S and dP, full dot products over d from
// shared memory) and leaves P and dS in shared memory; the products that follow read them as
// broadcasts. Scores are in log2 units (scale * log2 e folded in) for exp2f.
#define SBR FA2B_SCALAR_QUERIES
#define SBC FA2B_SCALAR_KEYS
static_assert(SBR == 8 && SBC == 32, "lane j scores key j against queries 2w and 2w + 1");

// The shared tiles of fa2_scalar: K and V rows padded by one float (lane j reads row j, so a
// walk along d is conflict-free), Q and dO rows, and the tile pair's P and dS.
template <int D> struct ScalarTiles {
    float k[SBC][D + 1];
    float v[SBC][D + 1];
    float q[SBR][D];
    float d_o[SBR][D];
    float p[SBR][SBC];
    float ds[SBR][SBC];
    float lse2[SBR];  // L in log2 units
    float delta[SBR];
};

// Queries i0 .. i0 + SBR - 1 of head h (Q, dO, L, D) into the tiles, zeros past the end.
template <typename T, int D>
__device__ __forceinline__ void scalar_load_queries(ScalarTiles<D>& sm, const T* q, const T* d_o,
                                                    const float* lse, const float* delta,
                                                    const Sequence& s, int i0, int h, int heads) {
    scalar_load_rows<D>(sm.q, sm.d_o, q, d_o, s.q0, i0, s.lq, heads, h);
    if (threadIdx.x < SBR) {
        const int r = threadIdx.x;
        const bool in = i0 + r < s.lq;
        const index_t row = (index_t)(s.q0 + i0 + r) * heads + h;
        sm.lse2[r] = in ? lse[row] * LOG2E : 0.0f;
        sm.delta[r] = in ? delta[row] : 0.0f;
    }
}

// Keys j0 .. j0 + SBC - 1 of kv head kvh (K and V) into the tiles, zeros past the end.
template <typename T, int D>
__device__ __forceinline__ void scalar_load_keys(ScalarTiles<D>& sm, const T* k, const T* v,
                                                 const Sequence& s, int j0, int kvh,
                                                 int kv_heads) {
    scalar_load_rows<D>(sm.k, sm.v, k, v, s.k0, j0, s.lk, kv_heads, kvh);
}

// P and dS of the tile pair into shared memory: lane j, queries 2w and 2w + 1.
template <int D>
__device__ __forceinline__ void scalar_p_ds(ScalarTiles<D>& sm, const Sequence& s, int i0, int j0,
                                            float scale_log2, int causal) {
    const int warp = threadIdx.x / 32, j = threadIdx.x % 32;
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
        const int r = 2 * warp + rr;
        float score = 0.0f, dp = 0.0f;
#pragma unroll 8
        for (int c = 0; c < D; ++c) {
            score += sm.q[r][c] * sm.k[j][c];
            dp += sm.d_o[r][c] * sm.v[j][c];
        }
        const bool seen = visible(i0 + r, j0 + j, s, causal);
        const float p = seen ? exp2f(score * scale_log2 - sm.lse2[r]) : 0.0f;
        sm.p[r][j] = p;
        sm.ds[r][j] = p * (dp - sm.delta[r]);
    }
}

// grid(ceil(max lk / 32), kv_heads, batch), block(128). Thread (lane j, warp w) keeps dK and
// dV of key j, columns w D/4 .. (w + 1) D/4 - 1, in registers across every query head of the
// group and every query tile that sees the key. With atomic_dq, the tile pair's dQ
// contribution (dS K, 8 x D) is added to dq_accum: thread t owns column t % D.
template <typename T, int D>
__device__ __forceinline__ void fa2_scalar_bwd(const T* q, const T* k, const T* v, const T* d_o,
                                               const float* lse, const float* delta,
                                               float* dq_accum, T* dk, T* dv, const int* cu_q,
                                               const int* cu_k, int heads, int kv_heads,
                                               float scale, int causal, int atomic_dq) {
    constexpr int COLS = D / 4, ROW_STEP = 128 / D;
    __shared__ ScalarTiles<D> sm;
    const Sequence s = sequence(cu_q, cu_k, blockIdx.z);
    const int j0 = blockIdx.x * SBC;
    if (j0 >= s.lk) return;
    const int kvh = blockIdx.y, group = heads / kv_heads;
    const int warp = threadIdx.x / 32, j = threadIdx.x % 32, c0 = warp * COLS;
    const float scale_log2 = scale * LOG2E;
    scalar_load_keys(sm, k, v, s, j0, kvh, kv_heads);

    float acc_k[COLS], acc_v[COLS];
#pragma unroll
    for (int c = 0; c < COLS; ++c) acc_k[c] = acc_v[c] = 0.0f;
    const int first = first_query(j0, s, causal) / SBR * SBR;
    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int i0 = first; i0 < s.lq; i0 += SBR) {
            __syncthreads();  // the previous tile pair is no longer read (and K, V are in)
            scalar_load_queries(sm, q, d_o, lse, delta, s, i0, h, heads);
            __syncthreads();
            scalar_p_ds(sm, s, i0, j0, scale_log2, causal);
            __syncthreads();
            // quote: scalar_accumulate
#pragma unroll
            for (int r = 0; r < SBR; ++r) {
                const float p = sm.p[r][j], ds = sm.ds[r][j];
#pragma unroll
                for (int c = 0; c < COLS; ++c) {
                    acc_v[c] += p * sm.d_o[r][c0 + c];
                    acc_k[c] += ds * sm.q[r][c0 + c];
                }
            }
            if (atomic_dq) {
                const int c = threadIdx.x % D;
                for (int r = threadIdx.x / D; r < SBR; r += ROW_STEP) {
                    if (i0 + r >= s.lq) break;
                    float acc = 0.0f;
#pragma unroll 8
                    for (int jj = 0; jj < SBC; ++jj) acc += sm.ds[r][jj] * sm.k[jj][c];
                    atomicAdd(dq_accum + ((index_t)(s.q0 + i0 + r) * heads + h) * D + c, acc);
                }
            }
            // end quote: scalar_accumulate
        }
    }
    if (j0 + j >= s.lk) return;
    const index_t at = ((index_t)(s.k0 + j0 + j) * kv_heads + kvh) * D + c0;
#pragma unroll
    for (int c = 0; c < COLS; ++c) {
        dk[at + c] = from_f32<T>(acc_k[c] * scale);
        dv[at + c] = from_f32<T>(acc_v[c]);
    }
}

// Deterministic dQ: grid(ceil(max lq / 8), heads, batch), block(128). One block per query
// tile loops over the key tiles it sees, rebuilding P and dS; thread t keeps dQ of column
// t % D, rows t / D + k * (128 / D), in registers. No atomics: the sum order is fixed.
template <typename T, int D>
__device__ __forceinline__ void fa2_scalar_bwd_dq(const T* q, const T* k, const T* v,
                                                  const T* d_o, const float* lse,
                                                  const float* delta, T* dq, const int* cu_q,
                                                  const int* cu_k, int heads, int kv_heads,
                                                  float scale, int causal) {
    constexpr int ROW_STEP = 128 / D, ROWS = SBR / ROW_STEP;
    __shared__ ScalarTiles<D> sm;
    const Sequence s = sequence(cu_q, cu_k, blockIdx.z);
    const int i0 = blockIdx.x * SBR;
    if (i0 >= s.lq) return;
    const int h = blockIdx.y, kvh = h / (heads / kv_heads);
    const int c = threadIdx.x % D, r0 = threadIdx.x / D;
    const float scale_log2 = scale * LOG2E;
    scalar_load_queries(sm, q, d_o, lse, delta, s, i0, h, heads);
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;
    const int keys = key_end(min(i0 + SBR, s.lq) - 1, s, causal);
    for (int j0 = 0; j0 < keys; j0 += SBC) {
        __syncthreads();
        scalar_load_keys(sm, k, v, s, j0, kvh, kv_heads);
        __syncthreads();
        scalar_p_ds(sm, s, i0, j0, scale_log2, causal);
        __syncthreads();
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll 8
            for (int jj = 0; jj < SBC; ++jj) acc[r] += sm.ds[r0 + r * ROW_STEP][jj] * sm.k[jj][c];
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int i = i0 + r0 + r * ROW_STEP;
        if (i < s.lq) dq[((index_t)(s.q0 + i) * heads + h) * D + c] = from_f32<T>(acc[r] * scale);
    }
}

// ---------------------------------------------------------------------------------------------
// fa2_mma. Tiles of 64 keys (a block's, for the whole kernel) and 64 queries (streamed), 4
// warps; warp w owns keys 16w .. 16w + 15 of the block's tile, as the M dimension of every
// product it makes:
//   S^T = K Q^T and dP^T = V dO^T   (A: K and V rows, ldmatrix; B: Q and dO rows, which are
//                                    exactly B's "col" layout, as K's are in the forward)
//   P^T = exp2(S^T - L), dS^T = P^T (dP^T - D), in the accumulators' registers
//   dV += P^T dO and dK += dS^T Q   (A: P^T and dS^T straight from those registers; B: dO and
//                                    Q through ldmatrix.trans)
// dQ needs dS with the queries as M: each warp writes its 16 rows of dS^T to shared memory,
// and after a barrier warp w computes dQ of queries 16w .. 16w + 15 over all 64 keys (A: dS
// through ldmatrix.trans of dS^T; B: K through ldmatrix.trans), added to dq_accum with vector
// reductions. Shared rows are padded by 16 bytes (ldmatrix conflict-free, as in day 10).
#define MBR FA2B_MMA_QUERIES
#define MBC FA2B_MMA_KEYS
static_assert(MBR == 64 && MBC == 64, "tiles of 64 rows, 16 per warp");

// Two f32 added to two neighbouring floats of global memory in one reduction (sm_90: one
// request instead of two).
__device__ __forceinline__ void red_add2(float* at, float a, float b) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(at), "f"(a), "f"(b) : "memory");
}

// `rows` rows of D elements from `src` (row r at token first + r of head `head` of `nheads`)
// into `dst` (row stride D + 8); rows at or past `valid` are zero-filled.
template <typename T, int D, int ROWS>
__device__ __forceinline__ void mma_load_tile(T* dst, const T* src, int first, int valid,
                                              int nheads, int head) {
    constexpr int CHUNKS = D / 8, STRIDE = D + FA2B_MMA_PAD;
    // Not unrolled: unrolled, the compiler keeps every row's address live across the whole
    // main loop, registers the accumulators need.
#pragma unroll 1
    for (int e = threadIdx.x; e < ROWS * CHUNKS; e += 128) {
        const int r = e / CHUNKS, c = (e % CHUNKS) * 8;
        const bool in = r < valid;
        const T* from = src + ((index_t)(first + (in ? r : 0)) * nheads + head) * D + c;
        cp_async_16_zfill(dst + r * STRIDE + c, from, in);
    }
}

// Dynamic shared memory, in T: K, V, two Q and two dO tiles, dS^T; then L (log2) and D of
// the two query tiles, in f32 (attention_bwd.rs's backward_shared_bytes computes the same).
// grid(ceil(max lk / 64), kv_heads, batch), block(128).
template <typename T, int D>
__device__ __forceinline__ void fa2_mma_bwd(const T* q, const T* k, const T* v, const T* d_o,
                                            const float* lse, const float* delta,
                                            float* dq_accum, T* dk, T* dv, const int* cu_q,
                                            const int* cu_k, int heads, int kv_heads, float scale,
                                            int causal, int atomic_dq) {
    constexpr int STRIDE = D + FA2B_MMA_PAD, DSS = MBR + FA2B_MMA_PAD, TILE = 64 * STRIDE;
    constexpr int KSTEPS = D / 16, QTILES = MBR / 8, DTILES = D / 8;
    static_assert(FA2B_MMA_PAD * sizeof(T) == 16, "shared rows are padded by 16 bytes");
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    T* ks = reinterpret_cast<T*>(shared_bytes);
    T* vs = ks + TILE;
    T* qs = vs + TILE;      // [2][MBR][STRIDE]
    T* dos = qs + 2 * TILE;  // [2][MBR][STRIDE]
    T* dst = dos + 2 * TILE;  // [MBC][DSS]: dS^T, key-major
    float* lse2_s = reinterpret_cast<float*>(dst + MBC * DSS);  // [2][MBR]
    float* delta_s = lse2_s + 2 * MBR;                           // [2][MBR]
    static_assert((6 * TILE + MBC * DSS) * sizeof(T) + 4 * MBR * sizeof(float) ==
                      Fa2MmaBwdHost<D>::SHARED_BYTES,
                  "the host launches with the shared memory this layout takes");

    const Sequence s = sequence(cu_q, cu_k, blockIdx.z);
    const int j0 = blockIdx.x * MBC;
    if (j0 >= s.lk) return;
    const int kvh = blockIdx.y, group = heads / kv_heads;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const float scale_log2 = scale * LOG2E;

    // Iteration n visits query tile first_tile + n % q_tiles of head kvh * group + n / q_tiles.
    const int first_tile = first_query(j0, s, causal) / MBR;
    const int q_tiles = (s.lq + MBR - 1) / MBR - first_tile;
    const int iterations = group * q_tiles;
    auto issue = [&](int n, int buf) {
        const int h = kvh * group + n / q_tiles, i0 = (first_tile + n % q_tiles) * MBR;
        mma_load_tile<T, D, MBR>(qs + buf * TILE, q, s.q0 + i0, s.lq - i0, heads, h);
        mma_load_tile<T, D, MBR>(dos + buf * TILE, d_o, s.q0 + i0, s.lq - i0, heads, h);
        if (tid < MBR) {
            const bool in = i0 + tid < s.lq;
            const index_t row = (index_t)(s.q0 + i0 + tid) * heads + h;
            lse2_s[buf * MBR + tid] = in ? lse[row] * LOG2E : 0.0f;
            delta_s[buf * MBR + tid] = in ? delta[row] : 0.0f;
        }
    };
    mma_load_tile<T, D, MBC>(ks, k, s.k0 + j0, s.lk - j0, kv_heads, kvh);
    mma_load_tile<T, D, MBC>(vs, v, s.k0 + j0, s.lk - j0, kv_heads, kvh);
    if (iterations > 0) issue(0, 0);
    cp_async_commit();

    float dk_acc[DTILES][4], dv_acc[DTILES][4];
#pragma unroll
    for (int j = 0; j < DTILES; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk_acc[j][e] = dv_acc[j][e] = 0.0f;

    for (int n = 0; n < iterations; ++n) {
        const int buf = n & 1;
        const int h = kvh * group + n / q_tiles, i0 = (first_tile + n % q_tiles) * MBR;
        if (n + 1 < iterations) issue(n + 1, buf ^ 1);
        cp_async_double_buffer_wait(n + 1 < iterations);
        const T* qt = qs + buf * TILE;
        const T* dot = dos + buf * TILE;
        const float* lse2 = lse2_s + buf * MBR;
        const float* dlt = delta_s + buf * MBR;

        // quote: mma_scores
        // S^T and dP^T for this warp's 16 keys and the tile's 64 queries.
        float st[QTILES][4], dpt[QTILES][4];
        mma_score_pair<T, STRIDE, KSTEPS>(st, dpt, ks, vs, qt, dot, warp * 16, lane);
        // end quote: mma_scores

        // P^T into st, dS^T into dpt. Element e of a fragment: key row g (e < 2) or g + 8,
        // query column 2t + (e % 2) of its 8-wide tile. A tile pair that every query of the
        // tile sees whole needs no mask test.
        // quote: mma_p_ds
        p_and_ds<true>(st, dpt, lse2, dlt, scale_log2, t, [&](float* p) {
            if (i0 + MBR > s.lq || j0 + MBC > key_end(i0, s, causal))
                mask_fragment<QTILES>(p, t, 0.0f, [&](int r, int query) {
                    return visible(i0 + query, j0 + warp * 16 + g + 8 * r, s, causal);
                });
        });
        // end quote: mma_p_ds

        // quote: mma_pack
        // P^T and dS^T as 16-bit A fragments, the 64 queries being k: two 8-wide
        // accumulator tiles are one 16-wide A tile. The f32 values die here.
        unsigned pa[MBR / 16][4], da[MBR / 16][4];
#pragma unroll
        for (int kk = 0; kk < MBR / 16; ++kk)
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                const int j = 2 * kk + x / 2, e = 2 * (x % 2);
                pa[kk][x] = pack2<T>(st[j][e], st[j][e + 1]);
                da[kk][x] = pack2<T>(dpt[j][e], dpt[j][e + 1]);
            }
        if (atomic_dq) {
            // dS^T to shared memory for dQ, into dst (the dS^T tile: 64 key rows of DSS = 64 + 8
            // halves, padded for ldmatrix): this warp's 16 key rows (g, then g + 8), query
            // pairs packed; register x of da[kk] holds query tile 2kk + x / 2, row half x % 2.
#pragma unroll
            for (int kk = 0; kk < MBR / 16; ++kk)
#pragma unroll
                for (int x = 0; x < 4; ++x)
                    *reinterpret_cast<unsigned*>(dst + (warp * 16 + g + (x % 2) * 8) * DSS +
                                                 (2 * kk + x / 2) * 8 + 2 * t) = da[kk][x];
        }
        // end quote: mma_pack

        // quote: mma_dv_dk
        // dV += P^T dO and dK += dS^T Q.
#pragma unroll
        for (int kk = 0; kk < MBR / 16; ++kk) {
#pragma unroll
            for (int dp = 0; dp < DTILES / 2; ++dp) {
                // Queries 16kk + 0..7 and + 8..15 at columns 16dp, then 16dp + 8, transposed:
                // the b0, b1 of column tiles 2dp and 2dp + 1.
                const int b_at =
                    (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * STRIDE + dp * 16 + (lane / 16) * 8;
                unsigned b[4];
                ldmatrix_x4_trans(b, dot + b_at);
                mma_16816<T>(dv_acc[2 * dp], pa[kk], b[0], b[1]);
                mma_16816<T>(dv_acc[2 * dp + 1], pa[kk], b[2], b[3]);
                ldmatrix_x4_trans(b, qt + b_at);
                mma_16816<T>(dk_acc[2 * dp], da[kk], b[0], b[1]);
                mma_16816<T>(dk_acc[2 * dp + 1], da[kk], b[2], b[3]);
            }
        }
        // end quote: mma_dv_dk

        // quote: mma_dq
        if (atomic_dq) {
            __syncthreads();  // every warp's rows of dS^T are in
            // dQ of queries 16w .. 16w + 15 over the tile's 64 keys (k), 64 columns at a time
            // (registers). A = dS: its four 8x8 matrices are blocks of dS^T (rows = keys),
            // read transposed.
#pragma unroll 1
            for (int c0 = 0; c0 < D; c0 += 64) {
                float dq[8][4];
#pragma unroll
                for (int j = 0; j < 8; ++j) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;
#pragma unroll 1
                for (int kk = 0; kk < MBC / 16; ++kk) {
                    unsigned a[4];
                    ldmatrix_x4_trans(a, dst + (kk * 16 + lane % 8 + (lane / 16) * 8) * DSS +
                                             warp * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
                    for (int dp = 0; dp < 4; ++dp) {
                        unsigned b[4];
                        ldmatrix_x4_trans(b, ks + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * STRIDE +
                                                 c0 + dp * 16 + (lane / 16) * 8);
                        mma_16816<T>(dq[2 * dp], a, b[0], b[1]);
                        mma_16816<T>(dq[2 * dp + 1], a, b[2], b[3]);
                    }
                }
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int i = i0 + warp * 16 + g + r * 8;
                    if (i >= s.lq) continue;
                    float* row = dq_accum + ((index_t)(s.q0 + i) * heads + h) * D + c0;
#pragma unroll
                    for (int j = 0; j < 8; ++j) red_add2(row + j * 8 + 2 * t, dq[j][2 * r], dq[j][2 * r + 1]);
                }
            }
        }
        // end quote: mma_dq
        __syncthreads();  // the next iteration's copies overwrite the buffers just read
    }
    cp_async_wait<0>();  // nothing may still be landing when the block writes and exits

#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int key = j0 + warp * 16 + g + r * 8;
        if (key >= s.lk) continue;
        const index_t token = (index_t)(s.k0 + key) * kv_heads + kvh;
        unsigned* out_k = reinterpret_cast<unsigned*>(dk + token * D);
        unsigned* out_v = reinterpret_cast<unsigned*>(dv + token * D);
#pragma unroll
        for (int j = 0; j < DTILES; ++j) {
            out_k[j * 4 + t] = pack2<T>(dk_acc[j][2 * r] * scale, dk_acc[j][2 * r + 1] * scale);
            out_v[j * 4 + t] = pack2<T>(dv_acc[j][2 * r], dv_acc[j][2 * r + 1]);
        }
    }
}

// Deterministic dQ on tensor cores: grid(ceil(max lq / 64), heads, batch), block(128); the
// forward's shape (warp w owns queries 16w .. 16w + 15, key tiles of 64 double-buffered with
// cp.async) with the backward's products: S = Q K^T and dP = dO V^T (B: K and V rows), P and
// dS in registers, dQ += dS K (A: dS from the accumulators; B: K through ldmatrix.trans).
template <typename T, int D>
__device__ __forceinline__ void fa2_mma_bwd_dq(const T* q, const T* k, const T* v, const T* d_o,
                                               const float* lse, const float* delta, T* dq,
                                               const int* cu_q, const int* cu_k, int heads,
                                               int kv_heads, float scale, int causal) {
    constexpr int STRIDE = D + FA2B_MMA_PAD, TILE = 64 * STRIDE;
    constexpr int KSTEPS = D / 16, NTILES = MBC / 8, DTILES = D / 8;
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    T* qs = reinterpret_cast<T*>(shared_bytes);
    T* dos = qs + TILE;
    T* ks = dos + TILE;       // [2][MBC][STRIDE]
    T* vs = ks + 2 * TILE;    // [2][MBC][STRIDE]
    static_assert(6 * TILE * sizeof(T) == Fa2MmaBwdHost<D>::DQ_SHARED_BYTES,
                  "the host launches the dQ pass with the shared memory this layout takes");

    const Sequence s = sequence(cu_q, cu_k, blockIdx.z);
    // Causal blocks further down a sequence have more keys to visit: start those first.
    const int tile = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int i0 = tile * MBR;
    if (i0 >= s.lq) return;
    const int h = blockIdx.y, kvh = h / (heads / kv_heads);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const float scale_log2 = scale * LOG2E;

    float lse2[2], dlt[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = i0 + warp * 16 + g + r * 8;
        const index_t row = (index_t)(s.q0 + i) * heads + h;
        lse2[r] = i < s.lq ? lse[row] * LOG2E : 0.0f;
        dlt[r] = i < s.lq ? delta[row] : 0.0f;
    }
    const int keys = key_end(min(i0 + MBR, s.lq) - 1, s, causal);
    const int tiles = (keys + MBC - 1) / MBC;
    const int unmasked_keys = i0 + MBR > s.lq ? 0 : key_end(i0, s, causal);
    mma_load_tile<T, D, MBR>(qs, q, s.q0 + i0, s.lq - i0, heads, h);
    mma_load_tile<T, D, MBR>(dos, d_o, s.q0 + i0, s.lq - i0, heads, h);
    if (tiles > 0) {
        mma_load_tile<T, D, MBC>(ks, k, s.k0, s.lk, kv_heads, kvh);
        mma_load_tile<T, D, MBC>(vs, v, s.k0, s.lk, kv_heads, kvh);
    }
    cp_async_commit();

    float acc[DTILES][4];
#pragma unroll
    for (int j = 0; j < DTILES; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

    for (int n = 0; n < tiles; ++n) {
        const int buf = n & 1, j0 = n * MBC;
        if (n + 1 < tiles) {
            const int next = j0 + MBC;
            mma_load_tile<T, D, MBC>(ks + (buf ^ 1) * TILE, k, s.k0 + next, s.lk - next, kv_heads, kvh);
            mma_load_tile<T, D, MBC>(vs + (buf ^ 1) * TILE, v, s.k0 + next, s.lk - next, kv_heads, kvh);
        }
        cp_async_double_buffer_wait(n + 1 < tiles);
        const T* kt = ks + buf * TILE;
        const T* vt = vs + buf * TILE;

        // S and dP for this warp's 16 queries and the tile's 64 keys.
        float sc[NTILES][4], dp[NTILES][4];
        mma_score_pair<T, STRIDE, KSTEPS>(sc, dp, qs, dos, kt, vt, warp * 16, lane);

        // P into sc, dS into dp. Element e: query row g (e < 2) or g + 8, key column 2t + (e % 2).
        p_and_ds<false>(sc, dp, lse2, dlt, scale_log2, t, [&](float* p) {
            if (j0 + MBC > unmasked_keys)
                mask_fragment<NTILES>(p, t, 0.0f, [&](int r, int key) {
                    return visible(i0 + warp * 16 + g + 8 * r, j0 + key, s, causal);
                });
        });

        // dQ += dS K: dS is still in dP's accumulator fragments.
        mma_accumulators_times_tile<T, STRIDE>(acc, dp, kt, lane);
        __syncthreads();  // the next iteration's copies overwrite the buffer just read
    }
    cp_async_wait<0>();

#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = i0 + warp * 16 + g + r * 8;
        if (i >= s.lq) continue;
        unsigned* out = reinterpret_cast<unsigned*>(dq + ((index_t)(s.q0 + i) * heads + h) * D);
#pragma unroll
        for (int j = 0; j < DTILES; ++j)
            out[j * 4 + t] = pack2<T>(acc[j][2 * r] * scale, acc[j][2 * r + 1] * scale);
    }
}

// One extern "C" entry per (version, pass, dtype, head dim); the launcher picks by name. The
// key-tile pass adds dQ into dq_accum when atomic_dq is set, and leaves dQ to the `_bwd_dq`
// pass otherwise (deterministic mode). A runtime flag rather than a template parameter: the
// variant without the dQ code was allocated registers worse (it spilled at head dim 128).
#define BWD_KERNELS(version, T, name, D)                                                        \
    KERNEL void version##_bwd_##name##_d##D(                                                    \
        const T* q, const T* k, const T* v, const T* d_o, const float* lse, const float* delta, \
        float* dq_accum, T* dk, T* dv, const int* cu_q, const int* cu_k, int heads,              \
        int kv_heads, float scale, int causal, int atomic_dq) {                                  \
        version##_bwd<T, D>(q, k, v, d_o, lse, delta, dq_accum, dk, dv, cu_q, cu_k, heads,       \
                            kv_heads, scale, causal, atomic_dq);                                 \
    }                                                                                            \
    KERNEL void version##_bwd_dq_##name##_d##D(                                                 \
        const T* q, const T* k, const T* v, const T* d_o, const float* lse, const float* delta, \
        T* dq, const int* cu_q, const int* cu_k, int heads, int kv_heads, float scale,           \
        int causal) {                                                                            \
        version##_bwd_dq<T, D>(q, k, v, d_o, lse, delta, dq, cu_q, cu_k, heads, kv_heads, scale, \
                               causal);                                                          \
    }

FA2_INSTANCES(BWD_KERNELS, fa2_scalar)
FA2_INSTANCES(BWD_KERNELS, fa2_mma)

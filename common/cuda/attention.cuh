// The packed-batch layout and the causal mask of the attention days (10 forward, 20
// backward): forward and backward must agree on which keys a query sees, so the rule lives
// here once, and so does applying it to a register fragment (mask_fragment).
//
// Sequences are packed one after another: cu_q / cu_k hold where each starts (batch + 1
// entries). The causal mask is aligned bottom-right, as FlashAttention 2.1 and later: query i
// of a sequence of lq queries and lk keys sees keys j < i + 1 + lk - lq, so the last query
// sees every key; when lq > lk the first lq - lk queries see none.
//
// Beside the rule, the device code the two days' versions share: the naive product over the
// keys, the scalar versions' tile copy, the backward's two score products and its P and dS on
// tensor cores (both of its passes run them), and the element types and head dims the fa2
// versions are compiled for.
#pragma once
#include "mma.cuh"  // ldmatrix_x4, mma_16816; index_t, to_f32 through dtype.cuh

// LOG2E and LN2: common.cuh.

struct Sequence {
    int q0, lq;  // first token and length of the queries
    int k0, lk;  // and of the keys
};

__device__ __forceinline__ Sequence sequence(const int* cu_q, const int* cu_k, int b) {
    return {cu_q[b], cu_q[b + 1] - cu_q[b], cu_k[b], cu_k[b + 1] - cu_k[b]};
}

// The keys query i sees are 0 .. key_end - 1.
__device__ __forceinline__ int key_end(int i, const Sequence& s, int causal) {
    if (!causal) return s.lk;
    const int end = i + 1 + s.lk - s.lq;
    return end < 0 ? 0 : (end > s.lk ? s.lk : end);
}

// Whether query i of the sequence sees key j (both possibly past the ends of their tiles).
__device__ __forceinline__ bool visible(int i, int j, const Sequence& s, int causal) {
    return i < s.lq && j < key_end(i, s, causal);
}

// The first query that sees key j: keys are hidden from queries i < j + lq - lk (causal).
__device__ __forceinline__ int first_query(int j, const Sequence& s, int causal) {
    if (!causal) return 0;
    const int i = j + s.lq - s.lk;
    return i < 0 ? 0 : i;
}

// The naive versions' product over the keys, through memory: out[i, h, c] =
// scale sum_j M[i, j] X[j, c], for M one head's [lq, lk] block of an f32 matrix the first
// kernel wrote (P for the forward's O = P V, dS for the backward's dQ = scale dS K; sequence b's
// [heads, lq, lk] block starts at s_offset[b]) and X the K or V rows of the head's kv head.
// grid(max lq, heads, batch), block(d): one block per query row, one thread per column.
template <typename T>
__device__ __forceinline__ void naive_row_times_keys(const float* m, const T* x, T* out,
                                                     const int* cu_q, const int* cu_k,
                                                     const index_t* s_offset, int heads,
                                                     int kv_heads, float scale) {
    const int b = blockIdx.z, h = blockIdx.y, i = blockIdx.x, c = threadIdx.x, d = blockDim.x;
    const Sequence s = sequence(cu_q, cu_k, b);
    if (i >= s.lq) return;
    const int kvh = h / (heads / kv_heads);
    const float* row = m + s_offset[b] + ((index_t)h * s.lq + i) * s.lk;
    float acc = 0.0f;
    for (int j = 0; j < s.lk; ++j) acc += row[j] * to_f32(x[((index_t)(s.k0 + j) * kv_heads + kvh) * d + c]);
    out[((index_t)(s.q0 + i) * heads + h) * d + c] = from_f32<T>(acc * scale);
}

// The scalar versions' tile copy: rows row0 .. row0 + ROWS - 1 of a sequence (row r at token
// token0 + row0 + r, head `head` of `nheads`) of two [tokens, nheads, D] tensors into the f32
// tiles a and b in shared memory (the same rows of each: K and V, or Q and dO), zeros from row
// `rows` of the sequence on. Every thread of the block copies its share, an element at a time.
template <int D, int ROWS, int WA, int WB, typename T>
__device__ __forceinline__ void scalar_load_rows(float (&a)[ROWS][WA], float (&b)[ROWS][WB],
                                                 const T* x, const T* y, int token0, int row0,
                                                 int rows, int nheads, int head) {
    for (int e = threadIdx.x; e < ROWS * D; e += blockDim.x) {
        const int r = e / D, c = e % D;
        const bool in = row0 + r < rows;
        const index_t at = ((index_t)(token0 + row0 + r) * nheads + head) * D + c;
        a[r][c] = in ? to_f32(x[at]) : 0.0f;
        b[r][c] = in ? to_f32(y[at]) : 0.0f;
    }
}

// quote: mask_fragment
// Sets the elements of an accumulator fragment that `visible(row, column)` rejects to `masked`
// (-inf for scores, 0 for probabilities). The fragment is BLOCKS blocks of 8 columns, 4
// registers each, as mma.sync m16n8 and each warp's rows of a wgmma m64 leave them: element e of
// block j is row e / 2 of the thread's two (lane / 4 and lane / 4 + 8), column 8j + 2t + e % 2,
// t = lane % 4. Rows and columns are the fragment's own: the caller's predicate adds its tile's
// origin, and says whether rows are queries (S = Q K^T) or keys (the backward's S^T = K Q^T).
template <int BLOCKS, typename Visible>
__device__ __forceinline__ void mask_fragment(float* fragment, int t, float masked,
                                              Visible visible) {
#pragma unroll
    for (int j = 0; j < BLOCKS; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (!visible(e / 2, 8 * j + 2 * t + e % 2)) fragment[4 * j + e] = masked;
}
// end quote: mask_fragment

// quote: p_and_ds
// The backward's P = exp2(S scale_log2 - L) and dS = P (dP - D), in place in the accumulator
// fragments of its score pair (mma_score_pair: sc becomes P, dp dS). Between the two,
// `mask(&sc[0][0])` sets P to 0 where the mask hides a key (mask_fragment, on the tiles that need
// it). L (in log2 units) and D are a query's: with QUERY_COLUMNS (S^T, the queries along the
// columns) lse2 and delta hold one per column of the tile, element e of fragment j being column
// 8j + 2t + e % 2; without, one per row of the thread's two, element e being row e / 2.
template <bool QUERY_COLUMNS, int NT, typename Mask>
__device__ __forceinline__ void p_and_ds(float (&sc)[NT][4], float (&dp)[NT][4],
                                         const float* lse2, const float* delta, float scale_log2,
                                         int t, Mask mask) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            sc[j][e] = exp2f(sc[j][e] * scale_log2 -
                             lse2[QUERY_COLUMNS ? j * 8 + 2 * t + (e % 2) : e / 2]);
    mask(&sc[0][0]);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            dp[j][e] = sc[j][e] *
                       (dp[j][e] - delta[QUERY_COLUMNS ? j * 8 + 2 * t + (e % 2) : e / 2]);
}
// end quote: p_and_ds

// quote: mma_score_pair
// The backward's two score products for one warp on mma.sync m16n8k16, which share every
// fragment address: sc = A_s B_s^T and dp = A_dp B_dp^T (S = Q K^T and dP = dO V^T, or S^T and
// dP^T with K and V as A). Each A is a row-major tile in shared memory whose rows row0 ..
// row0 + 15 are the warp's; each B is a row-major [8NT][16 KSTEPS] tile (K or Q rows as they
// lie in memory, which are exactly B's "col" layout). Rows are STRIDE elements apart. sc and dp
// come back as accumulator fragments: sc[j] holds columns 8j .. 8j + 7 in the C layout.
template <typename T, int STRIDE, int KSTEPS, int NT>
__device__ __forceinline__ void mma_score_pair(float (&sc)[NT][4], float (&dp)[NT][4],
                                               const T* a_s, const T* a_dp, const T* b_s,
                                               const T* b_dp, int row0, int lane) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[j][e] = dp[j][e] = 0.0f;
    // Not unrolled: the compiler would hoist every fragment load and run out of registers.
#pragma unroll 1
    for (int kk = 0; kk < KSTEPS; ++kk) {
        unsigned as[4], adp[4];
        const int a_at = (row0 + lane % 16) * STRIDE + kk * 16 + (lane / 16) * 8;
        ldmatrix_x4(as, a_s + a_at);
        ldmatrix_x4(adp, a_dp + a_at);
#pragma unroll
        for (int jp = 0; jp < NT / 2; ++jp) {
            // B rows 16jp + 0..7 and + 8..15 at columns 16kk and 16kk + 8: the b0, b1 of
            // column tiles 2jp and 2jp + 1.
            const int b_at =
                (jp * 16 + lane % 8 + (lane / 16) * 8) * STRIDE + kk * 16 + ((lane / 8) % 2) * 8;
            unsigned b[4];
            ldmatrix_x4(b, b_s + b_at);
            mma_16816<T>(sc[2 * jp], as, b[0], b[1]);
            mma_16816<T>(sc[2 * jp + 1], as, b[2], b[3]);
            ldmatrix_x4(b, b_dp + b_at);
            mma_16816<T>(dp[2 * jp], adp, b[0], b[1]);
            mma_16816<T>(dp[2 * jp + 1], adp, b[2], b[3]);
        }
    }
}
// end quote: mma_score_pair

// The element types and head dims the fa2_scalar and fa2_mma versions of days 10 (forward) and
// 20 (backward) are compiled for, day 10's HEAD_DIMS on the host: `KERNELS(version, T, name, D)`
// once for each, `name` the type's in the entry names.
#define FA2_INSTANCES(KERNELS, version) \
    KERNELS(version, bf16_t, bf16, 64)  \
    KERNELS(version, bf16_t, bf16, 128) \
    KERNELS(version, f16_t, f16, 64)    \
    KERNELS(version, f16_t, f16, 128)

// quote: item_slot
// A work item as a persistent attention kernel's producer hands it to its consumers (day 10's
// fa_hopper): the first query row of the tile, the head and the sequence (i0 < 0: no more
// work). One slot per Q stage, read by one thread of each consumer warp (lane 0, which
// shuffles it to the others), and two orders keep it:
//   - write before read: the producer writes it, then arrives on q_full (a release); each
//     reader waits on q_full (an acquire) before reading it;
//   - read before the next write: each reader arrives on q_empty itself once its warp is done
//     with the item's Q (q_empty counts 4 arrivals per consumer warpgroup); the producer
//     waits for all of them before rewriting the slot.
// mbarrier.arrive releases only the arriving thread's own earlier accesses, so every reader
// arrives (what racecheck made of an earlier arrangement: day 10's notes, "The item slot").
struct __align__(16) ItemSlot {
    int i0, h;
    Sequence s;
};
// end quote: item_slot

// A persistent attention kernel's work counter, `tickets` = [next, producers done], 0 and 0 at
// launch: each block's producer calls this after drawing its last ticket, and the last of the
// grid's gridDim.x producers to do so sets both back for the next launch (which, on the same
// stream, starts after this one ends). Days 10 and 20 draw their work from it.
__device__ __forceinline__ void tickets_done(int* tickets) {
    __threadfence();
    if (atomicAdd(tickets + 1, 1) == (int)gridDim.x - 1) {
        __threadfence();
        atomicExch(tickets, 0);
        atomicExch(tickets + 1, 0);
    }
}

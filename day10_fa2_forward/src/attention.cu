// Day 10: FlashAttention-2, forward. O = softmax(scale * Q K^T + mask) V, and the log-sum-exp
// L of every query row, for the backward pass (day 20).
//
//   naive       three kernels through memory: S = scale Q K^T (f32), softmax rows of S in
//               place (and L), O = P V. S is batch x heads x seqlen_q x seqlen_k floats.
//   fa2_scalar  the FlashAttention-2 algorithm in plain f32 arithmetic: one block per
//               (query tile, head, sequence), K/V tiles streamed through shared memory, an
//               online softmax per row, one normalisation at the end. S never exists whole.
//   fa2_mma     the same algorithm on tensor cores: S and O tiles in mma.sync fragments, P
//               handed from S's registers straight to the P V product, ldmatrix loads from
//               padded shared memory, K/V tiles double-buffered with cp.async.
//
//   cargo run --release -p day10 -- --kernel fa2_mma --seqlen 4096 --head-dim 128 --causal
//
// Layout (FlashAttention's variable-length form): the sequences of a batch are packed, Q and O
// are [total_q, heads, D], K and V [total_k, kv_heads, D], L is [total_q, heads] (f32, natural
// log). cu_q / cu_k hold where each sequence starts (batch + 1 entries). Query head h reads kv
// head h / (heads / kv_heads): grouped-query attention without repeating K and V. The causal
// mask is aligned bottom-right: query i of a sequence of lq queries and lk keys sees keys
// j < i + 1 + lk - lq. A row that sees no key gets O = 0 and L = -inf.
#include "common.cuh"
#include "dtype.cuh"
#include "mma.cuh"
#include "reduce.cuh"
#include "attention.cuh"  // Sequence, key_end

// The flash versions' tiles come from the host as NVRTC defines (attention.rs's FA2_SCALAR and
// FA2_MMA, the one table both sides read): the launcher sizes its grid, block and shared memory
// from the same numbers, and the static_asserts below check that this file's layouts agree.
// Without the defines the file stops here, so no build runs on stale numbers.
#if !defined(FA2_SCALAR_ROWS) || !defined(FA2_SCALAR_KEYS) || !defined(FA2_SCALAR_THREADS) || \
    !defined(FA2_MMA_ROWS) || !defined(FA2_MMA_KEYS) || !defined(FA2_MMA_THREADS) ||          \
    !defined(FA2_MMA_PAD) || !defined(FA2_MMA_D64_SHARED_BYTES) ||                           \
    !defined(FA2_MMA_D128_SHARED_BYTES)
#error "attention.cu: compile it with the -DFA2_ defines of day10's FlashTile table"
#endif

// The dynamic shared memory the host launches fa2_mma with, per head dim (enumerators: a
// compile-time number that takes no storage in the module).
template <int D> struct Fa2MmaHost;
template <> struct Fa2MmaHost<64> {
    enum : int { SHARED_BYTES = FA2_MMA_D64_SHARED_BYTES };
};
template <> struct Fa2MmaHost<128> {
    enum : int { SHARED_BYTES = FA2_MMA_D128_SHARED_BYTES };
};

// ---------------------------------------------------------------------------------------------
// naive, step 1: S[b, h, i, j] = scale * q_i . k_j, or -inf where the mask hides key j.
// grid(ceil(max lk / 16), ceil(max lq / 16), batch * heads), block(16, 16): one thread per score.
// `s_offset[b]` is where sequence b's [heads, lq, lk] block of S starts.
template <typename T>
__device__ __forceinline__ void attention_scores(const T* q, const T* k, float* scores,
                                                 const int* cu_q, const int* cu_k,
                                                 const index_t* s_offset, int heads,
                                                 int kv_heads, int d, float scale, int causal) {
    const int b = blockIdx.z / heads, h = blockIdx.z % heads;
    const Sequence s = sequence(cu_q, cu_k, b);
    const int i = blockIdx.y * 16 + threadIdx.y, j = blockIdx.x * 16 + threadIdx.x;
    if (i >= s.lq || j >= s.lk) return;
    const int kvh = h / (heads / kv_heads);
    // quote: naive_scores
    float acc = NEG_INF;
    if (j < key_end(i, s, causal)) {
        const T* qi = q + ((index_t)(s.q0 + i) * heads + h) * d;
        const T* kj = k + ((index_t)(s.k0 + j) * kv_heads + kvh) * d;
        acc = 0.0f;
        for (int c = 0; c < d; ++c) acc += to_f32(qi[c]) * to_f32(kj[c]);
        acc *= scale;
    }
    scores[s_offset[b] + ((index_t)h * s.lq + i) * s.lk + j] = acc;
    // end quote: naive_scores
}

KERNEL void attention_scores_bf16(const bf16_t* q, const bf16_t* k, float* scores,
                                  const int* cu_q, const int* cu_k, const index_t* s_offset,
                                  int heads, int kv_heads, int d, float scale, int causal) {
    attention_scores(q, k, scores, cu_q, cu_k, s_offset, heads, kv_heads, d, scale, causal);
}
KERNEL void attention_scores_f16(const f16_t* q, const f16_t* k, float* scores, const int* cu_q,
                                 const int* cu_k, const index_t* s_offset, int heads,
                                 int kv_heads, int d, float scale, int causal) {
    attention_scores(q, k, scores, cu_q, cu_k, s_offset, heads, kv_heads, d, scale, causal);
}

// naive, step 2: each row of S becomes P = softmax(row) in place; L = max + log(sum).
// grid(ceil(max lq / 8), heads, batch), block(256): one warp per row.
KERNEL void attention_softmax_rows(float* scores, float* lse, const int* cu_q, const int* cu_k,
                                   const index_t* s_offset, int heads) {
    const int b = blockIdx.z, h = blockIdx.y;
    const Sequence s = sequence(cu_q, cu_k, b);
    const int i = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (i >= s.lq) return;
    float* row = scores + s_offset[b] + ((index_t)h * s.lq + i) * s.lk;
    MaxSum stats = max_sum_empty();
    for (int j = lane; j < s.lk; j += 32) stats = max_sum_add(stats, row[j]);
    stats = warp_max_sum(stats);
    // A row the mask empties has max -inf: P = 0, L = -inf (not NaN from -inf - -inf).
    const bool empty = stats.max == NEG_INF;
    const float inv = empty ? 0.0f : 1.0f / stats.sum;
    for (int j = lane; j < s.lk; j += 32) row[j] = empty ? 0.0f : expf(row[j] - stats.max) * inv;
    if (lane == 0) lse[(index_t)(s.q0 + i) * heads + h] = empty ? NEG_INF : stats.max + logf(stats.sum);
}

// naive, step 3: O[i, h, c] = sum_j P[i, j] V[j, c] (naive_row_times_keys, attention.cuh; day
// 20's dQ = scale dS K is the same product). grid(max lq, heads, batch), block(D): one block per
// query row, one thread per output column.
KERNEL void attention_pv_bf16(const float* probs, const bf16_t* v, bf16_t* o, const int* cu_q,
                              const int* cu_k, const index_t* s_offset, int heads, int kv_heads) {
    naive_row_times_keys(probs, v, o, cu_q, cu_k, s_offset, heads, kv_heads, 1.0f);
}
KERNEL void attention_pv_f16(const float* probs, const f16_t* v, f16_t* o, const int* cu_q,
                             const int* cu_k, const index_t* s_offset, int heads, int kv_heads) {
    naive_row_times_keys(probs, v, o, cu_q, cu_k, s_offset, heads, kv_heads, 1.0f);
}

// ---------------------------------------------------------------------------------------------
// fa2_scalar: grid(ceil(max lq / 16), heads, batch), block(128): 4 warps, 4 query rows each.
// For each tile of 32 keys, lane j of a warp scores key j against each of its rows, the warp
// reduces the tile's max and sum (the online softmax), and every lane accumulates D / 32
// columns of O, the probabilities passed round the warp with shuffles. Scores are kept in
// log2 units (scale * log2 e folded in) so that exp2f, one MUFU.EX2, does the exponentials.
template <typename T, int D>
__device__ __forceinline__ void fa2_scalar(const T* q, const T* k, const T* v, T* o, float* lse,
                                           const int* cu_q, const int* cu_k, int heads,
                                           int kv_heads, float scale_log2, int causal) {
    constexpr int BR = FA2_SCALAR_ROWS, ROWS = BR / 4, BC = FA2_SCALAR_KEYS, C = D / 32;
    static_assert(FA2_SCALAR_THREADS == 128 && BR % 4 == 0, "four warps, ROWS query rows each");
    static_assert(BC == 32, "lane j of a warp scores key j of the tile");
    __shared__ float qs[BR][D];
    __shared__ float ks[BC][D + 1];  // +1: lane j reads row j, so a column walk is conflict-free
    __shared__ float vs[BC][D];
    const Sequence s = sequence(cu_q, cu_k, blockIdx.z);
    const int i0 = blockIdx.x * BR;
    if (i0 >= s.lq) return;
    const int h = blockIdx.y, kvh = h / (heads / kv_heads);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    for (int e = threadIdx.x; e < BR * D; e += blockDim.x) {
        const int r = e / D, c = e % D;
        qs[r][c] = i0 + r < s.lq ? to_f32(q[((index_t)(s.q0 + i0 + r) * heads + h) * D + c]) : 0.0f;
    }
    float m[ROWS], l[ROWS], acc[ROWS][C];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        m[r] = NEG_INF;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) acc[r][c] = 0.0f;
    }
    // Keys past the last row's end are masked for every row of the block: skip their tiles.
    const int keys = key_end(min(i0 + BR, s.lq) - 1, s, causal);
    for (int j0 = 0; j0 < keys; j0 += BC) {
        __syncthreads();  // the previous tile is no longer read (and Q is in place)
        scalar_load_rows<D>(ks, vs, k, v, s.k0, j0, s.lk, kv_heads, kvh);
        __syncthreads();
        // quote: scalar_tile
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const int row = warp * ROWS + r;
            const int end = key_end(i0 + row, s, causal);
            float score = NEG_INF;
            if (j0 + lane < end) {
                float dot = 0.0f;
#pragma unroll 8
                for (int c = 0; c < D; ++c) dot += qs[row][c] * ks[lane][c];
                score = dot * scale_log2;
            }
            const float m_new = fmaxf(m[r], warp_max(score));
            if (m_new == NEG_INF) continue;  // the row has seen no key yet (whole warp agrees)
            const float alpha = exp2f(m[r] - m_new);  // 0 on the first visible tile
            const float p = exp2f(score - m_new);
            l[r] = l[r] * alpha + warp_sum(p);
            m[r] = m_new;
#pragma unroll
            for (int c = 0; c < C; ++c) acc[r][c] *= alpha;
            for (int j = 0; j < BC; ++j) {
                const float pj = __shfl_sync(FULL_WARP, p, j);
#pragma unroll
                for (int c = 0; c < C; ++c) acc[r][c] += pj * vs[j][lane + 32 * c];
            }
        }
        // end quote: scalar_tile
    }
    // quote: scalar_store
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int i = i0 + warp * ROWS + r;
        if (i >= s.lq) continue;
        const index_t token = (index_t)(s.q0 + i) * heads + h;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) o[token * D + lane + 32 * c] = from_f32<T>(acc[r][c] * inv);
        if (lane == 0) lse[token] = l[r] > 0.0f ? (m[r] + log2f(l[r])) * LN2 : NEG_INF;
    }
    // end quote: scalar_store
}

// ---------------------------------------------------------------------------------------------
// fa2_mma: grid(ceil(max lq / 64), heads, batch), block(128): 4 warps, 16 query rows each; key
// tiles of 64. Per key tile a warp computes its 16 x 64 block of S with mma.sync (A = its Q
// rows, kept in registers for the whole kernel; B = K rows, which are exactly B's "col"
// layout), rescales with the online softmax (a row lives in the 4 lanes of a group: two
// shuffles reduce it), converts P to 16-bit A fragments in registers, and adds P V (B = V
// through ldmatrix.trans). Shared memory rows are padded by 16 bytes, so the 8 rows of an
// ldmatrix matrix start 4 banks apart and cover all 32 banks once. The next K/V tile is in
// flight (cp.async) while this one is used.
template <typename T, int D>
__device__ __forceinline__ void fa2_mma(const T* q, const T* k, const T* v, T* o, float* lse,
                                        const int* cu_q, const int* cu_k, int heads, int kv_heads,
                                        float scale_log2, int causal) {
    constexpr int BR = FA2_MMA_ROWS, BC = FA2_MMA_KEYS, THREADS = FA2_MMA_THREADS;
    constexpr int STRIDE = D + FA2_MMA_PAD;
    constexpr int KSTEPS = D / 16, NTILES = BC / 8, DTILES = D / 8, CHUNKS = D / 8;
    static_assert(THREADS == 128 && BR == 16 * (THREADS / 32), "four warps, 16 query rows each");
    static_assert(BR == 64 && BC == 64, "load_tile copies tiles of 64 rows");
    static_assert(FA2_MMA_PAD * sizeof(T) == 16, "shared rows are padded by 16 bytes");
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    T* qs = reinterpret_cast<T*>(shared_bytes);  // [BR][STRIDE]
    T* ks = qs + BR * STRIDE;                     // [2][BC][STRIDE]
    T* vs = ks + 2 * BC * STRIDE;                 // [2][BC][STRIDE]
    static_assert((BR + 4 * BC) * STRIDE * sizeof(T) == Fa2MmaHost<D>::SHARED_BYTES,
                  "the host launches with the shared memory this layout takes");

    const Sequence s = sequence(cu_q, cu_k, blockIdx.z);
    // Causal blocks further down a sequence have more keys to visit: start those first.
    const int tile = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int i0 = tile * BR;
    if (i0 >= s.lq) return;
    const int h = blockIdx.y, kvh = h / (heads / kv_heads);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;

    // quote: mma_load_tile
    // `rows` rows of D elements from `src` (row r at token first + r of head `head` of
    // `nheads`) into `dst`; rows at or past `valid` are zero-filled.
    auto load_tile = [&](T* dst, const T* src, int first, int valid, int nheads, int head) {
#pragma unroll
        for (int e = tid; e < 64 * CHUNKS; e += THREADS) {
            const int r = e / CHUNKS, c = (e % CHUNKS) * 8;
            const bool in = r < valid;
            const T* from = src + ((index_t)(first + (in ? r : 0)) * nheads + head) * D + c;
            cp_async_16_zfill(dst + r * STRIDE + c, from, in);
        }
    };
    // end quote: mma_load_tile

    // quote: mma_pipeline
    const int keys = key_end(min(i0 + BR, s.lq) - 1, s, causal);
    const int tiles = (keys + BC - 1) / BC;
    // Rows of the block all see at least the keys its first row sees: tiles before that end
    // need no mask.
    const int unmasked_keys = key_end(i0, s, causal);
    load_tile(qs, q, s.q0 + i0, s.lq - i0, heads, h);
    if (tiles > 0) {
        load_tile(ks, k, s.k0, s.lk, kv_heads, kvh);
        load_tile(vs, v, s.k0, s.lk, kv_heads, kvh);
    }
    cp_async_commit();

    unsigned qf[KSTEPS][4];
    float acc[DTILES][4];
#pragma unroll
    for (int j = 0; j < DTILES; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};

    for (int n = 0; n < tiles; ++n) {
        const int buf = n & 1, j0 = n * BC;
        if (n + 1 < tiles) {
            const int next = j0 + BC;
            load_tile(ks + (buf ^ 1) * BC * STRIDE, k, s.k0 + next, s.lk - next, kv_heads, kvh);
            load_tile(vs + (buf ^ 1) * BC * STRIDE, v, s.k0 + next, s.lk - next, kv_heads, kvh);
        }
        cp_async_double_buffer_wait(n + 1 < tiles);
        if (n == 0) {
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk)
                // quote: mma_q_fragment
                ldmatrix_x4(qf[kk], qs + (warp * 16 + lane % 16) * STRIDE + kk * 16 + (lane / 16) * 8);
                // end quote: mma_q_fragment
        }
        // end quote: mma_pipeline
        const T* kt = ks + buf * BC * STRIDE;
        const T* vt = vs + buf * BC * STRIDE;

        // quote: mma_scores
        // S = Q K^T for this warp's 16 rows and the tile's 64 keys.
        float sc[NTILES][4];
#pragma unroll
        for (int j = 0; j < NTILES; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
#pragma unroll
            for (int jp = 0; jp < NTILES / 2; ++jp) {
                // Matrices: keys 16jp + 0..7 and + 8..15, each at columns 16kk and 16kk + 8:
                // the b0, b1 of key tiles 2jp and 2jp + 1.
                unsigned b[4];
                ldmatrix_x4(b, kt + (jp * 16 + lane % 8 + (lane / 16) * 8) * STRIDE + kk * 16 +
                                   ((lane / 8) % 2) * 8);
                mma_16816<T>(sc[2 * jp], qf[kk], b[0], b[1]);
                mma_16816<T>(sc[2 * jp + 1], qf[kk], b[2], b[3]);
            }
        }
        // end quote: mma_scores

        // quote: mma_mask
        // Mask keys past a row's end (the sequence's or the causal one; row r of the thread's
        // two is query i0 + 16 warp + g + 8r), then scale into log2 units (-inf stays -inf).
        if (j0 + BC > unmasked_keys)
            mask_fragment<NTILES>(&sc[0][0], t, NEG_INF, [&](int r, int key) {
                return j0 + key < key_end(i0 + warp * 16 + g + 8 * r, s, causal);
            });
#pragma unroll
        for (int j = 0; j < NTILES; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) sc[j][e] *= scale_log2;
        // end quote: mma_mask

        // quote: mma_softmax
        // Online softmax: element e of a fragment is row g (e < 2) or g + 8 (e >= 2).
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = m[r];
#pragma unroll
            for (int j = 0; j < NTILES; ++j) mx = fmaxf(mx, fmaxf(sc[j][2 * r], sc[j][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(FULL_WARP, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(FULL_WARP, mx, 2));
            // While a row has seen no key, exponentiate against 0: every p is exp2(-inf) = 0.
            const float base = mx == NEG_INF ? 0.0f : mx;
            const float alpha = exp2f(m[r] - base);
            m[r] = mx;
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < NTILES; ++j) {
                sc[j][2 * r] = exp2f(sc[j][2 * r] - base);
                sc[j][2 * r + 1] = exp2f(sc[j][2 * r + 1] - base);
                sum += sc[j][2 * r] + sc[j][2 * r + 1];
            }
            // This lane's share of the row sum; the group's 4 shares are added at the end.
            l[r] = l[r] * alpha + sum;
#pragma unroll
            for (int j = 0; j < DTILES; ++j) {
                acc[j][2 * r] *= alpha;
                acc[j][2 * r + 1] *= alpha;
            }
        }
        // end quote: mma_softmax

        // quote: mma_pv
        // O += P V: P is still in S's accumulator fragments.
        mma_accumulators_times_tile<T, STRIDE>(acc, sc, vt, lane);
        // end quote: mma_pv
        __syncthreads();  // the next iteration's copies overwrite the buffer just read
    }
    cp_async_wait<0>();  // nothing may still be landing when the block exits (tiles == 0)

    // quote: mma_store
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(FULL_WARP, l[r], 1);
        l[r] += __shfl_xor_sync(FULL_WARP, l[r], 2);
        const int i = i0 + warp * 16 + g + r * 8;
        if (i >= s.lq) continue;
        const index_t token = (index_t)(s.q0 + i) * heads + h;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        unsigned* out = reinterpret_cast<unsigned*>(o + token * D);
#pragma unroll
        for (int j = 0; j < DTILES; ++j)
            out[j * 4 + t] = pack2<T>(acc[j][2 * r] * inv, acc[j][2 * r + 1] * inv);
        if (t == 0) lse[token] = l[r] > 0.0f ? (m[r] + log2f(l[r])) * LN2 : NEG_INF;
    }
    // end quote: mma_store
}

// One extern "C" entry per (version, dtype, head dim); the launcher picks by name.
#define FLASH_KERNEL(version, T, name, D)                                                     \
    KERNEL void version##_##name##_d##D(const T* q, const T* k, const T* v, T* o, float* lse, \
                                        const int* cu_q, const int* cu_k, int heads,          \
                                        int kv_heads, float scale_log2, int causal) {         \
        version<T, D>(q, k, v, o, lse, cu_q, cu_k, heads, kv_heads, scale_log2, causal);      \
    }

FA2_INSTANCES(FLASH_KERNEL, fa2_scalar)
FA2_INSTANCES(FLASH_KERNEL, fa2_mma)

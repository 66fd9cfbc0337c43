// day19: fused linear + cross-entropy, forward and backward (the challenge's optional
// "fused chunked cross-entropy loss and its backward", with Liger Kernel as the reference).
//
// The loss of a language model's last layer: logits = H W^T over a vocabulary of 128256, then
// cross-entropy against the targets. Materialising the [T, V] logits costs 2 GB in bf16 (and
// torch adds an f32 copy); Liger Kernel's idea is to walk the tokens in chunks: logits of a
// chunk (GEMM), the loss and its gradient written over those logits in place (this file),
// then the chunk's dH (GEMM) and its share of dW (GEMM, accumulated). Only a chunk of logits
// ever exists. The GEMMs are cuBLAS's (gemm.rs); this file is the memory-bound middle.
//
// Per token, with p = softmax(z), lse = log sum exp(z), smoothing eps, z-loss zc, N valid:
//   loss_t = lse - (1 - eps) z_y - eps mean(z) + zc lse^2
//   dz_j   = (p_j (1 + 2 zc lse) - (1 - eps)[j == y] - eps / V) / N
// Ignored targets (ignore_index, or anything outside [0, V)) give loss 0 and a zero row.
//
// Each row kernel takes one struct, CeRowParams (cross_entropy_params.cuh, written from the
// launcher's declaration), and hands its fields to the function that does the work. No row
// kernel's pointer is __restrict__: the fused loss writes the gradient over the logits, and
// restrict on an inlined function's parameters let NVCC load the logits through the
// non-coherent cache (ld.global.nc), which memory the kernel writes must not be; the targets
// and 1/N, which nothing writes, are read through it explicitly (__ldg), as the kernel
// parameters' restrict did before.
//
// Kernels:
//   ce_count_valid_i32        N and 1/N, once per run (the gradient is scaled by it)
//   ce_rows_two_pass_bf16x8   a block per row: pass 1 the row's max, sum of exp and sum of z
//                             (online, 16-byte loads), pass 2 re-reads the row (backwards,
//                             from L2 when it is still there) and writes the gradient
//   ce_rows_cluster8_bf16x8   a row split over a cluster of 8 blocks, each holding its slice
//                             in registers: the row is read once and written once; the 8
//                             partial statistics meet through distributed shared memory
//   ce_rows_cluster_stream{4,8}_bf16x8  cluster8's split, persistent: as many clusters of 4
//                             or 8 blocks as the GPU holds walk the rows, each block's slice of
//                             the next rows already on its way into shared memory (bulk
//                             copies, 3 or 4 stages) while this row is reduced and written,
//                             so loads never wait for a cluster to be scheduled
//   ce_rows_cluster_push_bf16x8  cluster8's split, each block's slice brought into shared
//                             memory by one bulk copy, the partial statistics pushed into all
//                             8 blocks (st.async + mbarrier) instead of read after cluster
//                             barriers; blocks of 256 threads, 6 per SM. The fused loop's
//                             row kernel for rows of 32768 to 131072 (RowKernel::best_for)
//   ce_mean_loss_f32          the per-row losses summed in a fixed order: deterministic
//
// Every row kernel takes `logits` and `grad` that may be the same buffer (the gradient
// written in place): each element is read before it is written, by the thread that writes it
// or (cluster_stream, cluster_push) into the block's shared memory by a bulk copy the block
// has waited for; no block writes another block's part of a row.
//
// Run: cargo run --release -p day19 (both problems), --kernel cluster_push for one CE version.
#include "common.cuh"
#include "dtype.cuh"
#include "hopper.cuh"
#include "mma.cuh"
#include "reduce.cuh"

// Every block size, cluster shape and slice comes from day19's layout table (tile.rs) as
// -DCE_... defines; the static_asserts below check that this file's shared memory is what the
// launcher gives and that every cluster kernel holds rows of the same longest vocabulary.
#if !defined(CE_REDUCE_THREADS) || !defined(CE_TWO_PASS_THREADS) || !defined(CE_CLUSTER_BLOCKS) || \
    !defined(CE_CLUSTER_THREADS) || !defined(CE_CLUSTER_PACKS) || !defined(CE_MAX_VOCAB) ||       \
    !defined(CE_STREAM_THREADS) || !defined(CE_STREAM4_STAGES) || !defined(CE_STREAM4_SLICE) ||  \
    !defined(CE_STREAM4_PER_SM) || !defined(CE_STREAM4_SHARED_BYTES) ||                          \
    !defined(CE_STREAM8_STAGES) || !defined(CE_STREAM8_SLICE) || !defined(CE_STREAM8_PER_SM) ||  \
    !defined(CE_STREAM8_SHARED_BYTES) || !defined(CE_PUSH_THREADS) || !defined(CE_PUSH_PACKS) ||  \
    !defined(CE_PUSH_PER_SM) || !defined(CE_PUSH_SHARED_BYTES)
#error "cross_entropy.cu: compile it with the -DCE_ defines of day19's layout table (tile.rs)"
#endif

#define BF16_PER_PACK 8

__device__ __forceinline__ bool is_valid_target(int y, int ignore_index, index_t vocab) {
    return y != ignore_index && y >= 0 && (index_t)y < vocab;
}

// block_sum meets the warps of a block in 32 slots.
static_assert(CE_REDUCE_THREADS % 32 == 0 && CE_REDUCE_THREADS <= 1024,
              "whole warps, at most 32 of them");

// grid(1), block(1024): N = the valid targets, and 1/N (0 when none: no gradient, loss 0).
KERNEL void ce_count_valid_i32(const int* __restrict__ targets, float* __restrict__ inv_count,
                               index_t rows, index_t vocab, int ignore_index) {
    __shared__ float scratch[32];
    float count = 0.0f;  // exact in f32 up to 2^24 per thread
    for (index_t r = threadIdx.x; r < rows; r += blockDim.x)
        count += is_valid_target(targets[r], ignore_index, vocab) ? 1.0f : 0.0f;
    count = block_sum(count, scratch);
    if (threadIdx.x == 0) inv_count[0] = count > 0.0f ? 1.0f / count : 0.0f;
}

// Running statistics of a row in base 2: m = max of z*log2(e), s = sum of 2^(z*log2e - m),
// and the plain sum of z (label smoothing's mean). Base 2 makes every exponential one ex2.
struct RowStats {
    float m;
    float s;
    float zsum;
};

__device__ __forceinline__ RowStats row_stats_empty() { return {NEG_INF, 0.0f, 0.0f}; }

__device__ __forceinline__ RowStats row_stats_combine(RowStats a, RowStats b) {
    const float m = fmaxf(a.m, b.m);
    if (m == NEG_INF) return {NEG_INF, 0.0f, a.zsum + b.zsum};
    return {m, a.s * exp2f(a.m - m) + b.s * exp2f(b.m - m), a.zsum + b.zsum};
}

__device__ __forceinline__ void row_stats_add1(RowStats& st, float z) {
    const float u = z * LOG2E;
    if (u > st.m) {
        st.s = st.s * exp2f(st.m - u) + 1.0f;
        st.m = u;
    } else {
        st.s += exp2f(u - st.m);
    }
    st.zsum += z;
}

// quote: row_stats_add8
// Eight values: the running maximum moves once per pack, so one rescale per 8 elements.
__device__ __forceinline__ void row_stats_add8(RowStats& st, const uint4& raw) {
    Pack16<bf16_t> pack;
    *reinterpret_cast<uint4*>(&pack) = raw;
    float u[BF16_PER_PACK];
    float pm = NEG_INF;
#pragma unroll
    for (int i = 0; i < BF16_PER_PACK; ++i) {
        const float z = to_f32(pack.v[i]);
        st.zsum += z;
        u[i] = z * LOG2E;
        pm = fmaxf(pm, u[i]);
    }
    const float m = fmaxf(st.m, pm);
    float s = st.s * exp2f(st.m - m);  // st.m = -inf on the first pack: exp2(-inf) = 0
#pragma unroll
    for (int i = 0; i < BF16_PER_PACK; ++i) s += exp2f(u[i] - m);
    st.m = m;
    st.s = s;
}
// end quote: row_stats_add8

// Every thread gets the block's statistics; `scratch` holds 32 RowStats. Fixed tree: the
// result does not depend on timing.
__device__ __forceinline__ RowStats block_row_stats(RowStats st, RowStats* scratch) {
    return block_allreduce(st, scratch, row_stats_empty(), row_stats_combine);
}

// quote: row_finish
// What the gradient pass needs of a row, from its statistics.
struct RowGrad {
    float lse2;       // lse * log2(e): p_j = 2^(z_j log2e - lse2)
    float p_scale;    // (1 + 2 zc lse) / N
    float offset;     // eps / V / N, subtracted everywhere
    float hot;        // (1 - eps) / N, subtracted at the target
};

// The row's loss (unscaled by 1/N) and its gradient constants.
__device__ __forceinline__ float row_finish(RowStats st, float z_target, index_t vocab,
                                            float eps, float z_loss, float inv_count,
                                            RowGrad& g) {
    g.lse2 = st.m + log2f(st.s);
    const float lse = g.lse2 * LN2;
    g.p_scale = (1.0f + 2.0f * z_loss * lse) * inv_count;
    g.offset = eps / (float)vocab * inv_count;
    g.hot = (1.0f - eps) * inv_count;
    return lse - (1.0f - eps) * z_target - eps * (st.zsum / (float)vocab) + z_loss * lse * lse;
}

__device__ __forceinline__ float grad_of(float z, const RowGrad& g) {
    return exp2f(z * LOG2E - g.lse2) * g.p_scale - g.offset;
}
// end quote: row_finish

// Gradient of 8 logits starting at column `col`; the target's element, if among them, also
// loses `hot`.
__device__ __forceinline__ uint4 grad8(const uint4& raw, index_t col, index_t target,
                                       const RowGrad& g) {
    Pack16<bf16_t> in, out;
    *reinterpret_cast<uint4*>(&in) = raw;
#pragma unroll
    for (int i = 0; i < BF16_PER_PACK; ++i) {
        float d = grad_of(to_f32(in.v[i]), g);
        if (col + i == target) d -= g.hot;
        out.v[i] = from_f32<bf16_t>(d);
    }
    return *reinterpret_cast<uint4*>(&out);
}

// Zeros where a row's target is ignored: the GEMMs after this read every gradient row.
__device__ __forceinline__ void zero_row(bf16_t* grad, index_t vocab) {
    const bf16_t zero = from_f32<bf16_t>(0.0f);
    for (index_t j = threadIdx.x; j < vocab; j += blockDim.x) grad[j] = zero;
}

// grid(rows), block(1024): one block per row. A row of V = 128256 bf16 is 250 KB: too much
// for registers, so it is read twice. Pass 1 (forwards) accumulates the statistics, 4
// independent 16-byte loads per thread in flight; pass 2 walks the row backwards, so it
// starts with the bytes pass 1 read last, the likeliest still in L2. With one 1024-thread
// block per SM, 132 rows (33 MB) are in flight: about what the 50 MB L2 can keep.
//
// Rows need not start on 16 bytes (V odd): `head` scalars up to the first boundary, packs,
// then `tail` scalars. `logits` and `grad` must be congruent modulo 16 bytes (the launcher
// checks), so one split serves both.
#define TWO_PASS_THREADS CE_TWO_PASS_THREADS
#define TWO_PASS_UNROLL 4
__device__ __forceinline__ void ce_rows_two_pass(const bf16_t* logits, bf16_t* grad,
                                                 const int* targets,
                                                 float* row_loss,
                                                 const float* inv_count_p,
                                                 index_t vocab, float eps, float z_loss,
                                                 int ignore_index) {
    __shared__ RowStats scratch[32];
    const index_t row = blockIdx.x;
    const bf16_t* in = logits + row * vocab;
    bf16_t* out = grad + row * vocab;
    const int y = __ldg(&targets[row]);
    if (!is_valid_target(y, ignore_index, vocab)) {
        zero_row(out, vocab);
        if (threadIdx.x == 0) row_loss[row] = 0.0f;
        return;
    }
    // Read before any thread of this block writes the row (pass 2 comes after the barriers).
    const float z_target = to_f32(in[y]);
    const index_t misalign = (reinterpret_cast<unsigned long long>(in) & 15) / sizeof(bf16_t);
    const index_t head = misalign == 0 ? 0 : (BF16_PER_PACK - misalign < vocab
                                                  ? BF16_PER_PACK - misalign : vocab);
    const index_t packs = (vocab - head) / BF16_PER_PACK;
    const index_t tail_start = head + packs * BF16_PER_PACK;
    const uint4* in16 = reinterpret_cast<const uint4*>(in + head);
    uint4* out16 = reinterpret_cast<uint4*>(out + head);
    const index_t t = threadIdx.x, B = blockDim.x;

    RowStats st = row_stats_empty();
    if (t < head) row_stats_add1(st, to_f32(in[t]));
    if (tail_start + t < vocab) row_stats_add1(st, to_f32(in[tail_start + t]));
    index_t p = t;
    for (; p + (TWO_PASS_UNROLL - 1) * B < packs; p += TWO_PASS_UNROLL * B) {
        uint4 raw[TWO_PASS_UNROLL];
#pragma unroll
        for (int k = 0; k < TWO_PASS_UNROLL; ++k) raw[k] = in16[p + k * B];
#pragma unroll
        for (int k = 0; k < TWO_PASS_UNROLL; ++k) row_stats_add8(st, raw[k]);
    }
    for (; p < packs; p += B) row_stats_add8(st, in16[p]);
    st = block_row_stats(st, scratch);

    RowGrad g;
    const float loss = row_finish(st, z_target, vocab, eps, z_loss, __ldg(inv_count_p), g);
    if (t == 0) row_loss[row] = loss;
    const index_t target = (index_t)y;
    if (t < head) {
        float d = grad_of(to_f32(in[t]), g);
        out[t] = from_f32<bf16_t>(t == target ? d - g.hot : d);
    }
    if (tail_start + t < vocab) {
        const index_t j = tail_start + t;
        float d = grad_of(to_f32(in[j]), g);
        out[j] = from_f32<bf16_t>(j == target ? d - g.hot : d);
    }
    // quote: two_pass_backwards
    // Backwards: this thread's packs from the last down, the block sweeping the row from its
    // end (what pass 1 read last) to its start.
    if (t < packs) {
        index_t i = (packs - 1 - t) / B + 1;  // this thread's packs: t + i * B, i < count
        while (i >= TWO_PASS_UNROLL) {
            i -= TWO_PASS_UNROLL;
            uint4 raw[TWO_PASS_UNROLL];
#pragma unroll
            for (int k = 0; k < TWO_PASS_UNROLL; ++k) raw[k] = in16[t + (i + k) * B];
#pragma unroll
            for (int k = 0; k < TWO_PASS_UNROLL; ++k) {
                const index_t pk = t + (i + k) * B;
                out16[pk] = grad8(raw[k], head + pk * BF16_PER_PACK, target, g);
            }
        }
        while (i > 0) {
            --i;
            const index_t pk = t + i * B;
            out16[pk] = grad8(in16[pk], head + pk * BF16_PER_PACK, target, g);
        }
    }
    // end quote: two_pass_backwards
}
// The one row kernel whose struct is not `__grid_constant__`: with it ptxas schedules this loop
// differently and the kernel measured 4% slower (the day's notes); nothing here takes the
// struct's address, so the two mean the same.
KERNEL void __launch_bounds__(TWO_PASS_THREADS, 1) ce_rows_two_pass_bf16x8(const CeRowParams p) {
    ce_rows_two_pass(p.logits, p.grad, p.targets, p.row_loss, p.inv_count, p.vocab, p.eps,
                     p.z_loss, p.ignore_index);
}

// ---- Thread block clusters (sm_90): 8 blocks of a row share their statistics ----------------

#define CLUSTER_BLOCKS CE_CLUSTER_BLOCKS
#define CLUSTER_THREADS CE_CLUSTER_THREADS
#define CLUSTER_PACKS_PER_THREAD CE_CLUSTER_PACKS
// The longest row the cluster kernel holds: 8 blocks x 512 threads x 4 packs x 8 = 131072.
static_assert(CLUSTER_BLOCKS * CLUSTER_THREADS * CLUSTER_PACKS_PER_THREAD * BF16_PER_PACK ==
                  CE_MAX_VOCAB,
              "cluster8 holds rows of the launcher's longest vocabulary");

// cluster_rank(), cluster_arrive(), cluster_wait() and load_cluster_f32() come from hopper.cuh.

// grid(8 * rows), block(512), cluster(8): block `rank` of a row's cluster owns packs
// [rank * per_block, (rank + 1) * per_block) of it, at most 4 per thread, all loaded before
// any is used and kept in registers. Each block reduces its statistics, publishes them in its
// shared memory, and after the cluster barrier thread 0 of every block reads all 8 and
// combines them in rank order, so every block (and every run) gets the same bits. The row is
// read once from HBM and written once: the least traffic there is. Rows must start on 16
// bytes (V a multiple of 8) and V <= 131072; the launcher refuses other shapes.
__device__ __forceinline__ void ce_rows_cluster8(const bf16_t* logits, bf16_t* grad,
                                                 const int* targets,
                                                 float* row_loss,
                                                 const float* inv_count_p,
                                                 index_t vocab, float eps, float z_loss,
                                                 int ignore_index) {
    __shared__ RowStats scratch[32];
    __shared__ float published[3];  // this block's m, s, zsum, for the other 7
    __shared__ float combined[3];   // the row's, for this block's threads
    const unsigned rank = cluster_rank();
    const index_t row = blockIdx.x / CLUSTER_BLOCKS;
    const bf16_t* in = logits + row * vocab;
    bf16_t* out = grad + row * vocab;
    const int y = __ldg(&targets[row]);
    const bool valid = is_valid_target(y, ignore_index, vocab);
    const index_t packs = vocab / BF16_PER_PACK;
    const index_t per_block = (packs + CLUSTER_BLOCKS - 1) / CLUSTER_BLOCKS;
    const index_t first = rank * per_block;
    const index_t end = first + per_block < packs ? first + per_block : packs;
    const uint4* in16 = reinterpret_cast<const uint4*>(in);
    uint4* out16 = reinterpret_cast<uint4*>(out);
    const index_t t = threadIdx.x;

    // Every block takes part in both cluster barriers, ignored rows included.
    float z_target = 0.0f;
    if (valid && rank == 0 && t == 0) z_target = to_f32(in[y]);  // before anyone writes
    uint4 raw[CLUSTER_PACKS_PER_THREAD];
    RowStats st = row_stats_empty();
    if (valid) {
#pragma unroll
        for (int k = 0; k < CLUSTER_PACKS_PER_THREAD; ++k) {
            const index_t p = first + t + (index_t)k * CLUSTER_THREADS;
            if (p < end) raw[k] = in16[p];
        }
#pragma unroll
        for (int k = 0; k < CLUSTER_PACKS_PER_THREAD; ++k) {
            const index_t p = first + t + (index_t)k * CLUSTER_THREADS;
            if (p < end) row_stats_add8(st, raw[k]);
        }
    }
    // quote: cluster8_combine
    st = block_row_stats(st, scratch);
    if (t == 0) {
        published[0] = st.m;
        published[1] = st.s;
        published[2] = st.zsum;
    }
    cluster_arrive();
    cluster_wait();
    if (t == 0) {
        RowStats row_st = row_stats_empty();
        for (unsigned r = 0; r < CLUSTER_BLOCKS; ++r) {
            RowStats o;
            o.m = load_cluster_f32(&published[0], r);
            o.s = load_cluster_f32(&published[1], r);
            o.zsum = load_cluster_f32(&published[2], r);
            row_st = row_stats_combine(row_st, o);
        }
        combined[0] = row_st.m;
        combined[1] = row_st.s;
        combined[2] = row_st.zsum;
    }
    // Done reading the others' shared memory; they may exit once everyone has said so.
    cluster_arrive();
    __syncthreads();
    // end quote: cluster8_combine
    if (valid) {
        const RowStats row_st = {combined[0], combined[1], combined[2]};
        RowGrad g;
        const float loss = row_finish(row_st, z_target, vocab, eps, z_loss, __ldg(inv_count_p), g);
        if (rank == 0 && t == 0) row_loss[row] = loss;
#pragma unroll
        for (int k = 0; k < CLUSTER_PACKS_PER_THREAD; ++k) {
            const index_t p = first + t + (index_t)k * CLUSTER_THREADS;
            if (p < end) out16[p] = grad8(raw[k], p * BF16_PER_PACK, (index_t)y, g);
        }
    } else {
        const uint4 zero = make_uint4(0, 0, 0, 0);  // bf16 +0 is all zero bits
        for (index_t p = first + t; p < end; p += CLUSTER_THREADS) out16[p] = zero;
        if (rank == 0 && t == 0) row_loss[row] = 0.0f;
    }
    cluster_wait();
}
KERNEL void __cluster_dims__(CLUSTER_BLOCKS, 1, 1) __launch_bounds__(CLUSTER_THREADS)
    ce_rows_cluster8_bf16x8(const __grid_constant__ CeRowParams p) {
    ce_rows_cluster8(p.logits, p.grad, p.targets, p.row_loss, p.inv_count, p.vocab, p.eps,
                     p.z_loss, p.ignore_index);
}

// ---- Persistent clusters with a pipeline of row slices ---------------------------------------
//
// cluster8 pays for its one read in scheduling: every row is a new cluster of 8 blocks, which
// must find 8 free SMs of one GPC at once, loads only after it starts and waits at a cluster
// barrier for its slowest block before it writes. Measured 74% of the copy rate. Here the
// clusters the GPU can hold at once (one block per SM) stay resident and walk the rows;
// block `rank` keeps the same slice of every row, and one thread keeps STAGES slices in
// flight with bulk copies (cp.async.bulk, counted on an mbarrier per stage), so while the
// block reduces and writes row i, the next rows are arriving. A cluster must sit in one GPC,
// so fewer clusters of 8 than 132 / 8 may fit (a first version that launched 16 ran at 713
// GB/s, clusters queued behind others); the launcher asks the driver how many clusters of 4
// and of 8 fit and takes the size that covers more SMs.

#define STREAM_THREADS CE_STREAM_THREADS
// Per cluster size: stages x slice packs. A block's slice of a row is at most SLICE packs, so
// the longest row is C x SLICE x 8 = 131072, cluster8's limit, either way. C = 8: 3 stages of
// 32 KB, two blocks per SM (their rows' reductions, barriers and writes interleave); C = 4: 3
// stages of 64 KB, one block per SM. (The first run had 4 stages for C = 8, one block per SM:
// 2040 GB/s with clusters of 4 chosen, below cluster8's 2229.)
template <int C> struct StreamShape;
template <> struct StreamShape<8> {
    static constexpr int STAGES = CE_STREAM8_STAGES, SLICE = CE_STREAM8_SLICE,
                         PER_SM = CE_STREAM8_PER_SM;
    static_assert(STAGES * SLICE * 16 == CE_STREAM8_SHARED_BYTES, "the launcher's shared memory");
    static_assert(8 * SLICE * BF16_PER_PACK == CE_MAX_VOCAB, "cluster8's longest row");
};
template <> struct StreamShape<4> {
    static constexpr int STAGES = CE_STREAM4_STAGES, SLICE = CE_STREAM4_SLICE,
                         PER_SM = CE_STREAM4_PER_SM;
    static_assert(STAGES * SLICE * 16 == CE_STREAM4_SHARED_BYTES, "the launcher's shared memory");
    static_assert(4 * SLICE * BF16_PER_PACK == CE_MAX_VOCAB, "cluster8's longest row");
};

// grid(C x clusters), block(512), cluster(C), dynamic shared memory STAGES x SLICE x 16
// bytes; `clusters` is what the GPU holds at once (the launcher asks), each walking rows
// cluster, cluster + clusters, ... Same math and the same fixed combination order (so the
// same bits for one C) as cluster8. V a multiple of 8 and at most 131072; the launcher checks.
template <int C>
__device__ __forceinline__ void ce_rows_cluster_stream(const bf16_t* logits, bf16_t* grad,
                                                       const int* targets,
                                                       float* row_loss,
                                                       const float* inv_count_p,
                                                       index_t vocab, float eps, float z_loss,
                                                       int ignore_index, index_t rows) {
    constexpr int STREAM_STAGES = StreamShape<C>::STAGES;
    constexpr int STREAM_SLICE_PACKS = StreamShape<C>::SLICE;
    extern __shared__ __align__(128) uint4 slices[];  // [STREAM_STAGES][STREAM_SLICE_PACKS]
    __shared__ unsigned long long full[STREAM_STAGES];
    __shared__ RowStats scratch[32];
    // m, s, zsum and the target's logit, by row parity: when a block publishes row i + 1,
    // the others may still be reading its row i.
    __shared__ float published[2][4];
    __shared__ float combined[3];
    const unsigned rank = cluster_rank();
    const index_t cluster = blockIdx.x / C, clusters = gridDim.x / C;
    const index_t packs = vocab / BF16_PER_PACK;
    const index_t per_block = (packs + C - 1) / C;
    const index_t first = rank * per_block < packs ? rank * per_block : packs;
    const index_t mine = (first + per_block < packs ? first + per_block : packs) - first;
    const unsigned bytes = (unsigned)(mine * 16);
    const index_t t = threadIdx.x;
    const float inv_count = __ldg(inv_count_p);

    // Stage s receives this block's slice of this cluster's row number i (i = 0, 1, ...).
    auto issue = [&](index_t i) {
        const index_t row = cluster + i * clusters;
        if (row >= rows) return;
        unsigned long long* bar = &full[i % STREAM_STAGES];
        mbarrier_arrive_expect_tx(bar, bytes);  // 0 bytes (an empty slice): the arrival alone
        if (bytes > 0)
            bulk_load_1d(&slices[(i % STREAM_STAGES) * STREAM_SLICE_PACKS],
                      logits + row * vocab + first * BF16_PER_PACK, bytes, bar);
    };
    if (t == 0) {
        for (int s = 0; s < STREAM_STAGES; ++s) mbarrier_init(&full[s], 1);
        fence_barrier_init();
        for (int i = 0; i < STREAM_STAGES; ++i) issue(i);
    }
    __syncthreads();

    for (index_t i = 0;; ++i) {
        const index_t row = cluster + i * clusters;
        if (row >= rows) break;  // the same for every block of the cluster
        const uint4* slice = &slices[(i % STREAM_STAGES) * STREAM_SLICE_PACKS];
        const int y = __ldg(&targets[row]);
        const bool valid = is_valid_target(y, ignore_index, vocab);
        // The target's logit, read by the block whose slice holds it (from shared memory).
        float z_target = 0.0f;
        const index_t target_pack = (index_t)y / BF16_PER_PACK - first;
        mbarrier_wait(&full[i % STREAM_STAGES], (unsigned)((i / STREAM_STAGES) & 1));
        RowStats st = row_stats_empty();
        if (valid)
            for (index_t p = t; p < mine; p += STREAM_THREADS) row_stats_add8(st, slice[p]);
        st = block_row_stats(st, scratch);
        float* pub = published[i & 1];
        if (t == 0) {
            // The target's logit, from the block whose slice holds it; the others publish 0,
            // so the sum of the 8 is that logit exactly.
            if (valid && target_pack >= 0 && target_pack < mine) {
                Pack16<bf16_t> pk;
                *reinterpret_cast<uint4*>(&pk) = slice[target_pack];
                z_target = to_f32(pk.v[y % BF16_PER_PACK]);
            }
            pub[0] = st.m;
            pub[1] = st.s;
            pub[2] = st.zsum;
            pub[3] = z_target;
        }
        cluster_arrive();
        cluster_wait();
        if (t == 0) {
            RowStats row_st = row_stats_empty();
            float zt = 0.0f;
            for (unsigned r = 0; r < C; ++r) {
                RowStats o;
                o.m = load_cluster_f32(&pub[0], r);
                o.s = load_cluster_f32(&pub[1], r);
                o.zsum = load_cluster_f32(&pub[2], r);
                zt += load_cluster_f32(&pub[3], r);
                row_st = row_stats_combine(row_st, o);
            }
            combined[0] = row_st.m;
            combined[1] = row_st.s;
            combined[2] = row_st.zsum;
            RowGrad g;
            const float loss = row_finish(row_st, zt, vocab, eps, z_loss, inv_count, g);
            if (rank == 0) row_loss[row] = valid ? loss : 0.0f;
        }
        __syncthreads();
        bf16_t* out = grad + row * vocab;
        uint4* out16 = reinterpret_cast<uint4*>(out) + first;
        if (valid) {
            const RowStats row_st = {combined[0], combined[1], combined[2]};
            RowGrad g;
            row_finish(row_st, 0.0f, vocab, eps, z_loss, inv_count, g);
            for (index_t p = t; p < mine; p += STREAM_THREADS)
                out16[p] = grad8(slice[p], (first + p) * BF16_PER_PACK, (index_t)y, g);
        } else {
            const uint4 zero = make_uint4(0, 0, 0, 0);  // bf16 +0 is all zero bits
            for (index_t p = t; p < mine; p += STREAM_THREADS) out16[p] = zero;
        }
        __syncthreads();  // every thread is done with this stage's slice
        if (t == 0) issue(i + STREAM_STAGES);
    }
    // No block leaves while another may still read its published statistics.
    cluster_sync();
}

#define CLUSTER_STREAM_KERNEL(C)                                                                  \
    KERNEL void __cluster_dims__(C, 1, 1)                                                         \
        __launch_bounds__(STREAM_THREADS, StreamShape<C>::PER_SM)                                 \
        ce_rows_cluster_stream##C##_bf16x8(const __grid_constant__ CeRowParams p) {              \
        ce_rows_cluster_stream<C>(p.logits, p.grad, p.targets, p.row_loss, p.inv_count, p.vocab,  \
                                  p.eps, p.z_loss, p.ignore_index, p.rows);                       \
    }
CLUSTER_STREAM_KERNEL(4)
CLUSTER_STREAM_KERNEL(8)

// ---- Statistics pushed to every block of the cluster, the slice in shared memory -----------
//
// cluster8's split (a row over 8 blocks of one cluster), with less work per logit, no cluster
// barrier inside a row, and more blocks per SM. cluster8 spends per logit two exponentials, a
// rescale of the running sum, a 64-bit column compare and a dozen conversions, holds its slice
// in 16 registers a thread (40 in all: 3 blocks of 512 per SM), and waits twice at cluster
// barriers for its slowest block. Here, for block `rank` of a row:
//   0. one thread has the TMA bring the block's slice (32 KB at V = 128256) into shared memory
//      in one bulk copy: every byte in flight at once, no registers held;
//   1. the row's maximum, two logits per instruction (max.bf16x2: exact, no rescaling later);
//   2. e = 2^(z log2e - max) per logit, summed (and z summed for label smoothing);
//   3. the gradient, e again times one constant minus another: p (1 + 2 zc lse) / N - eps/V/N.
//      The target's element is written once more by the thread that holds it, less
//      (1 - eps) / N, so no logit pays for a compare.
// After 1 and 2 each warp pushes its partial (max; then sum of e, sum of z, the target's z)
// into the shared memory of all 8 blocks with st.async, counted on the receiver's mbarrier:
// a block waits only for the 8 x 8 values it needs and combines them in (rank, warp) order,
// so every block, and every run, gets the same bits. The one cluster barrier is at the start
// (the barriers exist before the first push), waited for after the copy is issued.
// Blocks of 256 threads with 32 KB each: 6 per SM (40 registers), whose phases interleave, so
// some block is always loading or storing. (The path here, measured, is in the notes:
// keeping e in registers for the gradient cost more in occupancy than its exponential saved.)
//
// grid(8 * rows), block(256), cluster(8), dynamic shared memory 32 KB: block `rank` owns packs
// [rank * per_block, (rank + 1) * per_block) of its row, at most 8 per thread. V a multiple of
// 8 and at most 8 x 256 x 8 x 8 = 131072; the launcher checks.
#define PUSH_THREADS CE_PUSH_THREADS
#define PUSH_PACKS_PER_THREAD CE_PUSH_PACKS
static_assert(PUSH_THREADS * PUSH_PACKS_PER_THREAD * 16 == CE_PUSH_SHARED_BYTES,
              "a block's slice is the launcher's dynamic shared memory");
static_assert(CLUSTER_BLOCKS * PUSH_THREADS * PUSH_PACKS_PER_THREAD * BF16_PER_PACK ==
                  CE_MAX_VOCAB,
              "cluster_push holds cluster8's longest row");
#define PUSH_WARPS (PUSH_THREADS / 32)
#define PUSH_PARTS (CLUSTER_BLOCKS * PUSH_WARPS)  // partials per row and round: 64

__device__ __forceinline__ unsigned bf16x2_max(unsigned a, unsigned b) {
    unsigned r;
    asm("max.bf16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
// The two logits of a 32-bit word of bf16 pairs, exactly (a bf16 is the top half of an f32).
__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xFFFF0000u); }
// Logit i (0..7, a constant once unrolled) of a pack of 8: a select, not an index, so the
// pack stays in registers.
__device__ __forceinline__ float pack_logit(const uint4& r, int i) {
    const unsigned w = i < 4 ? (i < 2 ? r.x : r.y) : (i < 6 ? r.z : r.w);
    return i % 2 ? bf16_hi(w) : bf16_lo(w);
}

__device__ __forceinline__ void ce_rows_cluster_push(const bf16_t* logits, bf16_t* grad,
                                                     const int* targets,
                                                     float* row_loss,
                                                     const float* inv_count_p,
                                                     index_t vocab, float eps, float z_loss,
                                                     int ignore_index) {
    static_assert(PUSH_PARTS % 32 == 0, "a warp reads the partials in whole rounds of 32");
    __shared__ float maxima[PUSH_PARTS];  // round 1: every warp's max of z, from all 8 blocks
    __shared__ float4 sums[PUSH_PARTS];   // round 2: (sum of e, sum of z, z at the target, 0)
    __shared__ unsigned long long arrived[2];
    __shared__ unsigned long long loaded;  // the slice's bulk copy
    extern __shared__ __align__(128) uint4 slice[];  // [PUSH_THREADS * PUSH_PACKS_PER_THREAD]
    const unsigned rank = cluster_rank();
    const index_t row = blockIdx.x / CLUSTER_BLOCKS;
    const int y = __ldg(&targets[row]);
    // Pack indices inside a row fit in 32 bits (V <= 131072): fewer registers than index_t.
    const int packs = (int)(vocab / BF16_PER_PACK);
    const int per_block = (packs + CLUSTER_BLOCKS - 1) / CLUSTER_BLOCKS;
    const int first = min((int)rank * per_block, packs);
    const int end = min(first + per_block, packs);
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    const int target_pack = y / BF16_PER_PACK, target_slot = y % BF16_PER_PACK;
    uint4* out16 = reinterpret_cast<uint4*>(grad + row * vocab);
    // The whole cluster sees the same target: an ignored row pushes nothing and waits for
    // nothing, so its blocks leave as soon as they have written zeros.
    if (!is_valid_target(y, ignore_index, vocab)) {
        const uint4 zero = make_uint4(0, 0, 0, 0);  // bf16 +0 is all zero bits
        for (int p = first + t; p < end; p += PUSH_THREADS) out16[p] = zero;
        if (rank == 0 && t == 0) row_loss[row] = 0.0f;
        return;
    }
    if (t == 0) {
        mbarrier_init(&arrived[0], 1);
        mbarrier_init(&arrived[1], 1);
        mbarrier_init(&loaded, 1);
        fence_barrier_init();
        // The one arrival of each phase, with the bytes the 8 blocks' warps will push.
        mbarrier_arrive_expect_tx(&arrived[0], (unsigned)(PUSH_PARTS * sizeof(float)));
        mbarrier_arrive_expect_tx(&arrived[1], (unsigned)(PUSH_PARTS * sizeof(float4)));
        const unsigned bytes = (unsigned)(end - first) * 16;
        mbarrier_arrive_expect_tx(&loaded, bytes);  // 0 bytes: the arrival alone
        if (bytes > 0)
            bulk_load_1d(slice, reinterpret_cast<const uint4*>(logits + row * vocab) + first,
                         bytes, &loaded);
    }
    cluster_arrive();  // releases the barriers' initialisation to the cluster
    __syncthreads();   // ... and to this block, before anyone waits on them
    mbarrier_wait(&loaded, 0);
    // Pack k of this thread; packs past the slice's end read as bf16 -inf (e = 0).
    auto pack = [&](int k) -> uint4 {
        const int i = t + k * PUSH_THREADS;
        return first + i < end ? slice[i]
                               : make_uint4(0xFF80FF80u, 0xFF80FF80u, 0xFF80FF80u, 0xFF80FF80u);
    };

    // quote: push_max
    // 1. The maximum, on bf16 pairs: -inf padding never wins (a row has a real logit).
    unsigned m2 = 0xFF80FF80u;
#pragma unroll
    for (int k = 0; k < PUSH_PACKS_PER_THREAD; ++k) {
        const uint4 r = pack(k);
        m2 = bf16x2_max(bf16x2_max(bf16x2_max(m2, r.x), bf16x2_max(r.y, r.z)), r.w);
    }
    float m = warp_max(fmaxf(bf16_lo(m2), bf16_hi(m2)));
    cluster_wait();  // every block's barriers exist
    if (lane < CLUSTER_BLOCKS)
        push_f32(cluster_address(&maxima[rank * PUSH_WARPS + warp], lane), m,
                 cluster_address(&arrived[0], lane));
    mbarrier_wait_cluster(&arrived[0], 0);
    m = NEG_INF;
#pragma unroll
    for (int i = 0; i < PUSH_PARTS / 32; ++i) m = fmaxf(m, maxima[i * 32 + lane]);
    const float max2 = warp_max(m) * LOG2E;
    // end quote: push_max

    // 2. e = 2^(z log2e - max2) summed, the sum of z (label smoothing only) and the target's z
    // (the one thread whose pack holds it). Two packs at a time: all eight at once would keep
    // 32 registers of loads in flight (and spill at 6 blocks per SM).
    float s = 0.0f, zsum = 0.0f, z_mine = 0.0f;
    bool holds_target = false;
    const bool smoothing = eps != 0.0f;
#pragma unroll 2
    for (int k = 0; k < PUSH_PACKS_PER_THREAD; ++k) {
        const int p = first + t + k * PUSH_THREADS;
        const uint4 r = pack(k);
#pragma unroll
        for (int i = 0; i < BF16_PER_PACK; ++i) {
            const float z = pack_logit(r, i);
            s += ex2_approx(fmaf(z, LOG2E, -max2));
            if (smoothing && p < end) zsum += z;
        }
        if (p < end && p == target_pack) {  // a p past end is another block's
            z_mine = pack_logit(r, target_slot);
            holds_target = true;
        }
    }
    s = warp_sum(s);
    zsum = warp_sum(zsum);
    float z_target = warp_sum(z_mine);
    if (lane < CLUSTER_BLOCKS)
        push_f32x4(cluster_address(&sums[rank * PUSH_WARPS + warp], lane),
                   make_float4(s, zsum, z_target, 0.0f), cluster_address(&arrived[1], lane));
    mbarrier_wait_cluster(&arrived[1], 0);
    // The same partials in the same order in every block: lane l sums parts l, l + 32, ...,
    // then warp_sum's butterfly (a + b = b + a: every lane ends with the same bits).
    s = zsum = z_target = 0.0f;
#pragma unroll
    for (int i = 0; i < PUSH_PARTS / 32; ++i) {
        const float4 part = sums[i * 32 + lane];
        s += part.x;
        zsum += part.y;
        z_target += part.z;
    }
    s = warp_sum(s);
    zsum = warp_sum(zsum);
    z_target = warp_sum(z_target);

    // quote: push_gradient
    // 3. The loss, and the gradient.
    RowGrad g;
    const float loss = row_finish({max2, s, zsum}, z_target, vocab, eps, z_loss, __ldg(inv_count_p),
                                  g);
    if (rank == 0 && t == 0) row_loss[row] = loss;
    const float scale = g.p_scale / s;  // p_j = e_j / s
#pragma unroll 2
    for (int k = 0; k < PUSH_PACKS_PER_THREAD; ++k) {
        const int p = first + t + k * PUSH_THREADS;
        if (p >= end) continue;
        const uint4 r = pack(k);
        float d[BF16_PER_PACK];
#pragma unroll
        for (int i = 0; i < BF16_PER_PACK; ++i)
            d[i] = fmaf(ex2_approx(fmaf(pack_logit(r, i), LOG2E, -max2)), scale, -g.offset);
        out16[p] = make_uint4(pack2<bf16_t>(d[0], d[1]), pack2<bf16_t>(d[2], d[3]),
                              pack2<bf16_t>(d[4], d[5]), pack2<bf16_t>(d[6], d[7]));
    }
    if (holds_target) {  // the same bits as above, less `hot`; this later store wins
        // The store above was a uint4, this one a bf16 at an address inside it: no compiler
        // may reorder them on the grounds that the types cannot alias.
        asm volatile("" ::: "memory");
        const float e_y = ex2_approx(fmaf(z_mine, LOG2E, -max2));
        reinterpret_cast<bf16_t*>(out16)[y] =
            from_f32<bf16_t>(fmaf(e_y, scale, -g.offset) - g.hot);
    }
    // end quote: push_gradient
    // No cluster barrier at the end: every value pushed into this block was counted on its
    // barriers before it got here, and nothing reads another block's shared memory.
}
KERNEL void __cluster_dims__(CLUSTER_BLOCKS, 1, 1) __launch_bounds__(PUSH_THREADS, CE_PUSH_PER_SM)
    ce_rows_cluster_push_bf16x8(const __grid_constant__ CeRowParams p) {
    ce_rows_cluster_push(p.logits, p.grad, p.targets, p.row_loss, p.inv_count, p.vocab, p.eps,
                         p.z_loss, p.ignore_index);
}

// grid(1), block(1024): loss = (sum of the row losses) / N, each thread summing a fixed
// stride, then a fixed tree: the same bits every run, no atomics.
KERNEL void ce_mean_loss_f32(const float* __restrict__ row_loss,
                             const float* __restrict__ inv_count, float* __restrict__ loss,
                             index_t rows) {
    __shared__ float scratch[32];
    float sum = 0.0f;
    for (index_t r = threadIdx.x; r < rows; r += blockDim.x) sum += row_loss[r];
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0) loss[0] = sum * inv_count[0];
}

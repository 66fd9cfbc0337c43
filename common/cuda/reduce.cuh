// Reductions across a warp and across a block, and the online softmax statistics.
#pragma once
#include "common.cuh"

#define FULL_WARP 0xffffffffu

// Butterfly reduction: after log2(32) = 5 exchanges every lane holds the result.
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL_WARP, v, offset));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_WARP, v, offset);
    return v;
}

// One butterfly exchange of a statistic of 32-bit words (a float, a count, a struct of
// floats), word by word.
template <typename S>
__device__ __forceinline__ S shfl_xor_words(S s, int offset) {
    static_assert(sizeof(S) % 4 == 0, "a statistic of whole 32-bit words");
    unsigned w[sizeof(S) / 4];
    memcpy(w, &s, sizeof(S));
#pragma unroll
    for (int i = 0; i < (int)(sizeof(S) / 4); ++i) w[i] = __shfl_xor_sync(FULL_WARP, w[i], offset);
    memcpy(&s, w, sizeof(S));
    return s;
}

// quote: warp_allreduce
// The butterfly for any such statistic: `combine` merges two of them. Each lane merges its own
// value with its partner's, so the lanes end with the same bits when `combine` gives the same
// result in either order (a max, a sum, MaxSum's merge); Welford's merge rounds differently by
// order, and its lanes agree to the last bits only.
template <typename S, typename Combine>
__device__ __forceinline__ S warp_allreduce(S s, Combine combine) {
    for (int offset = 16; offset > 0; offset >>= 1) s = combine(s, shfl_xor_words(s, offset));
    return s;
}
// end quote: warp_allreduce

// quote: block_allreduce
// Block-wide, for blocks of a multiple of 32 threads, at most 1024: each warp reduces its
// values, warp leaders write 32 partials to `scratch` (32 S of shared memory), and every warp
// then reduces the partials itself (`empty` past the block's warps), so all threads get the
// result without a second broadcast step. A fixed tree: the result does not depend on timing.
// The closing barrier lets the caller reuse `scratch`.
template <typename S, typename Combine>
__device__ __forceinline__ S block_allreduce(S s, S* scratch, S empty, Combine combine) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    s = warp_allreduce(s, combine);
    if (lane == 0) scratch[warp] = s;
    __syncthreads();
    s = warp_allreduce(lane < warps ? scratch[lane] : empty, combine);
    __syncthreads();
    return s;
}
// end quote: block_allreduce

__device__ __forceinline__ float max_of(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ float sum_of(float a, float b) { return a + b; }

__device__ __forceinline__ float block_max(float v, float* scratch) {
    return block_allreduce(v, scratch, NEG_INF, max_of);
}
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    return block_allreduce(v, scratch, 0.0f, sum_of);
}

// Online softmax statistics of a set of values: their maximum m and sum of exp(x - m).
// Two sets combine by rescaling each sum to the larger maximum, so a row can be summarised in
// one pass, in any order and in pieces (Milakov & Gimelshein, "Online normalizer calculation
// for softmax", 2018). An empty set (or one of only -inf) is {-inf, 0}.
struct MaxSum {
    float max;
    float sum;
};

__device__ __forceinline__ MaxSum max_sum_empty() { return {NEG_INF, 0.0f}; }

__device__ __forceinline__ MaxSum max_sum_combine(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.max, b.max);
    if (m == NEG_INF) return max_sum_empty();
    return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

// Adds one value: the running sum is rescaled only when the maximum grows.
__device__ __forceinline__ MaxSum max_sum_add(MaxSum s, float x) {
    if (x > s.max) {
        // s.max may be -inf: exp(-inf) = 0 and the old sum (0) vanishes as it should.
        return {x, s.sum * expf(s.max - x) + 1.0f};
    }
    // A -inf adds exp(-inf) = 0; returning early also avoids -inf - -inf = NaN.
    if (x == NEG_INF) return s;
    return {s.max, s.sum + expf(x - s.max)};
}

__device__ __forceinline__ MaxSum warp_max_sum(MaxSum s) {
    return warp_allreduce(s, max_sum_combine);
}

// `scratch` holds 32 MaxSum in shared memory.
__device__ __forceinline__ MaxSum block_max_sum(MaxSum s, MaxSum* scratch) {
    return block_allreduce(s, scratch, max_sum_empty(), max_sum_combine);
}

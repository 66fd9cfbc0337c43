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

// Block-wide reductions for blocks of a multiple of 32 threads, at most 1024: each warp
// reduces its values, warp leaders write 32 partials to `scratch` (32 floats of shared
// memory), and every warp then reduces the partials itself, so all threads get the result
// without a second broadcast step. The closing barrier lets the caller reuse `scratch`.
__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_max(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = warp_max(lane < warps ? scratch[lane] : NEG_INF);
    __syncthreads();
    return v;
}

__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = warp_sum(lane < warps ? scratch[lane] : 0.0f);
    __syncthreads();
    return v;
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
    for (int offset = 16; offset > 0; offset >>= 1) {
        MaxSum other;
        other.max = __shfl_xor_sync(FULL_WARP, s.max, offset);
        other.sum = __shfl_xor_sync(FULL_WARP, s.sum, offset);
        s = max_sum_combine(s, other);
    }
    return s;
}

// Block-wide version of warp_max_sum; `scratch` holds 32 MaxSum in shared memory.
__device__ __forceinline__ MaxSum block_max_sum(MaxSum s, MaxSum* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    s = warp_max_sum(s);
    if (lane == 0) scratch[warp] = s;
    __syncthreads();
    s = warp_max_sum(lane < warps ? scratch[lane] : max_sum_empty());
    __syncthreads();
    return s;
}

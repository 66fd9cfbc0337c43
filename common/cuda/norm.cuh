// What the normalization days (11 RMSNorm, 12 LayerNorm) share: several row sums reduced at
// once, and the deterministic second stage of a column sum (the weight gradients).
#pragma once
#include "common.cuh"
#include "dtype.cuh"
#include "reduce.cuh"

// N sums across a warp at once: the same butterfly as warp_sum, N values per exchange step.
template <int N> __device__ __forceinline__ void warp_sum_n(float (&v)[N]) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(FULL_WARP, v[i], offset);
    }
}

// N sums across a block for the price of one: a backward row needs sum(x^2) and sum(g * x)
// together, and each block reduction costs two barriers whatever it carries. `scratch` holds
// 32 * N floats of shared memory; blocks of a multiple of 32 threads, at most 1024; every
// thread gets the sums. The closing barrier lets the caller reuse `scratch`.
template <int N> __device__ __forceinline__ void block_sum_n(float (&v)[N], float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    warp_sum_n<N>(v);
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < N; ++i) scratch[i * 32 + warp] = v[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = lane < warps ? scratch[i * 32 + lane] : 0.0f;
    warp_sum_n<N>(v);
    __syncthreads();
}

// Threads per column in column_sums: each adds every COLUMN_SLICES-th partial row.
#define COLUMN_SLICES 8

// grid(ceil(cols / 32)), block(32, COLUMN_SLICES): out[c] = sum over k < chunks of
// partials[k * cols + c], the second stage of a two-stage column sum (the first stage wrote
// one f32 row of partial sums per block of rows). A warp reads 32 consecutive columns of one
// partial row (128 bytes, coalesced); slice s adds rows s, s + 8, ... in order, then thread
// (c, 0) adds the 8 slice sums in order. The order never depends on timing, so every run gives
// the same bits: no float atomics. Longest chain: chunks / 8 + 8 additions.
template <typename T>
__device__ __forceinline__ void column_sums(const float* __restrict__ partials, T* __restrict__ out,
                                            index_t chunks, index_t cols) {
    __shared__ float slice_sums[COLUMN_SLICES][32];
    const index_t c = (index_t)blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (c < cols) {
#pragma unroll 4
        for (index_t k = threadIdx.y; k < chunks; k += COLUMN_SLICES) sum += partials[k * cols + c];
    }
    slice_sums[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float total = 0.0f;
#pragma unroll
        for (int s = 0; s < COLUMN_SLICES; ++s) total += slice_sums[s][threadIdx.x];
        out[c] = from_f32<T>(total);
    }
}

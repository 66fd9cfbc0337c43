// day16, part 1: reductions (the challenge's sum, count, dot product and segment-sum days).
//
// A reduction reads n values and writes one (or one per segment): it is bound by the read
// bandwidth alone, and the whole lesson is how to keep enough loads in flight while the adds
// are combined in an order that stays cheap and, for floats, reproducible.
//
// Versions:
//   sum   tree          each block halves 512 values in shared memory; passes until one is left
//   sum   warp_shuffle  one wave of blocks, grid-stride scalar loads, warp shuffles, then a
//                       second kernel (one block) adds the block partials in a fixed order
//   sum   vec4          the same with 16-byte loads, 4 in flight per thread, a tail path
//   count global_atomic every matching thread adds 1 to one global counter
//   count warp_aggregated  one atomic per warp: a ballot, then popc
//   count block_local   one wave, 16-byte loads, counts in registers, one atomic per block
//   dot   vec4          the sum's vec4 kernel on products (fused multiply-adds)
//   segment_sum warp / block  one warp or one block per segment, 16-byte loads when aligned
//
// Run: cargo run --release -p day16 -- --problem sum --kernel vec4
//
// The launcher passes whole cudarc allocations (256-byte aligned), so float4/int4 casts of the
// start of an array are aligned; a segment starts aligned only when its length is a multiple
// of 4, and the launcher picks the scalar instantiation otherwise.
#include "common.cuh"
#include "reduce.cuh"

// ---------------------------------------------------------------------------------------------
// Shared pieces.

// Sums, over the elements this thread owns, either x (DOT = false) or x * y. The thread owns
// float4 number `start`, `start + stride`, ... of the `count` elements at `x` (and `y`), then
// one of the 0-3 elements past the last whole float4 if `start` < that remainder (the tail).
// UNROLL float4 loads per array are issued before the first is used, each into its own
// accumulator: UNROLL * 16 bytes in flight per thread and per array.
template <bool DOT, int UNROLL>
__device__ __forceinline__ float strided_sum_f32x4(const float* __restrict__ x,
                                                   const float* __restrict__ y, index_t count,
                                                   index_t start, index_t stride) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* y4 = reinterpret_cast<const float4*>(y);
    const index_t n4 = count / 4;
    float acc[UNROLL];
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) acc[k] = 0.0f;
    // quote: vec4_loads
    index_t i = start;
    for (; i + (UNROLL - 1) * stride < n4; i += UNROLL * stride) {
        float4 a[UNROLL], b[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) a[k] = x4[i + k * stride];
        if constexpr (DOT) {
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) b[k] = y4[i + k * stride];
        }
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            if constexpr (DOT) {
                acc[k] = fmaf(a[k].x, b[k].x, acc[k]);
                acc[k] = fmaf(a[k].y, b[k].y, acc[k]);
                acc[k] = fmaf(a[k].z, b[k].z, acc[k]);
                acc[k] = fmaf(a[k].w, b[k].w, acc[k]);
            } else {
                acc[k] += (a[k].x + a[k].y) + (a[k].z + a[k].w);
            }
        }
    }
    // end quote: vec4_loads
    // Fewer than UNROLL float4s left for this thread.
    for (; i < n4; i += stride) {
        const float4 a = x4[i];
        if constexpr (DOT) {
            const float4 b = y4[i];
            acc[0] = fmaf(a.x, b.x, fmaf(a.y, b.y, fmaf(a.z, b.z, fmaf(a.w, b.w, acc[0]))));
        } else {
            acc[0] += (a.x + a.y) + (a.z + a.w);
        }
    }
    // The tail: 0-3 elements after the last whole float4.
    const index_t tail = 4 * n4 + start;
    if (tail < count) acc[0] += DOT ? x[tail] * y[tail] : x[tail];
    float total = 0.0f;
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) total += acc[k];
    return total;
}

// The same over scalar elements start, start + stride, ...: for segments that do not start on
// a 16-byte boundary, and the lesson's scalar grid-stride version.
__device__ __forceinline__ float strided_sum_f32(const float* __restrict__ x, index_t count,
                                                 index_t start, index_t stride) {
    float acc = 0.0f;
    for (index_t i = start; i < count; i += stride) acc += x[i];
    return acc;
}

// Integer block sum (exact, any order), for counts: the float block_sum's pattern.
// quote: block_sum
__device__ __forceinline__ unsigned block_sum_u32(unsigned v, unsigned* scratch) {
    return block_allreduce(v, scratch, 0u, [](unsigned a, unsigned b) { return a + b; });
}
// end quote: block_sum

// ---------------------------------------------------------------------------------------------
// Sum.

// grid(ceil(n / 512)), block(256): block b sums elements 512b .. 512b + 511 (two per thread,
// the first add during the load) by halving in shared memory (sequential addressing: active
// threads stay packed in the lowest warps, no bank conflicts) and writes out[b]. The launcher
// runs it again on the partials until one value is left: log_512(n) passes, each a tree, so
// the whole sum is a tree of depth 9 per pass.
// The tree's block (REDUCE_TREE_THREADS, two elements a thread) comes from the launcher's
// table (reduce.rs) as a define.
#ifndef REDUCE_TREE_THREADS
#error "reduce.cu: compile it with the -DREDUCE_ defines of day16's reduce.rs"
#endif
// quote: tree
KERNEL void sum_tree_f32(const float* __restrict__ in, float* __restrict__ out, index_t n) {
    __shared__ float s[REDUCE_TREE_THREADS];
    const unsigned t = threadIdx.x;
    const index_t i = (index_t)blockIdx.x * (2 * REDUCE_TREE_THREADS) + t;
    float v = i < n ? in[i] : 0.0f;
    if (i + REDUCE_TREE_THREADS < n) v += in[i + REDUCE_TREE_THREADS];
    s[t] = v;
    __syncthreads();
    for (unsigned half = REDUCE_TREE_THREADS / 2; half > 0; half >>= 1) {
        if (t < half) s[t] += s[t + half];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
// end quote: tree

// grid(one wave: SMs x resident blocks), block(256): each thread adds elements g, g + T, ...
// (T threads in all; coalesced: a warp reads 128 contiguous bytes per step), then the warp
// adds its 32 sums with 5 shuffles and the block its warps' through 32 floats of shared memory.
// One partial per block; sum_partials_f32 adds them.
// quote: grid_stride
KERNEL void sum_grid_stride_f32(const float* __restrict__ in, float* __restrict__ partials,
                                index_t n) {
    __shared__ float scratch[32];
    const index_t start = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    const index_t stride = (index_t)gridDim.x * blockDim.x;
    const float v = block_sum(strided_sum_f32(in, n, start, stride), scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = v;
}
// end quote: grid_stride

// grid(one wave), block(256): as sum_grid_stride_f32 with 16-byte loads, 4 per thread in flight.
KERNEL void sum_grid_stride_f32x4(const float* __restrict__ in, float* __restrict__ partials,
                                  index_t n) {
    __shared__ float scratch[32];
    const index_t start = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    const index_t stride = (index_t)gridDim.x * blockDim.x;
    const float v = block_sum(strided_sum_f32x4<false, 4>(in, nullptr, n, start, stride), scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = v;
}

// grid(1), block(1024): the second stage. One block adds the `count` partials in an order
// fixed by the launch shape, so the result is the same bit for bit on every run (an atomicAdd
// of floats per block would make it depend on which block finished first).
KERNEL void sum_partials_f32(const float* __restrict__ partials, float* __restrict__ out,
                             unsigned count) {
    __shared__ float scratch[32];
    const float v = block_sum(strided_sum_f32(partials, count, threadIdx.x, blockDim.x), scratch);
    if (threadIdx.x == 0) out[0] = v;
}

// ---------------------------------------------------------------------------------------------
// Dot product.

// grid(one wave), block(256): sum_grid_stride_f32x4 on products a_i * b_i (fmaf: each product
// is added without being rounded first). Partials go to sum_partials_f32.
KERNEL void dot_grid_stride_f32x4(const float* __restrict__ a, const float* __restrict__ b,
                                  float* __restrict__ partials, index_t n) {
    __shared__ float scratch[32];
    const index_t start = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    const index_t stride = (index_t)gridDim.x * blockDim.x;
    const float v = block_sum(strided_sum_f32x4<true, 4>(a, b, n, start, stride), scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = v;
}

// ---------------------------------------------------------------------------------------------
// Count of the elements equal to `value` (exact). `counter` is zeroed by the launcher on the
// stream before the kernel; count_finish then copies it into the (poisoned) output, so an
// output no kernel wrote still fails the check.

// grid(ceil(n / 256)), block(256): one thread per element; every match is its own atomic on
// the same address. The red instruction is written out in PTX because the compiler may
// otherwise aggregate atomicAdd(p, 1) per warp by itself, which is the next version's lesson.
// All matches of the whole GPU queue on one L2 slice: the contention this version shows.
KERNEL void count_global_atomic_i32(const int* __restrict__ x, index_t n, int value,
                                    unsigned* __restrict__ counter) {
    const index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] == value) asm volatile("red.relaxed.gpu.add.u32 [%0], 1;" ::"l"(counter) : "memory");
}

// grid(ceil(n / 256)), block(256): one thread per element, one atomic per warp: the warp's
// matches become a 32-bit ballot, lane 0 adds its popcount. 32x fewer atomics at most (as
// many fewer as a warp has matches). Every lane takes part in the ballot, also past n.
KERNEL void count_warp_aggregated_i32(const int* __restrict__ x, index_t n, int value,
                                      unsigned* __restrict__ counter) {
    const index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned matches = __ballot_sync(FULL_WARP, i < n && x[i] == value);
    if ((threadIdx.x & 31) == 0 && matches != 0) atomicAdd(counter, (unsigned)__popc(matches));
}

// grid(one wave), block(256): each thread counts its int4s (4 loads in flight) and its tail
// element in a register, the block adds its counts, and one atomic per block (about a
// thousand in all) reaches the counter.
KERNEL void count_block_local_i32x4(const int* __restrict__ x, index_t n, int value,
                                    unsigned* __restrict__ counter) {
    __shared__ unsigned scratch[32];
    constexpr int UNROLL = 4;
    const index_t start = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    const index_t stride = (index_t)gridDim.x * blockDim.x;
    const int4* x4 = reinterpret_cast<const int4*>(x);
    const index_t n4 = n / 4;
    unsigned c = 0;
    index_t i = start;
    for (; i + (UNROLL - 1) * stride < n4; i += UNROLL * stride) {
        int4 v[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) v[k] = x4[i + k * stride];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k)
            c += (v[k].x == value) + (v[k].y == value) + (v[k].z == value) + (v[k].w == value);
    }
    for (; i < n4; i += stride) {
        const int4 v = x4[i];
        c += (v.x == value) + (v.y == value) + (v.z == value) + (v.w == value);
    }
    const index_t tail = 4 * n4 + start;
    if (tail < n) c += x[tail] == value;
    c = block_sum_u32(c, scratch);
    if (threadIdx.x == 0 && c != 0) atomicAdd(counter, c);
}

// grid(1), block(1): the count, from the zeroed-then-added counter into the output.
KERNEL void count_finish_u32(const unsigned* __restrict__ counter, unsigned* __restrict__ out) {
    out[0] = counter[0];
}

// ---------------------------------------------------------------------------------------------
// Segment sum: out[s] = x[s * len] + ... + x[s * len + len - 1] (consecutive segments of one
// length: the row sums an RMSNorm needs, as the challenge used it). VEC: len % 4 == 0, so every
// segment starts on a 16-byte boundary.

// grid(ceil(segments / 8)), block(256): one warp per segment; lane l reads float4s l, l + 32,
// ... of it (512 contiguous bytes per warp per step), 5 shuffles add the lanes.
template <bool VEC>
__device__ __forceinline__ void segment_sum_warp(const float* __restrict__ x,
                                                 float* __restrict__ out, index_t segments,
                                                 index_t len) {
    const index_t segment = (index_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (segment >= segments) return;  // whole warps leave; no block-wide barrier follows
    const float* base = x + segment * len;
    const unsigned lane = threadIdx.x & 31;
    float v = VEC ? strided_sum_f32x4<false, 4>(base, nullptr, len, lane, 32)
                  : strided_sum_f32(base, len, lane, 32);
    v = warp_sum(v);
    if (lane == 0) out[segment] = v;
}
KERNEL void segment_sum_warp_f32x4(const float* __restrict__ x, float* __restrict__ out,
                                   index_t segments, index_t len) {
    segment_sum_warp<true>(x, out, segments, len);
}
KERNEL void segment_sum_warp_f32(const float* __restrict__ x, float* __restrict__ out,
                                 index_t segments, index_t len) {
    segment_sum_warp<false>(x, out, segments, len);
}

// grid(segments), block(256): one block per segment, the block's 256 threads stride over it
// (4 KB contiguous per step with float4s), then block_sum.
template <bool VEC>
__device__ __forceinline__ void segment_sum_block(const float* __restrict__ x,
                                                  float* __restrict__ out, index_t len) {
    __shared__ float scratch[32];
    const float* base = x + (index_t)blockIdx.x * len;
    float v = VEC ? strided_sum_f32x4<false, 4>(base, nullptr, len, threadIdx.x, blockDim.x)
                  : strided_sum_f32(base, len, threadIdx.x, blockDim.x);
    v = block_sum(v, scratch);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}
KERNEL void segment_sum_block_f32x4(const float* __restrict__ x, float* __restrict__ out,
                                    index_t len) {
    segment_sum_block<true>(x, out, len);
}
KERNEL void segment_sum_block_f32(const float* __restrict__ x, float* __restrict__ out,
                                  index_t len) {
    segment_sum_block<false>(x, out, len);
}

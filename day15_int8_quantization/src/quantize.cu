// day15: per-tensor INT8 quantization. One scale for the whole tensor means one number that
// depends on every element: a GPU-wide reduction (min and max) must finish before the first
// value can be quantized. The lesson is what that dependency costs in memory traffic.
//
//   symmetric   int8 in [-127, 127]: scale = max|x| / 127, q = clamp(rint(x / scale))
//   asymmetric  uint8 in [0, 255]:   scale = (hi - lo) / 255 over the range widened to hold 0,
//               zp = clamp(rint(-lo / scale), 0, 255), q = clamp(rint(x / scale) + zp)
//   dequantize  x' = (q - zp) * scale
// Rounding is half to even (__float2int_rn) and the division is IEEE (NVRTC's default
// -prec-div=true): the CPU reference (common/src/reference/quantize.rs) does the same f32
// steps, so q is compared exactly. Never compile this file with --use_fast_math: x * (1/scale)
// or an approximate division would move values across rounding boundaries.
//
// Versions (quantize; the symmetric and asymmetric kernels are one template):
//   two_pass          pass 1 reduces min/max (the last block turns it into scale and zp);
//                     pass 2 reads x again and writes q. Traffic 4n + 4n + n bytes.
//   two_pass_reverse  the same, pass 2 walking the tensor backwards: it starts on the part of
//                     x that pass 1 read last and L2 (50 MB) still holds.
//   fused             one cooperative launch: each block keeps the first part of its chunk in
//                     registers and shared memory (about 40 MB on chip over 132 SMs), waits
//                     at a grid-wide barrier for the global range, quantizes what it kept,
//                     then re-reads the rest backwards. Traffic 4n + (4n - on chip - L2) + n.
// dequantize: one kernel, four int8 in and one float4 out per thread and step.
//
// Run: cargo run --release -p day15 -- --op quantize_sym --kernel fused
#include "common.cuh"
#include "reduce.cuh"

// Blocks and shared memory come from the launcher's table (quantize.rs) as -DQUANTIZE_...
// defines; the static_assert below checks that the fused kernel's shared memory is what the
// launcher gives.
#if !defined(QUANTIZE_THREADS) || !defined(QUANTIZE_BLOCKS_PER_SM) ||                          \
    !defined(QUANTIZE_FUSED_THREADS) || !defined(QUANTIZE_FUSED_STEPS) ||                      \
    !defined(QUANTIZE_FUSED_SHARED_BYTES)
#error "quantize.cu: compile it with the -DQUANTIZE_ defines of day15's quantize.rs"
#endif

// The range of a set of values; empty is {+inf, -inf}.
struct MinMax {
    float lo, hi;
};

__device__ __forceinline__ MinMax min_max_empty() { return {POS_INF, NEG_INF}; }

__device__ __forceinline__ MinMax min_max_add(MinMax r, float v) {
    return {fminf(r.lo, v), fmaxf(r.hi, v)};
}

__device__ __forceinline__ MinMax min_max_add4(MinMax r, float4 v) {
    return {fminf(fminf(r.lo, v.x), fminf(fminf(v.y, v.z), v.w)),
            fmaxf(fmaxf(r.hi, v.x), fmaxf(fmaxf(v.y, v.z), v.w))};
}

__device__ __forceinline__ MinMax min_max_combine(MinMax a, MinMax b) {
    return {fminf(a.lo, b.lo), fmaxf(a.hi, b.hi)};
}

// Every thread gets the block's range. `scratch` is 32 MinMax of shared memory; blocks are a
// multiple of 32 threads.
__device__ __forceinline__ MinMax block_min_max(MinMax r, MinMax* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int offset = 16; offset > 0; offset >>= 1) {
        r.lo = fminf(r.lo, __shfl_xor_sync(FULL_WARP, r.lo, offset));
        r.hi = fmaxf(r.hi, __shfl_xor_sync(FULL_WARP, r.hi, offset));
    }
    if (lane == 0) scratch[warp] = r;
    __syncthreads();
    r = lane < warps ? scratch[lane] : min_max_empty();
    for (int offset = 16; offset > 0; offset >>= 1) {
        r.lo = fminf(r.lo, __shfl_xor_sync(FULL_WARP, r.lo, offset));
        r.hi = fmaxf(r.hi, __shfl_xor_sync(FULL_WARP, r.hi, offset));
    }
    __syncthreads();
    return r;
}

// quote: params
// Scale and zero point, step for step as sym_params / asym_params in the CPU reference.
struct QuantParams {
    float scale;
    int zero_point;
};

template <bool ASYM> __device__ __forceinline__ QuantParams params_of(MinMax r) {
    if (!ASYM) {
        const float scale = fmaxf(r.hi, -r.lo) / 127.0f;
        return {scale == 0.0f ? 1.0f : scale, 0};
    }
    const float lo = fminf(r.lo, 0.0f), hi = fmaxf(r.hi, 0.0f);
    float scale = (hi - lo) / 255.0f;
    scale = scale == 0.0f ? 1.0f : scale;
    const int zp = min(max(__float2int_rn(-lo / scale), 0), 255);
    return {scale, zp};
}

// One value: clamp(rint(x / scale) + zp, range). Symmetric never writes -128, so a value
// equal to the i8 poison is a byte the kernel did not write.
template <bool ASYM> __device__ __forceinline__ int quantize_one(float x, QuantParams p) {
    const int q = __float2int_rn(x / p.scale) + p.zero_point;
    return ASYM ? min(max(q, 0), 255) : min(max(q, -127), 127);
}
// end quote: params

// Four values packed as four bytes, x first in the lowest byte (little-endian memory order).
template <bool ASYM> __device__ __forceinline__ unsigned quantize4(float4 v, QuantParams p) {
    return (quantize_one<ASYM>(v.x, p) & 0xff) | (quantize_one<ASYM>(v.y, p) & 0xff) << 8 |
           (quantize_one<ASYM>(v.z, p) & 0xff) << 16 | (unsigned)(quantize_one<ASYM>(v.w, p) & 0xff) << 24;
}

// params[0] = scale, params[1] = zero point (as a float: exact for 0..255). Written by the
// reduction, read by the quantize pass, and the output the host reads back for the scale.
__device__ __forceinline__ void write_params(float* params, QuantParams p) {
    params[0] = p.scale;
    params[1] = (float)p.zero_point;
}

// Reads a counter that other blocks increment, with acquire semantics: what those blocks
// wrote before their increment is visible to what this thread reads after.
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// ---------------------------------------------------------------------------------------
// two_pass, pass 1. grid(SMs * 8), block(256): a grid-stride loop of four independent float4
// loads per thread, a block reduction into partials[block], and the last block to finish
// (counted in *done, which it resets for the next launch) reduces the partials into params.
// The n % 4 leftover elements go to the threads of block 0.
template <bool ASYM>
__device__ __forceinline__ void min_max_pass(const float* __restrict__ x, MinMax* partials,
                                             unsigned* done, float* params, index_t n) {
    __shared__ MinMax scratch[32];
    __shared__ bool last;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const index_t n4 = n / 4, stride = (index_t)gridDim.x * blockDim.x;
    index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    MinMax r = min_max_empty();
    for (; i + 3 * stride < n4; i += 4 * stride) {
        const float4 a = x4[i], b = x4[i + stride], c = x4[i + 2 * stride], d = x4[i + 3 * stride];
        r = min_max_add4(min_max_add4(r, a), b);
        r = min_max_add4(min_max_add4(r, c), d);
    }
    for (; i < n4; i += stride) r = min_max_add4(r, x4[i]);
    if (blockIdx.x == 0 && threadIdx.x < n - 4 * n4) r = min_max_add(r, x[4 * n4 + threadIdx.x]);
    r = block_min_max(r, scratch);
    // quote: two_pass_last_block
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = r;
        __threadfence();  // the partial is visible before the count that announces it
        last = atomicAdd(done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    r = min_max_empty();
    // Through L2 (.cg): L1 is not coherent with other SMs' writes.
    for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
        const float* p = reinterpret_cast<const float*>(&partials[b]);
        r = min_max_combine(r, MinMax{__ldcg(p), __ldcg(p + 1)});
    }
    r = block_min_max(r, scratch);
    if (threadIdx.x == 0) {
        write_params(params, params_of<ASYM>(r));
        *done = 0;
    }
    // end quote: two_pass_last_block
}

// two_pass, pass 2. grid(SMs * 8), block(256): grid-stride over tiles of 4 float4 per thread,
// four loads in flight, four coalesced 4-byte stores. REVERSE walks the tiles from the end.
// The leftover n % 4 elements go to the first threads of block 0.
template <bool ASYM, bool REVERSE>
__device__ __forceinline__ void quantize_pass(const float* __restrict__ x,
                                              unsigned char* __restrict__ q,
                                              const float* __restrict__ params, index_t n) {
    const QuantParams p = {params[0], (int)params[1]};
    const float4* x4 = reinterpret_cast<const float4*>(x);
    unsigned* q4 = reinterpret_cast<unsigned*>(q);
    const index_t n4 = n / 4, tile = 4 * (index_t)blockDim.x;
    const index_t tiles = (n4 + tile - 1) / tile;
    // quote: quantize_pass
    for (index_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const index_t base = (REVERSE ? tiles - 1 - t : t) * tile + threadIdx.x;
        if (base + 3 * blockDim.x < n4) {
            float4 v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) v[u] = x4[base + u * blockDim.x];
#pragma unroll
            for (int u = 0; u < 4; ++u) q4[base + u * blockDim.x] = quantize4<ASYM>(v[u], p);
        } else {
            for (index_t i = base; i < n4; i += blockDim.x) q4[i] = quantize4<ASYM>(x4[i], p);
        }
    }
    // end quote: quantize_pass
    if (blockIdx.x == 0 && threadIdx.x < n - 4 * n4) {
        const index_t i = 4 * n4 + threadIdx.x;
        q[i] = (unsigned char)quantize_one<ASYM>(x[i], p);
    }
}

// ---------------------------------------------------------------------------------------
// fused. grid(resident blocks: SMs x 2), block(FUSED_THREADS), launched cooperatively so that
// every block is resident and the grid-wide wait cannot deadlock. Block b owns the float4s
// [b * chunk, (b + 1) * chunk); step s of the block covers FUSED_THREADS consecutive float4s.
//   phase 1: steps 0..R-1 are loaded into registers, steps R..R+S-1 into shared memory, the
//            rest only reduced. The block publishes its range and counts itself in *arrivals.
//   wait:    until *arrivals reaches `target` (launch number x blocks: the counter never needs
//            resetting); then every block combines the partials itself.
//   phase 2: quantize the registers and shared memory (no DRAM read), then re-read the rest
//            from the last step backwards: the steps read last in phase 1 are still in L2.
// The n % 4 leftover elements belong to the last block.
#define FUSED_THREADS QUANTIZE_FUSED_THREADS
template <bool ASYM, int R, int S>
__device__ __forceinline__ void quantize_fused(const float* __restrict__ x,
                                               unsigned char* __restrict__ q, MinMax* partials,
                                               unsigned* arrivals, float* params, index_t n,
                                               index_t chunk, unsigned target) {
    extern __shared__ float4 kept[];  // S * FUSED_THREADS float4
    __shared__ MinMax scratch[32];
    const float4* x4 = reinterpret_cast<const float4*>(x);
    unsigned* q4 = reinterpret_cast<unsigned*>(q);
    const index_t n4 = n / 4;
    const index_t begin = (index_t)blockIdx.x * chunk;
    const index_t end = begin + chunk < n4 ? begin + chunk : n4;
    const index_t first = begin + threadIdx.x;  // this thread's float4 in step 0
    const bool tail_block = blockIdx.x == gridDim.x - 1;
    const unsigned tail = (unsigned)(n - 4 * n4);

    // quote: fused_keep
    MinMax r = min_max_empty();
    float4 regs[R];
#pragma unroll
    for (int s = 0; s < R; ++s) {
        const index_t i = first + (index_t)s * FUSED_THREADS;
        if (i < end) regs[s] = x4[i];
    }
#pragma unroll
    for (int s = 0; s < R; ++s)
        if (first + (index_t)s * FUSED_THREADS < end) r = min_max_add4(r, regs[s]);
    // Four at a time: all S loads in flight would need 4 S registers.
#pragma unroll 4
    for (int s = 0; s < S; ++s) {
        const index_t i = first + (index_t)(R + s) * FUSED_THREADS;
        if (i < end) {
            const float4 v = x4[i];
            kept[s * FUSED_THREADS + threadIdx.x] = v;
            r = min_max_add4(r, v);
        }
    }
    // end quote: fused_keep
    const index_t rest = first + (index_t)(R + S) * FUSED_THREADS;
    index_t i = rest;
    for (; i + 3 * FUSED_THREADS < end; i += 4 * FUSED_THREADS) {
        const float4 a = x4[i], b = x4[i + FUSED_THREADS], c = x4[i + 2 * FUSED_THREADS],
                     d = x4[i + 3 * FUSED_THREADS];
        r = min_max_add4(min_max_add4(r, a), b);
        r = min_max_add4(min_max_add4(r, c), d);
    }
    for (; i < end; i += FUSED_THREADS) r = min_max_add4(r, x4[i]);
    if (tail_block && threadIdx.x < tail) r = min_max_add(r, x[4 * n4 + threadIdx.x]);
    r = block_min_max(r, scratch);

    // quote: fused_wait
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = r;
        __threadfence();  // the partial is visible before the arrival that announces it
        atomicAdd(arrivals, 1u);
        while (load_acquire(arrivals) < target) __nanosleep(64);
    }
    __syncthreads();
    r = min_max_empty();
    for (unsigned b = threadIdx.x; b < gridDim.x; b += FUSED_THREADS) {
        const float* p = reinterpret_cast<const float*>(&partials[b]);
        r = min_max_combine(r, MinMax{__ldcg(p), __ldcg(p + 1)});
    }
    r = block_min_max(r, scratch);
    const QuantParams p = params_of<ASYM>(r);
    if (blockIdx.x == 0 && threadIdx.x == 0) write_params(params, p);
    // end quote: fused_wait

#pragma unroll
    for (int s = 0; s < R; ++s) {
        const index_t j = first + (index_t)s * FUSED_THREADS;
        if (j < end) q4[j] = quantize4<ASYM>(regs[s], p);
    }
#pragma unroll 4
    for (int s = 0; s < S; ++s) {
        const index_t j = first + (index_t)(R + s) * FUSED_THREADS;
        if (j < end) q4[j] = quantize4<ASYM>(kept[s * FUSED_THREADS + threadIdx.x], p);
    }
    if (rest < end) {
        // Steps rest + k * FUSED_THREADS for k = last..0: the same float4s as phase 1, from the
        // one read last.
        long long k = (long long)((end - 1 - rest) / FUSED_THREADS);
        for (; k >= 3; k -= 4) {
            const index_t j = rest + (index_t)k * FUSED_THREADS;
            const float4 a = x4[j], b = x4[j - FUSED_THREADS], c = x4[j - 2 * FUSED_THREADS],
                         d = x4[j - 3 * FUSED_THREADS];
            q4[j] = quantize4<ASYM>(a, p);
            q4[j - FUSED_THREADS] = quantize4<ASYM>(b, p);
            q4[j - 2 * FUSED_THREADS] = quantize4<ASYM>(c, p);
            q4[j - 3 * FUSED_THREADS] = quantize4<ASYM>(d, p);
        }
        for (; k >= 0; --k) {
            const index_t j = rest + (index_t)k * FUSED_THREADS;
            q4[j] = quantize4<ASYM>(x4[j], p);
        }
    }
    if (tail_block && threadIdx.x < tail) {
        const index_t t = 4 * n4 + threadIdx.x;
        q[t] = (unsigned char)quantize_one<ASYM>(x[t], p);
    }
}

// Registers kept per thread (R float4 = 4R registers) and shared-memory steps (S x 8 KB per
// block): with two 512-thread blocks per SM, 64 registers per thread and 96 KB each.
#define FUSED_R 6
#define FUSED_S QUANTIZE_FUSED_STEPS
static_assert(FUSED_S * FUSED_THREADS * sizeof(float4) == QUANTIZE_FUSED_SHARED_BYTES,
              "the fused kernel's shared memory is the launcher's");

#define QUANTIZE_KERNELS(NAME, ASYM)                                                           \
    KERNEL void __launch_bounds__(QUANTIZE_THREADS, QUANTIZE_BLOCKS_PER_SM)                    \
        min_max_##NAME##_f32x4(const float* x, MinMax* partials, unsigned* done,               \
                               float* params, index_t n) {                                     \
        min_max_pass<ASYM>(x, partials, done, params, n);                                      \
    }                                                                                          \
    KERNEL void __launch_bounds__(QUANTIZE_THREADS, QUANTIZE_BLOCKS_PER_SM)                    \
        quantize_##NAME##_f32x4(const float* x, unsigned char* q, const float* params,         \
                                index_t n) {                                                   \
        quantize_pass<ASYM, false>(x, q, params, n);                                           \
    }                                                                                          \
    KERNEL void __launch_bounds__(QUANTIZE_THREADS, QUANTIZE_BLOCKS_PER_SM)                    \
        quantize_##NAME##_reverse_f32x4(const float* x, unsigned char* q, const float* params, \
                                        index_t n) {                                           \
        quantize_pass<ASYM, true>(x, q, params, n);                                            \
    }                                                                                          \
    KERNEL void __launch_bounds__(FUSED_THREADS, 2)                                            \
        quantize_##NAME##_fused_f32x4(const float* x, unsigned char* q, MinMax* partials,      \
                                      unsigned* arrivals, float* params, index_t n,            \
                                      index_t chunk, unsigned target) {                        \
        quantize_fused<ASYM, FUSED_R, FUSED_S>(x, q, partials, arrivals, params, n, chunk,     \
                                               target);                                        \
    }

QUANTIZE_KERNELS(sym, false)
QUANTIZE_KERNELS(asym, true)

// ---------------------------------------------------------------------------------------
// dequantize. grid(ceil(n / 4 / 256)), block(256): a thread per 4 bytes of q, one float4
// store each; (q - zp) is an exact integer, so the one f32 product is correctly rounded, as on
// the CPU. The n % 4 leftovers go to the first threads of block 0. One tile per block rather
// than a grid-stride loop over SMs x 8 blocks, which measured slower (NOTES.md, How we got
// here): each of the loop's blocks waits a full load latency per step, while new blocks start
// their loads as soon as any block ends. The loop stays, so any grid is correct.
template <typename Q>
__device__ __forceinline__ float dequantize_one(Q v, QuantParams p) {
    return (float)((int)v - p.zero_point) * p.scale;
}

template <typename Q>
__device__ __forceinline__ void dequantize_pass(const Q* __restrict__ q, float* __restrict__ y,
                                                const float* __restrict__ params, index_t n) {
    const QuantParams p = {params[0], (int)params[1]};
    const unsigned* q4 = reinterpret_cast<const unsigned*>(q);
    float4* y4 = reinterpret_cast<float4*>(y);
    const index_t n4 = n / 4, tile = (index_t)blockDim.x;
    const index_t tiles = (n4 + tile - 1) / tile;
    // quote: dequantize
    for (index_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const index_t i = t * tile + threadIdx.x;
        if (i < n4) {
            const unsigned w = q4[i];
            const Q b0 = (Q)(w & 0xff), b1 = (Q)((w >> 8) & 0xff), b2 = (Q)((w >> 16) & 0xff),
                    b3 = (Q)(w >> 24);
            y4[i] = make_float4(dequantize_one(b0, p), dequantize_one(b1, p),
                                dequantize_one(b2, p), dequantize_one(b3, p));
        }
    }
    // end quote: dequantize
    if (blockIdx.x == 0 && threadIdx.x < n - 4 * n4) {
        const index_t i = 4 * n4 + threadIdx.x;
        y[i] = dequantize_one(q[i], p);
    }
}

KERNEL void __launch_bounds__(QUANTIZE_THREADS, QUANTIZE_BLOCKS_PER_SM)
    dequantize_i8x4(const signed char* q, float* y, const float* params, index_t n) {
    dequantize_pass<signed char>(q, y, params, n);
}
KERNEL void __launch_bounds__(QUANTIZE_THREADS, QUANTIZE_BLOCKS_PER_SM)
    dequantize_u8x4(const unsigned char* q, float* y, const float* params, index_t n) {
    dequantize_pass<unsigned char>(q, y, params, n);
}

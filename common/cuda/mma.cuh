// Tensor-core building blocks of the sm_80+ path (Ampere and Hopper both run them):
// `mma.sync` on 16x8x16 tiles of f16/bf16 with f32 accumulators, `ldmatrix` to load the
// fragments from shared memory, `cp.async` to fill shared memory without a register stop,
// packing two f32 into one register of two halves, and the 4-lane transpose that makes a row of
// packed accumulators 16-byte stores. Used by the attention days (10, 20) and the tensor-core
// GEMM (18).
//
// Fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16"), for lane
// `l` of the warp, with g = l / 4 (the group) and t = l % 4 (the thread in the group):
//   A (16 x 16, row-major), 4 registers of 2 halves:
//     a0 = A[g][2t, 2t+1]   a1 = A[g+8][2t, 2t+1]   a2 = A[g][2t+8, +9]   a3 = A[g+8][2t+8, +9]
//   B (16 x 8, "col": element pairs run along k), 2 registers:
//     b0 = B[2t, 2t+1][g]   b1 = B[2t+8, 2t+9][g]
//   C (16 x 8, f32), 4 registers:
//     c0, c1 = C[g][2t, 2t+1]   c2, c3 = C[g+8][2t, 2t+1]
// The C layout of two neighbouring n-tiles is the A layout of one 16-wide k-step, which is why
// FlashAttention can feed P = softmax(S) back into the next mma without touching memory
// (mma_accumulators_times_tile).
#pragma once
#include "dtype.cuh"

// D += A B on one 16x8x16 tile, f32 accumulators.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                          unsigned b1);

// One specialization per element type: the PTX names the type twice (A's and B's).
#define MMA_16816_OF(T, PTX_TYPE)                                                              \
    template <>                                                                                \
    __device__ __forceinline__ void mma_16816<T>(float (&d)[4], const unsigned (&a)[4],         \
                                                 unsigned b0, unsigned b1) {                    \
        asm("mma.sync.aligned.m16n8k16.row.col.f32." PTX_TYPE "." PTX_TYPE                     \
            ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                       \
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                    \
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                    \
    }
MMA_16816_OF(bf16_t, "bf16")
MMA_16816_OF(f16_t, "f16")
#undef MMA_16816_OF

// Two f32 rounded to nearest into one register: `lo` in the low half (the lower column).
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi);

template <> __device__ __forceinline__ unsigned pack2<bf16_t>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

template <> __device__ __forceinline__ unsigned pack2<f16_t>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// One exchange of quad_transpose between lanes t and t ^ M: the lane with bit M of t set
// (`upper`) trades its words U0, U1 for its partner's L0, L1, which land in U0, U1; the
// partner trades L0, L1 for them.
template <int M, int U0, int U1, int L0, int L1>
__device__ __forceinline__ void quad_exchange(unsigned (&x)[4], bool upper) {
    unsigned a = upper ? x[U0] : x[L0], b = upper ? x[U1] : x[L1];
    a = __shfl_xor_sync(0xffffffffu, a, M);
    b = __shfl_xor_sync(0xffffffffu, b, M);
    if (upper) {
        x[U0] = a;
        x[U1] = b;
    } else {
        x[L0] = a;
        x[L1] = b;
    }
}

// A 4 x 4 transpose across the 4 lanes of a C fragment's group (t = lane % 4): lane t holds
// x[k] = word t of 8-column block k of a row (its two 16-bit columns 8k + 2t, +1), and ends
// holding all four words of block t, the 16 contiguous bytes that one 16-byte store writes.
// Two exchanges: the off-diagonal 2 x 2 blocks swap (lanes t and t ^ 2), then each 2 x 2
// block transposes (lanes t and t ^ 1). Every lane of the warp must take part.
__device__ __forceinline__ void quad_transpose(unsigned (&x)[4], int t) {
    quad_exchange<2, 0, 1, 2, 3>(x, t & 2);
    quad_exchange<1, 0, 2, 1, 3>(x, t & 1);
}

__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Four 8x8 matrices of 16-bit elements: lanes 8i..8i+7 give the row addresses of matrix i
// (16 bytes each), and register i of every lane receives its share of matrix i, in the
// layout of an A or B fragment (lane l gets row l / 4, elements 2(l % 4) and 2(l % 4) + 1).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
}

// The same, each matrix transposed on the way: lane l gets column l / 4, rows 2(l % 4) and
// 2(l % 4) + 1. Turns a row-major [k][n] tile in shared memory into B fragments.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
}

// quote: mma_accumulators_times_tile
// c += A B for one warp, where A (16 x 8KT) is still in the f32 accumulator fragments of an
// earlier product: a[j] holds its columns 8j .. 8j + 7 in the C layout. B (8KT x 8NT) is
// row-major in shared memory at `b`, STRIDE elements a row, and c (16 x 8NT) is accumulator
// fragments as well. Two neighbouring C tiles are one A fragment, rounded to 16 bits; B's
// fragments come through ldmatrix.trans. (FlashAttention's O += P V, and its backward's
// dQ += dS K.)
template <typename T, int STRIDE, int KT, int NT>
__device__ __forceinline__ void mma_accumulators_times_tile(float (&c)[NT][4],
                                                            const float (&a)[KT][4], const T* b,
                                                            int lane) {
#pragma unroll
    for (int kk = 0; kk < KT / 2; ++kk) {
        const unsigned pa[4] = {
            pack2<T>(a[2 * kk][0], a[2 * kk][1]), pack2<T>(a[2 * kk][2], a[2 * kk][3]),
            pack2<T>(a[2 * kk + 1][0], a[2 * kk + 1][1]),
            pack2<T>(a[2 * kk + 1][2], a[2 * kk + 1][3])};
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
            // Matrices: rows 16kk + 0..7 and + 8..15 of B at columns 16np, then at 16np + 8,
            // transposed: the b0, b1 of column tiles 2np and 2np + 1.
            unsigned bf[4];
            ldmatrix_x4_trans(bf, b + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * STRIDE +
                                      np * 16 + (lane / 16) * 8);
            mma_16816<T>(c[2 * np], pa, bf[0], bf[1]);
            mma_16816<T>(c[2 * np + 1], pa, bf[2], bf[3]);
        }
    }
}
// end quote: mma_accumulators_times_tile

// 16 bytes of shared memory filled from the first `bytes` (0 to 16) at `src`, the rest
// zero-filled, without passing through registers: a pack cut by the end of the data.
__device__ __forceinline__ void cp_async_16_partial(void* dst, const void* src, unsigned bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)),
                 "l"(src), "r"(bytes));
}

// 16 bytes global -> shared without passing through registers; when `valid` is false nothing
// is read and the 16 bytes are zero-filled (a tile's rows past the end of the data).
__device__ __forceinline__ void cp_async_16_zfill(void* dst, const void* src, bool valid) {
    cp_async_16_partial(dst, src, valid ? 16u : 0u);
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }

// Waits until at most N committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// quote: cp_async_double_buffer_wait
// The wait at the top of each step of a double-buffered cp.async loop, called once the copies
// of the next step (into the buffer this step does not read) are issued, if there is one:
// commits them and waits for every group but that newest one, which leaves this step's landed;
// with none issued, waits for all. The barrier then makes this step's data every thread's.
__device__ __forceinline__ void cp_async_double_buffer_wait(bool issued_next) {
    if (issued_next) {
        cp_async_commit();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
    }
    __syncthreads();
}
// end quote: cp_async_double_buffer_wait

// A block's cp.async ring of STAGES slots over `steps` k steps: `load(slot, step)` issues the
// copies of k step `step` into ring slot `slot`, `compute(slot)` multiplies a slot that has
// landed. The loads of step s + STAGES - 1 fly while step s computes. Returns once every copy
// has landed. (Days 18 and 23's cp.async GEMMs.)
template <int STAGES, typename Load, typename Compute>
__device__ __forceinline__ void cp_async_ring(int steps, Load load, Compute compute) {
    // Prologue: stages 0 .. STAGES - 2 in flight. A group is committed even when empty so the
    // wait below always counts the same number of groups.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < steps) load(s, s);
        cp_async_commit();
    }
    for (int step = 0; step < steps; ++step) {
        cp_async_wait<STAGES - 2>();  // this step's slot has landed (for this thread)
        __syncthreads();              // ... and for every thread; the slot refilled below was
                                      // last read before this barrier
        const int next = step + STAGES - 1;
        if (next < steps) load(next % STAGES, next);
        cp_async_commit();
        compute(step % STAGES);
    }
    cp_async_wait<0>();
}

// Day 7: tiled matmul. A block of T x T threads computes a T x T tile of C, one output per
// thread, and walks k in steps of T: each step loads a T x T tile of A and one of B into shared
// memory (every thread one element of each), waits, and does T multiply-adds from shared memory.
//
// Day 6 read 2k floats from global memory per output. Here each element loaded is used by T
// threads, so global traffic drops by T: A is read n / T times instead of n times, B m / T
// times. The price: two barriers per step, and shared-memory loads instead of global ones in
// the inner loop (2 loads per multiply-add still, now from a faster place).
#include "common.cuh"

// quote: tiled
template <int T>
__device__ __forceinline__ void matmul_tiled(const float* A, const float* B, float* C, int m,
                                             int n, int k) {
    __shared__ float As[T][T];
    __shared__ float Bs[T][T];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * T + ty;
    const int col = blockIdx.x * T + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < k; k0 += T) {
        // Each thread loads one element of each tile; outside the matrices it stores 0, so
        // the partial tiles at the edges add nothing.
        const int a_col = k0 + tx, b_row = k0 + ty;
        As[ty][tx] = (row < m && a_col < k) ? A[(index_t)row * k + a_col] : 0.0f;
        Bs[ty][tx] = (b_row < k && col < n) ? B[(index_t)b_row * n + col] : 0.0f;
        __syncthreads();
        // As[ty][l] is one word for the whole warp row (a broadcast); Bs[l][tx] is T
        // consecutive words: no bank conflicts either way.
#pragma unroll
        for (int l = 0; l < T; ++l) acc += As[ty][l] * Bs[l][tx];
        // Nobody may overwrite the tiles while others still read them.
        __syncthreads();
    }
    if (row < m && col < n) C[(index_t)row * n + col] = acc;
}
// end quote: tiled

// quote: tiled_kernels
// grid(ceil(n / T), ceil(m / T)), block(T, T): one output of C per thread, T = 8, 16, 32
#define TILED(T)                                                                              \
    KERNEL void __launch_bounds__(T * T)                                                      \
        matmul_tiled_##T(const float* A, const float* B, float* C, int m, int n, int k) {     \
        matmul_tiled<T>(A, B, C, m, n, k);                                                    \
    }

TILED(8)
TILED(16)
TILED(32)
// end quote: tiled_kernels

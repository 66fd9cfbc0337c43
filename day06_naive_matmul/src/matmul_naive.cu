// Day 6: naive matmul, C = A B for row-major A (m x k), B (k x n), C (m x n), f32.
//
// One thread per output element: it walks a row of A and a column of B, k multiply-adds, and
// writes one C. The two kernels below differ only in which output a thread gets, and that
// decides whether a warp's 32 loads land in one 128-byte line or in 32 different lines.
#include "common.cuh"

// Threads along x take consecutive *rows*. At each step l a warp reads A[row][l] for 32 rows
// (32 lines k floats apart), the same B[l][col] (one broadcast), and at the end writes 32 C
// values n floats apart: every access of the warp touches 32 different cache lines.
// grid(ceil(m / 32), ceil(n / 32)), block(32, 32): x runs down the rows of C
// quote: naive_uncoalesced
KERNEL void matmul_naive_uncoalesced(const float* A, const float* B, float* C, int m, int n,
                                     int k) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= m || col >= n) return;
    const float* a = A + (index_t)row * k;
    float acc = 0.0f;
    for (int l = 0; l < k; ++l) acc += a[l] * B[(index_t)l * n + col];
    C[(index_t)row * n + col] = acc;
}
// end quote: naive_uncoalesced

// Threads along x take consecutive *columns*. At each step a warp reads one A[row][l] (a
// broadcast) and B[l][col..col+31], 128 consecutive bytes: one line. The writes are one line
// too. Same arithmetic, same instructions; only the mapping changed.
// grid(ceil(n / 32), ceil(m / 32)), block(32, 32): x runs along the columns of C
// quote: naive_coalesced
KERNEL void matmul_naive_coalesced(const float* A, const float* B, float* C, int m, int n,
                                   int k) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= m || col >= n) return;
    // quote: coalesced_loop
    const float* a = A + (index_t)row * k;
    float acc = 0.0f;
    for (int l = 0; l < k; ++l) acc += a[l] * B[(index_t)l * n + col];
    // end quote: coalesced_loop
    C[(index_t)row * n + col] = acc;
}
// end quote: naive_coalesced

// day17: moving data without arithmetic. A transpose reads rows and writes columns: one side
// of every naive access pattern is strided, and the lesson is how a tile in shared memory
// turns both sides into coalesced rows, what bank conflicts that tile then suffers, and how
// to keep 16-byte accesses on both sides.
//
// Versions:
//   copy vec4            flat float4 copy: the ceiling a transpose can approach
//   transpose naive      one thread per element: reads coalesced, writes 4 bytes 16384 floats
//                        apart (every write its own 32-byte sector)
//   transpose tiled      32 x 32 tile in shared memory, read by rows, written by columns of
//                        the tile: both global sides coalesced, but the column read of the
//                        tile hits one bank 32 times (32-way conflict)
//   transpose padded     the same with rows of 33 floats: column reads spread over 32 banks
//   transpose vec4_swizzled  64 x 64 tile; float4 loads of rows, each thread transposes a
//                        4 x 4 block in registers and stores float4 rows of the output; the
//                        tile's float4 slots are XOR-swizzled so both shared-memory sides are
//                        conflict-free
//   reverse naive        out[i] = x[n - 1 - i], one thread per element
//   reverse vec4         float4 stores of reversed packs (float4 loads too when n % 4 == 0)
//   reverse inplace_vec4 in place: thread i swaps pack i with its mirror, reversing both in
//                        registers (the challenge's "tiled register swap")
//
// Run: cargo run --release -p day17 -- --op transpose --kernel vec4_swizzled
#include "common.cuh"

// grid(ceil(n / 4 / 256) + 1), block(256): thread i copies float4 i; the thread past the last
// whole float4 copies the 0-3 leftovers.
// quote: copy
KERNEL void copy_f32x4(const float* __restrict__ x, float* __restrict__ y, index_t n) {
    const index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x, n4 = n / 4;
    if (i < n4) {
        reinterpret_cast<float4*>(y)[i] = reinterpret_cast<const float4*>(x)[i];
    } else if (i == n4) {
        for (index_t j = 4 * n4; j < n; ++j) y[j] = x[j];
    }
}
// end quote: copy

// grid(ceil(cols / 32), ceil(rows / 8)), block(32, 8): thread (tx, ty) moves x[r][c] to
// y[c][r]. A warp reads 32 consecutive floats of a row and writes 32 floats `rows` apart.
// quote: naive
KERNEL void transpose_naive_f32(const float* __restrict__ x, float* __restrict__ y, int rows,
                                int cols) {
    const int c = blockIdx.x * 32 + threadIdx.x, r = blockIdx.y * 8 + threadIdx.y;
    if (r < rows && c < cols) y[(index_t)c * rows + r] = x[(index_t)r * cols + c];
}
// end quote: naive

// grid(ceil(cols / 32), ceil(rows / 32)), block(32, 8): the block moves a 32 x 32 tile; each
// thread 4 rows of it, 8 apart. Read: tile[ty + 8j][tx] <- x row by row (coalesced). Write:
// y row (c0 + ty + 8j) takes tile column (ty + 8j) (coalesced in y). With STRIDE 32 that
// column read is 32 lanes on one bank; with 33 each lane's row starts one bank further.
// quote: tiled
template <int STRIDE>
__device__ __forceinline__ void transpose_tiled(const float* __restrict__ x, float* __restrict__ y,
                                                int rows, int cols) {
    __shared__ float tile[32][STRIDE];
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
#pragma unroll
    for (int j = 0; j < 32; j += 8) {
        const int r = r0 + threadIdx.y + j, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[threadIdx.y + j][threadIdx.x] = x[(index_t)r * cols + c];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 32; j += 8) {
        // y[c][r]: row c = c0 + ty + j of y, column r = r0 + tx.
        const int c = c0 + threadIdx.y + j, r = r0 + threadIdx.x;
        if (c < cols && r < rows) y[(index_t)c * rows + r] = tile[threadIdx.x][threadIdx.y + j];
    }
}
// end quote: tiled

// quote: stride
KERNEL void transpose_tiled_f32(const float* __restrict__ x, float* __restrict__ y, int rows,
                                int cols) {
    transpose_tiled<32>(x, y, rows, cols);
}

KERNEL void transpose_padded_f32(const float* __restrict__ x, float* __restrict__ y, int rows,
                                 int cols) {
    transpose_tiled<33>(x, y, rows, cols);
}
// end quote: stride

// The 64 x 64 tile as 64 rows of 16 float4 slots. Slot s of row r is stored at
// s ^ ((r >> 2) & 7): the four rows a thread reads in the transpose phase (4a .. 4a + 3) for
// eight consecutive a land on eight different 16-byte bank groups, and a row written by eight
// consecutive lanes stays a permutation of its slots.
// quote: swizzle
__device__ __forceinline__ int swizzle(int r, int slot) { return slot ^ ((r >> 2) & 7); }
// end quote: swizzle

// grid(ceil(cols / 64), ceil(rows / 64)), block(256). Thread t:
//   load:  rows t / 16 + 16 j (j = 0..3), float4 slot t % 16: four 16-byte loads in flight,
//          a warp reading two 256-byte row pieces per instruction.
//   move:  a = t % 16, b = t / 16: the 4 x 4 block at tile rows 4a..4a+3, columns 4b..4b+3,
//          read as four float4 (slot b of four rows), transposed in registers.
//   store: y row c0 + 4b + i takes (m[0][i], m[1][i], m[2][i], m[3][i]) at column r0 + 4a:
//          16 lanes write one 256-byte piece of a y row.
// Interior tiles with rows and cols multiples of 4 take the float4 path; edge tiles (or every
// tile of a shape with rows or cols not a multiple of 4, where not every row of x or y starts
// 16-byte aligned) move element by element through the same tile, with bounds checks.
// Eight blocks per SM (32 registers, 8 x 16 KB of shared memory): 128 KB of loads in flight.
KERNEL void __launch_bounds__(256, 8)
    transpose_vec4_swizzled_f32(const float* __restrict__ x, float* __restrict__ y, int rows,
                                int cols) {
    __shared__ __align__(16) float4 tile[64][16];
    const int r0 = blockIdx.y * 64, c0 = blockIdx.x * 64;
    const int t = threadIdx.x;
    const bool fast = (rows & 3) == 0 && (cols & 3) == 0 && r0 + 64 <= rows && c0 + 64 <= cols;
    if (fast) {
        // quote: vec4_load
        const int slot = t & 15;
        float4 v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = (t >> 4) + 16 * j;
            v[j] = *reinterpret_cast<const float4*>(x + (index_t)(r0 + r) * cols + c0 + 4 * slot);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = (t >> 4) + 16 * j;
            tile[r][swizzle(r, slot)] = v[j];
        }
        // end quote: vec4_load
    } else {
        float* flat = reinterpret_cast<float*>(tile);
        for (int e = t; e < 64 * 64; e += 256) {
            const int r = e >> 6, c = e & 63;
            if (r0 + r < rows && c0 + c < cols)
                flat[r * 64 + 4 * swizzle(r, c >> 2) + (c & 3)] = x[(index_t)(r0 + r) * cols + c0 + c];
        }
    }
    __syncthreads();
    if (fast) {
        // quote: vec4_store
        const int a = t & 15, b = t >> 4;
        float4 m[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) m[i] = tile[4 * a + i][swizzle(4 * a + i, b)];
        float* out = y + (index_t)(c0 + 4 * b) * rows + r0 + 4 * a;
        *reinterpret_cast<float4*>(out) = make_float4(m[0].x, m[1].x, m[2].x, m[3].x);
        *reinterpret_cast<float4*>(out + rows) = make_float4(m[0].y, m[1].y, m[2].y, m[3].y);
        *reinterpret_cast<float4*>(out + 2 * (index_t)rows) = make_float4(m[0].z, m[1].z, m[2].z, m[3].z);
        *reinterpret_cast<float4*>(out + 3 * (index_t)rows) = make_float4(m[0].w, m[1].w, m[2].w, m[3].w);
        // end quote: vec4_store
    } else {
        const float* flat = reinterpret_cast<const float*>(tile);
        // Element e of the output tile: y row c0 + e / 64, column r0 + e % 64 (coalesced).
        for (int e = t; e < 64 * 64; e += 256) {
            const int c = e >> 6, r = e & 63;
            if (r0 + r < rows && c0 + c < cols)
                y[(index_t)(c0 + c) * rows + r0 + r] = flat[r * 64 + 4 * swizzle(r, c >> 2) + (c & 3)];
        }
    }
}

// ---------------------------------------------------------------------------------------
// Reversal.

// grid(ceil(n / 256)), block(256): out[i] = x[n - 1 - i]. A warp reads 32 consecutive floats
// backwards: the same sectors as forwards, so still coalesced.
// quote: reverse_naive
KERNEL void reverse_naive_f32(const float* __restrict__ x, float* __restrict__ y, index_t n) {
    const index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[n - 1 - i];
}
// end quote: reverse_naive

// quote: reverse_vec4
__device__ __forceinline__ float4 reversed(float4 v) { return make_float4(v.w, v.z, v.y, v.x); }

// grid(ceil((n / 4 + 1) / 256)), block(256): thread i writes y's float4 i, which holds
// x[n - 1 - 4i] down to x[n - 4 - 4i]. Those four start 16-byte aligned only when n % 4 == 0
// (ALIGNED: one float4 load); otherwise four scalar loads, still coalesced across the warp.
// The thread past the last whole float4 writes the 0-3 leftovers.
template <bool ALIGNED>
__device__ __forceinline__ void reverse_vec4(const float* __restrict__ x, float* __restrict__ y,
                                             index_t n) {
    const index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x, n4 = n / 4;
    if (i < n4) {
        const index_t src = n - 4 - 4 * i;  // lowest of the four source elements
        float4 v;
        if (ALIGNED) {
            v = reinterpret_cast<const float4*>(x)[src / 4];
        } else {
            v = make_float4(x[src], x[src + 1], x[src + 2], x[src + 3]);
        }
        reinterpret_cast<float4*>(y)[i] = reversed(v);
    } else if (i == n4) {
        for (index_t j = 4 * n4; j < n; ++j) y[j] = x[n - 1 - j];
    }
}
// end quote: reverse_vec4

KERNEL void reverse_vec4_f32x4(const float* __restrict__ x, float* __restrict__ y, index_t n) {
    reverse_vec4<true>(x, y, n);
}

KERNEL void reverse_vec4_unaligned_f32x4(const float* __restrict__ x, float* __restrict__ y,
                                         index_t n) {
    reverse_vec4<false>(x, y, n);
}

// In place, n % 4 == 0: grid(ceil((n / 8 + 1) / 256)), block(256). Thread i < ceil(n4 / 2)
// swaps float4 i with float4 n4 - 1 - i, each reversed in registers; the middle float4 of an
// odd count is "swapped" with itself, both stores writing the same value.
// quote: inplace
KERNEL void reverse_inplace_f32x4(float* x, index_t n) {
    const index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x, n4 = n / 4;
    if (i < (n4 + 1) / 2) {
        float4* x4 = reinterpret_cast<float4*>(x);
        const index_t j = n4 - 1 - i;
        const float4 a = x4[i], b = x4[j];
        x4[i] = reversed(b);
        x4[j] = reversed(a);
    }
}
// end quote: inplace

// In place, any n: grid(ceil(n / 2 / 256)), block(256): thread i < n / 2 swaps elements i and
// n - 1 - i.
KERNEL void reverse_inplace_f32(float* x, index_t n) {
    const index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n / 2) {
        const float a = x[i], b = x[n - 1 - i];
        x[i] = b;
        x[n - 1 - i] = a;
    }
}

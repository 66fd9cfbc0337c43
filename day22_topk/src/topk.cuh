// day22: per-row top-k. What every version shares: the order-preserving keys, the ranks that
// make every element of a row distinct, loads, and bitonic sorting networks over a warp or a
// block. The Rust side puts this text in front of sort_row.cu, warp_bitonic.cu and
// radix_select.cu and compiles them as one file (NVRTC sees only common/cuda/ as headers).
//
// The defined order (also in the README and src/reference.rs): a float's key is its
// bits with the sign bit set when positive, every bit flipped when negative, so unsigned order
// is numeric order, -0.0 just below +0.0, subnormals by value; every NaN gets the top key, above
// +inf (torch.topk treats NaN as largest). Ties go to the lower column. Kernels compare integer
// keys only and copy the stored bits of the winners, so no float arithmetic happens and no
// flush-to-zero option could change a result.
#include "common.cuh"
#include "dtype.cuh"

typedef unsigned long long u64;

#define FULL_MASK 0xffffffffu

// quote: order_key
__device__ __forceinline__ unsigned order_key(float v) {
    const unsigned b = __float_as_uint(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) return 0xffffffffu;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
// end quote: order_key

__device__ __forceinline__ unsigned order_key(bf16_t v) {
    const unsigned b = v.bits;
    if ((b & 0x7fffu) > 0x7f80u) return 0xffffu;
    return (b & 0x8000u) ? (~b & 0xffffu) : (b | 0x8000u);
}

// A rank is the key above the reversed column: ranks of one row are all different (no ties
// left), a larger rank wins, and at equal keys the lower column has the larger rank. Widths are
// at most 2^20, so the column takes 20 bits: 52-bit ranks for f32, 36-bit for bf16. Every real
// rank is at least 2^20 (the smallest key, -inf's, is not 0), so 0 means "no element".
// quote: rank
#define COLUMN_BITS 20
#define COLUMN_MASK ((1u << COLUMN_BITS) - 1u)

__device__ __forceinline__ u64 rank_of(unsigned key, unsigned column) {
    return ((u64)key << COLUMN_BITS) | (u64)(COLUMN_MASK - column);
}
// end quote: rank
__device__ __forceinline__ unsigned column_of(u64 rank) {
    return COLUMN_MASK - (unsigned)(rank & COLUMN_MASK);
}
__device__ __forceinline__ unsigned key_of(u64 rank) { return (unsigned)(rank >> COLUMN_BITS); }

// Writes output j of a row: the column, and the element stored there (its bits unchanged: a NaN
// keeps its payload).
template <typename T>
__device__ __forceinline__ void write_ranked(const T* row_x, T* values, unsigned* indices,
                                             index_t j, u64 rank) {
    const unsigned column = column_of(rank);
    values[j] = row_x[column];
    indices[j] = column;
}

// quote: bitonic
// One step of a bitonic network over s[0..n): pair i of n/2 compares s[lo] and s[lo + stride];
// the run of `size` that lo is in sorts descending when its position (lo & size) is even, so
// at size == n the whole array comes out descending.
__device__ __forceinline__ void bitonic_pair(u64* s, int i, int size, int stride) {
    const int lo = 2 * i - (i & (stride - 1));
    const int hi = lo + stride;
    const bool descending = (lo & size) == 0;
    const u64 a = s[lo], b = s[hi];
    if ((a < b) == descending) {
        s[lo] = b;
        s[hi] = a;
    }
}
// end quote: bitonic

// Sorts s[0..n) descending, n a power of two, by the whole block: log2(n) (log2(n) + 1) / 2
// steps, a barrier after each. The caller has written s and passed a barrier.
__device__ void block_sort_descending(u64* s, int n) {
    for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < n / 2; i += blockDim.x) bitonic_pair(s, i, size, stride);
            __syncthreads();
        }
    }
}

// The same network run by one warp on its own slice of shared memory: __syncwarp between steps.
__device__ void warp_sort_descending(u64* s, int n, int lane) {
    for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = lane; i < n / 2; i += 32) bitonic_pair(s, i, size, stride);
            __syncwarp();
        }
    }
}

// sort_row: the readable baseline. One block per row keeps the best K ranks so far (K = k
// rounded up to a power of two) at the front of a 4096-slot shared buffer, fills the rest with
// the row's next 4096 - K elements, and sorts all 4096 with a bitonic network; after the last
// chunk the first k are the answer. It re-sorts the K it already has every time and touches
// every element with the full network (78 barrier-separated steps per chunk): simple, correct
// for every k and width, and slow. Run: cargo run --release -p day22 -- --kernel sort_row

#define SORT_SLOTS 4096

// grid(rows), block(1024): one block per row, 32 KB of shared memory.
template <typename T>
__device__ void sort_row(const T* __restrict__ x, T* __restrict__ values,
                         unsigned* __restrict__ indices, index_t width, unsigned k, unsigned K) {
    __shared__ u64 s[SORT_SLOTS];
    const index_t row = blockIdx.x;
    const T* row_x = x + row * width;
    for (unsigned i = threadIdx.x; i < K; i += blockDim.x) s[i] = 0;
    // quote: sort_row
    const unsigned chunk = SORT_SLOTS - K;
    for (index_t start = 0; start < width; start += chunk) {
        for (unsigned i = threadIdx.x; i < chunk; i += blockDim.x) {
            const index_t column = start + i;
            s[K + i] = column < width ? rank_of(order_key(row_x[column]), (unsigned)column) : 0;
        }
        __syncthreads();
        block_sort_descending(s, SORT_SLOTS);
    }
    // end quote: sort_row
    for (unsigned j = threadIdx.x; j < k; j += blockDim.x)
        write_ranked(row_x, values + row * k, indices + row * k, j, s[j]);
}

KERNEL void __launch_bounds__(1024) topk_sort_row_f32(const float* x, float* values,
                                                      unsigned* indices, index_t width,
                                                      unsigned k, unsigned K) {
    sort_row(x, values, indices, width, k, K);
}
KERNEL void __launch_bounds__(1024) topk_sort_row_bf16(const bf16_t* x, bf16_t* values,
                                                       unsigned* indices, index_t width,
                                                       unsigned k, unsigned K) {
    sort_row(x, values, indices, width, k, K);
}

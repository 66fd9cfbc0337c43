// radix_select: top-k for any k (up to 1024) and rows as long as 2^20. Instead of keeping a
// sorted list, find the k-th largest rank digit by digit, most significant first: count the
// row's elements per value of the next 11-bit digit (a histogram, among the elements whose
// higher digits match what is fixed so far), walk the 2048 bins from the top until the count
// reaches the k still needed, fix that digit, narrow, repeat. Ranks (key, reversed column)
// are all distinct, so after at most ceil(52 / 11) = 5 passes (f32; 4 for bf16's 36 bits) the
// k-th rank is known exactly, and usually sooner: a pass whose chosen bin holds exactly the
// elements still needed ends the search for that row. Then one pass gathers the k elements
// whose fixed high digits are >= the prefix (in any order, through an atomic counter), and a
// block sorts those k with a bitonic network. Rows are cut into segments, one block each, so
// that 16 rows of 1M elements still fill the GPU: a block adds its shared-memory histogram to
// the row's in global memory with one atomic per non-empty bin, and a small kernel per row
// chooses the digit between passes. Run: cargo run --release -p day22 -- --kernel radix_select

#define RADIX_BITS 11
#define RADIX (1 << RADIX_BITS)
// Per row in `counts`: the histogram, then how many elements are known to be above the prefix,
// whether the row's prefix is final, and how many the gather has taken. Zeroed before a run.
#define ABOVE RADIX
#define DONE (RADIX + 1)
#define TAKEN (RADIX + 2)
#define COUNTS_PER_ROW (RADIX + 4)
#define CHOOSE_THREADS 256
#define BINS_PER_THREAD (RADIX / CHOOSE_THREADS)

// The elements [begin, end) of this block's segment, U vectors of VEC per thread in flight;
// `use(rank, in_range)` sees every slot of a step in every thread (the gather votes on them).
template <typename T, int VEC, typename F>
__device__ __forceinline__ void for_each_rank(const T* __restrict__ row_x, index_t begin,
                                              index_t end, F use) {
    constexpr int U = VEC == 1 ? 8 : 4;
    const index_t step_len = (index_t)blockDim.x * VEC * U;
    for (index_t step = begin; step < end; step += step_len) {
        Elems<T, VEC> v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const index_t column = step + ((index_t)u * blockDim.x + threadIdx.x) * VEC;
            if (column < end) v[u] = load_elems<T, VEC, EVICT_FIRST>(row_x + column);  // the row is read once
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const index_t column = step + ((index_t)u * blockDim.x + threadIdx.x) * VEC;
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const bool in_range = column < end;
                use(in_range ? rank_of(order_key(v[u].v[e]), (unsigned)(column + e)) : 0,
                    in_range);
            }
        }
    }
}

// grid(rows, segments), block(512): this segment's histogram of the digit at `shift` among the
// elements matching the row's prefix, added into the row's. Digits overlap at the bottom (the
// last pass of f32 looks at bits 10..0 when 10..8 are already fixed): harmless, every matching
// element has the same fixed bits, so the bins keep the digit's order.
template <typename T, int VEC>
__device__ void radix_histogram(const T* __restrict__ x, const u64* __restrict__ prefix_mask,
                                unsigned* __restrict__ counts, index_t width, index_t segment_len,
                                unsigned shift) {
    __shared__ unsigned hist[RADIX];
    const index_t row = blockIdx.x;
    unsigned* row_counts = counts + row * COUNTS_PER_ROW;
    if (row_counts[DONE]) return;
    for (int b = threadIdx.x; b < RADIX; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    // quote: radix_histogram
    const u64 prefix = prefix_mask[2 * row], mask = prefix_mask[2 * row + 1];
    const index_t begin = (index_t)blockIdx.y * segment_len;
    const index_t end = min(begin + segment_len, width);
    for_each_rank<T, VEC>(x + row * width, begin, end, [&](u64 rank, bool in_range) {
        if (in_range && (rank & mask) == prefix)
            atomicAdd(&hist[(unsigned)(rank >> shift) & (RADIX - 1)], 1u);
    });
    __syncthreads();
    for (int b = threadIdx.x; b < RADIX; b += blockDim.x)
        if (hist[b]) atomicAdd(&row_counts[b], hist[b]);
    // end quote: radix_histogram
}

// grid(rows), block(256): thread t sums bins 2047 - 8t down to 2040 - 8t, an exclusive scan
// over threads gives how many matching elements lie in higher bins, and the one thread whose
// bins hold the k-th walks them to the digit. It fixes the digit, counts the elements in
// higher bins as taken, marks the row done when the chosen bin holds exactly the elements still
// needed (always so at shift 0: ranks are distinct), and clears the histogram for the next pass.
KERNEL void __launch_bounds__(CHOOSE_THREADS)
    topk_radix_choose(u64* prefix_mask, unsigned* counts, unsigned k, unsigned shift) {
    __shared__ unsigned warp_totals[CHOOSE_THREADS / 32];
    const index_t row = blockIdx.x;
    unsigned* c = counts + row * COUNTS_PER_ROW;
    if (c[DONE]) return;
    const unsigned need = k - c[ABOVE];
    const int top_bin = RADIX - 1 - (int)threadIdx.x * BINS_PER_THREAD;
    unsigned sum = 0;
#pragma unroll
    for (int i = 0; i < BINS_PER_THREAD; ++i) sum += c[top_bin - i];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    unsigned inclusive = sum;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
        const unsigned n = __shfl_up_sync(FULL_MASK, inclusive, offset);
        if (lane >= offset) inclusive += n;
    }
    if (lane == 31) warp_totals[warp] = inclusive;
    __syncthreads();
    unsigned before = inclusive - sum;
    for (int w = 0; w < warp; ++w) before += warp_totals[w];
    if (before < need && need <= before + sum) {
        unsigned above = before;
        int b = top_bin;
        while (above + c[b] < need) above += c[b--];
        prefix_mask[2 * row] |= (u64)b << shift;
        prefix_mask[2 * row + 1] |= (u64)(RADIX - 1) << shift;
        c[ABOVE] += above;
        if (c[b] == need - above || shift == 0) c[DONE] = 1;
    }
    __syncthreads();
    for (int b = threadIdx.x; b < RADIX; b += blockDim.x) c[b] = 0;
}

// grid(rows, segments), block(512): the elements whose fixed digits are >= the prefix are the
// row's top k (exactly k of them); each warp that finds some reserves their slots with one
// atomic and writes their ranks, unordered, to selected[row][0..k).
template <typename T, int VEC>
__device__ void radix_gather(const T* __restrict__ x, const u64* __restrict__ prefix_mask,
                             unsigned* __restrict__ counts, u64* __restrict__ selected,
                             index_t width, unsigned k, index_t segment_len) {
    const index_t row = blockIdx.x;
    const u64 prefix = prefix_mask[2 * row], mask = prefix_mask[2 * row + 1];
    unsigned* taken = counts + row * COUNTS_PER_ROW + TAKEN;
    u64* row_selected = selected + row * k;
    const index_t begin = (index_t)blockIdx.y * segment_len;
    const index_t end = min(begin + segment_len, width);
    const unsigned lane = threadIdx.x & 31;
    for_each_rank<T, VEC>(x + row * width, begin, end, [&](u64 rank, bool in_range) {
        const bool take = in_range && (rank & mask) >= prefix;
        const unsigned ballot = __ballot_sync(FULL_MASK, take);
        if (ballot == 0) return;
        const int leader = __ffs(ballot) - 1;
        unsigned base = 0;
        if (lane == leader) base = atomicAdd(taken, __popc(ballot));
        base = __shfl_sync(FULL_MASK, base, leader);
        const unsigned slot = base + __popc(ballot & ((1u << lane) - 1u));
        // Exactly k are taken when the prefix is right; the bound keeps a wrong one in bounds.
        if (take && slot < k) row_selected[slot] = rank;
    });
}

// grid(rows), block(512): the row's k selected ranks, padded with 0 to K (a power of two, at
// most 1024), sorted descending in shared memory; the first k are written out.
template <typename T>
__device__ void radix_sort(const T* __restrict__ x, const u64* __restrict__ selected,
                           T* __restrict__ values, unsigned* __restrict__ indices, index_t width,
                           unsigned k, unsigned K) {
    __shared__ u64 s[1024];
    const index_t row = blockIdx.x;
    for (unsigned i = threadIdx.x; i < K; i += blockDim.x) s[i] = i < k ? selected[row * k + i] : 0;
    __syncthreads();
    block_sort_descending(s, K);
    for (unsigned j = threadIdx.x; j < k; j += blockDim.x)
        write_ranked(x + row * width, values + row * k, indices + row * k, j, s[j]);
}

#define RADIX_PASSES(T, NAME, VEC)                                                             \
    KERNEL void __launch_bounds__(512)                                                         \
        topk_radix_hist_##NAME##_v##VEC(const T* x, const u64* prefix_mask, unsigned* counts,  \
                                        index_t width, index_t segment_len, unsigned shift) {  \
        radix_histogram<T, VEC>(x, prefix_mask, counts, width, segment_len, shift);            \
    }                                                                                          \
    KERNEL void __launch_bounds__(512)                                                         \
        topk_radix_gather_##NAME##_v##VEC(const T* x, const u64* prefix_mask, unsigned* counts, \
                                          u64* selected, index_t width, unsigned k,            \
                                          index_t segment_len) {                               \
        radix_gather<T, VEC>(x, prefix_mask, counts, selected, width, k, segment_len);         \
    }

RADIX_PASSES(float, f32, 1)
RADIX_PASSES(float, f32, 4)
RADIX_PASSES(bf16_t, bf16, 1)
RADIX_PASSES(bf16_t, bf16, 8)

KERNEL void __launch_bounds__(512) topk_radix_sort_f32(const float* x, const u64* selected,
                                                       float* values, unsigned* indices,
                                                       index_t width, unsigned k, unsigned K) {
    radix_sort(x, selected, values, indices, width, k, K);
}
KERNEL void __launch_bounds__(512) topk_radix_sort_bf16(const bf16_t* x, const u64* selected,
                                                        bf16_t* values, unsigned* indices,
                                                        index_t width, unsigned k, unsigned K) {
    radix_sort(x, selected, values, indices, width, k, K);
}

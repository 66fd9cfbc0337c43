// warp_bitonic: top-k for k <= 128 at the speed of reading the row. Each warp owns a stretch of
// a row (a segment) and keeps, in its own 4K slots of shared memory, the best K ranks so far,
// sorted (K = k rounded up to a power of two, 32 to 128), followed by up to 3K candidates.
// The K-th best rank is the threshold: an element enters the candidates only if it beats it,
// and when the candidates would overflow, the warp sorts list + candidates with a bitonic
// network and keeps the first K (which raises the threshold). On a random row of n elements
// only about K ln(n / K) ever beat the threshold, so almost every step is: load 16 bytes per
// lane, compute keys, one vote that says nobody beat it. Few rows: each row is cut into
// segments, one warp each, that write their sorted K to a scratch buffer, and a second kernel
// runs the same warp top-k over a row's segments' lists. Versions with k > 128 are refused.
// Run: cargo run --release -p day22 -- --kernel warp_bitonic

#define WARPS_PER_BLOCK 8

template <int K> struct WarpTopK {
    static constexpr int SLOTS = 4 * K;
    u64* s;         // this warp's slots: s[0..K) the list (sorted after every flush), then the
                    // candidates s[K..K + count)
    int count;      // the same in every lane, like threshold
    u64 threshold;  // s[K - 1] as of the last flush: a candidate must be larger
    int lane;

    __device__ void init(u64* slots) {
        s = slots;
        lane = threadIdx.x & 31;
        for (int i = lane; i < SLOTS; i += 32) s[i] = 0;
        __syncwarp();
        count = 0;
        threshold = 0;
    }

    // quote: warp_offer
    // List and candidates sorted together; the first K are the new list.
    __device__ void flush() {
        __syncwarp();
        for (int i = K + count + lane; i < SLOTS; i += 32) s[i] = 0;
        __syncwarp();
        warp_sort_descending(s, SLOTS, lane);
        count = 0;
        threshold = s[K - 1];
    }

    // The whole warp calls this, each lane with one rank (0: none).
    __device__ void offer(u64 rank) {
        bool wins = rank > threshold;
        unsigned ballot = __ballot_sync(FULL_MASK, wins);
        if (ballot == 0) return;
        if (count + __popc(ballot) > SLOTS - K) {
            flush();
            wins = rank > threshold;
            ballot = __ballot_sync(FULL_MASK, wins);
        }
        if (wins) s[K + count + __popc(ballot & ((1u << lane) - 1u))] = rank;
        count += __popc(ballot);
    }
    // end quote: warp_offer

    __device__ void finish() {
        if (count > 0) flush();
    }
};

// Offers the elements [begin, end) of a row to `top`: each step, lane l loads vectors
// l, l + 32, ... (U of them, all in flight before the first is used). `begin` and the length
// are multiples of VEC. The loop runs the same steps in every lane (a lane past `end` offers
// nothing), as the votes need the whole warp.
template <typename T, int K, int VEC>
__device__ void offer_elements(const T* __restrict__ row_x, index_t begin, index_t end,
                               WarpTopK<K>& top) {
    constexpr int U = VEC == 1 ? 8 : 4;
    constexpr index_t STEP = (index_t)32 * VEC * U;
    for (index_t step = begin; step < end; step += STEP) {
        // quote: warp_vote
        Elems<T, VEC> v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const index_t column = step + ((index_t)u * 32 + top.lane) * VEC;
            if (column < end) v[u] = load_elems<T, VEC, EVICT_FIRST>(row_x + column);  // the row is read once
        }
        // The cheap test first: a key below the threshold's key cannot win.
        const unsigned threshold_key = key_of(top.threshold);
        bool maybe = false;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const index_t column = step + ((index_t)u * 32 + top.lane) * VEC;
#pragma unroll
            for (int e = 0; e < VEC; ++e)
                maybe |= column < end && order_key(v[u].v[e]) >= threshold_key;
        }
        if (!__any_sync(FULL_MASK, maybe)) continue;
        // end quote: warp_vote
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const index_t column = step + ((index_t)u * 32 + top.lane) * VEC;
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const u64 rank = column < end
                                     ? rank_of(order_key(v[u].v[e]), (unsigned)(column + e))
                                     : 0;
                top.offer(rank);
            }
        }
    }
}

// Offers ranks already computed (a row's segment lists in the scratch buffer); 0 is "none".
template <int K>
__device__ void offer_ranks(const u64* __restrict__ ranks, index_t n, WarpTopK<K>& top) {
    constexpr int U = 4;
    for (index_t step = 0; step < n; step += 32 * U) {
        u64 r[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const index_t i = step + (index_t)u * 32 + top.lane;
            r[u] = i < n ? ranks[i] : 0;
        }
        bool maybe = false;
#pragma unroll
        for (int u = 0; u < U; ++u) maybe |= r[u] > top.threshold;
        if (!__any_sync(FULL_MASK, maybe)) continue;
#pragma unroll
        for (int u = 0; u < U; ++u) top.offer(r[u]);
    }
}

// grid(ceil(rows * segments / 8)), block(256): warp w of the grid takes segment w % segments
// of row w / segments. One segment: the warp writes the row's answer. Several: it writes its
// sorted K ranks to scratch[row][segment][0..K) for warp_merge.
template <typename T, int K, int VEC>
__device__ void warp_topk(const T* __restrict__ x, T* __restrict__ values,
                          unsigned* __restrict__ indices, u64* __restrict__ scratch, index_t rows,
                          index_t width, unsigned k, index_t segment_len, index_t segments) {
    __shared__ u64 slots[WARPS_PER_BLOCK][WarpTopK<K>::SLOTS];
    const int warp = threadIdx.x / 32;
    const index_t w = (index_t)blockIdx.x * WARPS_PER_BLOCK + warp;
    if (w >= rows * segments) return;
    const index_t row = w / segments, segment = w % segments;
    const index_t begin = segment * segment_len;
    const index_t end = min(begin + segment_len, width);
    const T* row_x = x + row * width;
    WarpTopK<K> top;
    top.init(slots[warp]);
    offer_elements<T, K, VEC>(row_x, begin, end, top);
    top.finish();
    if (segments == 1) {
        for (unsigned j = top.lane; j < k; j += 32)
            write_ranked(row_x, values + row * k, indices + row * k, j, top.s[j]);
    } else {
        for (int j = top.lane; j < K; j += 32) scratch[w * K + j] = top.s[j];
    }
}

// grid(ceil(rows / 8)), block(256): one warp per row over its segments' lists (segments * K
// ranks, some 0 where a segment was shorter than K).
template <typename T, int K>
__device__ void warp_merge(const T* __restrict__ x, T* __restrict__ values,
                           unsigned* __restrict__ indices, const u64* __restrict__ scratch,
                           index_t rows, index_t width, unsigned k, index_t segments) {
    __shared__ u64 slots[WARPS_PER_BLOCK][WarpTopK<K>::SLOTS];
    const int warp = threadIdx.x / 32;
    const index_t row = (index_t)blockIdx.x * WARPS_PER_BLOCK + warp;
    if (row >= rows) return;
    WarpTopK<K> top;
    top.init(slots[warp]);
    offer_ranks<K>(scratch + row * segments * K, segments * K, top);
    top.finish();
    const T* row_x = x + row * width;
    for (unsigned j = top.lane; j < k; j += 32)
        write_ranked(row_x, values + row * k, indices + row * k, j, top.s[j]);
}

#define WARP_TOPK(T, NAME, K, VEC)                                                             \
    KERNEL void __launch_bounds__(256, 2)                                                      \
        topk_warp_##NAME##_k##K##_v##VEC(const T* x, T* values, unsigned* indices,             \
                                         u64* scratch, index_t rows, index_t width, unsigned k, \
                                         index_t segment_len, index_t segments) {              \
        warp_topk<T, K, VEC>(x, values, indices, scratch, rows, width, k, segment_len,         \
                             segments);                                                        \
    }
#define WARP_MERGE(T, NAME, K)                                                                 \
    KERNEL void __launch_bounds__(256, 2)                                                      \
        topk_warp_merge_##NAME##_k##K(const T* x, T* values, unsigned* indices,                \
                                      const u64* scratch, index_t rows, index_t width,         \
                                      unsigned k, index_t segments) {                          \
        warp_merge<T, K>(x, values, indices, scratch, rows, width, k, segments);               \
    }
#define WARP_FAMILY(T, NAME, VEC)                                                              \
    WARP_TOPK(T, NAME, 32, 1) WARP_TOPK(T, NAME, 64, 1) WARP_TOPK(T, NAME, 128, 1)             \
    WARP_TOPK(T, NAME, 32, VEC) WARP_TOPK(T, NAME, 64, VEC) WARP_TOPK(T, NAME, 128, VEC)       \
    WARP_MERGE(T, NAME, 32) WARP_MERGE(T, NAME, 64) WARP_MERGE(T, NAME, 128)

WARP_FAMILY(float, f32, 4)
WARP_FAMILY(bf16_t, bf16, 8)

// day05: vectorized softmax, the row kept in registers.
//
// Two changes to day 4, both about the memory bus:
// 1. 16-byte loads and stores: a thread moves 4 floats or 8 halves per instruction
//    (LDG.E.128), a quarter or an eighth of the instructions for the same bytes. The row must
//    then start on a 16-byte boundary, i.e. its width must be a multiple of 16/sizeof(T);
//    other widths take the same kernels with scalar loads (the `_s` instantiations).
// 2. The row stays in registers: each thread loads its EPT elements once, and the max, the
//    exponentials, the sum and the output are all computed from registers. The input is read
//    from memory exactly once and the output written once: the least traffic there is.
//    Registers are finite (at most 64 per thread in a 1024-thread block), so a thread holds at
//    most 32 elements and a row at most 32 x 1024 = 32768; longer rows take the online
//    two-pass kernel, and a few very long rows the split-row kernels, both vectorized.
//
// Versions:
//   vec_regs    the row in registers, a warp per row up to 512 columns, a block above
//   vec_online  a block per row, two passes (online max+sum, write), 16-byte loads; the
//               write pass walks the row backwards, so it starts on what L2 still holds
//   vec_split   chunks of a row on separate blocks (stats, then merge-and-write), 16-byte loads,
//               the write pass backwards as in vec_online
//   vec_split_fused  the same in one cooperative launch: blocks wait for their row's
//               summaries instead of for a second kernel
//   vec_split_onchip vec_split_fused with no second read: one 1024-thread block per SM keeps
//               its whole chunk (256 KB of input) in registers and shared memory between the
//               summaries and the write, so a few rows too long for any one SM are read once
//   vec_rows_overlap the same bytes on chip, but every block holds a chunk of every row (up
//               to 8 rows) and writes row r - 1 while rows r + 1, ... are still arriving
//
// Run: cargo run --release -p day05 -- --rows 4096 --cols 32768 --kernel vec_regs
#include "common.cuh"
#include "dtype.cuh"
#include "mma.cuh"
#include "reduce.cuh"

// Reductions within the threads that share a row: a warp, or the whole block.
template <int GROUP> __device__ __forceinline__ float group_max(float v, float* scratch) {
    if constexpr (GROUP == 32) return warp_max(v);
    else return block_max(v, scratch);
}
template <int GROUP> __device__ __forceinline__ float group_sum(float v, float* scratch) {
    if constexpr (GROUP == 32) return warp_sum(v);
    else return block_sum(v, scratch);
}

// GROUP threads per row: GROUP = 32 is a warp per row (8 rows per 256-thread block),
// otherwise a block of GROUP threads per row (grid = rows). Each thread holds EPT elements in
// registers. With VEC, thread t holds 16-byte packs t, t + GROUP, ...; without, columns
// t, t + GROUP, ... (coalesced either way). Slots past the end of the row hold -inf, which
// the max ignores and the sum sees as exp(-inf) = 0.
template <typename T, int GROUP, int EPT, bool VEC>
__device__ __forceinline__ void softmax_regs(const T* __restrict__ x, T* __restrict__ y,
                                             index_t rows, index_t cols) {
    // quote: regs_load
    __shared__ float scratch[32];
    const int t = threadIdx.x % GROUP;
    const index_t row = (index_t)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
    if (GROUP == 32 && row >= rows) return;  // whole warps; blocks per row always have a row
    const T* in = x + row * cols;
    T* out = y + row * cols;

    float v[EPT];
    load_row<T, GROUP, EPT, VEC>(in, t, cols, v, NEG_INF);
    // end quote: regs_load

    // quote: regs_math
    float row_max = NEG_INF;
#pragma unroll
    for (int i = 0; i < EPT; ++i) row_max = fmaxf(row_max, v[i]);
    row_max = group_max<GROUP>(row_max, scratch);

    // An all -inf row shifts by 0 instead: exp(-inf) = 0 in every slot, and its scale of 0
    // below writes zeros (no branch, which would cost the 1024-thread tier registers).
    const float shift = row_max == NEG_INF ? 0.0f : row_max;
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < EPT; ++i) {
        v[i] = expf(v[i] - shift);
        sum += v[i];
    }
    // Every thread reaches the barrier inside group_sum, also in an all -inf row.
    sum = group_sum<GROUP>(sum, scratch);
    const float scale = row_max == NEG_INF ? 0.0f : 1.0f / sum;  // all -inf: zeros
    // end quote: regs_math

    // quote: regs_store
    // The same layout as load_row's, slots past the row's end not stored.
    if constexpr (VEC) {
        constexpr int N = 16 / sizeof(T);
#pragma unroll
        for (int p = 0; p < EPT / N; ++p) {
            const index_t col = ((index_t)p * GROUP + t) * N;
            if (col < cols) {
                Pack16<T> pack;
#pragma unroll
                for (int k = 0; k < N; ++k) pack.v[k] = from_f32<T>(v[p * N + k] * scale);
                store16(out + col, pack);
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < EPT; ++i) {
            const index_t col = (index_t)i * GROUP + t;
            if (col < cols) out[col] = from_f32<T>(v[i] * scale);
        }
    }
    // end quote: regs_store
}

// Online (max, sum) of columns [begin, end) of one row, by this block's threads; with VEC,
// begin and end are multiples of the pack width.
template <typename T, bool VEC>
__device__ __forceinline__ MaxSum thread_stats(const T* __restrict__ in, index_t begin,
                                               index_t end) {
    constexpr int N = 16 / sizeof(T);
    MaxSum stats = max_sum_empty();
    if constexpr (VEC) {
        for (index_t c = begin + (index_t)threadIdx.x * N; c < end; c += (index_t)blockDim.x * N) {
            const Pack16<T> pack = load16(in + c);
#pragma unroll
            for (int k = 0; k < N; ++k) stats = max_sum_add(stats, to_f32(pack.v[k]));
        }
    } else {
        for (index_t c = begin + threadIdx.x; c < end; c += blockDim.x)
            stats = max_sum_add(stats, to_f32(in[c]));
    }
    return stats;
}

// out[c] = exp(in[c] - max) * scale for c in [begin, end), walking the range from its end:
// pass 1 read it from the start, so its end is what L2 still holds. Going forwards again
// would evict those lines, by reading the oldest ones back first, before reaching them (the
// cyclic pattern an LRU cache handles worst). Each warp still covers contiguous bytes.
template <typename T, bool VEC>
__device__ __forceinline__ void write_scaled(const T* __restrict__ in, T* __restrict__ out,
                                             index_t begin, index_t end, float max, float scale) {
    constexpr int N = VEC ? 16 / sizeof(T) : 1;
    const index_t items = (end - begin) / N;  // packs (or elements) in the range
    for (index_t i = threadIdx.x; i < items; i += blockDim.x) {
        const index_t c = begin + (items - 1 - i) * N;
        if constexpr (VEC) {
            Pack16<T> pack = load16(in + c);
#pragma unroll
            for (int k = 0; k < N; ++k)
                pack.v[k] = from_f32<T>(expf(to_f32(pack.v[k]) - max) * scale);
            store16(out + c, pack);
        } else {
            out[c] = from_f32<T>(expf(to_f32(in[c]) - max) * scale);
        }
    }
}

// grid(rows), block(1024): pass 1 online stats, pass 2 write.
template <typename T, bool VEC>
__device__ __forceinline__ void softmax_online(const T* __restrict__ x, T* __restrict__ y,
                                               index_t cols) {
    __shared__ MaxSum scratch[32];
    const T* in = x + (index_t)blockIdx.x * cols;
    T* out = y + (index_t)blockIdx.x * cols;
    const MaxSum stats = block_max_sum(thread_stats<T, VEC>(in, 0, cols), scratch);
    const float scale = stats.max == NEG_INF ? 0.0f : 1.0f / stats.sum;
    // An all -inf row: exp(-inf - -inf) would be NaN; scale 0 with max 0 writes zeros.
    write_scaled<T, VEC>(in, out, 0, cols, stats.max == NEG_INF ? 0.0f : stats.max, scale);
}

// grid(chunks, rows), block(THREADS): chunk summaries, as day 4, with 16-byte loads.
template <typename T, bool VEC>
__device__ __forceinline__ void softmax_split_stats(const T* __restrict__ x,
                                                    MaxSum* __restrict__ partials, index_t cols,
                                                    index_t chunk) {
    __shared__ MaxSum scratch[32];
    const index_t row = blockIdx.y, begin = (index_t)blockIdx.x * chunk;
    const index_t end = begin + chunk < cols ? begin + chunk : cols;
    const MaxSum stats = block_max_sum(thread_stats<T, VEC>(x + row * cols, begin, end), scratch);
    if (threadIdx.x == 0) partials[row * gridDim.x + blockIdx.x] = stats;
}

// grid(chunks, rows), block(THREADS): merge the row's summaries, write this chunk.
template <typename T, bool VEC>
__device__ __forceinline__ void softmax_split_write(const T* __restrict__ x, T* __restrict__ y,
                                                    const MaxSum* __restrict__ partials,
                                                    index_t cols, index_t chunk) {
    __shared__ MaxSum scratch[32];
    const index_t row = blockIdx.y, begin = (index_t)blockIdx.x * chunk;
    const index_t end = begin + chunk < cols ? begin + chunk : cols;
    MaxSum stats = max_sum_empty();
    for (unsigned k = threadIdx.x; k < gridDim.x; k += blockDim.x)
        stats = max_sum_combine(stats, partials[row * gridDim.x + k]);
    stats = block_max_sum(stats, scratch);
    const float scale = stats.max == NEG_INF ? 0.0f : 1.0f / stats.sum;
    write_scaled<T, VEC>(x + row * cols, y + row * cols, begin, end,
                         stats.max == NEG_INF ? 0.0f : stats.max, scale);
}

// Reads a counter that other blocks increment, with acquire semantics: what those blocks
// wrote before their increment is visible to what this thread reads after.
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// A row's summary from its chunks' (every block resident at once): each block publishes its
// chunk's (max, sum) in `row_partials[blockIdx.x]` and counts it in `arrival`, which counts
// over all launches (this launch waits for `target`); then waits for all of the row's and
// merges them, every block in the same order. Called by every thread of the block; every
// thread gets the row's (max, sum).
__device__ __forceinline__ void publish_summary(MaxSum mine, MaxSum* row_partials,
                                                unsigned* arrival) {
    if (threadIdx.x == 0) {
        row_partials[blockIdx.x] = mine;
        __threadfence();  // the summary is visible before the arrival that announces it
        atomicAdd(arrival, 1u);
    }
}
__device__ __forceinline__ MaxSum merge_published(const MaxSum* row_partials,
                                                  const unsigned* arrival, unsigned target,
                                                  MaxSum* scratch) {
    if (threadIdx.x == 0)
        while (load_acquire(arrival) < target) __nanosleep(64);
    __syncthreads();
    MaxSum stats = max_sum_empty();
    for (unsigned k = threadIdx.x; k < gridDim.x; k += blockDim.x) {
        // Through L2 (.cg): L1 is not coherent with other SMs' writes.
        const float* p = reinterpret_cast<const float*>(&row_partials[k]);
        stats = max_sum_combine(stats, MaxSum{__ldcg(p), __ldcg(p + 1)});
    }
    return block_max_sum(stats, scratch);
}
__device__ __forceinline__ MaxSum exchange_summaries(MaxSum mine, MaxSum* partials,
                                                     unsigned* arrivals, index_t row,
                                                     unsigned target, MaxSum* scratch) {
    publish_summary(mine, partials + row * gridDim.x, &arrivals[row]);
    return merge_published(partials + row * gridDim.x, &arrivals[row], target, scratch);
}

// cp.async.wait_group with a count known only after unrolling (0..7).
__device__ __forceinline__ void cp_async_wait_dynamic(int pending) {
    switch (pending) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<7>(); break;
    }
}

// grid(chunks, rows), block(THREADS), launched cooperatively so that every block is resident
// at once: vec_split's two kernels in one launch. Each block summarises its chunk, publishes
// the summary and waits until every chunk of its row has; then it merges them and writes its
// chunk, which it has just read and L2 still holds. arrivals[row] counts published summaries
// over all launches; this launch waits for `target` = launch number x chunks, so the counters
// never need resetting between launches.
template <typename T, bool VEC>
__device__ __forceinline__ void softmax_split_fused(const T* __restrict__ x, T* __restrict__ y,
                                                    MaxSum* partials, unsigned* arrivals,
                                                    index_t cols, index_t chunk, unsigned target) {
    __shared__ MaxSum scratch[32];
    const index_t row = blockIdx.y, begin = (index_t)blockIdx.x * chunk;
    const index_t end = begin + chunk < cols ? begin + chunk : cols;
    const T* in = x + row * cols;
    const MaxSum mine = block_max_sum(thread_stats<T, VEC>(in, begin, end), scratch);
    const MaxSum stats = exchange_summaries(mine, partials, arrivals, row, target, scratch);
    const float scale = stats.max == NEG_INF ? 0.0f : 1.0f / stats.sum;
    write_scaled<T, VEC>(in, y + row * cols, begin, end, stats.max == NEG_INF ? 0.0f : stats.max,
                         scale);
}

// vec_split_onchip's block: 1024 threads, each holding 6 packs of 16 bytes in registers
// (24 registers: a 1024-thread block may use 64, and 8 packs spill in bf16, whose conversions
// need more) and 10 in shared memory (160 KB a block), so a block holds 16 x 1024 packs =
// 256 KB of input, and one block fits an SM. The launcher
// (plan_split_onchip) repeats these numbers; it refuses grids the GPU cannot hold at once.
constexpr int ONCHIP_THREADS = 1024, ONCHIP_REG_PACKS = 6, ONCHIP_SMEM_PACKS = 10;

// grid(chunks, rows), block(ONCHIP_THREADS), dynamic shared memory ONCHIP_SMEM_PACKS x
// ONCHIP_THREADS x 16 bytes, launched cooperatively (every block resident at once, one per
// SM). Chunks are whole packs: begin and end are multiples of the pack width (the launcher
// takes only rows of whole packs). Thread t holds packs t, t + 1024, ... of its chunk:
// the first 6 in registers, the next 10 in shared memory, filled by cp.async so they take no
// registers on the way. The input is read once: the chunk's summary (max, then the sum of
// exponentials, both from what the block holds) is published as in vec_split_fused, and
// after the row's summaries are merged the outputs are computed from the held values.
template <typename T>
__device__ __forceinline__ void softmax_split_onchip(const T* __restrict__ x, T* __restrict__ y,
                                                     MaxSum* partials, unsigned* arrivals,
                                                     index_t cols, index_t chunk,
                                                     unsigned target) {
    constexpr int N = 16 / sizeof(T);
    constexpr int R = ONCHIP_REG_PACKS, S = ONCHIP_SMEM_PACKS, B = ONCHIP_THREADS;
    extern __shared__ uint4 staged[];  // [S][B] packs: slot s of thread t at s * B + t
    __shared__ MaxSum scratch[32];
    const int t = threadIdx.x;
    const index_t row = blockIdx.y, begin = (index_t)blockIdx.x * chunk;
    const index_t end = begin + chunk < cols ? begin + chunk : cols;
    const index_t packs = (end - begin) / N;
    const T* in = x + row * cols + begin;
    T* out = y + row * cols + begin;

    // Shared-memory slots first: their copies need no registers and run while the register
    // loads below are in flight too. Slot s is pack (R + s) * B + t of the chunk.
#pragma unroll
    for (int s = 0; s < S; ++s) {
        const index_t p = (index_t)(R + s) * B + t;
        if (p < packs) cp_async_16_zfill(&staged[s * B + t], in + p * N, true);
    }
    cp_async_commit();
    Pack16<T> held[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const index_t p = (index_t)r * B + t;
        if (p < packs) held[r] = load16(in + p * N);
    }

    // This thread's max, then its sum of exponentials from that max (one exp per element,
    // where an online update would add one per new maximum). Slots past the chunk's end are
    // skipped; a thread with none keeps (-inf, 0), the empty summary.
    float m = NEG_INF;
#pragma unroll
    for (int r = 0; r < R; ++r)
        if ((index_t)r * B + t < packs)
#pragma unroll
            for (int k = 0; k < N; ++k) m = fmaxf(m, to_f32(held[r].v[k]));
    cp_async_wait<0>();  // this thread's own copies: it reads back only what it copied
#pragma unroll
    for (int s = 0; s < S; ++s) {
        if ((index_t)(R + s) * B + t < packs) {
            const Pack16<T> pack = *reinterpret_cast<const Pack16<T>*>(&staged[s * B + t]);
#pragma unroll
            for (int k = 0; k < N; ++k) m = fmaxf(m, to_f32(pack.v[k]));
        }
    }
    const float shift = m == NEG_INF ? 0.0f : m;  // all -inf: exp(-inf - 0) = 0, no NaN
    float sum = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r)
        if ((index_t)r * B + t < packs)
#pragma unroll
            for (int k = 0; k < N; ++k) sum += expf(to_f32(held[r].v[k]) - shift);
#pragma unroll
    for (int s = 0; s < S; ++s) {
        if ((index_t)(R + s) * B + t < packs) {
            const Pack16<T> pack = *reinterpret_cast<const Pack16<T>*>(&staged[s * B + t]);
#pragma unroll
            for (int k = 0; k < N; ++k) sum += expf(to_f32(pack.v[k]) - shift);
        }
    }
    const MaxSum mine = block_max_sum(MaxSum{m, sum}, scratch);

    const MaxSum stats = exchange_summaries(mine, partials, arrivals, row, target, scratch);
    const float row_shift = stats.max == NEG_INF ? 0.0f : stats.max;
    const float scale = stats.max == NEG_INF ? 0.0f : 1.0f / stats.sum;  // all -inf: zeros

#pragma unroll
    for (int r = 0; r < R; ++r) {
        const index_t p = (index_t)r * B + t;
        if (p < packs) {
            Pack16<T> pack;
#pragma unroll
            for (int k = 0; k < N; ++k)
                pack.v[k] = from_f32<T>(expf(to_f32(held[r].v[k]) - row_shift) * scale);
            store16(out + p * N, pack);
        }
    }
#pragma unroll
    for (int s = 0; s < S; ++s) {
        const index_t p = (index_t)(R + s) * B + t;
        if (p < packs) {
            Pack16<T> pack = *reinterpret_cast<const Pack16<T>*>(&staged[s * B + t]);
#pragma unroll
            for (int k = 0; k < N; ++k)
                pack.v[k] = from_f32<T>(expf(to_f32(pack.v[k]) - row_shift) * scale);
            store16(out + p * N, pack);
        }
    }
}

// ---- vec_rows_overlap: the same bytes on chip, the rows' phases overlapped ----
//
// vec_split_onchip reads everything, then writes everything: every block waits for its row's
// slowest chunk before its first store, so the read and the write are two half-copies back
// to back (1840 GB/s on 8 x 1M f32). Here every block takes a chunk of EVERY row (at most
// OVERLAP_ROWS rows) and loads the rows in order; it publishes row r's summary as soon as row
// r has arrived, and writes row r - 1 right after, while rows r + 1, ... are still on their
// way. Per thread and row: one pack in registers (held[r]) and one in shared memory (cp.async,
// one commit group per row, so waiting for row r is cp.async.wait_group(OVERLAP_ROWS - 1 - r)).
// A block's chunk of a row is at most 2 x 1024 packs; on 8 x 1M f32 that is 128 blocks. f32
// only (the few-huge-rows problem is f32; in 16-bit types the held packs spill).
constexpr int OVERLAP_ROWS = 8, OVERLAP_THREADS = 1024;

template <typename T>
__device__ __forceinline__ MaxSum pack_max_sum(const Pack16<T>& pack, MaxSum s) {
    constexpr int N = 16 / sizeof(T);
    float m = s.max;
#pragma unroll
    for (int k = 0; k < N; ++k) m = fmaxf(m, to_f32(pack.v[k]));
    if (m == NEG_INF) return s;  // nothing but -inf so far: (-inf, 0)
    float sum = s.sum * expf(s.max - m);  // s.max = -inf: exp(-inf) = 0
#pragma unroll
    for (int k = 0; k < N; ++k) sum += expf(to_f32(pack.v[k]) - m);
    return {m, sum};
}

template <typename T>
__device__ __forceinline__ void store_scaled(T* out, const Pack16<T>& in, float shift,
                                             float scale) {
    constexpr int N = 16 / sizeof(T);
    Pack16<T> pack;
#pragma unroll
    for (int k = 0; k < N; ++k) pack.v[k] = from_f32<T>(expf(to_f32(in.v[k]) - shift) * scale);
    store16(out, pack);
}

// grid(blocks), block(OVERLAP_THREADS), dynamic shared memory OVERLAP_ROWS x OVERLAP_THREADS x
// 16 bytes (128 KB), launched cooperatively. Block b holds packs [b chunk, (b + 1) chunk) of
// every row (chunk <= 2 x OVERLAP_THREADS packs): pack t in registers, pack OVERLAP_THREADS + t
// in shared memory. rows <= OVERLAP_ROWS, cols a multiple of the pack (the launcher checks).
template <typename T>
__device__ __forceinline__ void softmax_rows_overlap(const T* __restrict__ x, T* __restrict__ y,
                                                     MaxSum* partials, unsigned* arrivals,
                                                     index_t rows, index_t cols,
                                                     index_t chunk, unsigned target) {
    constexpr int N = 16 / sizeof(T), R = OVERLAP_ROWS, B = OVERLAP_THREADS;
    extern __shared__ uint4 staged[];  // [row][thread]
    __shared__ MaxSum scratch[32];
    const int t = threadIdx.x;
    const index_t first = (index_t)blockIdx.x * chunk;  // in packs
    const index_t row_packs = cols / N;
    const index_t end = first + chunk < row_packs ? first + chunk : row_packs;
    const index_t mine = end > first ? end - first : 0;
    const bool has_reg = t < mine, has_smem = B + t < mine;
    Pack16<T> held[R];
    // Every row's loads now, in row order: one commit group per row (empty past `rows`).
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (r < rows) {
            const T* in = x + (index_t)r * cols + first * N;
            if (has_smem) cp_async_16_zfill(&staged[r * B + t], in + (index_t)(B + t) * N, true);
            if (has_reg) held[r] = load16(in + (index_t)t * N);
        }
        cp_async_commit();
    }
    // Writes row w from what the block holds, once the row's summaries are all in.
    auto write_row = [&](int w, const Pack16<T>& reg) {
        const MaxSum stats =
            merge_published(partials + (index_t)w * gridDim.x, &arrivals[w], target, scratch);
        const float shift = stats.max == NEG_INF ? 0.0f : stats.max;
        const float scale = stats.max == NEG_INF ? 0.0f : 1.0f / stats.sum;  // all -inf: zeros
        T* out = y + (index_t)w * cols + first * N;
        if (has_reg) store_scaled(out + (index_t)t * N, reg, shift, scale);
        if (has_smem) {
            const Pack16<T> pack = *reinterpret_cast<const Pack16<T>*>(&staged[w * B + t]);
            store_scaled(out + (index_t)(B + t) * N, pack, shift, scale);
        }
    };
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (r < rows) {
            cp_async_wait_dynamic(R - 1 - r);  // this thread's copies of rows 0..r
            MaxSum mine_stats = max_sum_empty();
            if (has_reg) mine_stats = pack_max_sum(held[r], mine_stats);
            if (has_smem)
                mine_stats = pack_max_sum(*reinterpret_cast<const Pack16<T>*>(&staged[r * B + t]),
                                          mine_stats);
            publish_summary(block_max_sum(mine_stats, scratch),
                            partials + (index_t)r * gridDim.x, &arrivals[r]);
            if (r > 0) write_row(r - 1, held[r > 0 ? r - 1 : 0]);
        }
    }
    const int last = (int)rows - 1;  // rows >= 1
#pragma unroll
    for (int r = 0; r < R; ++r)
        if (r == last) write_row(r, held[r]);
}

#define OVERLAP(T, NAME)                                                                       \
    KERNEL void __launch_bounds__(OVERLAP_THREADS, 1)                                          \
        softmax_rows_overlap_##NAME##_v(const T* x, T* y, MaxSum* partials,                    \
                                        unsigned* arrivals, index_t rows, index_t cols,        \
                                        index_t chunk, unsigned target) {                      \
        softmax_rows_overlap<T>(x, y, partials, arrivals, rows, cols, chunk, target);          \
    }

#define ONCHIP(T, NAME)                                                                        \
    KERNEL void __launch_bounds__(ONCHIP_THREADS, 1)                                           \
        softmax_split_onchip_##NAME##_v(const T* x, T* y, MaxSum* partials,                   \
                                        unsigned* arrivals, index_t cols, index_t chunk,       \
                                        unsigned target) {                                     \
        softmax_split_onchip<T>(x, y, partials, arrivals, cols, chunk, target);                \
    }

// The register tiers: (threads per row, elements per thread). The launcher picks the first
// tier whose capacity GROUP * EPT holds the row. Blocks are 256 threads for a warp per row.
#define REGS_TIER(T, NAME, GROUP, EPT, BLOCK)                                                  \
    KERNEL void __launch_bounds__(BLOCK)                                                       \
        softmax_regs_##NAME##_g##GROUP##_e##EPT##_v(const T* x, T* y, index_t rows,            \
                                                    index_t cols) {                            \
        softmax_regs<T, GROUP, EPT, true>(x, y, rows, cols);                                   \
    }                                                                                          \
    KERNEL void __launch_bounds__(BLOCK)                                                       \
        softmax_regs_##NAME##_g##GROUP##_e##EPT##_s(const T* x, T* y, index_t rows,            \
                                                    index_t cols) {                            \
        softmax_regs<T, GROUP, EPT, false>(x, y, rows, cols);                                  \
    }

#define STREAMING(T, NAME, SUFFIX, VEC)                                                        \
    KERNEL void softmax_online_##NAME##_##SUFFIX(const T* x, T* y, index_t cols) {            \
        softmax_online<T, VEC>(x, y, cols);                                                    \
    }                                                                                          \
    KERNEL void softmax_split_stats_##NAME##_##SUFFIX(const T* x, MaxSum* partials,           \
                                                      index_t cols, index_t chunk) {           \
        softmax_split_stats<T, VEC>(x, partials, cols, chunk);                                 \
    }                                                                                          \
    KERNEL void softmax_split_write_##NAME##_##SUFFIX(const T* x, T* y, const MaxSum* partials,\
                                                      index_t cols, index_t chunk) {           \
        softmax_split_write<T, VEC>(x, y, partials, cols, chunk);                              \
    }                                                                                          \
    KERNEL void softmax_split_fused_##NAME##_##SUFFIX(const T* x, T* y, MaxSum* partials,     \
                                                      unsigned* arrivals, index_t cols,        \
                                                      index_t chunk, unsigned target) {        \
        softmax_split_fused<T, VEC>(x, y, partials, arrivals, cols, chunk, target);            \
    }

// quote: tiers
#define ALL_KERNELS(T, NAME, WARP_SMALL, WARP_LARGE)                                           \
    REGS_TIER(T, NAME, 32, WARP_SMALL, 256)                                                    \
    REGS_TIER(T, NAME, 32, WARP_LARGE, 256)                                                    \
    REGS_TIER(T, NAME, 128, 32, 128)                                                           \
    REGS_TIER(T, NAME, 256, 32, 256)                                                           \
    REGS_TIER(T, NAME, 512, 32, 512)                                                           \
    REGS_TIER(T, NAME, 1024, 32, 1024)                                                         \
    STREAMING(T, NAME, v, true)                                                                \
    STREAMING(T, NAME, s, false)                                                               \
    ONCHIP(T, NAME)

// Warp tiers: one pack per lane (4 floats, 8 halves), and 16 elements per lane.
ALL_KERNELS(float, f32, 4, 16)
// end quote: tiers
// f32 only: in 16-bit types the eight held packs and their conversions spill at 64 registers.
OVERLAP(float, f32)
ALL_KERNELS(f16_t, f16, 8, 16)
ALL_KERNELS(bf16_t, bf16, 8, 16)

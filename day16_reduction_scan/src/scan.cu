// day16, part 2: the inclusive prefix sum y_i = x_0 + ... + x_i (the challenge's prefix-sum
// days: one block, then across blocks, then hierarchical).
//
// Every output depends on every input before it, yet the goal is a copy: read x once, write y
// once. The three versions are the three classic answers to "how does a block learn the sum
// of everything before its tile?":
//
//   single_block        one block walks the whole array tile by tile, carrying the running
//                       total: correct, simple, and one SM's worth of bandwidth
//   hierarchical        scan the tiles (each block writes its tile's total), scan the totals
//                       (the same kernel, recursively), add each tile's prefix back:
//                       3 kernels, x read once but y written twice and read once (4n traffic)
//   decoupled_lookback  one pass (Merrill & Garland, "Single-pass Parallel Prefix Scan with
//                       Decoupled Look-back", 2016): each block publishes its tile's total,
//                       then its inclusive prefix, and learns its own prefix by looking back
//                       at its predecessors' published words (2n traffic)
//   decoupled_lookback_fast  the same with relaxed (fence-free) publishes and polls, tiles of
//                       8192, and a look-back that waits only for the lanes it will add
//   lookback_only_relaxed, lookback_only_tile8192, lookback_only_wait_nearest
//                       decoupled_lookback with one of those three changes each: which paid
//
// Run: cargo run --release -p day16 -- --problem scan --kernel decoupled_lookback
//
// Every version scans tiles with the same block code: 256 threads, 16 elements per thread,
// 4096 elements (16 KB of f32) per tile (the fast look-back: 32 per thread, 8192 per tile). Each is instantiated for f32 and i32; the i32 scan is
// exact, so it checks the indexing to the last element where an f32 scan's rounding would
// hide an element counted twice.
#include "common.cuh"
#include "mma.cuh"

#define FULL_WARP 0xffffffffu

// The block, the packs a thread scans and the pipelined version's shared memory come from the
// launcher's table (scan.rs) as -DSCAN_LAYOUT_... defines.
#if !defined(SCAN_LAYOUT_THREADS) || !defined(SCAN_LAYOUT_PACKS) ||                              \
    !defined(SCAN_LAYOUT_FAST_PACKS) || !defined(SCAN_LAYOUT_PIPE_SHARED_BYTES)
#error "scan.cu: compile it with the -DSCAN_LAYOUT_ defines of day16's scan.rs"
#endif

constexpr int SCAN_THREADS = SCAN_LAYOUT_THREADS;
constexpr int SCAN_WARPS = SCAN_THREADS / 32;
constexpr int PACKS = SCAN_LAYOUT_PACKS;    // 16-byte packs per thread
constexpr int ITEMS = 4 * PACKS;            // elements per thread
constexpr int WARP_TILE = 32 * ITEMS;       // 512 elements per warp
constexpr int TILE = SCAN_THREADS * ITEMS;  // 4096 elements per block

// 16 bytes of a 4-byte element type.
template <typename T> struct Vec4;
template <> struct Vec4<float> { typedef float4 type; };
template <> struct Vec4<int> { typedef int4 type; };

// Which thread holds what, within a tile (warp w, lane l, pack k, element j of the pack):
//
//   element = w * 512 + (k * 32 + l) * 4 + j
//
// so each pack k of a warp is 512 contiguous bytes (one fully used 16-byte load per lane),
// and a thread's 4 packs are independent loads in flight together. A thread's elements are
// not contiguous: the scan runs in 4 rounds, one per pack: each lane scans its 4 elements, the
// warp scans the 32 pack totals with shuffles, and a carry runs from pack k to pack k + 1.
//
// The helpers below take the packs per thread `P` as a template parameter (default PACKS, the
// 4096-element tile of the first three versions); decoupled_lookback_fast uses P = 8.
template <int P = PACKS> __device__ __forceinline__ index_t item_index(int k, int j) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    return (index_t)warp * (32 * 4 * P) + (index_t)(k * 32 + lane) * 4 + j;
}

// Loads the tile that starts at `base` (a multiple of the tile, so 16-byte aligned); elements
// past n read as 0, which changes no prefix before them.
template <typename T, int P = PACKS>
__device__ __forceinline__ void load_tile(const T* __restrict__ in, index_t base, index_t n,
                                          T v[4 * P]) {
    typedef typename Vec4<T>::type V;
    if (base + SCAN_THREADS * 4 * P <= n) {
        V p[P];
#pragma unroll
        for (int k = 0; k < P; ++k)
            p[k] = *reinterpret_cast<const V*>(in + base + item_index<P>(k, 0));
#pragma unroll
        for (int k = 0; k < P; ++k) {
            v[4 * k] = p[k].x;
            v[4 * k + 1] = p[k].y;
            v[4 * k + 2] = p[k].z;
            v[4 * k + 3] = p[k].w;
        }
    } else {
        // The last, partial tile: scalar loads, guarded (n need not be a multiple of 4).
#pragma unroll
        for (int k = 0; k < P; ++k)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const index_t i = base + item_index<P>(k, j);
                v[4 * k + j] = i < n ? in[i] : T(0);
            }
    }
}

// Stores v[] + offset[pack] for the tile at `base`.
template <typename T, int P = PACKS>
__device__ __forceinline__ void store_tile(T* __restrict__ out, index_t base, index_t n,
                                           const T v[4 * P], const T offset[P]) {
    typedef typename Vec4<T>::type V;
    if (base + SCAN_THREADS * 4 * P <= n) {
#pragma unroll
        for (int k = 0; k < P; ++k) {
            V p;
            p.x = v[4 * k] + offset[k];
            p.y = v[4 * k + 1] + offset[k];
            p.z = v[4 * k + 2] + offset[k];
            p.w = v[4 * k + 3] + offset[k];
            *reinterpret_cast<V*>(out + base + item_index<P>(k, 0)) = p;
        }
    } else {
#pragma unroll
        for (int k = 0; k < P; ++k)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const index_t i = base + item_index<P>(k, j);
                if (i < n) out[i] = v[4 * k + j] + offset[k];
            }
    }
}

// Inclusive scan of one value per lane: after log2(32) = 5 steps lane l holds the sum of lanes
// 0..l (Hillis-Steele with shuffles; the adds happen in a fixed order, so every lane's sum is
// the same on every run).
// quote: warp_scan
template <typename T> __device__ __forceinline__ T warp_inclusive_scan(T v) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
        const T other = __shfl_up_sync(FULL_WARP, v, offset);
        if (lane >= offset) v += other;
    }
    return v;
}
// end quote: warp_scan

template <typename T> __device__ __forceinline__ T warp_sum_t(T v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_WARP, v, offset);
    return v;
}

// Scans the tile held in v[] (4 * P per thread). On return v[] holds, per pack, the prefix within
// the pack, and offset[k] what each element of pack k must still add to become the prefix
// within the tile; the return value is the tile's total, the same in every thread.
// `warp_totals` is SCAN_WARPS values of shared memory; the caller must not reuse it before a
// barrier.
// quote: scan_tile
template <typename T, int P = PACKS>
__device__ __forceinline__ T scan_tile(T v[4 * P], T offset[P], T* warp_totals) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    T carry = 0;  // the sum of this warp's packs before pack k
#pragma unroll
    for (int k = 0; k < P; ++k) {
        v[4 * k + 1] += v[4 * k];
        v[4 * k + 2] += v[4 * k + 1];
        v[4 * k + 3] += v[4 * k + 2];
        const T inclusive = warp_inclusive_scan(v[4 * k + 3]);
        const T before = __shfl_up_sync(FULL_WARP, inclusive, 1);  // lanes before this one
        offset[k] = carry + (lane == 0 ? T(0) : before);
        carry += __shfl_sync(FULL_WARP, inclusive, 31);
    }
    if (lane == 0) warp_totals[warp] = carry;
    __syncthreads();
    // Every thread adds the warp totals in the same order: the same tile total everywhere.
    T before_warp = 0, total = 0;
#pragma unroll
    for (int w = 0; w < SCAN_WARPS; ++w) {
        const T t = warp_totals[w];
        if (w < warp) before_warp += t;
        total += t;
    }
#pragma unroll
    for (int k = 0; k < P; ++k) offset[k] += before_warp;
    return total;
}
// end quote: scan_tile

// ---------------------------------------------------------------------------------------------
// single_block

// grid(1), block(256): the block scans tile after tile, adding the running total of the tiles
// before. Each tile waits for the previous one's total: one SM, one tile in flight.
template <typename T>
__device__ __forceinline__ void scan_single_block(const T* __restrict__ in, T* __restrict__ out,
                                                  index_t n) {
    __shared__ T warp_totals[SCAN_WARPS];
    T running = 0;
    for (index_t base = 0; base < n; base += TILE) {
        T v[ITEMS], offset[PACKS];
        load_tile(in, base, n, v);
        const T total = scan_tile(v, offset, warp_totals);
#pragma unroll
        for (int k = 0; k < PACKS; ++k) offset[k] += running;
        store_tile(out, base, n, v, offset);
        running += total;
        __syncthreads();  // warp_totals is rewritten by the next tile
    }
}
KERNEL void __launch_bounds__(SCAN_THREADS)
    scan_single_block_f32(const float* __restrict__ in, float* __restrict__ out, index_t n) {
    scan_single_block(in, out, n);
}
KERNEL void __launch_bounds__(SCAN_THREADS)
    scan_single_block_i32(const int* __restrict__ in, int* __restrict__ out, index_t n) {
    scan_single_block(in, out, n);
}

// ---------------------------------------------------------------------------------------------
// hierarchical: scan_tiles, then scan_tiles on the tile totals (recursively, by the launcher),
// then add_tile_prefixes.

// grid(ceil(n / 4096)), block(256): block b scans tile b on its own and writes its total to
// tile_totals[b]. In place (in == out) is allowed: a block reads its whole tile into
// registers before it writes, and no other block touches that tile.
template <typename T>
__device__ __forceinline__ void scan_tiles(const T* in, T* out, index_t n, T* tile_totals) {
    __shared__ T warp_totals[SCAN_WARPS];
    const index_t base = (index_t)blockIdx.x * TILE;
    T v[ITEMS], offset[PACKS];
    load_tile(in, base, n, v);
    const T total = scan_tile(v, offset, warp_totals);
    store_tile(out, base, n, v, offset);
    if (threadIdx.x == 0) tile_totals[blockIdx.x] = total;
}
KERNEL void __launch_bounds__(SCAN_THREADS)
    scan_tiles_f32(const float* in, float* out, index_t n, float* tile_totals) {
    scan_tiles(in, out, n, tile_totals);
}
KERNEL void __launch_bounds__(SCAN_THREADS)
    scan_tiles_i32(const int* in, int* out, index_t n, int* tile_totals) {
    scan_tiles(in, out, n, tile_totals);
}

// grid(ceil(n / 4096) - 1), block(256): block b adds the inclusive prefix of the tile totals
// up to tile b (tile_prefixes[b], scanned by the previous step) to every element of tile b + 1.
// Tile 0 has nothing before it.
template <typename T>
__device__ __forceinline__ void add_tile_prefixes(T* __restrict__ out, index_t n,
                                                  const T* __restrict__ tile_prefixes) {
    typedef typename Vec4<T>::type V;
    const index_t base = ((index_t)blockIdx.x + 1) * TILE;
    const T add = tile_prefixes[blockIdx.x];
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
        const index_t i = base + (index_t)(k * SCAN_THREADS + threadIdx.x) * 4;
        if (i + 4 <= n) {
            V p = *reinterpret_cast<V*>(out + i);
            p.x += add;
            p.y += add;
            p.z += add;
            p.w += add;
            *reinterpret_cast<V*>(out + i) = p;
        } else {
            for (index_t j = i; j < n && j < i + 4; ++j) out[j] += add;
        }
    }
}
KERNEL void __launch_bounds__(SCAN_THREADS)
    add_tile_prefixes_f32(float* __restrict__ out, index_t n,
                          const float* __restrict__ tile_prefixes) {
    add_tile_prefixes(out, n, tile_prefixes);
}
KERNEL void __launch_bounds__(SCAN_THREADS)
    add_tile_prefixes_i32(int* __restrict__ out, index_t n, const int* __restrict__ tile_prefixes) {
    add_tile_prefixes(out, n, tile_prefixes);
}

// ---------------------------------------------------------------------------------------------
// decoupled_lookback
//
// state[0] is the ticket counter; state[1 + t] is tile t's status word, a 64-bit word with
// the flag in the high half and the value's 32 bits in the low half, so that one load reads
// flag and value together (two separate words could be seen half-updated):
//
//   flag 0  X  nothing published yet
//   flag 1  A  the tile's aggregate (its own total) is published
//   flag 2  P  the tile's inclusive prefix (total of tiles 0..t) is published
//
// The launcher zeroes the whole state (ticket and every flag X) on the stream before each
// launch. Tiles are taken by ticket, not blockIdx: a block that holds tile t is running, and
// so is every block holding a tile before t (each took its ticket earlier, while running).
// A block waits only on tiles before its own, and each of those publishes A without waiting
// on anything; so whichever block holds the lowest unfinished tile can always finish, and the
// scan cannot deadlock whatever order the hardware starts or schedules blocks in.

constexpr unsigned long long FLAG_AGGREGATE = 1ull << 32;
constexpr unsigned long long FLAG_PREFIX = 2ull << 32;

__device__ __forceinline__ unsigned value_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ unsigned value_bits(int v) { return (unsigned)v; }
template <typename T> __device__ __forceinline__ T from_bits(unsigned bits);
template <> __device__ __forceinline__ float from_bits<float>(unsigned bits) {
    return __uint_as_float(bits);
}
template <> __device__ __forceinline__ int from_bits<int>(unsigned bits) { return (int)bits; }

// Release: everything this thread wrote before is visible to whoever acquires the word.
// (The value travels in the word itself; the ordering matters for nothing else here, but it
// also keeps the store from lingering in a write buffer while successors spin.) Relaxed (the
// fast version's change 1): the same GPU-scope store to L2, without the fence in front.
template <bool RELAXED>
__device__ __forceinline__ void store_word(unsigned long long* p, unsigned long long v) {
    if constexpr (RELAXED) asm volatile("st.relaxed.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
    else asm volatile("st.release.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Acquire at GPU scope: read from L2 (never a stale L1 line), ordered before later loads.
// Relaxed: the same L2 read, ordered before nothing (nothing else needs it).
template <bool RELAXED> __device__ __forceinline__ unsigned long long load_word(const unsigned long long* p) {
    unsigned long long v;
    if constexpr (RELAXED) asm volatile("ld.relaxed.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    else asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// Run by one whole warp. Publishes A for `tile`, looks back over windows of 32 predecessors
// (lane l reads tile - 1 - l) until one of them has P, sums the aggregates in front of that
// P and the P itself, publishes P for `tile`, and returns the sum of all tiles before it.
// WAIT_NEAREST (the fast version's change 3): wait only for the lanes up to the nearest P
// (lanes 0..stop), or the whole window when no lane has P, and let a lane that has seen A or
// P keep its word (it stays a valid aggregate or prefix) instead of polling again. Without
// it, every lane re-reads until no lane of the window shows X.
// quote: look_back
template <typename T, bool RELAXED, bool WAIT_NEAREST>
__device__ __forceinline__ T look_back(unsigned long long* status, long long tile, T aggregate) {
    const int lane = threadIdx.x & 31;
    if (lane == 0) store_word<RELAXED>(&status[tile], FLAG_AGGREGATE | value_bits(aggregate));
    T exclusive = 0;
    for (long long top = tile - 1;; top -= 32) {
        const long long pred = top - lane;
        unsigned long long word = 0;  // X until this lane reads something else
        unsigned prefixes;
        int stop;
        for (;;) {
            // Before tile 0 there is nothing: a P of value 0.
            if (!WAIT_NEAREST || (word >> 32) == 0)
                word = pred >= 0 ? load_word<RELAXED>(&status[pred]) : FLAG_PREFIX;
            const unsigned empty = __ballot_sync(FULL_WARP, (word >> 32) == 0);
            prefixes = __ballot_sync(FULL_WARP, (word >> 32) == 2);
            // Lane `stop` is the nearest predecessor with P, or the window's last lane.
            stop = prefixes != 0 ? __ffs(prefixes) - 1 : 31;
            // Lanes 0..stop (2 << 31 wraps to 0, so stop = 31 gives every lane), or all 32.
            const unsigned waited = WAIT_NEAREST ? (2u << stop) - 1u : FULL_WARP;
            if ((empty & waited) == 0) break;
        }
        const T value = lane <= stop ? from_bits<T>((unsigned)word) : T(0);
        exclusive += warp_sum_t(value);
        if (prefixes != 0) break;
    }
    if (lane == 0)
        store_word<RELAXED>(&status[tile], FLAG_PREFIX | value_bits(exclusive + aggregate));
    return exclusive;
}
// end quote: look_back

// grid(ceil(n / tile)), block(256), tile = 256 x 4 x P elements: take a ticket (the tile),
// load and scan it, let warp 0 look back for the prefix of the tiles before, add it, store.
// Each block reads its tile once and writes it once.
// The rest of a look-back tile once its values are in `v`: the tile's scan, the first warp's
// look-back for the prefix of the tiles before (shared through `tile_prefix`), then every
// thread adds it and stores.
template <typename T, int P, bool RELAXED, bool WAIT_NEAREST>
__device__ __forceinline__ void scan_look_back_store(T v[4 * P], T* warp_totals, T* tile_prefix,
                                                     unsigned long long* state, long long tile,
                                                     T* __restrict__ out, index_t n) {
    // quote: tile_step
    T offset[P];
    const T aggregate = scan_tile<T, P>(v, offset, warp_totals);
    if (threadIdx.x < 32) {
        const T prefix = look_back<T, RELAXED, WAIT_NEAREST>(state + 1, tile, aggregate);
        if (threadIdx.x == 0) *tile_prefix = prefix;
    }
    __syncthreads();
    const T prefix = *tile_prefix;
#pragma unroll
    for (int k = 0; k < P; ++k) offset[k] += prefix;
    store_tile<T, P>(out, (index_t)tile * (SCAN_THREADS * 4 * P), n, v, offset);
    // end quote: tile_step
}

template <typename T, int P, bool RELAXED, bool WAIT_NEAREST>
__device__ __forceinline__ void scan_look_back_tiles(const T* __restrict__ in, T* __restrict__ out,
                                                     index_t n, unsigned long long* state) {
    constexpr index_t TILE_ELEMENTS = SCAN_THREADS * 4 * P;
    __shared__ T warp_totals[SCAN_WARPS];
    __shared__ T tile_prefix;
    __shared__ unsigned long long ticket;
    // quote: ticket
    if (threadIdx.x == 0) ticket = atomicAdd(&state[0], 1ull);
    __syncthreads();
    const long long tile = (long long)ticket;
    const index_t base = (index_t)tile * TILE_ELEMENTS;
    T v[4 * P];
    load_tile<T, P>(in, base, n, v);
    // end quote: ticket
    scan_look_back_store<T, P, RELAXED, WAIT_NEAREST>(v, warp_totals, &tile_prefix, state, tile,
                                                     out, n);
}

// One kernel per (name, packs per thread, relaxed words, wait for the nearest P only).
#define LOOK_BACK_KERNELS(NAME, P, RELAXED, WAIT_NEAREST)                                        \
    KERNEL void __launch_bounds__(SCAN_THREADS)                                                  \
        scan_##NAME##_f32(const float* __restrict__ in, float* __restrict__ out, index_t n,     \
                          unsigned long long* state) {                                           \
        scan_look_back_tiles<float, P, RELAXED, WAIT_NEAREST>(in, out, n, state);              \
    }                                                                                            \
    KERNEL void __launch_bounds__(SCAN_THREADS)                                                  \
        scan_##NAME##_i32(const int* __restrict__ in, int* __restrict__ out, index_t n,         \
                          unsigned long long* state) {                                           \
        scan_look_back_tiles<int, P, RELAXED, WAIT_NEAREST>(in, out, n, state);                \
    }

LOOK_BACK_KERNELS(decoupled_lookback, PACKS, false, false)

// ---------------------------------------------------------------------------------------------
// decoupled_lookback_fast: the same algorithm and the same status words, three changes.
//
// 1. Relaxed publishes and polls. The value a successor needs travels inside the status word,
//    and a naturally aligned 64-bit ld/st is single-copy atomic: a load sees the whole word of
//    one store (flag and value together) or of another, never half of each. Nothing else this
//    block wrote is read by anyone during the kernel (the output is only read after it), so no
//    release/acquire pair has anything to order: `.relaxed.gpu` is enough, and it saves the
//    fence that `st.release` puts before each publish. The `.gpu` scope still sends the store
//    to L2 and makes the load read L2 (never a stale L1 line), so the polls see the publish.
//    Deadlock freedom is unchanged: it rests on tickets, not on ordering.
// 2. Tiles of 8192 (256 threads x 8 packs x 4): half as many tiles, tickets and look-backs
//    per byte, and 8 independent 16-byte loads in flight per thread.
// 3. The look-back waits only for what it will use: the lanes up to the nearest P (lanes
//    0..stop), or the whole window when no lane has P. A lane whose word is X beyond the first
//    P no longer holds the warp, and a lane that has seen A or P keeps its word (it stays a
//    valid aggregate or prefix) and stops polling.

// quote: fast
constexpr int FAST_PACKS = SCAN_LAYOUT_FAST_PACKS;  // 8192 elements per block

LOOK_BACK_KERNELS(decoupled_lookback_fast, FAST_PACKS, true, true)

// Each change alone, on decoupled_lookback, to learn which of them paid:
LOOK_BACK_KERNELS(lookback_only_relaxed, PACKS, true, false)
LOOK_BACK_KERNELS(lookback_only_tile8192, FAST_PACKS, false, false)
LOOK_BACK_KERNELS(lookback_only_wait_nearest, PACKS, false, true)
// end quote: fast

// ---------------------------------------------------------------------------------------------
// decoupled_lookback_pipe: the ablation above says the fixed cost per tile (ticket, look-back,
// the barrier before the store) is what keeps the fast look-back at 79% of the copy: halving
// the tiles paid 17%, the other two changes 6% and nothing. So take that time out of the
// stream of loads instead of sharing it among fewer tiles: persistent blocks, each with its
// next tile already on its way into shared memory (cp.async, 32 KB) while it scans, looks
// back for and stores the current one. The next ticket is taken at the top of each round, so
// a block holds two tickets at once; deadlock freedom still holds: a block's next tile is
// after its current one, so the lowest unfinished tile is always some running block's
// current tile, which waits only on tiles before it.

constexpr int PIPE_PACKS = FAST_PACKS;                      // 8 packs a thread, 8192 a tile
constexpr int PIPE_SLOTS = PIPE_PACKS * SCAN_THREADS;       // 16-byte packs a tile
// Shared memory: two tiles of PIPE_SLOTS packs (64 KB), [buffer][pack k][thread].
static_assert(2 * PIPE_SLOTS * 16 == SCAN_LAYOUT_PIPE_SHARED_BYTES,
              "the pipelined scan's shared memory is the launcher's");

// Starts the copy of this thread's packs of the tile at `base` (load_tile's layout) into
// `buf`. A pack past n is zero-filled by a cp.async that reads nothing (source size 0); the
// one pack that n cuts is written element by element, zeros after n: a cp.async of fewer than
// 16 source bytes reads only those, but compute-sanitizer counts it as a 16-byte read past the
// end of the input. The thread reads only its own packs, so its plain stores are in order with
// its reads.
template <typename T>
__device__ __forceinline__ void stage_tile(const T* __restrict__ in, index_t base, index_t n,
                                           uint4* buf) {
#pragma unroll
    for (int k = 0; k < PIPE_PACKS; ++k) {
        const index_t i = base + item_index<PIPE_PACKS>(k, 0);
        uint4* dst = &buf[k * SCAN_THREADS + threadIdx.x];
        // index_t is unsigned: a pack past n has nothing left (n - i would wrap round).
        const index_t left = i < n ? n - i : 0;
        if (left >= 4) {
            cp_async_16_partial(dst, in + i, 16u);
        } else if (left == 0) {
            cp_async_16_partial(dst, in, 0u);  // nothing is read
        } else {
            T* d = reinterpret_cast<T*>(dst);
#pragma unroll
            for (int j = 0; j < 4; ++j) d[j] = (index_t)j < left ? in[i + j] : T(0);
        }
    }
}

// grid(resident blocks), block(256), dynamic shared memory 2 x PIPE_SLOTS x 16 bytes. Each
// block takes tickets until they run past the tiles; per tile the same scan, relaxed words and
// look-back as decoupled_lookback_fast, so the same bits.
template <typename T>
__device__ __forceinline__ void scan_look_back_pipelined(const T* __restrict__ in,
                                                         T* __restrict__ out, index_t n,
                                                         unsigned long long* state) {
    constexpr int P = PIPE_PACKS;
    constexpr index_t TILE_ELEMENTS = SCAN_THREADS * 4 * P;
    typedef typename Vec4<T>::type V;
    extern __shared__ uint4 staged[];
    __shared__ T warp_totals[SCAN_WARPS];
    __shared__ T tile_prefix;
    __shared__ long long tickets[2];
    const long long tiles = (long long)((n + TILE_ELEMENTS - 1) / TILE_ELEMENTS);
    if (threadIdx.x == 0) tickets[0] = (long long)atomicAdd(&state[0], 1ull);
    __syncthreads();
    long long tile = tickets[0];
    int b = 0;  // the buffer holding `tile`
    if (tile < tiles) stage_tile(in, (index_t)tile * TILE_ELEMENTS, n, staged);
    cp_async_commit();
    while (tile < tiles) {
        if (threadIdx.x == 0) tickets[b ^ 1] = (long long)atomicAdd(&state[0], 1ull);
        // The next ticket is known to all, and every thread has finished the last round (its
        // reads of the other buffer, of tile_prefix and of the warp totals).
        __syncthreads();
        const long long next = tickets[b ^ 1];
        if (next < tiles)
            stage_tile(in, (index_t)next * TILE_ELEMENTS, n, &staged[(b ^ 1) * PIPE_SLOTS]);
        cp_async_commit();
        cp_async_wait<1>();  // this thread's copies of `tile` (it reads only its own packs)
        T v[4 * P];
#pragma unroll
        for (int k = 0; k < P; ++k) {
            const V p = *reinterpret_cast<const V*>(&staged[b * PIPE_SLOTS + k * SCAN_THREADS +
                                                           threadIdx.x]);
            v[4 * k] = p.x;
            v[4 * k + 1] = p.y;
            v[4 * k + 2] = p.z;
            v[4 * k + 3] = p.w;
        }
        scan_look_back_store<T, P, true, true>(v, warp_totals, &tile_prefix, state, tile, out, n);
        tile = next;
        b ^= 1;
    }
}
// 3 blocks per SM: what 64 KB of shared memory a block allows anyway, and up to 85 registers
// (the i32 kernel spills at 64).
KERNEL void __launch_bounds__(SCAN_THREADS, 3)
    scan_decoupled_lookback_pipe_f32(const float* __restrict__ in, float* __restrict__ out,
                                     index_t n, unsigned long long* state) {
    scan_look_back_pipelined(in, out, n, state);
}
KERNEL void __launch_bounds__(SCAN_THREADS, 3)
    scan_decoupled_lookback_pipe_i32(const int* __restrict__ in, int* __restrict__ out,
                                     index_t n, unsigned long long* state) {
    scan_look_back_pipelined(in, out, n, state);
}

// Hopper (sm_90a) building blocks: the Tensor Memory Accelerator (TMA) copying a tile of a
// tensor into shared memory on its own, the mbarrier that tells consumers the bytes arrived,
// and the warpgroup matrix multiply (`wgmma`) reading both operands straight from shared
// memory. Used by the tensor-core GEMM (day 18) and FlashAttention on Hopper (day 10).
//
// How they fit together in a warp-specialized kernel:
//   producer (one thread):  wait empty[s] -> expect_tx(full[s], bytes) -> TMA A, B into stage s
//   consumers (warpgroups): wait full[s]  -> wgmma on stage s ... -> arrive empty[s]
// The TMA counts the bytes it delivers against `full[s]`; the barrier's phase completes when
// the producer's arrival and all expected bytes are in. Phases alternate 0, 1, 0, ...: a waiter
// names the parity of the phase it waits for.
//
// Everything here needs `--gpu-architecture=sm_90a` (wgmma and setmaxnreg are not in sm_90).
#pragma once
#include "dtype.cuh"
#include "mma.cuh"  // pack2

// The 128-byte CUtensorMap the host encodes (cuTensorMapEncodeTiled) and passes by value as a
// `const __grid_constant__` kernel parameter, so the TMA unit can read it from parameter space.
struct __align__(64) TmaDescriptor {
    unsigned long long opaque[16];
};

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ---- shared storage -------------------------------------------------------------------------

// The block's dynamic shared memory as the kernel's storage struct `S` (a day's generated
// header declares it from the launcher's tile table, with each member's offset as S::at::name
// for 32-bit address arithmetic), started on the next 1024-byte boundary:
// a 128-byte-swizzled tile must sit on the swizzle's 1024-byte period, and dynamic shared
// memory is only 16-byte aligned. The launcher gives sizeof(S) + SHARED_ALIGNMENT_SLACK bytes.
// A kernel whose layout is still offsets from a base takes the base itself,
// aligned_dynamic_shared().
constexpr unsigned SHARED_ALIGNMENT_SLACK = 1024;
__device__ __forceinline__ unsigned char* aligned_dynamic_shared() {
    extern __shared__ unsigned char dynamic_shared[];
    const unsigned long long at = reinterpret_cast<unsigned long long>(dynamic_shared);
    return reinterpret_cast<unsigned char*>((at + SHARED_ALIGNMENT_SLACK - 1) &
                                            ~(SHARED_ALIGNMENT_SLACK - 1ull));
}
template <typename S>
__device__ __forceinline__ S& shared_storage() {
    return *reinterpret_cast<S*>(aligned_dynamic_shared());
}

// ---- mbarrier -------------------------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(arrivals));
}

// Makes the initialised barriers visible to the TMA unit (the async proxy) before first use.
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The producer's arrival, announcing `bytes` the TMA will deliver against this phase (the
// barrier's 32-bit shared-memory address, or a pointer).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
    mbarrier_arrive_expect_tx(smem_u32(bar), bytes);
}

// Arrivals and waits take the barrier's 32-bit shared-memory address (code that keeps
// addresses rather than pointers, such as a producer thread on few registers) or a pointer.
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// How long a waiting thread may sleep before it tries the barrier again, in nanoseconds
// (CUTLASS's value): the hint `mbarrier.try_wait` takes. With it a thread whose phase has not
// completed sleeps until it completes (`NANOSLEEP.SYNCS` in the machine code); without it the
// thread tries again every few cycles, each try taking an issue slot from the warps that share
// its scheduler (day 10's producer, waiting on a free stage, tried about 160 times per key tile
// at head dim 64 and 512 keys). Those warps were not short of issue slots: days 10, 18, 20, 23
// and 24 measured level with it (day 10's notes). It is kept as the wait that spends none.
#define MBARRIER_SUSPEND_NS 10000000

// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase 0, so
// waiting for parity 1 returns at once: the producer's first pass over empty stages.
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "wait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\n"
        "@!done bra wait_%=;\n"
        "}\n" ::"r"(bar),
        "r"(parity), "n"(MBARRIER_SUSPEND_NS)
        : "memory");
}

// The arrival of this thread's earlier `cp.async` copies: the barrier counts it once they
// have all landed. `.noinc`: the arrival is one of those the barrier was initialised with
// (a warp of loaders, each lane arriving this way, adds 32 to the count).
__device__ __forceinline__ void cp_async_mbarrier_arrive(unsigned long long* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar))
                 : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) {
    mbarrier_arrive(smem_u32(bar));
}
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned parity) {
    mbarrier_wait(smem_u32(bar), parity);
}

// ---- TMA ------------------------------------------------------------------------------------

// One-dimensional bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned)
// from global to this CTA's shared memory, counted against `bar`: a contiguous range, no
// tensor map needed.
__device__ __forceinline__ void bulk_load_1d(void* dst, const void* src, unsigned bytes,
                                             unsigned long long* bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
        ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar))
        : "memory");
}

// Copies the box at coordinates (x innermost, y, z) of the tensor `map` describes into `dst`
// and counts its bytes against `bar` (32-bit shared-memory addresses, or pointers). Elements
// past the tensor's edge arrive as zeros.
__device__ __forceinline__ void tma_load_3d(unsigned dst, const TmaDescriptor* map, unsigned bar,
                                            int x, int y, int z) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
                 "l"(map), "r"(x), "r"(y), "r"(z), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void tma_load_3d(void* dst, const TmaDescriptor* map,
                                            unsigned long long* bar, int x, int y, int z) {
    tma_load_3d(smem_u32(dst), map, smem_u32(bar), x, y, z);
}

// The same box delivered to the same shared-memory offset of every CTA of the cluster named
// in `cta_mask`, each CTA's barrier at `bar`'s offset counting the bytes it received: one L2
// read feeds several SMs.
__device__ __forceinline__ void tma_load_3d_multicast(void* dst, const TmaDescriptor* map,
                                                      unsigned long long* bar, int x, int y,
                                                      int z, unsigned short cta_mask) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(smem_u32(dst)),
                 "l"(map), "r"(x), "r"(y), "r"(z), "r"(smem_u32(bar)), "h"(cta_mask)
                 : "memory");
}

// The reverse direction: adds the box at `src` (shared memory) into the tensor at (x, y, z),
// element by element (`.add`; f32 adds are atomic per element in L2), rows and columns past
// the tensor's edge skipped. Completion is tracked per issuing thread in bulk groups
// (`bulk_commit` / `bulk_wait_read` / `bulk_wait`), not on an mbarrier. The shared memory
// must have been written through the generic proxy and then `fence_proxy_async_shared`.
__device__ __forceinline__ void tma_reduce_add_3d(const TmaDescriptor* map, unsigned src, int x,
                                                  int y, int z) {
    asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group"
                 " [%0, {%1, %2, %3}], [%4];\n" ::"l"(map), "r"(x), "r"(y), "r"(z), "r"(src)
                 : "memory");
}
__device__ __forceinline__ void tma_reduce_add_3d(const TmaDescriptor* map, const void* src,
                                                  int x, int y, int z) {
    tma_reduce_add_3d(map, smem_u32(src), x, y, z);
}
// The reverse of tma_load_3d: the box at `src` (shared memory, laid out as the map's swizzle
// says) to the tensor at (x, y, z); rows and columns past the tensor's edge are not written.
// Tracked in this thread's bulk groups (bulk_commit / bulk_wait_read / bulk_wait). The shared
// memory must have been written through the generic proxy and then `fence_proxy_async_shared`.
__device__ __forceinline__ void tma_store_3d(const TmaDescriptor* map, const void* src, int x,
                                             int y, int z) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group"
                 " [%0, {%1, %2, %3}], [%4];\n" ::"l"(map),
                 "r"(x), "r"(y), "r"(z), "r"(smem_u32(src))
                 : "memory");
}

// Byte `byte` of row r of a box staged for a TMA store with 128-byte swizzling (rows of 128
// bytes): the 16-byte piece p of row r sits at p ^ (r % 8). The 8 rows one warp's accumulator
// fragment touches (lane / 4) so spread over all 32 banks. The box starts on a 1024-byte
// boundary.
__device__ __forceinline__ unsigned char* swizzled_128(unsigned char* box, int r, int byte) {
    return box + r * 128 + ((((byte >> 4) ^ (r % 8)) << 4) | (byte & 15));
}
__device__ __forceinline__ void bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Until this thread's bulk groups have finished reading their shared-memory source (the
// buffer may be rewritten), at most N left.
template <int N> __device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Until this thread's bulk groups are complete: their writes to global memory are done.
template <int N> __device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// Orders this thread's ordinary shared-memory writes before later reads by the async proxy
// (wgmma operands, TMA stores): each writing thread fences, then the threads synchronise.
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// The same between the async proxy's global writes (a completed TMA reduce) and this
// thread's ordinary global accesses (a flag that publishes them), and the other way round.
__device__ __forceinline__ void fence_proxy_async_global() {
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// Where a thread is in a ring of N shared-memory stages, each guarded by a full and an empty
// mbarrier: the stage to use next, and the parity of that stage's current phase (it flips each
// time the ring wraps). A consumer waits on full[stage()] for phase(); a producer waits on
// empty[stage()] for phase() ^ 1, so its first pass over a fresh ring waits for nothing.
// Producer and consumers walk the same stages, so each keeps its own and they agree.
template <int N> struct PipelineState {
    int index = 0;
    unsigned parity = 0;
    __device__ __forceinline__ int stage() const { return index; }
    __device__ __forceinline__ unsigned phase() const { return parity; }
    __device__ __forceinline__ void advance() {
        if (++index == N) {
            index = 0;
            parity ^= 1;
        }
    }
};

// The same position kept as one count of the stages passed (stage = count % N, phase = the
// parity of count / N). Which of the two a kernel keeps changes how ptxas allocates and
// schedules around its main loop: fa_hopper measured 1.1% faster at head dim 64, causal, with
// the count; days 18, 20 and 23 spilled in their consumers with it (the two-field form spills
// nothing more).
template <int N> struct PipelineCount {
    unsigned count = 0;
    __device__ __forceinline__ int stage() const { return count % N; }
    __device__ __forceinline__ unsigned phase() const { return (count / N) & 1; }
    __device__ __forceinline__ void advance() { ++count; }
};

// Named barrier ids (bar.sync takes 0-15; 0 is __syncthreads, left to it). Consumer warpgroup c
// of a warp-specialised kernel has its own, consumer_barrier(c), for its epilogue or its turn
// in a ping-pong; all the consumers together meet at ALL_CONSUMERS_BARRIER.
__device__ __forceinline__ constexpr int consumer_barrier(int consumer) { return 1 + consumer; }
constexpr int ALL_CONSUMERS_BARRIER = 15;

// A named barrier (ids 1..15; 0 is __syncthreads) for `threads` threads, a multiple of 32:
// synchronises some warpgroups of a block without the others.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// The other half: counts this warp's arrival at named barrier `id` without waiting, so one
// warpgroup can let another pass its `named_barrier_sync` (a turn handed on).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- stmatrix -------------------------------------------------------------------------------

// The reverse of ldmatrix (sm_90): four 8 x 8 blocks of 16-bit values from the warp's registers
// to shared memory, register i of every lane holding block i in mma's C layout (lane l: row
// l / 4, columns 2 (l % 4), +1). Lane l gives the address of row l % 8 of block l / 8, a
// 16-byte chunk; so a 16 x 16 accumulator piece packed to 16 bits (mma.m16n8's two 8-column
// blocks) is one instruction instead of sixteen 4-byte stores, and the rows may be swizzled.
__device__ __forceinline__ void stmatrix_x4(unsigned row_address, const unsigned (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                     row_address),
                 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

// quote: stmatrix_box
// 64 columns of a wgmma accumulator (its 8-column blocks j0 .. j0 + 7), each of the thread's
// two rows r times scale[r] and rounded to T, into a box staged for a TMA store (128-byte
// swizzle), one stmatrix per 16 columns. `box_row` is the box row whose address this lane
// gives: lane l names row l % 8 of 8 x 8 block l / 8, and blocks 0-3 of a stmatrix are (rows
// 0-7, columns 16gg..+7), (rows 8-15, the same), (0-7, 16gg + 8..), (8-15, ..) of the warp's
// 16 rows, so box_row = the warp's first row + 8 ((lane / 8) % 2) + lane % 8.
template <typename T, int R>
__device__ __forceinline__ void stmatrix_box(unsigned char* box, int box_row, int lane,
                                             const float (&acc)[R], int j0,
                                             const float (&scale)[2]) {
#pragma unroll
    for (int gg = 0; gg < 4; ++gg) {
        unsigned out[4];
#pragma unroll
        for (int x = 0; x < 4; ++x) {
            const int j = j0 + 2 * gg + x / 2, r = x % 2;
            out[x] = pack2<T>(acc[4 * j + 2 * r] * scale[r], acc[4 * j + 2 * r + 1] * scale[r]);
        }
        stmatrix_x4(smem_u32(swizzled_128(box, box_row, (2 * gg + lane / 16) * 16)), out);
    }
}
// end quote: stmatrix_box

// ---- thread-block clusters -------------------------------------------------------------------

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}

// The cluster barrier in two halves: arrive (releasing this CTA's shared-memory writes) and
// wait (acquiring the others'), so a CTA can work between telling the others it is done and
// waiting for them.
__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// Every thread of every CTA of the cluster meets here; writes before it (barrier inits) are
// visible to the whole cluster after it.
__device__ __forceinline__ void cluster_sync() {
    cluster_arrive();
    cluster_wait();
}

// The shared::cluster address of `local`'s counterpart in CTA `rank` of the cluster
// (distributed shared memory).
__device__ __forceinline__ unsigned cluster_address(const void* local, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
                 : "=r"(remote)
                 : "r"(smem_u32(local)), "r"(rank));
    return remote;
}

// A float in CTA `rank`'s shared memory, at the address `local` has in this CTA's.
__device__ __forceinline__ float load_cluster_f32(const float* local, unsigned rank) {
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n"
                 : "=f"(v)
                 : "r"(cluster_address(local, rank))
                 : "memory");
    return v;
}

// Pushes a value into another CTA's shared memory (`remote`, from cluster_address) and counts
// its bytes against that CTA's barrier `remote_bar`, whose waiters then see it: one
// asynchronous store, no cluster barrier, and the sender never waits. The receiver's barrier
// must exist first (initialised, then a cluster barrier, before the first push).
__device__ __forceinline__ void push_f32(unsigned remote, float v, unsigned remote_bar) {
    asm volatile(
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(
            remote),
        "r"(__float_as_uint(v)), "r"(remote_bar)
        : "memory");
}
__device__ __forceinline__ void push_f32x4(unsigned remote, float4 v, unsigned remote_bar) {
    asm volatile(
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, "
        "%4}, [%5];\n" ::"r"(remote),
        "r"(__float_as_uint(v.x)), "r"(__float_as_uint(v.y)), "r"(__float_as_uint(v.z)),
        "r"(__float_as_uint(v.w)), "r"(remote_bar)
        : "memory");
}

// mbarrier_wait for a barrier other CTAs of the cluster complete (pushes): acquires at
// cluster scope, so their pushed values are visible after it.
__device__ __forceinline__ void mbarrier_wait_cluster(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "wait_%=:\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1, %2;\n"
        "@!done bra wait_%=;\n"
        "}\n" ::"r"(smem_u32(bar)),
        "r"(parity), "n"(MBARRIER_SUSPEND_NS)
        : "memory");
}

// Arrives on the barrier at `bar`'s offset in the shared memory of CTA `cta` of the cluster
// (this CTA's own when `cta` is its rank). The arrival releases at CTA scope only: it says
// "this thread's reads of a stage are done" (wgmma_wait already made them so), and publishes
// no writes the other CTA must see. `.release.cluster` would put a cluster-wide memory fence
// before every arrival, and day 18's cluster GEMM spent half its time stalled in those fences
// (one per consumer per k step).
__device__ __forceinline__ void mbarrier_arrive_cluster(unsigned long long* bar, unsigned cta) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_address(bar, cta))
                 : "memory");
}

// ---- register budget ------------------------------------------------------------------------

// Warp specialization: the producer warpgroup gives registers back, the consumers (which hold
// the accumulators) take them. Every warp of a warpgroup must execute the same call.
template <int N> __device__ __forceinline__ void warpgroup_registers_release() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void warpgroup_registers_claim() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ---- persistent tile order ------------------------------------------------------------------

// Tile t of a (tiles_m x tiles_n) grid, in groups of 8 tile-rows walked column by column, so
// the blocks running at once share A rows and B columns in L2 (the GEMMs of days 18, 23 and 24).
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
    constexpr int GROUP = 8;
    const int per_group = GROUP * tiles_n;
    const int group = t / per_group, first_m = group * GROUP;
    const int rows = min(tiles_m - first_m, GROUP);
    const int in_group = t % per_group;
    tm = first_m + in_group % rows;
    tn = in_group / rows;
}

// ---- wgmma ----------------------------------------------------------------------------------

// The shared-memory matrix descriptor of a K-major tile written by the TMA with 128-byte
// swizzling: rows of 64 16-bit elements (128 bytes), 8-row groups 1024 bytes apart (the
// "stride byte offset"), the 16-byte chunks of row r XOR-permuted by r % 8. The tile must start
// on a 1024-byte boundary; the k16 steps inside it advance the start address by 32 bytes and
// the hardware applies the same XOR. Fields (PTX ISA, "Matrix Descriptor Format"): address
// >> 4 in bits 0-13, leading byte offset >> 4 in 16-29 (unused for swizzled K-major, 1 by
// convention), stride byte offset >> 4 in 32-45, swizzle mode in 62-63 (1 = 128 bytes).
__device__ __forceinline__ unsigned long long wgmma_descriptor_k_major_sw128(const void* tile) {
    const unsigned long long address = smem_u32(tile);
    return ((address & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

// The descriptor of an MN-major tile (A stored [k][m], B stored [k][n]: the operand's m or n
// index runs along memory) as the TMA writes it with 128-byte swizzling, boxes 64 wide along
// MN. One box is a column of "swizzle atoms"; the tile is boxes side by side along MN:
//
//                MN 0..63 (box 0)                  MN 64..127 (box 1)         ...
//   k  0 ..  7   [ atom: 8 rows x 128 B = 1 KiB ]  [ atom ]  <- box 1 starts at
//   k  8 .. 15   [ atom ]  <- +1024 B: SBO         [ atom ]     +atom_stride: LBO
//   k 16 .. 23   [ atom ]                          [ atom ]
//   ...          (box_k rows: box_k x 128 B)        ...
//
// Inside an atom, row r (one k) holds 64 consecutive MN elements (128 bytes) as 8 16-byte
// chunks, chunk c stored at c ^ (r % 8): the TMA's SWIZZLE_128B, applied by the hardware on
// the address bits, so the atom must start on a 1024-byte boundary.
//
// The PTX ISA ("Shared Memory Matrix Layout", canonical layouts) writes the MN-major 128B
// layout, in elements with T = 8 16-bit elements per 16 bytes, as
//   Swizzle<3,4,3> o ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO))
// MN: 8 x 8 contiguous elements (one 128-byte row), then m atoms LBO apart; K: 8 rows 128
// bytes apart (inside the atom), then the next 8 rows SBO apart. So, unlike K-major, both
// offsets are used here:
//   leading byte offset (bits 16-29) = atom_stride_bytes: from MN 0..63 to MN 64..127, the
//                                      distance between two TMA boxes
//   stride byte offset  (bits 32-45) = 1024: from k 0..7 to k 8..15 inside a box
// An m64 A operand is one atom wide (LBO unread); an n256 B operand spans 4 boxes. A k16 step
// is 2 atoms down: the start address advances by 2048 bytes (K-major advances 32 bytes), which
// keeps the 1024-byte alignment, so the base-offset field stays 0. Swapping LBO and SBO reads
// k 8..15 from the next box: every MN-major product would be wrong, not just the edges.
__device__ __forceinline__ unsigned long long wgmma_descriptor_mn_major_sw128(
    const void* tile, unsigned atom_stride_bytes) {
    const unsigned long long address = smem_u32(tile);
    const unsigned long long leading = (atom_stride_bytes & 0x3FFFF) >> 4;
    return ((address & 0x3FFFF) >> 4) | (leading << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

// The same descriptors from a base kept in 16-byte units (a 1024-byte aligned tile's shared
// address >> 4): every k16 step and box of a tile sits at a constant byte offset from that base,
// so a descriptor is the base plus immediates, one add per operand. Encoding each address anew
// costs a mask, a 64-bit shift and an or per operand, on the path between two wgmma (day 10's
// notes). `leading_bytes`: 16 for a K-major tile (unused, 1 by convention), the distance
// between boxes for an MN-major one.
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned base16, int byte_offset,
                                                         int leading_bytes) {
    const unsigned lo =
        base16 + (unsigned)(byte_offset >> 4) + ((unsigned)(leading_bytes >> 4) << 16);
    const unsigned hi = (1024u >> 4) | (1u << 30);  // stride offset 1024; swizzle mode 1 (bit 62)
    return ((unsigned long long)hi << 32) | lo;
}

// Orders this warpgroup's register and shared-memory accesses before the wgmma that follow.
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most N committed wgmma groups are still running.
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accumulator reads or writes across an in-flight wgmma.
template <int R> __device__ __forceinline__ void wgmma_fence_operands(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// The same for register A operands (RS): they must not be overwritten while a wgmma reads them.
template <int R> __device__ __forceinline__ void wgmma_fence_operands(unsigned (&a)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

// D (64 x N, f32) (+)= A (64 x 16) B (16 x N). B is read from shared memory through its
// descriptor; A either from shared memory too (`wgmma_m64k16`, "SS") or from registers
// (`wgmma_m64k16_rs`, "RS": an operand just computed, such as attention's probabilities, needs
// no trip through shared memory). TRANS_A / TRANS_B are the instruction's imm-trans-a /
// imm-trans-b: 0 reads the operand K-major (`wgmma_descriptor_k_major_sw128`), 1 MN-major
// (`wgmma_descriptor_mn_major_sw128`); the transposed forms exist for f16 and bf16 only, and a
// register A has no transpose. `accumulate` = 0 overwrites D (the first k-step of a tile).
//
// The accumulator layout of thread t of the warpgroup (warp w = t / 32, lane l) repeats
// mma.m16n8's C layout: for each 8-column block j, d[4j], d[4j+1] = D[16w + l/4][8j + 2(l%4),
// +1] and d[4j+2], d[4j+3] the same columns 8 rows lower. A register A fragment is
// mma.m16n8k16's A fragment of the warp's 16 rows: a[0] = (row l/4, k 2(l%4), +1), a[1] = 8
// rows lower, a[2] and a[3] the same 8 columns further; each register two 16-bit values, the
// lower k in the low half. So two adjacent 8-column blocks of an accumulator, rounded to 16
// bits, are one k16 step of a register A operand.
template <int N, typename T> struct WgmmaM64K16;
template <int N, typename T> struct WgmmaM64K16Rs;

template <int N, typename T, int TRANS_A = 0, int TRANS_B = 0>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[N / 2], unsigned long long desc_a,
                                             unsigned long long desc_b, int accumulate) {
    static_assert((TRANS_A == 0 || TRANS_A == 1) && (TRANS_B == 0 || TRANS_B == 1),
                  "imm-trans-a / imm-trans-b are 0 (K-major) or 1 (MN-major)");
    WgmmaM64K16<N, T>::template run<TRANS_A, TRANS_B>(d, desc_a, desc_b, accumulate);
}

template <int N, typename T, int TRANS_B = 0>
__device__ __forceinline__ void wgmma_m64k16_rs(float (&d)[N / 2], const unsigned (&a)[4],
                                                unsigned long long desc_b, int accumulate) {
    static_assert(TRANS_B == 0 || TRANS_B == 1, "imm-trans-b is 0 (K-major) or 1 (MN-major)");
    WgmmaM64K16Rs<N, T>::template run<TRANS_B>(d, a, desc_b, accumulate);
}

// The accumulator operands: N / 2 f32 registers "+f"(d[0]) ... bound to %0 ... in order.
#define WGMMA_D8(d, o)                                                                             \
    "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]),    \
        "+f"(d[o + 6]), "+f"(d[o + 7])
#define WGMMA_D16(d, o) WGMMA_D8(d, o), WGMMA_D8(d, o + 8)
#define WGMMA_D32(d, o) WGMMA_D8(d, o), WGMMA_D8(d, o + 8), WGMMA_D8(d, o + 16), WGMMA_D8(d, o + 24)
#define WGMMA_D40(d, o) WGMMA_D32(d, o), WGMMA_D8(d, o + 32)
#define WGMMA_D64(d, o) WGMMA_D32(d, o), WGMMA_D32(d, o + 32)
#define WGMMA_D96(d, o) WGMMA_D64(d, o), WGMMA_D32(d, o + 64)
#define WGMMA_D128(d, o) WGMMA_D64(d, o), WGMMA_D64(d, o + 64)
#define WGMMA_D16_LIST "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
#define WGMMA_D32_LIST \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define WGMMA_D40_LIST \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39"
#define WGMMA_D64_LIST \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define WGMMA_D96_LIST \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63," \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
    "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95"
#define WGMMA_D128_LIST \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63," \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
    "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95," \
    "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
    "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"

// One specialization per (N, type): the transpose immediates are "n" operands, so each
// (TRANS_A, TRANS_B) pair is its own instruction with no run-time choice. R = N / 2
// accumulators take %0 .. %R-1; the operands after them are numbered from R, written out as
// literals in each use below (the PTX string cannot compute them).
#define WGMMA_SS(N, R, T, PTX_TYPE, TAIL)                                                          \
    template <> struct WgmmaM64K16<N, T> {                                                         \
        template <int TRANS_A, int TRANS_B>                                                        \
        static __device__ __forceinline__ void run(float(&d)[R], unsigned long long desc_a,        \
                                                   unsigned long long desc_b, int accumulate) {    \
            asm volatile("{\n.reg .pred p;\n" TAIL(                                               \
                             "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE            \
                             "." PTX_TYPE " {" WGMMA_D##R##_LIST "}, ")                            \
                         : WGMMA_D##R(d, 0)                                                        \
                         : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_A),                \
                           "n"(TRANS_B));                                                          \
        }                                                                                          \
    };
#define WGMMA_RS(N, R, T, PTX_TYPE, TAIL)                                                          \
    template <> struct WgmmaM64K16Rs<N, T> {                                                       \
        template <int TRANS_B>                                                                     \
        static __device__ __forceinline__ void run(float(&d)[R], const unsigned(&a)[4],            \
                                                   unsigned long long desc_b, int accumulate) {    \
            asm volatile("{\n.reg .pred p;\n" TAIL(                                               \
                             "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE            \
                             "." PTX_TYPE " {" WGMMA_D##R##_LIST "}, ")                            \
                         : WGMMA_D##R(d, 0)                                                        \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b),                \
                           "r"(accumulate), "n"(TRANS_B));                                         \
        }                                                                                          \
    };
// SS: desc_a = %R, desc_b = %R+1, accumulate = %R+2, trans-a = %R+3, trans-b = %R+4.
#define WGMMA_SS_TAIL_16(MMA) "setp.ne.b32 p, %18, 0;\n" MMA "%16, %17, p, 1, 1, %19, %20;\n}\n"
#define WGMMA_SS_TAIL_32(MMA) "setp.ne.b32 p, %34, 0;\n" MMA "%32, %33, p, 1, 1, %35, %36;\n}\n"
#define WGMMA_SS_TAIL_40(MMA) "setp.ne.b32 p, %42, 0;\n" MMA "%40, %41, p, 1, 1, %43, %44;\n}\n"
#define WGMMA_SS_TAIL_64(MMA) "setp.ne.b32 p, %66, 0;\n" MMA "%64, %65, p, 1, 1, %67, %68;\n}\n"
#define WGMMA_SS_TAIL_96(MMA) "setp.ne.b32 p, %98, 0;\n" MMA "%96, %97, p, 1, 1, %99, %100;\n}\n"
#define WGMMA_SS_TAIL_128(MMA)                                                                     \
    "setp.ne.b32 p, %130, 0;\n" MMA "%128, %129, p, 1, 1, %131, %132;\n}\n"
// RS: a = %R .. %R+3, desc_b = %R+4, accumulate = %R+5, trans-b = %R+6.
#define WGMMA_RS_TAIL_32(MMA)                                                                      \
    "setp.ne.b32 p, %37, 0;\n" MMA "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
#define WGMMA_RS_TAIL_64(MMA)                                                                      \
    "setp.ne.b32 p, %69, 0;\n" MMA "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
#define WGMMA_RS_TAIL_128(MMA)                                                                     \
    "setp.ne.b32 p, %133, 0;\n" MMA "{%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"

// Day 18's GEMM tiles are n256, n192, n128 and n64; attention's S = Q K^T is n128, n80 or n64
// (keys) and O += P V n64, n128 or n256 (the head dim); the backward's S^T at head dim 256 is n32
// (half a 64-query step).
WGMMA_SS(256, 128, bf16_t, "bf16", WGMMA_SS_TAIL_128)
WGMMA_SS(256, 128, f16_t, "f16", WGMMA_SS_TAIL_128)
WGMMA_SS(192, 96, bf16_t, "bf16", WGMMA_SS_TAIL_96)
WGMMA_SS(192, 96, f16_t, "f16", WGMMA_SS_TAIL_96)
WGMMA_SS(128, 64, bf16_t, "bf16", WGMMA_SS_TAIL_64)
WGMMA_SS(128, 64, f16_t, "f16", WGMMA_SS_TAIL_64)
WGMMA_SS(80, 40, bf16_t, "bf16", WGMMA_SS_TAIL_40)
WGMMA_SS(80, 40, f16_t, "f16", WGMMA_SS_TAIL_40)
WGMMA_SS(64, 32, bf16_t, "bf16", WGMMA_SS_TAIL_32)
WGMMA_SS(64, 32, f16_t, "f16", WGMMA_SS_TAIL_32)
WGMMA_SS(32, 16, bf16_t, "bf16", WGMMA_SS_TAIL_16)
WGMMA_SS(32, 16, f16_t, "f16", WGMMA_SS_TAIL_16)
WGMMA_RS(256, 128, bf16_t, "bf16", WGMMA_RS_TAIL_128)
WGMMA_RS(256, 128, f16_t, "f16", WGMMA_RS_TAIL_128)
WGMMA_RS(128, 64, bf16_t, "bf16", WGMMA_RS_TAIL_64)
WGMMA_RS(128, 64, f16_t, "f16", WGMMA_RS_TAIL_64)
WGMMA_RS(64, 32, bf16_t, "bf16", WGMMA_RS_TAIL_32)
WGMMA_RS(64, 32, f16_t, "f16", WGMMA_RS_TAIL_32)

// ---- 8-bit floating point (FP8) -------------------------------------------------------------
// An FP8 E4M3 value as stored (1 sign, 4 exponent, 3 mantissa bits, bias 7, no infinities,
// 0x7F / 0xFF NaN; largest finite 448): only its bits travel, the tensor cores decode it.
struct e4m3_t {
    unsigned char bits;
};

// D (64 x 256, f32) (+)= A (64 x 32 e4m3) B (32 x 256 e4m3), both from shared memory through
// K-major 128-byte-swizzle descriptors: a k32 step is 32 bytes along the rows, as a bf16 k16
// step is. 8-bit types have no transpose immediates (K-major only) but keep scale-a / scale-b
// (1, 1 here). The accumulator layout is the f32 one above.
__device__ __forceinline__ void wgmma_m64n256k32_e4m3(float (&d)[128], unsigned long long desc_a,
                                                      unsigned long long desc_b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {" WGMMA_D128_LIST "}, "
                 "%128, %129, p, 1, 1;\n}\n"
                 : WGMMA_D128(d, 0)
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

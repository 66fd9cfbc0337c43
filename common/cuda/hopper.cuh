// Hopper (sm_90a) building blocks: the Tensor Memory Accelerator (TMA) copying a tile of a
// tensor into shared memory on its own, the mbarrier that tells consumers the bytes arrived,
// and the warpgroup matrix multiply (`wgmma`) reading both operands straight from shared
// memory. Used by the tensor-core GEMM (day 18); the attention days can reuse it.
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

// The 128-byte CUtensorMap the host encodes (cuTensorMapEncodeTiled) and passes by value as a
// `const __grid_constant__` kernel parameter, so the TMA unit can read it from parameter space.
struct __align__(64) TmaDescriptor {
    unsigned long long opaque[16];
};

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
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

// The producer's arrival, announcing `bytes` the TMA will deliver against this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}

// Spins until the phase of parity `parity` has completed. A fresh barrier is in phase 0, so
// waiting for parity 1 returns at once: the producer's first pass over empty stages.
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "wait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_%=;\n"
        "}\n" ::"r"(smem_u32(bar)),
        "r"(parity)
        : "memory");
}

// ---- TMA ------------------------------------------------------------------------------------

// Copies the box at coordinates (x innermost, y, z) of the tensor `map` describes into `dst`
// and counts its bytes against `bar`. Elements past the tensor's edge arrive as zeros.
__device__ __forceinline__ void tma_load_3d(void* dst, const TmaDescriptor* map,
                                            unsigned long long* bar, int x, int y, int z) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(smem_u32(dst)),
                 "l"(map), "r"(x), "r"(y), "r"(z), "r"(smem_u32(bar))
                 : "memory");
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

// ---- thread-block clusters -------------------------------------------------------------------

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}

// Every thread of every CTA of the cluster meets here; writes before it (barrier inits) are
// visible to the whole cluster after it.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// Arrives on the barrier at `bar`'s offset in the shared memory of CTA `cta` of the cluster
// (this CTA's own when `cta` is its rank).
__device__ __forceinline__ void mbarrier_arrive_cluster(unsigned long long* bar, unsigned cta) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_u32(bar)), "r"(cta));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote)
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

// D (64 x N, f32) (+)= A (64 x 16) B (16 x N), each operand read from shared memory through
// its descriptor. TRANS_A / TRANS_B are the instruction's imm-trans-a / imm-trans-b: 0 reads
// the operand K-major (`wgmma_descriptor_k_major_sw128`), 1 MN-major
// (`wgmma_descriptor_mn_major_sw128`); the transposed forms exist for f16 and bf16 only.
// `accumulate` = 0 overwrites D (the first k-step of a tile). The accumulator layout of
// thread t of the warpgroup (warp w = t / 32, lane l) repeats mma.m16n8's C layout: for each
// 8-column block j, d[4j], d[4j+1] = D[16w + l/4][8j + 2(l%4), +1] and d[4j+2], d[4j+3] the
// same columns 8 rows lower.
template <int N, typename T> struct WgmmaM64K16;

template <int N, typename T, int TRANS_A = 0, int TRANS_B = 0>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[N / 2], unsigned long long desc_a,
                                             unsigned long long desc_b, int accumulate) {
    static_assert((TRANS_A == 0 || TRANS_A == 1) && (TRANS_B == 0 || TRANS_B == 1),
                  "imm-trans-a / imm-trans-b are 0 (K-major) or 1 (MN-major)");
    WgmmaM64K16<N, T>::template run<TRANS_A, TRANS_B>(d, desc_a, desc_b, accumulate);
}

// The instruction's 128 accumulator operands, written once for both input types; the
// transpose immediates are "n" operands (%131, %132), so each (TRANS_A, TRANS_B) pair is its
// own instruction with no run-time choice. Other n (8 to 256 in steps of 8) would be
// specializations of the same form; day 18 needs 256 only.
#define WGMMA_M64N256K16(T, PTX_TYPE)                                                              \
    template <> struct WgmmaM64K16<256, T> {                                                       \
        template <int TRANS_A, int TRANS_B>                                                        \
        static __device__ __forceinline__ void run(float(&d)[128], unsigned long long desc_a,      \
                                                   unsigned long long desc_b, int accumulate) {    \
            asm volatile(                                                                          \
                "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                      \
                "wgmma.mma_async.sync.aligned.m64n256k16.f32." PTX_TYPE "." PTX_TYPE " {"          \
                "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                           \
                "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                 \
                "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                 \
                "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"                 \
                "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"                 \
                "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"                 \
                "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"     \
                "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"  \
                "}, %128, %129, p, 1, 1, %131, %132;\n}\n"                                         \
                :                                                                                  \
                    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),                                \
                    "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),                                \
                    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),                              \
                    "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),                            \
                    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),                            \
                    "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),                            \
                    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),                            \
                    "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),                            \
                    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),                            \
                    "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),                            \
                    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),                            \
                    "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),                            \
                    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]),                            \
                    "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),                            \
                    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),                            \
                    "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),                            \
                    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]),                            \
                    "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),                            \
                    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]),                            \
                    "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),                            \
                    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),                            \
                    "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),                            \
                    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),                            \
                    "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),                            \
                    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]),                            \
                    "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),                        \
                    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]),                        \
                    "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),                        \
                    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),                        \
                    "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),                        \
                    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]),                        \
                    "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])                         \
                : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_A), "n"(TRANS_B));          \
        }                                                                                          \
    };

WGMMA_M64N256K16(bf16_t, "bf16")
WGMMA_M64N256K16(f16_t, "f16")

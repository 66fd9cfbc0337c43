// Day 18: GEMM on tensor cores, bf16 and f16 in, f32 accumulation, the same type out.
//
//   C (m x n) = alpha op(A) op(B) + beta C, row-major, with each operand stored as is or
//   transposed (common::cublas::Stored). The layout of a linear layer, C = A B^T with B stored
//   [n, k] (y = x W^T, W kept as [out, in]), has both operands running along k ("K-major",
//   layout "nt": A as is, B transposed); it is the one every version takes. Its backward needs
//   the others: dX = dY W reads W [k, n] as is ("nn": B MN-major, n running along memory), dW
//   = dY^T X reads dY [k, m] transposed ("tn": both MN-major). Each version also takes a
//   batch (grid z, or the persistent tile index) of such products, `stride_*` elements apart.
//
//   mma_ldmatrix   mma.sync m16n8k16 from shared memory through ldmatrix: a 128 x 128 tile
//                  per block of 8 warps, each warp 64 x 32, k in steps of 32. Shared rows are
//                  padded by 16 bytes so ldmatrix's 8 row reads hit 8 different bank groups.
//                  Loads, then math, then loads: the tensor cores wait for memory every step.
//   mma_pipelined  the same warp tiling fed by a 4-stage cp.async ring (k steps of 64): the
//                  loads of step s + 3 fly while step s computes. Shared memory is XOR-swizzled
//                  (16-byte chunk c of row r stored at c ^ (r % 8)) instead of padded: the same
//                  conflict-free ldmatrix, no wasted bytes, and the layout the TMA writes.
//   wgmma_tma      the Hopper path (sm_90a): a producer warp issues TMA copies of 128 x 64 and
//                  256 x 64 tiles into a 4-stage ring guarded by mbarriers; two consumer
//                  warpgroups each run wgmma m64n256k16 on 64 rows of the 128 x 256 tile,
//                  straight from shared memory, accumulators in registers (128 per thread).
//                  Persistent: one block per SM walks the tiles, so the producer loads the next
//                  tile while the consumers store the last. Each k step waits for its own
//                  wgmma before freeing the stage. Every layout: an MN-major operand arrives
//                  as 64-wide TMA boxes and wgmma reads it with its transpose bit set.
//   wgmma_overlap  the same, but a consumer keeps one k step's wgmma running while it issues
//                  the next (wgmma.wait_group 1): a stage is freed one step later, and the
//                  tensor cores no longer drain between steps. Every layout.
//   wgmma_tma_store  wgmma_overlap's main loop; the epilogue writes the tile into shared
//                  memory and the TMA stores it, so the consumers return to the next tile's
//                  wgmma while the stores drain. At beta = 1 (an accumulation, C += A B) the
//                  TMA adds the tile into C in L2 instead (cp.reduce.async.bulk.tensor .add),
//                  so C is never read into the SM at all. Every layout.
//   wgmma_prefetch_c  wgmma_tma_store, for beta != 0: the TMA loads each consumer's 64 x 256
//                  slice of C into shared memory during the main loop, so the epilogue reads C
//                  there instead of loading it from global memory while it issues no wgmma.
//                  Written for accumulating GEMMs of few k steps per tile (day 19's dW +=
//                  dz^T H: 16). 3 stages instead of 4 make room for the whole slice. At
//                  beta = 1 wgmma_tma_store's reduce-add measured faster (day 19 uses that),
//                  so day18::Gemm takes this version only at other beta. Every layout.
//   wgmma_n192, wgmma_n128, wgmma_n64  wgmma_tma_store on 128 x 192, 128 x 128 and 128 x 64
//                  tiles (the tile table gives each the stages it has room for): more, smaller
//                  tiles, for problems whose 256-wide tiles leave the last wave of SMs mostly
//                  empty. day18::Gemm's wgmma_auto picks the width per problem (auto.rs). Every
//                  layout.
//   wgmma_cluster  wgmma_tma_store in clusters of 2 CTAs on neighbouring tile rows: each loads
//                  half of the B tile they share and the TMA multicasts it into both, so B
//                  crosses from L2 once per pair of tiles instead of once per tile. A consumer
//                  frees a stage in both CTAs (a remote mbarrier arrival). K-major only.
//
//   cargo run --release -p day18 -- --size 4096 --kernel wgmma_tma
//   cargo run --release -p day18 -- --size 4096 --a transposed --b as-is   (layout "tn")
//
// Kernels are named gemm_<version>_<layout>_<dtype>, layout = how A and B are stored: n (as
// is) or t (transposed). The mma.sync versions and wgmma_cluster exist for "nt" only.
//
// Odd sizes: every version takes any m and n (tiles past the edge are zero-filled on the way
// in and masked on the way out). mma_ldmatrix takes any k; the cp.async and TMA versions need
// k % 8 == 0 (rows of 16-byte multiples) and the host refuses other k for them; an MN-major
// operand's rows are m (or n) long, so it needs m % 8 == 0 (n % 8 == 0) in the same way.
// wgmma_tma_store and wgmma_prefetch_c move C's rows by TMA too: they need n % 8 == 0.
//
// Epilogue: C = alpha acc + beta C in f32, rounded once to T. C is read only when beta != 0,
// so with beta = 0 whatever C held (NaN included) never reaches the result. One exception:
// wgmma_tma_store at beta = 1 has the TMA add alpha acc (rounded to T) into C in L2 (its
// reduce-add), so C is rounded twice there, as cuBLAS's bf16 kernels do at beta != 0.
//
// The tiles come from the host: day18's tile table (`tile.rs`) passes them as -DGEMM_MMA_* and
// -DGEMM_WG_* defines, the same numbers its launchers size the grid, the block, the shared
// memory and the TMA boxes with; the static_asserts below check that each kernel's layout
// takes exactly the shared memory the host gives.
#if !defined(GEMM_MMA_BM) || !defined(GEMM_MMA_BN) || !defined(GEMM_MMA_THREADS) ||           \
    !defined(GEMM_MMA_BK_BYTES) || !defined(GEMM_MMA_STAGES) || !defined(GEMM_MMA_SHARED_BYTES)
#error "gemm.cu: compile it with the -DGEMM_MMA_ defines of day18's tile table"
#endif
#if !defined(GEMM_WG_BM) || !defined(GEMM_WG_BN) || !defined(GEMM_WG_BK_BYTES) ||              \
    !defined(GEMM_WG_STAGES) || !defined(GEMM_WG_CONSUMERS) || !defined(GEMM_WG_OUT_ROWS) ||   \
    !defined(GEMM_WG_PRODUCER_REGISTERS) || !defined(GEMM_WG_CONSUMER_REGISTERS) ||            \
    !defined(GEMM_WG_SHARED_BYTES) || !defined(GEMM_WG_TMA_STORE_SHARED_BYTES) ||              \
    !defined(GEMM_WG_PREFETCH_STAGES) || !defined(GEMM_WG_PREFETCH_C_SHARED_BYTES)
#error "gemm.cu: compile it with the -DGEMM_WG_ defines of day18's tile table"
#endif
#if !defined(GEMM_WG_N192_STAGES) || !defined(GEMM_WG_N192_TMA_STORE_SHARED_BYTES) ||         \
    !defined(GEMM_WG_N128_STAGES) || !defined(GEMM_WG_N128_TMA_STORE_SHARED_BYTES) ||          \
    !defined(GEMM_WG_N64_STAGES) || !defined(GEMM_WG_N64_TMA_STORE_SHARED_BYTES)
#error "gemm.cu: compile it with the narrow tiles' -DGEMM_WG_N* defines of day18's tile table"
#endif
#include "common.cuh"
#include "dtype.cuh"
#include "mma_gemm.cuh"

// Moves the operands and C to product blockIdx.z of a batch, `stride_*` elements apart.
template <typename T>
__device__ __forceinline__ void to_batch_product(const T*& a, const T*& b, T*& c,
                                                 index_t stride_a, index_t stride_b,
                                                 index_t stride_c) {
    const index_t z = blockIdx.z;
    a += z * stride_a;
    b += z * stride_b;
    c += z * stride_c;
}

// alpha and beta of the epilogue, and whether C's rows allow 32-bit stores of two
// neighbours (n even and C 4-byte aligned: a view of C may start on any element).
struct Epilogue {
    float alpha, beta;
    bool pairs;
};
template <typename T>
__device__ __forceinline__ Epilogue make_epilogue(const T* c, int n, float alpha, float beta) {
    return {alpha, beta, n % 2 == 0 && reinterpret_cast<unsigned long long>(c) % 4 == 0};
}

// The two 16-bit values of a 32-bit word (the lower address first), in f32.
template <typename T> __device__ __forceinline__ void unpack2(unsigned word, float& lo, float& hi) {
    T l, h;
    l.bits = (unsigned short)(word & 0xFFFFu);
    h.bits = (unsigned short)(word >> 16);
    lo = to_f32(l);
    hi = to_f32(h);
}

// Writes two neighbouring outputs of an accumulator fragment (row, col and col + 1) as
// alpha v + beta C, two values per 32-bit access when both are inside and the pair is
// aligned; C is read only when beta != 0.
template <typename T>
__device__ __forceinline__ void store_fragment_pair(T* c, int m, int n, int row, int col,
                                                    float v0, float v1, const Epilogue& e) {
    if (row >= m) return;
    T* p = c + (index_t)row * n + col;
    v0 *= e.alpha;
    v1 *= e.alpha;
    if (col + 1 < n && e.pairs) {
        if (e.beta != 0.0f) {
            float c0, c1;
            unpack2<T>(*reinterpret_cast<const unsigned*>(p), c0, c1);
            v0 += e.beta * c0;
            v1 += e.beta * c1;
        }
        *reinterpret_cast<unsigned*>(p) = pack2<T>(v0, v1);
    } else {
        if (col < n) p[0] = from_f32<T>(e.beta != 0.0f ? v0 + e.beta * to_f32(p[0]) : v0);
        if (col + 1 < n) p[1] = from_f32<T>(e.beta != 0.0f ? v1 + e.beta * to_f32(p[1]) : v1);
    }
}

// ---------------------------------------------------------------------------------------------
// The block tile both mma.sync versions share (mma_gemm.cuh, as day 23 does): 8 warps as 2 (m)
// x 4 (n), each a 64 x 32 sub-tile = 4 m16 tiles x 4 n8 tiles = 16 mma per k16 step, 64 f32
// accumulators per thread.
constexpr int MMA_BM = GEMM_MMA_BM, MMA_BN = GEMM_MMA_BN, MMA_THREADS = GEMM_MMA_THREADS;
static_assert(MMA_THREADS == 32 * (MMA_BM / MMA_WARP_M) * (MMA_BN / MMA_WARP_N),
              "8 warps of 64 x 32 outputs make the 128 x 128 tile");

template <typename T>
__device__ __forceinline__ void store_warp_tile(T* c, int m, int n, int row0, int col0,
                                                const float (&acc)[4][4][4], const Epilogue& e) {
    for_each_output_pair(acc, row0, col0, [&](int row, int col, float v0, float v1) {
        store_fragment_pair(c, m, n, row, col, v0, v1, e);
    });
}

// ---------------------------------------------------------------------------------------------
// mma_ldmatrix: grid(ceil(n / 128), ceil(m / 128), batch), block(256), static shared 20 KiB.
// quote: ldmatrix_stride
constexpr int LDM_BK = 32, LDM_STRIDE = LDM_BK + 8;  // +8 halves = 16 bytes of padding
// end quote: ldmatrix_stride

// Copies rows [row0, row0 + 128) x k [k0, k0 + 32) of a [rows, k] matrix into shared memory,
// zeros outside. 16-byte loads when the chunk is inside and aligned (`vector`: k % 8 == 0 and
// the matrix starts on a 16-byte boundary; a view may not), element loads otherwise.
template <typename T>
__device__ __forceinline__ void load_tile_guarded(T (*dst)[LDM_STRIDE], const T* src, int rows,
                                                  int k, int row0, int k0, bool vector) {
    const T zero = from_f32<T>(0.0f);
    for (int chunk = threadIdx.x; chunk < MMA_BM * LDM_BK / 8; chunk += MMA_THREADS) {
        const int r = chunk / (LDM_BK / 8), c = (chunk % (LDM_BK / 8)) * 8;
        const int row = row0 + r, col = k0 + c;
        T* d = &dst[r][c];
        const T* s = src + (index_t)row * k + col;
        if (row < rows && col + 8 <= k && vector) {
            store16(d, load16(s));
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) d[e] = (row < rows && col + e < k) ? s[e] : zero;
        }
    }
}

template <typename T>
__device__ __forceinline__ void gemm_mma_ldmatrix(const T* a, const T* b, T* c, int m, int n,
                                                  int k, index_t stride_a, index_t stride_b,
                                                  index_t stride_c, float alpha, float beta) {
    __shared__ __align__(16) T sa[MMA_BM][LDM_STRIDE];
    __shared__ __align__(16) T sb[MMA_BN][LDM_STRIDE];
    to_batch_product(a, b, c, stride_a, stride_b, stride_c);
    const MmaTile<MMA_BM, MMA_BN> t;
    const bool a_vector = k % 8 == 0 && reinterpret_cast<unsigned long long>(a) % 16 == 0;
    const bool b_vector = k % 8 == 0 && reinterpret_cast<unsigned long long>(b) % 16 == 0;
    // quote: ldmatrix_loop
    float acc[4][4][4] = {};
    auto a_row = [&](int r, int chunk) { return &sa[t.wm * MMA_WARP_M + r][chunk * 8]; };
    auto b_row = [&](int r, int chunk) { return &sb[t.wn * MMA_WARP_N + r][chunk * 8]; };
    for (int k0 = 0; k0 < k; k0 += LDM_BK) {
        load_tile_guarded(sa, a, m, k, t.m0, k0, a_vector);
        load_tile_guarded(sb, b, n, k, t.n0, k0, b_vector);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < LDM_BK; kk += 16) warp_mma_step<T>(acc, a_row, b_row, kk / 8);
        __syncthreads();
    }
    // end quote: ldmatrix_loop
    store_warp_tile(c, m, n, t.row0(), t.col0(), acc, make_epilogue(c, n, alpha, beta));
}

// ---------------------------------------------------------------------------------------------
// mma_pipelined: grid(ceil(n / 128), ceil(m / 128), batch), block(256), dynamic shared
// 4 stages x (128 + 128) rows x 128 bytes = 128 KiB.
constexpr int PIPE_BK = GEMM_MMA_BK_BYTES / 2, PIPE_STAGES = GEMM_MMA_STAGES;  // 16-bit k
constexpr int PIPE_TILE = MMA_BM * PIPE_BK;  // elements of one operand's stage
static_assert(MMA_BM == MMA_BN, "a stage's loop fills A's and B's tiles alike");
static_assert(PIPE_BK == 64, "a stage's rows are one 128-byte swizzle row (swizzle_128)");
static_assert(PIPE_STAGES * 2 * PIPE_TILE * 2 == GEMM_MMA_SHARED_BYTES,
              "mma_pipelined's ring takes exactly the shared memory the host gives");

// quote: swizzle_128
// Row r's 16-byte chunk c lives at chunk c ^ (r % 8): the 8 rows an ldmatrix reads at one
// chunk column land in 8 different 16-byte bank groups.
__device__ __forceinline__ int swizzle_128(int r, int c) { return r * 8 + (c ^ (r % 8)); }
// end quote: swizzle_128

// The ring, its stage loads and its k steps are mma_gemm.cuh's (day 23 runs them on int8); the
// kernel gives them the layout of a stage's tiles, swizzle_128 counted in halves.
template <typename T>
__device__ __forceinline__ void gemm_mma_pipelined(const T* a, const T* b, T* c, int m, int n,
                                                   int k, index_t stride_a, index_t stride_b,
                                                   index_t stride_c, float alpha, float beta) {
    extern __shared__ __align__(128) unsigned char pipe_smem[];
    to_batch_product(a, b, c, stride_a, stride_b, stride_c);
    const MmaTile<MMA_BM, MMA_BN> t;
    float acc[4][4][4] = {};
    // quote: pipelined_ring
    auto swizzled = [&](int r, int chunk) { return swizzle_128(r, chunk) * 8; };
    mma_ring_main_loop<MMA_THREADS, PIPE_STAGES>(acc, reinterpret_cast<T*>(pipe_smem), a, b, m, n,
                                                 k, t, swizzled);
    // end quote: pipelined_ring
    store_warp_tile(c, m, n, t.row0(), t.col0(), acc, make_epilogue(c, n, alpha, beta));
}

// Layout "nt" only: A stored [m, k], B stored [n, k]; the host refuses the others.
#define MMA_KERNELS(T, NAME)                                                                   \
    KERNEL void __launch_bounds__(MMA_THREADS)                                                 \
        gemm_mma_ldmatrix_nt_##NAME(const MmaParams<T> p) {                                    \
        gemm_mma_ldmatrix<T>(p.a, p.b, p.c, p.m, p.n, p.k, p.stride_a, p.stride_b, p.stride_c, \
                             p.alpha, p.beta);                                                 \
    }                                                                                          \
    KERNEL void __launch_bounds__(MMA_THREADS)                                                 \
        gemm_mma_pipelined_nt_##NAME(const MmaParams<T> p) {                                   \
        gemm_mma_pipelined<T>(p.a, p.b, p.c, p.m, p.n, p.k, p.stride_a, p.stride_b, p.stride_c, \
                              p.alpha, p.beta);                                                \
    }

MMA_KERNELS(bf16_t, bf16)
MMA_KERNELS(f16_t, f16)

// ---------------------------------------------------------------------------------------------
// wgmma_tma (sm_90a only; the host compiles this file for sm_90a on Hopper).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "hopper.cuh"

// A stage holds 128 bytes of k (one 128-byte swizzle row): 64 k of a 16-bit type, 128 of FP8.
// Tiles are counted in bytes so both element sizes share the ring and its offsets.
constexpr int WG_BM = GEMM_WG_BM, WG_BN = GEMM_WG_BN, WG_BK_BYTES = GEMM_WG_BK_BYTES;
constexpr int WG_STAGES = GEMM_WG_STAGES;
constexpr int WG_BK = WG_BK_BYTES / 2;                 // k per stage of a 16-bit type
constexpr int WG_CONSUMERS = GEMM_WG_CONSUMERS;        // warpgroups of 64 rows each
static_assert(WG_BM == 64 * WG_CONSUMERS, "each consumer takes 64 rows of the tile");
static_assert(WG_BK_BYTES == 128, "a stage holds one 128-byte swizzle row of k");
constexpr int WG_THREADS = 128 * (1 + WG_CONSUMERS);  // + the producer warpgroup
constexpr int WG_A_TILE = WG_BM * WG_BK_BYTES;  // bytes
// The tiles are 128 x BN: BN = WG_BN (256) for most versions, 192, 128 or 64 for wgmma_n192,
// wgmma_n128 and wgmma_n64, which keep the 128 rows and the 128-byte stages; a stage's B tile
// is BN rows of it.
template <int BN> __device__ constexpr int wg_b_tile() { return BN * WG_BK_BYTES; }
template <typename T> __device__ constexpr int wg_bk() { return WG_BK_BYTES / (int)sizeof(T); }

// wgmma_tma_store's staging: per consumer two buffers of 64 rows x 128 bytes (64 columns of a
// 16-bit output), after the stages: 32 KiB, which still fits beside the 4 stages (192 KiB) in
// the 227 KiB an H100 block may have.
constexpr int WG_OUT_ROWS = GEMM_WG_OUT_ROWS, WG_OUT_COLS = 64;
static_assert(WG_OUT_ROWS == 64, "a staged chunk is one consumer's 64 rows");
constexpr int WG_OUT_CHUNK = WG_OUT_ROWS * 128;
constexpr int WG_STAGING = WG_CONSUMERS * 2 * WG_OUT_CHUNK;

// wgmma_prefetch_c's: per consumer its whole 64 x 256 slice of C, the 4 chunks side by side
// (64 KiB in all), into which the TMA loads C during the main loop. Beside 4 stages it would
// not fit (256 KiB); 3 stages (144 KiB) still keep two k steps in flight ahead of the one
// being multiplied.
constexpr int WG_PREFETCH_STAGES = GEMM_WG_PREFETCH_STAGES;
constexpr int WG_SLICE_CHUNKS = WG_BN / WG_OUT_COLS;
constexpr int WG_PREFETCH_STAGING = WG_CONSUMERS * WG_SLICE_CHUNKS * WG_OUT_CHUNK;

// The dynamic shared memory a configuration takes: the stages, the staging, the full and
// empty barriers of each stage and (PREFETCH_C) one c_full per consumer, and 1 KiB to align
// the tiles; and what the host gives it (`WgTile::shared_bytes`).
template <int BN, int STAGES, bool TMA_STORE, bool PREFETCH_C>
__device__ constexpr int wg_shared_bytes() {
    const int staging = PREFETCH_C ? WG_PREFETCH_STAGING : TMA_STORE ? WG_STAGING : 0;
    const int barriers = 2 * STAGES + (PREFETCH_C ? WG_CONSUMERS : 0);
    return STAGES * (WG_A_TILE + wg_b_tile<BN>()) + staging + 8 * barriers + 1024;
}

// A tile's place: product z, tile row tm, tile column tn. With clusters of 2, the two CTAs of
// a cluster take tile rows 2p and 2p + 1 of the same column: they share B's tile.
struct TilePlace {
    int z, tm, tn;
};
template <int CLUSTER>
__device__ __forceinline__ TilePlace tile_place(int t, int tiles_m, int tiles_n, unsigned rank) {
    const int row_groups = (tiles_m + CLUSTER - 1) / CLUSTER;
    const int per_product = row_groups * tiles_n;
    TilePlace p;
    p.z = t / per_product;
    tile_coords(t % per_product, row_groups, tiles_n, p.tm, p.tn);
    p.tm = p.tm * CLUSTER + rank;
    return p;
}

// ---- operand layouts in the stage -----------------------------------------------------------
// K-major (A stored [m][k], B stored [n][k]): one TMA box of 128 bytes of k x ROWS rows; each
// row is the k of one m (or n), swizzled. A wgmma k step (k16 of a 16-bit type, k32 of FP8) is
// 32 bytes further along the row.
// MN-major (A stored [k][m], B stored [k][n]; 16-bit types only): ROWS / 64 boxes of 64
// m-or-n x 64 k, side by side; each box row is the 64 m (or n) of one k. A k16 step is 16 rows
// (2048 bytes) down.
// Either way a tile holds ROWS x 128 bytes and consumer c's 64 rows of A start 64 x 128 bytes
// in: the stage sizes and offsets are the same, only the TMA boxes and the wgmma descriptor
// differ (hopper.cuh draws the MN-major one).
constexpr int WG_MN_BOX = 64;  // elements of one 128-byte swizzle row
constexpr unsigned WG_MN_BOX_BYTES = WG_MN_BOX * WG_BK * 2;  // LBO: box to box along m or n

// The stage's tile of one operand: rows [row0, row0 + ROWS) (m or n) x k [k0, k0 + BK) of
// product z. The map of a K-major operand is [batch][rows][k], of an MN-major one
// [batch][k][rows]; coordinates are given innermost first.
template <typename T, bool MN_MAJOR, int ROWS>
__device__ __forceinline__ void tma_load_operand(unsigned char* dst, const TmaDescriptor* map,
                                                 unsigned long long* bar, int k0, int row0,
                                                 int z) {
    if constexpr (MN_MAJOR) {
        static_assert(sizeof(T) == 2, "MN-major operands are 16-bit (wgmma's transpose)");
#pragma unroll
        for (int box = 0; box < ROWS / WG_MN_BOX; ++box)
            tma_load_3d(dst + box * WG_MN_BOX * WG_BK * 2, map, bar, row0 + box * WG_MN_BOX, k0,
                        z);
    } else {
        tma_load_3d(dst, map, bar, k0, row0, z);
    }
}

// quote: wgmma_descriptor
// The wgmma descriptor of k step `kk` of a tile (or of a consumer's 64-row slice of it).
template <bool MN_MAJOR>
__device__ __forceinline__ unsigned long long operand_descriptor(const unsigned char* tile,
                                                                 int kk) {
    if constexpr (MN_MAJOR) {
        return wgmma_descriptor_mn_major_sw128(tile + kk * 16 * WG_MN_BOX * 2, WG_MN_BOX_BYTES);
    } else {
        return wgmma_descriptor_k_major_sw128(tile + kk * 32);
    }
}
// end quote: wgmma_descriptor

// One wgmma k step (32 bytes of k) of a consumer's 64 x 256 slice: m64n256k16 for 16-bit
// types (with their transpose bits), m64n256k32 for FP8 (K-major only).
template <typename T> struct WgmmaStep {
    template <bool A_MN, bool B_MN, int BN>
    static __device__ __forceinline__ void run(float (&d)[BN / 2], unsigned long long da,
                                               unsigned long long db, int accumulate) {
        wgmma_m64k16<BN, T, A_MN, B_MN>(d, da, db, accumulate);
    }
};
template <> struct WgmmaStep<e4m3_t> {
    template <bool A_MN, bool B_MN, int BN>
    static __device__ __forceinline__ void run(float (&d)[BN / 2], unsigned long long da,
                                               unsigned long long db, int accumulate) {
        static_assert(!A_MN && !B_MN, "8-bit wgmma reads K-major operands only");
        static_assert(BN == 256, "the FP8 kernels have the 128 x 256 tile only");
        wgmma_m64n256k32_e4m3(d, da, db, accumulate);
    }
};

// ---- the epilogues --------------------------------------------------------------------------
// Straight from registers: the accumulator layout is mma.m16n8's, one 16-row slice per warp;
// rows past m (a cluster's second tile row past the end included) and columns past n masked.
template <typename TOut, int BN>
__device__ __forceinline__ void store_tile_direct(const float (&d)[BN / 2], TOut* cz, int m,
                                                  int n, int row0, int col0,
                                                  const Epilogue& e) {
    const int lane = threadIdx.x % 32, warp_in_group = (threadIdx.x / 32) % 4;
    const int row = row0 + warp_in_group * 16 + lane / 4;
    const int col = col0 + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        store_fragment_pair(cz, m, n, row, col + 8 * j, d[4 * j], d[4 * j + 1], e);
        store_fragment_pair(cz, m, n, row + 8, col + 8 * j, d[4 * j + 2], d[4 * j + 3], e);
    }
}

// Through shared memory and the TMA: a consumer's 64 x BN slice (rows row0.., columns col0..
// of product z) in BN / 64 chunks of 64 rows x 64 columns (128 bytes), alternating between the
// consumer's two staging buffers (`chunks_staged`, the consumer's count of chunks so far, picks
// the buffer, so an odd number of chunks a tile alternates across tiles too):
//   leader waits until the store that last read this buffer is done reading it -> barrier ->
//   all write alpha acc (+ beta C) of the chunk, rounded, swizzled -> proxy fence -> barrier ->
//   leader issues the TMA store and commits it; nobody waits for it to finish.
// The consumer goes back to the next tile's wgmma while the last chunks drain; the next
// epilogue (or the kernel's end) waits for them. At beta = 1 the TMA adds the chunk into C
// instead of storing it. The TMA drops what falls past m and n, so only C's reads (beta other
// than 0 and 1) are masked. C's rows are 16-byte multiples (the host's rule),
// so a pair of columns is always an aligned 32-bit word.
template <typename TOut, int BN>
__device__ __forceinline__ void store_tile_by_tma(const float (&d)[BN / 2],
                                                  unsigned char* staging,
                                                  const TmaDescriptor* map_c, const TOut* cz,
                                                  int consumer, int m, int n, int row0,
                                                  int col0, int z, const Epilogue& e,
                                                  unsigned& chunks_staged) {
    static_assert(sizeof(TOut) == 2, "a staged chunk row is 64 16-bit outputs");
    constexpr int CHUNKS = BN / WG_OUT_COLS;
    constexpr int GROUPS = WG_OUT_COLS / 8;  // 8-column accumulator groups per chunk
    static_assert(BN % WG_OUT_COLS == 0, "a tile is whole chunks of 64 columns");
    const bool leader = threadIdx.x % 128 == 0;
    const int lane = threadIdx.x % 32, r = ((threadIdx.x / 32) % 4) * 16 + lane / 4;
    const int barrier = consumer_barrier(consumer);  // this warpgroup's alone
    // beta = 1: C += alpha acc is the TMA's reduce-add, done in L2 as the chunk leaves, so C
    // never crosses into the SM and nobody waits for it (the sum is rounded twice: alpha acc
    // to TOut, then C + that, as cuBLAS's bf16 kernels do).
    const bool add_in_l2 = e.beta == 1.0f;
    const bool read_c = e.beta != 0.0f && !add_in_l2;
#pragma unroll
    for (int q = 0; q < CHUNKS; ++q) {
        unsigned char* chunk = staging + ((chunks_staged + q) % 2) * WG_OUT_CHUNK;
        // beta != 0: the chunk's C pairs (two rows of GROUPS pairs per thread) are loaded
        // first, all at once, so their latencies overlap; loaded one by one between the
        // shared-memory stores they would wait one after another (the compiler cannot move a
        // global load above a store it cannot prove is elsewhere).
        unsigned before[GROUPS][2];
        if (read_c) {
#pragma unroll
            for (int g = 0; g < GROUPS; ++g) {
                const int col = col0 + q * WG_OUT_COLS + g * 8 + 2 * (lane % 4);
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = row0 + r + 8 * h;
                    before[g][h] = row < m && col < n
                                       ? *reinterpret_cast<const unsigned*>(
                                             cz + (index_t)row * n + col)
                                       : 0u;
                }
            }
        }
        // quote: tma_store_epilogue
        if (leader) bulk_wait_read<1>();  // only the store of the other buffer may still read
        named_barrier_sync(barrier, 128);
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
            const int j = q * GROUPS + g, c = g * 8 + 2 * (lane % 4);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float v0 = e.alpha * d[4 * j + 2 * h], v1 = e.alpha * d[4 * j + 2 * h + 1];
                if (read_c) {
                    float c0, c1;
                    unpack2<TOut>(before[g][h], c0, c1);
                    v0 += e.beta * c0;
                    v1 += e.beta * c1;
                }
                *reinterpret_cast<unsigned*>(swizzled_128(chunk, r + 8 * h, c * 2)) =
                    pack2<TOut>(v0, v1);
            }
        }
        fence_proxy_async_shared();  // these writes, before the TMA reads them
        named_barrier_sync(barrier, 128);
        if (leader) {
            if (add_in_l2) {
                tma_reduce_add_3d(map_c, chunk, col0 + q * WG_OUT_COLS, row0, z);
            } else {
                tma_store_3d(map_c, chunk, col0 + q * WG_OUT_COLS, row0, z);
            }
            bulk_commit();
        }
        // end quote: tma_store_epilogue
    }
    chunks_staged += CHUNKS;
}

// wgmma_prefetch_c: the TMA loads a consumer's 64 x 256 slice of C (rows row0.., columns
// col0.. of product z) into its 4 staging chunks, in the boxes and the swizzle the stores use,
// counted on `c_full`. Issued by the consumer's leader once the previous tile's stores are done
// reading the chunks. Boxes past m or n arrive zero-filled and still count whole.
__device__ __forceinline__ void tma_load_c_slice(unsigned char* slice, const TmaDescriptor* map_c,
                                                 unsigned long long* c_full, int row0, int col0,
                                                 int z) {
    mbarrier_arrive_expect_tx(c_full, WG_SLICE_CHUNKS * WG_OUT_CHUNK);
#pragma unroll
    for (int q = 0; q < WG_SLICE_CHUNKS; ++q)
        tma_load_3d(slice + q * WG_OUT_CHUNK, map_c, c_full, col0 + q * WG_OUT_COLS, row0, z);
}

// wgmma_prefetch_c's epilogue: store_tile_by_tma's, over a slice that already holds C.
//   beta != 0: all wait on c_full (C has landed; it was loaded only after the last tile's
//   stores had read the slice). beta = 0: the leader waits until those stores are done
//   reading, then a barrier; C is never loaded, so whatever it held never reaches the result.
//   Then per chunk: each warp reads C in the 8 x 8 blocks of its own 16 rows that it writes
//   (so no warp waits for another), then writes alpha acc (+ beta C), rounded, in place ->
//   proxy fence -> barrier -> leader issues the chunk's TMA store and
//   commits it, so the first chunks drain while the last are written. Nobody waits for the
//   stores: the next tile's prefetch (or epilogue, or the kernel's end) does.
template <typename TOut>
__device__ __forceinline__ void store_tile_over_c(const float (&d)[WG_BN / 2],
                                                  unsigned char* slice,
                                                  const TmaDescriptor* map_c,
                                                  unsigned long long* c_full, unsigned parity,
                                                  int consumer, int row0, int col0, int z,
                                                  const Epilogue& e) {
    static_assert(sizeof(TOut) == 2, "a staged chunk row is 64 16-bit outputs");
    constexpr int GROUPS = WG_OUT_COLS / 8;  // 8-column accumulator groups per chunk
    const bool leader = threadIdx.x % 128 == 0;
    const int lane = threadIdx.x % 32;
    const int barrier = consumer_barrier(consumer);  // this warpgroup's alone
    if (e.beta != 0.0f) {
        mbarrier_wait(c_full, parity);
    } else {
        if (leader) bulk_wait_read<0>();
        named_barrier_sync(barrier, 128);
    }
    // Whole 8 x 8 blocks move at once: ldmatrix reads C in the accumulator's own fragment
    // layout (lane l: row l / 4, columns 2 (l % 4), +1) and stmatrix writes the result back,
    // 4 blocks per instruction, so a chunk takes 4 + 4 shared-memory instructions per thread
    // instead of 16 + 16 word accesses. Lane l gives the address of row l % 8 of block l / 8:
    // blocks 0-3 of instruction gg are (rows 0-7, group 2gg), (rows 8-15, 2gg), (0-7, 2gg + 1),
    // (8-15, 2gg + 1) of the warp's 16 rows, each a swizzled 16-byte chunk of its row.
    const int block = lane / 8;
    const int block_row = ((threadIdx.x / 32) % 4) * 16 + 8 * (block % 2) + lane % 8;
#pragma unroll
    for (int q = 0; q < WG_SLICE_CHUNKS; ++q) {
        unsigned char* chunk = slice + q * WG_OUT_CHUNK;
        auto rows_of = [&](int gg) {  // this lane's row address for instruction gg
            return swizzled_128(chunk, block_row, (2 * gg + block / 2) * 16);
        };
        // beta != 0: the chunk's C blocks are all read first, so their latencies overlap.
        unsigned before[GROUPS / 2][4];
        if (e.beta != 0.0f) {
#pragma unroll
            for (int gg = 0; gg < GROUPS / 2; ++gg) ldmatrix_x4(before[gg], rows_of(gg));
        }
#pragma unroll
        for (int gg = 0; gg < GROUPS / 2; ++gg) {
            unsigned out[4];
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const int j = q * GROUPS + 2 * gg + b / 2, h = b % 2;
                float v0 = e.alpha * d[4 * j + 2 * h], v1 = e.alpha * d[4 * j + 2 * h + 1];
                if (e.beta != 0.0f) {
                    float c0, c1;
                    unpack2<TOut>(before[gg][b], c0, c1);
                    v0 += e.beta * c0;
                    v1 += e.beta * c1;
                }
                out[b] = pack2<TOut>(v0, v1);
            }
            stmatrix_x4(smem_u32(rows_of(gg)), out);
        }
        fence_proxy_async_shared();  // these writes, before the TMA reads them
        named_barrier_sync(barrier, 128);
        if (leader) {
            tma_store_3d(map_c, chunk, col0 + q * WG_OUT_COLS, row0, z);
            bulk_commit();
        }
    }
}

// grid(min(tiles, SMs), or fewer: wgmma_auto's CTA count) (a multiple of CLUSTER), block(384),
// dynamic shared STAGES x (16 KiB + BN x 128 bytes) + 1 KiB for alignment (+ 32 KiB of staging
// with TMA_STORE, 64 KiB with PREFETCH_C; see wg_shared_bytes). The tensor maps cover A as
// [batch][m][k] (A_MN: [batch][k][m]) and B as [batch][n][k] (B_MN: [batch][k][n]), 128-byte
// swizzle; K-major boxes are 128 bytes of k x 128 rows for A and x BN / CLUSTER rows for B,
// MN-major boxes 64 (m or n) x 64 (k). C is
// [batch][m][n] with products `stride_c` apart; with TMA_STORE its map covers it in boxes of
// 64 columns x 64 rows, 128-byte swizzle (PREFETCH_C loads C through the same map).
//
// TIn is the operands' type (bf16, f16, or FP8 e4m3), TOut C's (bf16 or f16); the
// accumulators are f32 either way.
//
// CLUSTER = 2: each CTA loads its own A tile and half of the shared B tile, multicast into
// both CTAs' shared memory; a stage may be refilled only when the consumers of both CTAs have
// freed it, so every consumer arrives on the `empty` barrier of each CTA of the cluster (at CTA
// scope: see mbarrier_arrive_cluster). K-major operands, the 256-wide tile only.
//
// BN: the tile's width, one wgmma's N (256, or 192, 128, 64 for the narrow versions); the host
// gives the shared memory HOST_SHARED_BYTES, which the layout must take exactly.
//
// PREFETCH_C (with TMA_STORE; STAGES = 3 to make room): when beta != 0, each consumer's leader
// has the TMA load the consumer's slice of C for a tile into its staging while the tile's
// wgmma run: before the main loop for the first tile, and for each later one right after
// step 0's wgmma is issued (the tensor cores are busy) and the last tile's stores are done
// reading the staging. The epilogue (store_tile_over_c) then waits on c_full[consumer], whose
// phase parity is the count of tiles this CTA has done, & 1. A tile of one k step is still
// correct: the epilogue waits for the loads however late they were issued.
template <typename TIn, typename TOut, int IN_FLIGHT, int CLUSTER, bool A_MN, bool B_MN,
          bool TMA_STORE, int STAGES, bool PREFETCH_C, int BN, int HOST_SHARED_BYTES>
__device__ __forceinline__ void gemm_wgmma_tma(const TmaDescriptor* map_a,
                                               const TmaDescriptor* map_b,
                                               const TmaDescriptor* map_c, TOut* c, int m,
                                               int n, int k, int batch, index_t stride_c,
                                               float alpha, float beta) {
    static_assert(CLUSTER == 1 || (!A_MN && !B_MN), "the cluster version is K-major only");
    static_assert(TMA_STORE || !PREFETCH_C, "C is prefetched into the TMA store's staging");
    static_assert(!PREFETCH_C || BN == WG_BN, "C's slice is prefetched for the 256-wide tile");
    static_assert(CLUSTER == 1 || BN == WG_BN, "the cluster version has the 256-wide tile");
    static_assert(BN % 64 == 0 && BN <= 256, "a tile is whole 64-wide TMA boxes and chunks");
    static_assert(wg_shared_bytes<BN, STAGES, TMA_STORE, PREFETCH_C>() <= 227 * 1024,
                  "at most 227 KiB of shared memory per block on sm_90");
    static_assert(wg_shared_bytes<BN, STAGES, TMA_STORE, PREFETCH_C>() == HOST_SHARED_BYTES,
                  "the layout takes exactly the shared memory the host gives");
    constexpr int B_TILE = wg_b_tile<BN>();
    constexpr int BK = wg_bk<TIn>();  // k per stage
    // The 128-byte swizzle pattern repeats every 1024 bytes: tiles start on that boundary.
    unsigned char* sa = aligned_dynamic_shared();
    unsigned char* sb = sa + STAGES * WG_A_TILE;
    // The staging buffers (TMA_STORE only) follow the stages, on a 1024-byte boundary still.
    unsigned char* staging = sb + STAGES * B_TILE;
    constexpr int STAGING = PREFETCH_C ? WG_PREFETCH_STAGING : TMA_STORE ? WG_STAGING : 0;
    unsigned long long* full = reinterpret_cast<unsigned long long*>(staging + STAGING);
    unsigned long long* empty = full + STAGES;
    unsigned long long* c_full = empty + STAGES;  // one per consumer (PREFETCH_C only)

    const int tiles_m = (m + WG_BM - 1) / WG_BM, tiles_n = (n + BN - 1) / BN;
    const int tiles = (tiles_m + CLUSTER - 1) / CLUSTER * tiles_n * batch;  // per cluster
    const int steps = (k + BK - 1) / BK;
    const int warpgroup = threadIdx.x / 128;
    const unsigned rank = CLUSTER > 1 ? cluster_rank() : 0;
    const int first = blockIdx.x / CLUSTER, stride = gridDim.x / CLUSTER;

    // quote: wgmma_barriers
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(&full[s], 1);  // the producer's arrival (+ TMA bytes)
            mbarrier_init(&empty[s], WG_CONSUMERS * CLUSTER);  // each consumer of the cluster
        }
        if (PREFETCH_C) {
            // The consumer leader's arrival (+ the bytes of its slice of C).
            for (int w = 0; w < WG_CONSUMERS; ++w) mbarrier_init(&c_full[w], 1);
        }
        fence_barrier_init();
    }
    if (CLUSTER > 1) {
        cluster_sync();  // the peer's barriers exist before anything targets them
    } else {
        __syncthreads();
    }
    // end quote: wgmma_barriers

    if (warpgroup == 0) {
        // quote: wgmma_producer
        warpgroup_registers_release<GEMM_WG_PRODUCER_REGISTERS>();
        if (threadIdx.x == 0) {
            PipelineState<STAGES> ring;
            for (int t = first; t < tiles; t += stride) {
                const TilePlace p = tile_place<CLUSTER>(t, tiles_m, tiles_n, rank);
                for (int step = 0; step < steps; ++step) {
                    const int stage = ring.stage();
                    mbarrier_wait(&empty[stage], ring.phase() ^ 1);
                    // Boxes past m, n or k arrive zero-filled and still count whole.
                    mbarrier_arrive_expect_tx(&full[stage], WG_A_TILE + B_TILE);
                    tma_load_operand<TIn, A_MN, WG_BM>(sa + stage * WG_A_TILE, map_a,
                                                       &full[stage], step * BK, p.tm * WG_BM,
                                                       p.z);
                    if (CLUSTER == 1) {
                        tma_load_operand<TIn, B_MN, BN>(sb + stage * B_TILE, map_b,
                                                        &full[stage], step * BK, p.tn * BN,
                                                        p.z);
                    } else {
                        constexpr int HALF = BN / CLUSTER;
                        tma_load_3d_multicast(sb + stage * B_TILE + rank * HALF * WG_BK_BYTES,
                                              map_b, &full[stage], step * BK,
                                              p.tn * BN + rank * HALF, p.z,
                                              (unsigned short)((1u << CLUSTER) - 1));
                    }
                    ring.advance();
                }
            }
        }
        // end quote: wgmma_producer
    } else {
        warpgroup_registers_claim<GEMM_WG_CONSUMER_REGISTERS>();
        const int consumer = warpgroup - 1;
        // Frees a stage for the producers: this CTA's, and with clusters the peer's too.
        auto release = [&](int s) {
            if (threadIdx.x % 128 != 0) return;
            if (CLUSTER == 1) {
                mbarrier_arrive(&empty[s]);
            } else {
#pragma unroll
                for (unsigned cta = 0; cta < CLUSTER; ++cta) mbarrier_arrive_cluster(&empty[s], cta);
            }
        };
        PipelineState<STAGES> ring;
        float d[BN / 2];
        unsigned chunks_staged = 0;  // TMA_STORE: chunks this consumer staged so far
        // PREFETCH_C: this consumer's slice of the staging, whether C is loaded into it at
        // all (beta != 0), and the parity of c_full's phase for the current tile.
        unsigned char* slice = staging + consumer * WG_SLICE_CHUNKS * WG_OUT_CHUNK;
        const bool prefetch = PREFETCH_C && beta != 0.0f;
        unsigned c_parity = 0;
        for (int t = first; t < tiles; t += stride) {
            const TilePlace p = tile_place<CLUSTER>(t, tiles_m, tiles_n, rank);
            const bool first_tile = t == first;
            // Only the leader issues the loads; the coordinates are the epilogue's stores'.
            auto load_c = [&] {
                tma_load_c_slice(slice, map_c, &c_full[consumer], p.tm * WG_BM + consumer * 64,
                                 p.tn * BN, p.z);
            };
            if (prefetch && first_tile && threadIdx.x % 128 == 0) load_c();
            int previous = -1;  // the stage whose wgmma may still be running (IN_FLIGHT)
            for (int step = 0; step < steps; ++step) {
                // quote: wgmma_issue
                const int stage = ring.stage();
                mbarrier_wait(&full[stage], ring.phase());
                const unsigned char* ta = sa + stage * WG_A_TILE + consumer * 64 * WG_BK_BYTES;
                const unsigned char* tb = sb + stage * B_TILE;
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < WG_BK_BYTES / 32; ++kk) {
                    WgmmaStep<TIn>::template run<A_MN, B_MN, BN>(
                        d, operand_descriptor<A_MN>(ta, kk), operand_descriptor<B_MN>(tb, kk),
                        step > 0 || kk > 0);
                }
                wgmma_commit();
                // end quote: wgmma_issue
                // The tensor cores now have step 0 to run: the leader frees the slice from the
                // last tile's stores (waiting only while they still read it) and loads C.
                if (prefetch && step == 0 && !first_tile && threadIdx.x % 128 == 0) {
                    bulk_wait_read<0>();
                    load_c();
                }
                // quote: wgmma_release
                // IN_FLIGHT = 0: wait for this step's products, then free its stage; the tensor
                // cores idle until the next step is issued. IN_FLIGHT = 1: wait only for the
                // previous step's, free that stage, and return to issue the next step while
                // this one runs.
                wgmma_wait<IN_FLIGHT>();
                wgmma_fence_operands(d);
                const int done = IN_FLIGHT ? previous : stage;
                if (done >= 0) release(done);
                previous = stage;
                ring.advance();
                // end quote: wgmma_release
            }
            // quote: wgmma_drain
            if (IN_FLIGHT) {
                wgmma_wait<0>();
                wgmma_fence_operands(d);
                release(previous);
            }
            // end quote: wgmma_drain
            TOut* cz = c + (index_t)p.z * stride_c;
            const Epilogue e = make_epilogue(cz, n, alpha, beta);
            const int row0 = p.tm * WG_BM + consumer * 64, col0 = p.tn * BN;
            if constexpr (PREFETCH_C) {
                store_tile_over_c<TOut>(d, slice, map_c, &c_full[consumer], c_parity, consumer,
                                        row0, col0, p.z, e);
                c_parity ^= 1;
            } else if constexpr (TMA_STORE) {
                store_tile_by_tma<TOut, BN>(d, staging + consumer * 2 * WG_OUT_CHUNK, map_c, cz,
                                            consumer, m, n, row0, col0, p.z, e, chunks_staged);
            } else {
                store_tile_direct<TOut, BN>(d, cz, m, n, row0, col0, e);
            }
        }
        // The shared memory must outlive the last TMA stores' reads of it.
        if (TMA_STORE && threadIdx.x % 128 == 0) bulk_wait<0>();
    }
    // No CTA may leave while its peer can still write into its shared memory or arrive on its
    // barriers.
    if (CLUSTER > 1) cluster_sync();
}

// The cluster shape is compiled in (`__cluster_dims__`), so a plain launch forms the clusters;
// the other versions carry no cluster attribute at all (a cluster of 1 is still a cluster
// launch, scheduled under the cluster rules). LAYOUT names how A and B are stored (n: as is,
// t: transposed); A_MN = (A transposed), B_MN = (B as is). Every kernel takes C's tensor map;
// the versions that store from registers leave it unread (the host passes A's). The parameters
// are one struct (gemm_params.cuh), `__grid_constant__` so that the TMA reads its maps in place.
#define WGMMA_KERNEL(TIn, TOut, NAME, VERSION, LAYOUT, IN_FLIGHT, CLUSTER, A_MN, B_MN,         \
                     TMA_STORE, STAGES, PREFETCH_C, BN, HOST_SHARED_BYTES, ATTRIBUTES)         \
    KERNEL void __launch_bounds__(WG_THREADS, 1) ATTRIBUTES                                    \
        gemm_##VERSION##_##LAYOUT##_##NAME(const __grid_constant__ WgmmaParams<TOut> p) {      \
        gemm_wgmma_tma<TIn, TOut, IN_FLIGHT, CLUSTER, A_MN, B_MN, TMA_STORE, STAGES,           \
                       PREFETCH_C, BN, HOST_SHARED_BYTES>(&p.map_a, &p.map_b, &p.map_c, p.c,   \
                                                          p.m, p.n, p.k, p.batch, p.stride_c,  \
                                                          p.alpha, p.beta);                    \
    }
#define NO_ATTRIBUTES
#define CLUSTER_OF_2 __cluster_dims__(2, 1, 1)

// The single-CTA versions in the four layouts: nt (both K-major, today's linear layer), nn (B
// MN-major), tn (both MN-major), tt (A MN-major).
#define WGMMA_LAYOUTS(T, NAME, VERSION, IN_FLIGHT, TMA_STORE, STAGES, PREFETCH_C, BN, BYTES)  \
    WGMMA_KERNEL(T, T, NAME, VERSION, nt, IN_FLIGHT, 1, false, false, TMA_STORE, STAGES,       \
                 PREFETCH_C, BN, BYTES, NO_ATTRIBUTES)                                         \
    WGMMA_KERNEL(T, T, NAME, VERSION, nn, IN_FLIGHT, 1, false, true, TMA_STORE, STAGES,        \
                 PREFETCH_C, BN, BYTES, NO_ATTRIBUTES)                                         \
    WGMMA_KERNEL(T, T, NAME, VERSION, tn, IN_FLIGHT, 1, true, true, TMA_STORE, STAGES,         \
                 PREFETCH_C, BN, BYTES, NO_ATTRIBUTES)                                         \
    WGMMA_KERNEL(T, T, NAME, VERSION, tt, IN_FLIGHT, 1, true, false, TMA_STORE, STAGES,        \
                 PREFETCH_C, BN, BYTES, NO_ATTRIBUTES)
// Each version in both 16-bit types.
#define WGMMA_VERSION(VERSION, IN_FLIGHT, TMA_STORE, STAGES, PREFETCH_C, BN, BYTES)           \
    WGMMA_LAYOUTS(bf16_t, bf16, VERSION, IN_FLIGHT, TMA_STORE, STAGES, PREFETCH_C, BN, BYTES) \
    WGMMA_LAYOUTS(f16_t, f16, VERSION, IN_FLIGHT, TMA_STORE, STAGES, PREFETCH_C, BN, BYTES)

// quote: wgmma_versions
WGMMA_VERSION(wgmma_tma, 0, false, WG_STAGES, false, WG_BN, GEMM_WG_SHARED_BYTES)
WGMMA_VERSION(wgmma_overlap, 1, false, WG_STAGES, false, WG_BN, GEMM_WG_SHARED_BYTES)
WGMMA_VERSION(wgmma_tma_store, 1, true, WG_STAGES, false, WG_BN, GEMM_WG_TMA_STORE_SHARED_BYTES)
WGMMA_VERSION(wgmma_prefetch_c, 1, true, WG_PREFETCH_STAGES, true, WG_BN,
              GEMM_WG_PREFETCH_C_SHARED_BYTES)
// wgmma_tma_store with narrower tiles, for problems whose tile count fills the last wave of
// SMs badly with 256-wide tiles (day18::Gemm picks among them per problem); the stages they
// have room for come from the tile table.
WGMMA_VERSION(wgmma_n192, 1, true, GEMM_WG_N192_STAGES, false, 192,
              GEMM_WG_N192_TMA_STORE_SHARED_BYTES)
WGMMA_VERSION(wgmma_n128, 1, true, GEMM_WG_N128_STAGES, false, 128,
              GEMM_WG_N128_TMA_STORE_SHARED_BYTES)
WGMMA_VERSION(wgmma_n64, 1, true, GEMM_WG_N64_STAGES, false, 64,
              GEMM_WG_N64_TMA_STORE_SHARED_BYTES)
// end quote: wgmma_versions
WGMMA_KERNEL(bf16_t, bf16_t, bf16, wgmma_cluster, nt, 1, 2, false, false, true, WG_STAGES, false,
             WG_BN, GEMM_WG_TMA_STORE_SHARED_BYTES, CLUSTER_OF_2)
WGMMA_KERNEL(f16_t, f16_t, f16, wgmma_cluster, nt, 1, 2, false, false, true, WG_STAGES, false,
             WG_BN, GEMM_WG_TMA_STORE_SHARED_BYTES, CLUSTER_OF_2)

// FP8 (e4m3 in, f32 accumulation, bf16 out), K-major (layout nt) only: the same ring with 128
// k per stage, one m64n256k32 per 32 bytes of k. `wgmma_overlap`'s epilogue from registers
// (any n) and `wgmma_tma_store`'s through the TMA.
WGMMA_KERNEL(e4m3_t, bf16_t, e4m3, wgmma_overlap, nt, 1, 1, false, false, false, WG_STAGES, false,
             WG_BN, GEMM_WG_SHARED_BYTES, NO_ATTRIBUTES)
WGMMA_KERNEL(e4m3_t, bf16_t, e4m3, wgmma_tma_store, nt, 1, 1, false, false, true, WG_STAGES,
             false, WG_BN, GEMM_WG_TMA_STORE_SHARED_BYTES, NO_ATTRIBUTES)
WGMMA_KERNEL(e4m3_t, bf16_t, e4m3, wgmma_cluster, nt, 1, 2, false, false, true, WG_STAGES, false,
             WG_BN, GEMM_WG_TMA_STORE_SHARED_BYTES, CLUSTER_OF_2)
#endif

// Day 23: INT8 GEMM on tensor cores, exact in int32, with zero points and scales.
//
//   acc[i][j] = sum_l A[i][l] B[j][l]                 A m x k, B n x k, both row-major int8
//   C[i][j]   = acc - zb_j rowsum(A)[i] - za colsum(B)[j] + k za zb_j      (= sum (a-za)(b-zb_j))
//   Y[i][j]   = bf16( scale_a * scale_b_j * C[i][j] )                      (the bf16 epilogue)
// B is given as n x k (a linear layer's weight): both operands run along k ("K-major"), which
// is the only layout 8-bit wgmma takes (its transpose bits exist for 16-bit types only). The
// zero points leave the inner loop as in day 15: the tensor cores multiply raw bytes, and the
// epilogue subtracts the row sums of A and the column sums of B (`int8_row_sums`, launched
// before the GEMM when a zero point is nonzero) in modular (unsigned) int32 arithmetic: the
// terms may wrap, the exact result fits (the host bounds k), so the result is right.
// zb and scale_b are per tensor (step 0: one value) or per output channel (step 1: n values).
//
// Versions (each with an s32 and a bf16 epilogue: int8_gemm_<version>_<out>):
//   mma_sync   mma.sync m16n8k32 s8 x s8 -> s32: a 128 x 128 tile per block of 8 warps (each
//              64 x 32), fed by a 4-stage cp.async ring of 128-byte k steps through
//              XOR-swizzled shared memory read with ldmatrix. Day 18's mma_pipelined with
//              bytes for halves: a 16 x 32 int8 tile is a 16 x 16 bf16 tile's bytes, so the
//              ldmatrix addressing and fragment layouts carry over unchanged, and both days
//              run the same main loop (common/cuda/mma_gemm.cuh).
//   wgmma      the Hopper path (sm_90a): a producer thread's TMA copies of 128 x 128-byte and
//              256 x 128-byte tiles (128-byte swizzle) into a 4-stage mbarrier ring, two
//              consumer warpgroups each running wgmma m64n256k32 s8 on 64 rows of the 128 x 256
//              tile, one k step kept in flight (day 18's wgmma_overlap), persistent over tiles.
//              The epilogue stores straight from registers while both consumers stop.
//   wgmma_tma_store  the same main loop; the epilogue writes the tile through shared memory
//              (8 KiB chunks, two per consumer in turn) and the TMA stores it, so a consumer
//              goes back to the next tile's wgmma once its last chunk is in shared memory and
//              the stores drain under the math. Rows of C must be a multiple of 16 bytes (the
//              TMA's rule): other n run wgmma's kernel.
//
//   cargo run --release -p day23 -- --size 4096 --kernel wgmma
//
// Sizes: m and n are free (tiles past the edge are zero-filled on the way in and masked on
// the way out); k must be a multiple of 16 (rows of 16-byte pieces for cp.async and the TMA,
// and the row sums' 16-byte loads); the host refuses other k.
//
// The tiles come from the host: day 23 passes day 18's tile table (the same tiles in bytes) as
// -DINT8_MMA_* and -DINT8_WG_* defines, the numbers its launchers size the grid, the block, the
// shared memory and the TMA boxes with; the static_asserts below check that each kernel's
// layout takes exactly the shared memory the host gives.
#if !defined(INT8_MMA_BM) || !defined(INT8_MMA_BN) || !defined(INT8_MMA_THREADS) ||           \
    !defined(INT8_MMA_BK_BYTES) || !defined(INT8_MMA_STAGES) || !defined(INT8_MMA_SHARED_BYTES)
#error "int8_gemm.cu: compile it with the -DINT8_MMA_ defines of day23's kernel_builds"
#endif
#if !defined(INT8_WG_BM) || !defined(INT8_WG_BN) || !defined(INT8_WG_BK_BYTES) ||              \
    !defined(INT8_WG_STAGES) || !defined(INT8_WG_CONSUMERS) || !defined(INT8_WG_OUT_ROWS) ||   \
    !defined(INT8_WG_PRODUCER_REGISTERS) || !defined(INT8_WG_CONSUMER_REGISTERS) ||            \
    !defined(INT8_WG_SHARED_BYTES) || !defined(INT8_WG_TMA_STORE_SHARED_BYTES)
#error "int8_gemm.cu: compile it with the -DINT8_WG_ defines of day23's kernel_builds"
#endif
#include "common.cuh"
#include "dtype.cuh"
#include "mma_gemm.cuh"

// ---- zero points and scales -----------------------------------------------------------------
// What the epilogue needs besides the accumulator. `row_sums` / `col_sums` are null when no
// correction needs them (zb == 0 everywhere / za == 0).
struct Epilogue {
    const int* row_sums;
    const int* col_sums;
    const int* zb;
    const float* scale_b;
    int zb_step, scale_b_step, za, k;
    float scale_a;
};

// quote: corrected
// sum_l (a - za)(b - zb_j) from sum_l a b, in int32 arithmetic modulo 2^32.
__device__ __forceinline__ int corrected(int acc, int row, int col, const Epilogue& e) {
    const unsigned zb = (unsigned)e.zb[col * e.zb_step];
    unsigned v = (unsigned)acc + (unsigned)e.k * (unsigned)e.za * zb;
    if (e.row_sums) v -= zb * (unsigned)e.row_sums[row];
    if (e.col_sums) v -= (unsigned)e.za * (unsigned)e.col_sums[col];
    return (int)v;
}
// end quote: corrected

// Writes two neighbouring outputs (row, col and col + 1) of an accumulator fragment; one
// 8-byte (int32) or 4-byte (bf16) store when both are inside and n is even (the pair is then
// aligned: C comes from an allocation, and col is even).
__device__ __forceinline__ void store_pair(int* c, int m, int n, int row, int col, int a0,
                                           int a1, const Epilogue& e) {
    if (row >= m || col >= n) return;
    int* p = c + (index_t)row * n + col;
    const int v0 = corrected(a0, row, col, e);
    if (col + 1 < n) {
        const int v1 = corrected(a1, row, col + 1, e);
        if (n % 2 == 0) {
            *reinterpret_cast<int2*>(p) = make_int2(v0, v1);
        } else {
            p[0] = v0;
            p[1] = v1;
        }
    } else {
        p[0] = v0;
    }
}

__device__ __forceinline__ void store_pair(bf16_t* c, int m, int n, int row, int col, int a0,
                                           int a1, const Epilogue& e) {
    if (row >= m || col >= n) return;
    bf16_t* p = c + (index_t)row * n + col;
    // The exact int32 to f32 (rounded once, relative 2^-24), two f32 products, one rounding to
    // bf16: the host's tolerance is bf16's half ulp plus a few f32 roundings.
    const float y0 = e.scale_a * e.scale_b[col * e.scale_b_step] * (float)corrected(a0, row, col, e);
    if (col + 1 < n) {
        const float y1 =
            e.scale_a * e.scale_b[(col + 1) * e.scale_b_step] * (float)corrected(a1, row, col + 1, e);
        if (n % 2 == 0) {
            *reinterpret_cast<unsigned*>(p) = pack2<bf16_t>(y0, y1);
        } else {
            p[0] = from_f32<bf16_t>(y0);
            p[1] = from_f32<bf16_t>(y1);
        }
    } else {
        p[0] = from_f32<bf16_t>(y0);
    }
}

// ---- row sums -------------------------------------------------------------------------------
// grid(ceil(rows / 8)), block(256): one warp per row, 16 bytes per lane per step, dp4a against
// 0x01010101 (four bytes summed into the int32). k % 16 == 0 and rows start 16-byte aligned.
// |sum| <= 128 k fits easily.
KERNEL void __launch_bounds__(256)
    int8_row_sums(const signed char* __restrict__ x, int* __restrict__ sums, int rows, int k) {
    const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const signed char* p = x + (index_t)row * k;
    int s = 0;
    for (int c = lane * 16; c < k; c += 32 * 16) {
        const int4 v = *reinterpret_cast<const int4*>(p + c);
        s = __dp4a(v.x, 0x01010101, s);
        s = __dp4a(v.y, 0x01010101, s);
        s = __dp4a(v.z, 0x01010101, s);
        s = __dp4a(v.w, 0x01010101, s);
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) sums[row] = s;
}

// ---- mma_sync -------------------------------------------------------------------------------
// Day 18's mma_pipelined on bytes, through the same code (mma_gemm.cuh): the block tile, the
// ring of swizzled stages and the ldmatrix addressing, with mma.m16n8k32 on s8 (mma_s8_16832)
// where day 18 runs mma.m16n8k16 on bf16.
constexpr int MMA_BM = INT8_MMA_BM, MMA_BN = INT8_MMA_BN, MMA_THREADS = INT8_MMA_THREADS;
constexpr int MMA_BK = INT8_MMA_BK_BYTES, MMA_STAGES = INT8_MMA_STAGES;  // bytes of k per stage
constexpr int MMA_TILE = MMA_BM * MMA_BK;    // bytes of one operand's stage
static_assert(MMA_THREADS == 32 * (MMA_BM / MMA_WARP_M) * (MMA_BN / MMA_WARP_N),
              "8 warps of 64 x 32 outputs make the 128 x 128 tile");
static_assert(MMA_BM == MMA_BN, "a stage's loop fills A's and B's tiles alike");
static_assert(MMA_BK == 128, "a stage's rows are one 128-byte swizzle row (swizzle_128)");
static_assert(MMA_STAGES * 2 * MMA_TILE == INT8_MMA_SHARED_BYTES,
              "mma_sync's ring takes exactly the shared memory the host gives");

// Where row r's 16-byte chunk c lives in a stage's tile, in bytes: at chunk c ^ (r % 8), so the
// 8 rows an ldmatrix reads at one chunk column land in 8 different 16-byte bank groups.
__device__ __forceinline__ int swizzle_128(int r, int c) { return r * MMA_BK + ((c ^ (r % 8)) * 16); }

// grid(ceil(n / 128), ceil(m / 128)), block(256), dynamic shared 4 stages x 2 x 16 KiB.
template <typename OutT>
__device__ __forceinline__ void int8_gemm_mma_sync(const signed char* a, const signed char* b,
                                                   OutT* c, int m, int n, int k,
                                                   const Epilogue& e) {
    extern __shared__ __align__(128) unsigned char mma_smem[];
    const MmaTile<MMA_BM, MMA_BN> t;
    int acc[4][4][4] = {};
    auto swizzled = [&](int r, int chunk) { return swizzle_128(r, chunk); };
    mma_ring_main_loop<MMA_THREADS, MMA_STAGES>(acc, reinterpret_cast<signed char*>(mma_smem), a,
                                                b, m, n, k, t, swizzled);
    for_each_output_pair(acc, t.row0(), t.col0(), [&](int row, int col, int v0, int v1) {
        store_pair(c, m, n, row, col, v0, v1, e);
    });
}

// The epilogue's arguments, in the order every GEMM kernel takes them after (m, n, k).
// The epilogue as the kernels use it, from the launch's parameters (int8_gemm_params.cuh).
__device__ __forceinline__ Epilogue epilogue_of(const Int8Epilogue& e, int k) {
    return {e.row_sums, e.col_sums, e.zb, e.scale_b, e.zb_step, e.scale_b_step, e.za, k, e.scale_a};
}

#define MMA_SYNC_KERNEL(OutT, NAME)                                                            \
    KERNEL void __launch_bounds__(MMA_THREADS)                                                 \
        int8_gemm_mma_sync_##NAME(const Int8MmaParams<OutT> p) {                               \
        int8_gemm_mma_sync<OutT>(p.a, p.b, p.c, p.m, p.n, p.k, epilogue_of(p.epilogue, p.k));  \
    }
MMA_SYNC_KERNEL(int, s32)
MMA_SYNC_KERNEL(bf16_t, bf16)

// ---- wgmma (sm_90a only; the host compiles this file for sm_90a on Hopper) ------------------
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "hopper.cuh"

constexpr int WG_BM = INT8_WG_BM, WG_BN = INT8_WG_BN;
constexpr int WG_BK = INT8_WG_BK_BYTES, WG_STAGES = INT8_WG_STAGES;  // WG_BK in bytes = int8s
constexpr int WG_CONSUMERS = INT8_WG_CONSUMERS;                       // 64 rows each
static_assert(WG_BM == 64 * WG_CONSUMERS, "each consumer takes 64 rows of the tile");
static_assert(WG_BK == 128, "a stage holds one 128-byte swizzle row of k");
constexpr int WG_THREADS = 128 * (1 + WG_CONSUMERS);                  // + the producer
constexpr int WG_A_TILE = WG_BM * WG_BK, WG_B_TILE = WG_BN * WG_BK;   // bytes
// wgmma_tma_store's staging: per consumer two buffers of 64 rows x 128 bytes (one 128-byte
// swizzle row: 32 int32 or 64 bf16 columns), after the stages: 32 KiB, which still fits
// beside the 4 stages (192 KiB) in the 227 KiB an H100 block may have.
constexpr int WG_OUT_ROWS = INT8_WG_OUT_ROWS, WG_OUT_ROW_BYTES = 128;
constexpr int WG_OUT_CHUNK = WG_OUT_ROWS * WG_OUT_ROW_BYTES;
constexpr int WG_STAGING = WG_CONSUMERS * 2 * WG_OUT_CHUNK;
static_assert(WG_OUT_ROWS == 64, "a staged chunk is one consumer's 64 rows");
// The dynamic shared memory of each kernel: 1 KiB to align the tiles, the stages, the staging
// (TMA_STORE), and the full and empty barrier of each stage; the host gives exactly that.
__device__ constexpr int wg_shared_bytes(bool tma_store) {
    return 1024 + WG_STAGES * (WG_BM + WG_BN) * WG_BK + (tma_store ? WG_STAGING : 0) +
           8 * 2 * WG_STAGES;
}
static_assert(wg_shared_bytes(false) == INT8_WG_SHARED_BYTES,
              "wgmma's layout takes exactly the shared memory the host gives");
static_assert(wg_shared_bytes(true) == INT8_WG_TMA_STORE_SHARED_BYTES,
              "wgmma_tma_store's layout takes exactly the shared memory the host gives");

// D (64 x 256, s32) (+)= A (64 x 32 int8) B (32 x 256 int8), both from shared memory through
// K-major 128-byte-swizzle descriptors. Integer wgmma has no scale or transpose immediates:
// only scale-d (0: overwrite D, the first k step of a tile). The accumulator layout is the
// f32 one (hopper.cuh): d[4j], d[4j+1] = D[16w + l/4][8j + 2(l%4), +1], d[4j+2..3] 8 rows lower.
__device__ __forceinline__ void wgmma_s8_m64n256k32(int (&d)[128], unsigned long long desc_a,
                                                    unsigned long long desc_b, int accumulate) {
#define D8(o)                                                                                  \
    "+r"(d[o]), "+r"(d[o + 1]), "+r"(d[o + 2]), "+r"(d[o + 3]), "+r"(d[o + 4]), "+r"(d[o + 5]), \
        "+r"(d[o + 6]), "+r"(d[o + 7])
#define D32(o) D8(o), D8(o + 8), D8(o + 16), D8(o + 24)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {" WGMMA_D128_LIST "}, "
                 "%128, %129, p;\n}\n"
                 : D32(0), D32(32), D32(64), D32(96)
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
#undef D32
#undef D8
}

// Keeps the compiler from moving accumulator reads or writes across an in-flight wgmma.
__device__ __forceinline__ void fence_accumulators(int (&d)[128]) {
#pragma unroll
    for (int i = 0; i < 128; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// ---- wgmma_tma_store's epilogue ---------------------------------------------------------------
// The staged chunks are rows of 128 bytes in the TMA's 128-byte swizzle (hopper.cuh's
// `swizzled_128`): the 8 rows one warp's store touches (lane / 4) spread over all 32 banks, so a
// bf16 store (16 bytes a row) takes one pass, an int32 one (32 bytes a row) the minimum two.
static_assert(WG_OUT_ROW_BYTES == 128, "a staged row is one 128-byte swizzle row");

// One output as the epilogue writes it; 0 outside the matrix (the TMA drops it, and the
// corrections' arrays must not be read there). Without zero points the sums are null and the
// value is the accumulator itself: no loads at all on the plain int32 problem.
__device__ __forceinline__ int value_of(int acc, int row, int col, int m, int n,
                                        const Epilogue& e) {
    if (row >= m || col >= n) return 0;
    if (!e.row_sums && !e.col_sums) return acc;  // za = 0 and every zb = 0 (the host's rule)
    return corrected(acc, row, col, e);
}

__device__ __forceinline__ void stage_pair(unsigned char* chunk, int r, int c, int row, int col,
                                           int m, int n, int a0, int a1, const Epilogue& e,
                                           int*) {
    *reinterpret_cast<int2*>(swizzled_128(chunk, r, c * 4)) =
        make_int2(value_of(a0, row, col, m, n, e), value_of(a1, row, col + 1, m, n, e));
}

__device__ __forceinline__ void stage_pair(unsigned char* chunk, int r, int c, int row, int col,
                                           int m, int n, int a0, int a1, const Epilogue& e,
                                           bf16_t*) {
    const float s0 = col < n ? e.scale_a * e.scale_b[col * e.scale_b_step] : 0.0f;
    const float s1 = col + 1 < n ? e.scale_a * e.scale_b[(col + 1) * e.scale_b_step] : 0.0f;
    *reinterpret_cast<unsigned*>(swizzled_128(chunk, r, c * 2)) =
        pack2<bf16_t>(s0 * (float)value_of(a0, row, col, m, n, e),
                      s1 * (float)value_of(a1, row, col + 1, m, n, e));
}

// A consumer's 64 x 256 slice of the tile (rows row0.., columns col0..) to C by the TMA, in
// chunks of 64 rows x 128 bytes, alternating between the consumer's two staging buffers:
//   leader waits until the store that last read this buffer is done reading it -> barrier ->
//   all write their accumulators of the chunk (swizzled) -> proxy fence -> barrier ->
//   leader issues the TMA store and commits it, and nobody waits for it to finish.
// The stores of the last chunks are still running when the consumer returns to its main loop;
// the next tile's epilogue (or the kernel's end) waits for them.
template <typename OutT>
__device__ __forceinline__ void store_tile_by_tma(const int (&d)[128], unsigned char* staging,
                                                  const TmaDescriptor* map_c, int consumer,
                                                  int row0, int col0, int m, int n,
                                                  const Epilogue& e) {
    constexpr int COLS = WG_OUT_ROW_BYTES / sizeof(OutT);  // 32 int32 or 64 bf16 per chunk
    constexpr int CHUNKS = WG_BN / COLS;                    // 8 or 4: even, so buffer q % 2
    constexpr int GROUPS = COLS / 8;                        // 8-column accumulator groups
    static_assert(CHUNKS % 2 == 0, "the buffers alternate across tiles too");
    const bool leader = threadIdx.x % 128 == 0;
    const int lane = threadIdx.x % 32, r = ((threadIdx.x / 32) % 4) * 16 + lane / 4;
    const int barrier = consumer_barrier(consumer);  // this warpgroup's alone
    // quote: tma_store_chunks
#pragma unroll
    for (int q = 0; q < CHUNKS; ++q) {
        unsigned char* chunk = staging + (q % 2) * WG_OUT_CHUNK;
        if (leader) bulk_wait_read<1>();  // only the store of the other buffer may still read
        named_barrier_sync(barrier, 128);
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
            const int j = q * GROUPS + g, c = g * 8 + 2 * (lane % 4);
            const int row = row0 + r, col = col0 + q * COLS + c;
            stage_pair(chunk, r, c, row, col, m, n, d[4 * j], d[4 * j + 1], e, (OutT*)nullptr);
            stage_pair(chunk, r + 8, c, row + 8, col, m, n, d[4 * j + 2], d[4 * j + 3], e,
                       (OutT*)nullptr);
        }
        fence_proxy_async_shared();  // these writes, before the TMA reads them
        named_barrier_sync(barrier, 128);
        if (leader) {
            tma_store_3d(map_c, chunk, col0 + q * COLS, row0, 0);
            bulk_commit();
        }
    }
    // end quote: tma_store_chunks
}

// grid(min(tiles, SMs)), block(384), dynamic shared 4 x 48 KiB + 1 KiB for alignment (+ 32 KiB
// of staging when TMA_STORE). The tensor maps cover A as [m][k] and B as [n][k] int8, 128-byte
// swizzle, boxes of 128 (k) x 128 rows (A) and 128 x 256 rows (B); C's (TMA_STORE only) covers
// C as [m][n], 128-byte swizzle, boxes of 128 bytes x 64 rows.
template <typename OutT, bool TMA_STORE>
__device__ __forceinline__ void int8_gemm_wgmma(const TmaDescriptor* map_a,
                                                const TmaDescriptor* map_b,
                                                const TmaDescriptor* map_c, OutT* c, int m,
                                                int n, int k, const Epilogue& e) {
    // The 128-byte swizzle pattern repeats every 1024 bytes: tiles start on that boundary.
    unsigned char* base = aligned_dynamic_shared();
    signed char* sa = reinterpret_cast<signed char*>(base);
    signed char* sb = sa + WG_STAGES * WG_A_TILE;
    // The staging buffers (TMA_STORE only) follow the stages, on a 1024-byte boundary still.
    unsigned char* staging = reinterpret_cast<unsigned char*>(sb + WG_STAGES * WG_B_TILE);
    unsigned long long* full =
        reinterpret_cast<unsigned long long*>(staging + (TMA_STORE ? WG_STAGING : 0));
    unsigned long long* empty = full + WG_STAGES;

    const int tiles_m = (m + WG_BM - 1) / WG_BM, tiles_n = (n + WG_BN - 1) / WG_BN;
    const int tiles = tiles_m * tiles_n;
    const int steps = (k + WG_BK - 1) / WG_BK;
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < WG_STAGES; ++s) {
            mbarrier_init(&full[s], 1);              // the producer's arrival (+ TMA bytes)
            mbarrier_init(&empty[s], WG_CONSUMERS);  // each consumer warpgroup
        }
        fence_barrier_init();
    }
    __syncthreads();

    if (warpgroup == 0) {
        warpgroup_registers_release<INT8_WG_PRODUCER_REGISTERS>();
        if (threadIdx.x == 0) {
            PipelineState<WG_STAGES> ring;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                int tm, tn;
                tile_coords(t, tiles_m, tiles_n, tm, tn);
                // quote: wgmma_producer
                for (int step = 0; step < steps; ++step) {
                    const int stage = ring.stage();
                    mbarrier_wait(&empty[stage], ring.phase() ^ 1);
                    // Boxes past m, n or k arrive zero-filled and still count whole.
                    mbarrier_arrive_expect_tx(&full[stage], WG_A_TILE + WG_B_TILE);
                    tma_load_3d(sa + stage * WG_A_TILE, map_a, &full[stage], step * WG_BK,
                                tm * WG_BM, 0);
                    tma_load_3d(sb + stage * WG_B_TILE, map_b, &full[stage], step * WG_BK,
                                tn * WG_BN, 0);
                    ring.advance();
                }
                // end quote: wgmma_producer
            }
        }
    } else {
        warpgroup_registers_claim<INT8_WG_CONSUMER_REGISTERS>();
        const int consumer = warpgroup - 1;
        const int lane = threadIdx.x % 32, warp_in_group = (threadIdx.x / 32) % 4;
        PipelineState<WG_STAGES> ring;
        int d[128];
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            int tm, tn;
            tile_coords(t, tiles_m, tiles_n, tm, tn);
            // quote: wgmma_consumer
            int previous = -1;  // the stage whose wgmma may still be running
            for (int step = 0; step < steps; ++step) {
                const int stage = ring.stage();
                mbarrier_wait(&full[stage], ring.phase());
                const signed char* ta = sa + stage * WG_A_TILE + consumer * 64 * WG_BK;
                const signed char* tb = sb + stage * WG_B_TILE;
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < WG_BK / 32; ++kk) {
                    // A k32 step is 32 bytes along the swizzled 128-byte rows.
                    wgmma_s8_m64n256k32(d, wgmma_descriptor_k_major_sw128(ta + kk * 32),
                                        wgmma_descriptor_k_major_sw128(tb + kk * 32),
                                        step > 0 || kk > 0);
                }
                wgmma_commit();
                // Keep this step's wgmma running; wait for the previous step's and free its
                // stage, then go back to issue the next step.
                wgmma_wait<1>();
                fence_accumulators(d);
                if (previous >= 0 && threadIdx.x % 128 == 0) mbarrier_arrive(&empty[previous]);
                previous = stage;
                ring.advance();
            }
            // end quote: wgmma_consumer
            wgmma_wait<0>();
            fence_accumulators(d);
            if (previous >= 0 && threadIdx.x % 128 == 0) mbarrier_arrive(&empty[previous]);
            // quote: wgmma_epilogue
            if constexpr (TMA_STORE) {
                store_tile_by_tma<OutT>(d, staging + consumer * 2 * WG_OUT_CHUNK, map_c,
                                        consumer, tm * WG_BM + consumer * 64, tn * WG_BN, m, n,
                                        e);
            } else {
                // Epilogue straight from registers (the producer is already loading the next
                // tile): one 16-row slice per warp, rows and columns past m and n masked.
                const int row = tm * WG_BM + consumer * 64 + warp_in_group * 16 + lane / 4;
                const int col0 = tn * WG_BN + 2 * (lane % 4);
#pragma unroll
                for (int j = 0; j < WG_BN / 8; ++j) {
                    store_pair(c, m, n, row, col0 + 8 * j, d[4 * j], d[4 * j + 1], e);
                    store_pair(c, m, n, row + 8, col0 + 8 * j, d[4 * j + 2], d[4 * j + 3], e);
                }
            }
            // end quote: wgmma_epilogue
        }
        // The shared memory must outlive the last TMA stores' reads of it.
        if (TMA_STORE && threadIdx.x % 128 == 0) bulk_wait<0>();
    }
}

#define WGMMA_KERNEL(OutT, NAME)                                                               \
    KERNEL void __launch_bounds__(WG_THREADS, 1)                                               \
        int8_gemm_wgmma_##NAME(const __grid_constant__ Int8WgmmaParams<OutT> p) {              \
        int8_gemm_wgmma<OutT, false>(&p.map_a, &p.map_b, nullptr, p.c, p.m, p.n, p.k,          \
                                     epilogue_of(p.epilogue, p.k));                            \
    }
WGMMA_KERNEL(int, s32)
WGMMA_KERNEL(bf16_t, bf16)

// C is written only through map_c; `c` is passed so the host's launch names the buffer.
#define WGMMA_TMA_STORE_KERNEL(OutT, NAME)                                                     \
    KERNEL void __launch_bounds__(WG_THREADS, 1)                                               \
        int8_gemm_wgmma_tma_store_##NAME(const __grid_constant__ Int8WgmmaParams<OutT> p) {    \
        int8_gemm_wgmma<OutT, true>(&p.map_a, &p.map_b, &p.map_c, p.c, p.m, p.n, p.k,          \
                                    epilogue_of(p.epilogue, p.k));                             \
    }
WGMMA_TMA_STORE_KERNEL(int, s32)
WGMMA_TMA_STORE_KERNEL(bf16_t, bf16)
#endif

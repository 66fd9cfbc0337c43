// day13: element-wise activations, forward and backward, and a fused bias-dropout-add
// (the challenge's GELU, ReLU, leaky ReLU, HardTanh, SiLU, SwiGLU and fused bias-mask-add days).
//
// An element-wise kernel does a few flops per element and moves every byte once: it is a copy
// with arithmetic in the middle, and its speed is the copy's if (1) each access is 16 bytes,
// (2) every thread has several loads in flight before it needs the first, and (3) the math per
// element stays under what the SMs can issue in the time the bytes take to arrive. The day
// walks that path and shows what fusion buys: SwiGLU as torch runs it (two kernels, an
// intermediate written and read back) against one kernel.
//
// Math is in f32 whatever the storage; every op is one functor below, used by all versions:
//   GELU (tanh)  x * sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3)  [= x/2 (1 + tanh u)]
//   GELU (erf)   x/2 (1 + erf(x / sqrt 2)), as torch computes it
//   SwiGLU       silu(g) * x;  silu(g) = g * sigmoid(g)
//   backward     dx = dy * gelu'(x);  dg = dout x s (1 + g (1 - s)), dx = dout silu(g)
//   SiLU         x sigmoid(x); backward dy s (1 + x (1 - s)), s = sigmoid(x), as torch writes it
//   bias-dropout-add  out = residual + (x + bias[col]) * (mask ? scale : 0)
// and, in rectifiers.cu (appended to this file: one NVRTC program), ReLU, leaky ReLU, HardTanh
// and their backward passes, whose kernels take the ops' scalars (slope, bounds) as arguments.
//
// NVRTC provides the CUDA math library (expf, erff, tanhf) without any header. tanh.approx.f32
// (one MUFU instruction, relative error about 2^-11) is not used: in x/2 (1 + tanh u) its error
// is absolute, about |x| 2^-12, which for x < 0 is larger than the result itself (gelu(-3) =
// -0.004). The sigmoid form with expf (2 ulp) and __fdividef (2 ulp) costs ~15 instructions
// per element and keeps the result within a few ulp.
//
// Versions:
//   scalar    one thread per element, 2- or 4-byte accesses
//   vec       one thread per 2 packs of 16 bytes (8 bf16/f16 or 4 f32 each), both loaded before
//             either is used; the leftover n % pack elements are done by the one thread whose
//             pack index is just past the last whole pack
//   vec_fast  (GELU and SiLU ops) one pack per thread, __launch_bounds__(256, 8) (<= 32
//             registers, every warp slot of the SM filled), __expf in the sigmoid, and in the
//             erf GELU and its gradient a branch-free Phi (FastCdf) in place of erff
//   unfused   (SwiGLU only) silu(g) into a temporary of T, then temporary * x: torch's two
//             kernels, vectorized like `vec`, for what the extra round trip costs
//   bias_dropout_add scalar / vec: a thread owns columns (their bias in registers) and walks
//             4 rows at a time
//
// Run: cargo run --release -p day13 -- --op swiglu --kernel unfused,vec
//      cargo run --release -p day13 -- --op gelu_tanh,gelu_erf,gelu_tanh_bwd --kernel vec,vec_fast
//      cargo run --release -p day13 -- --op silu,silu_bwd,relu,hardtanh_bwd
//
// Every pointer comes from a whole allocation (256-byte aligned) except SwiGLU's dx, which sits
// n elements after dg in one output buffer: its stores check alignment at run time.
#include "common.cuh"
#include "dtype.cuh"

#define SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_CUBIC 0.044715f
#define INV_SQRT_2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f
// exp(80) = 5.5e34 is finite and its reciprocal normal: clamping the argument there changes a
// sigmoid of ~1e-35 (already 0 in every storage type) and keeps s * (1 - s) from 0 * inf = NaN.
#define EXP_ARG_MAX 80.0f

// The two ways to take e^a. `expf` is the accurate one (2 ulp, ~8 instructions: a range
// reduction around MUFU.EX2). `__expf` is ex2.approx(a log2 e): one multiply and MUFU.EX2, with
// the error 2 + floor(|1.173 a|) ulp (the CUDA math guide), the rounding of a log2 e magnified
// by |a|. `vec_fast` takes it; the day's NOTES.md derives why the tolerance still holds.
struct AccurateExp {
    __device__ static float exp(float a) { return expf(a); }
};
struct FastExp {
    __device__ static float exp(float a) { return __expf(a); }
};

// quote: sigmoid_pair
// sigmoid(v) and 1 - sigmoid(v) = e^-v sigmoid(v), without cancellation on either side.
template <typename Exp>
__device__ __forceinline__ float sigmoid_pair(float v, float& one_minus) {
    const float e = Exp::exp(fminf(-v, EXP_ARG_MAX));
    const float s = __fdividef(1.0f, 1.0f + e);  // 1 + e is in [1, 2^126]: __fdividef within 2 ulp
    one_minus = e * s;
    return s;
}
// end quote: sigmoid_pair

// ---- the ops: IN inputs to OUT outputs, one element, f32 ----
// The GELU ops that take an exponential are templates on it (`GeluTanh` is the accurate one,
// `GeluTanhWith<FastExp>` the one of `vec_fast`); the erf ones are templates on Phi (below).

// quote: gelu_tanh
template <typename Exp>
struct GeluTanhWith {
    static constexpr int IN = 1, OUT = 1;
    __device__ static void apply(const float (&in)[IN], float (&out)[OUT]) {
        const float x = in[0];
        const float u = SQRT_2_OVER_PI * fmaf(GELU_CUBIC * x, x * x, x);
        float unused;
        out[0] = x * sigmoid_pair<Exp>(2.0f * u, unused);
    }
};
using GeluTanh = GeluTanhWith<AccurateExp>;
// end quote: gelu_tanh

// in: dy, x
template <typename Exp>
struct GeluTanhBwdWith {
    static constexpr int IN = 2, OUT = 1;
    __device__ static void apply(const float (&in)[IN], float (&out)[OUT]) {
        const float dy = in[0], x = in[1];
        const float x2 = x * x;
        const float u = SQRT_2_OVER_PI * fmaf(GELU_CUBIC * x, x2, x);
        const float du = SQRT_2_OVER_PI * fmaf(3.0f * GELU_CUBIC, x2, 1.0f);
        float one_minus;
        const float s = sigmoid_pair<Exp>(2.0f * u, one_minus);
        out[0] = dy * fmaf(x * s * one_minus, 2.0f * du, s);
    }
};
using GeluTanhBwd = GeluTanhBwdWith<AccurateExp>;

// The exact GELU is x Phi(x), Phi the normal CDF; its gradient Phi(x) + x phi(x) also takes the
// Gaussian g = e^(-x^2/2) (phi = g / sqrt(2 pi)). The two ways to get Phi and g:
//   ErffCdf  torch's 0.5 (1 + erff(x / sqrt 2)) and expf: `scalar` and `vec`
//   FastCdf  normal_cdf_fast below, whose g comes with it: `vec_fast`
struct ErffCdf {
    __device__ static float cdf(float x) { return 0.5f * (1.0f + erff(x * INV_SQRT_2)); }
    __device__ static float cdf_and_gauss(float x, float& gauss) {
        gauss = expf(-0.5f * x * x);
        return cdf(x);
    }
};

// 2^v (common.cuh's ex2_approx) and 1/v in one MUFU instruction each. The .ftz forms: without
// it ptxas wraps MUFU.EX2 in a rescaling for subnormal results (and MUFU.RCP for subnormal
// inputs), which here only concerns Phi tails under 2^-126 (|x| > 13.2), 0 in every storage
// type after x * Phi. Error bounds (PTX ISA): ex2.approx 2 ulp (exp2f's, which it implements),
// rcp.approx 1 ulp.
__device__ __forceinline__ float rcp_approx_ftz(float v) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}

// Phi(x) without erff. erff keeps two sets of polynomial coefficients (|z| under and over ~1)
// and picks every coefficient with a select, then 1 - 2^p for the large side: with the GELU's
// multiply, 25 SASS instructions per element. Here one formula covers all x, branch-free:
// 14, as many as the tanh GELU's `vec_fast`.
//
//   q = Phi(-|x|) = g R(t),  g = e^(-x^2/2) = 2^(-u^2),  u = |x| sqrt(log2(e) / 2),
//   t = 1 / (1 + P u),  Phi(x) = x >= 0 ? 1 - q : q.
//
// q / g is the Mills ratio times phi's 1/sqrt(2 pi): 1/2 at x = 0, ~0.4/|x| for large |x|, a
// smooth function of t in (0, 1] that a polynomial follows closely (A&S 26.2.17's form, fitted
// anew: theirs is accurate in absolute error only, 7.5e-8, relatively worse as q falls). R has
// degree 5, its coefficients and P fitted together by iteratively reweighted least squares
// (Lawson) in the RELATIVE error of q over |x| in [0, 10], with P scanned for the smallest
// maximum: |R / (q / g) - 1| <= 6.9e-6 there, 7.2e-6 evaluated in f32 as below. Relative
// error matters because for x < 0 the kernel returns q itself (times x): 1 + erf(z) would
// subtract, this never does; for x >= 0, 1 - q errs by q times that, absolutely.
// Rounding: -u^2 carries the roundings of the f32 constant and of u (each doubled by the
// square) and of u^2, 5 2^-24 of u^2 in all, which ln 2 turns into relative error of g: under
// 3.2e-6 while |x| <= 4.6 (beyond, |x Phi(x)| < 1e-5 for x < 0, inside the f32 atol);
// ex2.approx adds 2 ulp, rcp.approx 1 ulp (R's slope t R'/R, between 1.2 and 2.3, makes it
// 2.3 ulp of R), the last roundings ~3 ulp. Bound ~1.1e-5 relative in q for |x| <= 4.6 (the
// replay finds 7.9e-6; 1.7e-5 at |x| = 10, where q < 1e-23), against the f32 tolerance 1e-5 +
// 1e-5 |ref|: for x < 0, |x q| <= 0.17, so the allowance is at least 7e-5 relative; the
// gradient's Phi + x phi takes q's error absolutely, <= 0.5 x 1.1e-5 against atol 1e-5.
// tests/fast_exp_bound.rs replays this in f32 with ex2 and rcp pushed to their bounds, on
// every 2^-12 of [-14, 14] and the special values, against the f64 reference: the worst
// element uses 11% (forward) and 24% (gradient, dy = 1) of its allowance.
// Large |x| needs no clamp: past |x| ~ 13.2, u^2 > 126 and ex2.approx.ftz returns 0 (so q = 0
// and Phi is exactly 0 or 1), u^2 = inf gives 0 too, t goes to 0 where R(0) = R0 is finite,
// and rcp(inf) = 0. So Phi(+inf) = 1 (gelu inf), Phi(-inf) = 0 (gelu -inf * 0 = NaN, as erff's
// 0.5 (1 + -1) gives, and torch), NaN gives NaN (x >= 0 is false, q is NaN), -0 takes the
// x >= 0 side: gelu(-0) = -0 * 0.5 = -0.
#define CDF_U_SCALE 0.8493218f  // sqrt(log2(e) / 2): u^2 = x^2 log2(e) / 2
#define CDF_P 0.41503704f
#define CDF_R0 0.0004030881f
#define CDF_R1 0.13441178f
#define CDF_R2 0.17899115f
#define CDF_R3 0.0026791643f
#define CDF_R4 0.28647587f
#define CDF_R5 (-0.102962136f)

struct FastCdf {
    __device__ static float cdf_and_gauss(float x, float& gauss) {
        const float u = fabsf(x) * CDF_U_SCALE;
        const float t = rcp_approx_ftz(fmaf(CDF_P, u, 1.0f));
        float r = fmaf(CDF_R5, t, CDF_R4);
        r = fmaf(r, t, CDF_R3);
        r = fmaf(r, t, CDF_R2);
        r = fmaf(r, t, CDF_R1);
        r = fmaf(r, t, CDF_R0);
        gauss = ex2_approx(u * -u);
        const float q = gauss * r;
        return x >= 0.0f ? 1.0f - q : q;
    }
    __device__ static float cdf(float x) {
        float unused;
        return cdf_and_gauss(x, unused);
    }
};

template <typename Cdf>
struct GeluErfWith {
    static constexpr int IN = 1, OUT = 1;
    __device__ static void apply(const float (&in)[IN], float (&out)[OUT]) {
        const float x = in[0];
        out[0] = x * Cdf::cdf(x);
    }
};
using GeluErf = GeluErfWith<ErffCdf>;

// in: dy, x
template <typename Cdf>
struct GeluErfBwdWith {
    static constexpr int IN = 2, OUT = 1;
    __device__ static void apply(const float (&in)[IN], float (&out)[OUT]) {
        const float dy = in[0], x = in[1];
        float gauss;
        const float cdf = Cdf::cdf_and_gauss(x, gauss);
        const float density = INV_SQRT_2PI * gauss;
        out[0] = dy * fmaf(x, density, cdf);
    }
};
using GeluErfBwd = GeluErfBwdWith<ErffCdf>;

// SiLU and its gradient as torch computes them, s = 1 / (1 + e^-x) with e^-x not clamped, so
// that the infinities give what torch gives: silu(+inf) = inf * 1, silu(-inf) = -inf * 0 = NaN,
// and the gradient s (1 + x (1 - s)) is NaN at both (inf * 0). For x < -88.7, e^-x overflows to
// inf and s = 1 / inf = 0 (MUFU.RCP of inf is +0), giving torch's -0 for silu and 0 for the
// gradient; for 2^126 < 1 + e < 2^128 (x in about [-88.7, -87.3]) __fdividef returns 0 where
// the true s is under 1e-38: outputs under 1e-36, inside any atol. `1 - s` is torch's too: exact
// for s >= 1/2 (Sterbenz), so it adds no error where it could cancel.
template <typename Exp>
__device__ __forceinline__ float sigmoid_unclamped(float x) {
    return __fdividef(1.0f, 1.0f + Exp::exp(-x));
}

template <typename Exp>
struct SiluWith {
    static constexpr int IN = 1, OUT = 1;
    __device__ static void apply(const float (&in)[IN], float (&out)[OUT]) {
        out[0] = in[0] * sigmoid_unclamped<Exp>(in[0]);
    }
};
using Silu = SiluWith<AccurateExp>;

// in: dy, x
template <typename Exp>
struct SiluBwdWith {
    static constexpr int IN = 2, OUT = 1;
    __device__ static void apply(const float (&in)[IN], float (&out)[OUT]) {
        const float dy = in[0], x = in[1];
        const float s = sigmoid_unclamped<Exp>(x);
        out[0] = dy * s * fmaf(x, 1.0f - s, 1.0f);
    }
};
using SiluBwd = SiluBwdWith<AccurateExp>;

struct Mul {
    static constexpr int IN = 2, OUT = 1;
    __device__ static void apply(const float (&in)[IN], float (&out)[OUT]) {
        out[0] = in[0] * in[1];
    }
};

// in: g, x
struct Swiglu {
    static constexpr int IN = 2, OUT = 1;
    __device__ static void apply(const float (&in)[IN], float (&out)[OUT]) {
        const float g = in[0], x = in[1];
        float unused;
        out[0] = g * sigmoid_pair<AccurateExp>(g, unused) * x;
    }
};

// quote: swiglu
// in: dout, g, x; out: dg, dx
struct SwigluBwd {
    static constexpr int IN = 3, OUT = 2;
    __device__ static void apply(const float (&in)[IN], float (&out)[OUT]) {
        const float dout = in[0], g = in[1], x = in[2];
        float one_minus;
        const float s = sigmoid_pair<AccurateExp>(g, one_minus);
        out[0] = dout * x * s * fmaf(g, one_minus, 1.0f);
        out[1] = dout * g * s;
    }
};
// end quote: swiglu

// ---- the two ways to map an op over n elements ----

// The op is passed as a value: empty for the ops above (their `apply` is static), the slope
// or the bounds for the rectifiers, which read them from kernel arguments.
template <typename T, typename Op>
__device__ __forceinline__ void apply_at(const T* const (&in)[Op::IN], T* const (&out)[Op::OUT],
                                         index_t i, const Op& op) {
    float a[Op::IN], r[Op::OUT];
#pragma unroll
    for (int k = 0; k < Op::IN; ++k) a[k] = to_f32(in[k][i]);
    op.apply(a, r);
#pragma unroll
    for (int k = 0; k < Op::OUT; ++k) out[k][i] = from_f32<T>(r[k]);
}

// quote: map_scalar
// grid(ceil(n / 256)), block(256): thread i does element i.
template <typename T, typename Op>
__device__ __forceinline__ void map_scalar(const T* const (&in)[Op::IN], T* const (&out)[Op::OUT],
                                           index_t n, const Op& op = Op{}) {
    const index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) apply_at<T, Op>(in, out, i, op);
}
// end quote: map_scalar

// Packs each thread loads before it computes: 2 x 16 B per input, enough with 2048 threads per
// SM to keep ~64 KB per input in flight per SM (the copy needs ~25 KB at 3 TB/s and ~1 us).
#define PACKS_PER_THREAD 2

// quote: vec_load
// grid(ceil((n / N + 1) / (256 * P))), block(256), N = 16 / sizeof(T), P = PACKS (2 in `vec`):
// thread t of block b owns packs b * 256P + t, b * 256P + 256 + t, ... (coalesced: a warp's 32
// packs are 512 contiguous bytes). The thread whose pack index equals n / N does the n % N
// leftovers.
template <typename T, typename Op, int PACKS = PACKS_PER_THREAD>
__device__ __forceinline__ void map_vec(const T* const (&in)[Op::IN], T* const (&out)[Op::OUT],
                                        index_t n, const Op& op = Op{}) {
    constexpr int N = Pack16<T>::N;
    const index_t packs = n / N;
    const index_t first = (index_t)blockIdx.x * blockDim.x * PACKS + threadIdx.x;

    Pack16<T> p[PACKS][Op::IN];
#pragma unroll
    for (int j = 0; j < PACKS; ++j) {
        const index_t pack = first + (index_t)j * blockDim.x;
        if (pack < packs) {
#pragma unroll
            for (int k = 0; k < Op::IN; ++k) p[j][k] = load16(in[k] + pack * N);
        }
    }
    // end quote: vec_load
    // quote: vec_compute
#pragma unroll
    for (int j = 0; j < PACKS; ++j) {
        const index_t pack = first + (index_t)j * blockDim.x;
        if (pack < packs) {
            Pack16<T> q[Op::OUT];
#pragma unroll
            for (int e = 0; e < N; ++e) {
                float a[Op::IN], r[Op::OUT];
#pragma unroll
                for (int k = 0; k < Op::IN; ++k) a[k] = to_f32(p[j][k].v[e]);
                op.apply(a, r);
#pragma unroll
                for (int k = 0; k < Op::OUT; ++k) q[k].v[e] = from_f32<T>(r[k]);
            }
#pragma unroll
            for (int k = 0; k < Op::OUT; ++k) {
                T* dst = out[k] + pack * N;
                if (((unsigned long long)dst & 15) == 0) {
                    store16(dst, q[k]);
                } else {
#pragma unroll
                    for (int e = 0; e < N; ++e) dst[e] = q[k].v[e];
                }
            }
        } else if (pack == packs) {
            for (index_t i = packs * N; i < n; ++i) apply_at<T, Op>(in, out, i, op);
        }
    }
    // end quote: vec_compute
}

// ---- the kernels: one per op, version and storage type ----

#define UNPAREN(...) __VA_ARGS__

// One input x to one output y. SCALARS: the kernel's scalar arguments after n, each with a
// leading comma (`(, float negative_slope)`); FIELDS: the op's members, built from them
// (`(negative_slope)`); both `()` for an op without any; PACKS: the `_vec` kernel's packs per
// thread (PACKS_PER_THREAD through UNARY_WITH). The grids: map_scalar's and map_vec's.
#define UNARY_PACKS(NAME, OP, T, TNAME, N, SCALARS, FIELDS, PACKS)                               \
    KERNEL void NAME##_##TNAME(const T* __restrict__ x, T* __restrict__ y,                      \
                               index_t n UNPAREN SCALARS) {                                     \
        const T* const in[1] = {x};                                                             \
        T* const out[1] = {y};                                                                  \
        map_scalar<T, OP>(in, out, n, OP{UNPAREN FIELDS});                                      \
    }                                                                                           \
    KERNEL void NAME##_vec_##TNAME##x##N(const T* __restrict__ x, T* __restrict__ y,            \
                                         index_t n UNPAREN SCALARS) {                           \
        const T* const in[1] = {x};                                                             \
        T* const out[1] = {y};                                                                  \
        map_vec<T, OP, PACKS>(in, out, n, OP{UNPAREN FIELDS});                                  \
    }
#define UNARY_WITH(NAME, OP, T, TNAME, N, SCALARS, FIELDS)                                      \
    UNARY_PACKS(NAME, OP, T, TNAME, N, SCALARS, FIELDS, PACKS_PER_THREAD)
#define UNARY(NAME, OP, T, TNAME, N) UNARY_WITH(NAME, OP, T, TNAME, N, (), ())

// Two inputs (a, b) to one output: the backward passes (dy, x), SwiGLU (g, x), the unfused
// multiply; SCALARS and FIELDS as above.
#define BINARY_WITH(NAME, OP, T, TNAME, N, SCALARS, FIELDS)                                     \
    KERNEL void NAME##_##TNAME(const T* __restrict__ a, const T* __restrict__ b,                \
                               T* __restrict__ y, index_t n UNPAREN SCALARS) {                  \
        const T* const in[2] = {a, b};                                                          \
        T* const out[1] = {y};                                                                  \
        map_scalar<T, OP>(in, out, n, OP{UNPAREN FIELDS});                                      \
    }                                                                                           \
    KERNEL void NAME##_vec_##TNAME##x##N(const T* __restrict__ a, const T* __restrict__ b,      \
                                         T* __restrict__ y, index_t n UNPAREN SCALARS) {        \
        const T* const in[2] = {a, b};                                                          \
        T* const out[1] = {y};                                                                  \
        map_vec<T, OP>(in, out, n, OP{UNPAREN FIELDS});                                         \
    }
#define BINARY(NAME, OP, T, TNAME, N) BINARY_WITH(NAME, OP, T, TNAME, N, (), ())

// `vec_fast` (the GELU and SiLU ops): the `vec` mapping with FAST_PACKS_PER_THREAD packs per
// thread, __expf for the exponentials, and __launch_bounds__(256, 8) so that ptxas keeps the
// kernel in 32 registers: 8 blocks of 256 = 2048 threads, every warp slot of the SM filled.
#define FAST_PACKS_PER_THREAD 1
#define FAST_MIN_BLOCKS 8

// quote: vec_fast
// grid(ceil((n / N + 1) / 256)), block(256): as `vec`, one pack per thread.
#define FAST_UNARY(NAME, OP, T, TNAME, N)                                                       \
    KERNEL void __launch_bounds__(256, FAST_MIN_BLOCKS)                                         \
        NAME##_vec_fast_##TNAME##x##N(const T* __restrict__ x, T* __restrict__ y, index_t n) {  \
        const T* const in[1] = {x};                                                             \
        T* const out[1] = {y};                                                                  \
        map_vec<T, OP, FAST_PACKS_PER_THREAD>(in, out, n);                                      \
    }
// end quote: vec_fast

#define FAST_BINARY(NAME, OP, T, TNAME, N)                                                      \
    KERNEL void __launch_bounds__(256, FAST_MIN_BLOCKS)                                         \
        NAME##_vec_fast_##TNAME##x##N(const T* __restrict__ a, const T* __restrict__ b,         \
                                      T* __restrict__ y, index_t n) {                           \
        const T* const in[2] = {a, b};                                                          \
        T* const out[1] = {y};                                                                  \
        map_vec<T, OP, FAST_PACKS_PER_THREAD>(in, out, n);                                      \
    }

// SwiGLU backward: (dout, g, x) to one buffer holding dg (n elements) then dx (n elements).
#define SWIGLU_BWD(T, TNAME, N)                                                                 \
    KERNEL void swiglu_bwd_##TNAME(const T* __restrict__ dout, const T* __restrict__ g,         \
                                   const T* __restrict__ x, T* __restrict__ dgx, index_t n) {   \
        const T* const in[3] = {dout, g, x};                                                    \
        T* const out[2] = {dgx, dgx + n};                                                       \
        map_scalar<T, SwigluBwd>(in, out, n);                                                   \
    }                                                                                           \
    KERNEL void swiglu_bwd_vec_##TNAME##x##N(const T* __restrict__ dout,                        \
                                             const T* __restrict__ g, const T* __restrict__ x,  \
                                             T* __restrict__ dgx, index_t n) {                  \
        const T* const in[3] = {dout, g, x};                                                    \
        T* const out[2] = {dgx, dgx + n};                                                       \
        map_vec<T, SwigluBwd>(in, out, n);                                                      \
    }

// ---- bias-dropout-add ----

// The N mask bytes of one pack, from one 4- or 8-byte load.
template <int N> __device__ __forceinline__ void load_mask(const unsigned char* p, unsigned char (&m)[N]);
template <> __device__ __forceinline__ void load_mask<1>(const unsigned char* p, unsigned char (&m)[1]) {
    m[0] = *p;
}
template <> __device__ __forceinline__ void load_mask<4>(const unsigned char* p, unsigned char (&m)[4]) {
    const unsigned w = *reinterpret_cast<const unsigned*>(p);
#pragma unroll
    for (int k = 0; k < 4; ++k) m[k] = (w >> (8 * k)) & 0xff;
}
template <> __device__ __forceinline__ void load_mask<8>(const unsigned char* p, unsigned char (&m)[8]) {
    const uint2 w = *reinterpret_cast<const uint2*>(p);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        m[k] = (w.x >> (8 * k)) & 0xff;
        m[4 + k] = (w.y >> (8 * k)) & 0xff;
    }
}

#define BDA_ROWS 4

// grid(ceil(cols / N / threads), min(ceil(rows / 4), 65535)), block(threads <= 256): thread t
// owns columns [c, c + N), c = (blockIdx.x * threads + t) * N, loads their bias once, and walks
// rows 4 at a time (4 rows of x, residual and mask in flight), striding by gridDim.y * 4. N is
// 16 / sizeof(T) when every row starts 16-byte aligned (cols % N == 0), else 1.
template <typename T, int N>
__device__ __forceinline__ void bias_dropout_add(const T* __restrict__ x, const T* __restrict__ bias,
                                                 const unsigned char* __restrict__ mask,
                                                 const T* __restrict__ residual, T* __restrict__ out,
                                                 index_t rows, index_t cols, float scale) {
    const index_t c = ((index_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (c >= cols) return;
    float b[N];
    {
        const Elems<T, N> be = load_elems<T, N>(bias + c);
#pragma unroll
        for (int k = 0; k < N; ++k) b[k] = to_f32(be.v[k]);
    }
    // quote: bias_dropout_add
    for (index_t r0 = (index_t)blockIdx.y * BDA_ROWS; r0 < rows; r0 += (index_t)gridDim.y * BDA_ROWS) {
        Elems<T, N> xs[BDA_ROWS], rs[BDA_ROWS];
        unsigned char ms[BDA_ROWS][N];
#pragma unroll
        for (int j = 0; j < BDA_ROWS; ++j) {
            if (r0 + j < rows) {
                const index_t at = (r0 + j) * cols + c;
                xs[j] = load_elems<T, N>(x + at);
                rs[j] = load_elems<T, N>(residual + at);
                load_mask<N>(mask + at, ms[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < BDA_ROWS; ++j) {
            if (r0 + j < rows) {
                Elems<T, N> o;
#pragma unroll
                for (int k = 0; k < N; ++k) {
                    const float keep = ms[j][k] ? scale : 0.0f;
                    o.v[k] = from_f32<T>(fmaf(to_f32(xs[j].v[k]) + b[k], keep, to_f32(rs[j].v[k])));
                }
                store_elems<T, N>(out + (r0 + j) * cols + c, o);
            }
        }
    }
    // end quote: bias_dropout_add
}

#define BIAS_DROPOUT_ADD(T, TNAME, N)                                                           \
    KERNEL void bias_dropout_add_##TNAME(const T* __restrict__ x, const T* __restrict__ bias,   \
                                         const unsigned char* __restrict__ mask,                \
                                         const T* __restrict__ residual, T* __restrict__ out,   \
                                         index_t rows, index_t cols, float scale) {             \
        bias_dropout_add<T, 1>(x, bias, mask, residual, out, rows, cols, scale);                \
    }                                                                                           \
    KERNEL void bias_dropout_add_vec_##TNAME##x##N(                                             \
        const T* __restrict__ x, const T* __restrict__ bias,                                    \
        const unsigned char* __restrict__ mask, const T* __restrict__ residual,                 \
        T* __restrict__ out, index_t rows, index_t cols, float scale) {                         \
        bias_dropout_add<T, N>(x, bias, mask, residual, out, rows, cols, scale);                \
    }

#define ALL_KERNELS(T, TNAME, N)                \
    UNARY(gelu_tanh, GeluTanh, T, TNAME, N)     \
    UNARY(gelu_erf, GeluErf, T, TNAME, N)       \
    UNARY(silu, Silu, T, TNAME, N)              \
    BINARY(silu_bwd, SiluBwd, T, TNAME, N)      \
    BINARY(gelu_tanh_bwd, GeluTanhBwd, T, TNAME, N) \
    BINARY(gelu_erf_bwd, GeluErfBwd, T, TNAME, N)   \
    BINARY(swiglu, Swiglu, T, TNAME, N)         \
    BINARY(mul, Mul, T, TNAME, N)               \
    SWIGLU_BWD(T, TNAME, N)                     \
    BIAS_DROPOUT_ADD(T, TNAME, N)               \
    FAST_UNARY(gelu_tanh, GeluTanhWith<FastExp>, T, TNAME, N)          \
    FAST_UNARY(gelu_erf, GeluErfWith<FastCdf>, T, TNAME, N)            \
    FAST_BINARY(gelu_tanh_bwd, GeluTanhBwdWith<FastExp>, T, TNAME, N)  \
    FAST_BINARY(gelu_erf_bwd, GeluErfBwdWith<FastCdf>, T, TNAME, N)    \
    FAST_UNARY(silu, SiluWith<FastExp>, T, TNAME, N)                   \
    FAST_BINARY(silu_bwd, SiluBwdWith<FastExp>, T, TNAME, N)

ALL_KERNELS(float, f32, 4)
ALL_KERNELS(f16_t, f16, 8)
ALL_KERNELS(bf16_t, bf16, 8)

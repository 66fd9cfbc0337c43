#line 1 "rectifiers.cu"
// day13, continued: the piecewise-linear activations of the challenge's activations day (ReLU,
// leaky ReLU, HardTanh) and their backward passes. lib.rs appends this file to activations.cu
// (NVRTC compiles one program), so the ops here are mapped by the same templates and macros:
// `scalar` (one element per thread) and `vec` (16-byte packs: one per thread in the forward
// passes, RECTIFIER_UNARY_PACKS below, two in the backward passes).
//
// Each op is a select and at most one multiply per element: the kernels are pure traffic, and
// `vec` should run at the copy's speed. What needs care is the points where the derivative
// does not exist and NaN, because a comparison with NaN is false and which way a test is
// written decides where a NaN goes. Every choice below is torch's (its CUDA kernels):
//   relu            x <= 0 ? 0 : x              clamp_min(x, 0): NaN stays NaN (-0.0 gives
//                                               +0 here; the check sees the zeros as equal)
//   relu_bwd        x <= 0 ? 0 : dy             threshold_backward(dy, x, 0): 0 at x = 0, dy
//                                               where x is NaN; a NaN or inf dy is dropped
//                                               (not multiplied by 0) where x <= 0
//   leaky_relu      x > 0 ? x : x * slope       NaN * slope = NaN
//   leaky_relu_bwd  x > 0 ? dy : dy * slope     dy * slope at x = 0 and where x is NaN
//   hardtanh        clamp(x, min_val, max_val)  NaN stays NaN, +-inf go to the bounds
//   hardtanh_bwd    x <= min_val || x >= max_val ? 0 : dy
//                                               0 at both bounds (the open interval), dy
//                                               where x is NaN
// The forward ReLU needs the kernel's input x; its backward needs only the sign of x (torch
// saves relu's output and tests it the same way), one bit per element: the README says what a
// 1-bit mask would save.
//
// The scalars (slope; min_val, max_val) are kernel arguments after n, in f32, the type torch's
// kernels compare and multiply in (`opmath_t`).
//
// Run: cargo run --release -p day13 -- --op relu,relu_bwd,leaky_relu,hardtanh_bwd
//      cargo run --release -p day13 -- --op hardtanh --min-val -2 --max-val 0.5

// in: x
struct Relu {
    static constexpr int IN = 1, OUT = 1;
    __device__ static void apply(const float (&in)[IN], float (&out)[OUT]) {
        const float x = in[0];
        out[0] = x <= 0.0f ? 0.0f : x;
    }
};

// quote: relu_bwd
// in: dy, x
struct ReluBwd {
    static constexpr int IN = 2, OUT = 1;
    __device__ static void apply(const float (&in)[IN], float (&out)[OUT]) {
        const float dy = in[0], x = in[1];
        out[0] = x <= 0.0f ? 0.0f : dy;
    }
};
// end quote: relu_bwd

struct LeakyRelu {
    static constexpr int IN = 1, OUT = 1;
    float negative_slope;
    __device__ void apply(const float (&in)[IN], float (&out)[OUT]) const {
        const float x = in[0];
        out[0] = x > 0.0f ? x : x * negative_slope;
    }
};

// in: dy, x
struct LeakyReluBwd {
    static constexpr int IN = 2, OUT = 1;
    float negative_slope;
    __device__ void apply(const float (&in)[IN], float (&out)[OUT]) const {
        const float dy = in[0], x = in[1];
        out[0] = x > 0.0f ? dy : dy * negative_slope;
    }
};

// min_val <= max_val (checked by the launcher); equal bounds give the bound everywhere.
struct Hardtanh {
    static constexpr int IN = 1, OUT = 1;
    float min_val, max_val;
    __device__ void apply(const float (&in)[IN], float (&out)[OUT]) const {
        const float x = in[0];
        out[0] = x < min_val ? min_val : (x > max_val ? max_val : x);
    }
};

// in: dy, x
struct HardtanhBwd {
    static constexpr int IN = 2, OUT = 1;
    float min_val, max_val;
    __device__ void apply(const float (&in)[IN], float (&out)[OUT]) const {
        const float dy = in[0], x = in[1];
        out[0] = (x <= min_val || x >= max_val) ? 0.0f : dy;
    }
};

// The forward rectifiers' `_vec` kernels take one pack per thread, not PACKS_PER_THREAD's two:
// with two, relu ran at 2859 GB/s (95.0% of copy) on 16384 x 4096 bf16, where one-input maps
// with one pack (gelu_tanh's and silu's vec_fast) ran at 2878 (H100, commit 830416f64b68).
// quote: rectifier_kernels
#define RECTIFIER_UNARY_PACKS 1

// relu(x, y, n), leaky_relu(x, y, n, negative_slope), hardtanh(x, y, n, min_val, max_val), and
// the backward passes with (dy, x) in front; grids as map_scalar's and map_vec's.
#define RECTIFIER_KERNELS(T, TNAME, N)                                                         \
    UNARY_PACKS(relu, Relu, T, TNAME, N, (), (), RECTIFIER_UNARY_PACKS)                        \
    BINARY(relu_bwd, ReluBwd, T, TNAME, N)                                                     \
    UNARY_PACKS(leaky_relu, LeakyRelu, T, TNAME, N, (, float negative_slope), (negative_slope), \
                RECTIFIER_UNARY_PACKS)                                                         \
    BINARY_WITH(leaky_relu_bwd, LeakyReluBwd, T, TNAME, N, (, float negative_slope),           \
                (negative_slope))                                                              \
    UNARY_PACKS(hardtanh, Hardtanh, T, TNAME, N, (, float min_val, float max_val),             \
                (min_val, max_val), RECTIFIER_UNARY_PACKS)                                     \
    BINARY_WITH(hardtanh_bwd, HardtanhBwd, T, TNAME, N, (, float min_val, float max_val),      \
                (min_val, max_val))

RECTIFIER_KERNELS(float, f32, 4)
RECTIFIER_KERNELS(f16_t, f16, 8)
RECTIFIER_KERNELS(bf16_t, bf16, 8)
// end quote: rectifier_kernels

// day00: vector addition, out[i] = a[i] + b[i], the smallest complete lesson.
//
// Every day repeats the four steps a challenge log lists for loading a kernel into a framework,
// here in Rust instead of a PyTorch extension:
//   1. launch configuration: how many blocks of how many threads cover the data (below, above
//      each kernel, and in src/lib.rs where the numbers are chosen);
//   2. launcher: a typed Rust function that checks sizes and launches (src/lib.rs);
//   3. build: NVRTC compiles this file at run time for the GPU it finds (common/src/gpu/nvrtc.rs);
//   4. verify: the output is compared with an f64 CPU reference before anything is timed.
//
// Versions:
//   naive        one thread per element, 4-byte loads
//   vec4         one thread per 4 elements, 16-byte loads and stores (float4)
//   grid_stride  a fixed grid that just fills the GPU; each thread strides over the array
//
// Run: cargo run --release -p day00 -- --kernel vec4
//
// The launcher passes whole cudarc allocations, which start 256-byte aligned, so the float4
// casts below are aligned.
#include "common.cuh"

// grid(ceil(n / 256)), block(256): thread i adds element i.
// quote: naive
KERNEL void vector_add_f32(const float* __restrict__ a, const float* __restrict__ b,
                           float* __restrict__ out, index_t n) {
    const index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
// end quote: naive

// grid(ceil((n / 4 + 1) / 256)), block(256): thread i adds float4 number i; the one thread
// just past the last whole float4 adds the 0-3 leftover elements.
// quote: vec4
KERNEL void vector_add_f32x4(const float* __restrict__ a, const float* __restrict__ b,
                             float* __restrict__ out, index_t n) {
    const index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    const index_t n4 = n / 4;
    if (i < n4) {
        const float4 x = reinterpret_cast<const float4*>(a)[i];
        const float4 y = reinterpret_cast<const float4*>(b)[i];
        reinterpret_cast<float4*>(out)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    } else if (i == n4) {
        for (index_t j = 4 * n4; j < n; ++j) out[j] = a[j] + b[j];
    }
}
// end quote: vec4

// grid(SMs * resident blocks per SM), block(256): every thread loops over float4s with the
// stride of the whole grid, then over the leftover elements. One wave of blocks, no tail wave.
// quote: grid_stride
KERNEL void vector_add_grid_stride_f32x4(const float* __restrict__ a, const float* __restrict__ b,
                                         float* __restrict__ out, index_t n) {
    const index_t start = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    const index_t stride = (index_t)gridDim.x * blockDim.x;
    const index_t n4 = n / 4;
    for (index_t i = start; i < n4; i += stride) {
        const float4 x = reinterpret_cast<const float4*>(a)[i];
        const float4 y = reinterpret_cast<const float4*>(b)[i];
        reinterpret_cast<float4*>(out)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    for (index_t j = 4 * n4 + start; j < n; j += stride) out[j] = a[j] + b[j];
}
// end quote: grid_stride

//! Day 15: per-tensor INT8 quantization. The launchers for `quantize.cu` (symmetric and
//! asymmetric quantization, dequantization) and `int8_matmul.cu` (C = (A - za)(B - zb) in
//! int32 with dp4a), and [`problem`]: the day's problems for the shared runner of multi-op
//! days.

pub mod int8_matmul;
pub mod problem;
pub mod quantize;

use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;

/// The default `--rows` and `--cols` of the tensor to quantize (the day's flags, and the bench).
pub const DEFAULT_ROWS: u64 = 16384;
pub const DEFAULT_COLS: u64 = 4096;

pub const QUANTIZE_SOURCE: KernelSource = common::kernel_source!("quantize.cu");

pub const MATMUL_SOURCE: KernelSource = common::kernel_source!("int8_matmul.cu");

/// `quantize.cu`, every kernel, with its launcher's numbers as defines.
pub fn quantize_build() -> KernelBuild {
    KernelBuild::device(QUANTIZE_SOURCE, quantize::all_functions())
        .with_options(quantize::defines())
}

/// `int8_matmul.cu`, both versions, with its launcher's numbers as defines.
pub fn matmul_build() -> KernelBuild {
    KernelBuild::device(
        MATMUL_SOURCE,
        int8_matmul::Version::ALL.map(|v| v.function()),
    )
    .with_options(int8_matmul::defines())
}

/// What the day compiles: both files, every kernel, for the GPU's own architecture. The
/// loaders compile the same, the compile test checks this list, and `cargo xtask bundle`
/// compiles it ahead of time for the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![quantize_build(), matmul_build()]
}

common::test_kernel_builds!();

//! Day 15: per-tensor INT8 quantization. The launchers for `quantize.cu` (symmetric and
//! asymmetric quantization, dequantization) and `int8_matmul.cu` (C = (A - za)(B - zb) in
//! int32 with dp4a).

pub mod int8_matmul;
pub mod quantize;

use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;

/// The default `--rows` and `--cols` of the tensor to quantize (main.rs, and the bench).
pub const DEFAULT_ROWS: u64 = 16384;
pub const DEFAULT_COLS: u64 = 4096;

pub const QUANTIZE_SOURCE: KernelSource = KernelSource {
    file_name: "quantize.cu",
    code: include_str!("quantize.cu"),
};

pub const MATMUL_SOURCE: KernelSource = KernelSource {
    file_name: "int8_matmul.cu",
    code: include_str!("int8_matmul.cu"),
};

/// What the day compiles: both files, every kernel, for the GPU's own architecture. The
/// loaders compile the same, the compile test checks this list, and `cargo xtask bundle`
/// compiles it ahead of time for the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![
        KernelBuild::device(QUANTIZE_SOURCE, quantize::all_functions()),
        KernelBuild::device(
            MATMUL_SOURCE,
            int8_matmul::Version::ALL.iter().map(|v| v.function()),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_compiles_for_sm90_without_spilling() {
        common::testing::assert_builds_compile_without_spills(&kernel_builds());
    }
}

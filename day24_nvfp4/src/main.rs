//! `cargo run --release -p day24`: NVFP4 quantize and dequantize (checked byte for byte
//! against the CPU reference), the GEMV on packed weights next to a bf16 GEMV of the same
//! shape, and the GEMM through bf16 tensor cores; each checked, then timed.

fn main() -> std::process::ExitCode {
    common::family::ops::main::<day24::problem::Day24>()
}

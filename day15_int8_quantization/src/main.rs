//! `cargo run --release -p day15`: per-tensor INT8 quantization (symmetric int8, asymmetric
//! uint8), dequantization and the INT8 matmul, each version checked exactly against the CPU
//! reference, then timed.

fn main() -> std::process::ExitCode {
    common::family::ops::main::<day15::problem::Day15>()
}

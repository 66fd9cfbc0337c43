//! `cargo run --release -p day07`: cuBLAS, day 6's coalesced kernel and the tiled kernels (tile
//! 8, 16, 32) on the day's problems, checked and timed; `--sweep` plots TFLOP/s against size.
//! The flags and the run are shared by the matmul days (`common::matmul`).

fn main() -> std::process::ExitCode {
    common::family::matmul::main::<day07::Day07>()
}

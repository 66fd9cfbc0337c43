//! `cargo run --release -p day09`: cuBLAS, day 7's tiled kernel and every SGEMM version on
//! the day's problems (4096, 2048, 1000 x 1001 x 999), checked and timed; `--sweep` plots
//! TFLOP/s against size. The flags and the run are shared by the matmul days
//! (`common::matmul`).

fn main() -> std::process::ExitCode {
    common::family::matmul::main::<day09::Day09>()
}

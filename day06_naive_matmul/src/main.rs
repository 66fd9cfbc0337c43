//! `cargo run --release -p day06`: cuBLAS and both naive kernels on the day's problems (or
//! `--size`, `--m --n --k`), checked against the CPU reference and timed; `--sweep` plots
//! TFLOP/s against size. The flags and the run are shared by the matmul days
//! (`common::matmul`).

fn main() -> std::process::ExitCode {
    common::family::matmul::main::<day06::Day06>()
}

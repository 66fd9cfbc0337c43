//! `cargo run --release -p day08`: cuBLAS and every matmul of days 6 and 7 on 4096^3, with
//! the profile columns; `--roofline roofline.svg` draws them on a roofline, `--sweep` plots
//! TFLOP/s from 256 to 8192. The flags and the run are shared by the matmul days
//! (`common::matmul`).

fn main() -> std::process::ExitCode {
    common::family::matmul::main::<day08::Day08>()
}

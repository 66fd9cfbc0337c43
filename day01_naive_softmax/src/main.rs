//! `cargo run --release -p day01`: check the one-thread-per-row softmax against the CPU
//! reference on 32768 x 4096 (or `--rows --cols`), time it, print the table; `--sweep` plots
//! GB/s against row length. The flags and the run are shared by the softmax days
//! (`common::softmax`).

fn main() -> std::process::ExitCode {
    common::family::softmax::main::<day01::Day01>()
}

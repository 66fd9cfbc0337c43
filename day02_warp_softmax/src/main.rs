//! `cargo run --release -p day02`: check every version against the CPU reference on the day's
//! problems (or `--rows --cols --dtype`), time it, print the tables; `--sweep` plots GB/s
//! against row length. The flags and the run are shared by the softmax days
//! (`common::softmax`).

fn main() -> std::process::ExitCode {
    common::family::softmax::main::<day02::Day02>()
}

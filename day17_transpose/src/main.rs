//! `cargo run --release -p day17`: matrix copy, transpose and array reversal, every version
//! checked bit for bit against the CPU, then timed. The flags, the problems and their runs are
//! in `run.rs`, run by `common::family::ops`.

fn main() -> std::process::ExitCode {
    common::family::ops::main::<day17::Day17>()
}

//! `cargo run --release -p day22`: every top-k version on the three default problems (or
//! `--rows --width --k`), checked bit for bit against the CPU reference, timed, one table each.
//! The flags, the problems and their runs are in `run.rs`, run by `common::family::ops`.

fn main() -> std::process::ExitCode {
    common::family::ops::main::<day22::TopK>()
}

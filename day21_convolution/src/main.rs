//! `cargo run --release -p day21`: check every convolution version against the f64 reference
//! on the day's four problems (or one `--op` with its sizes), time it, print the tables. The
//! flags, the problems and their runs are in `run.rs`, run by `common::family::ops`.

fn main() -> std::process::ExitCode {
    common::family::ops::main::<day21::Conv>()
}

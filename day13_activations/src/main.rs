//! `cargo run --release -p day13`: check every version of every op against the f64 reference
//! on the day's problems (or `--op --rows --cols --dtype`), time it, print the tables. The
//! flags, the problems and their runs are in `run.rs`, run by `common::family::ops`.

fn main() -> std::process::ExitCode {
    common::family::ops::main::<day13::Activations>()
}

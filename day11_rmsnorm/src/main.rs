//! `cargo run --release -p day11`: check every version against the CPU reference on the day's
//! problems (RMSNorm forward and backward, 16384 x 4096 bf16; or `--rows --cols --dtype
//! --pass --eps`), time it, print the tables. The flags and the run are shared with day12
//! (`common::norm`).

fn main() -> std::process::ExitCode {
    common::family::norm::main::<day11::Day11>()
}

//! `cargo run --release -p day16`: every reduction and scan version on its default problem,
//! checked against the f64 (or exact integer) reference, timed, one table per problem.

fn main() -> std::process::ExitCode {
    common::family::ops::main::<day16::problem::Day16>()
}

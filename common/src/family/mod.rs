//! The family runners: a trait per family of days on one problem, and the `main`, the run
//! over the day's problems and the GPU test that come with it. A day of a family implements
//! the trait; its `main.rs` and `tests/gpu.rs` are then a line or two each.

pub mod softmax;
pub mod matmul;
pub mod norm;
pub mod attention;

//! The family runners: a trait per family of days on one problem (and [`ops`] for the days of
//! several ops), and the `main`, the run
//! over the day's problems and the GPU test that come with it. A day of a family implements
//! the trait; its `main.rs` and `tests/gpu.rs` are then a line or two each.
//! First, `tiers`: the register tiers that the row kernels of more than one family share.
//! Then `runner`: what the runners share (the GPU and the progress bar of the softmax and matmul
//! runners, a problem titled by its day).

pub mod tiers;
pub mod runner;
pub mod softmax;
pub mod matmul;
pub mod norm;
pub mod attention;
pub mod ops;

//! `cargo bench -p day01`: criterion statistics of the baseline and the fastest versions on
//! the day's first default problem (the inputs `cargo run -p day01` makes), timed on the GPU with
//! CUDA events, throughput in bytes (input read once, output written once). Skips with one
//! line without a GPU.

use common::bench_support::softmax_cases;
use common::family::softmax::SoftmaxDay;
use day01::Day01;

/// The baseline (the day's first version) and the fastest on this problem in the README's
/// table.
const VERSIONS: &[&str] = &["naive"];

common::gpu_criterion_bench!("day01_naive_softmax", Day01::load, |gpu, day| {
    softmax_cases(gpu, day, VERSIONS)
});

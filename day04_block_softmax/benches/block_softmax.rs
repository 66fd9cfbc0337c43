//! `cargo bench -p day04`: criterion statistics of the baseline and the fastest versions on
//! the day's first default problem (the inputs `cargo run -p day04` makes), timed on the GPU with
//! CUDA events, throughput in bytes (input read once, output written once). Skips with one
//! line without a GPU.

use common::bench_support::softmax_cases;
use common::family::softmax::SoftmaxDay;
use day04::Day04;

/// The baseline (the day's first version) and the fastest on this problem in the README's
/// table.
const VERSIONS: &[&str] = &["day03_warp", "block_online", "split_row"];

common::gpu_criterion_bench!("day04_block_softmax", Day04::load, |gpu, day| {
    softmax_cases(gpu, day, VERSIONS)
});

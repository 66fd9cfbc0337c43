//! `cargo bench -p day11`: criterion statistics of the baseline and the fastest versions of
//! the forward and of the backward pass on the day's default problems (the inputs `cargo run -p
//! day11` makes), timed on the GPU with CUDA events, throughput in bytes as the table counts
//! them. Skips with one line without a GPU.

use common::bench_support::norm_cases;
use common::family::norm::NormDay;
use day11::Day11;

/// The baseline (the day's first version) and the fastest on this problem in the README's
/// table.
const VERSIONS: &[&str] = &["naive", "vec_regs", "bwd_split", "bwd_vec_regs"];

common::gpu_criterion_bench!("day11_rmsnorm", Day11::load, |gpu, day| {
    norm_cases(gpu, day, VERSIONS)
});

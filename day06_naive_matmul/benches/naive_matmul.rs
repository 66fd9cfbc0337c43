//! `cargo bench -p day06`: criterion statistics of cuBLAS SGEMM, the baseline and the fastest
//! versions on the day's first default problem (the inputs `cargo run -p day06` makes), timed on
//! the GPU with CUDA events. Throughput is 2 m n k FLOPs per run, which criterion shows as
//! elements/s: read them as FLOP/s. Skips with one line without a GPU.

use common::bench_support::matmul_cases;
use common::family::matmul::MatmulDay;
use day06::Day06;

/// The baseline (the day's first version) and the fastest on this problem in the README's
/// table.
const VERSIONS: &[&str] = &["naive_uncoalesced", "naive_coalesced"];

common::gpu_criterion_bench!("day06_naive_matmul", Day06::load, |gpu, day| {
    matmul_cases(gpu, day, VERSIONS)
});

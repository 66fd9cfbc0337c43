//! `cargo bench -p day07`: criterion statistics of cuBLAS SGEMM, the baseline and the fastest
//! versions on the day's first default problem (the inputs `cargo run -p day07` makes), timed on
//! the GPU with CUDA events. Throughput is 2 m n k FLOPs per run, which criterion shows as
//! elements/s: read them as FLOP/s. Skips with one line without a GPU.

use common::bench_support::matmul_cases;
use common::family::matmul::MatmulDay;
use day07::Day07;

/// The baseline (the day's first version) and the fastest on this problem in the README's
/// table.
const VERSIONS: &[&str] = &["day06_coalesced", "tiled_32"];

common::gpu_criterion_bench!("day07_tiled_matmul", Day07::load, |gpu, day| {
    matmul_cases(gpu, day, VERSIONS)
});

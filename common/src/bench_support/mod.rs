//! What every day's `cargo bench` shares: a bench case (a named GPU run and the work it does),
//! the settings that keep a bench short, [`gpu_criterion_bench!`](crate::gpu_criterion_bench)
//! (the whole criterion `main` of a day's bench), the defaults of the days' command lines (so a
//! bench builds the same inputs as the day's `main`), and the cases of each family of days.
//!
//! Criterion is a dev-dependency of the days, not of `common`: the macro expands in the bench's
//! own crate, where `::criterion` resolves, so the days' binaries never link it.
//!
//! Its files: this one the case, the settings, the macro and the defaults; `softmax`, `matmul`,
//! `norm` and `attention` the cases (or inputs) of each family's default problem.

mod attention;
mod matmul;
mod norm;
mod softmax;

use std::time::Duration;

use anyhow::Result;
use clap::{Args, Command, FromArgMatches};
use cudarc::driver::CudaSlice;

use crate::cli::CommonArgs;
use crate::element::Element;
use crate::gpu::Gpu;
use crate::measure::inputs;

pub use attention::attention_default_problem;
pub use matmul::matmul_cases;
pub use norm::norm_cases;
pub use softmax::softmax_cases;

/// What one run does, for criterion's throughput column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Least traffic of one run (each input read once, each output written once): the
    /// memory-bound days. Criterion shows bytes/s.
    Bytes(u64),
    /// Floating-point (or integer) operations of one run: the compute-bound days (GEMMs,
    /// attention). Criterion has no FLOP unit: it shows these as elements/s, which here are
    /// FLOP/s.
    Flops(u64),
}

/// Enqueues one run on `gpu.stream`; the bench times batches of them with CUDA events.
pub type Run<'a> = Box<dyn FnMut() -> Result<()> + 'a>;

/// One `bench_function` of a day's group: a version on the day's default problem.
pub struct BenchCase<'a> {
    /// The version's name as `--kernel` takes it (`cargo bench -p dayNN -- NAME` filters on it).
    pub name: String,
    pub work: Work,
    pub run: Run<'a>,
}

impl<'a> BenchCase<'a> {
    pub fn new(name: impl Into<String>, work: Work, run: impl FnMut() -> Result<()> + 'a) -> Self {
        Self {
            name: name.into(),
            work,
            run: Box::new(run),
        }
    }
}

/// Samples per version: criterion's minimum. About twenty days run in one GPU session, and a
/// GPU run varies far less than a CPU one.
pub const SAMPLE_SIZE: usize = 10;
/// Criterion's warm-up per version; it also brings the GPU's clocks up.
pub const WARM_UP: Duration = Duration::from_secs(1);
/// Criterion's measurement time per version.
pub const MEASUREMENT: Duration = Duration::from_secs(3);

/// The whole criterion `main` of a day's bench, given
/// - `$group`: the benchmark group's name (the day's folder name, `"day05_vectorized_softmax"`);
/// - `$setup`: `FnOnce(&Gpu) -> anyhow::Result<S>`, what the cases borrow (the day's loaded
///   kernels, device inputs);
/// - `$cases`: `FnOnce(&Gpu, &S) -> anyhow::Result<Vec<BenchCase>>`.
///
/// Without a GPU it prints one `SKIPPED` line and exits 0 (`REQUIRE_GPU=1` makes that a
/// failure, as in the tests). Each case is a `bench_function` timed by CUDA events through
/// `iter_custom`, so criterion's own flags (filters, `--save-baseline`, `--baseline`) work as
/// usual.
#[macro_export]
macro_rules! gpu_criterion_bench {
    ($group:expr, $setup:expr, $cases:expr $(,)?) => {
        fn gpu_bench(c: &mut ::criterion::Criterion) {
            use $crate::bench_support as support;
            let group_name: &str = $group;
            let Some(gpu) = $crate::testing::gpu_or_skip(&format!("{group_name} criterion bench"))
            else {
                return;
            };
            let state = ($setup)(&gpu).expect("bench setup (kernels, inputs)");
            let mut cases: Vec<support::BenchCase> =
                ($cases)(&gpu, &state).expect("bench cases (plans, buffers)");
            let mut group = c.benchmark_group(group_name);
            group
                .sample_size(support::SAMPLE_SIZE)
                .warm_up_time(support::WARM_UP)
                .measurement_time(support::MEASUREMENT);
            for case in &mut cases {
                group.throughput(match case.work {
                    support::Work::Bytes(b) => ::criterion::Throughput::Bytes(b),
                    support::Work::Flops(f) => ::criterion::Throughput::Elements(f),
                });
                let run = &mut case.run;
                group.bench_function(case.name.as_str(), |bencher| {
                    bencher.iter_custom(|iters| {
                        $crate::measure::bench::time_batch(&gpu, iters, &mut *run).expect("GPU run")
                    })
                });
            }
            group.finish();
        }
        ::criterion::criterion_group!(benches, gpu_bench);
        ::criterion::criterion_main!(benches);
    };
}

/// The flags of `A` as a day's `main` gets them from an empty command line: its defaults,
/// read from the flags' own declarations rather than written here a second time.
pub fn defaults<A: Args + FromArgMatches>() -> Result<A> {
    let matches = A::augment_args(Command::new("bench")).try_get_matches_from(["bench"])?;
    Ok(A::from_arg_matches(&matches)?)
}

/// The `--seed` a day's `main` uses when none is given: the bench's inputs are the table's.
pub fn default_seed() -> Result<u64> {
    Ok(defaults::<CommonArgs>()?.seed)
}

/// `len` values uniform in `[lo, hi)` on the GPU, drawn from the default `--seed` plus
/// `offset` (a day's `main` draws its first input from the seed, its second from seed + 1):
/// the inputs the day's table is measured on.
pub fn uniform_input<T: Element>(
    gpu: &Gpu,
    len: usize,
    (lo, hi): (f64, f64),
    offset: u64,
) -> Result<CudaSlice<T>> {
    let seed = default_seed()?.wrapping_add(offset);
    gpu.upload(&inputs::uniform::<T>(len, lo, hi, seed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_seed_is_the_flag_s_default() {
        assert_eq!(default_seed().unwrap(), 0);
    }

    #[test]
    fn a_case_keeps_its_name_and_work() {
        let mut runs = 0;
        let mut case = BenchCase::new("vec4", Work::Bytes(12), || {
            runs += 1;
            Ok(())
        });
        assert_eq!((case.name.as_str(), case.work), ("vec4", Work::Bytes(12)));
        (case.run)().unwrap();
        drop(case);
        assert_eq!(runs, 1);
    }
}

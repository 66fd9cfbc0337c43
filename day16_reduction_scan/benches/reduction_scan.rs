//! `cargo bench -p day16`: criterion statistics of the baseline and the fastest sum and f32
//! inclusive scan on the day's default n = 2^28 (the inputs `cargo run -p day16` makes), timed
//! on the GPU with CUDA events, throughput in bytes (input read once, output written once).
//! Skips with one line without a GPU.

use anyhow::{Context, Result};
use common::Gpu;
use common::bench_support::{BenchCase, Work, default_seed, uniform_input};
use cudarc::driver::CudaSlice;
use day16::scan::quarter_inputs;
use day16::{FLOAT_RANGE, Reductions, ScanVersion, Scans, SumVersion};

/// The default `--n`.
const N: usize = day16::DEFAULT_N as usize;

/// The baseline (the first version) and the fastest of each problem in the README's tables.
const SUM_VERSIONS: &[&str] = &["tree", "vec4"];
const SCAN_VERSIONS: &[&str] = &["hierarchical", "decoupled_lookback_fast"];

struct Problem {
    reductions: Reductions,
    scans: Scans,
    sum_x: CudaSlice<f32>,
    scan_x: CudaSlice<f32>,
}

fn setup(gpu: &Gpu) -> Result<Problem> {
    Ok(Problem {
        reductions: Reductions::load(gpu)?,
        scans: Scans::load(gpu)?,
        sum_x: uniform_input(gpu, N, FLOAT_RANGE, 0)?,
        scan_x: gpu.upload(&quarter_inputs(N, default_seed()?))?,
    })
}

fn cases<'a>(gpu: &'a Gpu, p: &'a Problem) -> Result<Vec<BenchCase<'a>>> {
    let mut cases = Vec::new();
    for &name in SUM_VERSIONS {
        let version = SumVersion::from_name(name).context("a sum version")?;
        let mut plan = p.reductions.plan_sum(gpu, version, N)?;
        let mut out = gpu.alloc_poisoned::<f32>(1)?;
        // As the table: x read once, the sum written once.
        cases.push(BenchCase::new(
            format!("sum_{name}"),
            Work::Bytes(4 * N as u64 + 4),
            move || plan.launch(gpu, &p.sum_x, &mut out),
        ));
    }
    // The single-block scan (the day's first, 66 ms a run) is left out: criterion's ten samples
    // would take most of a minute; hierarchical is the baseline the fast scans improve on.
    for &name in SCAN_VERSIONS {
        let version = ScanVersion::from_name(name).context("a scan version")?;
        let mut plan = p.scans.plan::<f32>(gpu, version, N)?;
        let mut out = gpu.alloc_poisoned::<f32>(N)?;
        cases.push(BenchCase::new(
            format!("scan_f32_{name}"),
            Work::Bytes(2 * 4 * N as u64),
            move || plan.launch(gpu, &p.scan_x, &mut out),
        ));
    }
    Ok(cases)
}

common::gpu_criterion_bench!("day16_reduction_scan", setup, cases);

//! Timing on the GPU with CUDA events, and the copy-bandwidth ceiling.
//!
//! Each timed run is bracketed by its own pair of events, so the report can give the median
//! and the minimum, and so an L2 flush can sit between runs without being timed. Events are
//! made with `CU_EVENT_DEFAULT`: cudarc's default (`None`) makes events that cannot time.

use anyhow::{Result, bail};
use cudarc::driver::{CudaEvent, sys::CUevent_flags};
use serde::{Deserialize, Serialize};

use crate::gpu::Gpu;

/// How many untimed and timed runs.
#[derive(Debug, Clone, Copy)]
pub struct TimingOptions {
    pub warmup: usize,
    pub iters: usize,
    /// About how long the timed runs of one version may take in all. A slow version (a naive
    /// matmul at 8192 takes seconds) gets fewer runs, never fewer than [`MIN_TIMED_RUNS`], and
    /// no more warm-up than its first run.
    pub budget_ms: f64,
}

/// The fewest timed runs a version gets, however slow.
pub const MIN_TIMED_RUNS: usize = 3;

/// A first run longer than this is warm-up enough.
const LONG_RUN_MS: f64 = 50.0;

/// Run times of one kernel version, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Timing {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub runs: usize,
    /// Whether L2 was flushed before each run (working sets smaller than a few L2s).
    pub l2_flushed: bool,
}

/// Working sets under this many L2 sizes would be partly served from L2 on the next run.
const FLUSH_BELOW_L2_MULTIPLE: u64 = 4;

/// Times `run` (which enqueues work on `gpu.stream`) `opts.iters` times after `opts.warmup`
/// untimed runs. `working_set_bytes` decides whether L2 is flushed before each timed run.
pub fn time_on_gpu(
    gpu: &Gpu,
    opts: &TimingOptions,
    working_set_bytes: u64,
    mut run: impl FnMut() -> Result<()>,
) -> Result<Timing> {
    if opts.iters == 0 {
        bail!("--iters must be at least 1");
    }
    let flush = working_set_bytes < FLUSH_BELOW_L2_MULTIPLE * gpu.info.l2_bytes;
    // Writing twice the L2 size evicts whatever the previous run left there.
    let mut scratch = if flush {
        Some(
            gpu.stream
                .alloc_zeros::<u8>(2 * gpu.info.l2_bytes as usize)?,
        )
    } else {
        None
    };
    let new_event = || gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
    // The first warm-up run is timed, to size the rest to the budget.
    let mut iters = opts.iters;
    if opts.warmup > 0 {
        let (start, end) = (new_event()?, new_event()?);
        start.record(&gpu.stream)?;
        run()?;
        end.record(&gpu.stream)?;
        let first_ms = start.elapsed_ms(&end)? as f64;
        let affordable = (opts.budget_ms / first_ms.max(1e-3)) as usize;
        iters = iters.min(affordable.max(MIN_TIMED_RUNS));
        if first_ms < LONG_RUN_MS {
            for _ in 1..opts.warmup {
                run()?;
            }
        }
    }
    let events: Vec<(CudaEvent, CudaEvent)> = (0..iters)
        .map(|_| Ok((new_event()?, new_event()?)))
        .collect::<Result<_>>()?;
    for (start, end) in &events {
        if let Some(buf) = scratch.as_mut() {
            gpu.stream.memset_zeros(buf)?;
        }
        start.record(&gpu.stream)?;
        run()?;
        end.record(&gpu.stream)?;
    }
    gpu.stream.synchronize()?;
    let mut times = events
        .iter()
        .map(|(start, end)| Ok(start.elapsed_ms(end)? as f64))
        .collect::<Result<Vec<f64>>>()?;
    times.sort_by(f64::total_cmp);
    Ok(Timing {
        median_ms: median_of_sorted(&times),
        min_ms: times[0],
        max_ms: times[times.len() - 1],
        runs: times.len(),
        l2_flushed: flush,
    })
}

fn median_of_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// GPU time of `count` back-to-back runs of `run`, for criterion's `iter_custom` (which wants
/// the total time of the iterations it asks for). No warm-up and no flush: criterion warms up
/// itself and averages.
pub fn time_batch(
    gpu: &Gpu,
    count: u64,
    mut run: impl FnMut() -> Result<()>,
) -> Result<std::time::Duration> {
    let start = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    start.record(&gpu.stream)?;
    for _ in 0..count {
        run()?;
    }
    end.record(&gpu.stream)?;
    let ms = start.elapsed_ms(&end)? as f64;
    Ok(std::time::Duration::from_secs_f64(ms * 1e-3))
}

/// Bytes per millisecond as GB/s (10^9 bytes per second).
pub fn gb_per_s(bytes: u64, ms: f64) -> f64 {
    bytes as f64 / (ms * 1e-3) / 1e9
}

/// Measures device-to-device copy bandwidth (bytes read + written) on buffers far larger than
/// L2. Every memory-bound table reports its kernels as a fraction of this.
pub(crate) fn measure_copy_bandwidth(gpu: &Gpu) -> Result<f64> {
    let (free, _) = gpu.ctx.mem_get_info()?;
    let bytes = (1usize << 30).min(free / 4);
    let src = gpu.stream.alloc_zeros::<u8>(bytes)?;
    let mut dst = gpu.stream.alloc_zeros::<u8>(bytes)?;
    let opts = TimingOptions {
        warmup: 3,
        iters: 20,
        budget_ms: f64::INFINITY,
    };
    let timing = time_on_gpu(gpu, &opts, 2 * bytes as u64, || {
        gpu.stream.memcpy_dtod(&src, &mut dst)?;
        Ok(())
    })?;
    Ok(gb_per_s(2 * bytes as u64, timing.median_ms))
}

/// The copy ceiling, here beside the measurement it runs, so that `gpu` needs nothing of
/// `bench`.
impl Gpu {
    /// Device-to-device copy bandwidth in GB/s (bytes read + bytes written), measured once per
    /// process: the ceiling for memory-bound kernels in every table.
    pub fn copy_ceiling_gbs(&self) -> Result<f64> {
        if let Some(v) = self.copy_ceiling_gbs.get() {
            return Ok(*v);
        }
        let v = measure_copy_bandwidth(self)?;
        Ok(*self.copy_ceiling_gbs.get_or_init(|| v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_lengths() {
        assert_eq!(median_of_sorted(&[1.0, 2.0, 9.0]), 2.0);
        assert_eq!(median_of_sorted(&[1.0, 2.0, 4.0, 9.0]), 3.0);
    }

    #[test]
    fn bandwidth_units() {
        // 3 GB in 1 ms is 3000 GB/s.
        assert!((gb_per_s(3_000_000_000, 1000.0) - 3.0).abs() < 1e-12);
        assert!((gb_per_s(3_000_000_000, 1.0) - 3000.0).abs() < 1e-9);
    }
}

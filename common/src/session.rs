//! One problem of a day's run: check every version against the reference, time the ones that
//! pass, then print the table. A day's `main` makes the inputs and the reference, calls
//! [`Session::run_version`] once per version and [`Session::finish`], and hands the reports of
//! all its problems to [`crate::cli::finish_reports`] (JSON, exit code).

use std::path::Path;

use anyhow::{Context, Result};
use cudarc::driver::CudaSlice;

use crate::cli::CommonArgs;
use crate::element::Element;
use crate::gpu::Gpu;
use crate::gpu::kernel::{Kernel, LaunchShape};
use crate::measure::bench::{self, gb_per_s};
use crate::measure::check::{self, CheckReport, Tolerance};
use crate::measure::poison_check::PoisonSplit;
use crate::measure::report::{DayReport, RefusedVersion, Row};
use crate::{measure::peers, measure::save};

/// Kept here too, where the days plan their versions; it lives with the other errors.
pub use crate::error::Refused;

/// What a day is measuring, for the table's heading and the bandwidth column.
pub struct Problem {
    /// Package name, `day00`.
    pub day: &'static str,
    pub title: &'static str,
    /// The problem in words: `32768 x 4096, f32`.
    pub description: String,
    /// The problem for machines, shared with the peers scripts: `softmax/f32/32768x4096`.
    pub key: String,
    /// Least traffic of one run: inputs read once, outputs written once.
    pub bytes_per_run: u64,
    /// Floating-point operations of one run, for compute-bound days (the table then shows
    /// TFLOP/s).
    pub flops_per_run: Option<u64>,
}

/// The reference a version's output is compared with.
pub struct Expected<'a> {
    pub values: &'a [f64],
    /// Row-major shape of the output, for mismatch indices and saved arrays.
    pub shape: &'a [usize],
    pub tolerance: Tolerance,
    /// When the reference was computed only at some outputs (a sampled check of a large
    /// matmul): their flat indices, one per value.
    pub at: Option<&'a [usize]>,
}

impl<'a> Expected<'a> {
    /// A reference for every output element.
    pub fn full(values: &'a [f64], shape: &'a [usize], tolerance: Tolerance) -> Self {
        Self {
            values,
            shape,
            tolerance,
            at: None,
        }
    }

    /// The exact reference of the elements a poisoned run can check: those of `split` whose
    /// value is not the poison (the others are checked after a zero fill:
    /// [`PoisonSplit::require_written`]).
    pub fn exact_unless_poison(split: &'a PoisonSplit, shape: &'a [usize]) -> Self {
        Self {
            values: &split.checked_values,
            shape,
            tolerance: Tolerance::EXACT,
            at: Some(&split.checked_at),
        }
    }

    /// Compares `got` (the whole output) with this reference.
    pub fn check<T: Element>(&self, got: &[T]) -> CheckReport {
        match self.at {
            None => check::compare(got, self.values, self.shape, self.tolerance),
            Some(at) => check::compare_at(got, at, self.values, self.shape, self.tolerance),
        }
    }
}

/// One version to run: its name, its kernel and launch shape (none for a library call).
pub struct Version<'a> {
    pub name: &'a str,
    pub kernel: Option<(&'a Kernel, LaunchShape)>,
    /// Bytes the version asks of global memory in one run, as its tiling implies (loads and
    /// stores, cache hits included): with the FLOPs, the intensity of a roofline. None where
    /// only the least traffic is known.
    pub global_bytes: Option<u64>,
}

impl<'a> Version<'a> {
    /// A version whose row describes `kernel` (its only kernel, or its main one) launched at
    /// `shape`, with only the least traffic known.
    pub fn of(name: &'a str, kernel: &'a Kernel, shape: LaunchShape) -> Self {
        Self {
            name,
            kernel: Some((kernel, shape)),
            global_bytes: None,
        }
    }
}

pub struct Session<'g> {
    gpu: &'g Gpu,
    args: CommonArgs,
    report: DayReport,
    /// No per-version lines and no table (sweeps print their own summary).
    quiet: bool,
}

impl<'g> Session<'g> {
    /// Starts a run; measures the copy ceiling the table compares against.
    pub fn new(gpu: &'g Gpu, args: &CommonArgs, problem: Problem) -> Result<Self> {
        let copy_ceiling_gbs = gpu.copy_ceiling_gbs()?;
        let peers = match &args.peers {
            Some(path) => peers::for_key(&peers::load(path)?, &problem.key),
            None => Vec::new(),
        };
        let report = DayReport {
            day: problem.day.to_string(),
            title: problem.title.to_string(),
            problem: problem.description,
            key: problem.key,
            device: gpu.info.clone(),
            copy_ceiling_gbs,
            bytes_per_run: problem.bytes_per_run,
            flops_per_run: problem.flops_per_run,
            ceiling: None,
            baseline: None,
            rows: Vec::new(),
            refused: Vec::new(),
            peers,
            kernel_sources: None,
        };
        eprintln!("{}", report.heading());
        Ok(Self {
            gpu,
            args: args.clone(),
            report,
            quiet: false,
        })
    }

    /// Names the row every other is compared with (`cublas`); it is not the speedup baseline.
    pub fn with_ceiling(mut self, version: &str) -> Self {
        self.report.ceiling = Some(version.to_string());
        self
    }

    /// Stops the per-version lines and the final table.
    pub fn quiet(mut self) -> Self {
        self.quiet = true;
        self
    }

    /// Tells the table that `version` did not run on this problem, and why (a size it cannot
    /// take). Printed and listed under the table as not run; not a failure by itself, but a
    /// problem on which every version was refused fails ([`DayReport::passed`]).
    pub fn skip_version(&mut self, version: &str, why: &str) {
        if !self.quiet {
            eprintln!("{version:>12}  skipped: {why}");
        }
        self.report.refused.push(RefusedVersion {
            version: version.to_string(),
            why: why.to_string(),
        });
    }

    /// A version's plan, or None where it was [`Refused`] (then listed under the table as not
    /// run, as [`Session::skip_version`] does); any other error is the caller's, who may add
    /// what was being planned (`.with_context(|| format!("planning `{name}` for {op}"))`: the
    /// context lands on that error only, never on a refusal's line).
    pub fn plan_or_skip<P>(&mut self, version: &str, plan: Result<P>) -> Result<Option<P>> {
        match plan {
            Ok(plan) => Ok(Some(plan)),
            Err(e) if e.is::<Refused>() => {
                self.skip_version(version, &e.to_string());
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Saves an input array when `--save DIR` was given.
    pub fn save_input<T: Element>(&self, name: &str, shape: &[usize], data: &[T]) -> Result<()> {
        match self.save_dir() {
            Some(dir) => save::save_elements(dir, name, shape, data),
            None => Ok(()),
        }
    }

    /// Saves the reference (row-major in `shape`) when `--save DIR` was given.
    pub fn save_reference(&self, shape: &[usize], values: &[f64]) -> Result<()> {
        match self.save_dir() {
            Some(dir) => save::save_f64(dir, "reference", shape, values),
            None => Ok(()),
        }
    }

    fn save_dir(&self) -> Option<&Path> {
        self.args.save.as_deref()
    }

    /// Checks one version (poisoned output, one launch, compare), then, if it passed, times it.
    /// `launch` enqueues one run of the version writing into the buffer it is given.
    pub fn run_version<T: Element>(
        &mut self,
        version: Version,
        out: &mut CudaSlice<T>,
        expected: &Expected,
        launch: impl FnMut(&mut CudaSlice<T>) -> Result<()>,
    ) -> Result<()> {
        let check = |got: &[T]| expected.check(got);
        self.run_version_checked(version, out, expected.shape, check, launch)
    }

    /// [`Session::run_version`] with the comparison given as a function: for an output made of
    /// parts with their own references and tolerances (a backward pass's dx, then dweight).
    /// `shape` is the whole output's, for `--save`.
    pub fn run_version_checked<T: Element>(
        &mut self,
        version: Version,
        out: &mut CudaSlice<T>,
        shape: &[usize],
        check: impl FnOnce(&[T]) -> CheckReport,
        mut launch: impl FnMut(&mut CudaSlice<T>) -> Result<()>,
    ) -> Result<()> {
        if !self.quiet {
            let what = version
                .kernel
                .map_or_else(|| "library call".to_string(), |(k, _)| k.describe());
            eprintln!("{:>12}  {what}", version.name);
        }
        let got = launch_and_read(self.gpu, out, &mut launch)
            .with_context(|| format!("running version `{}`", version.name))?;
        let check = check(&got);
        if !self.quiet || !check.passed() {
            eprintln!("{:>12}  {check}", version.name);
        }
        if let Some(dir) = self.save_dir() {
            save::save_elements(dir, &format!("out_{}", version.name), shape, &got)?;
        }
        drop(got);

        let timing = if check.passed() {
            let timing = bench::time_on_gpu(
                self.gpu,
                &self.args.timing(),
                self.report.bytes_per_run,
                || launch(out),
            )?;
            Some(timing)
        } else {
            None
        };
        self.push_row(version, check, timing)
    }

    /// Checks a second output of a version already run (the log-sum-exp beside attention's
    /// O): printed, and when it fails, the version's row fails with it (and the run's exit
    /// code with the row).
    pub fn check_also(&mut self, version: &str, what: &str, check: CheckReport) {
        if !self.quiet || !check.passed() {
            eprintln!("{version:>12}  {what}: {check}");
        }
        if check.passed() {
            return;
        }
        if let Some(row) = self.report.rows.iter_mut().find(|r| r.version == version) {
            row.check = check;
        }
    }

    fn push_row(
        &mut self,
        version: Version,
        check: CheckReport,
        timing: Option<bench::Timing>,
    ) -> Result<()> {
        let gb = timing.map(|t| gb_per_s(self.report.bytes_per_run, t.median_ms));
        let tflops = timing.and_then(|t| {
            let flops = self.report.flops_per_run?;
            Some(flops as f64 / (t.median_ms * 1e-3) / 1e12)
        });
        let is_ceiling = self.report.ceiling.as_deref() == Some(version.name);
        if self.report.baseline.is_none() && timing.is_some() && !is_ceiling {
            self.report.baseline = Some(version.name.to_string());
        }
        let baseline_ms = self
            .report
            .baseline
            .as_ref()
            .and_then(|b| self.report.rows.iter().find(|r| &r.version == b))
            .and_then(|r| r.timing)
            .map(|t| t.median_ms);
        let speedup = match (timing, baseline_ms) {
            (Some(t), Some(b)) => Some(b / t.median_ms),
            (Some(_), None) if !is_ceiling => Some(1.0), // this row is the baseline
            _ => None,
        };
        let ceiling_ms = self
            .report
            .ceiling_row()
            .and_then(|r| r.timing)
            .map(|t| t.median_ms);
        let fraction_of_ceiling = match (timing, ceiling_ms) {
            (Some(t), Some(c)) => Some(c / t.median_ms),
            (Some(_), None) if is_ceiling => Some(1.0),
            _ => None,
        };
        let (function, launch, attrs, occupancy) = match version.kernel {
            Some((kernel, shape)) => (
                kernel.name.clone(),
                shape.to_string(),
                Some(kernel.attrs),
                Some(kernel.occupancy(&shape)?),
            ),
            None => (version.name.to_string(), "library".to_string(), None, None),
        };
        self.report.rows.push(Row {
            version: version.name.to_string(),
            function,
            launch,
            attrs,
            occupancy,
            check,
            timing,
            gb_per_s: gb,
            fraction_of_copy: gb.map(|g| g / self.report.copy_ceiling_gbs),
            tflops,
            fraction_of_ceiling,
            global_bytes: version.global_bytes,
            speedup_vs_baseline: speedup,
        });
        Ok(())
    }

    /// Prints the table (unless quiet) and returns the report. Failed checks are in it; the
    /// exit code is decided by [`crate::cli::finish_reports`].
    pub fn finish(mut self) -> DayReport {
        // After every version has loaded its kernels: the files they were compiled from.
        self.report.kernel_sources = crate::gpu::kernel_source::source_override();
        if !self.quiet {
            println!("{}", self.report.console_table());
        }
        self.report
    }
}

/// Poisons `out`, enqueues one `launch`, waits, and returns what the kernel wrote. Tests use
/// this directly; [`Session::run_version`] uses it before timing.
pub fn launch_and_read<T: Element>(
    gpu: &Gpu,
    out: &mut CudaSlice<T>,
    launch: &mut impl FnMut(&mut CudaSlice<T>) -> Result<()>,
) -> Result<Vec<T>> {
    gpu.poison(out)?;
    launch(out)?;
    gpu.synchronize()?;
    gpu.download(out)
}

//! A day over its problems: sizes checked, the GPU opened, each problem run in bf16 or f16,
//! the sweep plotted, the reports finished.

use super::*;
use crate::session::Refused;

/// What [`AttentionDay::run_problem`] is given besides its problem.
pub struct Run<'a> {
    pub gpu: &'a Gpu,
    pub common: &'a CommonArgs,
    /// The versions to run, in table order.
    pub versions: &'a [&'a str],
    sweep: bool,
}

impl<'a> Run<'a> {
    /// A session for one problem; quiet in a sweep, whose plot and table say it all.
    pub fn session(&self, problem: Problem) -> Result<Session<'a>> {
        let session = Session::new(self.gpu, self.common, problem)?;
        Ok(if self.sweep { session.quiet() } else { session })
    }

    /// Each version of the run on one problem, in table order: `plan` prepares it once (a
    /// [`Refused`] plan is listed under the table instead), `check_and_time` runs it through
    /// `session`.
    pub fn each_version<P>(
        &self,
        session: &mut Session<'a>,
        mut plan: impl FnMut(&str) -> Result<P>,
        mut check_and_time: impl FnMut(&mut Session<'a>, &str, P) -> Result<()>,
    ) -> Result<()> {
        for &name in self.versions {
            match plan(name) {
                Ok(planned) => check_and_time(session, name, planned)?,
                Err(e) if e.is::<Refused>() => session.skip_version(name, &e.to_string()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A day's whole run: its versions on every problem the flags ask for, then the sweep's plot
/// and the reports. Everything a user can get wrong is refused before `load` opens the GPU
/// (the same error on a machine without one).
pub fn run<D: AttentionDay>(
    args: &AttentionArgs,
    common: &CommonArgs,
    load: impl FnOnce(&Gpu) -> Result<D>,
) -> Result<()> {
    let mut versions = common.select_versions(D::VERSIONS)?;
    if args.sweep && common.kernel.is_empty() {
        // The naive version's score matrices are the point of the default run, not of the
        // sweep's longer sequences.
        versions.retain(|&v| v != "naive");
    }
    check_dtype(args.dtype)?;
    let mut shapes = args.problems()?;
    if args.without_size_flags() {
        shapes.extend(D::more_targets());
    }
    for shape in &shapes {
        D::check_shape(shape, &versions)?;
    }
    let gpu = common.open_gpu()?;
    let day = load(&gpu)?;
    let run = Run {
        gpu: &gpu,
        common,
        versions: &versions,
        sweep: args.sweep,
    };
    let mut reports = Vec::new();
    // A sweep point's x: the sequence length of the problem its report is of.
    let mut seqlens = Vec::new();
    for shape in &shapes {
        let report = match args.dtype {
            Dtype::Bf16 => day.run_problem::<bf16>(&run, shape)?,
            Dtype::F16 => day.run_problem::<f16>(&run, shape)?,
            other => {
                return Err(
                    UsageError::new(format!("attention takes bf16 or f16, not {other}")).into(),
                );
            }
        };
        reports.push(report);
        seqlens.push(shape.seqlens_q[0] as f64);
    }
    if args.sweep {
        plot_sweep::<D>(args, &gpu, &reports, &seqlens)?;
    }
    finish_reports(common, &reports)
}

/// TFLOP/s against sequence length for each version and each peer, and the summary table;
/// `seqlens[i]` is the sequence length of `reports[i]`.
fn plot_sweep<D: AttentionDay>(
    args: &AttentionArgs,
    gpu: &Gpu,
    reports: &[DayReport],
    seqlens: &[f64],
) -> Result<()> {
    let seqlen_of = sweep::x_by_report(reports, seqlens.iter().copied());
    let mut series =
        sweep::version_series(reports, sweep::row_versions(reports), &seqlen_of, |row| {
            row.tflops
        });
    series.extend(sweep::peer_series(
        reports,
        " (peer)",
        &seqlen_of,
        sweep::peer_tflops,
    ));
    let what = format!(
        "hd{}, hidden {HIDDEN}, {TOKENS} tokens{}, {}",
        args.head_dim(),
        if args.causal { ", causal" } else { "" },
        args.dtype,
    );
    let title = sweep::plot_title(D::DAY, D::TITLE, &what, &gpu.info.name);
    let line_plot = LinePlot {
        title: &title,
        x_label: "sequence length",
        y_label: D::FLOPS,
        log2_x: true,
        series: &series,
        hlines: &[],
    };
    sweep::publish(&args.plot, &line_plot, "seqlen", "TFLOP/s", 1)
}

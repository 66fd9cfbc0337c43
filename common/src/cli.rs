//! The flags every day shares, size checks done before anything is allocated, and the exit
//! codes: 0 all checks passed, 1 a check failed or the GPU failed, 2 nothing could run (no GPU,
//! no NVRTC, a bad request).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::error::{SetupError, UsageError};
use crate::measure::bench::TimingOptions;

/// About how long one version's timed runs may take: a fast kernel gets all `--iters`, a
/// naive matmul at 8192 gets a few seconds' worth (at least three runs).
pub const TIMING_BUDGET_MS: f64 = 3000.0;

/// The most timed or warm-up runs a version may ask for.
pub const MAX_RUNS: u32 = 100_000;

/// Flags shared by every day (`#[command(flatten)]` them into the day's own).
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Run only these kernel versions (comma-separated); all of them by default.
    #[arg(long, value_delimiter = ',', value_name = "NAME[,NAME]")]
    pub kernel: Vec<String>,
    /// Timed runs per version (the table shows their median and minimum).
    #[arg(long, default_value_t = 50, value_parser = |s: &str| crate::sizes::positive_at_most(s, MAX_RUNS))]
    pub iters: u32,
    /// Untimed runs before timing.
    #[arg(long, default_value_t = 5, value_parser = |s: &str| crate::sizes::count_at_most(s, MAX_RUNS))]
    pub warmup: u32,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print the report as JSON instead of the table; `--json FILE` writes it to FILE and
    /// still prints the table.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<PathBuf>,
    /// Write inputs, each version's output and the reference as .npy files into DIR.
    #[arg(long, value_name = "DIR")]
    pub save: Option<PathBuf>,
    /// PyTorch (or other peer) timings from peers/*.py; matching problems get their rows.
    #[arg(long, value_name = "FILE")]
    pub peers: Option<PathBuf>,
    /// Which GPU to use.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Compile every kernel now instead of loading it from the kernel cache (which lives in
    /// $DAYS_OF_GPU_KERNEL_CACHE, else the platform's cache folder).
    #[arg(long)]
    pub no_kernel_cache: bool,
}

impl CommonArgs {
    /// Opens `--device`, with the kernel cache off when `--no-kernel-cache` asks so. Every
    /// day opens its GPU through this, after its sizes are checked.
    pub fn open_gpu(&self) -> anyhow::Result<crate::gpu::Gpu> {
        if self.no_kernel_cache {
            crate::gpu::kernel_cache::disable();
        }
        crate::gpu::Gpu::open(self.device)
    }

    pub fn timing(&self) -> TimingOptions {
        TimingOptions {
            warmup: self.warmup as usize,
            iters: self.iters as usize,
            budget_ms: TIMING_BUDGET_MS,
        }
    }

    /// The versions to run, in the day's order: all of `available`, or those `--kernel` names.
    pub fn select_versions<'a>(&self, available: &[&'a str]) -> Result<Vec<&'a str>, UsageError> {
        if let Some(unknown) = self
            .kernel
            .iter()
            .find(|k| !available.contains(&k.as_str()))
        {
            return Err(UsageError::new(format!(
                "there is no kernel `{unknown}` here; choose from: {}",
                available.join(", ")
            )));
        }
        Ok(available
            .iter()
            .copied()
            .filter(|v| self.kernel.is_empty() || self.kernel.iter().any(|k| k == v))
            .collect())
    }
}

/// Prints the reports as JSON when `--json` asks for it, and fails if any check failed. Every
/// day's `main` ends with this, after one [`crate::session::Session`] per problem.
pub fn finish_reports(
    args: &CommonArgs,
    reports: &[crate::measure::report::DayReport],
) -> anyhow::Result<()> {
    use anyhow::Context;
    if let Some(path) = args.json.as_deref() {
        let json = serde_json::to_string_pretty(reports)?;
        if path == std::path::Path::new("-") {
            println!("{json}");
        } else {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    if let Some(err) = nothing_ran(reports) {
        return Err(err.into());
    }
    let failed: usize = reports
        .iter()
        .map(|r| r.rows.iter().filter(|row| !row.check.passed()).count())
        .sum();
    if failed > 0 {
        return Err(crate::error::CheckFailed { failed }.into());
    }
    Ok(())
}

/// A run that checked nothing is not a success: no problem at all, or a problem on which
/// every selected version was refused (a `--kernel` that needs another GPU, a size no version
/// takes). Exit 2, like any request that cannot run.
fn nothing_ran(reports: &[crate::measure::report::DayReport]) -> Option<UsageError> {
    if reports.is_empty() {
        return Some(UsageError::new("nothing ran: there was no problem to run"));
    }
    let empty = reports.iter().find(|r| r.rows.is_empty())?;
    let why: Vec<String> = empty
        .refused
        .iter()
        .map(|r| format!("{}: {}", r.version, r.why))
        .collect();
    Some(UsageError::new(format!(
        "nothing ran on {}: {}",
        empty.problem,
        if why.is_empty() {
            "no version was selected".to_string()
        } else {
            format!("every selected version refused it ({})", why.join("; "))
        }
    )))
}

/// The size flags of a GEMM day: one square problem, or m, n and k together, each at least 1.
/// Without them the day runs its default problems.
#[derive(clap::Args, Debug, Clone)]
pub struct GemmSizeArgs {
    /// A square problem m = n = k = SIZE, instead of the day's default problems.
    #[arg(long, value_parser = crate::sizes::positive_u64, conflicts_with_all = ["m", "n", "k"])]
    pub size: Option<u64>,
    /// Rows of A and C (with --n and --k, a problem instead of the defaults).
    #[arg(long, requires_all = ["n", "k"], value_parser = crate::sizes::positive_u64)]
    pub m: Option<u64>,
    /// Columns of C: B's columns as the product reads it.
    #[arg(long, requires_all = ["m", "k"], value_parser = crate::sizes::positive_u64)]
    pub n: Option<u64>,
    /// Columns of A: the length of each dot product.
    #[arg(long, requires_all = ["m", "n"], value_parser = crate::sizes::positive_u64)]
    pub k: Option<u64>,
}

impl GemmSizeArgs {
    /// The one problem the flags ask for, `(m, n, k)`, or `None` for the day's defaults.
    pub fn problem(&self) -> Option<(u64, u64, u64)> {
        match (self.size, self.m, self.n, self.k) {
            (Some(s), ..) => Some((s, s, s)),
            (None, Some(m), Some(n), Some(k)) => Some((m, n, k)),
            _ => None,
        }
    }

    /// Whether the flags ask for a problem of their own.
    pub fn given(&self) -> bool {
        self.problem().is_some()
    }
}

/// `count` elements of `elem_bytes` each, in bytes, or a clear error if that overflows.
pub fn bytes_for(what: &str, count: u64, elem_bytes: u64) -> Result<u64, UsageError> {
    count
        .checked_mul(elem_bytes)
        .ok_or_else(|| UsageError::new(format!("{what}: {count} elements is too many to address")))
}

/// Refuses a problem whose host-side buffers (inputs, outputs, the f64 reference) would not
/// fit in the memory this machine has available.
pub fn check_host_fits(what: &str, bytes: u64) -> Result<(), UsageError> {
    let Some(available) = host_available_bytes() else {
        return Ok(());
    };
    if bytes > available {
        return Err(UsageError::new(format!(
            "{what} needs {:.2} GiB of host memory for inputs and the CPU reference, but only \
             {:.2} GiB is available",
            bytes as f64 / (1u64 << 30) as f64,
            available as f64 / (1u64 << 30) as f64
        )));
    }
    Ok(())
}

/// `MemAvailable` from /proc/meminfo (None where that cannot be read).
fn host_available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The exit code for an error: 2 when nothing could run (setup or request), 1 otherwise.
pub fn exit_code_for(err: &anyhow::Error) -> u8 {
    if err.is::<SetupError>() || err.is::<UsageError>() {
        2
    } else {
        1
    }
}

/// A family day's flags: the family's own (`A`) beside the common ones.
#[derive(clap::Parser)]
pub struct FamilyArgs<A: clap::Args> {
    #[command(flatten)]
    pub family: A,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// The whole `main` of a day that a family runner drives (softmax, matmul, norm): parses the
/// family's flags and the common ones under the day's name and title, then `run`s them
/// through [`run_main`].
pub fn family_main<A: clap::Args>(
    day: &'static str,
    title: &str,
    versions: &[&str],
    run: impl FnOnce(&A, &CommonArgs) -> anyhow::Result<()>,
) -> ExitCode {
    use clap::CommandFactory;
    let command = FamilyArgs::<A>::command()
        .name(day)
        .about(format!("{day}: {title}"));
    let args: FamilyArgs<A> = parse_command(command, versions);
    run_main(|| run(&args.family, &args.common))
}

/// A day's flags from the command line, with `--help` listing the kernel versions `--kernel`
/// takes. Every day's `main` parses through this (or [`family_main`]); clap's own errors and
/// `--help` exit here as they would from `Args::parse()`.
pub fn parse_args<A: clap::Parser>(versions: &[&str]) -> A {
    parse_command(A::command(), versions)
}

/// `command`'s flags from the command line, with `--help` listing the kernel versions: for a
/// runner that renames the command or adds to it before parsing (`family::ops`).
pub fn parse_command<A: clap::FromArgMatches>(command: clap::Command, versions: &[&str]) -> A {
    let command = list_versions(command, versions);
    match A::from_arg_matches(&command.get_matches()) {
        Ok(args) => args,
        Err(e) => e.exit(),
    }
}

/// `--kernel`'s help with the version names appended (in the day's order, each once).
fn list_versions(command: clap::Command, versions: &[&str]) -> clap::Command {
    let mut names: Vec<&str> = Vec::with_capacity(versions.len());
    for v in versions {
        if !names.contains(v) {
            names.push(v);
        }
    }
    command.mut_arg("kernel", |arg| {
        // clap drops a doc comment's closing period; the sentence after needs it back.
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        let help = help.trim_end_matches('.');
        arg.help(format!("{help}. Versions: {}.", names.join(", ")))
    })
}

/// Runs a day's `main`, turning an error into one `error:` line and its exit code: no panic
/// backtraces for things a user can fix.
pub fn run_main(body: impl FnOnce() -> anyhow::Result<()>) -> ExitCode {
    match body() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(exit_code_for(&err))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        common: CommonArgs,
    }

    fn parse(args: &[&str]) -> Result<CommonArgs, clap::Error> {
        Args::try_parse_from(std::iter::once("dayNN").chain(args.iter().copied())).map(|a| a.common)
    }

    #[test]
    fn defaults_and_json_forms() {
        let a = parse(&[]).unwrap();
        assert!(a.kernel.is_empty() && a.json.is_none() && a.save.is_none());
        assert_eq!(a.iters, 50);
        assert_eq!(parse(&["--json"]).unwrap().json, Some(PathBuf::from("-")));
        assert_eq!(
            parse(&["--json", "r.json"]).unwrap().json,
            Some(PathBuf::from("r.json"))
        );
        assert!(parse(&["--iters", "0"]).is_err());
    }

    #[test]
    fn kernel_selection_keeps_the_day_order_and_refuses_unknown_names() {
        let a = parse(&["--kernel", "c,a"]).unwrap();
        assert_eq!(a.select_versions(&["a", "b", "c"]).unwrap(), vec!["a", "c"]);
        assert_eq!(
            parse(&[]).unwrap().select_versions(&["a", "b"]).unwrap(),
            vec!["a", "b"]
        );
        let err = parse(&["--kernel", "zz"])
            .unwrap()
            .select_versions(&["a", "b"])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "there is no kernel `zz` here; choose from: a, b"
        );
    }

    #[test]
    fn byte_counts_overflow_into_an_error() {
        assert_eq!(bytes_for("x", 10, 4).unwrap(), 40);
        assert!(bytes_for("x", u64::MAX / 2, 4).is_err());
    }

    #[test]
    fn setup_and_usage_errors_exit_2_others_1() {
        assert_eq!(exit_code_for(&SetupError::NoDriver.into()), 2);
        assert_eq!(exit_code_for(&UsageError::new("bad").into()), 2);
        assert_eq!(exit_code_for(&anyhow::anyhow!("driver failed")), 1);
    }

    /// A report of no rows with these refused versions.
    fn refused_report(refused: &[&str]) -> crate::measure::report::DayReport {
        let json = serde_json::json!({
            "day": "day00", "title": "t", "problem": "p", "key": "k",
            "device": {"name": "gpu", "ordinal": 0, "arch": "sm_80", "sms": 1, "l2_bytes": 1,
                       "memory_bytes": 1, "max_threads_per_sm": 1,
                       "max_shared_per_block_optin": 1, "driver_cuda_version": 13000},
            "copy_ceiling_gbs": 1.0, "bytes_per_run": 1, "baseline": null, "rows": [],
            "refused": refused.iter()
                .map(|v| serde_json::json!({"version": v, "why": "needs sm_90a"}))
                .collect::<Vec<_>>(),
        });
        serde_json::from_value(json).expect("a valid report")
    }

    #[test]
    fn a_run_where_nothing_ran_is_refused_with_the_reasons() {
        let args = parse(&[]).unwrap();
        let err = finish_reports(&args, &[]).unwrap_err();
        assert_eq!(exit_code_for(&err), 2);
        let err = finish_reports(&args, &[refused_report(&["fa_hopper"])]).unwrap_err();
        assert_eq!(exit_code_for(&err), 2);
        assert!(err.to_string().contains("fa_hopper: needs sm_90a"), "{err}");
    }

    #[test]
    fn absurd_host_requests_are_refused() {
        assert!(check_host_fits("x", u64::MAX).is_err());
        assert!(check_host_fits("x", 1024).is_ok());
    }

    #[test]
    fn help_lists_each_version_once() {
        use clap::CommandFactory;
        let mut command = list_versions(Args::command(), &["naive", "vec", "naive"]);
        let help = command.render_help().to_string();
        assert!(help.contains("by default. Versions: naive, vec."), "{help}");
    }
}

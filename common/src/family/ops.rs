//! The runner of the days with several ops (activations, transpose, convolution, top-k, the
//! quantization days, reductions and scans): each op is a problem of its own with its own
//! versions, and a day runs every op, or those `--op` names, with the versions `--kernel`
//! leaves each.
//!
//! A day implements [`OpsDay`] (its name, title and description with
//! [`day_header!`](crate::day_header)) and its `main` is one line:
//!
//! ```ignore
//! fn main() -> std::process::ExitCode {
//!     common::family::ops::main::<day17::Day17>()
//! }
//! ```
//!
//! What the runner does, in order, so that every multi-op day refuses the same things with
//! the same words (exit 2, one `error:` line, before the GPU is opened):
//!
//! 1. Parses the day's flags ([`OpsDay::Args`]) and the common ones under the day's name,
//!    with [`OpsDay::ABOUT`] as the help's first line, `-V` for the version, and `--kernel`'s
//!    help listing [`OpsDay::kernel_names`]. A day that takes `--op` as a list of names
//!    flattens [`OpList`] into its flags: its help is written here from [`OpsDay::OPS`]
//!    ("Which problems to run (comma-separated): copy, transpose, reverse. All by default").
//!    A day may declare its own `--op` instead (a `clap::ValueEnum`, one op only, its own
//!    help): clap then refuses unknown names itself, and [`OpsDay::asked_ops`] hands the
//!    names to the runner all the same.
//! 2. Chooses what runs ([`Selection`]): an op `--op` names that the day does not have is
//!    refused ("there is no op `nope` here; choose from: ..."), so is a `--kernel` name that no
//!    op has ("there is no kernel `nope` here; ..."), and an op `--op` names for which
//!    `--kernel` leaves no version ("--kernel tiled: copy has none of these versions; it has:
//!    copy"). Without `--op` the default ops run ([`OpsDay::DEFAULT_OPS`]), less those
//!    `--kernel` leaves nothing; if that is all of them, the run is refused.
//! 3. Asks the day for its problems ([`OpsDay::problems`]), each made as a [`Checked`]: its
//!    sizes checked by the day and its host memory by [`Checked::new`], in the order the day
//!    makes them (the first refusal is the one printed).
//! 4. Opens the GPU, checks that each problem's device bytes fit, loads the day
//!    ([`OpsDay::load`]).
//! 5. Runs each problem in turn ([`OpsDay::run`]) with a [`Run`]: the GPU, the common flags,
//!    the versions of the problem's op that `--kernel` leaves, a [`Session`] made with the
//!    day's name and title. A version that cannot take the problem is listed as refused with
//!    [`Session::plan_or_skip`]. A day's plans can be a [`Plan`] (a kernel, its launch shape and a
//!    launch closure of the day's own signature), whose [`Plan::version`] names the row.
//! 6. Hands every report to [`finish_reports`]: JSON, and the exit code (1 when a check
//!    failed, 2 when nothing ran).
//!
//! Each problem is moved into [`OpsDay::run`] and dropped when it returns, so a host input two
//! problems share (day 17's matrix, copied and transposed) can live in both and be freed
//! after the second.

use std::process::ExitCode;

use anyhow::Result;

use crate::UsageError;
use crate::cli::{
    CommonArgs, FamilyArgs, check_host_fits, finish_reports, parse_command, run_main,
};
use crate::family::runner::day_problem;
use crate::gpu::Gpu;
use crate::gpu::kernel::{Kernel, LaunchShape};
use crate::measure::report::DayReport;
use crate::session::{Problem, Session, Version};

/// `--op NAME[,NAME]`: which of the day's ops to run. Flatten it into the day's flags (first,
/// so that `--help` lists it first); the runner writes its help from [`OpsDay::OPS`] and
/// refuses names the day does not have.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OpList {
    // No doc comment: the help names the day's ops, so the runner writes it.
    #[arg(long, value_delimiter = ',', value_name = "OP[,OP]")]
    pub op: Vec<String>,
}

impl OpList {
    /// The names given, for [`OpsDay::asked_ops`].
    pub fn names(&self) -> Vec<&str> {
        self.op.iter().map(String::as_str).collect()
    }
}

/// A day of several ops: what they are, which versions each has, how the day's flags become
/// problems, and how one problem runs.
pub trait OpsDay: Sized {
    /// Package name, `day17`.
    const DAY: &'static str;
    /// The reports' title, `transpose`.
    const TITLE: &'static str;
    /// The first line of `--help`: the package's description,
    /// `env!("CARGO_PKG_DESCRIPTION")`.
    const ABOUT: &'static str;
    /// Every op's name, in the order the day runs them.
    const OPS: &'static [&'static str];
    /// The ops run without `--op`; every op unless the day says otherwise.
    const DEFAULT_OPS: &'static [&'static str] = Self::OPS;

    /// The day's own flags: its sizes, and its `--op` ([`OpList`] or its own).
    type Args: clap::Args;
    /// One problem: an op, its sizes and dtype, and whatever it shares with other problems.
    type Problem;

    /// The versions of `op` (one of [`Self::OPS`]), in table order.
    fn versions(op: &str) -> &'static [&'static str];

    /// Every version `--kernel` can name, in `--help`'s order: by default each op's versions
    /// in turn, each name once.
    fn kernel_names() -> Vec<&'static str> {
        let mut names = Vec::new();
        for op in Self::OPS {
            for &v in Self::versions(op) {
                if !names.contains(&v) {
                    names.push(v);
                }
            }
        }
        names
    }

    /// The ops `--op` names, in the order given (none: the defaults run).
    fn asked_ops(args: &Self::Args) -> Vec<&str>;

    /// The problems to run for the selected ops, each with its sizes checked ([`Checked`]):
    /// everything a user can get wrong is refused here, before the GPU is opened.
    fn problems(args: &Self::Args, ops: &Selection) -> Result<Vec<Checked<Self::Problem>>>;

    /// Compiles or loads the day's kernels.
    fn load(gpu: &Gpu) -> Result<Self>;

    /// Checks and times `run.versions` on one problem: a session from [`Run::session`], one
    /// `run_version` per version, its report.
    fn run(&self, run: &Run, problem: Self::Problem) -> Result<DayReport>;
}

/// [`OpsDay::DAY`], [`OpsDay::TITLE`] and [`OpsDay::ABOUT`] of the package this is written in:
/// its name, the reports' `title`, and its description. Inside the day's `impl OpsDay`:
///
/// ```ignore
/// impl OpsDay for Day17 {
///     common::day_header!("transpose");
///     // ...
/// }
/// ```
#[macro_export]
macro_rules! day_header {
    ($title:literal) => {
        const DAY: &'static str = env!("CARGO_PKG_NAME");
        const TITLE: &'static str = $title;
        const ABOUT: &'static str = env!("CARGO_PKG_DESCRIPTION");
    };
}

/// The whole `main` of a multi-op day.
pub fn main<D: OpsDay>() -> ExitCode {
    let args: FamilyArgs<D::Args> = parse::<D>();
    run_main(|| run_day::<D>(&args.family, &args.common))
}

fn parse<D: OpsDay>() -> FamilyArgs<D::Args> {
    use clap::CommandFactory;
    let mut command = FamilyArgs::<D::Args>::command()
        .name(D::DAY)
        .about(D::ABOUT)
        .version(env!("CARGO_PKG_VERSION"));
    let op_has_no_help = command
        .get_arguments()
        .any(|a| a.get_id() == "op" && a.get_help().is_none());
    if op_has_no_help {
        let help = op_help(D::OPS);
        command = command.mut_arg("op", |arg| arg.help(help));
    }
    parse_command(command, &D::kernel_names())
}

/// [`OpList`]'s help for a day of these ops.
fn op_help(ops: &[&str]) -> String {
    format!(
        "Which problems to run (comma-separated): {}. All by default",
        ops.join(", ")
    )
}

fn run_day<D: OpsDay>(args: &D::Args, common: &CommonArgs) -> Result<()> {
    let selection = Selection::new::<D>(&D::asked_ops(args), common)?;
    let problems = D::problems(args, &selection)?;
    let gpu = common.open_gpu()?;
    for problem in &problems {
        gpu.check_fits(&problem.what, problem.device_bytes)?;
    }
    let day = D::load(&gpu)?;
    let mut reports = Vec::with_capacity(problems.len());
    for problem in problems {
        let run = Run {
            gpu: &gpu,
            common,
            versions: selection.versions(problem.op),
            day: D::DAY,
            title: D::TITLE,
        };
        reports.push(day.run(&run, problem.problem)?);
    }
    finish_reports(common, &reports)
}

/// One op that runs, with the versions `--kernel` leaves it (in table order; never empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChosenOp {
    pub op: &'static str,
    pub versions: Vec<&'static str>,
}

/// The ops that run: those `--op` names (in its order), or the defaults `--kernel` leaves a
/// version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    ops: Vec<ChosenOp>,
    named: bool,
}

impl Selection {
    /// Checks `--op` and `--kernel` against the day's ops and versions (see the module doc).
    pub fn new<D: OpsDay>(asked: &[&str], common: &CommonArgs) -> Result<Self, UsageError> {
        if let Some(unknown) = asked.iter().find(|op| !D::OPS.contains(op)) {
            return Err(UsageError::new(format!(
                "there is no op `{unknown}` here; choose from: {}",
                D::OPS.join(", ")
            )));
        }
        common.select_versions(&D::kernel_names())?;
        let kernel = &common.kernel;
        let chosen = |op: &'static str| ChosenOp {
            op,
            versions: D::versions(op)
                .iter()
                .copied()
                .filter(|v| kernel.is_empty() || kernel.iter().any(|k| k == v))
                .collect(),
        };
        let ops: Vec<ChosenOp> = if asked.is_empty() {
            D::DEFAULT_OPS
                .iter()
                .map(|op| chosen(op))
                .filter(|c| !c.versions.is_empty())
                .collect()
        } else {
            let mut ops = Vec::with_capacity(asked.len());
            for name in asked {
                let op = D::OPS.iter().find(|o| *o == name).expect("checked above");
                let c = chosen(op);
                if c.versions.is_empty() {
                    return Err(UsageError::new(format!(
                        "--kernel {}: {op} has none of these versions; it has: {}",
                        kernel.join(","),
                        D::versions(op).join(", ")
                    )));
                }
                ops.push(c);
            }
            ops
        };
        if ops.is_empty() {
            return Err(UsageError::new(format!(
                "--kernel {} runs none of the default ops; name one with --op",
                kernel.join(",")
            )));
        }
        Ok(Self {
            ops,
            named: !asked.is_empty(),
        })
    }

    /// The ops that run, in `--op`'s order (or the defaults' order).
    pub fn ops(&self) -> &[ChosenOp] {
        &self.ops
    }

    /// Whether `op` runs.
    pub fn runs(&self, op: &str) -> bool {
        self.ops.iter().any(|c| c.op == op)
    }

    /// The versions of `op` that run (empty when it does not).
    pub fn versions(&self, op: &str) -> &[&'static str] {
        self.ops
            .iter()
            .find(|c| c.op == op)
            .map_or(&[], |c| c.versions.as_slice())
    }

    /// Whether `--op` chose the ops (a day whose `--op` comes with sizes of its own uses its
    /// defaults otherwise).
    pub fn named(&self) -> bool {
        self.named
    }
}

/// A problem whose sizes were checked, with what it needs: made only once its host memory
/// fits; its device memory is checked when the GPU is open.
pub struct Checked<P> {
    /// The op it runs: its versions are the ones [`Run::versions`] gets.
    pub op: &'static str,
    /// The problem in refusals: `--rows x --cols`, `conv2d`.
    pub what: String,
    /// Device bytes it holds at once.
    pub device_bytes: u64,
    pub problem: P,
}

impl<P> Checked<P> {
    /// `problem` of `op`, refused unless `host_bytes` (inputs, outputs as downloaded, the f64
    /// reference) fit in this machine's available memory.
    pub fn new(
        op: &'static str,
        what: impl Into<String>,
        host_bytes: u64,
        device_bytes: u64,
        problem: P,
    ) -> Result<Self, UsageError> {
        let what = what.into();
        check_host_fits(&what, host_bytes)?;
        Ok(Self {
            op,
            what,
            device_bytes,
            problem,
        })
    }
}

/// What one problem's run gets: the GPU, the common flags, the versions to run.
pub struct Run<'r> {
    pub gpu: &'r Gpu,
    pub common: &'r CommonArgs,
    /// The versions of the problem's op that `--kernel` leaves, in table order.
    pub versions: &'r [&'static str],
    day: &'static str,
    title: &'static str,
}

impl<'r> Run<'r> {
    /// `--seed`.
    pub fn seed(&self) -> u64 {
        self.common.seed
    }

    /// A problem of this day, titled with the day's title and counted in bytes (set
    /// `flops_per_run` or another `title` on it where the day needs them).
    pub fn problem(&self, description: String, key: String, bytes_per_run: u64) -> Problem {
        day_problem(self.day, self.title, description, key, bytes_per_run)
    }

    /// The session that checks and times the versions on `problem`.
    pub fn session(&self, problem: Problem) -> Result<Session<'r>> {
        Session::new(self.gpu, self.common, problem)
    }
}

/// How one version runs on one problem: the kernel its row describes (the main one, where
/// there are several), its launch shape, and the launch, a closure over the day's own buffers
/// (`L` is `dyn FnMut(&CudaSlice<T>, &mut CudaSlice<T>) -> Result<()> + 'a`, or whatever the
/// day's kernels take). A day names its own with a type alias.
pub struct Plan<'a, L: ?Sized> {
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    pub launch: Box<L>,
}

impl<'a, L: ?Sized> Plan<'a, L> {
    /// The version `name` that this plan runs, for [`Session::run_version`].
    pub fn version(&self, name: &'a str) -> Version<'a> {
        Version::of(name, self.kernel, self.shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// Two ops with a version in common, and one op left out of the defaults.
    struct Toy;

    impl OpsDay for Toy {
        crate::day_header!("toy");
        const OPS: &'static [&'static str] = &["copy", "flip", "spin"];
        const DEFAULT_OPS: &'static [&'static str] = &["copy", "flip"];
        type Args = OpList;
        type Problem = ();

        fn versions(op: &str) -> &'static [&'static str] {
            match op {
                "copy" => &["copy"],
                "flip" => &["naive", "tiled"],
                _ => &["naive", "twirl"],
            }
        }

        fn asked_ops(args: &OpList) -> Vec<&str> {
            args.names()
        }

        fn problems(_: &OpList, _: &Selection) -> Result<Vec<Checked<()>>> {
            Ok(Vec::new())
        }

        fn load(_: &Gpu) -> Result<Self> {
            Ok(Self)
        }

        fn run(&self, _: &Run, _: ()) -> Result<DayReport> {
            unreachable!("no GPU in these tests")
        }
    }

    /// `--op` and `--kernel` as the command line gives them.
    fn select(op: &str, kernel: &str) -> Result<Selection, UsageError> {
        let mut argv = vec!["day99"];
        if !op.is_empty() {
            argv.extend(["--op", op]);
        }
        if !kernel.is_empty() {
            argv.extend(["--kernel", kernel]);
        }
        let args = FamilyArgs::<OpList>::try_parse_from(argv).expect("valid flags");
        Selection::new::<Toy>(&args.family.names(), &args.common)
    }

    fn ops(selection: &Selection) -> Vec<(&str, Vec<&str>)> {
        selection
            .ops()
            .iter()
            .map(|c| (c.op, c.versions.clone()))
            .collect()
    }

    #[test]
    fn the_defaults_run_with_every_version() {
        let s = select("", "").unwrap();
        assert_eq!(
            ops(&s),
            [("copy", vec!["copy"]), ("flip", vec!["naive", "tiled"])]
        );
        assert!(!s.named() && s.runs("flip") && !s.runs("spin"));
        assert!(s.versions("spin").is_empty());
    }

    #[test]
    fn kernel_keeps_each_op_its_own_versions_and_drops_defaults_left_empty() {
        let s = select("", "naive").unwrap();
        assert_eq!(ops(&s), [("flip", vec!["naive"])]);
        let s = select("spin,flip", "twirl,naive").unwrap();
        assert_eq!(
            ops(&s),
            [("spin", vec!["naive", "twirl"]), ("flip", vec!["naive"])]
        );
        assert!(s.named());
    }

    #[test]
    fn bad_ops_and_kernels_are_refused_with_the_same_words_everywhere() {
        let err = |op, kernel| select(op, kernel).unwrap_err().to_string();
        assert_eq!(
            err("nope", ""),
            "there is no op `nope` here; choose from: copy, flip, spin"
        );
        assert!(err("", "nope").starts_with("there is no kernel `nope` here"));
        assert_eq!(
            err("copy", "tiled"),
            "--kernel tiled: copy has none of these versions; it has: copy"
        );
        assert_eq!(
            err("", "twirl"),
            "--kernel twirl runs none of the default ops; name one with --op"
        );
    }

    #[test]
    fn kernel_names_list_each_version_once_in_op_order() {
        assert_eq!(Toy::kernel_names(), ["copy", "naive", "tiled", "twirl"]);
    }

    #[test]
    fn op_help_names_the_ops() {
        assert_eq!(
            op_help(Toy::OPS),
            "Which problems to run (comma-separated): copy, flip, spin. All by default"
        );
    }
}

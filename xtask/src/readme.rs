//! `cargo xtask report DIR/results.json`: the measured tables go into the READMEs between
//! markers, so the numbers a reader sees are always those of one named run:
//!
//! - each day's README, between `<!-- results:begin -->` and `<!-- results:end -->`;
//! - the root README's day index, between `<!-- index:begin -->` and `<!-- index:end -->`.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use common::measure::report::DayReport;
use serde::Deserialize;

/// What run.sh writes.
#[derive(Debug, Deserialize)]
struct RunResults {
    commit: String,
    dirty: bool,
    run_at: String,
    tests: Vec<TestOutcome>,
    /// The exit code of every benchmark and sweep run.sh started.
    #[serde(default)]
    runs: Vec<RunOutcome>,
    /// One list per day binary: a report per problem it ran.
    days: Vec<Vec<DayReport>>,
    /// The kernel files, read from `DAYS_OF_GPU_KERNEL_SOURCES`, that differed from the
    /// bundle's own copies in anything the run compiled or loaded (tests included).
    #[serde(default)]
    edited_kernel_sources: Vec<String>,
}

impl RunResults {
    fn reports(&self) -> impl Iterator<Item = &DayReport> {
        self.days.iter().flatten()
    }

    fn reports_of<'a>(&'a self, day: &'a str) -> impl Iterator<Item = &'a DayReport> + 'a {
        self.reports().filter(move |r| r.day == day)
    }
}

#[derive(Debug, Deserialize)]
struct TestOutcome {
    name: String,
    passed: bool,
    /// The `SKIPPED ...` lines it printed (parts that did not run on this machine).
    #[serde(default)]
    skipped: Vec<String>,
}

/// One benchmark (`dayNN`) or sweep (`dayNN --sweep`) started by run.sh.
#[derive(Debug, Deserialize)]
struct RunOutcome {
    name: String,
    kind: String,
    exit: i32,
}

/// A day's package folder: `day01_naive_softmax/` holds package `day01`, topic "naive softmax".
pub struct DayFolder {
    pub folder: PathBuf,
    pub package: String,
    pub topic: String,
}

/// Every `dayNN_topic/` folder of the workspace, in day order.
pub fn day_folders(root: &Path) -> Result<Vec<DayFolder>> {
    let mut days = Vec::new();
    for entry in fs::read_dir(root)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some((package, topic)) = name.split_once('_') else {
            continue;
        };
        if package.len() == 5
            && package.starts_with("day")
            && package[3..].chars().all(|c| c.is_ascii_digit())
            && path.join("Cargo.toml").exists()
        {
            days.push(DayFolder {
                folder: path.clone(),
                package: package.to_string(),
                topic: topic.replace('_', " "),
            });
        }
    }
    days.sort_by(|a, b| a.package.cmp(&b.package));
    Ok(days)
}

/// Reads one results file.
fn read_results(path: &Path) -> Result<RunResults> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a run.sh results file", path.display()))
}

/// Several `run.sh --days` calls of one bundle as one run: same commit, tests and days
/// together, the latest date.
fn merge(runs: Vec<RunResults>) -> Result<RunResults> {
    let mut runs = runs.into_iter();
    let mut merged = runs.next().context("no results file given")?;
    for run in runs {
        if run.commit != merged.commit {
            bail!(
                "results of commits {} and {} cannot make one run",
                merged.commit,
                run.commit
            );
        }
        merged.dirty |= run.dirty;
        merged.run_at = merged.run_at.max(run.run_at);
        merged.tests.extend(run.tests);
        merged.runs.extend(run.runs);
        merged.days.extend(run.days);
        merged
            .edited_kernel_sources
            .extend(run.edited_kernel_sources);
    }
    Ok(merged)
}

/// Every kernel file the run read from a checkout (`DAYS_OF_GPU_KERNEL_SOURCES`) that differs
/// from the bundle's copy: those figures are not the commit's.
fn edited_sources(results: &RunResults) -> Vec<String> {
    let mut edited = results.edited_kernel_sources.clone();
    for report in results.reports() {
        edited.extend(report.kernel_sources.iter().flat_map(|o| o.edited.clone()));
    }
    edited.sort();
    edited.dedup();
    edited
}

pub fn report(root: &Path, results_paths: &[PathBuf], allow_dirty: bool) -> Result<()> {
    let results = merge(
        results_paths
            .iter()
            .map(|p| read_results(p))
            .collect::<Result<_>>()?,
    )?;
    if results.dirty && !allow_dirty {
        bail!(
            "these results come from a bundle built with uncommitted changes, so commit {} does \
             not reproduce them: commit, rebuild the bundle and rerun (or pass --allow-dirty)",
            results.commit
        );
    }
    let edited = edited_sources(&results);
    if !edited.is_empty() {
        bail!(
            "these results come from kernel sources edited after commit {} \
             (DAYS_OF_GPU_KERNEL_SOURCES): {}. The READMEs carry only the figures of committed \
             kernels: commit, rebuild the bundle and rerun without the variable",
            results.commit,
            edited.join(", ")
        );
    }
    let failures = failures(&results);
    if !failures.is_empty() {
        bail!(
            "the run had failures, and the READMEs only carry runs where everything passed:\n  {}",
            failures.join("\n  ")
        );
    }

    let plot_dirs: Vec<PathBuf> = results_paths
        .iter()
        .map(|p| p.parent().unwrap_or(Path::new(".")).join("plots"))
        .collect();
    let days = day_folders(root)?;
    for day in &days {
        let reports: Vec<&DayReport> = results.reports_of(&day.package).collect();
        if reports.is_empty() {
            eprintln!("{}: not in this run, README left as it is", day.package);
            continue;
        }
        let has_plot = copy_plot(&plot_dirs, day, "", "sweep.svg")?;
        let has_roofline = copy_plot(&plot_dirs, day, "-roofline", "roofline.svg")?;
        let readme = day.folder.join("README.md");
        let notes = day.folder.join(NOTES);
        let block = day_block(&reports, &results, has_plot, has_roofline);
        let (begin, end) = (RESULTS_BEGIN, RESULTS_END);
        if notes.exists() {
            // The notebook takes every table; the lesson one short table.
            rewrite_between(&notes, begin, end, &block)?;
            let lesson = fs::read_to_string(&readme)
                .with_context(|| format!("reading {}", readme.display()))?;
            let short = crate::lesson_tables::lesson_block(&block, &lesson)
                .with_context(|| format!("the short tables of {}", readme.display()))?;
            rewrite_between(&readme, begin, end, &short)?;
            eprintln!(
                "{}: tables written to {} and {}",
                day.package,
                notes.display(),
                readme.display()
            );
        } else {
            rewrite_between(&readme, begin, end, &block)?;
            eprintln!("{}: table written to {}", day.package, readme.display());
        }
    }
    let root_readme = root.join("README.md");
    let previous = fs::read_to_string(&root_readme)
        .with_context(|| format!("reading {}", root_readme.display()))?;
    let index = index_block(&days, &results, &previous);
    rewrite_between(
        &root_readme,
        "<!-- index:begin -->",
        "<!-- index:end -->",
        &index,
    )?;
    eprintln!("README.md: day index written");
    Ok(())
}

/// Everything in a run that failed or did not run: a failed or crashed test executable, a
/// benchmark or sweep that exited non-zero, a day's problem that failed its check or on which
/// no version ran, a benchmark that wrote no report, and a run with nothing in it.
fn failures(results: &RunResults) -> Vec<String> {
    let mut out: Vec<String> = results
        .tests
        .iter()
        .filter(|t| !t.passed)
        .map(|t| format!("test {} failed", t.name))
        .collect();
    for run in results.runs.iter().filter(|r| r.exit != 0) {
        out.push(format!("{} {} exited {}", run.kind, run.name, run.exit));
    }
    for report in results.reports().filter(|r| !r.passed()) {
        let why = if report.rows.is_empty() {
            "no version ran"
        } else {
            "a check failed"
        };
        out.push(format!("{} on {}: {why}", report.day, report.problem));
    }
    for run in results
        .runs
        .iter()
        .filter(|r| r.kind == "bench" && r.exit == 0)
    {
        if results.reports_of(&run.name).next().is_none() {
            out.push(format!("bench {} wrote no report", run.name));
        }
    }
    if results.tests.is_empty() && results.days.iter().all(|d| d.is_empty()) {
        out.push("nothing ran: no test and no benchmark report".to_string());
    }
    out
}

/// Copies `plots/<package><suffix>.svg` (from whichever plots folder has it) into the day's
/// folder as `name`, if the run drew it.
fn copy_plot(plot_dirs: &[PathBuf], day: &DayFolder, suffix: &str, name: &str) -> Result<bool> {
    let file = format!("{}{suffix}.svg", day.package);
    let Some(plot) = plot_dirs.iter().map(|d| d.join(&file)).find(|p| p.exists()) else {
        return Ok(false);
    };
    fs::copy(&plot, day.folder.join(name))
        .with_context(|| format!("copying {}", plot.display()))?;
    Ok(true)
}

fn run_line(results: &RunResults, report: &DayReport) -> String {
    let driver = report.device.driver_cuda_version;
    format!(
        "{} with driver CUDA {}.{}, on {}, commit `{}`",
        report.device.summary(),
        driver / 1000,
        (driver % 1000) / 10,
        results.run_at.get(..10).unwrap_or(&results.run_at),
        results.commit
    )
}

/// What the run says of the day's GPU tests (`dayNN-test-*` executables; a failing one
/// stops the report before this): the claim is made only when they ran, and names what they
/// skipped (versions that need a GPU the run did not have).
fn tests_line(results: &RunResults, day: &str) -> String {
    let prefix = format!("{day}-test-");
    let tests: Vec<&TestOutcome> = results
        .tests
        .iter()
        .filter(|t| t.name.starts_with(&prefix))
        .collect();
    if tests.is_empty() {
        return TESTS_NOT_RUN.to_string();
    }
    let skipped: Vec<&str> = tests
        .iter()
        .flat_map(|t| &t.skipped)
        .map(|line| line.trim_start_matches("SKIPPED ").trim())
        .collect();
    if skipped.is_empty() {
        format!("{TESTS_PASSED}.")
    } else {
        format!(
            "{TESTS_PASSED}, except what they skipped there: {}.",
            skipped.join("; ")
        )
    }
}

/// The words that open the parts of a results block, which `crate::lesson_tables` reads back
/// from the notes: the stamp, the two things it says of the day's GPU tests, a version that did
/// not run on a problem, and the peers ahead of our best version.
pub const STAMP_OPENS: &str = "Measured on";
pub const TESTS_PASSED: &str = "Every GPU test passed in the same run";
pub const TESTS_NOT_RUN: &str = "The day's GPU tests were not part of this run.";
pub const NOT_RUN_OPENS: &str = "Not run: `";
pub const FASTER_PEERS_OPENS: &str = "Faster than our best version";

/// The markers between which a day's README (and notes) get the run's tables.
pub const RESULTS_BEGIN: &str = "<!-- results:begin -->";
pub const RESULTS_END: &str = "<!-- results:end -->";

/// A day's lab notebook, `NOTES.md` in its folder beside the lesson: where a day that has one
/// gets its full tables, the lesson keeping one short table.
pub const NOTES: &str = "NOTES.md";

/// The text a day's README (or, where the day has one, its notes) gets: where and when, then a
/// table per problem, then the plots.
fn day_block(
    reports: &[&DayReport],
    results: &RunResults,
    has_plot: bool,
    has_roofline: bool,
) -> String {
    let first = reports[0];
    let runs = reports
        .iter()
        .flat_map(|r| &r.rows)
        .find_map(|r| r.timing.map(|t| t.runs))
        .unwrap_or(0);
    let what = if first.is_compute_bound() && first.ceiling.is_none() {
        format!(
            "Median and minimum of up to {runs} timed runs per kernel after warm-up (slow kernels \
             get fewer, at least 3); TFLOP/s counts the FLOPs of the problem (for attention, the \
             multiply-adds of Q K^T and P V that the mask leaves, times 2); `(peer)` rows were \
             timed by `peers/` in the same run and are counted the same way."
        )
    } else if first.is_compute_bound() {
        format!(
            "Median and minimum of up to {runs} timed runs per kernel after warm-up (slow kernels \
             get fewer, at least 3); TFLOP/s counts 2mnk per run; \"% {0}\" is against {0} \
             timed in the same process, and every row, {0} included, is checked against the f64 \
             CPU reference; FLOP/B is per byte each kernel asks of global memory as its tiling \
             implies, and global GB/s those bytes per second.",
            first.ceiling.as_deref().unwrap_or("the ceiling")
        )
    } else {
        format!(
            "Median and minimum of {runs} timed runs per kernel after warm-up; GB/s counts each \
             input read once and each output written once; \"% copy\" is against a \
             device-to-device copy measured in the same process ({:.0} GB/s); `(peer)` rows were \
             timed by `peers/` in the same run.",
            first.copy_ceiling_gbs
        )
    };
    let mut out = format!(
        "{STAMP_OPENS} {}. {what} {}\n",
        run_line(results, first),
        tests_line(results, &first.day),
    );
    for report in reports {
        out += &format!("\n**{}**\n\n{}\n", report.problem, report.markdown_table());
        for refused in &report.refused {
            out += &format!("\n{NOT_RUN_OPENS}{}` ({}).\n", refused.version, refused.why);
        }
        if let Some(line) = faster_peers_line(report) {
            out += &format!("\n{line}\n");
        }
    }
    if has_roofline {
        out += &format!(
            "\n![Roofline of {}'s kernels](roofline.svg)\n\n`--roofline`: each kernel at the \
             FLOPs per byte it asks of global memory, under the copy bandwidth and the FP32 peak, \
             same run.\n",
            first.day
        );
    }
    if has_plot {
        out += &if first.is_compute_bound() && first.ceiling.is_none() {
            format!(
                "\n![TFLOP/s against sequence length, {}](sweep.svg)\n\n`--sweep`: every \
                 version and the peers from 512 to 16384 tokens per sequence at 16384 tokens \
                 in all, same run.\n",
                first.day
            )
        } else if first.is_compute_bound() {
            format!(
                "\n![TFLOP/s against size, {}](sweep.svg)\n\n`--sweep`: cuBLAS and every \
                 version on the square sizes of the day's `--sweep`, same run.\n",
                first.day
            )
        } else {
            format!(
                "\n![GB/s against row length, {}](sweep.svg)\n\n`--sweep`: every version on \
                 rows of 128 to 1M columns, 2^26 elements per point, same run.\n",
                first.day
            )
        };
    }
    out
}

/// One sentence naming every peer (a `(peer)` row: not a day's ceiling row, such as cuBLAS,
/// which the table shows beside ours anyway) that ran faster than the day's best version on
/// this problem, or `None`: a table never leaves a faster peer for the reader to spot.
fn faster_peers_line(report: &DayReport) -> Option<String> {
    let best = report.best()?;
    let ours = best.timing?.median_ms;
    let mut faster: Vec<_> = report.peers.iter().filter(|p| p.median_ms < ours).collect();
    if faster.is_empty() {
        return None;
    }
    faster.sort_by(|a, b| a.median_ms.total_cmp(&b.median_ms));
    let names: Vec<String> = faster
        .iter()
        .map(|p| {
            format!(
                "{} ({:.4} ms, {:.3}x as fast)",
                p.peer,
                p.median_ms,
                ours / p.median_ms
            )
        })
        .collect();
    Some(format!(
        "**{FASTER_PEERS_OPENS} (`{}`, {ours:.4} ms) here:** {}.",
        best.version,
        names.join("; ")
    ))
}

/// The root README's index: one row a day, with its best kernel on its first problem (the
/// day's default), what it is measured against (the copy ceiling and the best peer, or
/// cuBLAS), and the run it comes from. Days this run did not measure keep their row from
/// `previous` (the README as it is), so a run of some days updates theirs and leaves the
/// others' figures with their own run.
fn index_block(days: &[DayFolder], results: &RunResults, previous: &str) -> String {
    let mut out = String::from(
        "| day | topic | problem | best kernel | median ms | throughput | of the ceiling | best peer \
         | run |\n|---|---|---|---|---:|---:|---:|---:|---|\n",
    );
    let mut device_line = None;
    for day in days {
        let folder = day.folder.file_name().unwrap().to_string_lossy();
        let link = format!("[{}]({folder}/)", day.package);
        let mut any = false;
        // One row a day: its first problem (its default) that ran; the notes have the rest.
        for report in results.reports_of(&day.package).take(1) {
            let Some(best) = report.best() else { continue };
            any = true;
            device_line.get_or_insert_with(|| run_line(results, report));
            let t = best.timing.expect("best rows are timed");
            let (throughput, fraction, peer) = match report.ceiling_row() {
                Some(ceiling) => (
                    format!("{:.1} TFLOP/s", best.tflops.unwrap_or(0.0)),
                    format!(
                        "{:.1}% of {}",
                        best.fraction_of_ceiling.unwrap_or(0.0) * 100.0,
                        ceiling.version
                    ),
                    format!(
                        "{:.1} TFLOP/s ({})",
                        ceiling.tflops.unwrap_or(0.0),
                        ceiling.version
                    ),
                ),
                None => {
                    let fastest = report
                        .peers
                        .iter()
                        .min_by(|a, b| a.median_ms.total_cmp(&b.median_ms));
                    let throughput = |ms: f64| match report.flops_per_run {
                        Some(flops) => format!("{:.1} TFLOP/s", flops as f64 / (ms * 1e9)),
                        None => format!(
                            "{:.0} GB/s",
                            common::measure::bench::gb_per_s(report.bytes_per_run, ms)
                        ),
                    };
                    // Compute-bound days without a ceiling row (attention) are measured
                    // against their fastest peer, memory-bound ones against the copy.
                    let fraction = match (report.flops_per_run, fastest) {
                        (Some(_), Some(p)) => {
                            format!("{:.2}x {}", p.median_ms / t.median_ms, p.peer)
                        }
                        _ => format!(
                            "{:.1}% of copy",
                            best.fraction_of_copy.unwrap_or(0.0) * 100.0
                        ),
                    };
                    (
                        throughput(t.median_ms),
                        fraction,
                        fastest.map_or_else(String::new, |p| {
                            format!(
                                "{} ({}); ours {:.3}x as fast",
                                throughput(p.median_ms),
                                p.peer,
                                p.median_ms / t.median_ms
                            )
                        }),
                    )
                }
            };
            out += &format!(
                "| {link} | {} | {} | {} | {:.4} | {throughput} | {fraction} | {peer} | {} |\n",
                day.topic,
                report.problem,
                best.version,
                t.median_ms,
                run_tag(results),
            );
        }
        if !any {
            let kept = previous_rows(previous, &link);
            if kept.is_empty() {
                out += &format!("| {link} | {} | | not measured | | | | | |\n", day.topic);
            } else {
                out += &kept;
            }
        }
    }
    if let Some(line) = device_line {
        out = format!(
            "The latest run: {line}. One row a day, its default problem; each row names the \
             run (commit, date) its figures come from, and the day's notes have that run's \
             tables of every problem.\n\n{out}"
        );
    }
    out
}

/// `commit, date` of a run, for the index's last column.
fn run_tag(results: &RunResults) -> String {
    format!(
        "`{}`, {}",
        results.commit.get(..12).unwrap_or(&results.commit),
        results.run_at.get(..10).unwrap_or(&results.run_at)
    )
}

/// The index row of the day linked as `link` in `previous` (the README before this report),
/// its first, with the run it came from. Rows written before the index named runs get the commit
/// and date of the heading that was above them.
fn previous_rows(previous: &str, link: &str) -> String {
    let heading_run = previous
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix(STAMP_OPENS)?.strip_prefix(" ")?;
            let (_, after) = rest.split_once(", on ")?;
            let (date, commit) = after.split_once(", commit ")?;
            Some(format!("{}, {date}", commit.trim_end_matches('.')))
        })
        .unwrap_or_default();
    let mut rows = String::new();
    for line in previous.lines() {
        if !line.starts_with(&format!("| {link} |")) || line.contains("| not measured |") {
            continue;
        }
        // The old layout had 8 columns; the run column is the 9th.
        let columns = line.trim_end_matches('|').matches(" | ").count() + 1;
        if columns == 8 {
            rows += &format!("{line} {heading_run} |\n");
        } else {
            rows += line;
            rows.push('\n');
        }
        break;
    }
    rows
}

/// Replaces the text between two marker lines of `path`, keeping the markers.
pub(crate) fn rewrite_between(path: &Path, begin: &str, end: &str, body: &str) -> Result<()> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let updated = replace_between(&text, begin, end, body)
        .with_context(|| format!("in {}", path.display()))?;
    fs::write(path, updated)?;
    Ok(())
}

fn replace_between(text: &str, begin: &str, end: &str, body: &str) -> Result<String> {
    let (Some(start), Some(stop)) = (text.find(begin), text.find(end)) else {
        bail!("the markers {begin} and {end} are missing");
    };
    if stop < start {
        bail!("{end} comes before {begin}");
    }
    let head = &text[..start + begin.len()];
    let tail = &text[stop..];
    Ok(format!("{head}\n{}\n{tail}", body.trim_end()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tests_claim_is_made_only_when_the_days_gpu_tests_ran() {
        let results: RunResults = serde_json::from_str(
            r#"{"commit": "abc", "dirty": false, "run_at": "2026-11-22", "days": [],
                "tests": [{"name": "day18-lib", "passed": true},
                          {"name": "day20-test-gpu", "passed": true}]}"#,
        )
        .unwrap();
        assert_eq!(
            tests_line(&results, "day20"),
            "Every GPU test passed in the same run."
        );
        let with_skip: RunResults = serde_json::from_str(
            r#"{"commit": "abc", "dirty": false, "run_at": "2026-11-22", "days": [],
                "tests": [{"name": "day10-test-gpu", "passed": true,
                           "skipped": ["SKIPPED fa_hopper: needs sm_90a"]}]}"#,
        )
        .unwrap();
        assert_eq!(
            tests_line(&with_skip, "day10"),
            "Every GPU test passed in the same run, except what they skipped there: \
             fa_hopper: needs sm_90a."
        );
        assert_eq!(
            tests_line(&results, "day18"),
            "The day's GPU tests were not part of this run."
        );
    }

    #[test]
    fn failed_crashed_or_empty_runs_are_refused() {
        let run = |tests: &str, runs: &str| -> RunResults {
            serde_json::from_str(&format!(
                r#"{{"commit": "abc", "dirty": false, "run_at": "2026-11-22", "days": [],
                    "tests": [{tests}], "runs": [{runs}]}}"#
            ))
            .unwrap()
        };
        assert_eq!(
            failures(&run("", "")),
            ["nothing ran: no test and no benchmark report"]
        );
        let ok = r#"{"name": "day05-test-gpu", "passed": true}"#;
        assert!(failures(&run(ok, "")).is_empty());
        let f = failures(&run(
            ok,
            r#"{"name": "day05", "kind": "sweep", "exit": 139}"#,
        ));
        assert_eq!(f, ["sweep day05 exited 139"]);
        let f = failures(&run(ok, r#"{"name": "day05", "kind": "bench", "exit": 0}"#));
        assert_eq!(f, ["bench day05 wrote no report"]);
        let f = failures(&run(r#"{"name": "day05-test-gpu", "passed": false}"#, ""));
        assert_eq!(f, ["test day05-test-gpu failed"]);
    }

    #[test]
    fn results_of_edited_kernel_sources_are_refused() {
        let run = |edited_tests: &str, sources: &str| -> RunResults {
            serde_json::from_str(&format!(
                r#"{{"commit": "abc", "dirty": false, "run_at": "2026-11-22",
                    "tests": [], "edited_kernel_sources": [{edited_tests}],
                    "days": [[{{"day": "day10", "title": "t", "problem": "p", "key": "k",
                        "device": {{"name": "H100", "ordinal": 0, "arch": "sm_90", "sms": 132,
                            "l2_bytes": 0, "memory_bytes": 0, "max_threads_per_sm": 2048,
                            "max_shared_per_block_optin": 0, "driver_cuda_version": 13000}},
                        "copy_ceiling_gbs": 1.0, "bytes_per_run": 1, "baseline": null,
                        "rows": [] {sources}}}]]}}"#
            ))
            .unwrap()
        };
        assert!(edited_sources(&run("", "")).is_empty());
        // An override whose files equal the bundle's is the commit's own code.
        let same = r#", "kernel_sources": {"dir": "/tree", "edited": []}"#;
        assert!(edited_sources(&run("", same)).is_empty());
        let edited = r#", "kernel_sources": {"dir": "/tree", "edited": ["day10_fa2_forward/src/fa_hopper.cu"]}"#;
        assert_eq!(
            edited_sources(&run("", edited)),
            ["day10_fa2_forward/src/fa_hopper.cu"]
        );
        // The tests' edits come from run.sh's kernel log, top level.
        assert_eq!(
            edited_sources(&run(r#""common/cuda/hopper.cuh""#, edited)),
            [
                "common/cuda/hopper.cuh",
                "day10_fa2_forward/src/fa_hopper.cu"
            ]
        );
        let dir = std::env::temp_dir().join(format!("xtask-edited-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let results = dir.join("results.json");
        let text = r#"{"commit": "abc", "dirty": false, "run_at": "2026-11-22", "tests": [],
            "edited_kernel_sources": ["day10_fa2_forward/src/fa_hopper.cu"], "days": []}"#;
        fs::write(&results, text).unwrap();
        let err = report(&dir, &[results], false).unwrap_err().to_string();
        assert!(err.contains("edited after commit abc"), "{err}");
        assert!(err.contains("day10_fa2_forward/src/fa_hopper.cu"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }

    /// A memory-bound report of day 5 on `problem` moving `bytes` per run, with one version,
    /// `vec` (the baseline when `baseline`), timed at `vec_ms`, and a peer `pN` per time of
    /// `peer_ms`.
    fn one_version_report(
        problem: &str,
        bytes: u64,
        baseline: bool,
        vec_ms: f64,
        peer_ms: &[(&str, f64)],
    ) -> DayReport {
        let peers: Vec<serde_json::Value> = peer_ms
            .iter()
            .map(|(peer, ms)| {
                serde_json::json!({"key": "k", "peer": peer, "median_ms": ms, "gb_per_s": 1.0})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "day": "day05", "title": "t", "problem": problem, "key": "k",
            "device": {"name": "H100", "ordinal": 0, "arch": "sm_90", "sms": 132,
                       "l2_bytes": 0, "memory_bytes": 0, "max_threads_per_sm": 2048,
                       "max_shared_per_block_optin": 0, "driver_cuda_version": 13000},
            "copy_ceiling_gbs": 3000.0, "bytes_per_run": bytes,
            "baseline": if baseline { Some("vec") } else { None },
            "rows": [{
                "version": "vec", "function": "f", "launch": "1 x 1", "attrs": null,
                "occupancy": null,
                "check": {"elements": 4, "tolerance": {"atol": 0.0, "rtol": 0.0,
                          "max_rel_l2": 0.0}, "mismatches": 0, "unwritten": 0, "nans": 0,
                          "max_abs_err": 0.0, "max_rel_err": 0.0, "rel_l2_err": 0.0},
                "timing": {"median_ms": vec_ms, "min_ms": vec_ms, "max_ms": vec_ms, "runs": 5,
                           "l2_flushed": false},
                "gb_per_s": null, "fraction_of_copy": null, "speedup_vs_baseline": null
            }],
            "peers": peers
        }))
        .unwrap()
    }

    #[test]
    fn peers_faster_than_our_best_are_named() {
        let report = |peer_ms: f64| {
            one_version_report("p", 1000, false, 0.2, &[("torch.compile x", peer_ms)])
        };
        assert_eq!(faster_peers_line(&report(0.25)), None);
        assert_eq!(
            faster_peers_line(&report(0.1)).unwrap(),
            "**Faster than our best version (`vec`, 0.2000 ms) here:** torch.compile x \
             (0.1000 ms, 2.000x as fast)."
        );
    }

    #[test]
    fn replaces_only_between_the_markers() {
        let text = "intro\n<!-- a -->\nold\ntable\n<!-- b -->\nafter\n";
        let out = replace_between(text, "<!-- a -->", "<!-- b -->", "new\n").unwrap();
        assert_eq!(out, "intro\n<!-- a -->\nnew\n<!-- b -->\nafter\n");
        // Idempotent: running the report twice gives the same file.
        assert_eq!(
            replace_between(&out, "<!-- a -->", "<!-- b -->", "new\n").unwrap(),
            out
        );
    }

    #[test]
    fn a_lesson_gets_its_short_table_from_the_notes_the_report_writes() {
        let peers = [("p0", 1.0), ("p1", 0.6), ("p2", 2.0), ("p3", 0.8)];
        let report = one_version_report("32768 x 4096, f32", 1_000_000_000, true, 0.5, &peers);
        let results: RunResults = serde_json::from_str(
            r#"{"commit": "abc", "dirty": false, "run_at": "2026-11-28", "days": [],
                "tests": [{"name": "day05-test-gpu", "passed": true}]}"#,
        )
        .unwrap();
        let notes = day_block(&[&report], &results, false, false);
        let block = crate::lesson_tables::lesson_block(&notes, "# Day 5\n").unwrap();
        assert!(block.contains("commit `abc`"), "{block}");
        assert!(block.contains("Every GPU test passed"), "{block}");
        assert!(!block.contains("Median and minimum"), "{block}");
        assert!(block.contains("**32768 x 4096, f32**"), "{block}");
        // 1 GB in 0.5 ms: 2000 GB/s, 66.7% of the copy.
        assert!(block.contains("| `vec` "), "{block}");
        assert!(block.contains("2000") && block.contains("66.7%"), "{block}");
        // The three fastest peers, fastest first; the slowest is left to the notes.
        let (p1, p3, p0) = (
            block.find("p1 (peer)").unwrap(),
            block.find("p3 (peer)").unwrap(),
            block.find("p0 (peer)").unwrap(),
        );
        assert!(p1 < p3 && p3 < p0, "{block}");
        assert!(!block.contains("p2 (peer)"), "{block}");
        assert!(block.contains("](NOTES.md#results)"), "{block}");
        assert!(
            !block.contains("launch"),
            "no launch column in a lesson: {block}"
        );
    }

    #[test]
    fn days_not_in_the_run_keep_their_rows_with_their_run() {
        let old = "Measured on NVIDIA H100 (sm_90) with driver CUDA 13.0, on 2026-11-20, commit \
                   `abc123`.\n\n| day | topic |\n|---|---|\n\
                   | [day00](day00_vector_add/) | vector add | n | vec4 | 0.27 | 3019 GB/s | 100% |  |\n\
                   | [day01](day01_naive_softmax/) | naive softmax | | not measured | | | | |\n";
        let rows = previous_rows(old, "[day00](day00_vector_add/)");
        assert_eq!(
            rows,
            "| [day00](day00_vector_add/) | vector add | n | vec4 | 0.27 | 3019 GB/s | 100% |  | \
             `abc123`, 2026-11-20 |\n"
        );
        // Rows that already name their run are kept as they are.
        assert_eq!(previous_rows(&rows, "[day00](day00_vector_add/)"), rows);
        assert_eq!(previous_rows(old, "[day01](day01_naive_softmax/)"), "");
        // One row a day: a day's second problem is left to its notes.
        let two = format!("{rows}| [day00](day00_vector_add/) | vector add | m | naive | 1 |\n");
        assert_eq!(previous_rows(&two, "[day00](day00_vector_add/)"), rows);
    }

    #[test]
    fn missing_markers_are_an_error() {
        assert!(replace_between("no markers", "<!-- a -->", "<!-- b -->", "x").is_err());
    }

    #[test]
    fn finds_the_day_folders_of_this_workspace() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let days = day_folders(root).unwrap();
        assert_eq!(days[0].package, "day00");
        assert_eq!(days[0].topic, "vector add");
        assert!(days.iter().any(|d| d.package == "day01"));
    }
}

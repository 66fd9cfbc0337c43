//! A lesson's short results tables, made from its notes. The report writes a run's full tables
//! into a day's `NOTES.md`; the lesson's results block is drawn from that block alone: the
//! run's stamp, then for each problem the lesson shows, the day's versions and the fastest
//! peers with the time, throughput, share of the ceiling, speedup and check columns, cell for
//! cell as the notes have them. So a lesson's table can never say what its notes do not, and
//! a lesson that changes which problems it shows needs no new run (`cargo xtask lesson-tables`).
//!
//! The problems shown: those a line `<!-- lesson problems: HEADING | HEADING -->` of the lesson
//! names (each the start of a problem's heading in the notes, in the order given), or else the
//! first problem of each operation: a problem whose versions (those that ran and those that
//! refused it) are an earlier problem's is a further size of the same operation, left to the
//! notes.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result, bail};
use comfy_table::presets::ASCII_MARKDOWN;
use comfy_table::{Cell, CellAlignment, Table};

use crate::readme::{
    FASTER_PEERS_OPENS, NOT_RUN_OPENS, NOTES, RESULTS_BEGIN, RESULTS_END, STAMP_OPENS,
    TESTS_NOT_RUN, TESTS_PASSED, day_folders, rewrite_between,
};

/// The line by which a lesson names the problems its tables show.
pub const LESSON_PROBLEMS: &str = "<!-- lesson problems:";

/// The peers a lesson's table shows: the fastest (the notes show every one).
const LESSON_PEERS: usize = 3;

/// The columns a lesson's table keeps: the kernel, then these, found by their headers.
const KEPT: [fn(&str) -> bool; 5] = [
    |h| h == "median ms",
    |h| matches!(h, "GB/s" | "TFLOP/s" | "TOPS"),
    |h| h.starts_with("% "),
    |h| h.starts_with("vs "),
    |h| h == "check",
];

/// One problem of a run as the notes show it.
#[derive(Debug)]
struct Problem {
    heading: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Versions listed under the table as not run on this problem.
    refused: Vec<String>,
    /// The report's "Faster than our best version" line, where it wrote one.
    faster_peers: Option<String>,
}

impl Problem {
    fn is_peer(row: &[String]) -> bool {
        row[0].ends_with("(peer)")
    }

    /// The day's versions that ran or refused this problem: what makes it an operation.
    fn versions(&self) -> BTreeSet<String> {
        let ran = self
            .rows
            .iter()
            .filter(|r| !Self::is_peer(r))
            .map(|r| r[0].clone());
        ran.chain(self.refused.iter().cloned()).collect()
    }

    fn median_ms(&self, row: &[String]) -> f64 {
        let column = self.header.iter().position(|h| h == "median ms");
        column
            .and_then(|c| row[c].trim().parse().ok())
            .unwrap_or(f64::INFINITY)
    }

    /// The short table: the kept columns of the day's versions, then the fastest peers.
    fn short_table(&self) -> Result<String> {
        let mut columns = vec![0];
        for kept in KEPT {
            match self.header.iter().position(|h| kept(h)) {
                Some(c) => columns.push(c),
                None => bail!(
                    "a table of `{}` lacks a column the lesson keeps",
                    self.heading
                ),
            }
        }
        // A share of the copy means something only beside GB/s: a kernel counted in TFLOP/s
        // (attention, which has no ceiling row) keeps its throughput alone.
        let counts_bytes = self.header.iter().any(|h| h == "GB/s");
        columns.retain(|&c| counts_bytes || self.header[c] != "% copy");
        let mut table = Table::new();
        table.load_preset(ASCII_MARKDOWN);
        table.set_header(columns.iter().map(|&c| self.header[c].clone()));
        let mut peers: Vec<&Vec<String>> = self.rows.iter().filter(|r| Self::is_peer(r)).collect();
        peers.sort_by(|a, b| self.median_ms(a).total_cmp(&self.median_ms(b)));
        let versions = self.rows.iter().filter(|r| !Self::is_peer(r));
        for row in versions.chain(peers.into_iter().take(LESSON_PEERS)) {
            let cells = columns.iter().map(|&c| {
                let text = row[c].trim();
                if c == 0 {
                    let own = !Self::is_peer(row);
                    Cell::new(if own {
                        format!("`{text}`")
                    } else {
                        text.to_string()
                    })
                } else if self.header[c] == "check" {
                    Cell::new(text)
                } else {
                    Cell::new(text).set_alignment(CellAlignment::Right)
                }
            });
            table.add_row(cells);
        }
        Ok(table.to_string())
    }
}

/// A run's block in the notes: its stamp paragraph and its problems.
#[derive(Debug)]
struct NotesRun {
    /// "Measured on DEVICE ..., on DATE, commit `C`."
    stamp: String,
    /// What the stamp says of the day's GPU tests ("Every GPU test passed in the same run.").
    tests: String,
    problems: Vec<Problem>,
}

fn parse_notes_block(block: &str) -> Result<NotesRun> {
    let mut paragraphs = block.split("\n\n").map(str::trim).filter(|p| !p.is_empty());
    let stamp = paragraphs
        .find(|p| p.starts_with(STAMP_OPENS))
        .context("the notes' results block has no `Measured on` paragraph")?
        .replace('\n', " ");
    let commit_end = stamp
        .find("commit `")
        .and_then(|i| stamp[i + 8..].find("`.").map(|j| i + 8 + j + 2))
        .context("the notes' stamp names no commit")?;
    let tests_start = [TESTS_PASSED, TESTS_NOT_RUN]
        .iter()
        .filter_map(|s| stamp.find(s))
        .min()
        .context("the notes' stamp says nothing of the GPU tests")?;
    let mut problems: Vec<Problem> = Vec::new();
    for line in block.lines() {
        let line = line.trim_end();
        if let Some(heading) = bold(line) {
            if heading.starts_with(FASTER_PEERS_OPENS) {
                let problem = problems
                    .last_mut()
                    .context("a peers line before any problem")?;
                problem.faster_peers = Some(line.to_string());
            } else {
                problems.push(Problem {
                    heading: heading.to_string(),
                    header: Vec::new(),
                    rows: Vec::new(),
                    refused: Vec::new(),
                    faster_peers: None,
                });
            }
        } else if let Some(problem) = problems.last_mut() {
            if line.starts_with('|') {
                let cells: Vec<String> = line
                    .trim_matches('|')
                    .split('|')
                    .map(|c| c.trim().to_string())
                    .collect();
                if cells
                    .iter()
                    .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
                {
                    continue;
                }
                if problem.header.is_empty() {
                    problem.header = cells;
                } else {
                    problem.rows.push(cells);
                }
            } else if let Some(refused) = line.strip_prefix(NOT_RUN_OPENS) {
                // "Not run: `version` (why).", as the report writes it under a table.
                if let Some((version, _)) = refused.split_once('`') {
                    problem.refused.push(version.to_string());
                }
            }
        }
    }
    Ok(NotesRun {
        stamp: stamp[..commit_end].to_string(),
        tests: stamp[tests_start..].to_string(),
        problems,
    })
}

/// The text of a line that is bold whole (`**...**`).
fn bold(line: &str) -> Option<&str> {
    let inner = line.strip_prefix("**")?;
    let end = inner.find("**")?;
    Some(&inner[..end])
}

/// The problems a lesson shows, as the module's doc says.
fn shown<'a>(run: &'a NotesRun, lesson: &str) -> Result<Vec<&'a Problem>> {
    let Some(line) = lesson
        .lines()
        .find(|l| l.trim_start().starts_with(LESSON_PROBLEMS))
    else {
        let mut seen = Vec::new();
        let mut firsts = Vec::new();
        for problem in &run.problems {
            let versions = problem.versions();
            if !seen.contains(&versions) {
                seen.push(versions);
                firsts.push(problem);
            }
        }
        return Ok(firsts);
    };
    let named = line
        .trim()
        .trim_start_matches(LESSON_PROBLEMS)
        .trim_end_matches("-->");
    named
        .split('|')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|name| {
            run.problems
                .iter()
                .find(|p| p.heading.starts_with(name))
                .with_context(|| {
                    let headings: Vec<&str> =
                        run.problems.iter().map(|p| p.heading.as_str()).collect();
                    format!(
                        "the lesson names the problem `{name}`, which no heading of its notes' \
                         run begins with (they are: {})",
                        headings.join("; ")
                    )
                })
        })
        .collect()
}

/// The lesson's results block, from the notes' block (`notes_block`, between the markers) and
/// the lesson's text (for its `lesson problems` line).
pub fn lesson_block(notes_block: &str, lesson: &str) -> Result<String> {
    let run = parse_notes_block(notes_block)?;
    let mut out = format!("{} {}\n", run.stamp, run.tests);
    for problem in shown(&run, lesson)? {
        out += &format!("\n**{}**\n\n{}\n", problem.heading, problem.short_table()?);
        if let Some(line) = &problem.faster_peers {
            out += &format!("\n{line}\n");
        }
    }
    out += &format!(
        "\nEvery problem, column and peer of the same run: [the notes]({NOTES}#results).\n"
    );
    Ok(out)
}

/// The byte range between the results markers of `text` (where the report writes a run's
/// stamp and tables), or None where it has none.
pub fn results_range(text: &str) -> Option<std::ops::Range<usize>> {
    let begin = text.find(RESULTS_BEGIN)? + RESULTS_BEGIN.len();
    let end = text[begin..].find(RESULTS_END)? + begin;
    Some(begin..end)
}

/// The text between the results markers of `text`, or None where it has none.
pub fn between_markers(text: &str) -> Option<&str> {
    results_range(text).map(|r| &text[r])
}

/// The results block `lesson` should have by its notes (`notes`, the text of its `NOTES.md`):
/// None when the notes have no results block.
pub fn expected(lesson: &str, notes: &str) -> Option<Result<String>> {
    between_markers(notes).map(|block| lesson_block(block, lesson))
}

/// `cargo xtask lesson-tables`: every lesson's results block made again from its notes.
pub fn write_all(root: &Path) -> Result<()> {
    for day in day_folders(root)? {
        let (lesson_path, notes_path) = (day.folder.join("README.md"), day.folder.join(NOTES));
        let Ok(notes) = std::fs::read_to_string(&notes_path) else {
            continue;
        };
        let lesson = std::fs::read_to_string(&lesson_path)
            .with_context(|| format!("reading {}", lesson_path.display()))?;
        let Some(block) = expected(&lesson, &notes) else {
            continue;
        };
        let block =
            block.with_context(|| format!("the short tables of {}", lesson_path.display()))?;
        rewrite_between(&lesson_path, RESULTS_BEGIN, RESULTS_END, &block)?;
        println!("{}: short tables from its notes", lesson_path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOTES_BLOCK: &str = "Measured on NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 50 MiB L2) \
with driver CUDA 13.0, on 2026-11-27, commit `239c465dd25d`. Median and minimum of 50 timed \
runs; \"% copy\" is against a copy (3008 GB/s). Every GPU test passed in the same run.

**8192 x 8192, f32**

| kernel | launch | regs | median ms | min ms | GB/s | % copy | vs warp | max abs err | check |
|---|---|---|---|---|---|---|---|---|---|
| warp | 1024 x 256 | 25 | 0.0951 | 0.0938 | 2822 | 93.8% | 1.00x | 3.3e-5 | ok |
| rows | 1024 x 256 | 66 | 0.0938 | 0.0922 | 2862 | 95.2% | 1.01x | 1.6e-5 | ok |
| slow (peer) | | | 0.2000 | | 1342 | 44.6% | 0.48x | | |
| p1 (peer) | | | 0.0900 | | 2982 | 99.1% | 1.06x | | |
| p2 (peer) | | | 0.1234 | | 2177 | 72.4% | 0.77x | | |
| p3 (peer) | | | 0.0956 | | 2807 | 93.3% | 0.99x | | |

**Faster than our best version (`rows`, 0.0938 ms) here:** p1 (0.0900 ms, 1.042x as fast).

**64 x 1048576, f32**

| kernel | launch | regs | median ms | min ms | GB/s | % copy | vs warp | max abs err | check |
|---|---|---|---|---|---|---|---|---|---|
| warp | 8 x 256 | 25 | 3.2783 | 3.2739 | 83 | 2.8% | 1.00x | 3.2e-3 | ok |
| rows | 8 x 256 | 66 | 1.2330 | 1.2297 | 221 | 7.4% | 2.66x | 1.4e-3 | ok |

**1000 x 1001, f32**

| kernel | launch | regs | median ms | min ms | GB/s | % copy | vs warp | max abs err | check |
|---|---|---|---|---|---|---|---|---|---|
| warp | 8 x 256 | 25 | 0.0100 | 0.0090 | 400 | 13.0% | 1.00x | 3.2e-3 | ok |

Not run: `rows` (n must be a multiple of 4).

**transpose, 8192 x 8192, f32**

| kernel | launch | regs | median ms | min ms | GB/s | % copy | vs tiled | max abs err | check |
|---|---|---|---|---|---|---|---|---|---|
| tiled | 8 x 256 | 25 | 0.2000 | 0.1900 | 2000 | 66.5% | 1.00x | 0 | ok |

![sweep](sweep.svg)
";

    #[test]
    fn a_lesson_shows_the_first_problem_of_each_operation() {
        let block = lesson_block(NOTES_BLOCK, "# Day 14\n").unwrap();
        assert!(
            block.starts_with(
                "Measured on NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 50 MiB L2) with driver \
                 CUDA 13.0, on 2026-11-27, commit `239c465dd25d`. Every GPU test passed in the \
                 same run.\n\n**8192 x 8192, f32**\n"
            ),
            "{block}"
        );
        // Further sizes of one operation stay in the notes, even one that a version refused.
        assert!(!block.contains("**64 x 1048576, f32**"), "{block}");
        assert!(!block.contains("**1000 x 1001, f32**"), "{block}");
        assert!(block.contains("**transpose, 8192 x 8192, f32**"), "{block}");
        // The kept columns, cell for cell; the three fastest peers, fastest first.
        assert!(block.contains("| kernel"), "{block}");
        assert!(
            !block.contains("launch") && !block.contains("max abs err"),
            "{block}"
        );
        assert!(block.contains("| `rows` "), "{block}");
        assert!(
            block.contains("0.0938") && block.contains("95.2%"),
            "{block}"
        );
        let (p1, p3, p2) = (
            block.find("p1 (peer)").unwrap(),
            block.find("p3 (peer)").unwrap(),
            block.find("p2 (peer)").unwrap(),
        );
        assert!(p1 < p3 && p3 < p2, "{block}");
        assert!(!block.contains("slow (peer)"), "{block}");
        assert!(
            block.contains("**Faster than our best version (`rows`"),
            "{block}"
        );
        assert!(
            block.ends_with("[the notes](NOTES.md#results).\n"),
            "{block}"
        );
    }

    #[test]
    fn a_share_of_the_copy_is_shown_only_beside_bytes() {
        let block = "Measured on X, on D, commit `c`. Every GPU test passed in the same run.\n\n\
                     **attention**\n\n\
                     | kernel | median ms | TFLOP/s | % copy | vs naive | check |\n\
                     |---|---|---|---|---|---|\n\
                     | naive | 1.0000 | 1.5 | 0.1% | 1.00x | ok |\n";
        let lesson = lesson_block(block, "").unwrap();
        assert!(
            lesson.contains("TFLOP/s") && !lesson.contains("% copy"),
            "{lesson}"
        );
        assert!(lesson.contains("1.00x"), "{lesson}");
    }

    #[test]
    fn a_lesson_may_name_the_problems_it_shows() {
        let lesson = "<!-- lesson problems: 64 x 1048576 | 8192 x 8192 -->\n";
        let block = lesson_block(NOTES_BLOCK, lesson).unwrap();
        let first = block.find("**64 x 1048576, f32**").unwrap();
        let second = block.find("**8192 x 8192, f32**").unwrap();
        assert!(first < second, "{block}");
        assert!(!block.contains("transpose"), "{block}");
        let err = lesson_block(NOTES_BLOCK, "<!-- lesson problems: 7 x 7 -->\n").unwrap_err();
        let message = format!("{err:#}");
        assert!(
            message.contains("`7 x 7`") && message.contains("64 x 1048576, f32"),
            "{message}"
        );
    }
}

//! A day whose lab notebook has moved beside its lesson (`NOTES.md` next to `README.md`) keeps
//! its history there: the lesson names no commit but its results table's stamp, which the
//! report generator writes between the results markers. A commit named anywhere else in the
//! lesson is a sentence that goes stale with the next run.
//!
//! For the same reason a figure the lesson's prose says was measured (a decimal number with a
//! unit, in a sentence that says "measured") must be one the run's tables hold: in the lesson's
//! results block or in its notes, which the report writes from the same run. A figure worked
//! out by hand from them (a ratio of two rows) belongs in the notes beside its working.

use std::path::{Path, PathBuf};

use regex::Regex;

use crate::docs::Finding;
use crate::docs::LineIndex;
use crate::lesson_tables::results_range;
use crate::readme::NOTES;

/// Every commit a converted day's lesson names outside its results block. `tracked` are the
/// tracked files relative to `root`; `text_of` reads one.
pub fn check(tracked: &[PathBuf], text_of: impl Fn(&Path) -> Option<String>) -> Vec<Finding> {
    let mut findings = Vec::new();
    for lesson in tracked.iter().filter(|p| is_day_lesson(p)) {
        let notes = lesson.with_file_name(NOTES);
        if !tracked.contains(&notes) {
            continue;
        }
        let Some(text) = text_of(lesson) else {
            continue;
        };
        findings.extend(commits_outside_the_stamp(lesson, &text));
        let notes_text = text_of(&notes).unwrap_or_default();
        findings.extend(measured_figures_not_in_the_run(lesson, &text, &notes_text));
        findings.extend(short_tables_not_from_the_notes(lesson, &text, &notes_text));
    }
    findings
}

/// Commits the lesson names outside its results block.
fn commits_outside_the_stamp(lesson: &Path, text: &str) -> Vec<Finding> {
    let commit = Regex::new(r"`([0-9a-f]{7,40})`").expect("a valid pattern");
    let stamp = results_range(text);
    let mut findings = Vec::new();
    for m in commit.captures_iter(text) {
        let hash = m.get(1).expect("group 1 always takes part");
        let has_digit_and_letter = hash.as_str().chars().any(|c| c.is_ascii_digit())
            && hash.as_str().chars().any(|c| c.is_ascii_alphabetic());
        if !has_digit_and_letter || stamp.as_ref().is_some_and(|r| r.contains(&hash.start())) {
            continue;
        }
        findings.push(Finding {
            file: lesson.to_path_buf(),
            line: LineIndex::new(text).line_of(hash.start()),
            message: format!(
                "commit `{}` in a lesson: the lesson names only its results table's run; \
                     the history goes to {NOTES}",
                hash.as_str()
            ),
        });
    }
    findings
}

/// A lesson whose results block is not what its notes' run gives (`crate::lesson_tables`).
fn short_tables_not_from_the_notes(lesson: &Path, text: &str, notes: &str) -> Option<Finding> {
    let expected = crate::lesson_tables::expected(text, notes)?;
    let line = results_range(text).map_or(1, |r| LineIndex::new(text).line_of(r.start));
    let message = match expected {
        Ok(block) => {
            let actual = crate::lesson_tables::between_markers(text).unwrap_or("");
            if actual.trim() == block.trim() {
                return None;
            }
            format!(
                "the results block is not the short tables of {NOTES}' run: `cargo xtask \
                 lesson-tables` writes them"
            )
        }
        Err(e) => format!("its short tables cannot be made from {NOTES}: {e:#}"),
    };
    Some(Finding {
        file: lesson.to_path_buf(),
        line,
        message,
    })
}

/// Figures that a sentence of the lesson's prose says were measured but that neither the
/// results block nor the notes hold. Fenced code, tables and the results block itself are not
/// prose.
fn measured_figures_not_in_the_run(lesson: &Path, text: &str, notes: &str) -> Vec<Finding> {
    let figure = Regex::new(r"(?:^|[^\d.])(\d+\.\d+) ?(?:TFLOP/s|GB/s|TB/s|TOPS|ms|us|x|%)")
        .expect("a valid pattern");
    let stamp = results_range(text).unwrap_or(0..0);
    let run = format!("{}\n{notes}", &text[stamp.clone()]);
    let mut findings = Vec::new();
    for sentence in prose_sentences(text) {
        if stamp.contains(&sentence.start)
            || !text[sentence.clone()].to_lowercase().contains("measured")
        {
            continue;
        }
        for m in figure.captures_iter(&text[sentence.clone()]) {
            let number = m.get(1).expect("group 1 always takes part");
            if run.contains(number.as_str()) {
                continue;
            }
            findings.push(Finding {
                file: lesson.to_path_buf(),
                line: LineIndex::new(text).line_of(sentence.start + number.start()),
                message: format!(
                    "{} is said to be measured but is in neither the results block nor {NOTES}: \
                     quote the run's figure, or move the working to the notes",
                    m.get(0)
                        .expect("the whole match")
                        .as_str()
                        .trim_start_matches(|c: char| !c.is_ascii_digit())
                ),
            });
        }
    }
    findings
}

/// The byte ranges of the sentences of a Markdown text's prose: paragraphs and list items cut at
/// a full stop followed by white space, leaving out fenced code blocks and table rows.
fn prose_sentences(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut sentences = Vec::new();
    let mut in_fence = false;
    let mut start: Option<usize> = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let here = offset;
        offset += line.len();
        if trimmed.starts_with("```") {
            in_fence = !in_fence;
        }
        let is_prose = !in_fence && !trimmed.starts_with("```") && !trimmed.starts_with('|');
        if !is_prose || trimmed.trim().is_empty() {
            if let Some(s) = start.take() {
                sentences.push(s..here);
            }
            continue;
        }
        let mut s = start.unwrap_or(here);
        for (i, _) in line.match_indices(". ") {
            sentences.push(s..here + i + 1);
            s = here + i + 2;
        }
        start = Some(s);
    }
    if let Some(s) = start {
        sentences.push(s..text.len());
    }
    sentences
}

/// The `README.md` of a day folder.
fn is_day_lesson(path: &Path) -> bool {
    let mut parts = path.components();
    let folder = parts.next().and_then(|c| c.as_os_str().to_str());
    let file = parts.next().and_then(|c| c.as_os_str().to_str());
    folder.is_some_and(|f| f.starts_with("day") && f.contains('_'))
        && file == Some("README.md")
        && parts.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn findings(lesson: &str, with_notes: bool) -> Vec<Finding> {
        let mut tracked = vec![PathBuf::from("day05_demo/README.md")];
        if with_notes {
            tracked.push(PathBuf::from("day05_demo/NOTES.md"));
        }
        check(&tracked, |p| {
            (p == Path::new("day05_demo/README.md")).then(|| lesson.to_string())
        })
    }

    #[test]
    fn a_lesson_names_only_its_tables_commit() {
        let lesson = "# Day 5\n\nThe idea.\n\n<!-- results:begin -->\nMeasured at commit \
                      `3a2f7b4546cd`.\n<!-- results:end -->\n";
        assert!(findings(lesson, true).is_empty());
        let stale = format!("{lesson}\nAs run at `239c465dd25d`, 651.4 TFLOP/s.\n");
        let found = findings(&stale, true);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].line, 9);
        assert!(found[0].message.contains("239c465dd25d"), "{found:?}");
        // Not yet converted (no notes beside it): its history is still in the lesson.
        assert!(findings(&stale, false).is_empty());
        // Words and numbers in backticks are not commits.
        assert!(findings("`deadbeef` `1234567` `vec_regs`\n", true).is_empty());
    }

    #[test]
    fn a_measured_figure_is_one_the_run_holds() {
        let lesson = |prose: &str| {
            format!(
                "# Day 5\n\n{prose}\n\n<!-- results:begin -->\n| `vec` | 2885.1 GB/s |\n\
                 <!-- results:end -->\n\n```cuda\n// measured 9.99 ms\n```\n"
            )
        };
        let check = |prose: &str, notes: &str| {
            measured_figures_not_in_the_run(
                Path::new("day05_demo/README.md"),
                &lesson(prose),
                notes,
            )
        };
        assert!(
            check(
                "It measured 2885.1 GB/s, 2.19x `scalar`.",
                "| scalar | 2.19x |"
            )
            .is_empty()
        );
        let found = check(
            "Predicted 2900 GB/s.\nIt measured 2885.1 GB/s, 2.27x `scalar`.",
            "",
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].line, 4);
        assert!(found[0].message.starts_with("2.27x"), "{found:?}");
        // A prediction, a bound, code and tables are not claims of a measurement.
        assert!(check("Predicted 2.27x. The floor is 0.27 ms.", "").is_empty());
        assert!(check("| measured | 3.14 ms |", "").is_empty());
    }

    #[test]
    fn sentences_end_at_a_full_stop_a_paragraph_or_a_table() {
        let text = "One 1.5 ms. Two\ncontinues.\n\n| a |\nThree.\n```\nnot. prose\n```\n";
        let sentences: Vec<&str> = prose_sentences(text)
            .into_iter()
            .map(|r| &text[r])
            .collect();
        assert_eq!(sentences, ["One 1.5 ms.", "Two\ncontinues.\n", "Three.\n"]);
    }

    #[test]
    fn only_the_days_lessons_are_read() {
        assert!(is_day_lesson(Path::new("day05_demo/README.md")));
        assert!(!is_day_lesson(Path::new("README.md")));
        assert!(!is_day_lesson(Path::new("day05_demo/NOTES.md")));
        assert!(!is_day_lesson(Path::new("day05_demo/src/README.md")));
        assert!(!is_day_lesson(Path::new("torch_layers/README.md")));
    }
}

//! A day whose lab notebook has moved beside its lesson (`NOTES.md` next to `README.md`) keeps
//! its history there: the lesson names no commit but its results table's stamp, which the
//! report generator writes between the results markers. A commit named anywhere else in the
//! lesson is a sentence that goes stale with the next run.

use std::path::{Path, PathBuf};

use regex::Regex;

use crate::docs::Finding;
use crate::readme::{NOTES, RESULTS_BEGIN, RESULTS_END};

/// Every commit a converted day's lesson names outside its results block. `tracked` are the
/// tracked files relative to `root`; `text_of` reads one.
pub fn check(tracked: &[PathBuf], text_of: impl Fn(&Path) -> Option<String>) -> Vec<Finding> {
    let commit = Regex::new(r"`([0-9a-f]{7,40})`").expect("a valid pattern");
    let mut findings = Vec::new();
    for lesson in tracked.iter().filter(|p| is_day_lesson(p)) {
        let notes = lesson.with_file_name(NOTES);
        if !tracked.contains(&notes) {
            continue;
        }
        let Some(text) = text_of(lesson) else {
            continue;
        };
        let stamp = results_block(&text);
        for m in commit.captures_iter(&text) {
            let hash = m.get(1).expect("group 1 always takes part");
            let has_digit_and_letter = hash.as_str().chars().any(|c| c.is_ascii_digit())
                && hash.as_str().chars().any(|c| c.is_ascii_alphabetic());
            if !has_digit_and_letter || stamp.as_ref().is_some_and(|r| r.contains(&hash.start())) {
                continue;
            }
            findings.push(Finding {
                file: lesson.clone(),
                line: text[..hash.start()].matches('\n').count() + 1,
                message: format!(
                    "commit `{}` in a lesson: the lesson names only its results table's run; \
                     the history goes to {NOTES}",
                    hash.as_str()
                ),
            });
        }
    }
    findings
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

/// The byte range between the results markers, where the report writes the run's stamp.
fn results_block(text: &str) -> Option<std::ops::Range<usize>> {
    let begin = text.find(RESULTS_BEGIN)?;
    let end = text[begin..].find(RESULTS_END)? + begin;
    Some(begin..end)
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
        let stale = format!("{lesson}\nAs measured at `239c465dd25d`, 651.4 TFLOP/s.\n");
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
    fn only_the_days_lessons_are_read() {
        assert!(is_day_lesson(Path::new("day05_demo/README.md")));
        assert!(!is_day_lesson(Path::new("README.md")));
        assert!(!is_day_lesson(Path::new("day05_demo/NOTES.md")));
        assert!(!is_day_lesson(Path::new("day05_demo/src/README.md")));
        assert!(!is_day_lesson(Path::new("torch_layers/README.md")));
    }
}

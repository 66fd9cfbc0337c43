//! `cargo xtask check-docs`: the repository speaks of itself alone. Over every tracked text
//! file it finds
//!
//! - Markdown links and images whose relative target (file, and `#heading` where one is given)
//!   does not exist;
//! - file names cited in prose or comments (`gemm.cu`, `src/lib.rs`, `CHANGELOG.md`) that no
//!   tracked file has (a path from the citing file, from the root, or the tail of a tracked path);
//! - words about how the work was organised rather than about the code: the challenge logs'
//!   internal numbering, numbered tasks, working periods and their budgets;
//! - quoted kernel lines (`<!-- quote: PATH NAME -->` above a fenced block) that no longer match
//!   the region they quote, or quote a file or region that is not there (`crate::quotes`);
//! - a commit named in the lesson of a day whose notes sit beside it, outside its results
//!   table's stamp, a figure its prose says was measured that neither the results block nor
//!   the notes hold, and short tables that are not those its notes give (`crate::lessons`).
//!
//! A test runs the same check, so `cargo test --workspace` (and CI) fails on any finding.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use regex::Regex;

use crate::command::stdout_of;
use crate::paths::lexical_join;

/// One thing a reader would stumble on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    pub file: PathBuf,
    pub line: usize,
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.message)
    }
}

/// Extensions of the files whose text is checked.
const TEXT_EXTENSIONS: &[&str] = &["md", "rs", "cu", "cuh", "py", "sh", "toml"];

/// This file names the words it refuses, so it is the one file the word check skips.
const THIS_FILE: &str = "xtask/src/docs.rs";

/// Words that belong to how the work was organised, not to the code, with what to say instead.
const FORBIDDEN: &[(&str, &str)] = &[
    (
        r"(?i)\bseeds? 0\d\d\b",
        "the challenge logs' numbering: say what the challenge day asked",
    ),
    (
        // A reference to an item of a tracker: capitalised, with `#`, or in lower case only when
        // the number is followed by punctuation or a verb of speech, so that the verb with a
        // count ("warps issue 4 loads") stays ordinary prose.
        r"\bIssues? #?\d+|(?i:\bissues? #\d+|\bissues? \d+(?:'s|\)|,|\.|:|;| and\b| or\b| asked\b| said\b)|\bthe issue's\b)",
        "a numbered task: say what was measured, what is missing and why",
    ),
    (
        r"(?i)\b(this|that|same|previous|next|later|earlier|working|whole) sessions?\b|\bsession's\b",
        "a working period: say which run (commit, date) instead",
    ),
    (
        r"(?i)\b(GPU|device) budget\b|\bdevice time\b|\bGPU time (is|was) spent\b|\bloans?\b",
        "a working budget: say what was measured and what is missing",
    ),
];

/// Every tracked text file, as paths relative to `root` (what a clean clone has).
pub(crate) fn tracked_files(root: &Path) -> Result<Vec<PathBuf>> {
    let output = stdout_of(
        Command::new("git")
            .arg("-C")
            .arg(root)
            .args(["ls-files", "-z"]),
        "git ls-files (check-docs reads the tracked files)",
    )?;
    Ok(output
        .split(|&b| b == 0)
        .filter(|name| !name.is_empty())
        .map(|name| PathBuf::from(String::from_utf8_lossy(name).into_owned()))
        .collect())
}

pub(crate) fn is_markdown(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "md")
}

fn is_text(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| TEXT_EXTENSIONS.contains(&e))
}

/// Runs every check over the tracked files under `root`; sorted findings.
pub fn check(root: &Path) -> Result<Vec<Finding>> {
    let tracked = tracked_files(root)?;
    let known = KnownFiles::new(&tracked);
    let forbidden: Vec<(Regex, &str)> = FORBIDDEN
        .iter()
        .map(|(pattern, why)| Ok((Regex::new(pattern)?, *why)))
        .collect::<Result<_>>()?;
    let file_name = Regex::new(
        r"(?:^|[^\w./-])((?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.(?:cu|cuh|rs|md|py|toml|sh))\b",
    )?;
    let mut headings = HeadingCache::default();
    let mut findings = Vec::new();
    for path in tracked.iter().filter(|p| is_text(p)) {
        let text = std::fs::read_to_string(root.join(path))
            .with_context(|| format!("reading {}", path.display()))?;
        let lines = LineIndex::new(&text);
        let mut report = |offset: usize, message: String| {
            findings.push(Finding {
                file: path.clone(),
                line: lines.line_of(offset),
                message,
            })
        };
        if path != Path::new(THIS_FILE) {
            for (pattern, why) in &forbidden {
                for m in pattern.find_iter(&text) {
                    report(m.start(), format!("`{}`: {why}", m.as_str()));
                }
            }
            if is_markdown(path) {
                for (offset, word) in prose_sessions(&text) {
                    report(
                        offset,
                        format!(
                            "`{word}` in prose: write `Session` for the runner, or name the run"
                        ),
                    );
                }
            }
        }
        let dir = path.parent().unwrap_or(Path::new(""));
        for caps in file_name.captures_iter(&prose_of(path, &text)) {
            let cited = caps.get(1).expect("group 1 always takes part");
            if !known.cited_exists(dir, cited.as_str()) {
                report(
                    cited.start(),
                    format!("`{}` is not a file of this repository", cited.as_str()),
                );
            }
        }
        if is_markdown(path) {
            for (offset, target) in relative_links(&text) {
                if let Some(message) = broken_link(root, dir, &target, &mut headings, path) {
                    report(offset, message);
                }
            }
        }
    }
    let markdown: Vec<PathBuf> = tracked.iter().filter(|p| is_markdown(p)).cloned().collect();
    findings.extend(crate::quotes::check(root, &markdown)?);
    findings.extend(crate::lessons::check(&tracked, |p| {
        std::fs::read_to_string(root.join(p)).ok()
    }));
    findings.sort();
    findings.dedup();
    Ok(findings)
}

/// The text a reader reads as prose: a Markdown file whole, a source file's comments (the rest
/// blanked, so offsets stay those of the file). Code may name files it writes or makes up for a
/// test; a comment that names a file points the reader to it.
fn prose_of(path: &Path, text: &str) -> String {
    let marker = match path.extension().and_then(|e| e.to_str()) {
        Some("md") => return text.to_string(),
        Some("py" | "sh" | "toml") => "#",
        _ => "//",
    };
    // Each line keeps its byte length and newline, so offsets stay those of the file.
    text.split_inclusive('\n')
        .map(|line| {
            let body = line.trim_end_matches('\n');
            let end = &line[body.len()..];
            match body.find(marker) {
                Some(at) => " ".repeat(at) + &body[at..] + end,
                None => " ".repeat(body.len()) + end,
            }
        })
        .collect()
}

/// `session` as a lowercase word in Markdown prose (code spans and blocks excluded): the runner
/// is `Session`, and a working session has no place here.
fn prose_sessions(text: &str) -> Vec<(usize, String)> {
    let word = Regex::new(r"\bsessions?\b").expect("a valid pattern");
    let mut found = Vec::new();
    let mut in_code_block = false;
    for (event, range) in Parser::new_ext(text, Options::all()).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(_)) => in_code_block = true,
            Event::End(TagEnd::CodeBlock) => in_code_block = false,
            Event::Text(t) if !in_code_block => {
                for m in word.find_iter(&t) {
                    // The event's text may differ from the source (entities); the event's
                    // start is close enough for a line number.
                    found.push((range.start, m.as_str().to_string()));
                }
            }
            _ => {}
        }
    }
    found
}

/// Link and image targets of a Markdown text that are neither absolute URLs nor e-mail.
fn relative_links(text: &str) -> Vec<(usize, String)> {
    Parser::new_ext(text, Options::all())
        .into_offset_iter()
        .filter_map(|(event, range)| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                Some((range.start, dest_url.to_string()))
            }
            _ => None,
        })
        .filter(|(_, url)| !url.contains("://") && !url.starts_with("mailto:"))
        .collect()
}

/// Why `target`, linked from a Markdown file in `dir`, is broken; None when it is not.
fn broken_link(
    root: &Path,
    dir: &Path,
    target: &str,
    headings: &mut HeadingCache,
    from: &Path,
) -> Option<String> {
    let (file, anchor) = match target.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (target, None),
    };
    let linked = if file.is_empty() {
        from.to_path_buf()
    } else {
        normalize(&dir.join(file))
    };
    if !root.join(&linked).exists() {
        return Some(format!("link to `{target}`: no such file"));
    }
    let anchor = anchor.filter(|a| !a.is_empty())?;
    let is_markdown = linked.extension().is_some_and(|e| e == "md");
    let is_readme_folder = root.join(&linked).is_dir();
    let page = if is_readme_folder {
        linked.join("README.md")
    } else if is_markdown {
        linked
    } else {
        return None; // an anchor into source (`#L10`) is not checked
    };
    let slugs = headings.slugs(root, &page);
    if slugs.contains(anchor) {
        None
    } else {
        Some(format!(
            "link to `{target}`: no heading `#{anchor}` in {}",
            page.display()
        ))
    }
}

/// `a/./b/../c` as `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The anchors GitHub gives a Markdown file's headings, read once per file.
#[derive(Default)]
struct HeadingCache {
    pages: HashMap<PathBuf, BTreeSet<String>>,
}

impl HeadingCache {
    fn slugs(&mut self, root: &Path, page: &Path) -> &BTreeSet<String> {
        self.pages.entry(page.to_path_buf()).or_insert_with(|| {
            let text = std::fs::read_to_string(root.join(page)).unwrap_or_default();
            heading_slugs(&text)
        })
    }
}

/// GitHub's heading anchors: the heading's text, lowercased, with everything but letters,
/// digits, `-`, `_` and spaces removed and spaces made `-`; a repeated one gets `-1`, `-2`.
fn heading_slugs(text: &str) -> BTreeSet<String> {
    let mut slugs = BTreeSet::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut current: Option<String> = None;
    for event in Parser::new_ext(text, Options::all()) {
        match event {
            Event::Start(Tag::Heading { .. }) => current = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(heading) = current.as_mut() {
                    heading.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(level)) => {
                let _: HeadingLevel = level;
                let heading = current.take().unwrap_or_default();
                let base: String = heading
                    .to_lowercase()
                    .chars()
                    .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
                    .map(|c| if c == ' ' { '-' } else { c })
                    .collect();
                let count = seen.entry(base.clone()).or_insert(0);
                let slug = if *count == 0 {
                    base.clone()
                } else {
                    format!("{base}-{count}")
                };
                *count += 1;
                slugs.insert(slug);
            }
            _ => {}
        }
    }
    slugs
}

/// What a cited file name may refer to: a tracked file, by its path from the citing file's
/// folder, from the root, or as the tail of any tracked path (`src/lib.rs`, `gemm.cu`); or a build
/// output under `target/`, which the workspace's own commands write. Only tracked paths count, never
/// what happens to lie in a work tree, so a clean clone and a worked-in one give the same answer.
struct KnownFiles {
    tails: BTreeSet<String>,
}

impl KnownFiles {
    fn new(tracked: &[PathBuf]) -> Self {
        let mut tails = BTreeSet::new();
        for path in tracked {
            let parts: Vec<String> = path
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            for start in 0..parts.len() {
                tails.insert(parts[start..].join("/"));
            }
        }
        Self { tails }
    }

    fn cited_exists(&self, dir: &Path, cited: &str) -> bool {
        let cited = cited.trim_start_matches("./");
        cited.starts_with("target/")
            || self.tails.contains(cited)
            || lexical_join(dir, cited)
                .is_some_and(|joined| self.tails.contains(joined.to_string_lossy().as_ref()))
    }
}

/// Byte offset to 1-based line number.
pub(crate) struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub(crate) fn new(text: &str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self { starts }
    }

    pub(crate) fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset)
    }
}

/// `cargo xtask check-docs`: prints each finding, fails when there is one.
pub fn run(root: &Path) -> Result<()> {
    let findings = check(root)?;
    for finding in &findings {
        println!("{finding}");
    }
    if !findings.is_empty() {
        bail!(
            "{} finding(s): the repository should speak of itself alone",
            findings.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_follow_github() {
        let slugs = heading_slugs("# Day 5: `vec_regs`, fast\n## Results\n## Results\n");
        assert!(slugs.contains("day-5-vec_regs-fast"), "{slugs:?}");
        assert!(slugs.contains("results"));
        assert!(slugs.contains("results-1"));
    }

    #[test]
    fn forbidden_words_are_found_and_ordinary_ones_are_not() {
        let hits = |text: &str| {
            FORBIDDEN
                .iter()
                .filter(|(p, _)| Regex::new(p).unwrap().is_match(text))
                .count()
        };
        for bad in [
            "Seed 000, day 2",
            "as issue 21 asked",
            "Issue 20's goals",
            "(issue 21)",
            "ran in the same session",
            "the GPU budget",
        ] {
            assert_eq!(hits(bad), 1, "{bad}");
        }
        for fine in [
            "--seed 0",
            "a warp issues 4 loads",
            "warps issue 2 loads each",
            "the register budget",
            "`Session` compares",
        ] {
            assert_eq!(hits(fine), 0, "{fine}");
        }
    }

    #[test]
    fn cited_files_must_be_tracked_here() {
        let known = KnownFiles::new(&[PathBuf::from("xtask/src/docs.rs")]);
        let here = [
            "docs.rs",
            "src/docs.rs",
            "xtask/src/docs.rs",
            "../xtask/src/docs.rs",
        ];
        // Build outputs are named by where the workspace's commands write them.
        for cited in here.into_iter().chain(["target/bundle/run.sh"]) {
            assert!(known.cited_exists(Path::new("day01"), cited), "{cited}");
        }
        // A notes file kept beside the repository, or one it never had, is not a citation; nor
        // is a file that lies in the work tree without being tracked.
        for elsewhere in [
            "PLANS.md",
            "../notes/PLANS.md",
            "notes/docs.rs",
            "../../xtask/src/docs.rs",
            "Cargo.lock.md",
        ] {
            assert!(
                !known.cited_exists(Path::new("day01"), elsewhere),
                "{elsewhere}"
            );
        }
    }

    #[test]
    fn prose_session_is_found_outside_code_only() {
        let text = "The session runs.\n\n`session` and\n\n```\nsession\n```\n";
        assert_eq!(prose_sessions(text).len(), 1);
    }

    /// The check itself, over this repository: what CI runs through `cargo test --workspace`.
    #[test]
    fn the_repository_speaks_of_itself_alone() {
        let root = crate::workspace_root();
        if !root.join(".git").exists() {
            println!("SKIPPED check-docs: not a git checkout");
            return;
        }
        let findings = check(&root).expect("check-docs runs");
        let shown: Vec<String> = findings.iter().map(|f| f.to_string()).collect();
        assert!(findings.is_empty(), "{}", shown.join("\n"));
    }
}

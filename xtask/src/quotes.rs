//! Lessons quote the key lines of their kernels, and a quote never drifts from its source.
//!
//! A kernel file marks a region with a comment line on each side (leading whitespace allowed):
//!
//! ```text
//! // quote: NAME
//! ...the lines a lesson shows...
//! // end quote: NAME
//! ```
//!
//! Regions may overlap or nest: the marker lines of every region are left out of every quote.
//! The quote is the region's lines with their common indentation removed and trailing blank
//! lines trimmed. A Markdown file quotes it with a comment line whose next line opens a fenced
//! code block, the quote's body (the path is relative to the Markdown file's folder):
//!
//! ````text
//! <!-- quote: PATH NAME -->
//! ```cuda
//! ```
//! ````
//!
//! `cargo xtask check-docs` reports a block that differs from its region, and
//! `cargo xtask quotes` rewrites every block from the kernel lines it quotes.

use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::docs::Finding;
use crate::paths::lexical_join;

/// What a Markdown quote comment starts with; a line that starts so but does not parse is
/// reported rather than ignored, so a typo cannot hide a quote from the check.
const COMMENT_START: &str = "<!-- quote:";

/// Every way the quotes of `markdown_files` (relative to `root`) differ from their sources.
pub fn check(root: &Path, markdown_files: &[PathBuf]) -> Result<Vec<Finding>> {
    let mut findings = Vec::new();
    for markdown in markdown_files {
        let text = read(root, markdown)?;
        let lines: Vec<&str> = text.lines().collect();
        for site in quote_sites(&lines) {
            if let Err(message) = site_problem(root, markdown, &lines, &site) {
                findings.push(Finding {
                    file: markdown.clone(),
                    line: site.line + 1,
                    message,
                });
            }
        }
    }
    Ok(findings)
}

/// Rewrites every quoted block of `markdown_files` (relative to `root`) from its source;
/// how many blocks changed.
pub fn write(root: &Path, markdown_files: &[PathBuf]) -> Result<usize> {
    let mut changed = 0;
    for markdown in markdown_files {
        let text = read(root, markdown)?;
        let (rewritten, blocks_changed) = rewrite(root, markdown, &text)?;
        if blocks_changed > 0 {
            std::fs::write(root.join(markdown), rewritten)
                .with_context(|| format!("writing {}", markdown.display()))?;
            changed += blocks_changed;
        }
    }
    Ok(changed)
}

fn read(root: &Path, path: &Path) -> Result<String> {
    std::fs::read_to_string(root.join(path)).with_context(|| format!("reading {}", path.display()))
}

/// `markdown`'s text with every quoted block's body made its quote, and how many changed.
fn rewrite(root: &Path, markdown: &Path, text: &str) -> Result<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len());
    let mut copied_up_to = 0;
    let mut changed = 0;
    for site in quote_sites(&lines) {
        let at = || format!("{}:{}", markdown.display(), site.line + 1);
        let (path, name) = site
            .target
            .as_ref()
            .map_err(|why| anyhow::anyhow!("{}: {why}", at()))?;
        let Some(block) = &site.block else {
            bail!("{}: {}", at(), missing_block_message());
        };
        let quote = quoted_lines(root, markdown, path, name)
            .map_err(|why| anyhow::anyhow!("{}: {why}", at()))?;
        let body = indented(&quote, &block.indent);
        if body != lines[block.body.clone()] {
            changed += 1;
        }
        out.extend(
            lines[copied_up_to..block.body.start]
                .iter()
                .map(|l| l.to_string()),
        );
        out.extend(body);
        copied_up_to = block.body.end;
    }
    out.extend(lines[copied_up_to..].iter().map(|l| l.to_string()));
    let mut rewritten = out.join("\n");
    if text.ends_with('\n') {
        rewritten.push('\n');
    }
    Ok((rewritten, changed))
}

/// Why the quote at `site` is wrong, if it is.
fn site_problem(
    root: &Path,
    markdown: &Path,
    lines: &[&str],
    site: &QuoteSite,
) -> Result<(), String> {
    let (path, name) = site.target.as_ref().map_err(String::clone)?;
    let quote = quoted_lines(root, markdown, path, name)?;
    let block = site.block.as_ref().ok_or_else(missing_block_message)?;
    if indented(&quote, &block.indent) == lines[block.body.clone()] {
        Ok(())
    } else {
        Err(format!(
            "the quote of `{name}` from `{path}` differs from its source: run `cargo xtask quotes`"
        ))
    }
}

fn missing_block_message() -> String {
    format!("a `{COMMENT_START} PATH NAME -->` line must be followed by a fenced code block")
}

/// A quote comment of a Markdown file and the block it fills.
struct QuoteSite {
    /// 0-based index of the comment's line.
    line: usize,
    /// The quoted path and region name, or why the comment does not parse.
    target: Result<(String, String), String>,
    /// None when the next line opens no fenced block, or the block never closes.
    block: Option<FencedBlock>,
}

struct FencedBlock {
    /// The fence's indentation, which every non-empty body line carries too (a block in a
    /// list item is indented with it).
    indent: String,
    /// Line indices of the body, between the fences.
    body: Range<usize>,
}

/// The quote comments of a Markdown file's lines. A comment inside a fenced block is code the
/// lesson shows (how to write a quote, say), not a quote.
fn quote_sites(lines: &[&str]) -> Vec<QuoteSite> {
    let mut sites = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(fence) = Fence::opening(lines[i]) {
            i = fence.closing_line(lines, i + 1).unwrap_or(lines.len()) + 1;
            continue;
        }
        if !lines[i].trim().starts_with(COMMENT_START) {
            i += 1;
            continue;
        }
        let block = lines
            .get(i + 1)
            .and_then(|next| Fence::opening(next))
            .and_then(|fence| {
                let close = fence.closing_line(lines, i + 2)?;
                Some(FencedBlock {
                    indent: fence.indent,
                    body: i + 2..close,
                })
            });
        let next = block.as_ref().map_or(i + 1, |b| b.body.end + 1);
        sites.push(QuoteSite {
            line: i,
            target: parse_comment(lines[i]),
            block,
        });
        i = next;
    }
    sites
}

/// `<!-- quote: PATH NAME -->` as (PATH, NAME).
fn parse_comment(line: &str) -> Result<(String, String), String> {
    let malformed = || format!("write a quote as `{COMMENT_START} PATH NAME -->`");
    let inner = line
        .trim()
        .strip_prefix(COMMENT_START)
        .and_then(|rest| rest.strip_suffix("-->"))
        .ok_or_else(malformed)?;
    match inner.split_whitespace().collect::<Vec<_>>()[..] {
        [path, name] if is_region_name(name) => Ok((path.to_string(), name.to_string())),
        _ => Err(malformed()),
    }
}

/// The opening line of a fenced code block: three or more backticks or tildes.
struct Fence {
    indent: String,
    mark: char,
    length: usize,
}

impl Fence {
    fn opening(line: &str) -> Option<Fence> {
        let trimmed = line.trim_start();
        let mark = trimmed.chars().next().filter(|c| matches!(c, '`' | '~'))?;
        let length = trimmed.chars().take_while(|&c| c == mark).count();
        let info = &trimmed[length..];
        // CommonMark: a backtick fence's info string holds no backtick (that is inline code).
        if length < 3 || (mark == '`' && info.contains('`')) {
            return None;
        }
        Some(Fence {
            indent: line[..line.len() - trimmed.len()].to_string(),
            mark,
            length,
        })
    }

    /// The index of the line at or after `from` that closes this fence.
    fn closing_line(&self, lines: &[&str], from: usize) -> Option<usize> {
        (from..lines.len()).find(|&i| {
            let candidate = lines[i].trim();
            candidate.len() >= self.length && candidate.chars().all(|c| c == self.mark)
        })
    }
}

/// The quote `name` of the file at `path` (relative to `markdown`'s folder), or why there is none.
fn quoted_lines(
    root: &Path,
    markdown: &Path,
    path: &str,
    name: &str,
) -> Result<Vec<String>, String> {
    let folder = markdown.parent().unwrap_or(Path::new(""));
    let source = lexical_join(folder, path)
        .ok_or_else(|| format!("the quoted `{path}` lies outside the repository"))?;
    let full = root.join(&source);
    if !full.is_file() {
        return Err(format!("the quoted `{path}` does not exist"));
    }
    let text = std::fs::read_to_string(&full)
        .map_err(|e| format!("the quoted `{path}` cannot be read: {e}"))?;
    region(&text, name).map_err(|why| format!("no quote `{name}` in `{path}`: {why}"))
}

/// A marker line of a kernel file's region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker<'a> {
    Begin(&'a str),
    End(&'a str),
}

impl<'a> Marker<'a> {
    fn of(line: &'a str) -> Option<Self> {
        let comment = line.trim().strip_prefix("// ")?;
        let marker = match comment.strip_prefix("end quote: ") {
            Some(name) => Marker::End(name),
            None => Marker::Begin(comment.strip_prefix("quote: ")?),
        };
        match marker {
            Marker::Begin(name) | Marker::End(name) if is_region_name(name) => Some(marker),
            _ => None,
        }
    }
}

fn is_region_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
}

/// The quote of region `name` in a kernel file's `text`, or why it has none.
fn region(text: &str, name: &str) -> Result<Vec<String>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let lines_marked = |wanted: Marker| -> Vec<usize> {
        (0..lines.len())
            .filter(|&i| Marker::of(lines[i]) == Some(wanted))
            .collect()
    };
    let begins = lines_marked(Marker::Begin(name));
    let ends = lines_marked(Marker::End(name));
    match (&begins[..], &ends[..]) {
        ([], []) => Err(format!("no line `// quote: {name}`")),
        (&[begin], &[end]) if begin < end => Ok(quote_between(&lines, begin + 1..end)),
        (&[begin], &[end]) => Err(format!(
            "its end (line {}) comes before its begin (line {})",
            end + 1,
            begin + 1
        )),
        (&[begin], []) => Err(format!(
            "it begins at line {} but has no `// end quote: {name}`",
            begin + 1
        )),
        ([], &[end]) => Err(format!(
            "it ends at line {} but has no `// quote: {name}`",
            end + 1
        )),
        _ => Err("more than one region has this name".to_string()),
    }
}

/// The lines of `range` without any region's markers, dedented, trailing blank lines trimmed.
fn quote_between(lines: &[&str], range: Range<usize>) -> Vec<String> {
    let kept: Vec<&str> = lines[range]
        .iter()
        .copied()
        .filter(|line| Marker::of(line).is_none())
        .collect();
    let mut quote = dedent(&kept);
    while quote.last().is_some_and(|line| line.is_empty()) {
        quote.pop();
    }
    quote
}

/// `lines` without the leading whitespace all non-blank ones share; blank lines become empty.
fn dedent(lines: &[&str]) -> Vec<String> {
    let margin = lines
        .iter()
        .filter(|line| !line.trim().is_empty())
        .map(|line| &line[..line.len() - line.trim_start().len()])
        .reduce(common_prefix)
        .unwrap_or("");
    lines
        .iter()
        .map(|line| {
            if line.trim().is_empty() {
                String::new()
            } else {
                line[margin.len()..].to_string()
            }
        })
        .collect()
}

fn common_prefix<'a>(a: &'a str, b: &str) -> &'a str {
    let shared: usize = a
        .chars()
        .zip(b.chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x.len_utf8())
        .sum();
    &a[..shared]
}

/// The quote as a block's body whose fence is indented by `indent`.
fn indented(quote: &[String], indent: &str) -> Vec<String> {
    quote
        .iter()
        .map(|line| {
            if line.is_empty() {
                String::new()
            } else {
                format!("{indent}{line}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder of its own under the system's temporary folder, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(test: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("xtask-quotes-{}-{test}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("day/src")).unwrap();
            Self(dir)
        }

        fn put(&self, path: &str, text: &str) {
            std::fs::write(self.0.join(path), text).unwrap();
        }

        fn get(&self, path: &str) -> String {
            std::fs::read_to_string(self.0.join(path)).unwrap()
        }

        fn findings(&self) -> Vec<Finding> {
            check(&self.0, &[PathBuf::from(LESSON)]).unwrap()
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const LESSON: &str = "day/README.md";
    const KERNEL: &str = "day/src/k.cu";

    const SOURCE: &str = "\
KERNEL void k(float* x) {
    // quote: body
    float v = x[0];

    x[0] = v * 2.0f;

    // end quote: body
}
";

    const QUOTING: &str = "\
# Day

<!-- quote: src/k.cu body -->
```cuda
float v = x[0];

x[0] = v * 2.0f;
```

After.
";

    #[test]
    fn a_matching_quote_passes() {
        let scratch = Scratch::new("matching");
        scratch.put(KERNEL, SOURCE);
        scratch.put(LESSON, QUOTING);
        assert_eq!(scratch.findings(), []);
    }

    #[test]
    fn an_edited_source_fails_until_write_repairs_it() {
        let scratch = Scratch::new("edited");
        scratch.put(KERNEL, &SOURCE.replace("2.0f", "3.0f"));
        scratch.put(LESSON, QUOTING);
        let findings = scratch.findings();
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].line, 3);
        assert!(
            findings[0].message.contains("cargo xtask quotes"),
            "{findings:?}"
        );

        let root = &scratch.0;
        assert_eq!(write(root, &[PathBuf::from(LESSON)]).unwrap(), 1);
        assert_eq!(scratch.get(LESSON), QUOTING.replace("2.0f", "3.0f"));
        assert_eq!(scratch.findings(), []);
        assert_eq!(write(root, &[PathBuf::from(LESSON)]).unwrap(), 0);
    }

    #[test]
    fn write_keeps_the_info_string_and_the_fence_indent() {
        let scratch = Scratch::new("indent");
        scratch.put(KERNEL, SOURCE);
        let stale = "- a step:\n  <!-- quote: src/k.cu body -->\n  ~~~c++ title\n  old\n  ~~~\n";
        scratch.put(LESSON, stale);
        assert_eq!(write(&scratch.0, &[PathBuf::from(LESSON)]).unwrap(), 1);
        let fresh = "- a step:\n  <!-- quote: src/k.cu body -->\n  ~~~c++ title\n  \
                     float v = x[0];\n\n  x[0] = v * 2.0f;\n  ~~~\n";
        assert_eq!(scratch.get(LESSON), fresh);
        assert_eq!(scratch.findings(), []);
    }

    #[test]
    fn overlapping_regions_drop_each_others_markers() {
        let text = "\
a();
// quote: first
b();
    // quote: second
c();
// end quote: first
d();
    // end quote: second
";
        assert_eq!(region(text, "first").unwrap(), ["b();", "c();"]);
        assert_eq!(region(text, "second").unwrap(), ["c();", "d();"]);
    }

    #[test]
    fn common_indentation_is_removed_and_inner_indentation_kept() {
        let text = "\
        // quote: loop
        for (int i = 0; i < n; ++i) {
            s += x[i];

        }
        // end quote: loop
";
        assert_eq!(
            region(text, "loop").unwrap(),
            ["for (int i = 0; i < n; ++i) {", "    s += x[i];", "", "}"]
        );
    }

    #[test]
    fn broken_regions_are_named() {
        let unclosed = "// quote: a\nx();\n";
        assert!(region(unclosed, "a").unwrap_err().contains("end quote"));
        let twice = "// quote: a\n// end quote: a\n// quote: a\n// end quote: a\n";
        assert!(region(twice, "a").unwrap_err().contains("more than one"));
        let backwards = "// end quote: a\n// quote: a\n";
        assert!(region(backwards, "a").unwrap_err().contains("before"));
    }

    #[test]
    fn a_missing_file_name_or_block_is_a_finding() {
        let scratch = Scratch::new("missing");
        scratch.put(KERNEL, SOURCE);
        let lesson = "\
<!-- quote: src/gone.cu body -->
```cuda
```
<!-- quote: src/k.cu nobody -->
```cuda
```
<!-- quote: src/k.cu body -->
The block is missing.
<!-- quote: src/k.cu -->
```cuda
```
";
        scratch.put(LESSON, lesson);
        let findings = scratch.findings();
        let at: Vec<(usize, &str)> = findings
            .iter()
            .map(|f| (f.line, f.message.as_str()))
            .collect();
        assert_eq!(at.len(), 4, "{at:?}");
        assert!(at[0].0 == 1 && at[0].1.contains("does not exist"), "{at:?}");
        assert!(
            at[1].0 == 4 && at[1].1.contains("no quote `nobody`"),
            "{at:?}"
        );
        assert!(
            at[2].0 == 7 && at[2].1.contains("fenced code block"),
            "{at:?}"
        );
        assert!(at[3].0 == 9 && at[3].1.contains("PATH NAME"), "{at:?}");
        assert!(write(&scratch.0, &[PathBuf::from(LESSON)]).is_err());
    }

    #[test]
    fn a_quote_comment_shown_inside_a_code_block_is_not_a_quote() {
        let lines = ["```md", "<!-- quote: src/gone.cu body -->", "```"];
        assert!(quote_sites(&lines).is_empty());
    }
}

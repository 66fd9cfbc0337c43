//! The book's `src/`: the table of contents (mdBook's SUMMARY), the chapters (READMEs with
//! their links rewritten), each day's kernel listing, and every repository file a page links to.
//!
//! The book mirrors the repository's layout, so a link keeps its shape: a folder's README
//! becomes the folder's `index` page (mdBook writes `index.html`; a folder link gets the file
//! name a browser needs from disk), another Markdown file keeps its path, a source file becomes
//! a listing page named after it (`.md` added), a day's `.cu` a section of that day's `kernels`
//! page, and an image is copied where it was.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, bail};
use pulldown_cmark::{Event, LinkType, Options, Parser, Tag};
use regex::Regex;

use crate::paths::lexical_join;
use crate::readme::day_folders;

/// Shown as images (and copied into the book as they are).
const IMAGE_EXTENSIONS: &[&str] = &["svg", "png", "jpg", "jpeg", "gif", "webp"];

/// The words the lessons use, a chapter after the introduction.
const GLOSSARY: &str = "GLOSSARY.md";

/// The page that lists the files the chapters link to (none of the repository's names).
const CITED_PAGE: &str = "cited-files.md";

/// One chapter of the table of contents.
struct Chapter {
    title: String,
    /// The Markdown file of the repository, relative to the root.
    file: PathBuf,
    /// The day's lab notebook (`NOTES.md` beside its lesson), when it has one.
    notes: Option<PathBuf>,
    /// The day's kernel listing (its folder's `kernels` page), when the day has kernels.
    kernels: Option<PathBuf>,
}

/// Writes the book's sources for the repository at `root` into `staging/src`.
pub fn stage(root: &Path, staging: &Path) -> Result<()> {
    let src = staging.join("src");
    if src.exists() {
        fs::remove_dir_all(&src).with_context(|| format!("emptying {}", src.display()))?;
    }
    fs::create_dir_all(&src)?;

    let mut chapters = vec![Chapter {
        title: "Introduction".to_string(),
        file: PathBuf::from("README.md"),
        notes: None,
        kernels: None,
    }];
    if root.join(GLOSSARY).exists() {
        chapters.push(Chapter {
            title: "Glossary".to_string(),
            file: PathBuf::from(GLOSSARY),
            notes: None,
            kernels: None,
        });
    }
    let mut stager = Stager::new(root, &src);
    for day in day_folders(root)? {
        let folder = day.folder.strip_prefix(root)?.to_path_buf();
        let kernels = stager.kernel_page(&folder, &day.package)?;
        let notes = folder.join(crate::readme::NOTES);
        chapters.push(Chapter {
            title: format!("Day {}: {}", &day.package[3..], day.topic),
            file: folder.join("README.md"),
            notes: root.join(&notes).exists().then_some(notes),
            kernels,
        });
    }
    chapters.push(Chapter {
        title: "How a day is written".to_string(),
        file: PathBuf::from("CONTRIBUTING.md"),
        notes: None,
        kernels: None,
    });
    let pages = |c: &Chapter| std::iter::once(c.file.clone()).chain(c.notes.clone());
    stager.chapters = chapters.iter().flat_map(pages).collect();

    for page in chapters.iter().flat_map(pages) {
        stager.markdown_page(&page)?;
    }
    // Pages linked from pages: each may link further (the queue grows while it is read).
    let mut next = 0;
    while next < stager.extra.len() {
        let file = stager.extra[next].clone();
        if is_markdown(&file) {
            stager.markdown_page(&file)?;
        } else {
            stager.listing_page(&file)?;
        }
        next += 1;
    }
    stager.copy_assets()?;
    stager.cited_page()?;
    write(&src.join("SUMMARY.md"), &summary(&chapters, &stager.extra))
}

/// What the pages need while they are written.
struct Stager<'a> {
    root: &'a Path,
    src: &'a Path,
    /// The chapters' Markdown files (relative to the root).
    chapters: HashSet<PathBuf>,
    /// Each day's kernel file: its listing page and the id of its section there.
    kernel_sections: HashMap<PathBuf, (PathBuf, String)>,
    /// Files linked from pages that are not chapters, in the order first linked.
    extra: Vec<PathBuf>,
    /// Files copied as they are (images, and anything that is not text).
    assets: BTreeSet<PathBuf>,
    html_attr: Regex,
}

impl<'a> Stager<'a> {
    fn new(root: &'a Path, src: &'a Path) -> Self {
        Self {
            root,
            src,
            chapters: HashSet::new(),
            kernel_sections: HashMap::new(),
            extra: Vec::new(),
            assets: BTreeSet::new(),
            html_attr: Regex::new(r#"\b(?:href|src)\s*=\s*"([^"]*)""#).expect("a valid pattern"),
        }
    }

    /// Writes the folder's `kernels` page, every `.cu` and `.cuh` of the day in a section of its own;
    /// None for a day without kernels.
    fn kernel_page(&mut self, folder: &Path, package: &str) -> Result<Option<PathBuf>> {
        let mut files = Vec::new();
        collect_kernels(self.root, folder, &mut files)?;
        if files.is_empty() {
            return Ok(None);
        }
        files.sort();
        let page = folder.join("kernels.md");
        let mut text = format!(
            "# Day {} kernels\n\nThe CUDA sources of [day {}](index.md), as the day compiles \
             them (the headers they include from `common/cuda/` are shared by every day).\n",
            &package[3..],
            &package[3..]
        );
        for file in &files {
            let shown = file.strip_prefix(folder)?;
            let id = section_id(shown);
            let code = read_text(self.root, file)?
                .with_context(|| format!("{} is not UTF-8 text", file.display()))?;
            text.push_str(&format!(
                "\n## `{}` {{#{id}}}\n\n{}",
                shown.display(),
                fenced(&code, "cpp")
            ));
            self.kernel_sections
                .insert(file.clone(), (page.clone(), id.clone()));
        }
        write(&self.src.join(&page), &text)?;
        Ok(Some(page))
    }

    /// Writes a Markdown file of the repository as a page, its relative links rewritten.
    fn markdown_page(&mut self, file: &Path) -> Result<()> {
        let text = read_text(self.root, file)?
            .with_context(|| format!("{} is not UTF-8 text", file.display()))?;
        let rewritten = self
            .rewrite_links(file, &text)
            .with_context(|| format!("rewriting the links of {}", file.display()))?;
        write(&self.src.join(page_of(file)), &rewritten)
    }

    /// Writes a text file of the repository as a page that shows it whole.
    fn listing_page(&mut self, file: &Path) -> Result<()> {
        let code = read_text(self.root, file)?
            .with_context(|| format!("{} is not UTF-8 text", file.display()))?;
        let text = format!(
            "# `{}`\n\n{}",
            file.display(),
            fenced(&code, language_of(file))
        );
        write(&self.src.join(page_of(file)), &text)
    }

    /// `text` (the file `file`) with every relative link and image pointed at its place in the
    /// book. Inline links are rewritten where they stand, reference links at their definition,
    /// and `href`/`src` attributes of raw HTML where they stand.
    fn rewrite_links(&mut self, file: &Path, text: &str) -> Result<String> {
        let mut edits: Vec<(Range<usize>, String)> = Vec::new();
        let parser = Parser::new_ext(text, Options::all());
        let definitions: Vec<(Range<usize>, String)> = parser
            .reference_definitions()
            .iter()
            .map(|(_, def)| (def.span.clone(), def.dest.to_string()))
            .collect();
        for (span, dest) in definitions {
            let at = text[span.clone()]
                .rfind(dest.as_str())
                .map(|i| span.start + i)
                .with_context(|| format!("the link definition of `{dest}`"))?;
            if let Some(new) = self.resolve(file, &dest)? {
                edits.push((at..at + dest.len(), new));
            }
        }
        for (event, range) in parser.into_offset_iter() {
            match event {
                Event::Start(
                    Tag::Link {
                        link_type,
                        dest_url,
                        ..
                    }
                    | Tag::Image {
                        link_type,
                        dest_url,
                        ..
                    },
                ) if link_type == LinkType::Inline => {
                    let Some(new) = self.resolve(file, &dest_url)? else {
                        continue;
                    };
                    let at =
                        inline_destination(text, range.clone(), &dest_url).with_context(|| {
                            format!(
                                "line {}: the link to `{dest_url}`",
                                line_of(text, range.start)
                            )
                        })?;
                    edits.push((at, new));
                }
                Event::Html(html) | Event::InlineHtml(html) => {
                    for caps in self.html_attr.clone().captures_iter(&html) {
                        let value = caps.get(1).expect("group 1 always takes part");
                        let Some(new) = self.resolve(file, value.as_str())? else {
                            continue;
                        };
                        // The event's text is the source's own for raw HTML.
                        let start = range.start + value.start();
                        if text.get(start..start + value.len()) != Some(value.as_str()) {
                            bail!(
                                "line {}: cannot place the HTML link `{}`",
                                line_of(text, range.start),
                                value.as_str()
                            );
                        }
                        edits.push((start..start + value.len(), new));
                    }
                }
                _ => {}
            }
        }
        edits.sort_by_key(|(range, _)| range.start);
        let mut out = String::with_capacity(text.len());
        let mut done = 0;
        for (range, new) in edits {
            if range.start < done {
                bail!("two links overlap at byte {}", range.start);
            }
            out.push_str(&text[done..range.start]);
            out.push_str(&new);
            done = range.end;
        }
        out.push_str(&text[done..]);
        Ok(out)
    }

    /// Where a link of `from` to `dest` points in the book; None when it stays as written (an
    /// absolute URL, an e-mail address, an anchor of the same page).
    fn resolve(&mut self, from: &Path, dest: &str) -> Result<Option<String>> {
        if dest.is_empty() || dest.starts_with('#') || dest.starts_with("//") || has_scheme(dest) {
            return Ok(None);
        }
        let (path, fragment) = match dest.split_once('#') {
            Some((path, fragment)) => (path, Some(fragment)),
            None => (dest, None),
        };
        let from_dir = from.parent().unwrap_or(Path::new(""));
        let target = lexical_join(from_dir, path)
            .with_context(|| format!("link to `{dest}` leaves the repository"))?;
        let on_disk = self.root.join(&target);
        let (page, fragment) = if on_disk.is_dir() {
            let readme = target.join("README.md");
            if !self.root.join(&readme).is_file() {
                bail!("link to `{dest}`: a folder without a README.md, which the book cannot show");
            }
            self.want(&readme);
            (page_of(&readme), fragment.map(str::to_string))
        } else if !on_disk.is_file() {
            bail!("link to `{dest}`: no such file");
        } else if let Some((page, id)) = self.kernel_sections.get(&target) {
            (page.clone(), Some(id.clone()))
        } else if has_extension(&target, IMAGE_EXTENSIONS) {
            self.assets.insert(target.clone());
            (target, fragment.map(str::to_string))
        } else if is_markdown(&target) {
            self.want(&target);
            (page_of(&target), fragment.map(str::to_string))
        } else if read_text(self.root, &target)?.is_some() {
            // A listing has no line anchors: `#L10` opens the file at its top.
            self.want(&target);
            (page_of(&target), None)
        } else {
            self.assets.insert(target.clone());
            (target, None)
        };
        let mut new = relative(from_dir, &page);
        if let Some(fragment) = fragment.filter(|f| !f.is_empty()) {
            new.push('#');
            new.push_str(&fragment);
        }
        Ok(Some(new))
    }

    /// Queues a page for a file that is not a chapter (once).
    fn want(&mut self, file: &Path) {
        if !self.chapters.contains(file) && !self.extra.iter().any(|f| f == file) {
            self.extra.push(file.to_path_buf());
        }
    }

    fn copy_assets(&self) -> Result<()> {
        for asset in &self.assets {
            let to = self.src.join(asset);
            if let Some(dir) = to.parent() {
                fs::create_dir_all(dir)?;
            }
            fs::copy(self.root.join(asset), &to)
                .with_context(|| format!("copying {} into the book", asset.display()))?;
        }
        Ok(())
    }

    /// The page that opens the files the chapters link to.
    fn cited_page(&self) -> Result<()> {
        let mut text = String::from(
            "# Cited files\n\nFiles of the repository that the chapters link to, shown here so \
             that every link of the book opens from disk.\n\n",
        );
        for file in &self.extra {
            text.push_str(&format!(
                "- [`{}`]({})\n",
                file.display(),
                page_of(file).display()
            ));
        }
        write(&self.src.join(CITED_PAGE), &text)
    }
}

/// The table of contents: the introduction, the glossary, each day with its notes and its
/// kernels, CONTRIBUTING.md, then the cited files under a page of their own.
fn summary(chapters: &[Chapter], extra: &[PathBuf]) -> String {
    let mut text = String::from("# Summary\n\n");
    let (intro, rest) = chapters
        .split_first()
        .expect("the introduction is a chapter");
    text.push_str(&format!(
        "[{}]({})\n\n",
        intro.title,
        page_of(&intro.file).display()
    ));
    for chapter in rest {
        text.push_str(&format!(
            "- [{}]({})\n",
            chapter.title,
            page_of(&chapter.file).display()
        ));
        if let Some(notes) = &chapter.notes {
            text.push_str(&format!("  - [Notes]({})\n", page_of(notes).display()));
        }
        if let Some(kernels) = &chapter.kernels {
            text.push_str(&format!("  - [Kernels]({})\n", kernels.display()));
        }
    }
    if !extra.is_empty() {
        text.push_str(&format!("- [Cited files]({CITED_PAGE})\n"));
        for file in extra {
            text.push_str(&format!(
                "  - [{}]({})\n",
                file.display(),
                page_of(file).display()
            ));
        }
    }
    text
}

/// The page of the book that shows a file of the repository.
fn page_of(file: &Path) -> PathBuf {
    if file.file_name().is_some_and(|n| n == "README.md") {
        file.with_file_name("index.md")
    } else if is_markdown(file) {
        file.to_path_buf()
    } else {
        let mut name = file.as_os_str().to_owned();
        name.push(".md");
        PathBuf::from(name)
    }
}

/// Every `.cu` and `.cuh` under `folder` (relative to `root`), build outputs left out.
fn collect_kernels(root: &Path, folder: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in
        fs::read_dir(root.join(folder)).with_context(|| format!("reading {}", folder.display()))?
    {
        let entry = entry?;
        let path = folder.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            if entry.file_name() != "target" {
                collect_kernels(root, &path, files)?;
            }
        } else if has_extension(&path, &["cu", "cuh"]) {
            files.push(path);
        }
    }
    Ok(())
}

/// The id of a kernel file's section: its path with every other character a `-`.
fn section_id(file: &Path) -> String {
    file.to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

/// `code` in a fenced block longer than any run of backticks inside it.
fn fenced(code: &str, language: &str) -> String {
    let longest = code.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let newline = if code.ends_with('\n') { "" } else { "\n" };
    format!("{fence}{language}\n{code}{newline}{fence}\n")
}

/// The highlighting of a listing (mdBook's highlight.js names; Rust without playground buttons).
fn language_of(file: &Path) -> &'static str {
    match file.extension().and_then(|e| e.to_str()) {
        Some("rs") => "rust,noplayground",
        Some("cu" | "cuh" | "h" | "cpp") => "cpp",
        Some("py") => "python",
        Some("toml") => "toml",
        Some("sh") => "bash",
        Some("json") => "json",
        _ => "text",
    }
}

/// Where the destination of the inline link at `range` is written: after the last `](` of the
/// link (an image inside a link text has its own, earlier), optionally inside `<...>`.
fn inline_destination(text: &str, range: Range<usize>, dest: &str) -> Option<Range<usize>> {
    let source = &text[range.clone()];
    let open = source.rfind("](")? + 2;
    let rest = &source[open..];
    let skipped = rest.len() - rest.trim_start().len();
    let rest = &rest[skipped..];
    let angle = usize::from(rest.starts_with('<'));
    rest[angle..].starts_with(dest).then(|| {
        let start = range.start + open + skipped + angle;
        start..start + dest.len()
    })
}

/// The link from a page in `from_dir` to `to` (both relative to the book's root), with `/`.
fn relative(from_dir: &Path, to: &Path) -> String {
    let from: Vec<Component<'_>> = from_dir.components().collect();
    let to: Vec<Component<'_>> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".to_string(); from.len() - common];
    parts.extend(
        to[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

fn has_scheme(link: &str) -> bool {
    link.split_once(':').is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
    })
}

fn has_extension(path: &Path, extensions: &[&str]) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| extensions.contains(&e.to_ascii_lowercase().as_str()))
}

fn is_markdown(path: &Path) -> bool {
    has_extension(path, &["md"])
}

/// The file's text, or None when it is not UTF-8 (a binary to copy, not to show).
fn read_text(root: &Path, file: &Path) -> Result<Option<String>> {
    let bytes = fs::read(root.join(file)).with_context(|| format!("reading {}", file.display()))?;
    Ok(String::from_utf8(bytes).ok())
}

fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_mirror_the_repository() {
        assert_eq!(
            page_of(Path::new("day05_x/README.md")),
            Path::new("day05_x/index.md")
        );
        assert_eq!(
            page_of(Path::new("CHANGELOG.md")),
            Path::new("CHANGELOG.md")
        );
        assert_eq!(
            page_of(Path::new("common/src/lib.rs")),
            Path::new("common/src/lib.rs.md")
        );
    }

    #[test]
    fn relative_links_climb_and_descend() {
        assert_eq!(
            relative(Path::new("day05_x"), Path::new("day04_y/index.md")),
            "../day04_y/index.md"
        );
        assert_eq!(
            relative(Path::new(""), Path::new("day05_x/index.md")),
            "day05_x/index.md"
        );
        assert_eq!(
            relative(Path::new("day05_x"), Path::new("day05_x/sweep.svg")),
            "sweep.svg"
        );
        assert_eq!(lexical_join(Path::new(""), "../x"), None);
    }

    #[test]
    fn the_destination_is_found_after_an_inner_image() {
        let text = "see [![plot](a.svg)](day05_x/) and [b](<c d.md>)";
        let outer = text.find("[![").unwrap()..text.find(" and").unwrap();
        let at = inline_destination(text, outer, "day05_x/").unwrap();
        assert_eq!(&text[at], "day05_x/");
        let last = text.find("[b]").unwrap()..text.len();
        let at = inline_destination(text, last, "c d.md").unwrap();
        assert_eq!(&text[at], "c d.md");
    }

    #[test]
    fn fences_outlast_backticks_inside() {
        assert!(fenced("a ```` b", "cpp").starts_with("`````cpp\n"));
        assert!(fenced("x", "cpp").starts_with("```cpp\n"));
    }

    #[test]
    fn schemes_are_absolute() {
        assert!(has_scheme("https://x.org"));
        assert!(has_scheme("mailto:a@b"));
        assert!(!has_scheme("src/lib.rs"));
        assert!(!has_scheme("a/b:c"));
    }
}

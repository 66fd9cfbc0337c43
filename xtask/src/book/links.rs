//! The built book's links, as a browser opening it from disk follows them: every `href` and
//! `src` of every `.html` page (mdBook's own navigation and theme files included) that is
//! relative must name a file of the site, and a `#fragment` must name an `id` of the page it
//! goes to. Absolute URLs (`https:`, `mailto:`, ...) are left alone.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use regex::Regex;

use crate::paths::lexical_join;

/// What the check looked at, and what it found broken (`page: target: why`).
#[derive(Debug, Default)]
pub struct Summary {
    pub pages: usize,
    pub links: usize,
    pub images: usize,
    pub broken: Vec<String>,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "book links: {} pages, {} links and {} images checked, {} broken",
            self.pages,
            self.links,
            self.images,
            self.broken.len()
        )
    }
}

/// One page's relative references and ids.
struct Page {
    /// A `<base href>`: the folder its relative references start from (mdBook's 404 page,
    /// which a web server shows at any depth, has `/`: the site's root).
    base: Option<String>,
    /// `(tag, target)` of each relative `href` / `src`, entities decoded.
    references: Vec<(String, String)>,
    ids: BTreeSet<String>,
}

/// Checks every page of the site in `site`.
pub fn check(site: &Path) -> Result<Summary> {
    let tag = Regex::new(r"(?s)<([a-zA-Z][a-zA-Z0-9]*)\b([^>]*)>").expect("a valid pattern");
    let attr = Regex::new(r#"(?s)\b([a-zA-Z:-]+)\s*=\s*(?:"([^"]*)"|'([^']*)')"#)
        .expect("a valid pattern");
    let mut pages = BTreeMap::new();
    for file in html_files(site)? {
        let html =
            fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let relative = file.strip_prefix(site)?.to_path_buf();
        pages.insert(relative, parse(&without_scripts(&html), &tag, &attr));
    }

    let mut summary = Summary {
        pages: pages.len(),
        ..Summary::default()
    };
    for (path, page) in &pages {
        let dir = path.parent().unwrap_or(Path::new(""));
        let dir = match page.base.as_deref() {
            Some(base) if base.starts_with('/') => PathBuf::from(base.trim_start_matches('/')),
            Some(base) => match lexical_join(dir, base) {
                Some(dir) => dir,
                None => {
                    summary.broken.push(format!(
                        "{}: <base href=\"{base}\">: climbs out of the site",
                        path.display()
                    ));
                    continue;
                }
            },
            None => dir.to_path_buf(),
        };
        for (tag, target) in &page.references {
            if tag == "img" {
                summary.images += 1;
            } else {
                summary.links += 1;
            }
            if let Some(why) = broken(site, &pages, path, &dir, target) {
                summary
                    .broken
                    .push(format!("{}: `{target}`: {why}", path.display()));
            }
        }
    }
    Ok(summary)
}

/// Why `target`, referenced from the page `path` in `dir`, does not open; None when it does.
fn broken(
    site: &Path,
    pages: &BTreeMap<PathBuf, Page>,
    path: &Path,
    dir: &Path,
    target: &str,
) -> Option<String> {
    let (file, fragment) = match target.split_once('#') {
        Some((file, fragment)) => (file, Some(fragment)),
        None => (target, None),
    };
    // A query (`?search=...`) is read by the page's script, not by the file system.
    let file = file.split('?').next().unwrap_or_default();
    if file.starts_with('/') {
        return Some("a path from `/`: opened from disk it is the file system's root".to_string());
    }
    let linked = if file.is_empty() {
        path.to_path_buf()
    } else {
        match lexical_join(dir, &percent_decoded(file)) {
            Some(linked) => linked,
            None => return Some("climbs out of the site".to_string()),
        }
    };
    if !site.join(&linked).is_file() {
        return Some(if site.join(&linked).is_dir() {
            "a folder: opened from disk it shows a listing, not a page".to_string()
        } else {
            "no such file".to_string()
        });
    }
    let fragment = fragment.filter(|f| !f.is_empty())?;
    let page = pages.get(&linked)?; // a fragment of a non-HTML file is not checked
    (!page.ids.contains(&percent_decoded(fragment)))
        .then(|| format!("no id `{fragment}` in {}", linked.display()))
}

/// The page's HTML without its inline scripts, whose strings build markup at run time.
fn without_scripts(html: &str) -> String {
    let script = Regex::new(r"(?is)<script\b[^>]*>.*?</script>").expect("a valid pattern");
    script
        .replace_all(html, |caps: &regex::Captures<'_>| {
            let whole = &caps[0];
            // Keep the opening tag: its `src` is a file the page loads.
            let open_end = whole.find('>').map_or(0, |i| i + 1);
            whole[..open_end].to_string()
        })
        .into_owned()
}

fn parse(html: &str, tag: &Regex, attr: &Regex) -> Page {
    let mut references = Vec::new();
    let mut ids = BTreeSet::new();
    let mut base = None;
    for caps in tag.captures_iter(html) {
        let name = caps[1].to_ascii_lowercase();
        for a in attr.captures_iter(&caps[2]) {
            let value = decoded(a.get(2).or_else(|| a.get(3)).map_or("", |m| m.as_str()));
            match a[1].to_ascii_lowercase().as_str() {
                "href" if name == "base" => base = Some(value),
                "id" | "name" if name != "meta" && name != "input" => {
                    ids.insert(value);
                }
                "href" | "src" if is_relative(&value) => {
                    references.push((name.clone(), value));
                }
                _ => {}
            }
        }
    }
    Page {
        base,
        references,
        ids,
    }
}

/// A reference the site itself must hold: not an absolute URL, and not this page's top (`#`).
fn is_relative(value: &str) -> bool {
    let has_scheme = value.split_once(':').is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
    });
    !(value.is_empty() || value == "#" || value.starts_with("//") || has_scheme)
}

/// The HTML entities mdBook writes in attributes.
fn decoded(value: &str) -> String {
    value
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// `%20` and the like, as a browser decodes a path before it opens the file.
fn percent_decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn html_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in
            fs::read_dir(&folder).with_context(|| format!("reading {}", folder.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "html") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small site in a fresh folder of the system's temporary directory.
    fn site(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("xtask-book-links-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        for (path, text) in files {
            let path = dir.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn a_whole_site_passes() {
        let dir = site(
            "whole",
            &[
                (
                    "index.html",
                    r##"<a href="day01/index.html#results">x</a> <a href="#top">t</a>
                    <h1 id="top">T</h1> <a href="https://example.org/missing">e</a>
                    <a href="mailto:a@b">m</a> <link href="css/x.css?v=1" rel="stylesheet">
                    <script src="book.js"></script>
                    <script>var s = '<a href="nowhere.html">';</script>"##,
                ),
                (
                    "day01/index.html",
                    r#"<h2 id="results">R</h2><img src="sweep.svg" alt="p"><a href="../index.html">up</a>"#,
                ),
                ("day01/sweep.svg", "<svg/>"),
                (
                    "deep/404.html",
                    r#"<base href="/"><link href="css/x.css" rel="stylesheet">"#,
                ),
                ("css/x.css", ""),
                ("book.js", ""),
            ],
        );
        let summary = check(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert!(summary.broken.is_empty(), "{:?}", summary.broken);
        assert_eq!((summary.pages, summary.images), (3, 1));
        // day01 and #top from index, the stylesheets, book.js, and ../index.html.
        assert_eq!(summary.links, 6);
    }

    #[test]
    fn missing_files_fragments_and_folders_are_broken() {
        let dir = site(
            "broken",
            &[
                (
                    "index.html",
                    r##"<a href="day01/index.html#nowhere">a</a> <a href="day02/">b</a>
                    <img src="day01/plot.svg"> <a href="#gone">c</a> <a href="../out.html">d</a>
                    <a href="/index.html">e</a>"##,
                ),
                ("day01/index.html", r#"<h1 id="day-01">D</h1>"#),
                ("day02/index.html", ""),
            ],
        );
        let summary = check(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        let broken = summary.broken.join("\n");
        assert_eq!(summary.broken.len(), 6, "{broken}");
        for expected in [
            "no id `nowhere` in day01/index.html",
            "`day02/`: a folder",
            "`day01/plot.svg`: no such file",
            "`#gone`: no id",
            "climbs out",
            "`/index.html`: a path from `/`",
        ] {
            assert!(broken.contains(expected), "{expected} in\n{broken}");
        }
    }
}

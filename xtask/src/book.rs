//! `cargo xtask book`: the lessons as an mdBook site. The root README opens it, each day's
//! README is a chapter with its kernels as a sub-chapter beside it, and CONTRIBUTING.md closes
//! it; every file a chapter links to is in the book too (plots as images, Markdown as pages,
//! source as listings), so the site works opened from disk. The book's sources are generated
//! under `target/` (never in the tracked tree), built with the mdBook library, and every
//! relative link and image of the built pages is checked before the command succeeds.

mod links;
mod sources;

#[cfg(test)]
mod browser;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use mdbook_driver::MDBook;
use mdbook_driver::config::Config;

/// What mdBook is told beyond its defaults: no preprocessors (the sources are generated whole,
/// and `{{#include}}` in a kernel must stay text), no section numbers (days have their own),
/// no playground buttons on Rust listings, and search on.
const BOOK_TOML: &str = r#"
[book]
title = "100 days of GPU, in Rust"
language = "en"
src = "src"

[build]
create-missing = false
use-default-preprocessors = false

[output.html]
no-section-label = true

[output.html.playground]
runnable = false
copyable = true

[output.html.search]
enable = true
"#;

/// Builds the book into `out` and checks its links; prints where it is and what was checked.
pub fn run(root: &Path, out: &Path) -> Result<()> {
    let started = Instant::now();
    let summary = build(root, out)?;
    println!("{summary}");
    println!(
        "book: {} in {:.1} s; open {}",
        out.display(),
        started.elapsed().as_secs_f64(),
        out.join("index.html").display()
    );
    Ok(())
}

/// Generates the book's sources, builds the site into `out` and checks every page's relative
/// links and images; the checker's summary on success, every broken link as the error otherwise.
pub fn build(root: &Path, out: &Path) -> Result<links::Summary> {
    let out = absolute(out)?;
    refuse_unsafe_out(root, &out)?;
    let staging = staging_for(root, &out);
    sources::stage(root, &staging)
        .with_context(|| format!("writing the book's sources into {}", staging.display()))?;

    let mut config = Config::from_str(BOOK_TOML).context("the book's configuration")?;
    config.build.build_dir = out.clone();
    let book = MDBook::load_with_config(&staging, config)
        .with_context(|| format!("loading the book from {}", staging.display()))?;
    book.build()
        .with_context(|| format!("building the book into {}", out.display()))?;

    let summary = links::check(&out)?;
    if !summary.broken.is_empty() {
        bail!(
            "{} broken link(s) in the built book:\n{}",
            summary.broken.len(),
            summary.broken.join("\n")
        );
    }
    Ok(summary)
}

/// The staging folder of the book's sources: one per output folder, so a test's build and
/// `cargo xtask book` never write into each other's.
fn staging_for(root: &Path, out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "book".to_string());
    root.join("target").join("book-src").join(name)
}

fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))
}

/// mdBook empties its output folder before writing: refuse one that holds the repository, or
/// one that holds files but no earlier book.
fn refuse_unsafe_out(root: &Path, out: &Path) -> Result<()> {
    let root = absolute(root)?;
    if root.starts_with(out) {
        bail!(
            "--out {} holds the repository; the build would empty it",
            out.display()
        );
    }
    let holds_files = out.is_dir()
        && std::fs::read_dir(out)
            .with_context(|| format!("reading {}", out.display()))?
            .next()
            .is_some();
    if holds_files && !(out.join("index.html").exists() && out.join("print.html").exists()) {
        bail!(
            "--out {} holds files that are not a book; the build would delete them",
            out.display()
        );
    }
    Ok(())
}

//! Workspace chores, run as `cargo xtask <command>`:
//!
//! - `bundle [--days day20]`: build every day's (or those days') release binary and test
//!   executables, and compile their kernels for Hopper, into `target/bundle/` with `run.sh`,
//!   to copy to a GPU host that has no Rust;
//! - `report DIR/results.json [DIR2/results.json ...]`: write the tables of a GPU run into the
//!   READMEs (a run split over several `run.sh --days` calls at one commit gives several);
//! - `check-docs`: fail on a broken relative link, a cited file the repository does not have,
//!   a quoted block that no longer matches the kernel lines it quotes, or words about how the
//!   work was organised rather than about the code;
//! - `quotes`: rewrite every quoted block of the Markdown files (`<!-- quote: PATH NAME -->`
//!   above a fenced block) from the region `// quote: NAME` ... `// end quote: NAME` of PATH;
//! - `lesson-tables`: make each lesson's short results tables again from its notes (the run's
//!   full tables), after a lesson changes which problems it shows;
//! - `book`: build the READMEs, each day's kernels beside its lesson, into an mdBook site in
//!   `target/book/` (opens from disk), and fail on any link or image of it that does not open.

mod book;
mod bundle;
mod command;
mod docs;
mod lesson_tables;
mod lessons;
mod paths;
mod quotes;
mod readme;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    about = "Workspace chores: bundle for a GPU host, report its results, check the docs, refresh their quotes, build the book"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build release binaries and test executables into a folder with run.sh.
    Bundle {
        /// Where to put the bundle.
        #[arg(long, default_value = "target/bundle")]
        out: PathBuf,
        /// Leave the kernels to be compiled on the GPU host (needs no NVRTC here).
        #[arg(long)]
        no_kernels: bool,
        /// Only these days (comma-separated: day20,day10): their binaries, test executables,
        /// benches and kernels, the peers' and verify's scripts, and the `kernels` binary. A
        /// launcher change then costs a build of those days alone.
        #[arg(long, value_delimiter = ',', value_name = "dayNN[,dayNN]")]
        days: Vec<String>,
        /// With --days: also build the PyTorch extension's wheel and fetch the peers' wheels,
        /// and compile the kernels of the days the extension runs
        /// (a bundle of every day always has them).
        #[arg(long, requires = "days")]
        wheels: bool,
    },
    /// Rewrite the results tables in each day's README and the root README.
    Report {
        /// results.json written by run.sh on the GPU host; several when the run was split with
        /// `--days` (they must come from the same commit).
        #[arg(required = true)]
        results: Vec<PathBuf>,
        /// Accept results from a bundle built with uncommitted changes.
        #[arg(long)]
        allow_dirty: bool,
    },
    /// Check every tracked text file: relative links and images, cited files, quoted kernel
    /// lines, and words that speak of anything but this repository.
    CheckDocs,
    /// Rewrite every quoted block of the Markdown files from the kernel lines it quotes.
    Quotes,
    /// Make each lesson's short results tables again from the full tables in its notes.
    LessonTables,
    /// Build the READMEs and each day's kernels into an mdBook site, and check its links.
    Book {
        /// Where to put the site.
        #[arg(long, default_value = "target/book")]
        out: PathBuf,
    },
}

/// The variable that makes the days compile a checkout's kernel files
/// (`common::gpu::kernel_source`): a bundle never takes them.
const SOURCES_ENV: &str = common::gpu::kernel_source::SOURCES_ENV;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = workspace_root();
    let result = match cli.command {
        Command::Bundle {
            out,
            no_kernels,
            days,
            wheels,
        } => bundle::bundle(
            &root,
            &root.join(out),
            &bundle::Contents {
                kernels: !no_kernels,
                days,
                wheels,
            },
        ),
        Command::Report {
            results,
            allow_dirty,
        } => readme::report(&root, &results, allow_dirty),
        Command::CheckDocs => docs::run(&root),
        Command::Quotes => rewrite_quotes(&root),
        Command::LessonTables => lesson_tables::write_all(&root),
        Command::Book { out } => book::run(&root, &root.join(out)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo xtask quotes`: every tracked Markdown file's quotes made their sources' lines again.
fn rewrite_quotes(root: &Path) -> Result<()> {
    let markdown: Vec<PathBuf> = docs::tracked_files(root)?
        .into_iter()
        .filter(|path| docs::is_markdown(path))
        .collect();
    let changed = quotes::write(root, &markdown)?;
    println!("{changed} quoted block(s) rewritten");
    Ok(())
}

/// The workspace root: xtask lives one folder below it.
fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent folder")
        .to_path_buf()
}

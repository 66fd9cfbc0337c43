//! `cargo run --release -p kernels -- [--days day18] [--arch sm_90] [--cache DIR]`: compiles
//! every kernel of the selected days with NVRTC (no GPU needed) and prints each kernel's
//! registers and spill bytes from ptxas's report. The compiled kernels go into the kernel
//! cache the days use (or DIR), so the next run of those days loads them. Under
//! `DAYS_OF_GPU_KERNEL_SOURCES=CHECKOUT` it compiles that checkout's files, so an edited
//! kernel's registers and spills need no rebuild either.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Parser;
use comfy_table::{Table, presets::ASCII_MARKDOWN};
use common::error::UsageError;
use common::gpu::kernel_build::BUNDLED_DEVICE_ARCH;

#[derive(Parser)]
#[command(about = "Compile every day's kernels with NVRTC (no GPU) and show registers and spills")]
struct Args {
    /// Only these days (comma-separated: day10,day20); all of them by default.
    #[arg(long, value_delimiter = ',', value_name = "dayNN[,dayNN]")]
    days: Vec<String>,
    /// The GPU to compile for: sm_90 (Hopper: the sm_90a builds too), sm_80, ...
    #[arg(long, default_value = BUNDLED_DEVICE_ARCH)]
    arch: String,
    /// The kernel cache to fill; the one the days use by default.
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
    /// Also write DIR/MANIFEST (the bundle's list of its kernels, which run.sh reads).
    #[arg(long, requires = "cache")]
    manifest: bool,
    /// Print the days that compile kernels, one a line, and stop (run.sh picks from them).
    #[arg(long, exclusive = true)]
    list_days: bool,
}

fn main() -> ExitCode {
    common::cli::run_main(|| run(Args::parse()))
}

fn run(args: Args) -> Result<()> {
    if !args.arch.starts_with("sm_") || args.arch.ends_with('a') {
        bail!(UsageError::new(format!(
            "--arch {}: name the GPU's architecture, sm_XY (sm_90 for Hopper; its sm_90a \
             builds come with it)",
            args.arch
        )));
    }
    let days = kernels::all_days();
    if args.list_days {
        for (day, _) in &days {
            println!("{day}");
        }
        return Ok(());
    }
    if let Some(unknown) = args.days.iter().find(|d| !days.iter().any(|(n, _)| n == d)) {
        let known: Vec<&str> = days.iter().map(|(n, _)| *n).collect();
        bail!(UsageError::new(format!(
            "--days: no day `{unknown}` compiles kernels; choose from {}",
            known.join(", ")
        )));
    }
    common::gpu::nvrtc::ensure_available()?;
    let builds: Vec<_> = days
        .into_iter()
        .filter(|(day, _)| args.days.is_empty() || args.days.iter().any(|d| d == day))
        .flat_map(|(day, builds)| builds.into_iter().map(move |b| (day, b)))
        .collect();
    let done = kernels::compile_all(builds, &args.arch, args.cache.as_deref())?;

    let mut table = Table::new();
    table.load_preset(ASCII_MARKDOWN).set_header([
        "day", "file", "arch", "kernel", "regs", "spill B", "compiled", "source",
    ]);
    let (mut compiled, mut spilling) = (0, 0);
    for d in &done {
        let how = if d.compiled.from_cache {
            "cached".to_string()
        } else {
            compiled += 1;
            format!("{:.1} s", d.seconds)
        };
        for function in &d.build.functions {
            let regs = d.compiled.registers.get(function);
            let spills = d.compiled.spills.get(function);
            spilling += usize::from(spills.is_some_and(|&s| s > 0));
            let show = |v: Option<&u32>| v.map_or("?".to_string(), u32::to_string);
            table.add_row([
                d.day.to_string(),
                d.build.source.file_name.to_string(),
                d.arch.clone(),
                function.clone(),
                show(regs),
                show(spills),
                how.clone(),
                source_of(&d.compiled),
            ]);
        }
    }
    println!("{table}");
    if let Some(o) = common::gpu::kernel_source::source_override() {
        println!("{}", o.describe());
    }
    println!(
        "{} builds ({} compiled now, {} from the cache), {} kernels spill",
        done.len(),
        compiled,
        done.len() - compiled,
        spilling
    );
    if args.manifest
        && let Some(dir) = &args.cache
    {
        std::fs::write(dir.join("MANIFEST"), kernels::manifest(&done)?)?;
    }
    Ok(())
}

/// Where a build's text came from: the binary's own copy, or the edited files of
/// `DAYS_OF_GPU_KERNEL_SOURCES`.
fn source_of(compiled: &common::gpu::nvrtc::Compiled) -> String {
    if compiled.edited.is_empty() {
        "embedded".to_string()
    } else {
        format!("edited: {}", compiled.edited.join(", "))
    }
}

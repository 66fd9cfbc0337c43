//! Every day's kernel builds in one list (each day's own `kernel_builds()`: the files, targets
//! and options its loader compiles), and compiling them all ahead of time with NVRTC, which
//! needs no GPU.
//!
//! `cargo xtask bundle` runs this crate's binary to put every kernel, compiled for Hopper,
//! into the bundle's kernel cache: a fresh GPU host then loads each one instead of compiling
//! it. A developer runs it to read registers and spills without a GPU:
//! `cargo run --release -p kernels -- --days day18`.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use common::gpu::kernel_build::KernelBuild;
use common::gpu::kernel_cache::KernelCache;
use common::gpu::nvrtc::{self, Compiled};
use rayon::prelude::*;

/// Every day that compiles kernels of its own, with its builds. Day 8 runs days 6 and 7's
/// kernels and has none.
pub fn all_days() -> Vec<(&'static str, Vec<KernelBuild>)> {
    vec![
        ("day00", day00::kernel_builds()),
        ("day01", day01::kernel_builds()),
        ("day02", day02::kernel_builds()),
        ("day03", day03::kernel_builds()),
        ("day04", day04::kernel_builds()),
        ("day05", day05::kernel_builds()),
        ("day06", day06::kernel_builds()),
        ("day07", day07::kernel_builds()),
        ("day09", day09::kernel_builds()),
        ("day10", day10::kernel_builds()),
        ("day11", day11::kernel_builds()),
        ("day12", day12::kernel_builds()),
        ("day13", day13::kernel_builds()),
        ("day14", day14::kernel_builds()),
        ("day15", day15::kernel_builds()),
        ("day16", day16::kernel_builds()),
        ("day17", day17::kernel_builds()),
        ("day18", day18::kernel_builds()),
        ("day19", day19::kernel_builds()),
        ("day20", day20::kernel_builds()),
        ("day21", day21::kernel_builds()),
        ("day22", day22::kernel_builds()),
        ("day23", day23::kernel_builds()),
        ("day24", day24::kernel_builds()),
    ]
}

/// One build compiled for a GPU of some architecture.
pub struct Done {
    pub day: &'static str,
    pub build: KernelBuild,
    pub arch: String,
    pub key: String,
    pub compiled: Compiled,
    pub seconds: f64,
}

/// Compiles `builds` (day, build) for a GPU of `device_arch` on every core, into `into`
/// (None: the cache the days use, `$DAYS_OF_GPU_KERNEL_CACHE` or the platform's). An entry
/// the days' own cache already holds (a `cargo test` compiled it) is copied, not compiled
/// again. Builds that GPU cannot run (sm_90a elsewhere) are left out.
pub fn compile_all(
    builds: Vec<(&'static str, KernelBuild)>,
    device_arch: &str,
    into: Option<&Path>,
) -> Result<Vec<Done>> {
    let own = KernelCache::from_env();
    let target = into.map(KernelCache::at).or_else(|| own.clone());
    builds
        .into_par_iter()
        .filter_map(|(day, build)| Some((day, build.arch_on(device_arch)?, build)))
        .map(|(day, arch, build)| {
            let key = nvrtc::cache_key(&build.source, &arch, &build.option_args())?;
            if let (Some(own), Some(target)) = (&own, &target)
                && own.dir() != target.dir()
                && let Some(entry) = own.get(&key)
            {
                target.put(&key, &entry)?;
            }
            let start = Instant::now();
            let compiled = build
                .compile_for(device_arch, target.as_ref())
                .with_context(|| format!("{day}: {}", build.describe(device_arch)))?
                .expect("filtered to builds this GPU runs");
            Ok(Done {
                day,
                arch,
                key,
                compiled,
                seconds: start.elapsed().as_secs_f64(),
                build,
            })
        })
        .collect()
}

/// The manifest `cargo xtask bundle` writes beside the cached kernels: one line per build,
/// `arch, file, key, NVRTC version` (tab-separated). The GPU host's `run.sh` reads the
/// version off it to tell a kernel the bundle should have held from one its NVRTC could not
/// have used.
pub fn manifest(done: &[Done]) -> Result<String> {
    let (major, minor) = nvrtc::version()?;
    let mut lines: Vec<String> = done
        .iter()
        .map(|d| {
            format!(
                "{}\t{}\t{}\tnvrtc {major}.{minor}\n",
                d.arch, d.build.source.file_name, d.key
            )
        })
        .collect();
    lines.sort();
    lines.dedup();
    Ok(lines.concat())
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::gpu::kernel_source::SourceTexts;

    /// `DAYS_OF_GPU_KERNEL_SOURCES` pointed at this checkout finds every file of every build
    /// where `kernel_source!` says it is, with the text the binary embedded: the override
    /// reads the right files, and an unedited checkout changes nothing. It needs the tree this
    /// executable was built from, which `cargo test` runs it beside; a bundle's copy of it on
    /// a GPU host may sit beside another tree, or none, and says so instead.
    #[test]
    fn every_kernel_file_is_where_an_override_reads_it() {
        if std::env::var_os("CARGO").is_none() {
            common::testing::note_skip(
                "kernels: the kernel files in the source tree",
                "not run by cargo, so the tree beside it may be another commit's",
            );
            return;
        }
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        for (day, builds) in all_days() {
            for build in builds {
                let source = &build.source;
                assert!(!source.parts.is_empty(), "{day}: {}", source.file_name);
                let texts = SourceTexts::resolve(source, Some(checkout))
                    .unwrap_or_else(|e| panic!("{day}: {e:#}"));
                assert_eq!(texts.code, source.code, "{day}: {}", source.file_name);
                assert!(texts.edited.is_empty(), "{day}: {:?}", texts.edited);
            }
        }
    }

    #[test]
    fn every_day_with_kernels_is_listed_once_with_every_file() {
        let days = all_days();
        let names: Vec<&str> = days.iter().map(|(d, _)| *d).collect();
        let mut unique = names.clone();
        unique.dedup();
        assert_eq!(unique, names, "each day once, in order");
        assert_eq!(days.len(), 24, "days 00-24 without day 08");
        for (day, builds) in &days {
            assert!(!builds.is_empty(), "{day} lists no build");
            for build in builds {
                assert!(
                    !build.functions.is_empty(),
                    "{day}: {} loads nothing",
                    build.source.file_name
                );
            }
        }
        // The Hopper builds are there: day 10's with its tile defines.
        let (_, day10) = &days[9];
        assert!(day10.iter().any(
            |b| b.target == common::gpu::kernel_build::Target::Hopper && !b.options.is_empty()
        ));
    }
}

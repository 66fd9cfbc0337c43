//! Test helpers: tests that need a GPU or NVRTC say on one line that they skipped, and
//! `REQUIRE_GPU=1` / `REQUIRE_NVRTC=1` turn that skip into a failure (the GPU host and CI set
//! them, so nothing passes there without having run).

use std::io::Write;

use cudarc::driver::CudaSlice;

use crate::element::Element;
use crate::error::SetupError;
use crate::gpu::Gpu;
use crate::gpu::kernel_build::{BUNDLED_DEVICE_ARCH, KernelBuild};
use crate::gpu::nvrtc;
use crate::measure::check::{self, Tolerance};
use crate::measure::poison_check::PoisonSplit;
use crate::session::launch_and_read;

/// Opens GPU 0 for a test, or prints `SKIPPED <what>: <why>` and returns None.
/// Panics instead of skipping when `REQUIRE_GPU=1`.
pub fn gpu_or_skip(what: &str) -> Option<Gpu> {
    match Gpu::open(0) {
        Ok(gpu) => Some(gpu),
        Err(e) if e.is::<SetupError>() => {
            skip_or_fail(what, &e.to_string(), "REQUIRE_GPU");
            None
        }
        Err(e) => panic!("{what}: opening the GPU failed: {e:#}"),
    }
}

/// [`gpu_or_skip`], then the day's kernels loaded on that GPU by `load` (a day's `X::load`):
/// the opening of a test that needs both. None after the same `SKIPPED` line when there is
/// no GPU; a GPU that does not load the kernels fails the test.
pub fn day_or_skip<D>(
    what: &str,
    load: impl FnOnce(&Gpu) -> anyhow::Result<D>,
) -> Option<(Gpu, D)> {
    let gpu = gpu_or_skip(what)?;
    let day = load(&gpu).unwrap_or_else(|e| panic!("{what}: loading the kernels failed: {e:#}"));
    Some((gpu, day))
}

/// True when NVRTC can be loaded; otherwise prints `SKIPPED <what>: <why>` and returns false.
/// Panics instead of skipping when `REQUIRE_NVRTC=1`.
pub fn nvrtc_or_skip(what: &str) -> bool {
    match nvrtc::ensure_available() {
        Ok(()) => true,
        Err(e) => {
            skip_or_fail(what, &e.to_string(), "REQUIRE_NVRTC");
            false
        }
    }
}

fn skip_or_fail(what: &str, why: &str, require_var: &str) {
    if std::env::var(require_var).is_ok_and(|v| v == "1") {
        panic!("{what}: {why} (and {require_var}=1 forbids skipping)");
    }
    // Written to the process's stderr directly: the test harness captures only print!/eprint!,
    // so this line shows in `cargo test` output even when the test passes.
    let _ = writeln!(std::io::stderr(), "SKIPPED {what}: {why}");
}

/// The compile test every day has: each of the day's `builds` (its own list, which its loader
/// and the bundle compile too) compiles with NVRTC for a Hopper GPU, and each function it
/// loads is in it and spills nothing. Skips (one line) without NVRTC.
pub fn assert_builds_compile_without_spills(builds: &[KernelBuild]) {
    let arch = BUNDLED_DEVICE_ARCH;
    for build in builds {
        let what = format!("NVRTC compile of {}", build.describe(arch));
        if !nvrtc_or_skip(&what) {
            return;
        }
        let arch = build.arch_on(arch).expect("every build runs on Hopper");
        let compiled = nvrtc::compile(&build.source, &arch, &build.option_args())
            .unwrap_or_else(|e| panic!("{what}: {e:#}"));
        for function in &build.functions {
            assert_eq!(
                compiled.spills.get(function),
                Some(&0),
                "{what}: `{function}` is missing or spills; ptxas said:\n{}",
                compiled.log
            );
        }
    }
}

/// The compile test of a day's `lib.rs`, written once: `common::test_kernel_builds!();` makes
/// the unit test `kernel_builds_compile_without_spills`, which runs
/// [`assert_builds_compile_without_spills`] over the day's `kernel_builds()`.
#[macro_export]
macro_rules! test_kernel_builds {
    () => {
        #[cfg(test)]
        #[test]
        fn kernel_builds_compile_without_spills() {
            $crate::testing::assert_builds_compile_without_spills(&kernel_builds());
        }
    };
}

/// Compiles a Hopper build for `BUNDLED_DEVICE_ARCH` (sm_90a) and asserts that ptxas kept
/// its `wgmma` asynchronous: none of its C7510-C7520 warnings ("wgmma.mma_async instructions
/// are serialized ...", for want of registers or because of a divergent path), each of which
/// makes every product wait for the one before. Returns the compile for further checks
/// (spills), or None when NVRTC is missing and the test skipped.
pub fn compile_keeping_wgmma_asynchronous(build: &KernelBuild) -> Option<nvrtc::Compiled> {
    let arch = BUNDLED_DEVICE_ARCH;
    let what = format!("NVRTC compile of {}", build.describe(arch));
    if !nvrtc_or_skip(&what) {
        return None;
    }
    let arch = build.arch_on(arch).expect("every build runs on Hopper");
    let compiled = nvrtc::compile(&build.source, &arch, &build.option_args())
        .unwrap_or_else(|e| panic!("{what}: {e:#}"));
    assert!(
        !compiled.log.contains("instructions are serialized"),
        "{what}: ptxas serialized the wgmma:\n{}",
        compiled.log
    );
    Some(compiled)
}

/// Checks that a kernel file whose layout comes from a host table refuses to compile for
/// `arch` without that table's defines: NVRTC stops at its `#error`, whose message names the
/// table (`table`), so no build runs on numbers the launcher did not send. Skips (one line)
/// without NVRTC.
pub fn assert_needs_its_defines(source: &nvrtc::KernelSource, arch: &str, table: &str) {
    let what = format!(
        "NVRTC compile of {} for {arch} without defines",
        source.file_name
    );
    if !nvrtc_or_skip(&what) {
        return;
    }
    let Err(err) = nvrtc::compile(source, arch, &[]) else {
        panic!("{what}: compiled");
    };
    assert!(format!("{err:#}").contains(table), "{what}: {err:#}");
}

/// Prints `SKIPPED <what>: <why>` on the test's own output for a part of a test that cannot
/// run on this GPU (a version that needs sm_90a on an older GPU), so a passing test still
/// says what it did not check. Unlike [`gpu_or_skip`], `REQUIRE_GPU=1` does not turn it into
/// a failure: the GPU is there, it is only not the one that version needs.
pub fn note_skip(what: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {what}: {why}");
}

/// Where a day's binary is, for tests that run it: cargo's `CARGO_BIN_EXE_<name>` path
/// (`built_at`) when it exists; in the GPU-host bundle, where test executables sit in
/// `tests/` beside `bin/`, the binary of that name in `../bin/`. Panics when neither exists,
/// so a test of the binary cannot pass without running it.
pub fn day_binary(built_at: &str) -> std::path::PathBuf {
    let built = std::path::PathBuf::from(built_at);
    if built.exists() {
        return built;
    }
    let name = built.file_name().expect("a binary path has a file name");
    let beside = std::env::current_exe()
        .ok()
        .and_then(|t| Some(t.parent()?.parent()?.join("bin").join(name)));
    match beside {
        Some(path) if path.exists() => path,
        _ => panic!("the binary {built_at} is not there (nor in the bundle's bin/)"),
    }
}

/// Asserts that one of a tile's `violations` (the lines its table check writes) names `phrase`,
/// showing the tile and every line if none does.
pub fn assert_violation(violations: &[String], phrase: &str, tile: &impl std::fmt::Debug) {
    assert!(
        violations.iter().any(|v| v.contains(phrase)),
        "no violation names {phrase:?} for {tile:?}: {violations:?}"
    );
}

/// Runs `binary` with `args` and asserts what bad input must give: exit code 2, exactly one
/// line starting `error: ` on stderr (clap adds its usage lines below its own), `expect` in
/// the output, and no panic. The input must be refused before any GPU is opened, so the check
/// holds on machines without one (where the "no GPU" error would also exit 2: `expect` tells
/// them apart).
pub fn assert_refused(binary: &std::path::Path, args: &[&str], expect: &str) {
    let out = std::process::Command::new(binary)
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", binary.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let shown = format!(
        "{} {}: exit {:?}, stderr:\n{stderr}",
        binary.display(),
        args.join(" "),
        out.status.code()
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "a panic instead of an error: {shown}"
    );
    assert_eq!(out.status.code(), Some(2), "bad input must exit 2: {shown}");
    let errors = stderr.lines().filter(|l| l.starts_with("error: ")).count();
    assert_eq!(errors, 1, "bad input must give one `error:` line: {shown}");
    assert!(
        stderr.contains(expect),
        "the error should say `{expect}`: {shown}"
    );
}

/// [`assert_refused`] for each `(arguments separated by spaces, what the error must say)`,
/// every case run and the ones not refused as expected reported together.
pub fn assert_all_refused(binary: &std::path::Path, cases: &[(&str, &str)]) {
    let failed: Vec<String> = cases
        .iter()
        .filter(|(args, expect)| {
            let args: Vec<&str> = args.split_whitespace().collect();
            std::panic::catch_unwind(|| assert_refused(binary, &args, expect)).is_err()
        })
        .map(|(args, _)| args.to_string())
        .collect();
    assert!(failed.is_empty(), "not refused as expected: {failed:?}");
}

/// The command-line test of a day's `tests/cli.rs`, written once:
/// `common::test_refused_requests!("day04", softmax::REFUSED_REQUESTS, REFUSED);` makes the
/// test `bad_requests_are_refused_before_the_gpu`, which runs [`assert_all_refused`] on the
/// day's binary (`CARGO_BIN_EXE_day04`, found by [`day_binary`]) over the cases of every
/// table named.
#[macro_export]
macro_rules! test_refused_requests {
    ($day:literal, $($cases:expr),+ $(,)?) => {
        #[test]
        fn bad_requests_are_refused_before_the_gpu() {
            let binary = $crate::testing::day_binary(env!(concat!("CARGO_BIN_EXE_", $day)));
            $crate::testing::assert_all_refused(&binary, &[$($cases),+].concat());
        }
    };
}

/// The GPU tests of a normalization day's `tests/gpu.rs`, written once:
/// `common::test_norm_day!(Day11, "block");` makes `every_version_matches_the_reference`
/// ([`test_every_version`](crate::family::norm::test_every_version)) and
/// `register_versions_refuse_rows_past_their_tiers`
/// ([`test_register_refusals`](crate::family::norm::test_register_refusals), with `"block"` the
/// day's forward version that takes rows of any width).
#[macro_export]
macro_rules! test_norm_day {
    ($day:ty, $streaming:expr $(,)?) => {
        #[test]
        fn every_version_matches_the_reference() {
            $crate::family::norm::test_every_version::<$day>();
        }

        /// The register versions refuse rows one past their widest tier instead of writing
        /// garbage.
        #[test]
        fn register_versions_refuse_rows_past_their_tiers() {
            $crate::family::norm::test_register_refusals::<$day>($streaming);
        }
    };
}

/// The end of a GPU test over versions and shapes: `ran` is how many shapes each version ran.
/// A version that ran none checked nothing, which is a failure unless `unavailable(version)`
/// says why this GPU cannot run it (then one `SKIPPED` line). Panics with every failure,
/// `failures` (what the shapes found) first.
pub fn assert_every_version_ran<'a>(
    test: &str,
    ran: impl IntoIterator<Item = (&'a str, usize)>,
    unavailable: impl Fn(&str) -> Option<String>,
    mut failures: Vec<String>,
) {
    for (version, count) in ran {
        if count > 0 {
            continue;
        }
        match unavailable(version) {
            Some(why) => note_skip(&format!("{test}: {version}"), &why),
            None => failures.push(format!("{version} ran on no shape")),
        }
    }
    assert!(
        failures.is_empty(),
        "{test}: {} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// [`assert_every_version_ran`] for a day whose versions come in one order, `versions` (each
/// name, and whether it runs on Hopper only) and `ran` (how many shapes each ran): a version
/// that ran none is excused only when it is Hopper-only and `off_hopper` says why this GPU
/// cannot run it (None on a Hopper GPU).
pub fn assert_every_version_ran_or_needs_hopper<'a>(
    test: &str,
    versions: impl IntoIterator<Item = (&'a str, bool)>,
    ran: &[usize],
    off_hopper: Option<String>,
) {
    let versions: Vec<(&str, bool)> = versions.into_iter().collect();
    assert_eq!(versions.len(), ran.len(), "{test}: one count per version");
    let counts = versions
        .iter()
        .map(|&(name, _)| name)
        .zip(ran.iter().copied());
    let unavailable = |name: &str| {
        let hopper_only = versions.iter().any(|&(v, only)| v == name && only);
        if hopper_only {
            off_hopper.clone()
        } else {
            None
        }
    };
    assert_every_version_ran(test, counts, unavailable, Vec::new());
}

/// Launches into the poisoned `out` and checks every element exactly against `split` (the
/// reference split by [`crate::measure::poison_check::split`]): those whose value is not the
/// poison in what this launch wrote, the others by a second launch over zeros. `what` begins
/// each failure.
pub fn assert_exact_even_where_poison_valued<T: Element>(
    gpu: &Gpu,
    split: &PoisonSplit,
    out: &mut CudaSlice<T>,
    launch: &mut impl FnMut(&mut CudaSlice<T>) -> anyhow::Result<()>,
    dims: &[usize],
    what: &str,
) {
    let got = launch_and_read(gpu, out, launch).unwrap_or_else(|e| panic!("{what}: {e:#}"));
    let (at, values) = (&split.checked_at, &split.checked_values);
    let report = check::compare_at(&got, at, values, dims, Tolerance::EXACT);
    assert!(report.passed(), "{what}: {report}");
    if let Err(e) = split.require_written(gpu, out, launch, what) {
        panic!("{e:#}");
    }
}

/// Why a version that needs sm_90a cannot run on `gpu`, or None on a Hopper GPU.
pub fn needs_sm90a(gpu: &Gpu) -> Option<String> {
    (gpu.info.arch != "sm_90").then(|| {
        format!(
            "needs sm_90a (a Hopper GPU), this is {} ({})",
            gpu.info.name, gpu.info.arch
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_that_ran_nothing_fails_unless_the_gpu_cannot_run_it() {
        let none = |_: &str| None;
        assert_every_version_ran("t", [("a", 2), ("b", 1)], none, Vec::new());
        let why = |v: &str| (v == "hopper").then(|| "needs sm_90a".to_string());
        // Prints one SKIPPED line, as a test on an older GPU would.
        let test = "testing's own unit test (an expected skip)";
        assert_every_version_ran(test, [("a", 2), ("hopper", 0)], why, Vec::new());
        let vacuous = std::panic::catch_unwind(|| {
            assert_every_version_ran("t", [("a", 2), ("b", 0)], none, Vec::new())
        });
        assert!(vacuous.is_err(), "a version that checked nothing must fail");
        let found = std::panic::catch_unwind(|| {
            assert_every_version_ran("t", [("a", 1)], none, vec!["a: wrong at [0]".into()])
        });
        assert!(found.is_err(), "the shapes' failures are reported");
    }

    #[test]
    fn only_a_hopper_only_version_is_excused_and_only_off_hopper() {
        let versions = [("mma", false), ("wgmma", true)];
        let off = || Some("needs sm_90a".to_string());
        // Prints one SKIPPED line, as a test on an older GPU would.
        let test = "testing's own unit test (an expected skip)";
        assert_every_version_ran_or_needs_hopper(test, versions, &[3, 0], off());
        let on_hopper = std::panic::catch_unwind(|| {
            assert_every_version_ran_or_needs_hopper("t", versions, &[3, 0], None)
        });
        assert!(on_hopper.is_err(), "on Hopper every version must run");
        let not_hopper_only = std::panic::catch_unwind(|| {
            assert_every_version_ran_or_needs_hopper("t", versions, &[0, 2], off())
        });
        assert!(
            not_hopper_only.is_err(),
            "only Hopper-only versions are excused"
        );
    }
}

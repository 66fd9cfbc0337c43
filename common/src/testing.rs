//! Test helpers: tests that need a GPU or NVRTC say on one line that they skipped, and
//! `REQUIRE_GPU=1` / `REQUIRE_NVRTC=1` turn that skip into a failure (the GPU host and CI set
//! them, so nothing passes there without having run).

use std::io::Write;

use crate::error::SetupError;
use crate::gpu::Gpu;
use crate::nvrtc::{self, KernelSource};

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

/// The compile test every day has: `source` compiles with NVRTC for `arch`, and each of
/// `functions` is in it and spills nothing. Skips (one line) without NVRTC.
pub fn assert_compiles_without_spills(source: &KernelSource, arch: &str, functions: &[&str]) {
    let what = format!("NVRTC compile of {} for {arch}", source.file_name);
    if !nvrtc_or_skip(&what) {
        return;
    }
    let compiled = nvrtc::compile(source, arch, &[]).unwrap_or_else(|e| panic!("{what}: {e:#}"));
    for function in functions {
        assert_eq!(
            compiled.spills.get(*function),
            Some(&0),
            "{what}: `{function}` is missing or spills; ptxas said:\n{}",
            compiled.log
        );
    }
}

//! `DAYS_OF_GPU_KERNEL_SOURCES` through the `kernels` binary (NVRTC, no GPU): an edited file
//! of a copied checkout is compiled and named, and a checkout missing a file is refused with
//! its path. Skips (one line) without NVRTC.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::gpu::kernel_source::{HEADERS, SOURCES_ENV};

/// A checkout holding what day 01 compiles, as this build embedded it: its kernel file and
/// `common/cuda/`, in a fresh temporary folder. Written from the embedded texts, not copied
/// from the source tree, so the test means the same wherever its executable runs (a bundle on
/// a GPU host beside a newer tree included).
fn day01_checkout(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kernels-sources-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let source = day01::SOURCE;
    let parts = source.parts.iter().map(|&(name, text)| {
        let path = source
            .checkout_path(name)
            .expect("a kernel file has a place");
        (path, text)
    });
    let headers = HEADERS
        .iter()
        .map(|&(name, text)| (Path::new("common/cuda").join(name), text));
    for (path, text) in parts.chain(headers) {
        let full = dir.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, text).unwrap();
    }
    dir
}

/// `kernels --days day01` with the override at `checkout`, into the kernel cache `cache`.
fn kernels(checkout: &Path, cache: &Path) -> Output {
    Command::new(common::testing::day_binary(env!("CARGO_BIN_EXE_kernels")))
        .args(["--days", "day01", "--cache"])
        .arg(cache)
        .env(SOURCES_ENV, checkout)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("kernels runs")
}

fn shown(out: &Output) -> String {
    format!(
        "exit {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn an_edited_kernel_is_compiled_from_the_checkout_and_named() {
    if !common::testing::nvrtc_or_skip("kernels: an override of day01's sources") {
        return;
    }
    let checkout = day01_checkout("edited");
    let cache = checkout.join("cache");
    let out = kernels(&checkout, &cache);
    assert!(out.status.success(), "{}", shown(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("(none edited)"), "{}", shown(&out));
    assert!(!stdout.contains("edited: day01"), "{}", shown(&out));

    // One more kernel in the edited file: compiled now (not the cached build) and named.
    let file = checkout.join("day01_naive_softmax/src/softmax_naive.cu");
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("\nKERNEL void only_in_the_edit(float* x) { x[threadIdx.x] = 2.0f; }\n");
    std::fs::write(&file, text).unwrap();
    let out = kernels(&checkout, &cache);
    assert!(out.status.success(), "{}", shown(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("edited: day01_naive_softmax/src/softmax_naive.cu"),
        "{}",
        shown(&out)
    );
    assert!(stdout.contains("1 compiled now"), "{}", shown(&out));
    let _ = std::fs::remove_dir_all(&checkout);
}

#[test]
fn a_checkout_missing_a_kernel_file_is_refused_with_its_path() {
    if !common::testing::nvrtc_or_skip("kernels: an override missing a file") {
        return;
    }
    let checkout = day01_checkout("missing");
    let missing = checkout.join("day01_naive_softmax/src/softmax_naive.cu");
    std::fs::remove_file(&missing).unwrap();
    let out = kernels(&checkout, &checkout.join("cache"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}", shown(&out));
    let errors = stderr.lines().filter(|l| l.starts_with("error: ")).count();
    assert_eq!(errors, 1, "{}", shown(&out));
    assert!(
        stderr.contains(&missing.display().to_string()),
        "{}",
        shown(&out)
    );
    assert!(!stderr.contains("panicked"), "{}", shown(&out));
    let _ = std::fs::remove_dir_all(&checkout);
}

//! `cargo xtask bundle`: everything a GPU host needs to run the workspace, built here.
//!
//! ```text
//! target/bundle/
//!   run.sh              unpacks the executables, runs tests/*, then bin/* --json, writes
//!                       DIR/results.json
//!   BUILD_INFO          the commit the bundle was built from (shell variables)
//!   executables.tar.xz  bin/dayNN (each day's release binary), tests/NAME (each test
//!                       executable, package-kind-target), benches/NAME (each criterion
//!                       bench, package-bench-target: `cargo bench -p dayNN` without cargo)
//!                       and kernel-cache/ (every day's kernels compiled for Hopper, sm_90
//!                       and sm_90a, by the `kernels` crate, with a MANIFEST)
//!   peers/*.py          the PyTorch timings of the same problems; peers/wheels/ the
//!                       packages of peers/requirements.txt the host lacks (Liger), fetched
//!                       here with pip and installed by run.sh for the peers alone
//!   verify/*.py         every day's outputs recomputed with PyTorch and compared, and the
//!                       compute-sanitizer runs on small problems
//!   torch_layers/       the PyTorch extension: wheels/day_kernels-*.whl (built here with
//!                       maturin), tests/*.py (pytest) and examples/*.py, which run.sh's
//!                       `torch` and `train` parts install and run where torch is
//! ```
//! Binaries load libcuda and libnvrtc at run time and embed their kernel sources, so the host
//! needs only the NVIDIA driver and NVRTC. Their kernels come compiled: NVRTC needs no GPU,
//! so the bundle compiles every day's kernels here, and a fresh H100 or H200 loads them from
//! the bundled cache instead of compiling for minutes (its NVRTC must be the same version,
//! which the cache's keys hold; `run.sh` says when it is not).
//!
//! The executables travel as one xz archive: each carries its own copy of std, cudarc and
//! `common`, so the 31 files of ten days weighed 43 MiB and one solid archive of them 3.5 MiB
//! (xz's window spans the files; gzip's 32 KiB window does not and gave 19.5 MiB).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::command::stdout_of;

const RUN_SH: &str = include_str!("../assets/run.sh");

/// The most the bundle may weigh: a copy to a GPU host stays quick.
const MAX_BUNDLE_BYTES: u64 = 64 << 20;

/// What goes into a bundle.
pub struct Contents {
    /// Compile every selected day's kernels for Hopper here (else the GPU host compiles them).
    pub kernels: bool,
    /// Only these days (`day20`), or every day when empty.
    pub days: Vec<String>,
    /// The PyTorch extension's wheel and the peers' wheels: always in a bundle of every day, in
    /// a bundle of some days only when asked (they take most of a small bundle's build); with
    /// them, the compiled kernels of every day the extension runs.
    pub wheels: bool,
}

pub fn bundle(root: &Path, out: &Path, contents: &Contents) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let packages = Packages::select(root, &contents.days, contents.wheels)?;
    let with_wheels = packages.all || contents.wheels;

    eprintln!("building release binaries...");
    run(Command::new(&cargo)
        .current_dir(root)
        .args(["build", "--bins", "--release"])
        .args(packages.with_kernels_binary()))?;
    let mut bins = day_binaries(root, &packages.days)?;
    bins.push(root.join("target/release/kernels"));

    eprintln!("building test executables...");
    let messages = build_without_running(&cargo, root, ["test", "--release"], &packages)?;
    let tests = test_executables(&messages)?;

    eprintln!("building criterion benches...");
    let messages = build_without_running(&cargo, root, ["bench", "--benches"], &packages)?;
    let benches = bench_executables(&messages);
    // Every day has a `cargo bench`; `run.sh --bench` would otherwise skip a day in silence.
    for day in &packages.days {
        let prefix = format!("{day}-bench-");
        if !benches.iter().any(|(name, _)| name.starts_with(&prefix)) {
            bail!("{day} has no criterion bench (benches/*.rs)");
        }
    }

    if out.exists() {
        fs::remove_dir_all(out).with_context(|| format!("clearing {}", out.display()))?;
    }
    let staging = out.join("executables");
    fs::create_dir_all(staging.join("bin"))?;
    let kernels = if contents.kernels {
        eprintln!("compiling the days' kernels for Hopper (sm_90, sm_90a) with NVRTC...");
        precompile_kernels(root, &staging.join(KERNEL_CACHE), &packages)?
    } else {
        0
    };
    fs::create_dir_all(staging.join("tests"))?;
    fs::create_dir_all(staging.join("benches"))?;
    for bin in &bins {
        copy_executable(bin, &staging.join("bin").join(bin.file_name().unwrap()))?;
    }
    for (name, path) in &tests {
        copy_executable(path, &staging.join("tests").join(name))?;
    }
    for (name, path) in &benches {
        copy_executable(path, &staging.join("benches").join(name))?;
    }
    let unpacked = folder_size(&staging)?;
    let mut parts = vec!["bin", "tests", "benches"];
    if contents.kernels {
        parts.push(KERNEL_CACHE);
    }
    pack(&staging, &parts, &out.join(ARCHIVE))?;
    fs::remove_dir_all(&staging)?;
    // The scripts cost nothing to copy; the wheels take a build and a download.
    let peers = copy_scripts(root, "peers", out)?;
    let verify = copy_scripts(root, "verify", out)?;
    let (peer_wheels, wheel) = if with_wheels {
        let peer_wheels = fetch_peer_wheels(root, &out.join("peers").join("wheels"));
        let wheel = build_wheel(root, &out.join(TORCH_LAYERS))?;
        copy_scripts(root, "torch_layers/tests", &out.join(TORCH_LAYERS))?;
        copy_scripts(root, "torch_layers/examples", &out.join(TORCH_LAYERS))?;
        (peer_wheels, wheel)
    } else {
        (
            "no peer wheels (--wheels)".to_string(),
            "no PyTorch extension (--wheels)".to_string(),
        )
    };
    fs::write(out.join("run.sh"), RUN_SH)?;
    fs::set_permissions(out.join("run.sh"), fs::Permissions::from_mode(0o755))?;
    fs::write(out.join("BUILD_INFO"), build_info(root, &packages)?)?;

    let size = folder_size(out)?;
    eprintln!(
        "bundle of {}: {} ({} binaries, {} test executables, {} benches and {kernels} compiled \
         kernel files ({:.1} MiB, packed), {peers} peer scripts, {peer_wheels}, {verify} \
         verify scripts, {wheel}, {:.1} MiB)\n\
         on the GPU host: {}/run.sh --out DIR",
        packages.describe(),
        out.display(),
        bins.len(),
        tests.len(),
        benches.len(),
        unpacked as f64 / (1 << 20) as f64,
        size as f64 / (1 << 20) as f64,
        out.display()
    );
    if size > MAX_BUNDLE_BYTES {
        bail!("the bundle is over 64 MiB; strip or drop something");
    }
    Ok(())
}

/// The archive of `bin/`, `tests/`, `benches/` and `kernel-cache/` that run.sh unpacks.
const ARCHIVE: &str = "executables.tar.xz";

/// The compiled kernels' folder in the archive: a kernel cache (`common::gpu::kernel_cache`)
/// with a MANIFEST of its entries, which run.sh copies into the cache the days read.
const KERNEL_CACHE: &str = "kernel-cache";

/// Compiles every day's kernel builds for Hopper into the kernel cache `dir`, with
/// `target/release/kernels` (built with the day binaries): the GPU host then loads every
/// kernel instead of compiling it. Entries the developer's own cache holds (from a `cargo
/// test`) are copied, not compiled again. Returns the number of cached files.
fn precompile_kernels(root: &Path, dir: &Path, packages: &Packages) -> Result<usize> {
    let kernels = root.join("target/release/kernels");
    let mut command = Command::new(&kernels);
    command.arg("--cache").arg(dir).arg("--manifest");
    if !packages.all {
        // Day 8 compiles none of its own: `kernels` lists the days that do.
        let listed = stdout_of(
            Command::new(&kernels).arg("--list-days"),
            "kernels --list-days",
        )?;
        let listed = String::from_utf8_lossy(&listed);
        let days: Vec<&str> = listed
            .lines()
            .filter(|d| packages.loads_kernels_of.iter().any(|p| p == d))
            .collect();
        if days.is_empty() {
            fs::create_dir_all(dir)?;
            fs::write(dir.join("MANIFEST"), "")?;
            return Ok(0);
        }
        command.arg("--days").arg(days.join(","));
    }
    // The bundle holds the committed kernels, never a checkout's edits.
    let status = command
        .env_remove(crate::SOURCES_ENV)
        .stdout(std::process::Stdio::null())
        .status()
        .context("running target/release/kernels")?;
    if !status.success() {
        bail!(
            "compiling the kernels for the bundle failed (above). The bundle needs NVRTC 13 \
             (a CUDA 13 install, or `pip install nvidia-cuda-nvrtc==13.0.88` with its \
             nvidia/cu13/lib on LD_LIBRARY_PATH); `cargo xtask bundle --no-kernels` leaves \
             the compiling to the GPU host"
        );
    }
    Ok(files_with_extension(dir, "cubin"))
}

/// How many files of `dir` end in `.ext` (0 when it cannot be read).
fn files_with_extension(dir: &Path, ext: &str) -> usize {
    fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == ext))
            })
            .count()
    })
}

/// Packs `parts` (folders of `dir`) into the xz archive `archive`: with the system's tar
/// and xz where they are, else with Python's `tarfile` (CI and the GPU hosts always have
/// python3).
fn pack(dir: &Path, parts: &[&str], archive: &Path) -> Result<()> {
    let tar = Command::new("tar")
        .arg("-cJf")
        .arg(archive)
        .arg("-C")
        .arg(dir)
        .args(parts)
        .status();
    if tar.is_ok_and(|s| s.success()) {
        return Ok(());
    }
    eprintln!("tar -J failed or is missing; packing with python3's tarfile");
    run(Command::new("python3")
        .args(["-c", PY_PACK])
        .arg(archive)
        .arg(dir)
        .args(parts))
}

/// `python3 -c PY_PACK ARCHIVE DIR PART...`: the fallback of [`pack`].
const PY_PACK: &str = r#"
import sys, tarfile
with tarfile.open(sys.argv[1], "w:xz") as archive:
    for part in sys.argv[3:]:
        archive.add(sys.argv[2] + "/" + part, part)
"#;

/// The PyTorch extension's folder in the bundle.
const TORCH_LAYERS: &str = "torch_layers";

/// Builds the PyTorch extension's wheel into `dir/wheels` with maturin (from `$MATURIN`, or
/// `maturin` on the path: `pip install maturin`); returns the wheel's file name.
fn build_wheel(root: &Path, dir: &Path) -> Result<String> {
    eprintln!("building the PyTorch extension's wheel (maturin)...");
    let maturin = std::env::var("MATURIN").unwrap_or_else(|_| "maturin".to_string());
    let wheels = dir.join("wheels");
    let status = Command::new(&maturin)
        .current_dir(root)
        .args([
            "build",
            "--release",
            "--quiet",
            "-m",
            "torch_layers/Cargo.toml",
            "-o",
        ])
        .arg(&wheels)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => bail!("maturin build of torch_layers failed with {s}"),
        Err(e) => bail!(
            "cannot run `{maturin}` ({e}): the bundle carries the PyTorch extension's wheel, \
             built with maturin (`pip install maturin`, or set MATURIN to its path)"
        ),
    }
    let mut names: Vec<String> = fs::read_dir(&wheels)?
        .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.ends_with(".whl"))
        .collect();
    match names.len() {
        1 => Ok(names.remove(0)),
        n => bail!("maturin left {n} wheels in {}, not one", wheels.display()),
    }
}

/// Fetches the wheels `peers/requirements.txt` pins into `dir` (pure-Python packages the GPU
/// host lacks, run there on its own torch and Triton: `--no-deps`). Where pip or the network
/// is missing the bundle is still whole: the peers that need them print one SKIPPED line each
/// on the GPU host, as this warning says. Returns the summary's words for them.
fn fetch_peer_wheels(root: &Path, dir: &Path) -> String {
    let requirements = root.join("peers/requirements.txt");
    if !requirements.exists() {
        return "no peer wheels".to_string();
    }
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            // Without a network pip would retry for minutes; a bundle must not stall on it.
            "--timeout",
            "20",
            "--retries",
            "1",
            "--no-deps",
            "--only-binary=:all:",
            "-r",
        ])
        .arg(&requirements)
        .arg("-d")
        .arg(dir)
        .status();
    let count = files_with_extension(dir, "whl");
    match status {
        Ok(s) if s.success() => format!("{count} peer wheels"),
        other => {
            eprintln!(
                "warning: could not fetch the wheels of peers/requirements.txt ({}): the GPU \
                 host will skip the peers that need them",
                other.map_or_else(|e| e.to_string(), |s| s.to_string())
            );
            format!("{count} peer wheels (the fetch failed part way)")
        }
    }
}

/// The Python scripts of `folder` (`peers/*.py`, `verify/*.py`) travel with the bundle, into
/// `out/<last part of folder>`; run.sh runs them where torch is.
fn copy_scripts(root: &Path, folder: &str, out: &Path) -> Result<usize> {
    let dir = out.join(Path::new(folder).file_name().expect("a folder name"));
    fs::create_dir_all(&dir)?;
    let mut count = 0;
    for entry in fs::read_dir(root.join(folder))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "py") {
            fs::copy(&path, dir.join(path.file_name().unwrap()))?;
            count += 1;
        }
    }
    Ok(count)
}

/// `cargo <subcommand> --no-run <flag>` on the packages: its JSON messages, which name the
/// executables it built.
fn build_without_running(
    cargo: &str,
    root: &Path,
    [subcommand, flag]: [&str; 2],
    packages: &Packages,
) -> Result<String> {
    let output = stdout_of(
        Command::new(cargo)
            .current_dir(root)
            .args([
                subcommand,
                "--no-run",
                flag,
                "--message-format=json-render-diagnostics",
            ])
            .args(packages.args()),
        &format!("cargo {subcommand} --no-run"),
    )?;
    Ok(String::from_utf8_lossy(&output).into_owned())
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

/// The packages a bundle builds: every day (and `common`'s tests, `kernels`'), or some days.
struct Packages {
    all: bool,
    days: Vec<String>,
    /// The days whose kernels those days load: themselves and the days they depend on (day 20
    /// runs day 10's forward, day 19 day 18's GEMMs), whose kernels the bundle must hold too;
    /// with the PyTorch extension's wheel, the days it runs as well.
    loads_kernels_of: Vec<String>,
}

/// The PyTorch extension's package: a bundle with its wheel holds the kernels of the days it
/// runs, which its tests load on the GPU host.
const EXTENSION: &str = "torch_layers";

impl Packages {
    /// `days` (package names), each checked against the day folders; all of them when empty.
    /// `with_extension`: the bundle holds the PyTorch extension too.
    fn select(root: &Path, days: &[String], with_extension: bool) -> Result<Self> {
        let known: Vec<String> = crate::readme::day_folders(root)?
            .into_iter()
            .map(|d| d.package)
            .collect();
        if days.is_empty() {
            return Ok(Self {
                all: true,
                loads_kernels_of: known.clone(),
                days: known,
            });
        }
        if let Some(unknown) = days.iter().find(|d| !known.contains(d)) {
            bail!(
                "--days: no day `{unknown}` in this workspace; choose from {}",
                known.join(", ")
            );
        }
        let mut runs = days.to_vec();
        if with_extension {
            runs.push(EXTENSION.to_string());
        }
        Ok(Self {
            all: false,
            loads_kernels_of: with_dependencies(&runs, &day_dependencies(root)?),
            days: days.to_vec(),
        })
    }

    /// cargo's package selection: the workspace without xtask and torch_layers (a Python
    /// extension, which maturin builds as a wheel), or `-p dayNN` for each day.
    fn args(&self) -> Vec<String> {
        if self.all {
            [
                "--workspace",
                "--exclude",
                "xtask",
                "--exclude",
                "torch_layers",
            ]
            .map(String::from)
            .to_vec()
        } else {
            self.days
                .iter()
                .flat_map(|d| ["-p".to_string(), d.clone()])
                .collect()
        }
    }

    /// [`Self::args`] and the `kernels` binary, which compiles the days' kernels (into the
    /// bundle here, and on the GPU host from a checkout's sources).
    fn with_kernels_binary(&self) -> Vec<String> {
        let mut args = self.args();
        if !self.all {
            args.extend(["-p".to_string(), "kernels".to_string()]);
        }
        args
    }

    /// For the summary line: `every day` or `day20, day10`.
    fn describe(&self) -> String {
        if self.all {
            "every day".to_string()
        } else {
            self.days.join(", ")
        }
    }
}

/// Each workspace package's dependencies inside the workspace, from `cargo metadata`.
fn day_dependencies(root: &Path) -> Result<BTreeMap<String, Vec<String>>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = stdout_of(
        Command::new(cargo).current_dir(root).args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ]),
        "cargo metadata",
    )?;
    let metadata: Value = serde_json::from_slice(&out).context("reading cargo metadata")?;
    let packages = metadata["packages"]
        .as_array()
        .context("cargo metadata: no packages")?;
    let names = |list: &Value| -> Vec<String> {
        list.as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["name"].as_str().map(str::to_string))
            .collect()
    };
    Ok(packages
        .iter()
        .filter_map(|p| Some((p["name"].as_str()?.to_string(), names(&p["dependencies"]))))
        .collect())
}

/// `days` and every package they depend on, directly or not, that `dependencies` knows (the
/// workspace's own), sorted.
fn with_dependencies(days: &[String], dependencies: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut found: BTreeSet<String> = BTreeSet::new();
    let mut todo: Vec<String> = days.to_vec();
    while let Some(day) = todo.pop() {
        if found.insert(day.clone()) {
            todo.extend(
                dependencies
                    .get(&day)
                    .into_iter()
                    .flatten()
                    .filter(|d| dependencies.contains_key(*d))
                    .cloned(),
            );
        }
    }
    found.into_iter().collect()
}

/// `target/release/dayNN` for each of `days`.
fn day_binaries(root: &Path, days: &[String]) -> Result<Vec<PathBuf>> {
    let mut bins = Vec::new();
    for day in days {
        let bin = root.join("target/release").join(day);
        if !bin.exists() {
            bail!("{} was not built", bin.display());
        }
        bins.push(bin);
    }
    Ok(bins)
}

/// Test executables from cargo's JSON messages, named `package-kind-target`. Binary targets'
/// test harnesses are left out: the days keep their tests in the library and `tests/`.
fn test_executables(messages: &str) -> Result<Vec<(String, PathBuf)>> {
    let mut found = Vec::new();
    for line in messages.lines() {
        let Ok(msg) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" || msg["profile"]["test"] != true {
            continue;
        }
        let Some(executable) = msg["executable"].as_str() else {
            continue;
        };
        let kind = msg["target"]["kind"][0].as_str().unwrap_or("unknown");
        if kind == "bin" {
            continue;
        }
        let target = msg["target"]["name"].as_str().unwrap_or("unknown");
        let package = package_name(msg["package_id"].as_str().unwrap_or(""));
        let name = if kind == "lib" {
            format!("{package}-lib")
        } else {
            format!("{package}-{kind}-{target}")
        };
        found.push((name, PathBuf::from(executable)));
    }
    if found.is_empty() {
        bail!("cargo reported no test executables");
    }
    found.sort();
    Ok(found)
}

/// Criterion bench executables from `cargo bench --no-run`'s JSON messages, named
/// `package-bench-target`. They are built with `harness = false`, so cargo marks them as bench
/// targets but not as test harnesses.
fn bench_executables(messages: &str) -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    for line in messages.lines() {
        let Ok(msg) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" || msg["target"]["kind"][0] != "bench" {
            continue;
        }
        let Some(executable) = msg["executable"].as_str() else {
            continue;
        };
        let target = msg["target"]["name"].as_str().unwrap_or("unknown");
        let package = package_name(msg["package_id"].as_str().unwrap_or(""));
        found.push((
            format!("{package}-bench-{target}"),
            PathBuf::from(executable),
        ));
    }
    found.sort();
    found
}

/// The package name in a cargo package id: `path+file:///w/day00_vector_add#day00@0.1.0`
/// names it after `#`; `path+file:///w/common#0.1.0` (folder named as the package) only in
/// the path.
fn package_name(id: &str) -> String {
    let (path, fragment) = id.split_once('#').unwrap_or((id, ""));
    match fragment.split_once('@') {
        Some((name, _)) => name.to_string(),
        None => path.rsplit('/').next().unwrap_or(id).to_string(),
    }
}

fn copy_executable(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    Ok(())
}

/// Shell variables run.sh reads: which commit the binaries come from, and whether the tree
/// had uncommitted changes (then the commit alone does not reproduce them).
fn build_info(root: &Path, packages: &Packages) -> Result<String> {
    let git = |args: &[&str]| -> Result<String> {
        let out = Command::new("git").current_dir(root).args(args).output()?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    let dirty = !git(&["status", "--porcelain", "--untracked-files=no"])?.is_empty();
    let built_at = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())?;
    Ok(format!(
        "COMMIT={}\nDIRTY={dirty}\nBUILT_AT={built_at}\nDAYS=\"{}\"\n",
        if commit.is_empty() {
            "unknown"
        } else {
            &commit
        },
        if packages.all {
            String::new()
        } else {
            packages.days.join(",")
        }
    ))
}

fn folder_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            folder_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_takes_the_kernels_of_the_days_it_runs() {
        let deps: BTreeMap<String, Vec<String>> = [
            ("day20", vec!["common", "day10", "anyhow"]),
            ("day10", vec!["common"]),
            ("day19", vec!["day18"]),
            ("day18", vec!["common"]),
            ("common", vec!["cudarc"]),
        ]
        .into_iter()
        .map(|(p, d)| (p.to_string(), d.into_iter().map(String::from).collect()))
        .collect();
        let days = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            with_dependencies(&days(&["day20"]), &deps),
            days(&["common", "day10", "day20"])
        );
        assert_eq!(
            with_dependencies(&days(&["day19", "day10"]), &deps),
            days(&["common", "day10", "day18", "day19"])
        );
        // This workspace: day 20 runs day 10's forward.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let ours = Packages::select(root, &days(&["day20"]), false).unwrap();
        assert!(ours.loads_kernels_of.contains(&"day10".to_string()));
        assert!(!ours.loads_kernels_of.contains(&"day11".to_string()));
        assert_eq!(ours.days, ["day20"]);
        assert!(Packages::select(root, &days(&["day99"]), false).is_err());
        // With the extension's wheel: the kernels of every day it runs (its norms are days 11
        // and 12), though only day 20's binaries are built.
        let with_wheel = Packages::select(root, &days(&["day20"]), true).unwrap();
        assert!(with_wheel.loads_kernels_of.contains(&"day11".to_string()));
        assert_eq!(with_wheel.days, ["day20"]);
    }

    #[test]
    fn package_names_from_ids() {
        assert_eq!(
            package_name("path+file:///w/day00_vector_add#day00@0.1.0"),
            "day00"
        );
        assert_eq!(package_name("path+file:///w/common#0.1.0"), "common");
    }

    #[test]
    fn test_executables_skip_binaries_and_name_the_rest() {
        let messages = r#"
{"reason":"compiler-artifact","package_id":"path+file:///w/common#0.1.0","target":{"kind":["lib"],"name":"common"},"profile":{"test":true},"executable":"/t/common-1"}
{"reason":"compiler-artifact","package_id":"path+file:///w/d#day00@0.1.0","target":{"kind":["test"],"name":"gpu"},"profile":{"test":true},"executable":"/t/gpu-2"}
{"reason":"compiler-artifact","package_id":"path+file:///w/d#day00@0.1.0","target":{"kind":["bin"],"name":"day00"},"profile":{"test":true},"executable":"/t/day00-3"}
{"reason":"compiler-artifact","package_id":"path+file:///w/d#day00@0.1.0","target":{"kind":["lib"],"name":"day00"},"profile":{"test":false},"executable":null}
{"reason":"build-finished","success":true}"#;
        let found = test_executables(messages).unwrap();
        let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, vec!["common-lib", "day00-test-gpu"]);
    }

    #[test]
    fn bench_executables_are_the_bench_targets() {
        let messages = r#"
{"reason":"compiler-artifact","package_id":"path+file:///w/d#day00@0.1.0","target":{"kind":["bench"],"name":"vector_add"},"profile":{"test":false},"executable":"/t/vector_add-1"}
{"reason":"compiler-artifact","package_id":"path+file:///w/d#day00@0.1.0","target":{"kind":["lib"],"name":"day00"},"profile":{"test":false},"executable":null}
{"reason":"build-finished","success":true}"#;
        let found = bench_executables(messages);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, "day00-bench-vector_add");
    }
}

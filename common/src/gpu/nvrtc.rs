//! Run-time compilation of a day's `.cu` file with NVRTC, for the device's own architecture.
//!
//! Kernels are compiled to a CUBIN (machine code for one real `sm_XY`), not PTX: the driver
//! then has nothing left to compile, and ptxas's report (`-v`) gives each kernel's spill bytes,
//! which the driver's attributes do not. The headers in `common/cuda/` are handed to NVRTC from
//! memory, so `#include "common.cuh"` works on a machine that has none of this source tree.
//! The texts are the embedded ones, or a checkout's under `DAYS_OF_GPU_KERNEL_SOURCES`
//! ([`crate::gpu::kernel_source`]).
//! Set `NVRTC_LOG=1` to see the compiler's full report on stderr.
//!
//! A compilation is done once: its CUBIN and report go into the on-disk
//! [`crate::gpu::kernel_cache`] and, for the rest of the process, into memory, so later runs and
//! later tests of the same source load what is there.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, CString, c_char};
use std::sync::{Mutex, OnceLock};

use anyhow::{Context, Result, bail};
use cudarc::nvrtc::{result as nvrtc_result, sys};

use crate::error::SetupError;
use crate::gpu::kernel_cache::{self, Entry, KernelCache};

use crate::gpu::kernel_source::SourceTexts;
pub use crate::gpu::kernel_source::{HEADERS, KernelSource};

/// The result of a compilation: the CUBIN and what ptxas said about each kernel.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub arch: String,
    pub cubin: Vec<u8>,
    pub log: String,
    /// Spill bytes (stores + loads) per kernel, read from the ptxas report.
    pub spills: BTreeMap<String, u32>,
    /// Registers per thread of each kernel, read from the ptxas report.
    pub registers: BTreeMap<String, u32>,
    /// Taken from the kernel cache (disk or this process's memory), not compiled now.
    pub from_cache: bool,
    /// The files of `DAYS_OF_GPU_KERNEL_SOURCES` this build read that differ from the
    /// embedded copies (empty without an override).
    pub edited: Vec<String>,
}

impl Compiled {
    fn from_entry(entry: Entry, from_cache: bool, edited: &[String]) -> Self {
        Self {
            edited: edited.to_vec(),
            spills: parse_spills(&entry.log),
            registers: parse_registers(&entry.log),
            arch: entry.arch,
            cubin: entry.cubin,
            log: entry.log,
            from_cache,
        }
    }
}

/// Fails with [`SetupError::NoNvrtc`] when libnvrtc cannot be loaded.
pub fn ensure_available() -> Result<(), SetupError> {
    // SAFETY: only tries to dlopen the library by its candidate names.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(SetupError::NoNvrtc)
    }
}

/// NVRTC's (major, minor) version, part of every cache key.
pub fn version() -> Result<(i32, i32)> {
    ensure_available()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out-pointers.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| anyhow::anyhow!("nvrtcVersion failed: {e:?}"))?;
    Ok((major, minor))
}

/// Compiles `source` for `arch` (e.g. `sm_90`, `sm_90a`), with `extra_options` after ours:
/// from this process's memory or the on-disk cache ([`KernelCache::from_env`]) when they
/// have it.
pub fn compile(source: &KernelSource, arch: &str, extra_options: &[&str]) -> Result<Compiled> {
    let cache = KernelCache::from_env();
    let compiled = compile_with_cache(source, arch, extra_options, cache.as_ref())?;
    if cache.is_some() {
        log_event(&compiled, source);
    }
    Ok(compiled)
}

/// The environment variable naming a file to which every [`compile`] through the kernel
/// cache appends one line, `loaded` or `compiled`, the architecture, the file, NVRTC's
/// version and `edited: PATH,...` or `embedded` (tab-separated): how the GPU host's `run.sh`
/// counts what its bundled cache saved, finds a kernel the bundle should have held, and tells
/// the kernels of edited sources (`DAYS_OF_GPU_KERNEL_SOURCES`) from the committed ones.
pub const LOG_ENV: &str = "DAYS_OF_GPU_KERNEL_LOG";

fn log_event(compiled: &Compiled, source: &KernelSource) {
    let Some(path) = std::env::var_os(LOG_ENV) else {
        return;
    };
    let how = if compiled.from_cache {
        "loaded"
    } else {
        "compiled"
    };
    let nvrtc = version().map_or_else(|_| "?".to_string(), |(a, b)| format!("{a}.{b}"));
    let origin = if compiled.edited.is_empty() {
        "embedded".to_string()
    } else {
        format!("edited: {}", compiled.edited.join(","))
    };
    let line = format!(
        "{how}\t{}\t{}\tnvrtc {nvrtc}\t{origin}\n",
        compiled.arch, source.file_name
    );
    // One short write in append mode: lines of processes writing at once do not interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
    if let Err(e) = written {
        warn_once(&format!("cannot append to {}: {e}", path.to_string_lossy()));
    }
}

/// [`compile`] with the on-disk cache given (None: no disk cache; this process's memory is
/// still used unless the cache is off).
pub fn compile_with_cache(
    source: &KernelSource,
    arch: &str,
    extra_options: &[&str],
    cache: Option<&KernelCache>,
) -> Result<Compiled> {
    let texts = SourceTexts::for_compile(source)?;
    let key = key_of(source, &texts, arch, extra_options)?;
    let options = options(arch, extra_options);
    // Keyed by folder too, so a test with its own cache folder is not answered from memory.
    let memo_key = (cache.map(|c| c.dir().to_path_buf()), key.clone());
    static MEMO: OnceLock<Mutex<HashMap<MemoKey, Entry>>> = OnceLock::new();
    let memo = MEMO.get_or_init(Default::default);
    if cache.is_some()
        && let Some(entry) = memo.lock().expect("kernel memo").get(&memo_key)
    {
        return Ok(Compiled::from_entry(entry.clone(), true, &texts.edited));
    }
    let compiled = match cache.and_then(|c| c.get(&key)) {
        Some(entry) => Compiled::from_entry(entry, true, &texts.edited),
        None => {
            let compiled = compile_now(source.file_name, &texts, arch, &options)?;
            if let Some(cache) = cache {
                let entry = Entry {
                    arch: compiled.arch.clone(),
                    cubin: compiled.cubin.clone(),
                    log: compiled.log.clone(),
                };
                // A cache that cannot be written (a read-only home) only costs time.
                if let Err(e) = cache.put(&key, &entry) {
                    warn_once(&format!("{e:#}; compiling without it"));
                }
            }
            compiled
        }
    };
    if std::env::var_os("NVRTC_LOG").is_some() {
        let from = if compiled.from_cache {
            " (kernel cache)"
        } else {
            ""
        };
        eprintln!(
            "NVRTC log of {} for {arch}{from}:\n{}",
            source.file_name, compiled.log
        );
    }
    if cache.is_some() {
        let entry = Entry {
            arch: compiled.arch.clone(),
            cubin: compiled.cubin.clone(),
            log: compiled.log.clone(),
        };
        memo.lock().expect("kernel memo").insert(memo_key, entry);
    }
    Ok(compiled)
}

/// The kernel cache's key of compiling `source` for `arch` with `extra_options` by the NVRTC
/// this process loads (an error without NVRTC: its version is part of the key).
pub fn cache_key(source: &KernelSource, arch: &str, extra_options: &[&str]) -> Result<String> {
    key_of(
        source,
        &SourceTexts::for_compile(source)?,
        arch,
        extra_options,
    )
}

/// [`cache_key`] of `source` compiled from `texts`.
fn key_of(
    source: &KernelSource,
    texts: &SourceTexts,
    arch: &str,
    extra_options: &[&str],
) -> Result<String> {
    ensure_available()?;
    Ok(kernel_cache::key(
        (source.file_name, texts.code),
        &texts.headers,
        &options(arch, extra_options),
        version()?,
    ))
}

/// This process's compilations: (the disk cache's folder, the key).
type MemoKey = (Option<std::path::PathBuf>, String);

/// Prints `warning: <text>` once per process.
fn warn_once(text: &str) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!("warning: {text}");
    }
}

/// Our NVRTC options for `arch`, then `extra_options`.
fn options(arch: &str, extra_options: &[&str]) -> Vec<String> {
    let mut options = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        // Source lines in the CUBIN, for profilers; costs nothing at run time.
        "--generate-line-info".to_string(),
        "--ptxas-options=-v".to_string(),
        // Where a driver is installed, NVRTC 13 keeps compiled programs in the driver's compute
        // cache (~/.nv/ComputeCache); a cache hit skips ptxas, and with it the report above, so
        // the second run of a day would not know its spill bytes. Our own cache keeps the
        // report beside the CUBIN instead.
        "--no-cache".to_string(),
    ];
    options.extend(extra_options.iter().map(|s| s.to_string()));
    options
}

/// Runs NVRTC.
fn compile_now(
    file_name: &str,
    texts: &SourceTexts,
    arch: &str,
    options: &[String],
) -> Result<Compiled> {
    let program = Program::new(file_name, texts)?;
    // SAFETY: `program.0` is a live program created above; options are plain strings.
    let compiled = unsafe { nvrtc_result::compile_program(program.0, options) };
    let log = program.log()?;
    if let Err(e) = compiled {
        bail!("NVRTC could not compile {file_name} for {arch} ({e:?}):\n{log}");
    }
    let cubin = program
        .cubin()
        .with_context(|| format!("reading the CUBIN of {file_name}"))?;
    let entry = Entry {
        arch: arch.to_string(),
        cubin,
        log,
    };
    Ok(Compiled::from_entry(entry, false, &texts.edited))
}

/// An NVRTC program, destroyed on drop. Keeps the C strings it was made from alive.
struct Program(sys::nvrtcProgram);

impl Program {
    fn new(file_name: &str, texts: &SourceTexts) -> Result<Self> {
        let src = CString::new(texts.code).context("kernel source contains a NUL byte")?;
        let name = CString::new(file_name)?;
        let header_texts: Vec<CString> = texts
            .headers
            .iter()
            .map(|(_, text)| CString::new(*text))
            .collect::<Result<_, _>>()?;
        let header_names: Vec<CString> = texts
            .headers
            .iter()
            .map(|(name, _)| CString::new(*name))
            .collect::<Result<_, _>>()?;
        let text_ptrs: Vec<*const c_char> = header_texts.iter().map(|s| s.as_ptr()).collect();
        let name_ptrs: Vec<*const c_char> = header_names.iter().map(|s| s.as_ptr()).collect();
        let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
        // SAFETY: all pointers point into CStrings that outlive the call; NVRTC copies them.
        let status = unsafe {
            sys::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                texts.headers.len() as i32,
                text_ptrs.as_ptr(),
                name_ptrs.as_ptr(),
            )
        };
        status
            .result()
            .map_err(|e| anyhow::anyhow!("nvrtcCreateProgram failed: {e:?}"))?;
        Ok(Self(prog))
    }

    fn log(&self) -> Result<String> {
        // SAFETY: the program is live.
        let raw = unsafe { nvrtc_result::get_program_log(self.0) }
            .map_err(|e| anyhow::anyhow!("nvrtcGetProgramLog failed: {e:?}"))?;
        // SAFETY: NVRTC returns a NUL-terminated log.
        let log = unsafe { CStr::from_ptr(raw.as_ptr()) };
        Ok(log.to_string_lossy().trim_end().to_string())
    }

    fn cubin(&self) -> Result<Vec<u8>> {
        let mut size = 0usize;
        // SAFETY: the program is live and compiled; `size` is a valid out-pointer.
        unsafe { sys::nvrtcGetCUBINSize(self.0, &mut size) }
            .result()
            .map_err(|e| {
                anyhow::anyhow!("nvrtcGetCUBINSize failed: {e:?} (was a real sm_ arch given?)")
            })?;
        let mut cubin = vec![0u8; size];
        // SAFETY: `cubin` has the size NVRTC asked for.
        unsafe { sys::nvrtcGetCUBIN(self.0, cubin.as_mut_ptr() as *mut c_char) }
            .result()
            .map_err(|e| anyhow::anyhow!("nvrtcGetCUBIN failed: {e:?}"))?;
        Ok(cubin)
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: destroys the program created in `new`, once.
        let _ = unsafe { nvrtc_result::destroy_program(self.0) };
    }
}

/// Reads one figure per kernel from ptxas's `-v` report: after "Compiling entry function
/// 'NAME'", the first line `read` takes gives NAME's figure.
fn per_kernel(log: &str, read: impl Fn(&str) -> Option<u32>) -> BTreeMap<String, u32> {
    let mut figures = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            current = rest.split('\'').next().map(str::to_string);
        } else if let Some(value) = read(line)
            && let Some(name) = current.take()
        {
            figures.insert(name, value);
        }
    }
    figures
}

/// Spill bytes (stores + loads) per kernel, from the line
/// "N bytes stack frame, S bytes spill stores, L bytes spill loads".
fn parse_spills(log: &str) -> BTreeMap<String, u32> {
    per_kernel(log, |line| {
        if !line.contains("bytes spill stores") {
            return None;
        }
        let numbers: Vec<u32> = line
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|s| s.parse().ok())
            .collect();
        // [stack frame, spill stores, spill loads]
        match numbers[..] {
            [_, stores, loads, ..] => Some(stores + loads),
            _ => None,
        }
    })
}

/// Registers per thread of each kernel, from the line "Used N registers, ...".
fn parse_registers(log: &str) -> BTreeMap<String, u32> {
    per_kernel(log, |line| {
        let rest = line.split("Used ").nth(1)?;
        rest.contains(" registers")
            .then(|| rest.split_whitespace().next()?.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spills_are_read_per_kernel() {
        let log = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'a_kernel' for 'sm_90'
ptxas info    : Function properties for a_kernel
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers
ptxas info    : Compiling entry function 'b' for 'sm_90'
ptxas info    : Function properties for b
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads";
        let spills = parse_spills(log);
        assert_eq!(parse_registers(log).get("a_kernel"), Some(&40));
        assert_eq!(
            parse_registers(log).get("b"),
            None,
            "b's report has no register line"
        );
        assert_eq!(spills.get("a_kernel"), Some(&16));
        assert_eq!(spills.get("b"), Some(&0));
        assert_eq!(spills.len(), 2);
    }

    #[test]
    fn the_shared_header_compiles() {
        if !crate::testing::nvrtc_or_skip("common: shared header compile") {
            return;
        }
        let source = KernelSource::inline(
            "probe.cu",
            r#"
#include "common.cuh"
#include "dtype.cuh"
#include "reduce.cuh"
KERNEL void probe(const bf16_t* in, f16_t* out, float* x, index_t n) {
    __shared__ float scratch[32];
    __shared__ MaxSum stats[32];
    const float v = to_f32(in[threadIdx.x]);
    const float m = block_max(v, scratch) + block_sum(v, scratch) + warp_max(v) + warp_sum(v);
    const MaxSum s = block_max_sum(max_sum_add(max_sum_empty(), v), stats);
    out[threadIdx.x] = from_f32<f16_t>(m + s.sum);
    store16(x, load16(x + 4));
    if (threadIdx.x < n) x[threadIdx.x] = NEG_INF;
}"#,
        );
        // No disk cache: a probe of the headers, not a kernel any day loads.
        let compiled = compile_with_cache(&source, "sm_90", &[], None).expect("compiles");
        assert!(!compiled.cubin.is_empty());
        assert_eq!(
            compiled.spills.get("probe"),
            Some(&0),
            "log:\n{}",
            compiled.log
        );
    }

    #[test]
    fn a_second_compile_comes_from_the_cache_with_its_ptxas_report() {
        if !crate::testing::nvrtc_or_skip("common: kernel cache") {
            return;
        }
        let dir = std::env::temp_dir().join(format!("days-of-gpu-nvrtc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let source = KernelSource::inline(
            "cached.cu",
            "#include \"common.cuh\"\nKERNEL void cached(float* x) { x[threadIdx.x] = 1.0f; }",
        );
        // A fresh cache object each time, as a second process would have.
        let first =
            compile_with_cache(&source, "sm_90", &[], Some(&KernelCache::at(&dir))).unwrap();
        assert!(!first.from_cache);
        let disk = KernelCache::at(&dir);
        let source_pair = (source.file_name, source.code);
        let key = kernel_cache::key(
            source_pair,
            HEADERS,
            &options("sm_90", &[]),
            version().unwrap(),
        );
        assert!(
            disk.get(&key).is_some(),
            "the first compile filled the cache"
        );
        let second = compile_with_cache(&source, "sm_90", &[], Some(&disk)).unwrap();
        assert!(second.from_cache);
        assert_eq!(second.cubin, first.cubin);
        assert_eq!(second.spills, first.spills);
        assert_eq!(second.spills.get("cached"), Some(&0));
        // Other options are another entry.
        let other = compile_with_cache(&source, "sm_90", &["-DX=1"], Some(&disk)).unwrap();
        assert!(!other.from_cache);
        // Without a cache, NVRTC runs every time.
        assert!(
            !compile_with_cache(&source, "sm_90", &[], None)
                .unwrap()
                .from_cache
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_compile_error_carries_the_log() {
        if !crate::testing::nvrtc_or_skip("common: compile error message") {
            return;
        }
        let source = KernelSource::inline(
            "broken.cu",
            "#include \"common.cuh\"\nKERNEL void broken() { undefined_name(); }",
        );
        let err = compile(&source, "sm_90", &[]).unwrap_err().to_string();
        assert!(err.contains("broken.cu"), "{err}");
        assert!(err.contains("undefined_name"), "{err}");
    }
}

//! An on-disk cache of compiled kernels, so that the second run of a day (and every test after
//! the first in a process) compiles nothing.
//!
//! An entry is one file, `<key>.cubin`, named by a SHA-256 of everything the CUBIN depends on:
//! the kernel file's name and text, every embedded header of `common/cuda/`, the NVRTC options
//! (the target architecture among them) and NVRTC's version. It holds the CUBIN and ptxas's
//! report beside it (the tables' spill bytes come from that report), followed by a SHA-256 of
//! both: an entry that is truncated, corrupt or of another format is found out, removed and
//! compiled again, never loaded. Entries are written to a temporary file in the same folder
//! and renamed into place, so two processes filling the cache at once each see either no
//! entry or a whole one.
//!
//! Where: `$DAYS_OF_GPU_KERNEL_CACHE` when set (`off` turns the cache off), else the
//! platform's cache folder (`~/.cache/days-of-gpu/kernels` on Linux; the temporary folder
//! where there is none). `--no-kernel-cache` on
//! any day turns it off for that run. Nothing is ever evicted: delete the folder to empty it.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

/// The environment variable that moves the cache (a folder) or turns it off (`off`).
pub const CACHE_ENV: &str = "DAYS_OF_GPU_KERNEL_CACHE";

/// The first bytes of every entry; the digit changes when the layout does.
const MAGIC: &[u8] = b"days-of-gpu kernel cache 1\n";

static DISABLED: AtomicBool = AtomicBool::new(false);

/// Turns the cache off for the rest of this process (`--no-kernel-cache`).
pub fn disable() {
    DISABLED.store(true, Ordering::Relaxed);
}

/// What a cache entry holds: the compiled module and ptxas's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub arch: String,
    pub cubin: Vec<u8>,
    pub log: String,
}

/// The key of a compilation: hex SHA-256 of the kernel file (`file_name`, `code`), the
/// `headers` it may include (name, text), the options and the NVRTC version, each
/// length-prefixed so that no two different inputs run together.
pub fn key(
    (file_name, code): (&str, &str),
    headers: &[(&str, &str)],
    options: &[String],
    nvrtc_version: (i32, i32),
) -> String {
    let mut hash = Sha256::new();
    let mut part = |bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    };
    part(MAGIC);
    part(format!("nvrtc {}.{}", nvrtc_version.0, nvrtc_version.1).as_bytes());
    part(file_name.as_bytes());
    part(code.as_bytes());
    for (name, text) in headers {
        part(name.as_bytes());
        part(text.as_bytes());
    }
    for option in options {
        part(option.as_bytes());
    }
    hex(&hash.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The platform's cache folder (`$XDG_CACHE_HOME` or `~/.cache` on Linux), or the temporary
/// folder where there is none (a container without `HOME`), so that a process still compiles
/// each source once and its later runs find it.
pub fn default_dir() -> PathBuf {
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("days-of-gpu")
        .join("kernels")
}

/// A cache folder.
#[derive(Debug, Clone)]
pub struct KernelCache {
    dir: PathBuf,
}

impl KernelCache {
    /// A cache in `dir` (created on the first write).
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The process's cache: off after [`disable`] or with `DAYS_OF_GPU_KERNEL_CACHE=off`, in
    /// that variable's folder when it names one, else in the platform's cache folder (None
    /// where there is none).
    pub fn from_env() -> Option<Self> {
        if DISABLED.load(Ordering::Relaxed) {
            return None;
        }
        match std::env::var_os(CACHE_ENV) {
            Some(v) if v == "off" || v == "0" || v.is_empty() => None,
            Some(dir) => Some(Self::at(dir)),
            None => Some(Self::at(default_dir())),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.cubin"))
    }

    /// The entry under `key`, or None when there is none or it does not verify (it is then
    /// removed, so the next write replaces it).
    pub fn get(&self, key: &str) -> Option<Entry> {
        let path = self.path_of(key);
        let bytes = fs::read(&path).ok()?;
        match decode(&bytes) {
            Some(entry) => Some(entry),
            None => {
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores `entry` under `key`: written whole to a temporary file, then renamed into place.
    pub fn put(&self, key: &str, entry: &Entry) -> Result<()> {
        fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating the kernel cache {}", self.dir.display()))?;
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let temp = self.dir.join(format!(
            ".{key}.{}.{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = fs::File::create(&temp)
            .and_then(|mut f| f.write_all(&encode(entry)))
            .and_then(|()| fs::rename(&temp, self.path_of(key)));
        if written.is_err() {
            let _ = fs::remove_file(&temp);
        }
        written.with_context(|| format!("writing to the kernel cache {}", self.dir.display()))
    }
}

/// MAGIC, then arch, log and CUBIN each as a little-endian u64 length and its bytes, then
/// the SHA-256 of everything before it.
fn encode(entry: &Entry) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    for part in [entry.arch.as_bytes(), entry.log.as_bytes(), &entry.cubin] {
        out.extend((part.len() as u64).to_le_bytes());
        out.extend(part);
    }
    let digest = Sha256::digest(&out);
    out.extend(digest);
    out
}

fn decode(bytes: &[u8]) -> Option<Entry> {
    let body_len = bytes.len().checked_sub(32)?;
    let (body, digest) = bytes.split_at(body_len);
    if Sha256::digest(body).as_slice() != digest {
        return None;
    }
    let mut rest = body.strip_prefix(MAGIC)?;
    let mut parts = Vec::with_capacity(3);
    for _ in 0..3 {
        let (len, tail) = rest.split_first_chunk::<8>()?;
        let len = usize::try_from(u64::from_le_bytes(*len)).ok()?;
        if len > tail.len() {
            return None;
        }
        let (part, tail) = tail.split_at(len);
        parts.push(part.to_vec());
        rest = tail;
    }
    if !rest.is_empty() {
        return None;
    }
    let cubin = parts.pop()?;
    let log = String::from_utf8(parts.pop()?).ok()?;
    let arch = String::from_utf8(parts.pop()?).ok()?;
    Some(Entry { arch, cubin, log })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_cache(name: &str) -> KernelCache {
        let dir = std::env::temp_dir().join(format!(
            "days-of-gpu-cache-test-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        KernelCache::at(dir)
    }

    fn entry(n: u8) -> Entry {
        Entry {
            arch: "sm_90".to_string(),
            cubin: (0..=255u8).cycle().take(4096 + n as usize).collect(),
            log: format!("ptxas info    : Used {n} registers"),
        }
    }

    const SOURCE: (&str, &str) = ("a.cu", "KERNEL void a() {}");
    const HEADERS: &[(&str, &str)] = &[("common.cuh", "#define KERNEL")];

    #[test]
    fn an_entry_comes_back_as_it_was_stored() {
        let cache = temp_cache("roundtrip");
        assert_eq!(cache.get("k"), None);
        cache.put("k", &entry(1)).unwrap();
        assert_eq!(cache.get("k"), Some(entry(1)));
        cache.put("k", &entry(2)).unwrap();
        assert_eq!(cache.get("k"), Some(entry(2)));
        let _ = fs::remove_dir_all(cache.dir());
    }

    #[test]
    fn a_truncated_or_corrupt_entry_is_removed_not_loaded() {
        let cache = temp_cache("corrupt");
        cache.put("k", &entry(3)).unwrap();
        let path = cache.path_of("k");
        let whole = fs::read(&path).unwrap();
        for broken in [
            whole[..whole.len() - 1].to_vec(),
            whole[..whole.len() / 2].to_vec(),
            Vec::new(),
            {
                let mut flipped = whole.clone();
                flipped[MAGIC.len() + 20] ^= 1;
                flipped
            },
        ] {
            fs::write(&path, &broken).unwrap();
            assert_eq!(cache.get("k"), None);
            assert!(!path.exists(), "a bad entry is removed");
        }
        let _ = fs::remove_dir_all(cache.dir());
    }

    #[test]
    fn processes_filling_one_entry_at_once_never_expose_a_partial_one() {
        // Threads stand for processes: each writes through its own temporary file and renames.
        let cache = temp_cache("race");
        std::thread::scope(|scope| {
            for t in 0..6u8 {
                let cache = &cache;
                scope.spawn(move || {
                    for _ in 0..30 {
                        if t % 2 == 0 {
                            cache.put("k", &entry(7)).unwrap();
                        } else if let Some(got) = cache.get("k") {
                            assert_eq!(got, entry(7));
                        }
                    }
                });
            }
        });
        assert_eq!(cache.get("k"), Some(entry(7)));
        let leftovers = fs::read_dir(cache.dir()).unwrap().count();
        assert_eq!(leftovers, 1, "temporary files are renamed away");
        let _ = fs::remove_dir_all(cache.dir());
    }

    #[test]
    fn the_key_changes_with_the_source_the_options_and_nvrtc() {
        let options = vec!["--gpu-architecture=sm_90".to_string()];
        let base = key(SOURCE, HEADERS, &options, (13, 0));
        assert_eq!(base.len(), 64);
        assert_eq!(key(SOURCE, HEADERS, &options, (13, 0)), base);
        assert_ne!(
            key(("a.cu", "KERNEL void b() {}"), HEADERS, &options, (13, 0)),
            base
        );
        let other_header = [("common.cuh", "#define KERNEL extern")];
        assert_ne!(key(SOURCE, &other_header, &options, (13, 0)), base);
        let sm90a = vec!["--gpu-architecture=sm_90a".to_string()];
        assert_ne!(key(SOURCE, HEADERS, &sm90a, (13, 0)), base);
        assert_ne!(key(SOURCE, HEADERS, &options, (13, 1)), base);
        // Options are hashed one by one: ["ab"] and ["a", "b"] differ.
        let joined = key(SOURCE, HEADERS, &["ab".to_string()], (13, 0));
        assert_ne!(
            key(
                SOURCE,
                HEADERS,
                &["a".to_string(), "b".to_string()],
                (13, 0)
            ),
            joined
        );
    }
}

//! A day's kernel files and the shared headers, as NVRTC compiles them: the copies embedded in
//! the binary when it was built, or, with `DAYS_OF_GPU_KERNEL_SOURCES=DIR`, the files of the
//! checkout at DIR, read when a kernel is compiled.
//!
//! The override is how a kernel change is tried on a GPU host without building anything: send
//! the edited tree, point the variable at it, and every loader, test executable and bench
//! compiles the edited text (the kernel cache keys on the text, so each edit compiles once).
//! Each day's file is read from its place in the checkout (`day10_fa2_forward/src/fa_hopper.cu`),
//! the headers from `common/cuda/`. A file missing there is an error naming its path, never a
//! silent fall back to the embedded copy. Every compile remembers which files differed from the
//! embedded copies ([`source_override`]): the tables, `--json` and the kernel log name them, and
//! `cargo xtask report` refuses such results, so no figure of an edited kernel passes for the
//! committed one.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::error::UsageError;

/// The environment variable naming the checkout whose kernel sources replace the embedded ones.
pub const SOURCES_ENV: &str = "DAYS_OF_GPU_KERNEL_SOURCES";

/// Where the shared headers live in a checkout.
const HEADER_FOLDER: &str = "common/cuda";

/// The headers every kernel file may include, by the name it includes them under, as embedded.
pub const HEADERS: &[(&str, &str)] = &[
    ("common.cuh", include_str!("../../cuda/common.cuh")),
    ("dtype.cuh", include_str!("../../cuda/dtype.cuh")),
    ("reduce.cuh", include_str!("../../cuda/reduce.cuh")),
    ("mma.cuh", include_str!("../../cuda/mma.cuh")),
    ("mma_gemm.cuh", include_str!("../../cuda/mma_gemm.cuh")),
    ("norm.cuh", include_str!("../../cuda/norm.cuh")),
    ("hopper.cuh", include_str!("../../cuda/hopper.cuh")),
    ("attention.cuh", include_str!("../../cuda/attention.cuh")),
];

/// A day's kernel file: its name (for messages), its embedded text, the files that text is
/// made of, and where they sit in a checkout. Made by [`kernel_source!`](crate::kernel_source).
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    pub file_name: &'static str,
    /// The text NVRTC compiles: the parts, one after another.
    pub code: &'static str,
    /// Each file of the text (name beside the embedding `.rs` file, embedded text): one for
    /// most days; a day whose kernels share a device-code file puts it in front (day 22's
    /// `topk.cuh`), since NVRTC is given only `common/cuda/` as headers.
    pub parts: &'static [(&'static str, &'static str)],
    /// The package folder of the crate that embedded it (`CARGO_MANIFEST_DIR`), and the `.rs`
    /// file that did (`file!()`), beside which the parts sit. Empty for text made in code (a
    /// test's probe), which no checkout holds.
    pub package_dir: &'static str,
    pub embedded_by: &'static str,
}

impl KernelSource {
    /// Kernel text made in code (a test's probe): compiled as given, even under an override.
    pub const fn inline(file_name: &'static str, code: &'static str) -> Self {
        Self {
            file_name,
            code,
            parts: &[],
            package_dir: "",
            embedded_by: "",
        }
    }

    /// The path of the part `name` from the root of a checkout
    /// (`day10_fa2_forward/src/fa_hopper.cu`), or None for inline text. `file!()` is relative
    /// to the workspace root when cargo builds a workspace member, and absolute otherwise;
    /// both lead to the package's folder name.
    pub fn checkout_path(&self, name: &str) -> Option<PathBuf> {
        let package = Path::new(self.package_dir);
        let folder = package.file_name()?;
        let rust_file = Path::new(self.embedded_by);
        let in_package = rust_file
            .strip_prefix(package)
            .or_else(|_| rust_file.strip_prefix(folder))
            .ok()?;
        Some(Path::new(folder).join(in_package.parent()?).join(name))
    }
}

/// A day's kernel file, named once: `common::kernel_source!("softmax_warp.cu")` is the
/// [`KernelSource`] of that file, read (`include_str!`) beside the `.rs` file that names it.
/// `kernel_source!("gemv.cu" = ["nvfp4_format.cuh", "gemv.cu"])` (day 24) is one text made
/// of several files, one after another, compiled under the name before `=`.
#[macro_export]
macro_rules! kernel_source {
    ($file:literal) => {
        $crate::kernel_source!($file = [$file])
    };
    ($name:literal = [$($part:literal),+ $(,)?]) => {
        $crate::gpu::kernel_source::KernelSource {
            file_name: $name,
            code: concat!($(include_str!($part)),+),
            parts: &[$(($part, include_str!($part))),+],
            package_dir: env!("CARGO_MANIFEST_DIR"),
            embedded_by: file!(),
        }
    };
}

/// The texts one compilation reads: the kernel file and every header.
#[derive(Debug, Clone)]
pub struct SourceTexts {
    pub code: &'static str,
    pub headers: Vec<(&'static str, &'static str)>,
    /// The checkout paths of the files that differ from the embedded copies.
    pub edited: Vec<String>,
}

impl SourceTexts {
    /// The texts of `source` with its headers: embedded, or read from the checkout `dir`.
    pub fn resolve(source: &KernelSource, dir: Option<&Path>) -> Result<Self> {
        let embedded = Self {
            code: source.code,
            headers: HEADERS.to_vec(),
            edited: Vec::new(),
        };
        let Some(dir) = dir.filter(|_| !source.parts.is_empty()) else {
            return Ok(embedded);
        };
        let mut edited = Vec::new();
        let mut read = |path: PathBuf, embedded: &'static str| -> Result<&'static str> {
            let text = read_once(dir, &path)?;
            if text != embedded {
                edited.push(path.to_string_lossy().into_owned());
            }
            Ok(text)
        };
        let mut parts = Vec::new();
        for &(name, text) in source.parts {
            let path = source
                .checkout_path(name)
                .ok_or_else(|| anyhow::anyhow!("{}: no place in a checkout", source.file_name))?;
            parts.push(read(path, text)?);
        }
        let code = match parts[..] {
            [one] => one,
            _ => Box::leak(parts.concat().into_boxed_str()),
        };
        let headers = HEADERS
            .iter()
            .map(|&(name, text)| Ok((name, read(Path::new(HEADER_FOLDER).join(name), text)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            code,
            headers,
            edited,
        })
    }

    /// The texts of `source` as this process compiles it: [`Self::resolve`] under
    /// `DAYS_OF_GPU_KERNEL_SOURCES`, recording what was edited for [`source_override`].
    pub fn for_compile(source: &KernelSource) -> Result<Self> {
        let dir = override_dir();
        let texts = Self::resolve(source, dir.as_deref())?;
        if dir.is_some() {
            let mut used = EDITED.lock().expect("edited sources");
            used.extend(texts.edited.iter().cloned());
        }
        Ok(texts)
    }
}

/// The checkout `DAYS_OF_GPU_KERNEL_SOURCES` names, if set (an empty value is unset).
pub fn override_dir() -> Option<PathBuf> {
    std::env::var_os(SOURCES_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// What a report says of its kernel sources when an override was set: the folder, and the
/// files this process compiled or loaded that differ from the binary's own copies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceOverride {
    pub dir: String,
    pub edited: Vec<String>,
}

impl SourceOverride {
    /// For the line above a table: `kernel sources from DIR (edited: PATH, PATH)`.
    pub fn describe(&self) -> String {
        let edited = if self.edited.is_empty() {
            "none edited".to_string()
        } else {
            format!("edited: {}", self.edited.join(", "))
        };
        format!("kernel sources from {} ({edited})", self.dir)
    }
}

/// The override of this process so far, or None when `DAYS_OF_GPU_KERNEL_SOURCES` is unset.
pub fn source_override() -> Option<SourceOverride> {
    let dir = override_dir()?;
    let edited = EDITED
        .lock()
        .expect("edited sources")
        .iter()
        .cloned()
        .collect();
    Some(SourceOverride {
        dir: dir.to_string_lossy().into_owned(),
        edited,
    })
}

/// Every edited file a compile of this process read.
static EDITED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// `dir/path`, read once per process: every compile of a run sees the same text, even if the
/// file changes while it runs. The text lives as long as the process.
fn read_once(dir: &Path, path: &Path) -> Result<&'static str> {
    static READ: OnceLock<Mutex<HashMap<PathBuf, &'static str>>> = OnceLock::new();
    let full = dir.join(path);
    let mut read = READ
        .get_or_init(Default::default)
        .lock()
        .expect("read sources");
    if let Some(text) = read.get(&full) {
        return Ok(text);
    }
    let text = std::fs::read_to_string(&full).map_err(|e| {
        UsageError::new(format!(
            "{SOURCES_ENV}={}: cannot read the kernel source {} ({e}); the variable names the \
             root of a checkout, which holds every day's kernel files and common/cuda/",
            dir.display(),
            full.display()
        ))
    })?;
    let text: &'static str = Box::leak(text.into_boxed_str());
    read.insert(full, text);
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source as `kernel_source!` would make it in the `lib.rs` of a day folder `dayXX_demo`.
    fn demo(
        parts: &'static [(&'static str, &'static str)],
        code: &'static str,
        embedded_by: &'static str,
    ) -> KernelSource {
        KernelSource {
            file_name: parts[0].0,
            code,
            parts,
            package_dir: "/somewhere/dayXX_demo",
            embedded_by,
        }
    }

    /// A checkout in a fresh temporary folder holding `files` (path, text).
    fn checkout(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("days-of-gpu-sources-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let full = dir.join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, text).unwrap();
        }
        dir
    }

    /// Every embedded header, under common/cuda/, as a checkout holds them.
    fn headers_as_embedded() -> Vec<(String, &'static str)> {
        HEADERS
            .iter()
            .map(|(name, text)| (format!("{HEADER_FOLDER}/{name}"), *text))
            .collect()
    }

    #[test]
    fn the_checkout_path_comes_from_the_embedding_file() {
        // cargo passes workspace members' files relative to the workspace root...
        let relative = demo(&[("k.cu", "")], "", "dayXX_demo/src/lib.rs");
        assert_eq!(
            relative.checkout_path("k.cu"),
            Some(PathBuf::from("dayXX_demo/src/k.cu"))
        );
        // ...and other crates' absolute.
        let absolute = demo(&[("k.cu", "")], "", "/somewhere/dayXX_demo/src/attn/mod.rs");
        assert_eq!(
            absolute.checkout_path("k.cu"),
            Some(PathBuf::from("dayXX_demo/src/attn/k.cu"))
        );
        assert_eq!(
            KernelSource::inline("probe.cu", "").checkout_path("probe.cu"),
            None
        );
        // This crate's own macro, from this file, of one part and of two.
        let own = crate::kernel_source!("../../cuda/common.cuh");
        assert_eq!(
            own.checkout_path(own.parts[0].0),
            Some(PathBuf::from("common/src/gpu/../../cuda/common.cuh"))
        );
        let two = crate::kernel_source!("x.cu" = ["../../cuda/common.cuh", "../../cuda/dtype.cuh"]);
        assert_eq!(two.file_name, "x.cu");
        assert_eq!(two.code, format!("{}{}", HEADERS[0].1, HEADERS[1].1));
        assert_eq!(two.parts.len(), 2);
    }

    #[test]
    fn without_an_override_the_embedded_texts_are_compiled() {
        let source = demo(
            &[("k.cu", "KERNEL void k() {}")],
            "KERNEL void k() {}",
            "dayXX_demo/src/lib.rs",
        );
        let texts = SourceTexts::resolve(&source, None).unwrap();
        assert_eq!(texts.code, source.code);
        assert_eq!(texts.headers, HEADERS.to_vec());
        assert!(texts.edited.is_empty());
    }

    #[test]
    fn an_override_is_read_and_its_edits_named() {
        let mut files = headers_as_embedded();
        files.push((
            "dayXX_demo/src/k.cu".into(),
            "KERNEL void k() { /* edited */ }",
        ));
        files.push(("dayXX_demo/src/same.cu".into(), "KERNEL void same() {}"));
        files.push(("dayXX_demo/src/front.cuh".into(), "// shared, edited\n"));
        let hopper = files
            .iter_mut()
            .find(|(p, _)| p.ends_with("hopper.cuh"))
            .unwrap();
        hopper.1 = "// an edited header";
        let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), *t)).collect();
        let dir = checkout("read", &refs);

        let edited = demo(
            &[("k.cu", "KERNEL void k() {}")],
            "KERNEL void k() {}",
            "dayXX_demo/src/lib.rs",
        );
        let texts = SourceTexts::resolve(&edited, Some(&dir)).unwrap();
        assert_eq!(texts.code, "KERNEL void k() { /* edited */ }");
        let header = |t: &SourceTexts, n: &str| t.headers.iter().find(|(h, _)| *h == n).unwrap().1;
        assert_eq!(header(&texts, "hopper.cuh"), "// an edited header");
        assert_eq!(header(&texts, "common.cuh"), HEADERS[0].1);
        assert_eq!(
            texts.edited,
            ["dayXX_demo/src/k.cu", "common/cuda/hopper.cuh"]
        );

        // A file equal to the embedded copy is read but is no edit; the header still is.
        let same = demo(
            &[("same.cu", "KERNEL void same() {}")],
            "KERNEL void same() {}",
            "dayXX_demo/src/lib.rs",
        );
        let texts = SourceTexts::resolve(&same, Some(&dir)).unwrap();
        assert_eq!(texts.edited, ["common/cuda/hopper.cuh"]);

        // A text of two parts is read part by part, and only the edited part is named.
        let joined = demo(
            &[
                ("front.cuh", "// shared\n"),
                ("same.cu", "KERNEL void same() {}"),
            ],
            "// shared\nKERNEL void same() {}",
            "dayXX_demo/src/lib.rs",
        );
        let texts = SourceTexts::resolve(&joined, Some(&dir)).unwrap();
        assert_eq!(texts.code, "// shared, edited\nKERNEL void same() {}");
        assert_eq!(
            texts.edited,
            ["dayXX_demo/src/front.cuh", "common/cuda/hopper.cuh"]
        );

        // Inline text has no place in a checkout: compiled as given.
        let probe = KernelSource::inline("probe.cu", "KERNEL void p() {}");
        let texts = SourceTexts::resolve(&probe, Some(&dir)).unwrap();
        assert_eq!(texts.code, probe.code);
        assert!(texts.edited.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_missing_from_the_override_is_refused_with_its_path() {
        let refs: Vec<(String, &str)> = headers_as_embedded();
        let refs: Vec<(&str, &str)> = refs.iter().map(|(p, t)| (p.as_str(), *t)).collect();
        let dir = checkout("missing", &refs);
        let source = demo(&[("gone.cu", "")], "", "dayXX_demo/src/lib.rs");
        let err = SourceTexts::resolve(&source, Some(&dir)).unwrap_err();
        assert!(err.is::<UsageError>(), "exit 2: {err}");
        let text = err.to_string();
        assert!(
            text.contains(&dir.join("dayXX_demo/src/gone.cu").display().to_string()),
            "{text}"
        );
        assert!(text.contains(SOURCES_ENV), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_override_is_described_for_the_table() {
        let o = SourceOverride {
            dir: "/tree".into(),
            edited: vec!["day10_fa2_forward/src/fa_hopper.cu".into()],
        };
        assert_eq!(
            o.describe(),
            "kernel sources from /tree (edited: day10_fa2_forward/src/fa_hopper.cu)"
        );
        let none = SourceOverride {
            dir: "/tree".into(),
            edited: vec![],
        };
        assert_eq!(none.describe(), "kernel sources from /tree (none edited)");
    }
}

//! What a day compiles: each of its kernel files with its target and options, and the kernels
//! it loads from it. One list serves three readers: the day's loader (the days with a Hopper
//! build or options load from the list itself; a day of one plain file compiles it the same
//! way), its compile test (what must compile without spilling), and `cargo xtask bundle`
//! (which compiles every day's list for Hopper ahead of time, so that a GPU host finds every
//! kernel in the bundled cache and compiles nothing). A loader that drifted from its list
//! (another file, target or options) would compile on the GPU host, and `run.sh` fails the
//! run when that happens.

use anyhow::Result;

use crate::gpu::kernel_cache::KernelCache;
use crate::gpu::nvrtc::{self, Compiled, KernelSource};

/// The architecture of a GPU the bundle's kernels are compiled for ahead of time: Hopper
/// (H100, H200).
pub const BUNDLED_DEVICE_ARCH: &str = "sm_90";

/// What a kernel file is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The GPU's own architecture, `sm_XY`: runs on any GPU.
    Device,
    /// `sm_90a`: Hopper's own instructions (`wgmma`, `setmaxnreg`), for sm_90 GPUs only.
    Hopper,
}

/// One compilation: a kernel file, what it is compiled for, the NVRTC options after ours
/// (`-D` defines of a tile table), and the kernels loaded from it.
#[derive(Debug, Clone)]
pub struct KernelBuild {
    pub source: KernelSource,
    pub target: Target,
    pub options: Vec<String>,
    pub functions: Vec<String>,
}

impl KernelBuild {
    /// `source` for the GPU's own architecture, no extra options, loading `functions`.
    pub fn device<S: Into<String>>(
        source: KernelSource,
        functions: impl IntoIterator<Item = S>,
    ) -> Self {
        Self {
            source,
            target: Target::Device,
            options: Vec::new(),
            functions: functions.into_iter().map(Into::into).collect(),
        }
    }

    /// `source` for sm_90a (Hopper GPUs only), loading `functions`.
    pub fn hopper<S: Into<String>>(
        source: KernelSource,
        functions: impl IntoIterator<Item = S>,
    ) -> Self {
        Self {
            target: Target::Hopper,
            ..Self::device(source, functions)
        }
    }

    /// One file compiled two ways, for a day whose Hopper versions sit in the same file as
    /// the rest: for sm_90a with every kernel (`functions(true)`: what a Hopper GPU loads),
    /// then for the GPU's own architecture without the Hopper ones (`functions(false)`: what
    /// every other GPU loads). [`first_runnable`] picks the one a GPU takes.
    pub fn hopper_or_portable(
        source: KernelSource,
        functions: impl Fn(bool) -> Vec<String>,
    ) -> Vec<Self> {
        vec![
            Self::hopper(source, functions(true)),
            Self::device(source, functions(false)),
        ]
    }

    /// The same build with `options` after ours.
    pub fn with_options(self, options: Vec<String>) -> Self {
        Self { options, ..self }
    }

    /// The extra options as NVRTC's calls take them.
    pub fn option_args(&self) -> Vec<&str> {
        self.options.iter().map(String::as_str).collect()
    }

    /// The architecture this build is compiled for on a GPU of `device_arch`, or None when
    /// that GPU cannot run it (an sm_90a build elsewhere than on sm_90).
    pub fn arch_on(&self, device_arch: &str) -> Option<String> {
        match self.target {
            Target::Device => Some(device_arch.to_string()),
            Target::Hopper => (device_arch == "sm_90").then(|| "sm_90a".to_string()),
        }
    }

    /// Compiles the build for a GPU of `device_arch` through `cache` (None: only this
    /// process's memory, and no disk cache); None when that GPU cannot run it.
    pub fn compile_for(
        &self,
        device_arch: &str,
        cache: Option<&KernelCache>,
    ) -> Result<Option<Compiled>> {
        let Some(arch) = self.arch_on(device_arch) else {
            return Ok(None);
        };
        nvrtc::compile_with_cache(&self.source, &arch, &self.option_args(), cache).map(Some)
    }

    /// A name for messages: `gemm.cu for sm_90a`.
    pub fn describe(&self, device_arch: &str) -> String {
        let arch = self
            .arch_on(device_arch)
            .unwrap_or_else(|| "sm_90a (not on this GPU)".to_string());
        format!("{} for {arch}", self.source.file_name)
    }
}

/// The first of `builds` a GPU of `device_arch` runs (for [`KernelBuild::hopper_or_portable`]:
/// the Hopper build on sm_90, the portable one elsewhere).
pub fn first_runnable(builds: Vec<KernelBuild>, device_arch: &str) -> Option<KernelBuild> {
    builds
        .into_iter()
        .find(|b| b.arch_on(device_arch).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: KernelSource = KernelSource::inline("a.cu", "");

    #[test]
    fn hopper_builds_exist_on_sm90_only() {
        let device = KernelBuild::device(SOURCE, ["a"]);
        let hopper = KernelBuild::hopper(SOURCE, ["a"]).with_options(vec!["-DX=1".into()]);
        assert_eq!(device.arch_on("sm_80").as_deref(), Some("sm_80"));
        assert_eq!(device.arch_on("sm_90").as_deref(), Some("sm_90"));
        assert_eq!(hopper.arch_on("sm_90").as_deref(), Some("sm_90a"));
        assert_eq!(hopper.arch_on("sm_100"), None);
        assert_eq!(hopper.options, vec!["-DX=1".to_string()]);
        assert_eq!(hopper.describe("sm_90"), "a.cu for sm_90a");
        let names = |hopper: bool| vec![if hopper { "wgmma" } else { "mma" }.to_string()];
        let pick = |arch| first_runnable(KernelBuild::hopper_or_portable(SOURCE, names), arch);
        assert_eq!(pick("sm_90").unwrap().functions, ["wgmma"]);
        assert_eq!(pick("sm_90").unwrap().target, Target::Hopper);
        assert_eq!(pick("sm_80").unwrap().functions, ["mma"]);
    }
}

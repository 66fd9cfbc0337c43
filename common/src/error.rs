//! The two kinds of error a user can cause, kept apart from internal failures so that `main`
//! can print one clear line and choose the exit code (`cli::exit_code_for`).

use thiserror::Error;

/// The machine cannot run GPU code: something is missing. Exit code 2.
#[derive(Debug, Error)]
pub enum SetupError {
    #[error(
        "no NVIDIA driver library (libcuda.so) was found: this program needs an NVIDIA GPU \
         with its driver installed"
    )]
    NoDriver,
    #[error("the NVIDIA driver is installed but reports no usable CUDA device ({0})")]
    NoDevice(String),
    #[error("GPU {requested} was asked for, but this machine has {count} GPU(s)")]
    NoSuchDevice { requested: usize, count: usize },
    #[error(
        "NVRTC (libnvrtc.so.13) was not found: install CUDA 13 or `pip install \
         nvidia-cuda-nvrtc==13.0.88`, and put its lib folder on LD_LIBRARY_PATH"
    )]
    NoNvrtc,
    #[error(
        "cuBLAS (libcublas.so.13) was not found: install CUDA 13 or `pip install \
         nvidia-cublas`, and put its lib folder on LD_LIBRARY_PATH"
    )]
    NoCublas,
}

/// The request cannot be met as asked: a bad size, an unknown kernel name, a problem that does
/// not fit in memory. Detected before anything is allocated. Exit code 2.
#[derive(Debug, Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl UsageError {
    pub fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

/// Returned by `main` when a kernel gave a wrong answer. Exit code 1.
#[derive(Debug, Error)]
#[error("{failed} kernel version(s) failed the check against the CPU reference")]
pub struct CheckFailed {
    pub failed: usize,
}

/// A version cannot take this problem (a size it does not handle, a GPU without what it
/// needs): it is skipped and listed as not run, not failed.
#[derive(Debug, Error)]
#[error("{0}")]
pub struct Refused(pub String);

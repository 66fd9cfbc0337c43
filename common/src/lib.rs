//! The crate every day uses.
//!
//! A day's `main` reads its flags ([`cli`]), opens the GPU ([`gpu`]), compiles its `.cu` file
//! with NVRTC ([`nvrtc`]), makes inputs ([`inputs`]) and a CPU reference ([`reference`]), then
//! hands each kernel version to a [`session::Session`], which checks it ([`check`]), times it
//! ([`bench`]) and prints the table ([`report`]). Tests use the same pieces plus [`testing`].

pub mod bench;
pub mod check;
pub mod cli;
pub mod cublas;
pub mod dtype;
pub mod element;
pub mod error;
pub mod gpu;
pub mod inputs;
pub mod kernel;
pub mod kernel_cache;
pub mod matmul;
pub mod norm;
pub mod nvrtc;
pub mod peers;
pub mod plot;
pub mod reference;
pub mod report;
pub mod roofline;
pub mod save;
pub mod session;
pub mod sizes;
pub mod softmax;
pub mod sweep;
pub mod testing;
pub mod tma;

pub use check::Tolerance;
pub use element::Element;
pub use error::{SetupError, UsageError};
pub use gpu::Gpu;
pub use kernel::{Kernel, LaunchShape};

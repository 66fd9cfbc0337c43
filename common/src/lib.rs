//! The crate every day uses.
//!
//! A day's `main` reads its flags ([`cli`]), opens the GPU ([`gpu`]), compiles its `.cu` file
//! with NVRTC ([`nvrtc`]), makes inputs ([`inputs`]) and a CPU reference ([`reference`]), then
//! hands each kernel version to a [`session::Session`], which checks it ([`check`]), times it
//! ([`bench`]) and prints the table ([`report`]). Tests use the same pieces plus [`testing`].
//!
//! The modules below are listed in layers (values and errors; the GPU; measurement; the
//! references; running a day), each importing only from the layers before it.

// The modules in layers, lowest first: a module imports only from its own layer or the ones
// above it in this list (no loops), so each layer can be read without those below it.

// Values and errors: storage types, the user errors and their exit codes, checked sizes.
pub mod dtype;
pub mod element;
pub mod error;
pub mod sizes;

// The GPU: the device and its memory, NVRTC and the kernel cache, loaded kernels, TMA
// descriptors, cuBLAS.
pub mod gpu;
pub mod kernel_cache;
pub mod nvrtc;
pub mod kernel;
pub mod tma;
pub mod cublas;

// Measurement: inputs, timing, checks, the report, its plots and peers, saved arrays.
pub mod inputs;
pub mod bench;
pub mod check;
pub mod peers;
pub mod report;
pub mod plot;
pub mod roofline;
pub mod sweep;
pub mod save;

// The f64 CPU references, with the tolerances their error analyses give (`check`).
pub mod reference;

// Running a day: the shared flags, a problem's session, the test helpers, and the family
// runners (one trait each) that whole days are built on.
pub mod cli;
pub mod session;
pub mod testing;
pub mod softmax;
pub mod matmul;
pub mod norm;
pub mod attention;

#[cfg(test)]
mod layers;

pub use check::Tolerance;
pub use element::Element;
pub use error::{SetupError, UsageError};
pub use gpu::Gpu;
pub use kernel::{Kernel, LaunchShape};

//! The crate every day uses, in layers, each a folder (or a file) that imports only from the
//! layers before it (a test, `layers.rs`, holds that):
//!
//! 1. values and errors: [`versions`] (the `versions!` macro), [`dtype`], [`element`], [`error`] (the user's errors and their exit
//!    codes), [`sizes`] (checked sizes);
//! 2. [`gpu`]: the device and its memory, [`gpu::nvrtc`] and [`gpu::kernel_cache`], loaded
//!    kernels ([`gpu::kernel`]), TMA descriptors, cuBLAS;
//! 3. [`measure`]: inputs, timing, checks, the report, its plots and peers, saved arrays;
//! 4. [`reference`](mod@reference): the f64 CPU references, with the tolerances their error analyses give;
//! 5. running a day: the shared flags ([`cli`]), a problem's [`session`], the test helpers
//!    ([`testing`]), and [`family`]: the runners that whole days are built on (softmax,
//!    matmul, norm, attention);
//! 6. [`bench_support`]: what every day's `cargo bench` shares (cases, settings, the criterion
//!    main macro, each family's cases).
//!
//! A day's `main` reads its flags, opens the GPU, compiles its `.cu` file with NVRTC, makes
//! inputs and a CPU reference, then hands each kernel version to a [`session::Session`],
//! which checks it, times it and prints the table.

pub mod versions;
pub mod dtype;
pub mod element;
pub mod error;
pub mod sizes;

pub mod gpu;

pub mod measure;

pub mod reference;

pub mod cli;
pub mod session;
pub mod testing;
pub mod family;

pub mod bench_support;

#[cfg(test)]
mod layers;

pub use element::Element;
pub use error::{SetupError, UsageError};
pub use gpu::Gpu;
pub use gpu::kernel::{Kernel, LaunchShape};
pub use measure::check::Tolerance;

//! CPU references. Every one reads the same storage values the kernel reads, computes in f64
//! and returns f64, so the only error left in a comparison is the kernel's own.

// First: the dense products the others use.
pub mod dense;

pub mod attention;
pub mod gemv;
pub mod matmul;
pub mod norm;
pub mod quantize;
pub mod softmax;

//! CPU references. Every one reads the same storage values the kernel reads, computes in f64
//! and returns f64, so the only error left in a comparison is the kernel's own.

// First: the dense products the others use.
pub mod dense;

pub mod activation;
pub mod attention;
pub mod conv;
pub mod cross_entropy;
pub mod gemv;
pub mod matmul;
pub mod norm;
pub mod nvfp4;
pub mod quantize;
pub mod reduce;
pub mod softmax;
pub mod topk;
pub mod transpose;
pub mod vector_add;

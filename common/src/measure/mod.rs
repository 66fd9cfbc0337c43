//! Measurement: random inputs, timing on the GPU, checks against the reference (and the
//! outputs a sampled check compares), the report and its tables, plots (sweeps, rooflines),
//! the peers' figures, saved arrays. In order, each using only what comes before it.

pub mod inputs;
pub mod bench;
pub mod check;
pub mod sampled;
pub mod poison_check;
pub mod peers;
pub mod report;
pub mod plot;
pub mod roofline;
pub mod sweep;
pub mod save;

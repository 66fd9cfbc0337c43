//! Day 12: LayerNorm forward and backward. The versions of `layernorm.cu`: one thread per
//! row with Welford statistics, a block per row merging per-thread Welford summaries, and the
//! row in registers with two-pass statistics; backward as a block per row plus a two-stage
//! column sum for dw and db, and fused with the row in registers. The family
//! (`common::family::norm`) plans every version from the kernels' names.

use anyhow::Result;
use common::Element;
use common::family::norm::{self, Kind, NormDay, NormKernels, Plan, Refused, Rows};
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;

pub const SOURCE: KernelSource = common::kernel_source!("layernorm.cu");

/// What the day compiles: `layernorm.cu` for the GPU's own architecture, the family's kernels
/// with `welford_block`'s; what its loader compiles, its compile test checks and `cargo xtask
/// bundle` compiles ahead of time.
pub fn kernel_builds() -> Vec<KernelBuild> {
    norm::kernel_builds::<Day12>()
}

common::versions! {
    /// Welford's naive and block versions, then two-pass statistics in registers; the backward
    /// versions are the family's.
    pub enum ForwardVersion {
        /// One thread per row, Welford.
        Naive => "naive",
        /// A block per row, per-thread Welford merged across the block.
        WelfordBlock => "welford_block",
        /// The row in registers, read once and written once.
        VecRegs => "vec_regs",
    }
}

/// The day for the family's runner: its kernels are [`NormKernels<Day12>`].
pub struct Day12;

impl NormDay for Day12 {
    const DAY: &'static str = "day12";
    const KIND: Kind = Kind::Layer;
    const SOURCE: KernelSource = SOURCE;
    /// `welford_block`'s kernel.
    const OWN_FUNCTIONS: &'static [&'static str] = &["layernorm_welford_block"];
    const FORWARD_VERSIONS: &'static [&'static str] = &ForwardVersion::NAMES;
    /// `SAVED_STAGES` in layernorm.cu: the row `bwd_saved` works on and two on their way.
    const SAVED_STAGED_ROWS: usize = 3;

    fn plan_forward<'a, T: Element>(
        day: &'a NormKernels<Self>,
        version: &str,
        on: Rows<'a>,
    ) -> Result<Plan<'a, T>> {
        match ForwardVersion::from_name(version) {
            Some(ForwardVersion::Naive) => day.plan_naive(on),
            Some(ForwardVersion::WelfordBlock) => day.plan_block("layernorm_welford_block", on),
            Some(ForwardVersion::VecRegs) => day.plan_registers("naive and welford_block", on),
            None => Err(Refused(format!("day12 has no version `{version}`")).into()),
        }
    }
}

common::test_kernel_builds!();

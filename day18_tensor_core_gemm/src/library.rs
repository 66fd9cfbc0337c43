//! Day 18's GEMM as a library ([`Gemm`]): the fastest version that takes each problem, in an
//! order measured on the H100. Later days (19's fused cross-entropy) call it instead of cuBLAS.

use anyhow::Result;
use common::Gpu;
use common::element::Element;
use common::gpu::cublas::GemmEx;
use common::gpu::{DeviceBuffer, DeviceBufferMut};
use common::session::Refused;

use crate::{Prepared, TensorCoreGemm, Version};

/// Day 18's GEMM as a library: the fastest version that takes each problem. Later days (19's
/// fused cross-entropy) call this instead of cuBLAS.
pub struct Gemm {
    day: TensorCoreGemm,
}

impl Gemm {
    /// Versions in order of preference where C is not read into the SM: beta = 0, and beta =
    /// 1, where `wgmma_tma_store`'s TMA adds the tile into C in L2. `wgmma_auto` first
    /// (`wgmma_tma_store`'s epilogue overlapping the next tile's math, on the tile width and
    /// CTA count that fill the GPU's waves best); `wgmma_overlap` where C's rows or address do
    /// not suit the TMA (`wgmma_tma` measured level with it). `wgmma_cluster` measured level
    /// with `wgmma_tma_store` or below, so it is not chosen. The mma.sync versions take what
    /// the Hopper path cannot (k % 8 != 0, unaligned views in layout nt) or GPUs before
    /// Hopper. `wgmma_prefetch_c` is not here: with beta = 0 it loads nothing and only has a
    /// stage fewer.
    pub const PREFERENCE: [Version; 4] = [
        Version::WgmmaAuto,
        Version::WgmmaOverlap,
        Version::MmaPipelined,
        Version::MmaLdmatrix,
    ];

    /// Versions in order of preference where C is read (beta other than 0 and 1):
    /// `wgmma_prefetch_c` first (the TMA loads C during the main loop; the others read it in
    /// the epilogue, while that consumer issues no wgmma), then [`Gemm::PREFERENCE`]. It takes
    /// exactly what `wgmma_auto` takes (C's rows and batch stride 16-byte multiples, Hopper).
    pub const PREFERENCE_READING_C: [Version; 5] = [
        Version::WgmmaPrefetchC,
        Version::WgmmaAuto,
        Version::WgmmaOverlap,
        Version::MmaPipelined,
        Version::MmaLdmatrix,
    ];

    /// The order [`Gemm::choose`] and [`Gemm::run`] try for `g`: by whether it reads C.
    pub fn preference(g: &GemmEx) -> &'static [Version] {
        if g.beta != 0.0 && g.beta != 1.0 {
            &Self::PREFERENCE_READING_C
        } else {
            &Self::PREFERENCE
        }
    }

    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            day: TensorCoreGemm::load(gpu)?,
        })
    }

    /// The versions underneath, for a table of each.
    pub fn versions(&self) -> &TensorCoreGemm {
        &self.day
    }

    /// The version [`Gemm::run`] tries first for `g`, or the best version's refusal when none
    /// takes its sizes.
    pub fn choose<T: Element>(&self, g: &GemmEx) -> Result<Version> {
        let mut first_refusal = None;
        for &v in Self::preference(g) {
            match self.day.check::<T>(v, g) {
                Ok(()) => return Ok(v),
                Err(e) if e.is::<Refused>() => {
                    first_refusal.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(first_refusal.expect("PREFERENCE is not empty"))
    }

    /// Plans `g` on these buffers with the first version of [`Gemm::preference`] that takes
    /// it (sizes, then the operands' alignment), for [`Prepared::launch`] to enqueue as often
    /// as wanted on them; [`Refused`] with the best version's reason when none does. Nothing
    /// is enqueued.
    pub fn prepare<T: Element>(
        &self,
        gpu: &Gpu,
        g: &GemmEx,
        a: &impl DeviceBuffer<T>,
        b: &impl DeviceBuffer<T>,
        c: &impl DeviceBuffer<T>,
    ) -> Result<Prepared<'_>> {
        let mut first_refusal = None;
        for &v in Self::preference(g) {
            if let Err(e) = self.day.check::<T>(v, g) {
                if !e.is::<Refused>() {
                    return Err(e);
                }
                first_refusal.get_or_insert(e);
                continue;
            }
            match self.day.prepare::<T>(gpu, v, g, a, b, c) {
                Err(e) if e.is::<Refused>() => {
                    first_refusal.get_or_insert(e);
                }
                done => return done,
            }
        }
        Err(first_refusal.expect("PREFERENCE is not empty"))
    }

    /// Enqueues `g` with the first version of [`Gemm::preference`] that takes it: planned
    /// ([`Gemm::prepare`]) and launched once.
    pub fn run<T: Element>(
        &self,
        gpu: &Gpu,
        g: &GemmEx,
        a: &impl DeviceBuffer<T>,
        b: &impl DeviceBuffer<T>,
        c: &mut impl DeviceBufferMut<T>,
    ) -> Result<()> {
        self.prepare::<T>(gpu, g, a, b, c)?
            .launch::<T, T>(gpu, a, b, c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_c_prefers_the_version_that_prefetches_it() {
        let g = GemmEx::new(128, 256, 64);
        assert_eq!(Gemm::preference(&g)[0], Version::WgmmaAuto);
        // beta = 1: wgmma_tma_store adds into C in L2; C is not read into the SM.
        let accumulate = GemmEx { beta: 1.0, ..g };
        assert_eq!(Gemm::preference(&accumulate), Gemm::PREFERENCE);
        let scaled = GemmEx { beta: 0.5, ..g };
        assert_eq!(Gemm::preference(&scaled)[0], Version::WgmmaPrefetchC);
        // Past it, the same order as with beta = 0: it refuses only what wgmma_tma_store does.
        assert_eq!(Gemm::preference(&scaled)[1..], Gemm::PREFERENCE);
        assert!(!Gemm::PREFERENCE.contains(&Version::WgmmaPrefetchC));
        assert!(Version::WgmmaPrefetchC.stores_by_tma() && Version::WgmmaTmaStore.stores_by_tma());
        assert!(!Version::FP8.contains(&Version::WgmmaPrefetchC));
    }
}

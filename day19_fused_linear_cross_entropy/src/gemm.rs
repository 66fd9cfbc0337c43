//! The chunked loop's three GEMMs through a [`GemmBackend`]: cuBLAS, or day 18's own
//! tensor-core GEMM ([`Day18Gemm`]).

use anyhow::Result;
use common::Gpu;
use common::gpu::cublas::{Cublas, GemmEx, Stored};
use cudarc::driver::{CudaView, CudaViewMut};
use half::bf16;

/// A bf16 operand of a GEMM, and its output.
pub type Operand<'a> = CudaView<'a, bf16>;
pub type Output<'a> = CudaViewMut<'a, bf16>;

/// A bf16 GEMM with f32 accumulation, [`Cublas::gemm_ex`]'s contract: row-major
/// `C (m x n) = alpha op(A) op(B) + beta C`, one matrix (batch 1), views as operands. The
/// chunked loop asks for nothing else, so another GEMM (day 18's own) plugs in by
/// implementing this.
pub trait GemmBackend {
    /// For the version's name: `cublas`, `day18`.
    fn name(&self) -> &str;
    /// [`Refused`](common::session::Refused) when the backend cannot take `g`'s sizes, asked
    /// before anything is enqueued. Takes everything unless the backend says otherwise.
    fn check(&self, _g: &GemmEx) -> Result<()> {
        Ok(())
    }
    /// `g` planned once on these operands (C given as a view of the output it will write),
    /// enqueued by [`PreparedGemm::launch`] as often as wanted on the same operands.
    fn prepare<'s>(
        &'s self,
        g: &GemmEx,
        a: &Operand,
        b: &Operand,
        c: &Operand,
    ) -> Result<Box<dyn PreparedGemm + 's>>;
}

/// One GEMM of a [`GemmBackend`], planned for its operands.
pub trait PreparedGemm {
    /// Enqueues the GEMM on the operands it was prepared for.
    fn launch(&self, a: &Operand, b: &Operand, c: &mut Output) -> Result<()>;
}

/// cuBLAS plans inside the library call: its prepared GEMM is the call's description.
struct CublasGemm<'c> {
    cublas: &'c Cublas,
    g: GemmEx,
}

impl PreparedGemm for CublasGemm<'_> {
    fn launch(&self, a: &Operand, b: &Operand, c: &mut Output) -> Result<()> {
        self.cublas.gemm_ex::<bf16, bf16>(&self.g, a, b, c)
    }
}

impl GemmBackend for Cublas {
    fn name(&self) -> &str {
        "cublas"
    }

    fn prepare<'s>(
        &'s self,
        g: &GemmEx,
        _a: &Operand,
        _b: &Operand,
        _c: &Operand,
    ) -> Result<Box<dyn PreparedGemm + 's>> {
        Ok(Box::new(CublasGemm {
            cublas: self,
            g: *g,
        }))
    }
}

/// Day 18's GEMM (`wgmma_overlap` in every layout on Hopper; see `day18::Gemm`) on the GPU it
/// was loaded for. Its TMA path needs 16-byte rows: an MN-major operand's m or n, and a
/// K-major operand's k, a multiple of 8. In the chunked loop that is V and Hd (dH reads W
/// `[V, Hd]` as is, dW reads dz `[chunk, V]` transposed and H `[chunk, Hd]` as is): other
/// sizes are refused.
pub struct Day18Gemm<'g> {
    gpu: &'g Gpu,
    gemm: day18::Gemm,
}

impl<'g> Day18Gemm<'g> {
    /// Compiles day 18's kernels for `gpu` (sm_90a on Hopper).
    pub fn load(gpu: &'g Gpu) -> Result<Self> {
        Ok(Self {
            gpu,
            gemm: day18::Gemm::load(gpu)?,
        })
    }
}

impl GemmBackend for Day18Gemm<'_> {
    fn name(&self) -> &str {
        "day18"
    }

    fn check(&self, g: &GemmEx) -> Result<()> {
        self.gemm.choose::<bf16>(g).map(|_| ())
    }

    fn prepare<'s>(
        &'s self,
        g: &GemmEx,
        a: &Operand,
        b: &Operand,
        c: &Operand,
    ) -> Result<Box<dyn PreparedGemm + 's>> {
        Ok(Box::new(Day18Prepared {
            gpu: self.gpu,
            prepared: self.gemm.prepare::<bf16>(self.gpu, g, a, b, c)?,
        }))
    }
}

/// Day 18's GEMM with its version, launch and tensor maps made once for its operands.
struct Day18Prepared<'g, 'k> {
    gpu: &'g Gpu,
    prepared: day18::Prepared<'k>,
}

impl PreparedGemm for Day18Prepared<'_, '_> {
    fn launch(&self, a: &Operand, b: &Operand, c: &mut Output) -> Result<()> {
        self.prepared.launch::<bf16, bf16>(self.gpu, a, b, c)
    }
}

/// `C (m x n) = op(A) op(B) (+ C when accumulate)`, one matrix.
pub(crate) fn gemm(m: usize, n: usize, k: usize, a: Stored, b: Stored, accumulate: bool) -> GemmEx {
    GemmEx {
        a,
        b,
        beta: if accumulate { 1.0 } else { 0.0 },
        ..GemmEx::new(m, n, k)
    }
}

/// `m x n x k, A as-is, B transposed` for a refusal's message.
pub(crate) fn describe(g: &GemmEx) -> String {
    let stored = |s: Stored| match s {
        Stored::AsIs => "as-is",
        Stored::Transposed => "transposed",
    };
    format!(
        "{} x {} x {} (m x n x k), A {}, B {}",
        g.m,
        g.n,
        g.k,
        stored(g.a),
        stored(g.b)
    )
}

//! The fused problem's chunked loop: per chunk of tokens, the logits (GEMM), the loss rows
//! and their gradient written over the logits in place (`cross_entropy.cu`), the chunk's dH
//! (GEMM) and its share of dW (GEMM, accumulated). [`FusedPlan`] holds one version's chunk
//! and scratch for one shape, [`ChunkLaunches`] its kernels planned for one backend and set
//! of buffers; [`FusedPlan::run`] is one forward and backward.

use anyhow::{Result, bail};
use common::Gpu;
use common::gpu::cublas::{GemmEx, Stored};
use common::session::Refused;
use cudarc::driver::CudaSlice;
use half::bf16;

use crate::cross_entropy::{CrossEntropy, LossScratch, RowPlan};
use crate::gemm::{GemmBackend, PreparedGemm, describe, gemm};
use crate::problem::validate_options;
use crate::reference::CeOptions;
use crate::row_kernel::RowKernel;

/// Sizes of the fused problem (the reference's).
pub use crate::reference::LinearCeShape as Shape;

common::versions! {
    /// Versions of the fused problem, in table order.
    pub enum FusedVersion {
        /// Every token in one chunk: the whole logits at once.
        Naive => "naive",
        /// Chunks of tokens, the GEMMs cuBLAS's.
        ChunkedCublas => "chunked_cublas",
        /// Chunks of tokens, the GEMMs day 18's.
        ChunkedDay18 => "chunked_day18",
    }
}

impl FusedVersion {
    /// Tokens per chunk: all of them for `naive`, else `chunk`.
    pub fn chunk(self, shape: Shape, chunk: usize) -> usize {
        match self {
            Self::Naive => shape.tokens,
            _ => chunk,
        }
    }
}

/// How many tokens a chunk takes by default: the logits chunk about four times the size of
/// H (`chunk * V ~ 4 * T * Hd`), rounded down to a power of two, at least 128 rows (or T).
///
/// Liger sizes its chunk so that the logits chunk is about the size of H (256 rows here); our
/// GEMMs want more rows than that: the dH GEMM of a chunk has only `chunk x Hd` outputs (128
/// tiles of 128 x 256 at 1024 rows: one wave of 132 SMs; 32 tiles at 256), and every chunk
/// reads and writes the whole bf16 dW once more to accumulate (2 GB per chunk at V = 128256,
/// about 0.7 ms). At the default problem this gives 1024 rows: a 251 MiB logits chunk, 8
/// chunks, and with the outputs (dH, dW) about 1.29 GiB extra, under Liger's 1.35 GiB.
pub fn default_chunk(shape: Shape) -> usize {
    let Shape {
        tokens,
        hidden,
        vocab,
    } = shape;
    let target = (4 * tokens * hidden / vocab.max(1)).max(1);
    let pow2 = 1usize << target.ilog2();
    pow2.max(128).min(tokens).max(1)
}

/// Device memory a version holds beyond inputs and outputs: the `chunk x V` bf16 logits, one
/// f32 loss per token and 1/N. Known before anything runs, for the table's heading.
pub fn planned_scratch_bytes(shape: Shape, chunk: usize) -> u64 {
    (2 * chunk.min(shape.tokens) * shape.vocab + 4 * shape.tokens.max(1) + 4) as u64
}

/// Bytes of the outputs (dH, dW in bf16, the f32 loss): what torch's
/// `max_memory_allocated` counts beside the scratch when the peers measure "extra" memory.
pub fn output_bytes(shape: Shape) -> u64 {
    (2 * (shape.tokens + shape.vocab) * shape.hidden + 4) as u64
}

pub(crate) fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// One version of the fused problem on one shape: its chunk and its scratch.
/// [`FusedPlan::prepare`] plans its kernels for a backend and the buffers ([`ChunkLaunches`]);
/// [`FusedPlan::run`] only launches them.
pub struct FusedPlan {
    pub shape: Shape,
    pub chunk: usize,
    pub row_kernel: RowKernel,
    /// `chunk x V` bf16: a chunk's logits, then its gradient in place.
    logits: CudaSlice<bf16>,
    loss_scratch: LossScratch,
}

/// A [`FusedPlan`]'s kernels planned once for a backend and one set of buffers (H, W, the
/// gradients and the plan's logits): the row kernel of a full chunk and of the ragged last
/// one, and every chunk's three GEMMs in the order they run.
pub struct ChunkLaunches<'a> {
    shape: Shape,
    chunk: usize,
    ce: &'a CrossEntropy,
    full: RowPlan<'a>,
    last: RowPlan<'a>,
    gemms: Vec<[Box<dyn PreparedGemm + 'a>; 3]>,
}

impl<'a> ChunkLaunches<'a> {
    /// The row kernel's plan for a full chunk (the table's launch).
    pub fn row_plan(&self) -> &RowPlan<'a> {
        &self.full
    }
}

/// The chunks of `tokens` in `chunk`s: (first token, rows).
fn chunks(tokens: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..tokens)
        .step_by(chunk)
        .map(move |start| (start, chunk.min(tokens - start)))
}

impl FusedPlan {
    /// `chunk` tokens at a time (`chunk >= T` is the naive version: the whole logits at once).
    /// Refuses, before allocating, a logits buffer that does not fit in free device memory.
    pub fn new(gpu: &Gpu, shape: Shape, chunk: usize, opts: &CeOptions) -> Result<Self> {
        let chunk = checked_chunk(shape, chunk, opts)?;
        let Shape { tokens, vocab, .. } = shape;
        let logits_bytes = (chunk * vocab * 2) as u64;
        let (free, _) = gpu.ctx.mem_get_info()?;
        let headroom = 512u64 << 20;
        if logits_bytes + headroom > free as u64 {
            return Err(Refused(format!(
                "{chunk} x {vocab} bf16 logits need {:.2} GiB; {:.2} GiB of device memory is free",
                gib(logits_bytes),
                gib(free as u64)
            ))
            .into());
        }
        // SAFETY: the logits GEMM writes every element of a chunk's rows before the row kernel
        // reads them; rows past the chunk are never read.
        let logits = unsafe { gpu.stream.alloc::<bf16>(chunk * vocab) }?;
        Ok(Self {
            shape,
            chunk,
            row_kernel: RowKernel::best_for(vocab),
            logits,
            loss_scratch: LossScratch::new(gpu, tokens)?,
        })
    }

    /// A plan on scratch the caller owns: `logits` of at least `chunk x V` elements and
    /// `loss_scratch` of at least T rows (the PyTorch layer's tensors from PyTorch's allocator,
    /// so that a CUDA graph can capture the call). [`FusedPlan::into_scratch`] gives them back;
    /// on an error they are let go of unfreed (`leak`), as they are the caller's.
    pub fn with_scratch(
        shape: Shape,
        chunk: usize,
        opts: &CeOptions,
        logits: CudaSlice<bf16>,
        loss_scratch: LossScratch,
    ) -> Result<Self> {
        let checked = checked_chunk(shape, chunk, opts).and_then(|chunk| {
            if logits.len() >= chunk * shape.vocab
                && loss_scratch.row_loss.len() >= shape.tokens
                && !loss_scratch.inv_count.is_empty()
            {
                return Ok(chunk);
            }
            bail!(
                "fused cross-entropy: scratch of {} logits, {} row losses and {} counts for \
                 {chunk} x {} logits and {} rows",
                logits.len(),
                loss_scratch.row_loss.len(),
                loss_scratch.inv_count.len(),
                shape.vocab,
                shape.tokens
            )
        });
        match checked {
            Ok(chunk) => Ok(Self {
                shape,
                chunk,
                row_kernel: RowKernel::best_for(shape.vocab),
                logits,
                loss_scratch,
            }),
            Err(e) => {
                let LossScratch {
                    row_loss,
                    inv_count,
                } = loss_scratch;
                let _ = (logits.leak(), row_loss.leak(), inv_count.leak());
                Err(e)
            }
        }
    }

    /// The scratch the plan was made with: the logits chunk and the loss's scratch.
    pub fn into_scratch(self) -> (CudaSlice<bf16>, LossScratch) {
        (self.logits, self.loss_scratch)
    }

    /// The three GEMMs of a chunk of `rows` tokens, in the order [`FusedPlan::run`] enqueues
    /// them: logits = H W^T, dH = dz W, dW (+)= dz^T H.
    fn chunk_gemms(&self, rows: usize, accumulate: bool) -> [GemmEx; 3] {
        let Shape { hidden, vocab, .. } = self.shape;
        [
            // logits (rows x V) = H_chunk (rows x Hd) W^T, W stored V x Hd.
            gemm(rows, vocab, hidden, Stored::AsIs, Stored::Transposed, false),
            // dH_chunk (rows x Hd) = dlogits (rows x V) W (V x Hd).
            gemm(rows, hidden, vocab, Stored::AsIs, Stored::AsIs, false),
            // dW (V x Hd) += dlogits^T (V x rows) H_chunk (rows x Hd).
            gemm(
                vocab,
                hidden,
                rows,
                Stored::Transposed,
                Stored::AsIs,
                accumulate,
            ),
        ]
    }

    /// [`Refused`] when `backend` cannot take one of the GEMMs of this plan (the full chunk
    /// and the ragged last one), before anything is enqueued.
    pub fn check_backend(&self, backend: &dyn GemmBackend) -> Result<()> {
        for rows in [self.chunk, last_chunk(self.shape.tokens, self.chunk)] {
            for g in self.chunk_gemms(rows, true) {
                backend.check(&g).map_err(|e| {
                    if e.is::<Refused>() {
                        Refused(format!("{} GEMM {}: {e}", backend.name(), describe(&g))).into()
                    } else {
                        e
                    }
                })?;
            }
        }
        Ok(())
    }

    /// Device memory this plan holds beyond the inputs and outputs.
    pub fn scratch_bytes(&self) -> u64 {
        2 * self.logits.len() as u64 + self.loss_scratch.bytes()
    }

    /// Whether H, W and the gradients have this plan's sizes.
    fn fits(&self, h: &CudaSlice<bf16>, w: &CudaSlice<bf16>, grads: &CudaSlice<bf16>) -> bool {
        let Shape {
            tokens,
            hidden,
            vocab,
        } = self.shape;
        h.len() == tokens * hidden
            && w.len() == vocab * hidden
            && grads.len() == (tokens + vocab) * hidden
    }

    /// The row kernel planned for a full chunk and the last one, and every chunk's GEMMs
    /// planned by `backend` on `h`, `w` and `grads` (the buffers [`FusedPlan::run`] must then
    /// be given), after [`FusedPlan::check_backend`]: [`Refused`] before anything is enqueued
    /// when the backend cannot take them.
    pub fn prepare<'a>(
        &self,
        gpu: &Gpu,
        ce: &'a CrossEntropy,
        backend: &'a dyn GemmBackend,
        h: &CudaSlice<bf16>,
        w: &CudaSlice<bf16>,
        grads: &CudaSlice<bf16>,
    ) -> Result<ChunkLaunches<'a>> {
        let Shape {
            tokens,
            hidden,
            vocab,
        } = self.shape;
        if !self.fits(h, w, grads) {
            bail!(
                "fused cross-entropy: H of {}, W of {} and {} gradients do not make T = {tokens}, \
                 Hd = {hidden}, V = {vocab}",
                h.len(),
                w.len(),
                grads.len()
            );
        }
        self.check_backend(backend)?;
        let full = ce.plan_rows(gpu, self.row_kernel, self.chunk, vocab)?;
        let last = ce.plan_rows(gpu, self.row_kernel, last_chunk(tokens, self.chunk), vocab)?;
        // The operands exactly as `run` slices them.
        let (dh, dw) = grads.split_at(tokens * hidden);
        let w_view = w.as_view();
        let gemms = chunks(tokens, self.chunk)
            .map(|(start, rows)| {
                let h_chunk = h.slice(start * hidden..(start + rows) * hidden);
                let [logits_gemm, dh_gemm, dw_gemm] = self.chunk_gemms(rows, start > 0);
                let logits = self.logits.slice(..rows * vocab);
                let dh_chunk = dh.slice(start * hidden..(start + rows) * hidden);
                Ok([
                    backend.prepare(&logits_gemm, &h_chunk, &w_view, &logits)?,
                    backend.prepare(&dh_gemm, &logits, &w_view, &dh_chunk)?,
                    backend.prepare(&dw_gemm, &logits, &h_chunk, &dw)?,
                ])
            })
            .collect::<Result<_>>()?;
        Ok(ChunkLaunches {
            shape: self.shape,
            chunk: self.chunk,
            ce,
            full,
            last,
            gemms,
        })
    }

    /// One forward + backward with `launches` (prepared by [`FusedPlan::prepare`] on these
    /// `h`, `w` and `grads`): `grads` is dH `[T, Hd]` then dW `[V, Hd]`, `loss[0]` the mean.
    /// Every kernel was planned once, with the plan and its launches; this only enqueues.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &mut self,
        gpu: &Gpu,
        launches: &ChunkLaunches,
        h: &CudaSlice<bf16>,
        w: &CudaSlice<bf16>,
        targets: &CudaSlice<i32>,
        opts: &CeOptions,
        grads: &mut CudaSlice<bf16>,
        loss: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let Shape {
            tokens,
            hidden,
            vocab,
        } = self.shape;
        if !self.fits(h, w, grads) || targets.len() != tokens || loss.is_empty() {
            bail!(
                "fused cross-entropy: H of {}, W of {}, {} targets and {} gradients do not make \
                 T = {tokens}, Hd = {hidden}, V = {vocab}",
                h.len(),
                w.len(),
                targets.len(),
                grads.len()
            );
        }
        if launches.shape != self.shape || launches.chunk != self.chunk {
            bail!("fused cross-entropy: launches prepared for another plan");
        }
        let ce = launches.ce;
        ce.count_valid(gpu, targets, vocab, opts, &mut self.loss_scratch)?;
        let (mut dh, mut dw) = grads.split_at_mut(tokens * hidden);
        let w_view = w.as_view();
        for ((start, rows), [logits_gemm, dh_gemm, dw_gemm]) in
            chunks(tokens, self.chunk).zip(&launches.gemms)
        {
            let row_plan = if rows == self.chunk {
                &launches.full
            } else {
                &launches.last
            };
            let h_chunk = h.slice(start * hidden..(start + rows) * hidden);
            // The first chunk overwrites dW, so dW needs no zeroing (its poison is never read).
            let mut logits = self.logits.slice_mut(..rows * vocab);
            logits_gemm.launch(&h_chunk, &w_view, &mut logits)?;
            ce.rows_in_place(
                gpu,
                row_plan,
                &mut logits,
                &targets.slice(start..start + rows),
                &mut self.loss_scratch.row_loss.slice_mut(start..start + rows),
                &self.loss_scratch.inv_count,
                opts,
            )?;
            let dlogits = self.logits.slice(..rows * vocab);
            let mut dh_chunk = dh.slice_mut(start * hidden..(start + rows) * hidden);
            dh_gemm.launch(&dlogits, &w_view, &mut dh_chunk)?;
            dw_gemm.launch(&dlogits, &h_chunk, &mut dw)?;
        }
        ce.mean_loss(gpu, tokens, &self.loss_scratch, loss)
    }
}

/// `chunk` capped at T, after checking the options and that every size is at least 1.
fn checked_chunk(shape: Shape, chunk: usize, opts: &CeOptions) -> Result<usize> {
    validate_options(opts)?;
    let Shape {
        tokens,
        hidden,
        vocab,
    } = shape;
    if tokens == 0 || hidden == 0 || vocab == 0 || chunk == 0 {
        bail!(
            "fused cross-entropy: T = {tokens}, Hd = {hidden}, V = {vocab}, chunk = {chunk}; all must be >= 1"
        );
    }
    Ok(chunk.min(tokens))
}

/// Rows of the last chunk (all of them when there is one).
fn last_chunk(tokens: usize, chunk: usize) -> usize {
    tokens - (tokens - 1) / chunk * chunk
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_chunk_is_1024_rows_at_the_default_problem() {
        let shape = |tokens, hidden, vocab| Shape {
            tokens,
            hidden,
            vocab,
        };
        assert_eq!(default_chunk(shape(8192, 4096, 128256)), 1024);
        // Small vocabularies: one chunk; tiny problems: all of T.
        assert_eq!(default_chunk(shape(8192, 4096, 1000)), 8192);
        assert_eq!(default_chunk(shape(17, 64, 1000)), 17);
        // A huge vocabulary never goes below 128 rows.
        assert_eq!(default_chunk(shape(8192, 1024, 1 << 20)), 128);
    }
}

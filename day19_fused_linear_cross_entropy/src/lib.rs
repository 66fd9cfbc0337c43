//! Day 19: fused linear + cross-entropy with its backward, in chunks of tokens (Liger Kernel's
//! FusedLinearCrossEntropy, in our own code). The cross-entropy kernels are in
//! `cross_entropy.cu` ([`CrossEntropy`]); the three GEMMs per chunk go through a
//! [`GemmBackend`]: cuBLAS (`chunked_cublas`) or day 18's own tensor-core GEMM
//! ([`Day18Gemm`], `chunked_day18`); the chunked loop is [`FusedPlan::run`].

use anyhow::{Result, bail};
use common::gpu::cublas::{Cublas, GemmEx, Stored};
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::reference::cross_entropy::CeOptions;
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::{
    CudaSlice, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, PushKernelArg, sys::CUdeviceptr,
};
use half::bf16;

/// The default `--tokens`, `--hidden` and `--vocab` (main.rs, and the bench).
pub const DEFAULT_TOKENS: u64 = 8192;
pub const DEFAULT_HIDDEN: u64 = 4096;
pub const DEFAULT_VOCAB: u64 = 128256;

pub const SOURCE: KernelSource = KernelSource {
    file_name: "cross_entropy.cu",
    code: include_str!("cross_entropy.cu"),
};

/// What the day compiles: every kernel (the GEMMs of `chunked_day18` are day 18's), for the GPU's
/// own architecture. The loader compiles the same, the compile test checks this list, and `cargo
/// xtask bundle` compiles it ahead of time for the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(SOURCE, FUNCTIONS.iter().copied())]
}

/// Versions of the fused problem, in table order.
pub const FUSED_VERSIONS: &[&str] = &["naive", "chunked_cublas", "chunked_day18"];
/// Versions of cross-entropy alone on given logits.
pub const CE_VERSIONS: &[&str] = &["two_pass", "cluster8", "cluster_stream", "cluster_push"];

const FUNCTIONS: &[&str] = &[
    "ce_count_valid_i32",
    "ce_rows_two_pass_bf16x8",
    "ce_rows_cluster8_bf16x8",
    "ce_rows_cluster_stream4_bf16x8",
    "ce_rows_cluster_stream8_bf16x8",
    "ce_rows_cluster_push_bf16x8",
    "ce_mean_loss_f32",
];

/// Block sizes and limits as the .cu defines them.
const REDUCE_THREADS: u32 = 1024;
const TWO_PASS_THREADS: u32 = 1024;
const CLUSTER_BLOCKS: usize = 8;
const CLUSTER_THREADS: u32 = 512;
/// 8 blocks x 512 threads x 4 packs x 8 bf16 (cluster_push's 8 x 256 x 8 x 8 is the same).
pub const CLUSTER_MAX_VOCAB: usize = CLUSTER_BLOCKS * CLUSTER_THREADS as usize * 4 * 8;
/// cluster_stream (StreamShape in the .cu): 512 threads a block and, per cluster size, the
/// stages of 16-byte packs in shared memory (3 x 2048 for clusters of 8, 3 x 4096 for 4).
const STREAM_THREADS: u32 = 512;
const STREAM_CLUSTER_SIZES: [(usize, u32); 2] = [(4, 3 * 4096 * 16), (8, 3 * 2048 * 16)];
/// cluster_push (PUSH_* in the .cu): 256 threads a block, each block's slice of a row in
/// shared memory, 8 packs of 16 bytes a thread (32 KiB; V = 128256 fills 31.3 KiB of it).
const PUSH_THREADS: u32 = 256;
const PUSH_SLICE_BYTES: u32 = PUSH_THREADS * 8 * 16;
const _: () = assert!(CLUSTER_BLOCKS * PUSH_THREADS as usize * 8 * 8 == CLUSTER_MAX_VOCAB);

/// Which row kernel computes the loss and writes the gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKernel {
    /// A block per row, two passes over it (the second from L2 when it can).
    TwoPass,
    /// A row over a cluster of 8 blocks, kept in registers: one read, one write.
    Cluster8,
    /// Cluster8's split in 16 persistent clusters, the next rows' slices loading into shared
    /// memory while this one is written.
    ClusterStream,
    /// Cluster8's split, each block's slice brought into shared memory by one bulk copy and
    /// the statistics pushed into every block of the cluster (st.async) instead of read after
    /// cluster barriers: blocks of 256 threads, 6 per SM.
    ClusterPush,
}

impl RowKernel {
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "two_pass" => Ok(Self::TwoPass),
            "cluster8" => Ok(Self::Cluster8),
            "cluster_stream" => Ok(Self::ClusterStream),
            "cluster_push" => Ok(Self::ClusterPush),
            other => bail!("day19 has no cross-entropy version `{other}`"),
        }
    }

    fn function(self) -> &'static str {
        match self {
            Self::TwoPass => "ce_rows_two_pass_bf16x8",
            Self::Cluster8 => "ce_rows_cluster8_bf16x8",
            // Compiled for clusters of 4 and of 8; `CrossEntropy::row_launch` picks one.
            Self::ClusterStream => "ce_rows_cluster_stream8_bf16x8",
            Self::ClusterPush => "ce_rows_cluster_push_bf16x8",
        }
    }

    /// Why this kernel cannot take rows of `vocab`, if it cannot.
    pub fn refusal(self, vocab: usize) -> Option<String> {
        match self {
            Self::TwoPass => None,
            Self::Cluster8 if !vocab.is_multiple_of(8) => Some(format!(
                "cluster8 needs rows on 16-byte boundaries (V a multiple of 8); V = {vocab}"
            )),
            Self::Cluster8 if vocab > CLUSTER_MAX_VOCAB => Some(format!(
                "cluster8 holds rows of at most {CLUSTER_MAX_VOCAB} in its cluster; V = {vocab}"
            )),
            Self::Cluster8 => None,
            Self::ClusterStream => Self::Cluster8
                .refusal(vocab)
                .map(|why| why.replace("cluster8", "cluster_stream")),
            // The same split and limit: 8 blocks x 256 threads x 8 packs x 8 = 131072.
            Self::ClusterPush => Self::Cluster8
                .refusal(vocab)
                .map(|why| why.replace("cluster8", "cluster_push")),
        }
    }

    /// The fastest kernel that takes rows of `vocab`: cluster_push for long rows; a block per
    /// row where a row has fewer 16-byte packs than cluster8 has threads (a byte-level model's
    /// 256 entries would give each of cluster8's 4096 threads nothing to load, behind two
    /// cluster barriers: `torch_layers`' small GPT measured it at 0.9 ms a step for 8192 rows;
    /// that crossover, 32768, was measured for cluster8 and is kept for cluster_push).
    pub fn best_for(vocab: usize) -> Self {
        let packs = vocab / 8;
        if packs >= CLUSTER_BLOCKS * CLUSTER_THREADS as usize
            && Self::Cluster8.refusal(vocab).is_none()
        {
            Self::ClusterPush
        } else {
            Self::TwoPass
        }
    }

    /// The launch of the kernels with one block (or cluster) per row; cluster_stream's grid
    /// depends on what the GPU holds (`CrossEntropy::row_launch`).
    pub fn shape(self, rows: usize) -> Option<LaunchShape> {
        match self {
            Self::TwoPass => Some(LaunchShape::linear(rows as u32, TWO_PASS_THREADS)),
            Self::Cluster8 => Some(LaunchShape::linear(
                (rows * CLUSTER_BLOCKS) as u32,
                CLUSTER_THREADS,
            )),
            Self::ClusterStream => None,
            Self::ClusterPush => Some(LaunchShape {
                grid: ((rows * CLUSTER_BLOCKS) as u32, 1, 1),
                block: (PUSH_THREADS, 1, 1),
                dynamic_shared_bytes: PUSH_SLICE_BYTES,
            }),
        }
    }
}

/// The loss's options as the kernels take them.
fn kernel_options(opts: &CeOptions) -> (f32, f32, i32) {
    (
        opts.label_smoothing as f32,
        opts.z_loss as f32,
        opts.ignore_index,
    )
}

/// Refuses options the math does not define.
pub fn validate_options(opts: &CeOptions) -> Result<()> {
    if !(0.0..=1.0).contains(&opts.label_smoothing) {
        bail!(
            "label smoothing must be in [0, 1], not {}",
            opts.label_smoothing
        );
    }
    if !opts.z_loss.is_finite() || opts.z_loss < 0.0 {
        bail!(
            "the z-loss coefficient must be finite and >= 0, not {}",
            opts.z_loss
        );
    }
    Ok(())
}

/// The cross-entropy kernels, loaded.
pub struct CrossEntropy {
    kernels: KernelSet,
}

/// Per-run scratch of the loss: each row's loss (summed in a fixed order at the end) and 1/N.
pub struct LossScratch {
    pub row_loss: CudaSlice<f32>,
    pub inv_count: CudaSlice<f32>,
}

impl LossScratch {
    pub fn new(gpu: &Gpu, rows: usize) -> Result<Self> {
        // SAFETY: ce_count_valid writes inv_count and the row kernels write every row's loss
        // before ce_mean_loss reads them, in stream order.
        unsafe {
            Ok(Self {
                row_loss: gpu.stream.alloc::<f32>(rows.max(1))?,
                inv_count: gpu.stream.alloc::<f32>(1)?,
            })
        }
    }

    pub fn bytes(&self) -> u64 {
        4 * (self.row_loss.len() + self.inv_count.len()) as u64
    }
}

impl CrossEntropy {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: KernelSet::load(gpu, &SOURCE, FUNCTIONS.iter().map(|s| s.to_string()))?,
        })
    }

    fn row_kernel(&self, which: RowKernel) -> Result<&Kernel> {
        self.kernels.get(which.function())
    }

    /// The kernel and launch shape of `which` for `rows` rows. cluster_stream keeps its
    /// clusters resident: of clusters of 4 and of 8 (a cluster must fit in one GPC), the size
    /// whose resident clusters hold more blocks, and no more clusters than fit at once (those
    /// past it would wait for a whole cluster's rows) or than there are rows.
    pub fn row_launch(
        &self,
        gpu: &Gpu,
        which: RowKernel,
        rows: usize,
    ) -> Result<(&Kernel, LaunchShape)> {
        if let Some(shape) = which.shape(rows) {
            return Ok((self.row_kernel(which)?, shape));
        }
        let mut best: Option<(usize, &Kernel, LaunchShape)> = None;
        for (size, shared) in STREAM_CLUSTER_SIZES {
            let kernel = self
                .kernels
                .get(&format!("ce_rows_cluster_stream{size}_bf16x8"))?;
            let probe = LaunchShape {
                grid: (size as u32, 1, 1),
                block: (STREAM_THREADS, 1, 1),
                dynamic_shared_bytes: shared,
            };
            let resident = kernel.max_active_clusters(&probe, &gpu.stream)? as usize;
            let clusters = resident.min(rows);
            if clusters > 0 && best.as_ref().is_none_or(|(sms, ..)| clusters * size > *sms) {
                let shape = LaunchShape {
                    grid: ((clusters * size) as u32, 1, 1),
                    ..probe
                };
                best = Some((clusters * size, kernel, shape));
            }
        }
        let (_, kernel, shape) = best.ok_or_else(|| {
            anyhow::anyhow!("cluster_stream: this GPU holds no cluster of 4 or 8 such blocks")
        })?;
        Ok((kernel, shape))
    }

    /// Enqueues 1/N for `targets` (0 when all are ignored) into `scratch.inv_count`.
    pub fn count_valid(
        &self,
        gpu: &Gpu,
        targets: &CudaSlice<i32>,
        vocab: usize,
        opts: &CeOptions,
        scratch: &mut LossScratch,
    ) -> Result<()> {
        let kernel = self.kernels.get("ce_count_valid_i32")?;
        let (rows, vocab) = (targets.len() as u64, vocab as u64);
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch
            .arg(targets)
            .arg(&mut scratch.inv_count)
            .arg(&rows)
            .arg(&vocab)
            .arg(&opts.ignore_index);
        // SAFETY: matches ce_count_valid_i32(targets, inv_count, rows, vocab, ignore_index);
        // targets holds `rows` ints, inv_count one float.
        unsafe { launch.launch(kernel.config(&LaunchShape::linear(1, REDUCE_THREADS))?) }?;
        Ok(())
    }

    /// Enqueues the mean of the row losses (after every row kernel) into `loss[0]`.
    pub fn mean_loss(
        &self,
        gpu: &Gpu,
        rows: usize,
        scratch: &LossScratch,
        loss: &mut CudaSlice<f32>,
    ) -> Result<()> {
        if rows > scratch.row_loss.len() || loss.is_empty() {
            bail!("mean_loss: {rows} rows do not fit the scratch, or no loss slot");
        }
        let kernel = self.kernels.get("ce_mean_loss_f32")?;
        let rows = rows as u64;
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch
            .arg(&scratch.row_loss)
            .arg(&scratch.inv_count)
            .arg(loss)
            .arg(&rows);
        // SAFETY: matches ce_mean_loss_f32(row_loss, inv_count, loss, rows); row_loss holds at
        // least `rows` floats (checked), inv_count and loss one each.
        unsafe { launch.launch(kernel.config(&LaunchShape::linear(1, REDUCE_THREADS))?) }?;
        Ok(())
    }

    /// Enqueues the loss rows and the gradient of `rows x vocab` logits, reading `logits` and
    /// writing `grad`, which may be the same memory. `first_row` indexes the targets and row
    /// losses of a chunk.
    ///
    /// # Safety
    /// `logits` and `grad` must each be valid for `rows * vocab` bf16 on the GPU's stream, and
    /// congruent modulo 16 bytes (checked).
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch_rows(
        &self,
        gpu: &Gpu,
        which: RowKernel,
        logits: CUdeviceptr,
        grad: CUdeviceptr,
        targets: &CudaView<i32>,
        row_loss: &mut CudaViewMut<f32>,
        inv_count: &CudaSlice<f32>,
        vocab: usize,
        opts: &CeOptions,
    ) -> Result<()> {
        let rows = targets.len();
        if rows == 0 || vocab == 0 || row_loss.len() < rows {
            bail!(
                "cross-entropy rows: {rows} rows of {vocab} with {} row losses",
                row_loss.len()
            );
        }
        if let Some(why) = which.refusal(vocab) {
            return Err(Refused(why).into());
        }
        if !logits.wrapping_sub(grad).is_multiple_of(16) {
            bail!("cross-entropy rows: logits and gradient are not congruent modulo 16 bytes");
        }
        if which != RowKernel::TwoPass && (!logits.is_multiple_of(16) || !grad.is_multiple_of(16)) {
            bail!("cluster kernels: the logits must start on a 16-byte boundary");
        }
        let (kernel, shape) = self.row_launch(gpu, which, rows)?;
        let (eps, z_loss, ignore) = kernel_options(opts);
        let (vocab, rows) = (vocab as u64, rows as u64);
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch
            .arg(&logits)
            .arg(&grad)
            .arg(targets)
            .arg(row_loss)
            .arg(inv_count)
            .arg(&vocab)
            .arg(&eps)
            .arg(&z_loss)
            .arg(&ignore);
        if which == RowKernel::ClusterStream {
            launch.arg(&rows);
        }
        // SAFETY: matches ce_rows_*(logits, grad, targets, row_loss, inv_count, vocab, eps,
        // z_loss, ignore_index) and, for cluster_stream, the trailing `rows`; the caller
        // vouches for rows * vocab elements behind both pointers, targets and row_loss hold
        // `rows` (checked); the grid covers every row (cluster_stream's loops over them).
        unsafe { launch.launch(kernel.config(&shape)?) }?;
        Ok(())
    }

    /// The row kernel out of place: `logits` read, `grad` written (the CE-only problem, so
    /// that every timed run sees the same logits; the traffic is that of the in-place form).
    #[allow(clippy::too_many_arguments)]
    pub fn rows(
        &self,
        gpu: &Gpu,
        which: RowKernel,
        logits: &CudaView<bf16>,
        grad: &mut CudaViewMut<bf16>,
        targets: &CudaView<i32>,
        row_loss: &mut CudaViewMut<f32>,
        inv_count: &CudaSlice<f32>,
        vocab: usize,
        opts: &CeOptions,
    ) -> Result<()> {
        let need = targets.len() * vocab;
        if logits.len() < need || grad.len() < need {
            bail!(
                "cross-entropy rows: {} logits and {} gradients do not hold {} x {vocab}",
                logits.len(),
                grad.len(),
                targets.len()
            );
        }
        let (src, _src_record) = logits.device_ptr(&gpu.stream);
        let (dst, _dst_record) = grad.device_ptr_mut(&gpu.stream);
        // SAFETY: both views hold rows * vocab elements (checked) on the GPU's stream.
        unsafe {
            self.launch_rows(
                gpu, which, src, dst, targets, row_loss, inv_count, vocab, opts,
            )
        }
    }

    /// The row kernel in place: the gradient overwrites the logits.
    #[allow(clippy::too_many_arguments)]
    pub fn rows_in_place(
        &self,
        gpu: &Gpu,
        which: RowKernel,
        logits: &mut CudaViewMut<bf16>,
        targets: &CudaView<i32>,
        row_loss: &mut CudaViewMut<f32>,
        inv_count: &CudaSlice<f32>,
        vocab: usize,
        opts: &CeOptions,
    ) -> Result<()> {
        if logits.len() < targets.len() * vocab {
            bail!(
                "cross-entropy rows: {} logits do not hold {} x {vocab}",
                logits.len(),
                targets.len()
            );
        }
        let (ptr, _record) = logits.device_ptr_mut(&gpu.stream);
        // SAFETY: the view holds rows * vocab elements (checked); every element is read
        // before it is written, by the thread that writes it (cross_entropy.cu).
        unsafe {
            self.launch_rows(
                gpu, which, ptr, ptr, targets, row_loss, inv_count, vocab, opts,
            )
        }
    }

    /// Cross-entropy alone: 1/N, the rows, the mean. `logits` `[rows, vocab]` is read,
    /// `grad` (same shape) written, `loss[0]` written.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_backward(
        &self,
        gpu: &Gpu,
        which: RowKernel,
        logits: &CudaSlice<bf16>,
        targets: &CudaSlice<i32>,
        vocab: usize,
        opts: &CeOptions,
        scratch: &mut LossScratch,
        grad: &mut CudaSlice<bf16>,
        loss: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let rows = targets.len();
        self.count_valid(gpu, targets, vocab, opts, scratch)?;
        self.rows(
            gpu,
            which,
            &logits.as_view(),
            &mut grad.as_view_mut(),
            &targets.as_view(),
            &mut scratch.row_loss.slice_mut(..rows),
            &scratch.inv_count,
            vocab,
            opts,
        )?;
        self.mean_loss(gpu, rows, scratch, loss)
    }
}

/// A bf16 GEMM with f32 accumulation, [`Cublas::gemm_ex`]'s contract: row-major
/// `C (m x n) = alpha op(A) op(B) + beta C`, one matrix (batch 1), views as operands. The
/// chunked loop asks for nothing else, so another GEMM (day 18's own) plugs in by
/// implementing this.
pub trait GemmBackend {
    /// For the version's name: `cublas`, `day18`.
    fn name(&self) -> &str;
    /// [`Refused`] when the backend cannot take `g`'s sizes, asked before anything is
    /// enqueued. Takes everything unless the backend says otherwise.
    fn check(&self, _g: &GemmEx) -> Result<()> {
        Ok(())
    }
    fn gemm(
        &self,
        g: &GemmEx,
        a: &CudaView<bf16>,
        b: &CudaView<bf16>,
        c: &mut CudaViewMut<bf16>,
    ) -> Result<()>;
}

impl GemmBackend for Cublas {
    fn name(&self) -> &str {
        "cublas"
    }

    fn gemm(
        &self,
        g: &GemmEx,
        a: &CudaView<bf16>,
        b: &CudaView<bf16>,
        c: &mut CudaViewMut<bf16>,
    ) -> Result<()> {
        self.gemm_ex::<bf16, bf16, _, _, _>(g, a, b, c)
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

    fn gemm(
        &self,
        g: &GemmEx,
        a: &CudaView<bf16>,
        b: &CudaView<bf16>,
        c: &mut CudaViewMut<bf16>,
    ) -> Result<()> {
        self.gemm.run::<bf16, _, _, _>(self.gpu, g, a, b, c)
    }
}

/// `C (m x n) = op(A) op(B) (+ C when accumulate)`, one matrix.
fn gemm(m: usize, n: usize, k: usize, a: Stored, b: Stored, accumulate: bool) -> GemmEx {
    GemmEx {
        a,
        b,
        beta: if accumulate { 1.0 } else { 0.0 },
        ..GemmEx::new(m, n, k)
    }
}

/// Sizes of the fused problem (the reference's).
pub use common::reference::cross_entropy::LinearCeShape as Shape;

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

/// One version of the fused problem on one shape: its chunk and its scratch.
pub struct FusedPlan {
    pub shape: Shape,
    pub chunk: usize,
    pub row_kernel: RowKernel,
    /// `chunk x V` bf16: a chunk's logits, then its gradient in place.
    logits: CudaSlice<bf16>,
    loss_scratch: LossScratch,
}

impl FusedPlan {
    /// `chunk` tokens at a time (`chunk >= T` is the naive version: the whole logits at once).
    /// Refuses, before allocating, a logits buffer that does not fit in free device memory.
    pub fn new(gpu: &Gpu, shape: Shape, chunk: usize, opts: &CeOptions) -> Result<Self> {
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
        let chunk = chunk.min(tokens);
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
        let tokens = self.shape.tokens;
        let last = tokens - (tokens - 1) / self.chunk * self.chunk;
        for rows in [self.chunk, last] {
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

    /// One forward + backward: `grads` is dH `[T, Hd]` then dW `[V, Hd]`, `loss[0]` the mean.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &mut self,
        gpu: &Gpu,
        ce: &CrossEntropy,
        backend: &dyn GemmBackend,
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
        if h.len() != tokens * hidden
            || w.len() != vocab * hidden
            || targets.len() != tokens
            || grads.len() != (tokens + vocab) * hidden
            || loss.is_empty()
        {
            bail!(
                "fused cross-entropy: H of {}, W of {}, {} targets and {} gradients do not make \
                 T = {tokens}, Hd = {hidden}, V = {vocab}",
                h.len(),
                w.len(),
                targets.len(),
                grads.len()
            );
        }
        self.check_backend(backend)?;
        ce.count_valid(gpu, targets, vocab, opts, &mut self.loss_scratch)?;
        let (mut dh, mut dw) = grads.split_at_mut(tokens * hidden);
        let w_view = w.as_view();
        for start in (0..tokens).step_by(self.chunk) {
            let rows = self.chunk.min(tokens - start);
            let h_chunk = h.slice(start * hidden..(start + rows) * hidden);
            // The first chunk overwrites dW, so dW needs no zeroing (its poison is never read).
            let [logits_gemm, dh_gemm, dw_gemm] = self.chunk_gemms(rows, start > 0);
            let mut logits = self.logits.slice_mut(..rows * vocab);
            backend.gemm(&logits_gemm, &h_chunk, &w_view, &mut logits)?;
            ce.rows_in_place(
                gpu,
                self.row_kernel,
                &mut logits,
                &targets.slice(start..start + rows),
                &mut self.loss_scratch.row_loss.slice_mut(start..start + rows),
                &self.loss_scratch.inv_count,
                vocab,
                opts,
            )?;
            let dlogits = self.logits.slice(..rows * vocab);
            let mut dh_chunk = dh.slice_mut(start * hidden..(start + rows) * hidden);
            backend.gemm(&dh_gemm, &dlogits, &w_view, &mut dh_chunk)?;
            backend.gemm(&dw_gemm, &dlogits, &h_chunk, &mut dw)?;
        }
        ce.mean_loss(gpu, tokens, &self.loss_scratch, loss)
    }
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

/// Random problem inputs: H uniform in [-1, 1); W uniform in +-6/sqrt(Hd), so that the logits
/// have a standard deviation of about 2 whatever Hd (a peaked but not one-hot softmax);
/// targets uniform in [0, V), a fraction `ignore_fraction` of them the ignore index.
pub fn make_inputs(
    shape: Shape,
    ignore_fraction: f64,
    ignore_index: i32,
    seed: u64,
) -> (Vec<bf16>, Vec<bf16>, Vec<i32>) {
    let w_scale = 6.0 / (shape.hidden as f64).sqrt();
    let h = common::measure::inputs::uniform(shape.tokens * shape.hidden, -1.0, 1.0, seed);
    let w = common::measure::inputs::uniform(
        shape.vocab * shape.hidden,
        -w_scale,
        w_scale,
        seed.wrapping_add(1),
    );
    let targets = make_targets(
        shape.tokens,
        shape.vocab,
        ignore_fraction,
        ignore_index,
        seed,
    );
    (h, w, targets)
}

/// `rows` targets uniform in [0, V), each replaced by `ignore_index` with probability
/// `ignore_fraction`.
pub fn make_targets(
    rows: usize,
    vocab: usize,
    ignore_fraction: f64,
    ignore_index: i32,
    seed: u64,
) -> Vec<i32> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed.wrapping_add(2));
    (0..rows)
        .map(|_| {
            let y = rng.random_range(0..vocab) as i32;
            if rng.random_bool(ignore_fraction.clamp(0.0, 1.0)) {
                ignore_index
            } else {
                y
            }
        })
        .collect()
}

/// Tolerances, from where the 16-bit roundings are.
pub mod tolerance {
    use common::Tolerance;

    // bf16's unit roundoff: half an ulp is up to 2^-8 of the value (8 significant bits), not
    // 2^-9: just above a power of two an ulp is 2^-7 of the value. The first H100 run found
    // it (-0.27248 correctly rounded to -0.27344 is 3.5e-3 off).
    const BF16_HALF_ULP: f64 = 1.0 / 256.0;

    /// dH or dW of the fused problem, against the f64 reference that rounds the logits and
    /// their gradient to bf16 as the kernels store them (`Rounding::Bf16`): the bf16 output
    /// (half an ulp, twice for margin) relative to the element, plus each element's own
    /// allowance, [`gradient_slack`]. The absolute floor, 1e-7, is for exact zeros: with one
    /// vocabulary entry the exact gradient is 0 and the f32 sums leave about 5e-9 (seen on the
    /// H100). The relative L2 bound stays at 1e-2.
    pub fn gradient() -> Tolerance {
        Tolerance::new(1e-7, 2.0 * BF16_HALF_ULP).with_max_rel_l2(1e-2)
    }

    /// Each element's allowance from the sum of its terms' magnitudes `terms`
    /// (`common::reference::cross_entropy`'s `dh_terms` / `dw_terms`): dz stored in bf16 (half
    /// an ulp of each term); a logit that the GEMM's f32 sums, in another order, round to its
    /// other bf16 neighbour (`2^-7 |z|`, which moves p by that relative amount: the terms
    /// count `p |z|` for it, and one such neighbour per term is covered twice); dW accumulated
    /// in bf16 over `chunks` chunks, half an ulp of a partial sum each. All of it relative to
    /// the terms, not to the element: it holds where they cancel to a small gradient.
    pub fn gradient_slack(terms: &[f64], chunks: usize) -> Vec<f64> {
        let factor = (4 + chunks) as f64 * BF16_HALF_ULP;
        terms.iter().map(|m| factor * m).collect()
    }

    /// One version's dH and dW against another's that passed its f64 check (the chunked
    /// versions against the first one on problems too large for a full f64 reference): both
    /// err, so the allowance is an element-wise rtol twice the f64 check's, and an absolute
    /// floor of 2^-6 of the largest gradient for elements whose terms cancel.
    pub fn gradient_against_version(max_abs: f64, chunks: usize) -> Tolerance {
        let rtol = (4 + chunks) as f64 * BF16_HALF_ULP;
        Tolerance::new((max_abs / 64.0).max(1e-7), rtol).with_max_rel_l2(1e-2)
    }

    /// The loss: f32 log-sum-exp per row from bf16 logits, summed in f32; a logit that the
    /// GEMM rounds to the other neighbour moves a row's loss by up to an ulp of it.
    pub const LOSS: Tolerance = Tolerance::new(2e-3, 2e-3);

    /// dlogits of cross-entropy alone, against the exact reference on the same bf16 logits:
    /// the bf16 output (half an ulp), ex2.approx (2 ulp of f32) and the f32 lse, whose error
    /// (an ulp of lse * log2(e), 1e-5 at |lse| = 50, the inputs' outliers) multiplies p. The
    /// target's `(p_y - 1) / N` cancels when p_y is near 1, so an absolute term of that size
    /// over N (`inv_count` = 1/N).
    pub fn dlogits(inv_count: f64) -> Tolerance {
        Tolerance::new(3e-5 * inv_count + 1e-30, 1.5 * BF16_HALF_ULP).with_max_rel_l2(3e-3)
    }

    /// The loss of cross-entropy alone: f32 sums of exact bf16 logits. The L2 bound is looser
    /// than the relative one because a one-row loss can cancel almost to nothing (one
    /// vocabulary entry with label smoothing leaves only the z-loss term), where the absolute
    /// term is what bounds it: 1.4e-4 relative was seen on the H100 for that case.
    pub const CE_LOSS: Tolerance = Tolerance::new(1e-5, 1e-4).with_max_rel_l2(1e-3);
}

/// `m x n x k, A as-is, B transposed` for a refusal's message.
fn describe(g: &GemmEx) -> String {
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

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_compiles_for_sm90_without_spilling() {
        common::testing::assert_builds_compile_without_spills(&kernel_builds());
    }

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

    /// The old gradient check allowed 2^-6 of the largest gradient on every element: a small
    /// gradient ten times too large passed. Its own allowance, from its terms, fails it.
    #[test]
    fn a_wrong_small_gradient_fails_its_element_wise_bound() {
        use common::measure::check;
        let expected = [1e-2, 1e-5];
        let terms = [1.2e-2, 2e-5];
        let got = [bf16::from_f64(1e-2), bf16::from_f64(1e-4)];
        let old = tolerance::gradient_against_version(1e-2, 8).with_max_rel_l2(1.0);
        assert!(check::compare(&got, &expected, &[2], old).passed());
        let slack = tolerance::gradient_slack(&terms, 8);
        let report =
            check::compare_with_slack(&got, &expected, &slack, &[2], tolerance::gradient());
        assert_eq!(report.mismatches, 1, "{report}");
        assert_eq!(report.first[0].index, vec![1]);
        // The right value passes.
        let right = [bf16::from_f64(1e-2), bf16::from_f64(1e-5)];
        let report =
            check::compare_with_slack(&right, &expected, &slack, &[2], tolerance::gradient());
        assert!(report.passed(), "{report}");
    }

    #[test]
    fn the_cluster_kernel_refuses_what_it_cannot_hold() {
        assert!(RowKernel::Cluster8.refusal(128256).is_none());
        assert!(RowKernel::Cluster8.refusal(4099).is_some());
        assert!(RowKernel::Cluster8.refusal(CLUSTER_MAX_VOCAB + 8).is_some());
        assert_eq!(RowKernel::best_for(4099), RowKernel::TwoPass);
        assert!(RowKernel::ClusterPush.refusal(CLUSTER_MAX_VOCAB).is_none());
        assert!(
            RowKernel::ClusterPush
                .refusal(CLUSTER_MAX_VOCAB + 8)
                .is_some()
        );
        assert_eq!(RowKernel::best_for(128256), RowKernel::ClusterPush);
        assert_eq!(RowKernel::best_for(32768), RowKernel::ClusterPush);
        assert_eq!(RowKernel::best_for(32000), RowKernel::TwoPass);
        assert_eq!(RowKernel::best_for(256), RowKernel::TwoPass);
        assert_eq!(RowKernel::Cluster8.shape(3).unwrap().grid, (24, 1, 1));
        let push = RowKernel::ClusterPush.shape(3).unwrap();
        assert_eq!((push.grid, push.dynamic_shared_bytes), ((24, 1, 1), 32768));
    }
}

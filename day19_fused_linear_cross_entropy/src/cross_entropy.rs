//! The launchers of `cross_entropy.cu`: 1/N, the row kernels (loss rows and the gradient, in
//! place or not), the mean loss. Blocks, grids and shared memory come from the layout table
//! ([`crate::tile::LAYOUT`]); a row kernel is planned once for a number of rows
//! ([`CrossEntropy::plan_rows`]: its kernel and launch shape) and launched from the plan.

use anyhow::{Result, anyhow, bail};
use common::gpu::kernel::KernelSet;
use common::gpu::params::{DeviceIn, DeviceOut};
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, sys::CUdeviceptr};
use half::bf16;

use crate::reference::CeOptions;
use crate::row_kernel::RowKernel;
use crate::tile::LAYOUT;

/// The CUDA functions of `cross_entropy.cu`.
pub(crate) const FUNCTIONS: &[&str] = &[
    "ce_count_valid_i32",
    "ce_rows_two_pass_bf16x8",
    "ce_rows_cluster8_bf16x8",
    "ce_rows_cluster_stream4_bf16x8",
    "ce_rows_cluster_stream8_bf16x8",
    "ce_rows_cluster_push_bf16x8",
    "ce_mean_loss_f32",
];

// The declarations are kept on few lines: rustfmt leaves a macro's body as written.
common::kernel_args! {
    /// `ce_count_valid_i32(targets, inv_count, index_t rows, index_t vocab, int ignore_index)`
    fn ce_count_valid_i32(targets: &CudaSlice<i32>, inv_count: &mut CudaSlice<f32>, rows: u64,
        vocab: u64, ignore_index: i32);
    /// `ce_mean_loss_f32(row_loss, inv_count, loss, index_t rows)`
    fn ce_mean_loss_f32(row_loss: &CudaSlice<f32>, inv_count: &CudaSlice<f32>,
        loss: &mut CudaSlice<f32>, rows: u64);
    /// Every row kernel: `ce_rows_*_bf16x8(CeRowParams)`.
    fn ce_rows(params: CeRowParams);
}

common::kernel_params! {
    /// What a row kernel of the loss is told: a chunk's rows of logits, their targets, and
    /// where the gradient, each row's loss and 1/N are.
    pub struct CeRowParams {
        /// The logits [rows, vocab]. The gradient may be the same memory (the fused loss
        /// writes each row's gradient over its logits), so the kernels never take these two
        /// as `__restrict__`.
        pub logits: DeviceIn<bf16>,
        /// The gradient [rows, vocab], congruent to the logits modulo 16 bytes.
        pub grad: DeviceOut<bf16>,
        /// Each row's target class (or the ignore index).
        pub targets: DeviceIn<i32>,
        /// Each row's loss, times 1/N.
        pub row_loss: DeviceOut<f32>,
        /// 1/N, N the rows whose target is not ignored (0 when all are).
        pub inv_count: DeviceIn<f32>,
        pub vocab: u64,
        /// The rows: the persistent kernels (cluster_stream) walk them; the others have one
        /// row per block or cluster of the grid.
        pub rows: u64,
        /// Label smoothing.
        pub eps: f32,
        /// The z-loss weight.
        pub z_loss: f32,
        pub ignore_index: i32,
    }
}

/// The C twin of [`CeRowParams`], as `cross_entropy_params.cuh` holds it.
#[cfg(test)]
pub(crate) fn params_header() -> String {
    use common::gpu::params::{c_checks, c_declaration, c_header};
    c_header(
        &[
            "the kernel_params! declarations in day19_fused_linear_cross_entropy/src/cross_entropy.rs",
        ],
        &[c_declaration::<CeRowParams>(), c_checks::<CeRowParams>()],
    )
}

/// The loss's options as the kernels take them.
fn kernel_options(opts: &CeOptions) -> (f32, f32, i32) {
    (
        opts.label_smoothing as f32,
        opts.z_loss as f32,
        opts.ignore_index,
    )
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

/// A row kernel planned for `rows` rows of `vocab`: checked, its kernel and launch shape
/// chosen once, launched as often as the caller likes.
pub struct RowPlan<'k> {
    pub which: RowKernel,
    pub kernel: &'k Kernel,
    pub shape: LaunchShape,
    pub rows: usize,
    pub vocab: usize,
}

/// Cross-entropy alone, planned once for a problem: the row kernel's plan, the loss's scratch
/// and its options.
pub struct CePlan<'k> {
    pub rows: RowPlan<'k>,
    pub scratch: LossScratch,
    pub opts: CeOptions,
}

/// The one-block launch of the two reductions.
fn reduce_shape() -> LaunchShape {
    LaunchShape::linear(1, LAYOUT.reduce_threads as u32)
}

impl CrossEntropy {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: KernelSet::load_build(gpu, &crate::kernel_build())?,
        })
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
            return Ok((self.kernels.get(which.function())?, shape));
        }
        let mut best: Option<(usize, &Kernel, LaunchShape)> = None;
        for tile in &LAYOUT.stream {
            let size = tile.cluster;
            let kernel = self
                .kernels
                .get(&format!("ce_rows_cluster_stream{size}_bf16x8"))?;
            let probe = LaunchShape {
                grid: (size as u32, 1, 1),
                block: (LAYOUT.stream_threads as u32, 1, 1),
                dynamic_shared_bytes: tile.shared_bytes() as u32,
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
            anyhow!("cluster_stream: this GPU holds no cluster of 4 or 8 such blocks")
        })?;
        Ok((kernel, shape))
    }

    /// `which` on `rows` rows of `vocab`: [`Refused`] when it cannot take them.
    pub fn plan_rows(
        &self,
        gpu: &Gpu,
        which: RowKernel,
        rows: usize,
        vocab: usize,
    ) -> Result<RowPlan<'_>> {
        if rows == 0 || vocab == 0 {
            bail!("cross-entropy rows: {rows} rows of {vocab}");
        }
        if let Some(why) = which.refusal(vocab) {
            return Err(Refused(why).into());
        }
        let (kernel, shape) = self.row_launch(gpu, which, rows)?;
        Ok(RowPlan {
            which,
            kernel,
            shape,
            rows,
            vocab,
        })
    }

    /// `which` on `rows x vocab` logits with `opts`: the scratch allocated, the row kernel
    /// planned ([`Refused`] when it cannot take them).
    pub fn plan(
        &self,
        gpu: &Gpu,
        which: RowKernel,
        (rows, vocab): (usize, usize),
        opts: &CeOptions,
    ) -> Result<CePlan<'_>> {
        let scratch = LossScratch::new(gpu, rows)?;
        Ok(CePlan {
            rows: self.plan_rows(gpu, which, rows, vocab)?,
            scratch,
            opts: *opts,
        })
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
        // SAFETY: targets holds `rows` ints, inv_count one float; one block loops over the rows.
        unsafe {
            ce_count_valid_i32(
                gpu,
                kernel,
                &reduce_shape(),
                targets,
                &mut scratch.inv_count,
                rows,
                vocab,
                opts.ignore_index,
            )
        }
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
        // SAFETY: row_loss holds at least `rows` floats (checked), inv_count and loss one
        // each; one block loops over the rows.
        unsafe {
            ce_mean_loss_f32(
                gpu,
                kernel,
                &reduce_shape(),
                &scratch.row_loss,
                &scratch.inv_count,
                loss,
                rows as u64,
            )
        }
    }

    /// Enqueues the loss rows and the gradient of `plan.rows x plan.vocab` logits, reading
    /// `logits` and writing `grad`, which may be the same memory. `targets` and `row_loss`
    /// are a chunk's.
    ///
    /// # Safety
    /// `logits` and `grad` must each be valid for `rows * vocab` bf16 on the GPU's stream, and
    /// congruent modulo 16 bytes (checked).
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch_rows(
        &self,
        gpu: &Gpu,
        plan: &RowPlan,
        logits: CUdeviceptr,
        grad: CUdeviceptr,
        targets: &CudaView<i32>,
        row_loss: &mut CudaViewMut<f32>,
        inv_count: &CudaSlice<f32>,
        opts: &CeOptions,
    ) -> Result<()> {
        let (rows, vocab) = (plan.rows, plan.vocab);
        if targets.len() != rows || row_loss.len() < rows {
            bail!(
                "cross-entropy rows: {} targets and {} row losses for a plan of {rows} rows of \
                 {vocab}",
                targets.len(),
                row_loss.len()
            );
        }
        if !logits.wrapping_sub(grad).is_multiple_of(16) {
            bail!("cross-entropy rows: logits and gradient are not congruent modulo 16 bytes");
        }
        if plan.which != RowKernel::TwoPass
            && (!logits.is_multiple_of(16) || !grad.is_multiple_of(16))
        {
            bail!("cluster kernels: the logits must start on a 16-byte boundary");
        }
        let (eps, z_loss, ignore_index) = kernel_options(opts);
        let params = CeRowParams {
            logits: DeviceIn::at(logits),
            grad: DeviceOut::at(grad),
            targets: DeviceIn::of(gpu, targets),
            row_loss: DeviceOut::of(gpu, row_loss),
            inv_count: DeviceIn::of(gpu, inv_count),
            vocab: vocab as u64,
            rows: rows as u64,
            eps,
            z_loss,
            ignore_index,
        };
        // SAFETY: the caller vouches for rows * vocab elements behind both pointers; targets
        // and row_loss hold `rows` (checked); the grid covers every row (cluster_stream's
        // clusters loop over them).
        unsafe { ce_rows(gpu, plan.kernel, &plan.shape, params) }
    }

    /// The row kernel out of place: `logits` read, `grad` written (the CE-only problem, so
    /// that every timed run sees the same logits; the traffic is that of the in-place form).
    #[allow(clippy::too_many_arguments)]
    pub fn rows(
        &self,
        gpu: &Gpu,
        plan: &RowPlan,
        logits: &CudaView<bf16>,
        grad: &mut CudaViewMut<bf16>,
        targets: &CudaView<i32>,
        row_loss: &mut CudaViewMut<f32>,
        inv_count: &CudaSlice<f32>,
        opts: &CeOptions,
    ) -> Result<()> {
        let need = plan.rows * plan.vocab;
        if logits.len() < need || grad.len() < need {
            bail!(
                "cross-entropy rows: {} logits and {} gradients do not hold {} x {}",
                logits.len(),
                grad.len(),
                plan.rows,
                plan.vocab
            );
        }
        let (src, _src_record) = logits.device_ptr(&gpu.stream);
        let (dst, _dst_record) = grad.device_ptr_mut(&gpu.stream);
        // SAFETY: both views hold rows * vocab elements (checked) on the GPU's stream.
        unsafe { self.launch_rows(gpu, plan, src, dst, targets, row_loss, inv_count, opts) }
    }

    /// The row kernel in place: the gradient overwrites the logits.
    #[allow(clippy::too_many_arguments)]
    pub fn rows_in_place(
        &self,
        gpu: &Gpu,
        plan: &RowPlan,
        logits: &mut CudaViewMut<bf16>,
        targets: &CudaView<i32>,
        row_loss: &mut CudaViewMut<f32>,
        inv_count: &CudaSlice<f32>,
        opts: &CeOptions,
    ) -> Result<()> {
        if logits.len() < plan.rows * plan.vocab {
            bail!(
                "cross-entropy rows: {} logits do not hold {} x {}",
                logits.len(),
                plan.rows,
                plan.vocab
            );
        }
        let (ptr, _record) = logits.device_ptr_mut(&gpu.stream);
        // SAFETY: the view holds rows * vocab elements (checked); every element is read
        // before it is written, by the thread that writes it (cross_entropy.cu).
        unsafe { self.launch_rows(gpu, plan, ptr, ptr, targets, row_loss, inv_count, opts) }
    }

    /// Cross-entropy alone: 1/N, the rows, the mean. `logits` `[rows, vocab]` is read,
    /// `grad` (same shape) written, `loss[0]` written.
    pub fn forward_backward(
        &self,
        gpu: &Gpu,
        plan: &mut CePlan,
        logits: &CudaSlice<bf16>,
        targets: &CudaSlice<i32>,
        grad: &mut CudaSlice<bf16>,
        loss: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let rows = targets.len();
        let CePlan {
            rows: row_plan,
            scratch,
            opts,
        } = plan;
        self.count_valid(gpu, targets, row_plan.vocab, opts, scratch)?;
        self.rows(
            gpu,
            row_plan,
            &logits.as_view(),
            &mut grad.as_view_mut(),
            &targets.as_view(),
            &mut scratch.row_loss.slice_mut(..rows),
            &scratch.inv_count,
            opts,
        )?;
        self.mean_loss(gpu, rows, scratch, loss)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checked-in `cross_entropy_params.cuh` is what [`CeRowParams`] writes.
    #[test]
    fn the_kernels_parameter_struct_is_the_launchers() {
        common::assert_generated_header!("cross_entropy_params.cuh", &params_header());
    }

    #[test]
    fn the_reductions_are_one_block_of_1024() {
        let reduce = reduce_shape();
        assert_eq!((reduce.grid, reduce.block), ((1, 1, 1), (1024, 1, 1)));
    }
}

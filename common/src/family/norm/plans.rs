//! A normalization day's kernels, loaded, and the plans of the versions both days have: the
//! forward's `naive`, block-per-row and `vec_regs`, and the four backward versions. What
//! differs between RMSNorm and LayerNorm here is data of [`Kind`]: LayerNorm's kernels take the
//! bias after the weight in the forward, save a mean beside each rstd, and write dbias's
//! partial sums after dweight's in the backward.

use super::*;
use std::marker::PhantomData;

use crate::gpu::kernel::KernelSet;
use crate::gpu::kernel_build::KernelBuild;
use crate::gpu::launch::{KernelArg, LaunchArgs};
use cudarc::driver::CudaViewMut;

crate::versions! {
    /// The backward versions, which both days have, in table order.
    pub enum BackwardVersion {
        /// dx by a block per row (saving the statistics), then the parameters' gradients as
        /// two-stage column sums that read x and dy again.
        Split => "bwd_split",
        /// Rows in registers, dx and the block's partial column sums in one kernel, then
        /// `column_sums`.
        VecRegs => "bwd_vec_regs",
        /// The same with the next rows' x and dy staged in shared memory while a row is
        /// worked on.
        VecPipe => "bwd_vec_pipe",
        /// The forward's saved statistics read instead of recomputed, one barrier per row,
        /// the next rows' x and dy on their way while this one is reduced.
        Saved => "bwd_saved",
    }
}

/// The storage types every normalization kernel is compiled for.
const DTYPES: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::Bf16];

/// Every kernel a normalization day loads, named `<op>_...`: per dtype `naive`, the day's
/// `own` kernels (`rmsnorm_block`), the backward's block per row, its partial sums and
/// `column_sums`; then every register tier of the forward, the backward, `bwd_vec_pipe` and
/// `bwd_saved`.
pub fn functions(kind: Kind, own: &[&str]) -> Vec<String> {
    let op = op_name(kind);
    let naive = format!("{op}_naive");
    let dx_block = format!("{op}_bwd_dx_block");
    let mut names = Vec::new();
    for dtype in DTYPES {
        let per_dtype = [naive.as_str()]
            .into_iter()
            .chain(own.iter().copied())
            .chain([dx_block.as_str(), partials_function(kind), "column_sums"]);
        names.extend(per_dtype.map(|name| format!("{name}_{dtype}")));
        for suffix in ["v", "s"] {
            for (group, ept) in forward_tiers(dtype) {
                names.push(regs_function(op, dtype, group, ept, suffix));
            }
            for (group, ept) in backward_tiers(dtype) {
                names.push(bwd_regs_function(op, dtype, group, ept, suffix));
            }
        }
        for (group, ept) in backward_tiers(dtype) {
            names.push(pipe_function(op, dtype, group, ept));
        }
        for (group, ept) in saved_tiers(dtype) {
            names.push(saved_function(op, dtype, group, ept));
        }
    }
    names
}

/// The first stage of `bwd_split`'s column sums.
fn partials_function(kind: Kind) -> &'static str {
    match kind {
        Kind::Rms => "rmsnorm_bwd_dw_partials",
        Kind::Layer => "layernorm_bwd_partials",
    }
}

/// Statistics a row has, f32 each: RMSNorm's rstd; LayerNorm's mean and rstd.
fn stats_per_row(kind: Kind) -> usize {
    match kind {
        Kind::Rms => 1,
        Kind::Layer => 2,
    }
}

/// An argument LayerNorm's kernels take and RMSNorm's do not: the bias after the weight, dbias's
/// partial sums after dweight's. It is pushed only when present, and present exactly for
/// LayerNorm (`NormKernels::bias`, `split_partials`).
struct LayerOnly<A>(Option<A>);

impl<A> LayerOnly<A> {
    fn as_mut(&mut self) -> LayerOnly<&mut A> {
        LayerOnly(self.0.as_mut())
    }
}

impl<A: KernelArg> KernelArg for LayerOnly<A> {
    fn push<'s>(&'s mut self, launch: &mut LaunchArgs<'s>) {
        if let Some(arg) = self.0.as_mut() {
            arg.push(launch);
        }
    }
}

crate::kernel_args! {
    /// `<op>_naive_<T>`, `<op>_regs_<T>_g<G>_e<E>_<v|s>`: `(const T* x, const T* w[, const T*
    /// b], T* y, index_t rows, index_t cols, float eps)`
    fn norm_rows<T>(
        x: &CudaSlice<T>, w: &CudaSlice<T>, b: LayerOnly<&CudaSlice<T>>, y: &mut CudaSlice<T>,
        rows: u64, cols: u64, eps: f32,
    );
    /// `rmsnorm_block_<T>`, `layernorm_welford_block_<T>`: `(const T* x, const T* w[, const T*
    /// b], T* y, index_t cols, float eps)`, a block per row
    fn norm_block<T>(
        x: &CudaSlice<T>, w: &CudaSlice<T>, b: LayerOnly<&CudaSlice<T>>, y: &mut CudaSlice<T>,
        cols: u64, eps: f32,
    );
    /// `<op>_bwd_dx_block_<T>(const T* x, const T* w, const T* dy, T* dx, float* stats,
    /// index_t cols, float eps)`: RMSNorm's stats are `float* rstd`, LayerNorm's `float2*`
    fn bwd_dx_block<T>(
        x: &CudaSlice<T>, w: &CudaSlice<T>, dy: &CudaSlice<T>, dx: &mut CudaViewMut<'_, T>,
        stats: &mut CudaSlice<f32>, cols: u64, eps: f32,
    );
    /// `rmsnorm_bwd_dw_partials_<T>`, `layernorm_bwd_partials_<T>`: `(const T* x, const T* dy,
    /// const float* stats, float* partials_w[, float* partials_b], index_t rows, index_t cols,
    /// index_t chunk_rows)`
    fn bwd_partials<T>(
        x: &CudaSlice<T>, dy: &CudaSlice<T>, stats: &CudaSlice<f32>,
        partials_w: &mut CudaViewMut<'_, f32>, partials_b: LayerOnly<&mut CudaViewMut<'_, f32>>,
        rows: u64, cols: u64, chunk_rows: u64,
    );
    /// `<op>_bwd_{regs,pipe}_<T>_g<G>_e<E>[_<v|s>]`: `(const T* x, const T* w, const T* dy,
    /// T* dx, float* partials_w[, float* partials_b], index_t rows, index_t cols, float eps)`
    fn bwd_rows<T>(
        x: &CudaSlice<T>, w: &CudaSlice<T>, dy: &CudaSlice<T>, dx: &mut CudaViewMut<'_, T>,
        partials_w: &mut CudaViewMut<'_, f32>, partials_b: LayerOnly<&mut CudaViewMut<'_, f32>>,
        rows: u64, cols: u64, eps: f32,
    );
    /// `<op>_bwd_saved_<T>_g<G>_e<E>`: `(const T* x, const T* w, const T* dy, const float*
    /// saved_stats, T* dx, float* partials_w[, float* partials_b], index_t rows, index_t cols)`
    fn bwd_saved<T>(
        x: &CudaSlice<T>, w: &CudaSlice<T>, dy: &CudaSlice<T>, saved: &CudaSlice<f32>,
        dx: &mut CudaViewMut<'_, T>, partials_w: &mut CudaViewMut<'_, f32>,
        partials_b: LayerOnly<&mut CudaViewMut<'_, f32>>, rows: u64, cols: u64,
    );
}

/// What a normalization day compiles: its kernel file for the GPU's own architecture, every
/// kernel of [`functions`].
pub fn kernel_builds<D: NormDay>() -> Vec<KernelBuild> {
    vec![KernelBuild::device(
        D::SOURCE,
        functions(D::KIND, D::OWN_FUNCTIONS),
    )]
}

/// A normalization day's kernels, loaded for one GPU: every version of the day planned, those
/// both days have here, the day's own forward versions by [`NormDay::plan_forward`].
pub struct NormKernels<D> {
    kernels: KernelSet,
    sms: usize,
    day: PhantomData<fn() -> D>,
}

impl<D: NormDay> NormKernels<D> {
    /// Compiles the day's kernel file and loads [`kernel_builds`]' kernels.
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let names = functions(D::KIND, D::OWN_FUNCTIONS);
        Ok(Self {
            kernels: KernelSet::load(gpu, &D::SOURCE, names)?,
            sms: gpu.info.sms as usize,
            day: PhantomData,
        })
    }

    /// How `version`, of either pass, runs on `rows x cols` of `T` with this `eps`, or an
    /// error: [`Refused`] for a shape it does not take (or a name the day does not have),
    /// anything else for a real failure. Planned once per shape, launched many times.
    pub fn plan<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        version: &str,
        rows: usize,
        cols: usize,
        eps: f32,
    ) -> Result<Plan<'a, T>> {
        let on = Rows {
            gpu,
            rows,
            cols,
            eps,
        };
        match BackwardVersion::from_name(version) {
            Some(backward) => self.plan_backward(backward, on),
            None => D::plan_forward(self, version, on),
        }
    }

    /// The kernel `<name>_<T>`: `rmsnorm_block_bf16`.
    pub fn get<T: Element>(&self, name: &str) -> Result<&Kernel> {
        self.kernels.get(&format!("{name}_{}", T::DTYPE))
    }

    /// The bias for LayerNorm's forward kernels, nothing for RMSNorm's.
    fn bias<'i, T>(&self, inputs: &'i Inputs<T>) -> Result<LayerOnly<&'i CudaSlice<T>>> {
        Ok(LayerOnly(match D::KIND {
            Kind::Rms => None,
            Kind::Layer => Some(inputs.bias()?),
        }))
    }

    /// `naive`: one thread per row.
    pub fn plan_naive<'a, T: Element>(&'a self, on: Rows<'a>) -> Result<Plan<'a, T>> {
        let kernel = self.get::<T>(&format!("{}_naive", op_name(D::KIND)))?;
        let rows = on.rows;
        let blocks = u32::try_from(rows.div_ceil(NAIVE_THREADS as usize))
            .map_err(|_| Refused(format!("{rows} rows need too many blocks")))?;
        let shape = LaunchShape::linear(blocks, NAIVE_THREADS);
        self.plan_rows(kernel, shape, on.cols, on)
    }

    /// `vec_regs`: the row in registers, read once and written once; a refusal for rows past
    /// the widest tier names `longer_rows`, the versions that take them.
    pub fn plan_registers<'a, T: Element>(
        &'a self,
        longer_rows: &str,
        on: Rows<'a>,
    ) -> Result<Plan<'a, T>> {
        let (dtype, cols) = (T::DTYPE, on.cols);
        let ((group, ept), shape) = forward_register_plan(dtype, on.rows, cols, longer_rows)?;
        let name = regs_function(
            op_name(D::KIND),
            dtype,
            group,
            ept,
            load_suffix(dtype, cols),
        );
        self.plan_rows(self.kernels.get(&name)?, shape, ept + 10, on)
    }

    /// A forward kernel ([`norm_rows`]) whose threads find their rows from the grid.
    fn plan_rows<'a, T: Element>(
        &'a self,
        kernel: &'a Kernel,
        shape: LaunchShape,
        row_terms: usize,
        on: Rows<'a>,
    ) -> Result<Plan<'a, T>> {
        let (gpu, rows, cols, eps) = (on.gpu, on.rows, on.cols, on.eps);
        Ok(Plan {
            kernel,
            shape,
            row_terms,
            col_terms: 0,
            launch: Box::new(move |inputs: &Inputs<T>, out, params| {
                forward_only(params)?;
                check_sizes(inputs, out.len(), rows, cols, rows * cols)?;
                let bias = self.bias(inputs)?;
                let (x, w, r, c) = (&inputs.x, &inputs.weight, rows as u64, cols as u64);
                // SAFETY: the kernel is `<op>_naive_<T>` or `<op>_regs_..` of this kind (the
                // bias only for LayerNorm), on buffers of the sizes checked above; threads past
                // the last row return, a register tier holds the row (G * E >= cols) and `_v`
                // is chosen only when every row starts on a 16-byte boundary.
                unsafe { norm_rows(gpu, kernel, &shape, x, w, bias, out, r, c, eps) }
            }),
        })
    }

    /// A block per row of [`BLOCK_THREADS`], one kernel `<function>_<T>` ([`norm_block`]):
    /// day 11's `block`, day 12's `welford_block`.
    pub fn plan_block<'a, T: Element>(
        &'a self,
        function: &str,
        on: Rows<'a>,
    ) -> Result<Plan<'a, T>> {
        let (gpu, rows, cols, eps) = (on.gpu, on.rows, on.cols, on.eps);
        let kernel = self.get::<T>(function)?;
        let shape = LaunchShape::linear(block_per_row_grid(rows)?, BLOCK_THREADS);
        Ok(Plan {
            kernel,
            shape,
            row_terms: block_terms(cols, BLOCK_THREADS),
            col_terms: 0,
            launch: Box::new(move |inputs: &Inputs<T>, out, params| {
                forward_only(params)?;
                check_sizes(inputs, out.len(), rows, cols, rows * cols)?;
                let bias = self.bias(inputs)?;
                let (x, w) = (&inputs.x, &inputs.weight);
                // SAFETY: one block per row of the rows x cols buffers checked above, the bias
                // only for LayerNorm's kernel.
                unsafe { norm_block(gpu, kernel, &shape, x, w, bias, out, cols as u64, eps) }
            }),
        })
    }

    /// A backward version.
    fn plan_backward<'a, T: Element>(
        &'a self,
        version: BackwardVersion,
        on: Rows<'a>,
    ) -> Result<Plan<'a, T>> {
        let (op, dtype, sms) = (op_name(D::KIND), T::DTYPE, self.sms);
        let (rows, cols) = (on.rows, on.cols);
        match version {
            BackwardVersion::Split => self.plan_bwd_split(on),
            BackwardVersion::VecRegs | BackwardVersion::VecPipe => {
                let pipe = version == BackwardVersion::VecPipe;
                let (kernel, shape, ept) =
                    fused_backward_launch(&self.kernels, op, pipe, dtype, rows, cols, sms)?;
                let groups = shape.grid.0 as usize;
                self.plan_bwd_rows(kernel, shape, ept, groups, on, true)
            }
            BackwardVersion::Saved => {
                let staged = D::SAVED_STAGED_ROWS;
                let (kernel, shape, ept, groups) =
                    saved_backward_launch(&self.kernels, op, dtype, rows, cols, sms, staged)?;
                self.plan_bwd_rows(kernel, shape, ept, groups, on, false)
            }
        }
    }

    /// `bwd_split`: dx by a block per row (saving the statistics), then the parameters'
    /// gradients as two-stage column sums that read x and dy again.
    fn plan_bwd_split<'a, T: Element>(&'a self, on: Rows<'a>) -> Result<Plan<'a, T>> {
        let (gpu, rows, cols, eps) = (on.gpu, on.rows, on.cols, on.eps);
        let kind = D::KIND;
        let dx_kernel = self.get::<T>(&format!("{}_bwd_dx_block", op_name(kind)))?;
        let partials_kernel = self.get::<T>(partials_function(kind))?;
        let sums = self.get::<T>("column_sums")?;
        let chunks = rows.div_ceil(CHUNK_ROWS);
        if chunks > 65535 {
            return Err(Refused(format!(
                "{rows} rows need more than 65535 chunks of {CHUNK_ROWS}"
            ))
            .into());
        }
        let dx_shape = LaunchShape::linear(block_per_row_grid(rows)?, BLOCK_THREADS);
        let partials_shape = LaunchShape {
            grid: (
                cols.div_ceil(BLOCK_THREADS as usize) as u32,
                chunks as u32,
                1,
            ),
            block: (BLOCK_THREADS, 1, 1),
            dynamic_shared_bytes: 0,
        };
        // Each row's statistics (LayerNorm's (mean, rstd) as a float2).
        let mut stats = gpu.stream.alloc_zeros::<f32>(stats_per_row(kind) * rows)?;
        // dw's partial rows (then db's): one column_sums launch adds them all.
        let arrays = params(kind);
        let mut partials = gpu.stream.alloc_zeros::<f32>(arrays * chunks * cols)?;
        let out_len = backward_len(kind, rows, cols);
        Ok(Plan {
            kernel: dx_kernel,
            shape: dx_shape,
            row_terms: block_terms(cols, BLOCK_THREADS),
            col_terms: column_terms(CHUNK_ROWS.min(rows), chunks),
            launch: Box::new(move |inputs: &Inputs<T>, out, params| {
                let (mut dx, mut grads) = backward_outputs(kind, out, params, rows, cols)?;
                check_sizes(inputs, dx.len() + grads.len(), rows, cols, out_len)?;
                let (x, w, dy) = (&inputs.x, &inputs.weight, inputs.dy()?);
                let (r, c, chunk) = (rows as u64, cols as u64, CHUNK_ROWS as u64);
                // SAFETY: one block per row; dx is rows x cols, stats holds the row's
                // statistics for every row (cudaMalloc aligns it for float2).
                unsafe {
                    bwd_dx_block(
                        gpu, dx_kernel, &dx_shape, x, w, dy, &mut dx, &mut stats, c, eps,
                    )
                }?;
                let (mut pw, mut pb) = split_partials(kind, &mut partials);
                let (kernel, shape, pb) = (partials_kernel, &partials_shape, pb.as_mut());
                // SAFETY: a block per `CHUNK_ROWS` rows and 256 columns; each partials array
                // (the second only for LayerNorm) holds chunks x cols, stats every row's.
                unsafe {
                    bwd_partials(gpu, kernel, shape, x, dy, &stats, &mut pw, pb, r, c, chunk)
                }?;
                launch_column_sums(gpu, sums, &partials, &mut grads, arrays, chunks, cols)
            }),
        })
    }

    /// The plan of a fused backward kernel whose row groups loop over rows, one partial row of
    /// each gradient per row group (`groups` of them), then one `column_sums` launch for all.
    /// `recompute`: the kernel recomputes the statistics with eps (`bwd_vec_regs`,
    /// `bwd_vec_pipe`: eps is its last argument); else it reads the saved statistics after dy
    /// (`bwd_saved`).
    fn plan_bwd_rows<'a, T: Element>(
        &'a self,
        kernel: &'a Kernel,
        shape: LaunchShape,
        ept: usize,
        groups: usize,
        on: Rows<'a>,
        recompute: bool,
    ) -> Result<Plan<'a, T>> {
        let (gpu, rows, cols, eps) = (on.gpu, on.rows, on.cols, on.eps);
        let kind = D::KIND;
        let sums = self.get::<T>("column_sums")?;
        let arrays = params(kind);
        let mut partials = gpu.stream.alloc_zeros::<f32>(arrays * groups * cols)?;
        let out_len = backward_len(kind, rows, cols);
        // Block sums per row: recomputing, one per statistic (LayerNorm's mean, then the rest);
        // from the saved statistics, one.
        let row_sums = if recompute { stats_per_row(kind) } else { 1 };
        Ok(Plan {
            kernel,
            shape,
            row_terms: ept + 10 * row_sums,
            col_terms: column_terms(rows.div_ceil(groups), groups),
            launch: Box::new(move |inputs: &Inputs<T>, out, params| {
                let (mut dx, mut grads) = backward_outputs(kind, out, params, rows, cols)?;
                check_sizes(inputs, dx.len() + grads.len(), rows, cols, out_len)?;
                let (x, w, dy) = (&inputs.x, &inputs.weight, inputs.dy()?);
                let (mut pw, mut pb) = split_partials(kind, &mut partials);
                let (pb, r, c) = (pb.as_mut(), rows as u64, cols as u64);
                // What both launches below rely on: the kernel is this kind's, its tier holds
                // the row, 16-byte loads (`_v`, every pipe and saved kernel) come only for
                // 16-byte aligned rows, a pipe or saved kernel's shared memory is its staged
                // rows (its shape says so), and each partials array (the second only for
                // LayerNorm) has a row per row group.
                if recompute {
                    // SAFETY: a recomputing kernel, which takes eps last (see above).
                    unsafe {
                        bwd_rows(
                            gpu, kernel, &shape, x, w, dy, &mut dx, &mut pw, pb, r, c, eps,
                        )
                    }?;
                } else {
                    let saved = inputs.saved_stats()?;
                    if saved.len() != stats_per_row(kind) * rows {
                        anyhow::bail!(
                            "bwd_saved: {} saved statistics for {rows} rows",
                            saved.len()
                        );
                    }
                    // SAFETY: `bwd_saved`, which takes the saved statistics after dy, one value
                    // of each per row (checked above); the rest as above.
                    unsafe {
                        bwd_saved(
                            gpu, kernel, &shape, x, w, dy, saved, &mut dx, &mut pw, pb, r, c,
                        )
                    }?;
                }
                launch_column_sums(gpu, sums, &partials, &mut grads, arrays, groups, cols)
            }),
        })
    }
}

/// dx and the parameters' gradients of a backward launch: `out` cut after dx's rows x cols, or
/// `out` (dx) and `params` (dweight [| dbias]) where the caller keeps them apart.
fn backward_outputs<'o, T>(
    kind: Kind,
    out: &'o mut CudaSlice<T>,
    param_grads: Option<&'o mut CudaSlice<T>>,
    rows: usize,
    cols: usize,
) -> Result<(CudaViewMut<'o, T>, CudaViewMut<'o, T>)> {
    let n = rows * cols;
    match param_grads {
        None if out.len() >= n => Ok(out.split_at_mut(n)),
        Some(p) if out.len() == n && p.len() == params(kind) * cols => {
            Ok((out.as_view_mut(), p.as_view_mut()))
        }
        _ => anyhow::bail!(
            "normalization: the backward's outputs do not hold dx ({rows} x {cols}) and the \
             parameters' gradients"
        ),
    }
}

/// The partial-sum arrays of a backward launch, one after the other in `partials`: dweight's,
/// and LayerNorm's dbias's.
fn split_partials(
    kind: Kind,
    partials: &mut CudaSlice<f32>,
) -> (CudaViewMut<'_, f32>, LayerOnly<CudaViewMut<'_, f32>>) {
    let (first, rest) = partials.split_at_mut(partials.len() / params(kind));
    (first, LayerOnly((kind == Kind::Layer).then_some(rest)))
}

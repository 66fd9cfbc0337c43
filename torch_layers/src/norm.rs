//! `rms_norm` and `layer_norm`: days 11 and 12, forward and backward, on PyTorch's tensors.
//!
//! The tensors arrive as device pointers the Python layer has checked (device, dtype,
//! contiguity, sizes): x `[rows, cols]` (any leading dimensions flattened into rows), the
//! weight (and LayerNorm's bias) `[cols]`, the output y `[rows, cols]`; the backward reads x,
//! the weight and dy and writes dx `[rows, cols]` and the parameters' gradients `dweight [|
//! dbias]` (`[1 or 2, cols]`), two tensors.
//!
//! Versions: the fastest of each pass in the days' Results tables (`vec_regs` forward,
//! `bwd_vec_pipe` backward), then the next one where a version refuses the width (rows past
//! the register tiers, rows that are not whole 16-byte packs). `bwd_saved` is faster still but
//! reads statistics the forward would have to save; the recomputing backward needs only x.

use anyhow::Result;
use common::error::{Refused, UsageError};
use common::family::norm::{
    Inputs, Kind, NormDay, NormKernels, Pass, Plan, backward_len, load_suffix,
};
use common::{Element, Gpu};
use day11::Day11;
use day12::Day12;
use half::{bf16, f16};
use pyo3::prelude::*;

use crate::borrowed::{Borrowed, Lent, Release, release};
use crate::device::{Device, Loaded, device};
use crate::errors::to_py;

/// The layer's state on one device: days 11 and 12's kernels, loaded on first use. The days'
/// plans hold their own scratch (the column sums' partial rows), made per call on PyTorch's
/// stream and freed there, ordered after the launch that reads it.
#[derive(Default)]
pub struct State {
    rms: Loaded<NormKernels<Day11>>,
    layer: Loaded<NormKernels<Day12>>,
}

/// A normalization day as the layer uses it: where its kernels are kept, and its name for
/// messages.
trait Day: NormDay {
    /// The Python function's name.
    const FN: &'static str;
    fn slot(dev: &Device) -> &Loaded<NormKernels<Self>>;
}

impl Day for Day11 {
    const FN: &'static str = "rms_norm";
    fn slot(dev: &Device) -> &Loaded<NormKernels<Self>> {
        &dev.norm.rms
    }
}

impl Day for Day12 {
    const FN: &'static str = "layer_norm";
    fn slot(dev: &Device) -> &Loaded<NormKernels<Self>> {
        &dev.norm.layer
    }
}

/// One call's problem: where it runs and its sizes.
pub struct Call {
    pub device: usize,
    /// PyTorch's current stream.
    pub stream: u64,
    /// `bfloat16`, `float16` or `float32`.
    pub dtype: String,
    pub rows: usize,
    pub cols: usize,
    pub eps: f64,
}

/// Device pointers of one launch: the bias only for LayerNorm's forward, dy only for a
/// backward; `out` is y (forward) or dx (backward), `params` the backward's `dweight [|
/// dbias]`.
pub struct Pointers {
    pub x: u64,
    pub weight: u64,
    pub bias: Option<u64>,
    pub dy: Option<u64>,
    pub out: u64,
    pub params: Option<u64>,
}

impl Pointers {
    fn all(&self) -> impl Iterator<Item = u64> + '_ {
        [
            Some(self.x),
            Some(self.weight),
            self.bias,
            self.dy,
            Some(self.out),
            self.params,
        ]
        .into_iter()
        .flatten()
    }

    /// Whether the register versions may run: at widths of whole 16-byte packs they load and
    /// store x, the weight, dy and the outputs 16 bytes at a time, which a tensor that starts
    /// inside its storage (a view at an odd offset) may not allow. Other widths take their
    /// scalar-load kernels (`_s`), which any element-aligned pointer serves.
    fn serve_register_versions<T: Element>(&self, cols: usize) -> bool {
        load_suffix(T::DTYPE, cols) == "s" || self.all().all(|p| p.is_multiple_of(16))
    }
}

/// The versions tried in order: the days' fastest first, each later one taking what the one
/// before refuses. `register` false (pointers not 16-byte aligned) leaves the versions with
/// scalar loads only.
fn versions(kind: Kind, pass: Pass, register: bool) -> &'static [&'static str] {
    match (pass, kind, register) {
        (Pass::Forward, Kind::Rms, true) => &["vec_regs", "block"],
        (Pass::Forward, Kind::Rms, false) => &["block"],
        (Pass::Forward, Kind::Layer, true) => &["vec_regs", "welford_block"],
        (Pass::Forward, Kind::Layer, false) => &["welford_block"],
        (Pass::Backward, _, true) => &["bwd_vec_pipe", "bwd_vec_regs", "bwd_split"],
        (Pass::Backward, _, false) => &["bwd_split"],
    }
}

/// Checks the sizes and eps before anything touches the GPU; returns eps as the kernels take
/// it. The days' launchers check the buffers again, but their messages are internal errors;
/// these are the caller's.
fn check(fn_name: &str, call: &Call) -> Result<f32, UsageError> {
    let (rows, cols) = (call.rows, call.cols);
    if rows == 0 || cols == 0 {
        return Err(UsageError::new(format!(
            "{fn_name}: {rows} rows of {cols} columns is empty; the kernels take at least one \
             of each"
        )));
    }
    // Every size the launch computes fits: x, dy and the output (y or dx) of rows x cols, and
    // the backward's `dx | dweight [| dbias]` counted whole (`backward_len`), of f32 at most.
    let fits = rows
        .checked_add(2)
        .and_then(|r| r.checked_mul(cols))
        .and_then(|n| n.checked_mul(4))
        .is_some_and(|bytes| bytes <= isize::MAX as usize);
    if !fits {
        return Err(UsageError::new(format!(
            "{fn_name}: {rows} rows of {cols} columns cannot be addressed"
        )));
    }
    let eps32 = call.eps as f32;
    if !(call.eps >= 0.0 && eps32.is_finite()) {
        return Err(UsageError::new(format!(
            "{fn_name}: eps must be a non-negative number an f32 holds, not {}",
            call.eps
        )));
    }
    Ok(eps32)
}

/// Runs one pass of day `D` on the stream; returns the version that ran.
fn run<D: Day>(call: &Call, p: &Pointers, pass: Pass) -> Result<&'static str> {
    let eps = check(D::FN, call)?;
    match call.dtype.as_str() {
        "bfloat16" => run_as::<D, bf16>(call, p, pass, eps),
        "float16" => run_as::<D, f16>(call, p, pass, eps),
        "float32" => run_as::<D, f32>(call, p, pass, eps),
        other => Err(UsageError::new(format!(
            "{} takes bfloat16, float16 or float32 tensors, not {other}",
            D::FN
        ))
        .into()),
    }
}

fn run_as<D: Day, T: Element>(
    call: &Call,
    p: &Pointers,
    pass: Pass,
    eps: f32,
) -> Result<&'static str> {
    let (rows, cols) = (call.rows, call.cols);
    let dev = device(call.device)?;
    // SAFETY: PyTorch's current stream of this device, alive for the call; what the plan
    // allocates on it is freed (stream-ordered) when the plan drops, before this returns.
    let gpu = unsafe { dev.on_stream(call.stream) };
    let day = D::slot(&dev).get(&dev, &gpu, D::load)?;
    let register = p.serve_register_versions::<T>(cols);
    let (version, mut plan) = first_plan::<D, T>(
        &day,
        &gpu,
        versions(D::KIND, pass, register),
        rows,
        cols,
        eps,
    )?;
    // The parameters' gradients: what the backward writes after dx.
    let params_len = backward_len(D::KIND, rows, cols) - rows * cols;
    // SAFETY: the Python layer checked each tensor: on this device, contiguous, of T, x, dy
    // and the output (y or dx) rows x cols, the weight and bias cols, the parameters'
    // gradients `params_len` elements; the outputs are tensors it made for this call, which
    // overlap no input and each other not; it holds them until the work is enqueued, and
    // PyTorch's allocator keeps their memory for the stream's work after that.
    let (inputs, mut out, mut params) = unsafe {
        (
            lend::<T>(&gpu, p, rows * cols, cols),
            Borrowed::<T>::new(&gpu, p.out, rows * cols),
            p.params.map(|g| Borrowed::<T>::new(&gpu, g, params_len)),
        )
    };
    (plan.launch)(&inputs, &mut out, params.as_deref_mut())?;
    Ok(version)
}

/// The plan of the first version in `versions` that takes the problem; the last refusal if
/// none does (a `ValueError` naming the width).
fn first_plan<'a, D: NormDay, T: Element>(
    day: &'a NormKernels<D>,
    gpu: &'a Gpu,
    versions: &[&'static str],
    rows: usize,
    cols: usize,
    eps: f32,
) -> Result<(&'static str, Plan<'a, T>)> {
    let mut refusal = None;
    for &version in versions {
        match day.plan::<T>(gpu, version, rows, cols, eps) {
            Ok(plan) => return Ok((version, plan)),
            Err(e) if e.is::<Refused>() => refusal = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(refusal.unwrap_or_else(|| Refused("no version to run".into()).into()))
}

/// The days' `Inputs` of one call, made of PyTorch's memory.
///
/// # Safety
/// As [`Borrowed::new`] for each pointer of `p` but the output: x (and dy) of `n` elements,
/// the weight (and bias) of `cols`.
unsafe fn lend<T>(gpu: &Gpu, p: &Pointers, n: usize, cols: usize) -> Lent<Inputs<T>> {
    // SAFETY: as the caller promised. Each `Borrowed` releases its slice if a later one
    // panics; from here to the guard nothing can fail.
    let (x, weight, bias, dy) = unsafe {
        (
            Borrowed::<T>::new(gpu, p.x, n),
            Borrowed::<T>::new(gpu, p.weight, cols),
            p.bias.map(|b| Borrowed::<T>::new(gpu, b, cols)),
            p.dy.map(|d| Borrowed::<T>::new(gpu, d, n)),
        )
    };
    Lent::new(Inputs {
        x: x.into_slice(),
        weight: weight.into_slice(),
        bias: bias.map(Borrowed::into_slice),
        dy: dy.map(Borrowed::into_slice),
        saved_stats: None,
    })
}

impl<T> Release for Inputs<T> {
    fn release(self) {
        release(self.x);
        release(self.weight);
        [self.bias, self.dy].into_iter().flatten().for_each(release);
        if let Some(stats) = self.saved_stats {
            release(stats);
        }
    }
}

/// Declares the Python function of one pass of a day: `(device, stream, dtype, rows, cols,
/// eps)`, then its device pointers; the [`Pointers`] they make (`bias` only for LayerNorm's
/// forward, `dy` and `params` only for a backward, `out` y or dx); it returns
/// the version that ran. Python calls each with its own flat positional arguments, so the four
/// keep their signatures and share the rest.
macro_rules! pass_function {
    (
        $(#[$doc:meta])*
        fn $name:ident<$day:ty>($pass:ident, $($ptr:ident),+) => $pointers:expr;
    ) => {
        $(#[$doc])*
        #[pyfunction]
        #[allow(clippy::too_many_arguments)]
        fn $name(
            device: usize,
            stream: u64,
            dtype: String,
            rows: usize,
            cols: usize,
            eps: f64,
            $($ptr: u64),+
        ) -> PyResult<&'static str> {
            let call = Call { device, stream, dtype, rows, cols, eps };
            run::<$day>(&call, &$pointers, Pass::$pass).map_err(to_py)
        }
    };
}

pass_function! {
    /// Day 11's forward: `y = x * rstd * weight`, `rstd = 1 / sqrt(mean(x^2) + eps)` per row of
    /// `cols`; returns the version that ran.
    fn rms_norm_forward<Day11>(Forward, x, weight, y) =>
        Pointers { x, weight, bias: None, dy: None, out: y, params: None };
}

pass_function! {
    /// Day 11's backward: writes dx (`rows x cols`) and dweight (`cols`), recomputing each
    /// row's rstd from x; returns the version that ran.
    fn rms_norm_backward<Day11>(Backward, x, weight, dy, dx, dweight) =>
        Pointers { x, weight, bias: None, dy: Some(dy), out: dx, params: Some(dweight) };
}

pass_function! {
    /// Day 12's forward: `y = (x - mean) * rstd * weight + bias` per row of `cols`, the biased
    /// variance; returns the version that ran.
    fn layer_norm_forward<Day12>(Forward, x, weight, bias, y) =>
        Pointers { x, weight, bias: Some(bias), dy: None, out: y, params: None };
}

pass_function! {
    /// Day 12's backward: writes dx (`rows x cols`) and `dweight | dbias` (`2 x cols`),
    /// recomputing each row's mean and rstd from x (the bias does not enter the gradients);
    /// returns the version that ran.
    fn layer_norm_backward<Day12>(Backward, x, weight, dy, dx, dparams) =>
        Pointers { x, weight, bias: None, dy: Some(dy), out: dx, params: Some(dparams) };
}

/// Adds the layer's functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(rms_norm_forward, m)?)?;
    m.add_function(wrap_pyfunction!(rms_norm_backward, m)?)?;
    m.add_function(wrap_pyfunction!(layer_norm_forward, m)?)?;
    m.add_function(wrap_pyfunction!(layer_norm_backward, m)?)?;
    Ok(())
}

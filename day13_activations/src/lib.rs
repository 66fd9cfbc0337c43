//! Day 13: element-wise activations (GELU tanh and erf, SwiGLU, SiLU, ReLU, leaky ReLU,
//! HardTanh, their gradients) and a fused bias-dropout-add. The launchers for `activations.cu`
//! and `rectifiers.cu`: each op in a scalar and a 16-byte vectorized version, SwiGLU also as
//! torch runs it (two kernels), the GELU and SiLU ops also in a `vec_fast` version (`__expf`,
//! a branch-free normal CDF in place of `erff`, one pack per thread, full occupancy), every
//! storage type.

pub mod problem;
pub mod reference;
pub mod run;

use anyhow::{Result, bail};
use common::dtype::Dtype;
use common::family::ops;
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::session::Refused;
use common::{Element, Gpu, LaunchShape, Tolerance};
use cudarc::driver::CudaSlice;

use crate::reference::{exact_tolerance, tolerance_for};

pub use problem::{DeviceInputs, HostInputs, OpParams};

/// The default `--rows` and `--cols` of every problem (`run.rs`, and the bench).
pub const DEFAULT_ROWS: u64 = 16384;
pub const DEFAULT_COLS: u64 = 4096;

/// `activations.cu` with `rectifiers.cu` appended: NVRTC compiles one program, and the
/// rectifiers are mapped by the first file's templates and macros (`rectifiers.cu` opens with
/// a `#line` directive, so compiler messages still name it and its own lines).
pub const SOURCE: KernelSource =
    common::kernel_source!("activations.cu" = ["activations.cu", "rectifiers.cu"]);

/// What the day compiles: every kernel, for the GPU's own architecture. The loader compiles the
/// same, the compile test checks this list, and `cargo xtask bundle` compiles it ahead of time for
/// the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(SOURCE, all_functions())]
}

common::test_kernel_builds!();

pub const DTYPES: &[Dtype] = &[Dtype::F32, Dtype::F16, Dtype::Bf16];

/// Every version name, in table order (each op runs the ones it has).
pub const VERSIONS: &[&str] = &["unfused", "scalar", "vec", "vec_fast"];

/// Threads per block of the element-wise kernels.
const THREADS: usize = 256;
/// Packs per thread in the `_vec` kernels (`PACKS_PER_THREAD` in the .cu).
const PACKS_PER_THREAD: usize = 2;
/// Packs per thread in the forward rectifiers' `_vec` kernels (`RECTIFIER_UNARY_PACKS`).
const RECTIFIER_UNARY_PACKS: usize = 1;
/// Packs per thread in the `_vec_fast` kernels (`FAST_PACKS_PER_THREAD`).
const FAST_PACKS_PER_THREAD: usize = 1;
/// Rows a bias-dropout-add thread walks at once (`BDA_ROWS`).
const BDA_ROWS: usize = 4;

common::versions! {
    /// The day's operations; the names are `--op`'s, and those of keys and kernels.
    #[derive(clap::ValueEnum)]
    #[value(rename_all = "snake_case")]
    pub enum Op {
        GeluTanh => "gelu_tanh",
        GeluErf => "gelu_erf",
        Swiglu => "swiglu",
        GeluTanhBwd => "gelu_tanh_bwd",
        GeluErfBwd => "gelu_erf_bwd",
        SwigluBwd => "swiglu_bwd",
        BiasDropoutAdd => "bias_dropout_add",
        Relu => "relu",
        ReluBwd => "relu_bwd",
        LeakyRelu => "leaky_relu",
        LeakyReluBwd => "leaky_relu_bwd",
        Hardtanh => "hardtanh",
        HardtanhBwd => "hardtanh_bwd",
        Silu => "silu",
        SiluBwd => "silu_bwd",
    }
}

impl Op {
    /// The input tensors, in kernel-argument order. All have `rows x cols` elements except
    /// the bias (`cols`); the dropout mask (bytes) is not one of them.
    pub fn inputs(self) -> &'static [&'static str] {
        match self {
            Op::GeluTanh | Op::GeluErf | Op::Relu | Op::LeakyRelu | Op::Hardtanh | Op::Silu => {
                &["x"]
            }
            Op::Swiglu => &["g", "x"],
            Op::GeluTanhBwd
            | Op::GeluErfBwd
            | Op::ReluBwd
            | Op::LeakyReluBwd
            | Op::HardtanhBwd
            | Op::SiluBwd => &["dy", "x"],
            Op::SwigluBwd => &["dout", "g", "x"],
            Op::BiasDropoutAdd => &["x", "bias", "residual"],
        }
    }

    /// Outputs of `rows x cols` each, back to back in one buffer (`dg` then `dx`).
    pub fn outputs(self) -> usize {
        if self == Op::SwigluBwd { 2 } else { 1 }
    }

    pub fn versions(self) -> &'static [&'static str] {
        match self {
            Op::Swiglu => &VERSIONS[..3],
            Op::SwigluBwd | Op::BiasDropoutAdd => &VERSIONS[1..3],
            // A select and at most a multiply per element: nothing for `vec_fast` to take out.
            Op::Relu
            | Op::ReluBwd
            | Op::LeakyRelu
            | Op::LeakyReluBwd
            | Op::Hardtanh
            | Op::HardtanhBwd => &VERSIONS[1..3],
            Op::GeluTanh
            | Op::GeluErf
            | Op::GeluTanhBwd
            | Op::GeluErfBwd
            | Op::Silu
            | Op::SiluBwd => &VERSIONS[1..],
        }
    }

    /// The ops with a `vec_fast` kernel: those with an exponential (GELU, SiLU, their
    /// gradients).
    fn has_fast(self) -> bool {
        self.versions().contains(&"vec_fast")
    }

    /// Packs per thread of the op's `vec` kernel: one for the forward rectifiers
    /// (`RECTIFIER_UNARY_PACKS` in rectifiers.cu, which says why), two for the rest
    /// (`PACKS_PER_THREAD`).
    pub fn vec_packs(self) -> usize {
        match self {
            Op::Relu | Op::LeakyRelu | Op::Hardtanh => RECTIFIER_UNARY_PACKS,
            _ => PACKS_PER_THREAD,
        }
    }

    /// The piecewise-linear ops: exact up to the rounding to storage
    /// ([`exact_tolerance`]).
    pub fn is_piecewise_linear(self) -> bool {
        matches!(
            self,
            Op::Relu
                | Op::ReluBwd
                | Op::LeakyRelu
                | Op::LeakyReluBwd
                | Op::Hardtanh
                | Op::HardtanhBwd
        )
    }

    /// What `version`'s output in `T` is checked with: exact up to the rounding to storage for
    /// the piecewise-linear ops; two roundings for the unfused SwiGLU, which stores silu(g) as
    /// T before the multiply; one for the rest.
    pub fn tolerance<T: Element>(self, version: &str) -> Tolerance {
        if self.is_piecewise_linear() {
            exact_tolerance()
        } else if self == Op::Swiglu && version == "unfused" {
            tolerance_for::<T>(2)
        } else {
            tolerance_for::<T>(1)
        }
    }

    /// The storage type of the op's default problem.
    pub fn default_dtype(self) -> Dtype {
        if self == Op::BiasDropoutAdd {
            Dtype::F16
        } else {
            Dtype::Bf16
        }
    }
}

common::kernel_args! {
    /// `<op>[_vec|_vec_fast]_<T>(const T* x, T* y, index_t n)`: one input (`silu` is also the
    /// unfused SwiGLU's first kernel).
    fn unary<T>(x: &CudaSlice<T>, y: &mut CudaSlice<T>, n: u64);
    /// The same with one scalar after n (leaky_relu's slope).
    fn unary_1<T>(x: &CudaSlice<T>, y: &mut CudaSlice<T>, n: u64, s0: f32);
    /// The same with two (hardtanh's bounds).
    fn unary_2<T>(x: &CudaSlice<T>, y: &mut CudaSlice<T>, n: u64, s0: f32, s1: f32);
    /// `(const T* a, const T* b, T* y, index_t n)`: two inputs (SwiGLU, the gradients, `mul`).
    fn binary<T>(a: &CudaSlice<T>, b: &CudaSlice<T>, y: &mut CudaSlice<T>, n: u64);
    fn binary_1<T>(a: &CudaSlice<T>, b: &CudaSlice<T>, y: &mut CudaSlice<T>, n: u64, s0: f32);
    fn binary_2<T>(
        a: &CudaSlice<T>, b: &CudaSlice<T>, y: &mut CudaSlice<T>, n: u64, s0: f32, s1: f32,
    );
    /// `swiglu_bwd[_vec]_<T>(const T* dout, const T* g, const T* x, T* dgx, index_t n)`
    fn ternary<T>(
        a: &CudaSlice<T>, b: &CudaSlice<T>, c: &CudaSlice<T>, y: &mut CudaSlice<T>, n: u64,
    );
    /// `bias_dropout_add[_vec]_<T>(const T* x, const T* bias, const unsigned char* mask,
    /// const T* residual, T* out, index_t rows, index_t cols, float scale)`
    fn bias_dropout_add<T>(
        x: &CudaSlice<T>, bias: &CudaSlice<T>, mask: &CudaSlice<u8>, residual: &CudaSlice<T>,
        out: &mut CudaSlice<T>, rows: u64, cols: u64, scale: f32,
    );
}

/// Elements in one 16-byte pack.
fn pack(dtype: Dtype) -> usize {
    16 / dtype.size()
}

fn scalar_function(name: &str, dtype: Dtype) -> String {
    format!("{name}_{dtype}")
}

fn vec_function(name: &str, dtype: Dtype) -> String {
    format!("{name}_vec_{dtype}x{}", pack(dtype))
}

fn vec_fast_function(name: &str, dtype: Dtype) -> String {
    format!("{name}_vec_fast_{dtype}x{}", pack(dtype))
}

fn all_functions() -> Vec<String> {
    // `silu` is an op of its own and the first kernel of the unfused SwiGLU; `mul` its second.
    let names = Op::ALL.iter().map(|op| op.name()).chain(["mul"]);
    let mut functions = Vec::new();
    for name in names {
        for &dtype in DTYPES {
            functions.push(scalar_function(name, dtype));
            functions.push(vec_function(name, dtype));
        }
    }
    for op in Op::ALL.into_iter().filter(|op| op.has_fast()) {
        for &dtype in DTYPES {
            functions.push(vec_fast_function(op.name(), dtype));
        }
    }
    functions
}

/// How an element-wise kernel maps threads to elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mapping {
    /// One thread per element.
    Scalar,
    /// `packs` 16-byte packs per thread, plus one slot for the leftovers.
    Packed { packs: usize },
}

/// How one version runs on one problem: the kernel the table describes is the first, where
/// there are two; the launch enqueues one run, writing the op's outputs into the buffer it is
/// given. Its check's tolerance is [`Op::tolerance`].
pub type Plan<'a, T> = ops::Plan<'a, dyn FnMut(&mut CudaSlice<T>) -> Result<()> + 'a>;

pub struct Activations {
    kernels: KernelSet,
}

impl Activations {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: KernelSet::load(gpu, &SOURCE, all_functions())?,
        })
    }

    /// How `version` runs `inputs.op` on `inputs`, or [`Refused`] where the op has no such
    /// version.
    pub fn plan<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        version: &str,
        inputs: &'a DeviceInputs<T>,
    ) -> Result<Plan<'a, T>> {
        let op = inputs.op;
        if !op.versions().contains(&version) {
            return Err(Refused(format!("{} has no version `{version}`", op.name())).into());
        }
        inputs.check()?;
        match (op, version) {
            (Op::BiasDropoutAdd, _) => self.plan_bias_dropout_add(gpu, version == "vec", inputs),
            (Op::Swiglu, "unfused") => self.plan_unfused_swiglu(gpu, inputs),
            (_, v) => {
                let (name, mapping) = match v {
                    "vec" => (
                        vec_function(op.name(), T::DTYPE),
                        Mapping::Packed {
                            packs: op.vec_packs(),
                        },
                    ),
                    "vec_fast" => (
                        vec_fast_function(op.name(), T::DTYPE),
                        Mapping::Packed {
                            packs: FAST_PACKS_PER_THREAD,
                        },
                    ),
                    _ => (scalar_function(op.name(), T::DTYPE), Mapping::Scalar),
                };
                let kernel = self.kernels.get(&name)?;
                let shape = elementwise_shape(mapping, inputs.elements(), T::DTYPE);
                // The `SCALARS` its kernel declares after n (none but the rectifiers').
                let scalars: Vec<f32> = inputs.params.scalars(op).iter().map(|s| s.1).collect();
                Ok(Plan {
                    kernel,
                    shape,
                    launch: Box::new(move |out| {
                        check_output(out, inputs)?;
                        let (k, s, n) = (kernel, &shape, inputs.elements() as u64);
                        // SAFETY: the op's inputs in kernel-argument order, each of n elements
                        // (checked), an output of n * outputs elements (checked) and the
                        // scalars its kernel declares after n; threads past n return.
                        unsafe {
                            match (&inputs.tensors[..], &scalars[..]) {
                                ([x], []) => unary(gpu, k, s, x, out, n),
                                ([x], &[a]) => unary_1(gpu, k, s, x, out, n, a),
                                ([x], &[a, b]) => unary_2(gpu, k, s, x, out, n, a, b),
                                ([x, y], []) => binary(gpu, k, s, x, y, out, n),
                                ([x, y], &[a]) => binary_1(gpu, k, s, x, y, out, n, a),
                                ([x, y], &[a, b]) => binary_2(gpu, k, s, x, y, out, n, a, b),
                                ([x, y, z], []) => ternary(gpu, k, s, x, y, z, out, n),
                                _ => bail!("{}: no kernel takes these arguments", op.name()),
                            }
                        }
                    }),
                })
            }
        }
    }

    /// torch's SwiGLU: `t = silu(g)` stored as T, then `t * x`; both kernels vectorized.
    fn plan_unfused_swiglu<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        inputs: &'a DeviceInputs<T>,
    ) -> Result<Plan<'a, T>> {
        let silu = self.kernels.get(&vec_function("silu", T::DTYPE))?;
        let mul = self.kernels.get(&vec_function("mul", T::DTYPE))?;
        let n = inputs.elements();
        let shape = elementwise_shape(
            Mapping::Packed {
                packs: PACKS_PER_THREAD,
            },
            n,
            T::DTYPE,
        );
        // SAFETY: every element is written by the silu kernel before the mul kernel reads it.
        let mut silu_g = unsafe { gpu.stream.alloc::<T>(n) }?;
        Ok(Plan {
            kernel: silu,
            shape,
            launch: Box::new(move |out| {
                check_output(out, inputs)?;
                let [g, x] = &inputs.tensors[..] else {
                    bail!("swiglu takes g and x");
                };
                let n = n as u64;
                // SAFETY: g and silu_g hold n elements; threads past n return.
                unsafe { unary(gpu, silu, &shape, g, &mut silu_g, n) }?;
                // SAFETY: silu_g, x and out hold n elements; the stream runs this after silu.
                unsafe { binary(gpu, mul, &shape, &silu_g, x, out, n) }
            }),
        })
    }

    /// Bias-dropout-add; `vec` takes 16-byte packs where rows start 16-byte aligned (cols a
    /// multiple of the pack) and the one-column kernel otherwise, which is also `scalar`.
    fn plan_bias_dropout_add<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        vec: bool,
        inputs: &'a DeviceInputs<T>,
    ) -> Result<Plan<'a, T>> {
        let (rows, cols) = (inputs.rows, inputs.cols);
        let packed = vec && cols.is_multiple_of(pack(T::DTYPE));
        let (name, per_thread) = if packed {
            (vec_function("bias_dropout_add", T::DTYPE), pack(T::DTYPE))
        } else {
            (scalar_function("bias_dropout_add", T::DTYPE), 1)
        };
        let kernel = self.kernels.get(&name)?;
        let column_threads = cols.div_ceil(per_thread);
        let threads = column_threads.next_multiple_of(32).clamp(32, THREADS);
        let shape = LaunchShape {
            grid: (
                column_threads.div_ceil(threads).min(i32::MAX as usize) as u32,
                rows.div_ceil(BDA_ROWS).min(65535) as u32,
                1,
            ),
            block: (threads as u32, 1, 1),
            dynamic_shared_bytes: 0,
        };
        Ok(Plan {
            kernel,
            shape,
            launch: Box::new(move |out| {
                check_output(out, inputs)?;
                let [x, bias, residual] = &inputs.tensors[..] else {
                    bail!("bias_dropout_add takes x, bias and residual");
                };
                let Some(mask) = &inputs.mask else {
                    bail!("bias_dropout_add needs its mask");
                };
                let (rows, cols, scale) = (rows as u64, cols as u64, inputs.scale);
                // SAFETY: x, mask, residual and out hold rows * cols elements and bias cols
                // (checked); the packed kernel is chosen only when cols is a multiple of the
                // pack, so every pack is 16-byte aligned and inside one row.
                unsafe {
                    bias_dropout_add(
                        gpu, kernel, &shape, x, bias, mask, residual, out, rows, cols, scale,
                    )
                }
            }),
        })
    }
}

/// Blocks of 256 threads covering n elements: one thread per element, or `packs` packs per
/// thread over the n / pack whole packs plus one slot for the leftovers.
fn elementwise_shape(mapping: Mapping, n: usize, dtype: Dtype) -> LaunchShape {
    let threads_needed = match mapping {
        Mapping::Packed { packs } => (n / pack(dtype) + 1).div_ceil(packs),
        Mapping::Scalar => n,
    };
    // Saturates: an impossible grid is refused by `Kernel::config`.
    let blocks = threads_needed.div_ceil(THREADS).min(u32::MAX as usize) as u32;
    LaunchShape::linear(blocks, THREADS as u32)
}

fn check_output<T: Element>(out: &CudaSlice<T>, inputs: &DeviceInputs<T>) -> Result<()> {
    let want = inputs.elements() * inputs.op.outputs();
    if out.len() != want {
        bail!(
            "{}: the output holds {} elements, {want} are needed",
            inputs.op.name(),
            out.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_say_op_dtype_and_vector_width() {
        assert_eq!(
            vec_function("gelu_tanh", Dtype::Bf16),
            "gelu_tanh_vec_bf16x8"
        );
        assert_eq!(vec_function("swiglu", Dtype::F32), "swiglu_vec_f32x4");
        assert_eq!(scalar_function("swiglu_bwd", Dtype::F16), "swiglu_bwd_f16");
    }

    #[test]
    fn vec_grids_leave_one_slot_for_the_leftovers() {
        // 4096 bf16 = 512 packs + 1 leftover slot = 513 slots, 2 per thread: 257 threads.
        let vec = Mapping::Packed {
            packs: PACKS_PER_THREAD,
        };
        let fast = Mapping::Packed {
            packs: FAST_PACKS_PER_THREAD,
        };
        assert_eq!(elementwise_shape(vec, 4096, Dtype::Bf16).grid.0, 2);
        assert_eq!(elementwise_shape(vec, 1, Dtype::F32).grid.0, 1);
        assert_eq!(
            elementwise_shape(Mapping::Scalar, 257, Dtype::F32).grid.0,
            2
        );
        // One pack per thread: 513 slots need 3 blocks; 255 packs + 1 slot fit in one.
        assert_eq!(elementwise_shape(fast, 4096, Dtype::Bf16).grid.0, 3);
        assert_eq!(elementwise_shape(fast, 2040, Dtype::Bf16).grid.0, 1);
    }

    #[test]
    fn only_the_ops_with_an_exponential_have_a_fast_version() {
        let fast: Vec<Op> = Op::ALL.into_iter().filter(|op| op.has_fast()).collect();
        assert_eq!(
            fast,
            [
                Op::GeluTanh,
                Op::GeluErf,
                Op::GeluTanhBwd,
                Op::GeluErfBwd,
                Op::Silu,
                Op::SiluBwd
            ]
        );
        assert_eq!(
            vec_fast_function("gelu_erf_bwd", Dtype::F16),
            "gelu_erf_bwd_vec_fast_f16x8"
        );
    }

    #[test]
    fn the_rectifiers_are_checked_exactly() {
        let exact: Vec<&str> = Op::ALL
            .into_iter()
            .filter(|op| op.is_piecewise_linear())
            .map(Op::name)
            .collect();
        assert_eq!(
            exact,
            [
                "relu",
                "relu_bwd",
                "leaky_relu",
                "leaky_relu_bwd",
                "hardtanh",
                "hardtanh_bwd"
            ]
        );
        assert_eq!(
            scalar_function("hardtanh_bwd", Dtype::Bf16),
            "hardtanh_bwd_bf16"
        );
    }

    #[test]
    fn only_swiglu_has_an_unfused_version() {
        for op in Op::ALL {
            assert_eq!(op.versions().contains(&"unfused"), op == Op::Swiglu);
            assert!(op.versions().contains(&"vec"));
        }
    }
}

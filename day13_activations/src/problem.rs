//! One problem of the day: an op on `rows x cols` elements of one storage type, with the
//! rectifiers' scalars. Its inputs (random from a seed, never zeros), its f64 reference, its
//! least traffic and its key; the same for `main` and the GPU tests.

use anyhow::{Result, bail};
use common::{Element, Gpu, measure::inputs};
use cudarc::driver::CudaSlice;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{Op, reference};

/// Dropout probability of the bias-dropout-add problems; kept elements are scaled by
/// 1 / (1 - p).
pub const DROPOUT_P: f64 = 0.1;

/// The scalars of the rectifiers, in f32 as their kernels take them. The defaults are
/// torch's: `F.leaky_relu(x, 0.01)`, `F.hardtanh(x, -1.0, 1.0)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpParams {
    pub negative_slope: f32,
    pub min_val: f32,
    pub max_val: f32,
}

impl Default for OpParams {
    fn default() -> Self {
        Self {
            negative_slope: 0.01,
            min_val: -1.0,
            max_val: 1.0,
        }
    }
}

impl OpParams {
    /// Finite scalars and `min_val <= max_val` (torch's `F.hardtanh` refuses min > max).
    pub fn check(&self) -> Result<()> {
        let named = [
            ("negative_slope", self.negative_slope),
            ("min_val", self.min_val),
            ("max_val", self.max_val),
        ];
        if let Some((name, v)) = named.iter().find(|(_, v)| !v.is_finite()) {
            bail!("{name} must be a finite f32, not {v}");
        }
        if self.min_val > self.max_val {
            bail!(
                "min_val {} is greater than max_val {}",
                self.min_val,
                self.max_val
            );
        }
        Ok(())
    }

    /// The scalars `op` takes, by name, in the order its kernel takes them (after `n`).
    pub fn scalars(&self, op: Op) -> Vec<(&'static str, f32)> {
        match op {
            Op::LeakyRelu | Op::LeakyReluBwd => vec![("negative_slope", self.negative_slope)],
            Op::Hardtanh | Op::HardtanhBwd => {
                vec![("min_val", self.min_val), ("max_val", self.max_val)]
            }
            _ => Vec::new(),
        }
    }

    /// The ops that take the scalar `name`.
    pub fn takers(name: &str) -> Vec<Op> {
        let defaults = Self::default();
        Op::ALL
            .into_iter()
            .filter(|&op| defaults.scalars(op).iter().any(|(n, _)| *n == name))
            .collect()
    }

    /// The scalars `op` takes that differ from the defaults, as `name=value` (empty when none
    /// does): they go into the problem's key and title.
    pub fn describe(&self, op: Op) -> Vec<String> {
        self.scalars(op)
            .into_iter()
            .zip(Self::default().scalars(op))
            .filter(|((_, v), (_, default))| v != default)
            .map(|((name, v), _)| format!("{name}={v}"))
            .collect()
    }
}

/// The key peers and reports share: `swiglu_bwd/bf16/16384x4096`. Scalars other than torch's
/// defaults follow (`leaky_relu/bf16/16384x4096/negative_slope=0.2`), so a problem the peers
/// did not time matches none of their figures.
pub fn key(
    op: Op,
    dtype: common::dtype::Dtype,
    rows: usize,
    cols: usize,
    params: &OpParams,
) -> String {
    let mut key = format!("{}/{dtype}/{rows}x{cols}", op.name());
    for scalar in params.describe(op) {
        key.push('/');
        key.push_str(&scalar);
    }
    key
}

/// Least traffic of one run: every input read once, every output written once (the mask is
/// one byte per element, the bias `cols` elements).
pub fn bytes_per_run(op: Op, elem_size: usize, rows: usize, cols: usize) -> u64 {
    let n = (rows * cols) as u64;
    let size = elem_size as u64;
    match op {
        Op::BiasDropoutAdd => n * (3 * size + 1) + cols as u64 * size,
        _ => n * size * (op.inputs().len() + op.outputs()) as u64,
    }
}

/// The inputs on the host, in the op's argument order.
pub struct HostInputs<T> {
    pub op: Op,
    pub rows: usize,
    pub cols: usize,
    pub tensors: Vec<Vec<T>>,
    /// Bias-dropout-add's keep mask: 1 keeps, 0 drops.
    pub mask: Option<Vec<u8>>,
    pub scale: f32,
    /// The rectifiers' scalars (torch's defaults unless [`HostInputs::with_params`] says).
    pub params: OpParams,
}

impl<T: Element> HostInputs<T> {
    /// Activation inputs uniform in [-6, 6] (both tails of GELU and SiLU, where exp
    /// over- and underflows in f32 beyond |x| ~ 44), upstream gradients in [-1, 1];
    /// bias-dropout-add's x and residual in [-2, 2], bias in [-1, 1], 10% dropped.
    pub fn random(op: Op, rows: usize, cols: usize, seed: u64) -> Self {
        let n = rows * cols;
        let tensors = op
            .inputs()
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let seed = seed.wrapping_add(i as u64);
                match *name {
                    "dy" | "dout" => inputs::uniform(n, -1.0, 1.0, seed),
                    "bias" => inputs::uniform(cols, -1.0, 1.0, seed),
                    _ if op == Op::BiasDropoutAdd => inputs::uniform(n, -2.0, 2.0, seed),
                    _ => inputs::uniform(n, -6.0, 6.0, seed),
                }
            })
            .collect();
        let mask = (op == Op::BiasDropoutAdd).then(|| {
            let mut rng = StdRng::seed_from_u64(seed.wrapping_add(100));
            (0..n)
                .map(|_| u8::from(!rng.random_bool(DROPOUT_P)))
                .collect()
        });
        Self {
            op,
            rows,
            cols,
            tensors,
            mask,
            scale: (1.0 / (1.0 - DROPOUT_P)) as f32,
            params: OpParams::default(),
        }
    }

    /// The same inputs with other scalars for the rectifiers.
    pub fn with_params(self, params: OpParams) -> Self {
        Self { params, ..self }
    }

    /// The outputs in f64, back to back (`dg` then `dx` for SwiGLU's backward); the
    /// piecewise-linear ops' rounded as the kernel rounds ([`reference::round_as_stored`]).
    pub fn reference(&self) -> Vec<f64> {
        let values = self.reference_f64();
        if self.op.is_piecewise_linear() {
            values
                .into_iter()
                .map(reference::round_as_stored::<T>)
                .collect()
        } else {
            values
        }
    }

    fn reference_f64(&self) -> Vec<f64> {
        let t: Vec<Vec<f64>> = self
            .tensors
            .iter()
            .map(|v| v.iter().map(|e| e.to_f64()).collect())
            .collect();
        let map1 = |f: fn(f64) -> f64| t[0].iter().map(|&x| f(x)).collect();
        let grad = |f: fn(f64) -> f64| t[0].iter().zip(&t[1]).map(|(dy, &x)| dy * f(x)).collect();
        // Backward passes that choose between dy and 0 (a product would make NaN of 0 * NaN).
        let backward = |f: &dyn Fn(f64, f64) -> f64| {
            t[0].iter().zip(&t[1]).map(|(&dy, &x)| f(dy, x)).collect()
        };
        let p = &self.params;
        let (slope, lo, hi) = (p.negative_slope as f64, p.min_val as f64, p.max_val as f64);
        match self.op {
            Op::GeluTanh => map1(reference::gelu_tanh),
            Op::GeluErf => map1(reference::gelu_erf),
            Op::GeluTanhBwd => grad(reference::gelu_tanh_grad),
            Op::GeluErfBwd => grad(reference::gelu_erf_grad),
            Op::Swiglu => t[0]
                .iter()
                .zip(&t[1])
                .map(|(&g, &x)| reference::swiglu(g, x))
                .collect(),
            Op::SwigluBwd => {
                let (dg, dx): (Vec<f64>, Vec<f64>) = (0..t[0].len())
                    .map(|i| reference::swiglu_grad(t[1][i], t[2][i], t[0][i]))
                    .unzip();
                dg.into_iter().chain(dx).collect()
            }
            Op::Relu => map1(reference::relu),
            Op::ReluBwd => backward(&reference::relu_backward),
            Op::LeakyRelu => t[0]
                .iter()
                .map(|&x| reference::leaky_relu(x, slope))
                .collect(),
            Op::LeakyReluBwd => backward(&|dy, x| reference::leaky_relu_backward(dy, x, slope)),
            Op::Hardtanh => t[0]
                .iter()
                .map(|&x| reference::hardtanh(x, lo, hi))
                .collect(),
            Op::HardtanhBwd => backward(&|dy, x| reference::hardtanh_backward(dy, x, lo, hi)),
            Op::Silu => map1(reference::silu),
            Op::SiluBwd => backward(&reference::silu_backward),
            Op::BiasDropoutAdd => reference::bias_dropout_add(
                &self.tensors[0],
                &self.tensors[1],
                self.mask.as_deref().expect("bias_dropout_add has a mask"),
                &self.tensors[2],
                self.scale,
                self.cols,
            ),
        }
    }

    pub fn upload(&self, gpu: &Gpu) -> Result<DeviceInputs<T>> {
        Ok(DeviceInputs {
            op: self.op,
            rows: self.rows,
            cols: self.cols,
            tensors: self
                .tensors
                .iter()
                .map(|t| gpu.upload(t))
                .collect::<Result<_>>()?,
            mask: self.mask.as_ref().map(|m| gpu.upload(m)).transpose()?,
            scale: self.scale,
            params: self.params,
        })
    }
}

/// The inputs on the GPU, each a whole allocation (16-byte aligned, as the `_vec` kernels
/// need).
pub struct DeviceInputs<T> {
    pub op: Op,
    pub rows: usize,
    pub cols: usize,
    pub tensors: Vec<CudaSlice<T>>,
    pub mask: Option<CudaSlice<u8>>,
    pub scale: f32,
    pub params: OpParams,
}

impl<T: Element> DeviceInputs<T> {
    pub fn elements(&self) -> usize {
        self.rows * self.cols
    }

    /// Every tensor has the length the op expects, and the scalars are usable.
    pub fn check(&self) -> Result<()> {
        let n = self.elements();
        if n == 0 {
            bail!("{}: the problem is empty", self.op.name());
        }
        self.params.check().map_err(|e| e.context(self.op.name()))?;
        let names = self.op.inputs();
        if names.len() != self.tensors.len() {
            bail!("{} takes {} inputs", self.op.name(), names.len());
        }
        for (name, t) in names.iter().zip(&self.tensors) {
            let want = if *name == "bias" { self.cols } else { n };
            if t.len() != want {
                bail!(
                    "{}: `{name}` holds {} elements, {want} expected",
                    self.op.name(),
                    t.len()
                );
            }
        }
        if self.op == Op::BiasDropoutAdd && self.mask.as_ref().map(|m| m.len()) != Some(n) {
            bail!("bias_dropout_add: the mask must hold {n} bytes");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    #[test]
    fn bytes_count_each_input_and_output_once() {
        assert_eq!(
            bytes_per_run(Op::GeluTanh, 2, 16384, 4096),
            4 * 16384 * 4096
        );
        assert_eq!(bytes_per_run(Op::Swiglu, 2, 16384, 4096), 6 * 16384 * 4096);
        assert_eq!(bytes_per_run(Op::SwigluBwd, 2, 10, 10), 10 * 100);
        assert_eq!(bytes_per_run(Op::BiasDropoutAdd, 2, 10, 4), 7 * 40 + 8);
    }

    #[test]
    fn inputs_follow_the_op_and_the_mask_drops_about_p() {
        let h = HostInputs::<bf16>::random(Op::BiasDropoutAdd, 100, 100, 3);
        assert_eq!(h.tensors.len(), 3);
        assert_eq!(h.tensors[1].len(), 100);
        let dropped = h.mask.as_ref().unwrap().iter().filter(|&&m| m == 0).count();
        assert!((700..1300).contains(&dropped), "{dropped} of 10000 dropped");
        let r = h.reference();
        assert_eq!(r.len(), 10_000);
        let b = HostInputs::<f32>::random(Op::SwigluBwd, 3, 5, 1);
        assert_eq!(b.reference().len(), 30);
        assert!(b.tensors.iter().flatten().all(|v| *v != 0.0));
    }

    #[test]
    fn keys_name_op_dtype_shape_and_scalars_other_than_torchs() {
        use common::dtype::Dtype;
        let defaults = OpParams::default();
        assert_eq!(
            key(Op::GeluTanhBwd, Dtype::Bf16, 16384, 4096, &defaults),
            "gelu_tanh_bwd/bf16/16384x4096"
        );
        assert_eq!(
            key(Op::LeakyRelu, Dtype::Bf16, 8, 8, &defaults),
            "leaky_relu/bf16/8x8"
        );
        let other = OpParams {
            negative_slope: 0.2,
            max_val: 6.0,
            ..defaults
        };
        assert_eq!(
            key(Op::LeakyReluBwd, Dtype::F16, 8, 8, &other),
            "leaky_relu_bwd/f16/8x8/negative_slope=0.2"
        );
        assert_eq!(
            key(Op::Hardtanh, Dtype::F32, 8, 8, &other),
            "hardtanh/f32/8x8/max_val=6"
        );
        // Scalars an op does not take do not change its key.
        assert_eq!(key(Op::Relu, Dtype::F32, 8, 8, &other), "relu/f32/8x8");
    }

    #[test]
    fn each_scalar_belongs_to_one_op_and_its_backward() {
        assert_eq!(
            OpParams::takers("negative_slope"),
            [Op::LeakyRelu, Op::LeakyReluBwd]
        );
        assert_eq!(OpParams::takers("max_val"), [Op::Hardtanh, Op::HardtanhBwd]);
        let p = OpParams {
            min_val: -0.5,
            ..OpParams::default()
        };
        assert_eq!(
            p.scalars(Op::HardtanhBwd),
            [("min_val", -0.5), ("max_val", 1.0)]
        );
        assert!(p.scalars(Op::Relu).is_empty() && p.scalars(Op::Silu).is_empty());
    }

    #[test]
    fn scalars_must_be_finite_and_ordered() {
        assert!(OpParams::default().check().is_ok());
        let equal = OpParams {
            min_val: 0.5,
            max_val: 0.5,
            ..OpParams::default()
        };
        assert!(equal.check().is_ok());
        let reversed = OpParams {
            min_val: 2.0,
            ..OpParams::default()
        };
        let err = reversed.check().unwrap_err().to_string();
        assert!(err.contains("min_val 2 is greater than max_val 1"), "{err}");
        let nan = OpParams {
            negative_slope: f32::NAN,
            ..OpParams::default()
        };
        assert!(
            nan.check()
                .unwrap_err()
                .to_string()
                .contains("negative_slope")
        );
    }

    #[test]
    fn rectifier_references_are_rounded_to_storage() {
        // leaky_relu(-3) = -0.03 is not a bf16: the reference is the kernel's bf16.
        let mut h = HostInputs::<bf16>::random(Op::LeakyRelu, 1, 2, 0);
        h.tensors[0] = vec![bf16::from_f32(-3.0), bf16::from_f32(2.0)];
        let r = h.reference();
        assert_eq!(r, [bf16::from_f32(-3.0 * 0.01).to_f64(), 2.0]);
        // SiLU's is not rounded: its tolerance covers the rounding.
        let mut s = HostInputs::<bf16>::random(Op::Silu, 1, 1, 0);
        s.tensors[0] = vec![bf16::from_f32(1.0)];
        assert_eq!(s.reference(), [reference::silu(1.0)]);
    }
}

//! One problem of the day: an op on `rows x cols` elements of one storage type. Its inputs
//! (random from a seed, never zeros), its f64 reference, its least traffic and its key; the
//! same for `main` and the GPU tests.

use anyhow::{Result, bail};
use common::reference::activation as reference;
use common::{Element, Gpu, measure::inputs};
use cudarc::driver::CudaSlice;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::Op;

/// Dropout probability of the bias-dropout-add problems; kept elements are scaled by
/// 1 / (1 - p).
pub const DROPOUT_P: f64 = 0.1;

/// The key peers and reports share: `swiglu_bwd/bf16/16384x4096`.
pub fn key(op: Op, dtype: common::dtype::Dtype, rows: usize, cols: usize) -> String {
    format!("{}/{dtype}/{rows}x{cols}", op.name())
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
        }
    }

    /// The outputs in f64, back to back (`dg` then `dx` for SwiGLU's backward).
    pub fn reference(&self) -> Vec<f64> {
        let t: Vec<Vec<f64>> = self
            .tensors
            .iter()
            .map(|v| v.iter().map(|e| e.to_f64()).collect())
            .collect();
        let map1 = |f: fn(f64) -> f64| t[0].iter().map(|&x| f(x)).collect();
        let grad = |f: fn(f64) -> f64| t[0].iter().zip(&t[1]).map(|(dy, &x)| dy * f(x)).collect();
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
}

impl<T: Element> DeviceInputs<T> {
    pub fn elements(&self) -> usize {
        self.rows * self.cols
    }

    /// Every tensor has the length the op expects.
    pub fn check(&self) -> Result<()> {
        let n = self.elements();
        if n == 0 {
            bail!("{}: the problem is empty", self.op.name());
        }
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
    fn keys_name_op_dtype_and_shape() {
        use common::dtype::Dtype;
        assert_eq!(
            key(Op::GeluTanhBwd, Dtype::Bf16, 16384, 4096),
            "gelu_tanh_bwd/bf16/16384x4096"
        );
    }
}

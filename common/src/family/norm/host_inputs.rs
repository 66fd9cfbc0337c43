//! The random inputs of a normalization problem.

use super::*;

/// The inputs of every run, from a seed: x uniform in [-1, 3) (mean 1, so a LayerNorm that
/// forgets to subtract the mean fails, and RMSNorm's mean square is not the variance), the
/// weight in [0.5, 1.5), the bias in [-0.5, 0.5), dy in [-1, 1). Never zeros.
pub struct HostInputs<T> {
    pub x: Vec<T>,
    pub weight: Vec<T>,
    pub bias: Vec<T>,
    pub dy: Vec<T>,
}

impl<T: Element> HostInputs<T> {
    pub fn new(rows: usize, cols: usize, seed: u64) -> Self {
        let n = rows * cols;
        Self {
            x: inputs::uniform(n, -1.0, 3.0, seed),
            weight: inputs::uniform(cols, 0.5, 1.5, seed ^ 0x5eed_0001),
            bias: inputs::uniform(cols, -0.5, 0.5, seed ^ 0x5eed_0002),
            dy: inputs::uniform(n, -1.0, 1.0, seed ^ 0x5eed_0003),
        }
    }

    /// The device copies a launch of `kind`'s `pass` reads.
    pub fn upload(&self, gpu: &Gpu, kind: Kind, pass: Pass) -> Result<Inputs<T>> {
        Ok(Inputs {
            x: gpu.upload(&self.x)?,
            weight: gpu.upload(&self.weight)?,
            bias: match (kind, pass) {
                (Kind::Layer, Pass::Forward) => Some(gpu.upload(&self.bias)?),
                _ => None,
            },
            dy: match pass {
                Pass::Backward => Some(gpu.upload(&self.dy)?),
                Pass::Forward => None,
            },
        })
    }

    pub fn forward(&self, kind: Kind, rows: usize, cols: usize, eps: f32) -> Forward {
        let eps = eps as f64;
        match kind {
            Kind::Rms => reference::rms_norm(&self.x, &self.weight, rows, cols, eps),
            Kind::Layer => {
                reference::layer_norm(&self.x, &self.weight, &self.bias, rows, cols, eps)
            }
        }
    }

    pub fn backward(&self, kind: Kind, rows: usize, cols: usize, eps: f32) -> Gradients {
        reference::backward(
            kind,
            &self.x,
            &self.weight,
            &self.dy,
            rows,
            cols,
            eps as f64,
        )
    }
}

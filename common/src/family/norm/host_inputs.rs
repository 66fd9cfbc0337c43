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

    /// The device copies a launch of `kind`'s `pass` reads; a backward's include the
    /// statistics the forward saves with `eps` ([`Self::saved_stats`]).
    pub fn upload(&self, gpu: &Gpu, kind: Kind, pass: Pass, eps: f32) -> Result<Inputs<T>> {
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
            saved_stats: match pass {
                Pass::Backward => {
                    let rows = self.x.len() / self.weight.len();
                    Some(gpu.upload(&self.saved_stats(kind, rows, self.weight.len(), eps))?)
                }
                Pass::Forward => None,
            },
        })
    }

    /// What a training forward saves for the backward, f32 per row, computed in f64 from the
    /// stored x: RMSNorm's `rstd` (`rows` values); LayerNorm's `mean`, then its `rstd`
    /// (`2 x rows`), in the layout [`Inputs::saved_stats`] describes.
    pub fn saved_stats(&self, kind: Kind, rows: usize, cols: usize, eps: f32) -> Vec<f32> {
        let eps = eps as f64;
        let row = |r: usize| self.x[r * cols..(r + 1) * cols].iter().map(|v| v.to_f64());
        match kind {
            Kind::Rms => (0..rows)
                .map(|r| {
                    let mean_square = row(r).map(|v| v * v).sum::<f64>() / cols as f64;
                    (1.0 / (mean_square + eps).sqrt()) as f32
                })
                .collect(),
            Kind::Layer => {
                let means: Vec<f64> = (0..rows)
                    .map(|r| row(r).sum::<f64>() / cols as f64)
                    .collect();
                let rstds = (0..rows).map(|r| {
                    let var = row(r).map(|v| (v - means[r]).powi(2)).sum::<f64>() / cols as f64;
                    (1.0 / (var + eps).sqrt()) as f32
                });
                means.iter().map(|&m| m as f32).chain(rstds).collect()
            }
        }
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

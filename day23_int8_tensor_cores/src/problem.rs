//! One INT8 GEMM problem: its sizes ([`Shape`]), its zero points and scales ([`Quant`]), the
//! operands on the GPU ([`DeviceOperands`]), and its CPU references: exact i64 for the int32
//! output (day 15's `int8_matmul_one`, one channel's zero point at a time), f64 for bf16.

use anyhow::Result;
use common::reference::quantize::int8_matmul_one;
use common::{Gpu, Tolerance, UsageError};
use cudarc::driver::CudaSlice;
use rand::{Rng, SeedableRng};

use crate::Out;
use crate::tma::TmaDescriptor;

/// `C (m x n) = A (m x k) B^T`, B stored `[n, k]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

impl Shape {
    pub const fn square(size: usize) -> Self {
        Self {
            m: size,
            n: size,
            k: size,
        }
    }

    /// Refuses what no version takes: an empty size, a size past i32 (the kernels index with
    /// int), k not a multiple of 16 (cp.async and the TMA move rows in 16-byte pieces), and
    /// sizes whose products overflow. The int32 bound on k depends on the zero points:
    /// [`crate::check_k`].
    pub fn validate(&self) -> Result<(), UsageError> {
        use common::sizes::product;
        let Shape { m, n, k } = *self;
        if m == 0 || n == 0 || k == 0 {
            return Err(UsageError::new(format!(
                "int8 gemm: {m} x {n} x {k} has an empty dimension"
            )));
        }
        if [m, n, k].iter().any(|&d| d > i32::MAX as usize) {
            return Err(UsageError::new(format!(
                "int8 gemm: {m} x {n} x {k}: dimensions must be below 2^31"
            )));
        }
        if !k.is_multiple_of(16) {
            return Err(UsageError::new(format!(
                "int8 gemm: k = {k} is not a multiple of 16 (rows of A and B are copied in \
                 16-byte pieces by cp.async and the TMA)"
            )));
        }
        product("int8 gemm: m x k", &[m, k])?;
        product("int8 gemm: n x k", &[n, k])?;
        product("int8 gemm: 4 m n", &[4, m, n])?;
        product("int8 gemm: 2 m n k", &[2, m, n, k])?;
        Ok(())
    }

    /// Multiply-adds x 2.
    pub fn ops(&self) -> u64 {
        2 * self.m as u64 * self.n as u64 * self.k as u64
    }

    /// Least traffic: A and B read once (1 byte each), C written once.
    pub fn bytes(&self, out: Out) -> u64 {
        let c = match out {
            Out::S32 => 4,
            Out::Bf16 => 2,
        };
        (self.m * self.k + self.n * self.k + c * self.m * self.n) as u64
    }

    /// The key reports and peers share: `int8_gemm/s32/4096x4096x4096` without zero points and
    /// with unit per-tensor scales, `int8_gemm_zp/...` with per-tensor zero points,
    /// `int8_gemm_per_channel/...` with a per-channel zb or scale_b.
    pub fn key(&self, out: Out, q: &Quant) -> String {
        format!(
            "int8_gemm{}/{}/{}x{}x{}",
            q.tag(),
            out.name(),
            self.m,
            self.n,
            self.k
        )
    }
}

/// Zero points and scales: `za` and `scale_a` per tensor; `zb` and `scale_b` one value (per
/// tensor) or n values (per output channel).
#[derive(Debug, Clone, PartialEq)]
pub struct Quant {
    pub za: i32,
    pub zb: Vec<i32>,
    pub scale_a: f32,
    pub scale_b: Vec<f32>,
}

impl Quant {
    /// No zero points, unit scales: the plain `A B^T` that cuBLASLt and torch._int_mm compute.
    pub fn none() -> Self {
        Self {
            za: 0,
            zb: vec![0],
            scale_a: 1.0,
            scale_b: vec![1.0],
        }
    }

    /// Per-tensor zero points, unit scales.
    pub fn per_tensor(za: i32, zb: i32) -> Self {
        Self {
            za,
            zb: vec![zb],
            ..Self::none()
        }
    }

    /// `za` per tensor, and per output channel a zero point in [-8, 8] and a scale in
    /// [1e-3, 1e-2), from `seed`: a weight quantized channel by channel.
    pub fn per_channel(za: i32, n: usize, seed: u64) -> Self {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        Self {
            za,
            zb: (0..n).map(|_| rng.random_range(-8..=8)).collect(),
            scale_a: 0.02,
            scale_b: (0..n).map(|_| rng.random_range(1e-3f32..1e-2)).collect(),
        }
    }

    /// Whether any zero point is nonzero (the epilogue then needs row or column sums).
    pub fn has_zero_points(&self) -> bool {
        self.za != 0 || self.zb.iter().any(|&z| z != 0)
    }

    pub fn is_per_channel(&self) -> bool {
        self.zb.len() > 1 || self.scale_b.len() > 1
    }

    fn tag(&self) -> &'static str {
        if self.is_per_channel() {
            "_per_channel"
        } else if self.has_zero_points() {
            "_zp"
        } else {
            ""
        }
    }

    pub fn zb_at(&self, j: usize) -> i32 {
        self.zb[if self.zb.len() == 1 { 0 } else { j }]
    }

    pub fn scale_b_at(&self, j: usize) -> f32 {
        self.scale_b[if self.scale_b.len() == 1 { 0 } else { j }]
    }

    /// Zero points in the int8 range (so `|a - z| <= 255`), one or n of each per-channel value.
    pub fn validate(&self, n: usize) -> Result<(), UsageError> {
        let in_range = |z: i32| (-128..=127).contains(&z);
        if !in_range(self.za) || !self.zb.iter().all(|&z| in_range(z)) {
            return Err(UsageError::new(
                "zero points must be in the int8 range -128..=127",
            ));
        }
        if ![1, n].contains(&self.zb.len()) || ![1, n].contains(&self.scale_b.len()) {
            return Err(UsageError::new(format!(
                "zb and scale_b hold 1 (per tensor) or n = {n} (per channel) values, not {} and {}",
                self.zb.len(),
                self.scale_b.len()
            )));
        }
        Ok(())
    }

    /// For the table's title.
    pub fn describe(&self, out: Out) -> String {
        let zb = if self.zb.len() > 1 {
            "per channel".to_string()
        } else {
            self.zb[0].to_string()
        };
        let zp = if self.has_zero_points() {
            format!("zero points za {}, zb {zb}", self.za)
        } else {
            "no zero points".to_string()
        };
        match out {
            Out::S32 => format!("{zp}, int32 out"),
            Out::Bf16 => format!(
                "{zp}, bf16 out scaled by {} x scale_b ({})",
                self.scale_a,
                if self.scale_b.len() > 1 {
                    "per channel"
                } else {
                    "per tensor"
                }
            ),
        }
    }
}

/// The exact outputs at the flat (row-major m x n) indices `at`: `sum (a - za)(b - zb_j)`.
pub fn reference_s32(a: &[i8], b: &[i8], q: &Quant, s: &Shape, at: &[usize]) -> Vec<i64> {
    at.iter()
        .map(|&flat| {
            let (i, j) = (flat / s.n, flat % s.n);
            int8_matmul_one(a, b, q.za, q.zb_at(j), s.k, i, j)
        })
        .collect()
}

/// The bf16 epilogue's outputs before rounding, in f64: `scale_a scale_b_j` times the exact
/// integer (which f64 holds exactly).
pub fn reference_bf16(a: &[i8], b: &[i8], q: &Quant, s: &Shape, at: &[usize]) -> Vec<f64> {
    scaled(&reference_s32(a, b, q, s, at), q, s, at)
}

/// [`reference_bf16`] from the exact outputs `exact` at `at` (as [`reference_s32`] gives them).
pub fn scaled(exact: &[i64], q: &Quant, s: &Shape, at: &[usize]) -> Vec<f64> {
    exact
        .iter()
        .zip(at)
        .map(|(&v, &flat)| f64::from(q.scale_a) * f64::from(q.scale_b_at(flat % s.n)) * v as f64)
        .collect()
}

/// The bf16 output's tolerance: the kernel converts the exact integer to f32 (relative error
/// at most 2^-24), multiplies twice in f32 (2^-24 each) and rounds once to bf16 (2^-8, its
/// unit roundoff): |y - ref| <= (2^-8 + 3 * 2^-24 + products of those) |ref|. A zero output
/// is exact (the integer is 0), so no absolute term is needed beyond a subnormal's width.
pub fn bf16_tolerance() -> Tolerance {
    Tolerance::new(1e-30, 2f64.powi(-8) * (1.0 + 2f64.powi(-12)))
}

/// The operands of one problem on the GPU, with the buffers the epilogue reads.
pub struct DeviceOperands {
    pub shape: Shape,
    pub a: CudaSlice<i8>,
    pub b: CudaSlice<i8>,
    pub za: i32,
    pub zb: CudaSlice<i32>,
    /// 0: one zb for every channel; 1: one per channel.
    pub zb_step: i32,
    pub scale_a: f32,
    pub scale_b: CudaSlice<f32>,
    pub scale_b_step: i32,
    /// sum_k A[i][k], recomputed by every run; present when some zb is nonzero.
    pub row_sums: Option<CudaSlice<i32>>,
    /// sum_k B[j][k]; present when za is nonzero.
    pub col_sums: Option<CudaSlice<i32>>,
    /// The wgmma version's tensor maps of A and B, encoded at its first run and kept with the
    /// addresses they describe (a replaced buffer gets new maps): one host call fewer per run.
    pub(crate) maps: Option<((u64, u64), (TmaDescriptor, TmaDescriptor))>,
}

impl DeviceOperands {
    /// Uploads `a` (m x k) and `b` (n x k) and the quantization parameters.
    pub fn upload(gpu: &Gpu, shape: Shape, a: &[i8], b: &[i8], q: &Quant) -> Result<Self> {
        shape.validate()?;
        q.validate(shape.n)?;
        anyhow::ensure!(
            a.len() == shape.m * shape.k && b.len() == shape.n * shape.k,
            "int8 gemm: A has {} and B {} elements, {shape:?} needs {} and {}",
            a.len(),
            b.len(),
            shape.m * shape.k,
            shape.n * shape.k
        );
        let step = |len: usize| i32::from(len > 1);
        let row_sums = if q.zb.iter().any(|&z| z != 0) {
            Some(gpu.alloc_poisoned::<i32>(shape.m)?)
        } else {
            None
        };
        let col_sums = if q.za != 0 {
            Some(gpu.alloc_poisoned::<i32>(shape.n)?)
        } else {
            None
        };
        Ok(Self {
            shape,
            a: gpu.upload(a)?,
            b: gpu.upload(b)?,
            za: q.za,
            zb: gpu.upload(&q.zb)?,
            zb_step: step(q.zb.len()),
            scale_a: q.scale_a,
            scale_b: gpu.upload(&q.scale_b)?,
            scale_b_step: step(q.scale_b.len()),
            row_sums,
            col_sums,
            maps: None,
        })
    }

    pub fn has_zero_points(&self) -> bool {
        self.row_sums.is_some() || self.col_sums.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_the_quantization() {
        let s = Shape::square(4096);
        assert_eq!(
            s.key(Out::S32, &Quant::none()),
            "int8_gemm/s32/4096x4096x4096"
        );
        assert_eq!(
            s.key(Out::S32, &Quant::per_tensor(-3, 7)),
            "int8_gemm_zp/s32/4096x4096x4096"
        );
        assert_eq!(
            s.key(Out::Bf16, &Quant::per_channel(-3, 4096, 1)),
            "int8_gemm_per_channel/bf16/4096x4096x4096"
        );
    }

    #[test]
    fn shapes_refuse_what_no_version_takes() {
        assert!(Shape::square(4096).validate().is_ok());
        let err = |m, n, k| Shape { m, n, k }.validate().unwrap_err().to_string();
        assert!(err(0, 3, 16).contains("empty"));
        assert!(err(3, 3, 24).contains("multiple of 16"));
        assert!(err(1 << 31, 1, 16).contains("below 2^31"));
    }

    #[test]
    fn references_agree_with_the_expansion_per_channel() {
        // A = [[1, 2]], B = [[5, 7], [6, 8]] (n = 2, k = 2), za = 1, zb = [2, -1].
        let (a, b) = ([1i8, 2], [5i8, 7, 6, 8]);
        let s = Shape { m: 1, n: 2, k: 2 };
        let q = Quant {
            za: 1,
            zb: vec![2, -1],
            scale_a: 0.5,
            scale_b: vec![2.0, 0.25],
        };
        // (1-1)(5-2) + (2-1)(7-2) = 5; (1-1)(6+1) + (2-1)(8+1) = 9.
        assert_eq!(reference_s32(&a, &b, &q, &s, &[0, 1]), vec![5, 9]);
        assert_eq!(
            reference_bf16(&a, &b, &q, &s, &[0, 1]),
            vec![5.0, 9.0 * 0.125]
        );
        assert!(q.has_zero_points() && q.is_per_channel());
        assert!(q.validate(2).is_ok() && q.validate(3).is_err());
        assert!(Quant::per_tensor(128, 0).validate(1).is_err());
    }
}

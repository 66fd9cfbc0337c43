//! The problems of the CLI, the tests and the bench: [`GemmShape`], `batch` products of one
//! layout, with their sizes checked, their key and their work.

use common::dtype::Dtype;
use common::gpu::cublas::GemmEx;

use crate::Layout;

/// One problem of the CLI and the tests: `batch` products `C (m x n) = op(A) op(B)`, each
/// operand's matrices back to back, alpha = 1, beta = 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
    pub layout: Layout,
}

impl GemmShape {
    pub const fn square(size: usize) -> Self {
        Self {
            m: size,
            n: size,
            k: size,
            batch: 1,
            layout: Layout::NT,
        }
    }

    pub const fn rect(m: usize, n: usize, k: usize) -> Self {
        Self {
            m,
            n,
            k,
            ..Self::square(1)
        }
    }

    /// The default run's problems: the two square sizes peers are usually quoted at, and an
    /// odd one whose k no cp.async/TMA version takes.
    pub const DEFAULTS: [GemmShape; 3] = [
        GemmShape::square(4096),
        GemmShape::square(8192),
        GemmShape::rect(1000, 1001, 999),
    ];

    /// `--sweep`'s square sizes: 1024 to 8192 in steps of 512, so the sizes between powers of
    /// two (where tiles fill the last wave of SMs worst) are measured too.
    pub const SWEEP_SIZES: [usize; 15] = [
        1024, 1536, 2048, 2560, 3072, 3584, 4096, 4608, 5120, 5632, 6144, 6656, 7168, 7680, 8192,
    ];

    /// `--llm`: the linear layers of an 8B-parameter language model (hidden 4096, MLP 14336,
    /// vocabulary 128256) on 8192 tokens: `m` tokens x `n` outputs x `k` inputs.
    pub const LLM: [GemmShape; 4] = [
        GemmShape::rect(8192, 4096, 4096),
        GemmShape::rect(8192, 14336, 4096),
        GemmShape::rect(8192, 4096, 14336),
        GemmShape::rect(8192, 128_256, 4096),
    ];

    /// The FP8 problems of the default run: the two square sizes the bf16 table leads with.
    pub const FP8_DEFAULTS: [GemmShape; 2] = [GemmShape::square(4096), GemmShape::square(8192)];

    pub fn describe(&self, dtype: Dtype) -> String {
        let batch = if self.batch > 1 {
            format!("{} x ", self.batch)
        } else {
            String::new()
        };
        format!(
            "{batch}{} x {} x {} (m x n x k), {}, {}",
            self.m,
            self.n,
            self.k,
            self.layout.describe(),
            dtype.name()
        )
    }

    /// The key peers and reports share: `gemm/bf16/4096x4096x4096` for the linear layer's
    /// layout, `gemm_tn/bf16/...` for another, with a `8x` batch prefix on the sizes when
    /// batched.
    pub fn key(&self, dtype: Dtype) -> String {
        let batch = if self.batch > 1 {
            format!("{}x", self.batch)
        } else {
            String::new()
        };
        let op = if self.layout == Layout::NT {
            "gemm".to_string()
        } else {
            format!("gemm_{}", self.layout.name())
        };
        format!(
            "{op}/{}/{batch}{}x{}x{}",
            dtype.name(),
            self.m,
            self.n,
            self.k
        )
    }

    /// The [`GemmEx`] of this problem: `C = op(A) op(B)`, matrices back to back.
    pub fn gemm_ex(&self) -> GemmEx {
        GemmEx {
            a: self.layout.a,
            b: self.layout.b,
            batch: self.batch,
            ..GemmEx::new(self.m, self.n, self.k)
        }
    }

    /// Every size this shape derives (the operands' lengths, their bytes, the work), each
    /// checked: a product that overflows `usize` is a [`common::UsageError`] here, not a small
    /// number after a wrap in a release build. Call it before using the lengths below.
    pub fn check_sizes(&self, dtype: Dtype) -> Result<(), common::UsageError> {
        use common::sizes::{product, sum};
        let GemmShape { m, n, k, batch, .. } = *self;
        let a = product("A (batch x m x k)", &[batch, m, k])?;
        let b = product("B (batch x k x n)", &[batch, k, n])?;
        let c = product("C (batch x m x n)", &[batch, m, n])?;
        let all = sum("A + B + C", &[a, b, c])?;
        product("the matrices' bytes", &[all, dtype.size()])?;
        product("the work (2 batch m n k)", &[2, batch, m, n, k])?;
        Ok(())
    }

    pub fn a_len(&self) -> usize {
        self.batch * self.m * self.k
    }
    pub fn b_len(&self) -> usize {
        self.batch * self.n * self.k
    }
    pub fn c_len(&self) -> usize {
        self.batch * self.m * self.n
    }

    /// 2 m n k per product.
    pub fn flops(&self) -> u64 {
        2 * (self.batch * self.m * self.n * self.k) as u64
    }

    /// Least traffic: A and B read once, C written once.
    pub fn min_bytes(&self, dtype: Dtype) -> u64 {
        ((self.a_len() + self.b_len() + self.c_len()) * dtype.size()) as u64
    }

    /// Refuses what no version takes: an empty size, a size past i32 (the kernels index with
    /// int), and sizes whose products overflow ([`GemmShape::check_sizes`]).
    pub fn validate(&self, dtype: Dtype) -> Result<(), common::UsageError> {
        let GemmShape { m, n, k, batch, .. } = *self;
        if m == 0 || n == 0 || k == 0 || batch == 0 {
            return Err(common::UsageError::new(
                "m, n, k and --batch must be at least 1",
            ));
        }
        if [m, n, k, batch].iter().any(|&d| d > i32::MAX as usize) {
            return Err(common::UsageError::new("dimensions must be below 2^31"));
        }
        // batch x m x k and the rest: checked, before any of them is used.
        self.check_sizes(dtype)
    }

    /// The stored shapes of A and B, `[rows, columns]` of one product each.
    pub fn stored_shapes(&self) -> ([usize; 2], [usize; 2]) {
        let a = if self.layout.a_mn_major() {
            [self.k, self.m]
        } else {
            [self.m, self.k]
        };
        let b = if self.layout.b_mn_major() {
            [self.k, self.n]
        } else {
            [self.n, self.k]
        };
        (a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_that_overflow_are_usage_errors_not_wraps() {
        let big = GemmShape {
            m: i32::MAX as usize,
            n: i32::MAX as usize,
            k: i32::MAX as usize,
            batch: i32::MAX as usize,
            layout: Layout::NT,
        };
        let err = big.check_sizes(Dtype::Bf16).unwrap_err();
        assert!(err.to_string().contains("too large to address"), "{err}");
        assert!(GemmShape::square(8192).check_sizes(Dtype::Bf16).is_ok());
        let zero = GemmShape { k: 0, ..big };
        assert!(
            zero.validate(Dtype::Bf16)
                .unwrap_err()
                .to_string()
                .contains("at least 1")
        );
        let wide = GemmShape {
            m: 1 << 31,
            ..GemmShape::square(1)
        };
        assert!(
            wide.validate(Dtype::Bf16)
                .unwrap_err()
                .to_string()
                .contains("2^31")
        );
    }

    #[test]
    fn keys_name_the_batch_only_when_batched() {
        let s = GemmShape::square(4096);
        assert_eq!(s.key(Dtype::Bf16), "gemm/bf16/4096x4096x4096");
        let b = GemmShape { batch: 8, ..s };
        assert_eq!(b.key(Dtype::F16), "gemm/f16/8x4096x4096x4096");
        assert_eq!(b.flops(), 8 * 2 * 4096u64.pow(3));
        let tn = GemmShape {
            layout: Layout::ALL[2],
            ..s
        };
        assert_eq!(tn.key(Dtype::Bf16), "gemm_tn/bf16/4096x4096x4096");
        assert_eq!(tn.stored_shapes(), ([4096; 2], [4096; 2]));
        let odd = GemmShape {
            m: 3,
            n: 5,
            k: 7,
            ..tn
        };
        assert_eq!(odd.stored_shapes(), ([7, 3], [7, 5]));
        assert_eq!(
            GemmShape {
                layout: Layout::NT,
                ..odd
            }
            .stored_shapes(),
            ([3, 7], [5, 7])
        );
    }
}

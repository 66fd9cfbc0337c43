//! Launchers for `int8_matmul.cu`: `C = (A - za)(B - zb)` exactly in int32, with A m x k and
//! B given transposed (n x k), both row-major int8.

use anyhow::{Result, bail};
use common::gpu::kernel::KernelSet;
use common::gpu::tile::file_define;
use common::reference::quantize::INT8_MATMUL_MAX_K;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::CudaSlice;

/// The launch numbers, held here once: `int8_matmul.cu` gets them as NVRTC defines
/// ([`defines`]). The block tile of `dp4a_tiled` (BM = BN) and its threads (one per 8 x 8
/// outputs), and the naive kernel's square block.
const TILE: u32 = 128;
const TILED_THREADS: u32 = 256;
const NAIVE_BLOCK: u32 = 16;

/// The `-DINT8_MATMUL_...` options that give `int8_matmul.cu` the numbers above.
pub fn defines() -> Vec<String> {
    [
        ("NAIVE_BLOCK", NAIVE_BLOCK),
        ("TILE", TILE),
        ("TILED_THREADS", TILED_THREADS),
    ]
    .into_iter()
    .map(|(name, value)| file_define("INT8_MATMUL", name, value as usize))
    .collect()
}

common::versions! {
    pub enum Version {
        Naive => "naive",
        Dp4aTiled => "dp4a_tiled",
    }
}

impl Version {
    pub fn function(self) -> &'static str {
        match self {
            Version::Naive => "int8_matmul_naive",
            Version::Dp4aTiled => "int8_matmul_dp4a_tiled",
        }
    }
}

common::kernel_args! {
    /// `int8_matmul_<version>(const signed char* a, const signed char* b_t, int* c, int za,
    /// int zb, int m, int n, int k)`
    fn int8_matmul(
        a: &CudaSlice<i8>,
        b_t: &CudaSlice<i8>,
        c: &mut CudaSlice<i32>,
        za: i32,
        zb: i32,
        m: i32,
        n: i32,
        k: i32,
    );
}

/// The sizes of one INT8 matmul.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

impl Shape {
    /// Refuses what the kernels cannot take: empty sizes, sizes past i32 (the kernels index
    /// rows with int), a grid taller than 65535 blocks, and a k whose worst case overflows
    /// the int32 output.
    pub fn validate(&self) -> Result<(), common::UsageError> {
        let Shape { m, n, k } = *self;
        let err = |msg: String| Err(common::UsageError::new(msg));
        if m == 0 || n == 0 || k == 0 {
            return err(format!(
                "int8_matmul: {m} x {n} x {k} has an empty dimension"
            ));
        }
        if k > INT8_MATMUL_MAX_K {
            return err(format!(
                "int8_matmul: k = {k} can overflow the int32 output ((a - za)(b - zb) reaches \
                 255 * 255); at most {INT8_MATMUL_MAX_K}"
            ));
        }
        if m.div_ceil(NAIVE_BLOCK as usize) > 65535 || n > i32::MAX as usize {
            return err(format!(
                "int8_matmul: m = {m} needs more than 65535 blocks in y (at most {}), or n = {n} \
                 is past i32",
                65535 * NAIVE_BLOCK
            ));
        }
        if common::sizes::product("int8_matmul: 2 m n k", &[2, m, n, k]).is_err() {
            return err(format!(
                "int8_matmul: {m} x {n} x {k} is too large to count its 2 m n k operations"
            ));
        }
        Ok(())
    }

    /// Host bytes of a run of `main`: A and B, C as downloaded for the check, and the
    /// reference (every output below `FULL_REFERENCE_MAX_MACS` multiply-adds, as i64 and f64,
    /// else a few sampled ones). Call after [`Shape::validate`].
    pub fn host_bytes(&self) -> Result<u64, common::UsageError> {
        use common::reference::matmul::FULL_REFERENCE_MAX_MACS;
        use common::sizes::{product, sum};
        let Shape { m, n, k } = *self;
        let what = "int8_matmul: --m --n --k";
        let full = product(what, &[m, n, k])? <= FULL_REFERENCE_MAX_MACS;
        let reference = if full { product(what, &[m, n, 16])? } else { 0 };
        let total = sum(
            what,
            &[
                product(what, &[m, k])?,
                product(what, &[n, k])?,
                product(what, &[m, n, 4])?,
                reference,
            ],
        )?;
        Ok(total as u64)
    }

    /// Multiply-adds x 2, as for float matmuls (one dp4a is 8 operations).
    pub fn ops(&self) -> u64 {
        2 * (self.m * self.n * self.k) as u64
    }

    /// Least traffic: A and B read once (1 byte each), C written once (4 bytes).
    pub fn bytes(&self) -> u64 {
        (self.m * self.k + self.n * self.k + 4 * self.m * self.n) as u64
    }
}

pub struct Int8Matmul {
    kernels: KernelSet,
}

impl Int8Matmul {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: KernelSet::load_build(gpu, &crate::matmul_build())?,
        })
    }

    /// Plans `version` on `s`, refused as [`Shape::validate`] refuses.
    pub fn plan(&self, version: Version, s: Shape) -> Result<Int8MatmulPlan<'_>> {
        s.validate()?;
        let (block, tile) = match version {
            Version::Naive => ((NAIVE_BLOCK, NAIVE_BLOCK, 1), NAIVE_BLOCK),
            Version::Dp4aTiled => ((TILED_THREADS, 1, 1), TILE),
        };
        let shape = LaunchShape {
            grid: (
                s.n.div_ceil(tile as usize) as u32,
                s.m.div_ceil(tile as usize) as u32,
                1,
            ),
            block,
            dynamic_shared_bytes: 0,
        };
        Ok(Int8MatmulPlan {
            kernel: self.kernels.get(version.function())?,
            shape,
            s,
        })
    }
}

/// One version planned for one shape: its kernel and launch shape.
pub struct Int8MatmulPlan<'a> {
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    s: Shape,
}

impl Int8MatmulPlan<'_> {
    /// `c = (a - za)(b - zb)` with `a` m x k, `b_t` n x k, `c` m x n, all row-major.
    pub fn launch(
        &self,
        gpu: &Gpu,
        a: &CudaSlice<i8>,
        b_t: &CudaSlice<i8>,
        c: &mut CudaSlice<i32>,
        za: i32,
        zb: i32,
    ) -> Result<()> {
        let s = self.s;
        if a.len() != s.m * s.k || b_t.len() != s.n * s.k || c.len() != s.m * s.n {
            bail!(
                "int8_matmul {} x {} x {}: A has {}, B^T {}, C {} elements",
                s.m,
                s.n,
                s.k,
                a.len(),
                b_t.len(),
                c.len()
            );
        }
        if !(-128..=127).contains(&za) || !(-128..=127).contains(&zb) {
            bail!(
                "int8_matmul: zero points {za}, {zb} are outside the int8 range (so |a - za| <= 255)"
            );
        }
        let (m, n, k) = (s.m as i32, s.n as i32, s.k as i32);
        // SAFETY: the buffers hold m k, n k and m n elements (checked above), and the grid
        // covers every output.
        unsafe { int8_matmul(gpu, self.kernel, &self.shape, a, b_t, c, za, zb, m, n, k) }
    }
}

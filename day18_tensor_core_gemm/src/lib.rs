//! Day 18: GEMM on tensor cores. [`TensorCoreGemm::gemm`] computes `C = A B^T` (B stored
//! `[n, k]`, a linear layer's weight layout) in bf16 or f16 with f32 accumulation, by one of
//! the versions of `gemm.cu`: `mma.sync` from padded shared memory, the same fed by a cp.async
//! pipeline through swizzled shared memory, and the Hopper path (TMA + wgmma, warp
//! specialized, persistent). cuBLAS (`common::cublas`) is the ceiling and runs the same
//! problem.

use std::sync::Arc;

use anyhow::{Result, bail};
use common::dtype::Dtype;
use common::element::Element;
use common::kernel::KernelSet;
use common::nvrtc::KernelSource;
use common::session::Refused;
use common::tma::KMajorTiles;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::{CudaSlice, CudaStream, PushKernelArg};

pub const SOURCE: KernelSource = KernelSource {
    file_name: "gemm.cu",
    code: include_str!("gemm.cu"),
};

/// The versions, in the order the table shows them (cuBLAS, the ceiling, comes first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    MmaLdmatrix,
    MmaPipelined,
    WgmmaTma,
    WgmmaOverlap,
    WgmmaCluster,
}

impl Version {
    pub const ALL: [Version; 5] = [
        Version::MmaLdmatrix,
        Version::MmaPipelined,
        Version::WgmmaTma,
        Version::WgmmaOverlap,
        Version::WgmmaCluster,
    ];

    /// The name `--kernel` takes, and the kernel's name without its dtype.
    pub fn name(self) -> &'static str {
        match self {
            Version::MmaLdmatrix => "mma_ldmatrix",
            Version::MmaPipelined => "mma_pipelined",
            Version::WgmmaTma => "wgmma_tma",
            Version::WgmmaOverlap => "wgmma_overlap",
            Version::WgmmaCluster => "wgmma_cluster",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }

    /// Needs `sm_90a` (wgmma, TMA, setmaxnreg).
    pub fn is_hopper_only(self) -> bool {
        matches!(
            self,
            Version::WgmmaTma | Version::WgmmaOverlap | Version::WgmmaCluster
        )
    }

    /// CTAs per thread-block cluster (they share B's tile through TMA multicast).
    fn cluster(self) -> usize {
        if self == Version::WgmmaCluster { 2 } else { 1 }
    }
}

/// One problem: `batch` products `C (m x n) = A (m x k) B^T`, B stored `[n, k]`, each operand's
/// matrices back to back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
}

impl GemmShape {
    pub const fn square(size: usize) -> Self {
        Self {
            m: size,
            n: size,
            k: size,
            batch: 1,
        }
    }

    pub fn describe(&self, dtype: Dtype) -> String {
        let batch = if self.batch > 1 {
            format!("{} x ", self.batch)
        } else {
            String::new()
        };
        format!(
            "{batch}{} x {} x {} (m x n x k), C = A B^T, {}",
            self.m,
            self.n,
            self.k,
            dtype.name()
        )
    }

    /// The key peers and reports share: `gemm/bf16/4096x4096x4096`, with a `8x` batch prefix
    /// on the sizes when batched.
    pub fn key(&self, dtype: Dtype) -> String {
        let batch = if self.batch > 1 {
            format!("{}x", self.batch)
        } else {
            String::new()
        };
        format!(
            "gemm/{}/{batch}{}x{}x{}",
            dtype.name(),
            self.m,
            self.n,
            self.k
        )
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
}

/// Every CUDA function of `gemm.cu` that exists when compiled for `hopper` (sm_90a) or not.
pub fn kernel_names(hopper: bool) -> Vec<String> {
    let mut names = Vec::new();
    for dtype in ["bf16", "f16"] {
        for v in Version::ALL {
            if hopper || !v.is_hopper_only() {
                names.push(format!("gemm_{}_{dtype}", v.name()));
            }
        }
    }
    names
}

fn dtype_name<T: Element>() -> Result<&'static str> {
    match T::DTYPE {
        Dtype::Bf16 => Ok("bf16"),
        Dtype::F16 => Ok("f16"),
        other => bail!(common::UsageError::new(format!(
            "the tensor-core GEMM runs on bf16 or f16, not {other}"
        ))),
    }
}

// Tiles and resources of each kernel, as gemm.cu defines them.
const MMA_TILE: usize = 128;
const MMA_THREADS: u32 = 256;
const PIPELINED_SHARED: u32 = 4 * 2 * 128 * 64 * 2;
const WG_BM: usize = 128;
const WG_BN: usize = 256;
const WG_BK: u32 = 64;
const WG_THREADS: u32 = 384;
/// 4 stages of a 128 x 64 and a 256 x 64 tile, the 8 barriers, 1 KiB to align the tiles.
const WG_SHARED: u32 = 4 * (128 + 256) * 64 * 2 + 8 * 8 + 1024;

/// The day's kernels, compiled for one GPU: for `sm_90a` on Hopper, so the wgmma version
/// exists; for the device's own architecture elsewhere, without it.
pub struct TensorCoreGemm {
    kernels: KernelSet,
    hopper: bool,
    sms: u32,
    /// For occupancy queries of the cluster kernels.
    stream: Arc<CudaStream>,
}

/// The operands of one call.
pub struct Operands<'a, T: Element> {
    pub a: &'a CudaSlice<T>,
    pub b: &'a CudaSlice<T>,
}

impl TensorCoreGemm {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let hopper = gpu.info.arch == "sm_90";
        let arch = if hopper {
            "sm_90a".to_string()
        } else {
            gpu.info.arch.clone()
        };
        Ok(Self {
            kernels: KernelSet::load_for_arch(gpu, &SOURCE, &arch, kernel_names(hopper))?,
            hopper,
            sms: gpu.info.sms,
            stream: gpu.stream.clone(),
        })
    }

    /// The kernel a version runs and its launch shape, for the table; [`Refused`] where the
    /// version cannot take the problem.
    pub fn plan<T: Element>(
        &self,
        version: Version,
        shape: &GemmShape,
    ) -> Result<(&Kernel, LaunchShape)> {
        let dtype = dtype_name::<T>()?;
        let GemmShape { m, n, k, batch } = *shape;
        if m == 0 || n == 0 || k == 0 || batch == 0 {
            bail!(common::UsageError::new(
                "m, n, k and the batch must be at least 1"
            ));
        }
        if m > i32::MAX as usize || n > i32::MAX as usize || k > i32::MAX as usize {
            bail!(common::UsageError::new("dimensions must be below 2^31"));
        }
        if version != Version::MmaLdmatrix && !k.is_multiple_of(8) {
            return Err(Refused(format!(
                "{}: k = {k} is not a multiple of 8 (rows must be 16-byte multiples for \
                 cp.async and the TMA)",
                version.name()
            ))
            .into());
        }
        if version.is_hopper_only() && !self.hopper {
            return Err(Refused(format!("{}: needs an sm_90 GPU (Hopper)", version.name())).into());
        }
        let kernel = self
            .kernels
            .get(&format!("gemm_{}_{dtype}", version.name()))?;
        let launch = match version {
            Version::MmaLdmatrix | Version::MmaPipelined => {
                if batch > 65535 || m.div_ceil(MMA_TILE) > 65535 {
                    return Err(Refused(format!(
                        "{}: the grid's y (tile rows) and z (batch) stop at 65535",
                        version.name()
                    ))
                    .into());
                }
                LaunchShape {
                    grid: (
                        n.div_ceil(MMA_TILE) as u32,
                        m.div_ceil(MMA_TILE) as u32,
                        batch as u32,
                    ),
                    block: (MMA_THREADS, 1, 1),
                    dynamic_shared_bytes: if version == Version::MmaPipelined {
                        PIPELINED_SHARED
                    } else {
                        0
                    },
                }
            }
            Version::WgmmaTma | Version::WgmmaOverlap | Version::WgmmaCluster => {
                // A cluster's CTAs take neighbouring tile rows: tiles are counted per cluster.
                let cluster = version.cluster() as u64;
                let tiles = batch as u64
                    * (m.div_ceil(WG_BM) as u64).div_ceil(cluster)
                    * n.div_ceil(WG_BN) as u64;
                if tiles * cluster > i32::MAX as u64 {
                    return Err(Refused(format!("{}: more than 2^31 tiles", version.name())).into());
                }
                let mut launch = LaunchShape {
                    grid: (0, 1, 1),
                    block: (WG_THREADS, 1, 1),
                    dynamic_shared_bytes: WG_SHARED,
                };
                // Persistent: as many CTAs as can be resident at once (one per SM; for
                // clusters, as many whole clusters as the GPCs hold), never more than tiles.
                let resident = if cluster > 1 {
                    launch.grid.0 = self.sms;
                    kernel.max_active_clusters(&launch, &self.stream)? as u64 * cluster
                } else {
                    u64::from(self.sms)
                };
                if resident == 0 {
                    bail!("{}: not one cluster can be resident", version.name());
                }
                launch.grid.0 = (tiles * cluster).min(resident) as u32;
                launch
            }
        };
        Ok((kernel, launch))
    }

    /// Enqueues `C = A B^T` for every product of the batch on `gpu.stream`.
    pub fn gemm<T: Element>(
        &self,
        gpu: &Gpu,
        version: Version,
        shape: &GemmShape,
        ops: Operands<'_, T>,
        c: &mut CudaSlice<T>,
    ) -> Result<()> {
        if ops.a.len() != shape.a_len() || ops.b.len() != shape.b_len() || c.len() != shape.c_len()
        {
            bail!(
                "gemm: A, B and C must hold {}, {} and {} elements for {shape:?}",
                shape.a_len(),
                shape.b_len(),
                shape.c_len()
            );
        }
        let (kernel, launch_shape) = self.plan::<T>(version, shape)?;
        let (m, n, k) = (shape.m as i32, shape.n as i32, shape.k as i32);
        let mut l = gpu.stream.launch_builder(&kernel.func);
        match version {
            Version::MmaLdmatrix | Version::MmaPipelined => {
                let strides =
                    [shape.m * shape.k, shape.n * shape.k, shape.m * shape.n].map(|s| s as u64);
                l.arg(ops.a).arg(ops.b).arg(&mut *c).arg(&m).arg(&n).arg(&k);
                l.arg(&strides[0]).arg(&strides[1]).arg(&strides[2]);
                // SAFETY: matches MMA_KERNELS' signature; the lengths were checked above for
                // these sizes and strides, and every load and store is bounded by m, n, k.
                unsafe { l.launch(kernel.config(&launch_shape)?) }?;
            }
            Version::WgmmaTma | Version::WgmmaOverlap | Version::WgmmaCluster => {
                let tiles = |rows: usize, box_rows: usize| KMajorTiles {
                    inner: shape.k,
                    rows,
                    outer: shape.batch,
                    box_inner: WG_BK,
                    box_rows: box_rows as u32,
                };
                let map_a = tiles(shape.m, WG_BM).encode(gpu, ops.a)?;
                // With clusters each CTA loads (and multicasts) its share of B's tile rows.
                let map_b = tiles(shape.n, WG_BN / version.cluster()).encode(gpu, ops.b)?;
                let batch = shape.batch as i32;
                l.arg(&map_a)
                    .arg(&map_b)
                    .arg(&mut *c)
                    .arg(&m)
                    .arg(&n)
                    .arg(&k)
                    .arg(&batch);
                // SAFETY: matches WGMMA_KERNEL's signature; the maps describe A and B exactly
                // (the TMA never reads outside them), and C's stores are bounded by m and n
                // within `batch` products whose length was checked above.
                unsafe { l.launch(kernel.config(&launch_shape)?) }?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_compiles_without_spilling() {
        // sm_90 (no wgmma, as on a GPU before Hopper's `a` target) and sm_90a (all of them).
        for (arch, hopper) in [("sm_90", false), ("sm_90a", true)] {
            let names = kernel_names(hopper);
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            common::testing::assert_compiles_without_spills(&SOURCE, arch, &names);
        }
    }

    #[test]
    fn names_round_trip() {
        for v in Version::ALL {
            assert_eq!(Version::from_name(v.name()), Some(v));
        }
        assert_eq!(Version::from_name("wmma"), None);
    }

    #[test]
    fn keys_name_the_batch_only_when_batched() {
        let s = GemmShape::square(4096);
        assert_eq!(s.key(Dtype::Bf16), "gemm/bf16/4096x4096x4096");
        let b = GemmShape { batch: 8, ..s };
        assert_eq!(b.key(Dtype::F16), "gemm/f16/8x4096x4096x4096");
        assert_eq!(b.flops(), 8 * 2 * 4096u64.pow(3));
    }
}

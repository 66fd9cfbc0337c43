//! `int8_gemm.cu`'s host side: which kernel a version runs on a problem and its launch shape
//! ([`Int8Gemm::plan`], from day 18's tile table), its arguments ([`Int8Gemm::prepare`]: the
//! tensor maps encoded once), and the launches: the row sums its zero points need, then the
//! GEMM with its epilogue.

use anyhow::{Result, bail};
use common::gpu::kernel::KernelSet;
use common::gpu::params::{DeviceIn, DeviceOut};
use common::gpu::tma::TmaDescriptor;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::{CudaSlice, DevicePtr};
use day18::tile::{MMA_TILE, Staging, WG_TILE};

use crate::problem::{DeviceOperands, Shape};
use crate::{Out, OutElement, ROW_SUMS, Version, check_k, kernel_builds, kernel_name, refused};
use crate::{stores_by_tma, tma};

common::kernel_args! {
    /// `int8_row_sums(const signed char* x, int* sums, int rows, int k)`.
    fn row_sums(x: &CudaSlice<i8>, sums: &mut CudaSlice<i32>, rows: i32, k: i32);
    /// `MMA_SYNC_KERNEL`: `int8_gemm_mma_sync_<out>(Int8MmaParams<OutT>)`.
    fn mma_sync_kernel<T>(params: Int8MmaParams<T>);
    /// `WGMMA_KERNEL` and `WGMMA_TMA_STORE_KERNEL`: `int8_gemm_wgmma[_tma_store]_<out>
    /// (Int8WgmmaParams<OutT>)`.
    fn wgmma_kernel<T>(params: Int8WgmmaParams<T>);
}

common::kernel_params! {
    /// The epilogue's inputs, which every GEMM kernel takes after (m, n, k): C = scale_a
    /// scale_b (A B^T - za col_sums - zb row_sums + k za zb), the sums null where their
    /// correction is 0 everywhere.
    pub struct Int8Epilogue {
        /// A's row sums (m ints) and B's (n ints), or null.
        pub row_sums: DeviceIn<i32>,
        pub col_sums: DeviceIn<i32>,
        /// B's zero point per column, step 1 (per channel) or 0 (one for all).
        pub zb: DeviceIn<i32>,
        pub zb_step: i32,
        /// A's zero point.
        pub za: i32,
        /// B's scale per column, step 1 or 0, and A's scale (bf16 out only).
        pub scale_b: DeviceIn<f32>,
        pub scale_b_step: i32,
        pub scale_a: f32,
    }
}

common::kernel_params! {
    /// What one launch of the `mma.sync` version is told: A [m, k] and B [n, k] int8, C [m, n].
    pub struct Int8MmaParams<T> {
        pub a: DeviceIn<i8>,
        pub b: DeviceIn<i8>,
        pub c: DeviceOut<T>,
        pub m: i32,
        pub n: i32,
        pub k: i32,
        pub epilogue: Int8Epilogue,
    }
}

common::kernel_params! {
    /// What one launch of a `wgmma` version is told: A [m, k] and B [n, k] as the TMA reads
    /// them, and C [m, n].
    pub struct Int8WgmmaParams<T> {
        pub map_a: TmaDescriptor,
        pub map_b: TmaDescriptor,
        /// C's map, for the TMA-store version (the other is given A's, and leaves it unread).
        pub map_c: TmaDescriptor,
        /// C, for the stores from registers (the TMA-store version writes only through map_c).
        pub c: DeviceOut<T>,
        pub m: i32,
        pub n: i32,
        pub k: i32,
        pub epilogue: Int8Epilogue,
    }
}

/// The C twins of the parameter structs, as `int8_gemm_params.cuh` holds them.
#[cfg(test)]
pub(crate) fn params_header() -> String {
    use common::gpu::params::{c_checks, c_declaration, c_header, c_size_check};
    use half::bf16;
    c_header(
        &["the kernel_params! declarations in day23_int8_tensor_cores/src/gemm.rs"],
        &[
            c_declaration::<Int8Epilogue>(),
            c_checks::<Int8Epilogue>(),
            c_declaration::<Int8MmaParams<i32>>(),
            c_checks::<Int8MmaParams<i32>>() + &c_size_check::<Int8MmaParams<bf16>>(),
            c_declaration::<Int8WgmmaParams<i32>>(),
            c_checks::<Int8WgmmaParams<i32>>() + &c_size_check::<Int8WgmmaParams<bf16>>(),
        ],
    )
}

/// Rows per block of the row-sum kernel (one warp each).
const SUM_ROWS_PER_BLOCK: usize = 8;

/// The day's kernels, compiled for one GPU: for `sm_90a` on Hopper, so the wgmma version
/// exists; for the device's own architecture elsewhere, without it.
pub struct Int8Gemm {
    kernels: KernelSet,
    hopper: bool,
    sms: u32,
}

/// A version planned for one problem's operands and output: the kernel, its launch shape and
/// its tensor maps, launched as often as wanted on the same buffers ([`Prepared::launch`]).
pub struct Prepared<'k> {
    pub kernel: &'k Kernel,
    pub launch: LaunchShape,
    sums: &'k Kernel,
    /// A's and B's maps (the wgmma versions), and C's (the TMA-store kernel).
    maps: Option<(TmaDescriptor, TmaDescriptor)>,
    map_c: Option<TmaDescriptor>,
    /// The address of C the maps were made for.
    c_at: u64,
}

impl Int8Gemm {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let (kernels, hopper) = KernelSet::load_first_runnable(gpu, kernel_builds())?;
        Ok(Self {
            kernels,
            hopper,
            sms: gpu.info.sms,
        })
    }

    /// Whether the Hopper version was compiled (the GPU is an sm_90).
    pub fn is_hopper(&self) -> bool {
        self.hopper
    }

    /// The kernel a version runs for `out` and its launch shape, for the table;
    /// [`Refused`](common::session::Refused) where the version cannot take the problem, a
    /// [`common::UsageError`] for a problem no version takes (see [`Shape::validate`]).
    pub fn plan(&self, version: Version, out: Out, s: &Shape) -> Result<(&Kernel, LaunchShape)> {
        s.validate()?;
        if version.is_hopper_only() && !self.hopper {
            return Err(refused(version, "needs an sm_90 GPU (Hopper)"));
        }
        // wgmma_tma_store on rows of C the TMA cannot address runs wgmma's kernel.
        let tma_store = stores_by_tma(version, out, s.n);
        let runs = if version == Version::WgmmaTmaStore && !tma_store {
            Version::Wgmma
        } else {
            version
        };
        let kernel = self.kernels.get(&kernel_name(runs, out))?;
        let launch = match runs {
            Version::MmaSync => {
                let tile = &MMA_TILE;
                if s.m.div_ceil(tile.bm) > 65535 {
                    return Err(refused(
                        version,
                        "m needs more than 65535 tile rows (the grid's y)",
                    ));
                }
                LaunchShape {
                    grid: (
                        s.n.div_ceil(tile.bn) as u32,
                        s.m.div_ceil(tile.bm) as u32,
                        1,
                    ),
                    block: (tile.threads as u32, 1, 1),
                    dynamic_shared_bytes: tile.shared_bytes() as u32,
                }
            }
            Version::Wgmma | Version::WgmmaTmaStore => {
                let tile = &WG_TILE;
                let tiles = s.m.div_ceil(tile.bm) as u64 * s.n.div_ceil(tile.bn) as u64;
                if tiles > i32::MAX as u64 {
                    return Err(refused(version, "more than 2^31 tiles"));
                }
                let staging = if tma_store {
                    Staging::TmaStore
                } else {
                    Staging::Registers
                };
                // Persistent: one block per SM, never more blocks than tiles.
                LaunchShape {
                    grid: (tiles.min(u64::from(self.sms)) as u32, 1, 1),
                    block: (tile.threads() as u32, 1, 1),
                    dynamic_shared_bytes: tile.shared_bytes(staging) as u32,
                }
            }
        };
        Ok((kernel, launch))
    }

    /// The row-sum kernel's launch over `rows` rows.
    fn row_sums_shape(rows: usize) -> LaunchShape {
        LaunchShape::linear(rows.div_ceil(SUM_ROWS_PER_BLOCK) as u32, 256)
    }

    /// Plans `version` for the operands `ops` and the output `c`: the sizes, the plan, and
    /// the tensor maps (A's and B's kept with `ops` from its first run, C's made here), all
    /// before anything is enqueued, so a refusal (an unaligned operand) leaves the stream
    /// untouched.
    pub fn prepare<T: OutElement>(
        &self,
        gpu: &Gpu,
        version: Version,
        ops: &mut DeviceOperands,
        c: &CudaSlice<T>,
    ) -> Result<Prepared<'_>> {
        let s = ops.shape;
        if c.len() < s.m * s.n {
            bail!(
                "int8 gemm: C holds {} elements, {s:?} needs {}",
                c.len(),
                s.m * s.n
            );
        }
        check_k(s.k, ops.has_zero_points())?;
        let (kernel, launch) = self.plan(version, T::OUT, &s)?;
        // The kernels take (A, B) the same way but as raw pointers (mma_sync) or tensor maps
        // (the wgmma ones).
        let maps = if version.is_hopper_only() {
            let addresses = (
                ops.a.device_ptr(&gpu.stream).0,
                ops.b.device_ptr(&gpu.stream).0,
            );
            match ops.maps {
                Some((at, maps)) if at == addresses => Some(maps),
                _ => {
                    let maps = (
                        tma::k_major_i8(gpu, &ops.a, s.m, s.k, WG_TILE.bm as u32)?,
                        tma::k_major_i8(gpu, &ops.b, s.n, s.k, WG_TILE.bn as u32)?,
                    );
                    ops.maps = Some((addresses, maps));
                    Some(maps)
                }
            }
        } else {
            None
        };
        let map_c = if stores_by_tma(version, T::OUT, s.n) {
            Some(tma::row_major_out(gpu, c, s.m, s.n, T::OUT)?)
        } else {
            None
        };
        Ok(Prepared {
            kernel,
            launch,
            sums: self.kernels.get(ROW_SUMS)?,
            maps,
            map_c,
            c_at: c.device_ptr(&gpu.stream).0,
        })
    }

    /// Enqueues the whole operation on `gpu.stream` ([`Int8Gemm::prepare`], then
    /// [`Prepared::launch`]).
    pub fn run<T: OutElement>(
        &self,
        gpu: &Gpu,
        version: Version,
        ops: &mut DeviceOperands,
        c: &mut CudaSlice<T>,
    ) -> Result<()> {
        self.prepare(gpu, version, ops, c)?.launch(gpu, ops, c)
    }
}

impl Prepared<'_> {
    /// Enqueues the row sums the zero points need (of A when zb is nonzero somewhere, of B
    /// when za is), then the GEMM with its epilogue, on the operands and the output it was
    /// prepared for (another C is an error: C's map holds its address).
    pub fn launch<T: OutElement>(
        &self,
        gpu: &Gpu,
        ops: &mut DeviceOperands,
        c: &mut CudaSlice<T>,
    ) -> Result<()> {
        if c.device_ptr(&gpu.stream).0 != self.c_at {
            bail!("int8 gemm: launched on another C than it was prepared for");
        }
        let s = ops.shape;
        let (m, n, k) = (s.m as i32, s.n as i32, s.k as i32);
        if let Some(sums) = ops.row_sums.as_mut() {
            let shape = Int8Gemm::row_sums_shape(s.m);
            // SAFETY: int8_row_sums(const signed char* x, int* sums, int rows, int k): A holds
            // m k bytes (k % 16 == 0, an allocation's aligned start), row_sums m ints.
            unsafe { row_sums(gpu, self.sums, &shape, &ops.a, sums, m, k) }?;
        }
        if let Some(sums) = ops.col_sums.as_mut() {
            let shape = Int8Gemm::row_sums_shape(s.n);
            // SAFETY: as above, over B's n rows.
            unsafe { row_sums(gpu, self.sums, &shape, &ops.b, sums, n, k) }?;
        }
        // A null pointer tells the kernel that a correction term is 0 everywhere.
        let address = |sums: &Option<CudaSlice<i32>>| {
            sums.as_ref()
                .map_or(DeviceIn::at(0), |s| DeviceIn::of(gpu, s))
        };
        let epilogue = Int8Epilogue {
            row_sums: address(&ops.row_sums),
            col_sums: address(&ops.col_sums),
            zb: DeviceIn::of(gpu, &ops.zb),
            zb_step: ops.zb_step,
            za: ops.za,
            scale_b: DeviceIn::of(gpu, &ops.scale_b),
            scale_b_step: ops.scale_b_step,
            scale_a: ops.scale_a,
        };
        let (kernel, shape) = (self.kernel, &self.launch);
        match self.maps {
            Some((map_a, map_b)) => {
                let params = Int8WgmmaParams {
                    map_a,
                    map_b,
                    map_c: self.map_c.unwrap_or(map_a),
                    c: DeviceOut::of(gpu, c),
                    m,
                    n,
                    k,
                    epilogue,
                };
                // SAFETY: the kernel takes Int8WgmmaParams<OutT> (its header is this
                // declaration's): maps of exactly A [m, k] and B [n, k], then C's map of exactly
                // C [m, n] for the TMA-store kernel (which plan chose exactly when map_c is
                // made: both follow stores_by_tma); C holds m n outputs (checked in prepare);
                // the row and column sums hold m and n ints (or are null, and then never read);
                // zb and scale_b hold n values when their step is 1, one when it is 0
                // (DeviceOperands builds them so). Every store is bounded by m and n. The
                // buffers outlive the launch (borrowed here).
                unsafe { wgmma_kernel(gpu, kernel, shape, params) }
            }
            None => {
                let params = Int8MmaParams {
                    a: DeviceIn::of(gpu, &ops.a),
                    b: DeviceIn::of(gpu, &ops.b),
                    c: DeviceOut::of(gpu, c),
                    m,
                    n,
                    k,
                    epilogue,
                };
                // SAFETY: the kernel takes Int8MmaParams<OutT> (its header is this
                // declaration's): A and B hold m k and n k int8, C m n outputs (checked in
                // prepare), the epilogue's buffers as above; every load and store is bounded
                // by m, n and k. The buffers outlive the launch (borrowed here).
                unsafe { mma_sync_kernel(gpu, kernel, shape, params) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checked-in `int8_gemm_params.cuh` is what the parameter declarations write.
    #[test]
    fn the_kernels_parameter_structs_are_the_launchers() {
        common::assert_generated_header!("int8_gemm_params.cuh", &params_header());
    }

    #[test]
    fn the_row_sums_cover_every_row_once() {
        let shape = Int8Gemm::row_sums_shape(17);
        assert_eq!(shape.grid.0, 3);
        assert_eq!(shape.block.0 as usize, 32 * SUM_ROWS_PER_BLOCK);
    }
}

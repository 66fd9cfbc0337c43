//! One problem's table: cuBLAS (cuBLASLt's FP8 GEMM for the FP8 problems) as the ceiling, then
//! every selected version, each planned once for the problem's buffers
//! ([`TensorCoreGemm::prepare`]) and checked and timed by a [`Session`]; and the sweep's plot.

use std::path::Path;

use anyhow::Result;
use common::cli::CommonArgs;
use common::dtype::Dtype;
use common::element::Element;
use common::gpu::cublas::Cublas;
use common::gpu::cublaslt::{CublasLt, LtProduct};
use common::measure::plot::LinePlot;
use common::measure::report::DayReport;
use common::measure::sampled::CheckedOutputs;
use common::measure::{inputs, sweep};
use common::reference::matmul as reference;
use common::session::{Expected, Problem, Session, Version as RunVersion};
use common::{Gpu, Tolerance};
use cudarc::driver::CudaSlice;
use half::bf16;

use crate::{GemmShape, Layout, Prepared, TensorCoreGemm, Version, fp8};

/// The ceiling row.
pub const CUBLAS: &str = "cublas";
/// The FP8 tables' ceiling row (selected with `cublas`).
pub const CUBLASLT: &str = "cublaslt";

/// What every problem of a run shares.
pub struct Runner<'a> {
    pub gpu: &'a Gpu,
    pub common: &'a CommonArgs,
    pub day: &'a TensorCoreGemm,
    pub cublas: &'a Cublas,
    /// cuBLASLt, where an FP8 problem runs with `cublas` selected.
    pub lt: Option<&'a CublasLt>,
    /// The `--kernel` names to run.
    pub selected: &'a [&'a str],
    /// No per-version lines and no table (a sweep prints its own summary).
    pub quiet: bool,
}

impl Runner<'_> {
    /// A 16-bit problem: A and B uniform in [-1, 1] from the seed, checked (every output, or
    /// a sample that looks at every tile of every product) against the f64 reference with
    /// the tolerance of an f32 sum stored in `T`.
    pub fn problem<T: Element>(&self, shape: &GemmShape) -> Result<DayReport> {
        let (gpu, seed) = (self.gpu, self.common.seed);
        let a: Vec<T> = inputs::uniform(shape.a_len(), -1.0, 1.0, seed);
        let b: Vec<T> = inputs::uniform(shape.b_len(), -1.0, 1.0, seed.wrapping_add(1));
        let GemmShape { m, n, k, batch, .. } = *shape;
        let checked = CheckedOutputs::of_products(batch, m, n, k, seed.wrapping_add(2));
        let g = shape.gemm_ex();
        let values = match checked.at() {
            Some(at) => reference::gemm_ex_at(&a, &b, None, &g, at),
            None => reference::gemm_ex(&a, &b, None, &g),
        };
        let unit_roundoff = match T::DTYPE {
            Dtype::F16 => 2f64.powi(-11),
            _ => 2f64.powi(-8),
        };
        let tolerance = reference::tolerance_stored_in(k, unit_roundoff);
        let problem = Problem {
            day: "day18",
            title: "tensor-core GEMM",
            description: format!("{} ({})", shape.describe(T::DTYPE), checked.describe()),
            key: shape.key(T::DTYPE),
            bytes_per_run: shape.min_bytes(T::DTYPE),
            flops_per_run: Some(shape.flops()),
        };
        let mut session = self.session(problem, CUBLAS)?;
        let (a_shape, b_shape) = shape.stored_shapes();
        session.save_input("a", &[batch, a_shape[0], a_shape[1]], &a)?;
        session.save_input("b", &[batch, b_shape[0], b_shape[1]], &b)?;
        let (a_dev, b_dev) = (gpu.upload(&a)?, gpu.upload(&b)?);
        drop((a, b));
        let mut c = gpu.alloc_poisoned::<T>(shape.c_len())?;
        let out_shape = [batch, m, n];
        let expected = expected(&values, &out_shape, tolerance, &checked);

        if self.selected.contains(&CUBLAS) {
            // The same layout (by default B stored [n, k]: the transposed right operand).
            session.run_version(library_call(CUBLAS), &mut c, &expected, |c| {
                self.cublas.gemm_ex::<T, T>(&g, &a_dev, &b_dev, c)
            })?;
        }
        let versions = self
            .selected
            .iter()
            .filter_map(|&name| Version::from_name(name));
        run_versions(
            &mut session,
            &mut c,
            &expected,
            versions,
            |v, c| self.day.prepare(gpu, v, &g, &a_dev, &b_dev, c),
            |p, c| p.launch(gpu, &a_dev, &b_dev, c),
        )?;
        Ok(session.finish())
    }

    /// One FP8 problem, `C (bf16) = A B^T` with A `[m, k]` and B `[n, k]` e4m3: cuBLASLt's FP8
    /// GEMM (fast accumulation) as the ceiling, then the FP8 versions; checked like the 16-bit
    /// problems with [`fp8::tolerance`].
    pub fn fp8_problem(&self, shape: &GemmShape) -> Result<DayReport> {
        let (gpu, seed) = (self.gpu, self.common.seed);
        let GemmShape { m, n, k, .. } = *shape;
        let a = fp8::uniform_e4m3(m * k, seed);
        let b = fp8::uniform_e4m3(n * k, seed.wrapping_add(1));
        let checked = CheckedOutputs::of_products(1, m, n, k, seed.wrapping_add(2));
        let outputs = checked.indices(m * n);
        let values = fp8::reference_at(&fp8::decode(&a), &fp8::decode(&b), n, k, 1.0, &outputs);
        let problem = Problem {
            day: "day18",
            title: "tensor-core GEMM",
            description: format!(
                "{m} x {n} x {k} (m x n x k), C = A B^T (A [m, k], B [n, k]), FP8 e4m3 in, f32 \
                 accumulation, bf16 out ({})",
                checked.describe()
            ),
            key: format!("gemm/e4m3/{m}x{n}x{k}"),
            bytes_per_run: ((m * k + n * k) + 2 * m * n) as u64,
            flops_per_run: Some(shape.flops()),
        };
        let mut session = self.session(problem, CUBLASLT)?;
        session.save_input("a", &[m, k], &a)?;
        session.save_input("b", &[n, k], &b)?;
        let (a_dev, b_dev) = (gpu.upload(&a)?, gpu.upload(&b)?);
        drop((a, b));
        let mut c = gpu.alloc_poisoned::<bf16>(m * n)?;
        let g = shape.gemm_ex();
        let out_shape = [1, m, n];
        let expected = expected(&values, &out_shape, fp8::tolerance(k), &checked);

        if let Some(lt) = self.lt {
            let plan = lt.plan(LtProduct::E4m3ToBf16, m, n, k);
            if let Some(plan) = session.plan_or_skip(CUBLASLT, plan)? {
                session.run_version(library_call(CUBLASLT), &mut c, &expected, |c| {
                    lt.run_fp8(gpu, &plan, &a_dev, &b_dev, c, 1.0)
                })?;
            }
        }
        let versions = Version::FP8
            .into_iter()
            .filter(|v| self.selected.contains(&v.name()));
        run_versions(
            &mut session,
            &mut c,
            &expected,
            versions,
            |v, c| self.day.prepare_fp8(gpu, v, &g, &a_dev, &b_dev, c),
            |p, c| p.launch(gpu, &a_dev, &b_dev, c),
        )?;
        Ok(session.finish())
    }

    fn session(&self, problem: Problem, ceiling: &str) -> Result<Session<'_>> {
        let session = Session::new(self.gpu, self.common, problem)?.with_ceiling(ceiling);
        Ok(if self.quiet { session.quiet() } else { session })
    }
}

fn expected<'a>(
    values: &'a [f64],
    shape: &'a [usize],
    tolerance: Tolerance,
    checked: &'a CheckedOutputs,
) -> Expected<'a> {
    Expected {
        values,
        shape,
        tolerance,
        at: checked.at(),
    }
}

fn library_call(name: &str) -> RunVersion<'_> {
    RunVersion {
        name,
        kernel: None,
        global_bytes: None,
    }
}

/// Each of `versions`, planned once on the problem's buffers (`prepare`; a [`Refused`](common::session::Refused) is
/// listed under the table), then checked and timed by `launch`ing the plan.
fn run_versions<'k, T: Element>(
    session: &mut Session,
    c: &mut CudaSlice<T>,
    expected: &Expected,
    versions: impl IntoIterator<Item = Version>,
    prepare: impl Fn(Version, &CudaSlice<T>) -> Result<Prepared<'k>>,
    launch: impl Fn(&Prepared<'k>, &mut CudaSlice<T>) -> Result<()>,
) -> Result<()> {
    for version in versions {
        let Some(prepared) = session.plan_or_skip(version.name(), prepare(version, c))? else {
            continue;
        };
        let run = RunVersion {
            name: version.name(),
            kernel: Some((prepared.kernel, prepared.launch)),
            global_bytes: None,
        };
        session.run_version(run, c, expected, |c| launch(&prepared, c))?;
    }
    Ok(())
}

/// TFLOP/s against size for each version and each peer, plotted to `plot`, and the summary
/// table. `sizes` are the sweep's `m = n = k`, one per report, in the same order.
pub fn plot_sweep(
    plot: &Path,
    layout: Layout,
    dtype: Dtype,
    gpu: &Gpu,
    reports: &[DayReport],
    sizes: impl IntoIterator<Item = usize>,
) -> Result<()> {
    let x_of = sweep::x_by_report(reports, sizes.into_iter().map(|s| s as f64));
    let mut series = sweep::version_series(reports, sweep::row_versions(reports), &x_of, |row| {
        row.tflops
    });
    series.extend(sweep::peer_series(
        reports,
        " (peer)",
        &x_of,
        sweep::peer_tflops,
    ));
    let title = format!(
        "day18 tensor-core GEMM, {}, {dtype}, {}",
        layout.describe(),
        gpu.info.name
    );
    let line_plot = LinePlot {
        title: &title,
        x_label: "m = n = k",
        y_label: "TFLOP/s (2 m n k)",
        log2_x: true,
        series: &series,
        hlines: &[],
    };
    sweep::publish(plot, &line_plot, "size", "TFLOP/s", 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tile::{MMA_TILE, WG_NARROW_TILES, WG_TILE};

    /// The sampled check looks at every output tile of every version (128 x 128 for
    /// mma.sync, 128 x 256, 192, 128 or 64 for wgmma), whatever the wave of a persistent kernel that computes
    /// it, in every product of a batch.
    #[test]
    fn the_sampled_check_covers_every_output_tile() {
        for (batch, m, n, k) in [(1, 8192, 8192, 8192), (3, 1000, 3001, 999)] {
            let checked = CheckedOutputs::of_products(batch, m, n, k, 7);
            assert!(checked.at().is_some(), "sampled at this size");
            let narrow = WG_NARROW_TILES.map(|t| (t.bm, t.bn));
            for tile in [(MMA_TILE.bm, MMA_TILE.bn), (WG_TILE.bm, WG_TILE.bn)]
                .into_iter()
                .chain(narrow)
            {
                let missing = checked.tiles_missed((batch, m, n), tile);
                assert_eq!(missing, 0, "{tile:?}: {missing} tiles never sampled");
            }
        }
    }
}

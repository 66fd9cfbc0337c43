//! One problem's table: cuBLASLt's INT8 GEMM as the ceiling (where it computes the problem),
//! then every selected version, each planned once for the problem's buffers
//! ([`Int8Gemm::prepare`]) and checked (exactly for int32, within the bf16 epilogue's rounding
//! for bf16) and timed by a [`Session`].

use anyhow::Result;
use common::Gpu;
use common::Tolerance;
use common::cli::CommonArgs;
use common::element::as_type_mut;
use common::measure::inputs;
use common::measure::report::DayReport;
use common::measure::sampled::CheckedOutputs;
use common::session::{Expected, Problem, Session, Version as RunVersion};

use crate::cublaslt::CublasLtInt8;
use crate::problem::{self, DeviceOperands, Quant, Shape};
use crate::{Int8Gemm, Out, OutElement, Version};

/// The ceiling row.
pub const CUBLASLT: &str = "cublaslt";

/// What every problem of a run shares.
pub struct Runner<'a> {
    pub gpu: &'a Gpu,
    pub common: &'a CommonArgs,
    pub day: &'a Int8Gemm,
    /// cuBLASLt, where `cublaslt` is selected.
    pub cublaslt: Option<&'a CublasLtInt8>,
    /// The `--kernel` names to run.
    pub selected: &'a [&'a str],
}

impl Runner<'_> {
    /// One problem: A and B uniform int8 from the seed, checked (every output, or a sample
    /// that looks at every tile) against the exact reference.
    pub fn problem<T: OutElement>(&self, shape: &Shape, quant: &Quant) -> Result<DayReport> {
        let (gpu, seed) = (self.gpu, self.common.seed);
        let Shape { m, n, k } = *shape;
        let a: Vec<i8> = inputs::uniform(m * k, -128.0, 127.0, seed.wrapping_add(10));
        let b: Vec<i8> = inputs::uniform(n * k, -128.0, 127.0, seed.wrapping_add(11));
        let checked = CheckedOutputs::of_products(1, m, n, k, seed.wrapping_add(12));
        let at = checked.indices(m * n);
        let (values, tolerance) = match T::OUT {
            Out::S32 => (
                problem::reference_s32(&a, &b, quant, shape, &at)
                    .into_iter()
                    .map(|v| v as f64)
                    .collect::<Vec<f64>>(),
                Tolerance::new(0.0, 0.0),
            ),
            Out::Bf16 => (
                problem::reference_bf16(&a, &b, quant, shape, &at),
                problem::bf16_tolerance(),
            ),
        };
        drop(at);
        let out_shape = [m, n];
        let expected = Expected {
            values: &values,
            shape: &out_shape,
            tolerance,
            at: checked.at(),
        };
        let problem = Problem {
            day: "day23",
            title: "INT8 tensor-core GEMM",
            description: format!(
                "{m} x {n} x {k} (m x n x k), C = A B^T (A [m, k], B [n, k] int8), {} ({})",
                quant.describe(T::OUT),
                checked.describe()
            ),
            key: shape.key(T::OUT, quant),
            bytes_per_run: shape.bytes(T::OUT),
            flops_per_run: Some(shape.ops()),
        };
        let mut session = Session::new(gpu, self.common, problem)?.with_ceiling(CUBLASLT);
        session.save_input("a", &[m, k], &a)?;
        session.save_input("b", &[n, k], &b)?;
        session.save_input("zb", &[quant.zb.len()], &quant.zb)?;
        session.save_input("scale_a", &[1], &[quant.scale_a])?;
        session.save_input("scale_b", &[quant.scale_b.len()], &quant.scale_b)?;
        if checked.at().is_none() {
            session.save_reference(&out_shape, &values)?;
        }
        let mut ops = DeviceOperands::upload(gpu, *shape, &a, &b, quant)?;
        drop((a, b));
        let mut c = gpu.alloc_poisoned::<T>(m * n)?;

        if self.selected.contains(&CUBLASLT) {
            self.run_cublaslt(&mut session, &ops, &mut c, &expected, quant)?;
        }
        for version in self
            .selected
            .iter()
            .filter_map(|&name| Version::from_name(name))
        {
            let prepared = self.day.prepare(gpu, version, &mut ops, &c);
            let Some(prepared) = session.plan_or_skip(version.name(), prepared)? else {
                continue;
            };
            let run = RunVersion {
                name: version.name(),
                kernel: Some((prepared.kernel, prepared.launch)),
                global_bytes: None,
            };
            session.run_version(run, &mut c, &expected, |c| {
                prepared.launch(gpu, &mut ops, c)
            })?;
        }
        Ok(session.finish())
    }

    /// cuBLASLt's row: the plain int32 `A B^T` only.
    fn run_cublaslt<T: OutElement>(
        &self,
        session: &mut Session,
        ops: &DeviceOperands,
        c: &mut cudarc::driver::CudaSlice<T>,
        expected: &Expected,
        quant: &Quant,
    ) -> Result<()> {
        let Shape { m, n, k } = ops.shape;
        let lt = match (self.cublaslt, T::OUT, quant.has_zero_points()) {
            (Some(lt), Out::S32, false) => lt,
            _ => {
                let why = "computes the plain int32 A B^T: no zero points, no scaled bf16 output";
                session.skip_version(CUBLASLT, why);
                return Ok(());
            }
        };
        let Some(plan) = session.plan_or_skip(CUBLASLT, lt.plan(m, n, k))? else {
            return Ok(());
        };
        let run = RunVersion {
            name: CUBLASLT,
            kernel: None,
            global_bytes: None,
        };
        session.run_version(run, c, expected, |c| {
            let c = as_type_mut::<T, i32>(c).expect("Out::S32 is i32");
            lt.run_int8(self.gpu, &plan, &ops.a, &ops.b, c)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use day18::tile::{MMA_TILE, WG_TILE};

    /// Every output tile of every version (mma_sync's 128 x 128, wgmma's 128 x 256), whichever
    /// wave of a persistent kernel computes it, is looked at.
    #[test]
    fn the_sampled_check_covers_every_output_tile() {
        for (m, n, k) in [(8192, 8192, 8192), (1000, 3001, 1008)] {
            let checked = CheckedOutputs::of_products(1, m, n, k, 7);
            assert!(checked.at().is_some(), "sampled at this size");
            for tile in [(MMA_TILE.bm, MMA_TILE.bn), (WG_TILE.bm, WG_TILE.bn)] {
                assert_eq!(
                    checked.tiles_missed((1, m, n), tile),
                    0,
                    "{m} x {n}: {tile:?}"
                );
            }
        }
        assert!(
            CheckedOutputs::of_products(1, 256, 256, 256, 1)
                .at()
                .is_none()
        );
    }
}

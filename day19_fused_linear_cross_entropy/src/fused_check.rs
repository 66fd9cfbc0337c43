//! The f64 check of the fused problem: every output on problems small enough for the full
//! reference, else the loss and sampled dH rows, dW rows and dW columns (from logits a plain
//! cuBLAS GEMM computes, themselves checked); on those large problems every version after the
//! first that passed is also checked against it, in full.

use anyhow::Result;
use common::Gpu;
use common::gpu::cublas::{Cublas, GemmEx, Stored};
use common::measure::check::{self, CheckReport};
use cudarc::driver::CudaSlice;
use half::bf16;

use crate::fused::Shape;
use crate::reference::{self, CeOptions, Rounding};
use crate::tolerance;

/// Problems whose full f64 reference (about 2 T V Hd multiply-adds) is cheap enough; larger
/// ones are checked at samples against [`reference::linear_cross_entropy_sampled`], and every
/// version after the first also against the first that passed, in full.
const FULL_CHECK_WORK: usize = 1 << 31;
/// dH rows of the sampled check (one thread each, about a second each at the default size).
const SAMPLED_TOKENS: usize = 4;
/// dW rows (vocabulary entries) of the sampled check: `T x Hd` multiply-adds each.
const SAMPLED_DW_ROWS: usize = 64;
/// Rows of the reference's logits computed per cuBLAS call (f32, at most 1 GiB at a time).
const LOGITS_BLOCK_BYTES: usize = 1 << 30;

/// Where a fused problem is checked, chosen before anything runs (for the table's heading):
/// in full, or at [`Samples`].
pub struct CheckPlan {
    shape: Shape,
    full: bool,
    samples: Samples,
}

impl CheckPlan {
    pub fn new(targets: &[i32], shape: Shape, ignore_index: i32, seed: u64) -> Self {
        Self {
            shape,
            full: shape.tokens * shape.hidden * shape.vocab <= FULL_CHECK_WORK,
            samples: Samples::choose(targets, shape, ignore_index, seed),
        }
    }

    /// What the heading says is checked.
    pub fn describe(&self) -> String {
        if self.full {
            "every output checked".to_string()
        } else {
            format!(
                "loss, {} dH rows, {} dW rows and {} dW columns checked in f64; every version \
                 after the first also against the first in full",
                self.samples.dh_tokens.len(),
                self.samples.dw_rows.len(),
                self.samples.dw_columns.len()
            )
        }
    }

    /// The f64 reference: everything on small problems; the loss and sampled dH and dW on
    /// large ones, from logits a plain cuBLAS GEMM computes from `h_dev` and `w_dev` (checked
    /// at the sampled tokens).
    pub fn reference(
        self,
        gpu: &Gpu,
        cublas: &Cublas,
        (h, w, targets): (&[bf16], &[bf16], &[i32]),
        h_dev: &CudaSlice<bf16>,
        w_dev: &CudaSlice<bf16>,
        opts: &CeOptions,
    ) -> Result<FusedCheck> {
        let (shape, samples) = (self.shape, &self.samples);
        let reference = if self.full {
            Reference::Full(reference::linear_cross_entropy(
                h,
                w,
                targets,
                shape,
                opts,
                Rounding::Bf16,
            ))
        } else {
            let logits = reference_logits(gpu, cublas, h_dev, w_dev, shape)?;
            check_reference_logits(h, w, &logits, shape, &samples.dh_tokens)?;
            let sampled = reference::linear_cross_entropy_sampled(
                h,
                w,
                targets,
                &logits,
                shape,
                opts,
                Rounding::Bf16,
                (&samples.dh_tokens, &samples.dw_rows, &samples.dw_columns),
            );
            eprintln!(
                "f64 reference: loss {:.6}, {} dH rows, {} dW rows, {} dW columns (largest \
                 |logit| {:.2})",
                sampled.loss,
                samples.dh_tokens.len(),
                samples.dw_rows.len(),
                samples.dw_columns.len(),
                sampled.max_abs_logit
            );
            Reference::Sampled(samples.flatten(&sampled, shape))
        };
        Ok(FusedCheck {
            shape,
            full: self.full,
            reference,
            first_passed: None,
        })
    }
}

/// The check of every fused version's dH, dW and loss.
pub struct FusedCheck {
    shape: Shape,
    full: bool,
    reference: Reference,
    /// On large problems, the first version that passed (dH then dW, in f64).
    first_passed: Option<Vec<f64>>,
}

impl FusedCheck {
    /// The f64 loss.
    pub fn loss(&self) -> f64 {
        self.reference.loss()
    }

    /// dH and dW (back to back in `got`, from `chunks` chunks) against the f64 reference and,
    /// once a version has passed on a large problem, against that version in full.
    pub fn check(&self, got: &[bf16], chunks: usize) -> CheckReport {
        let against_f64 = self.reference.check(got, self.shape, chunks);
        match &self.first_passed {
            Some(prev) => {
                let tol = tolerance::gradient_against_version(max_abs(prev), chunks);
                worse(against_f64, check::compare(got, prev, &[prev.len()], tol))
            }
            None => against_f64,
        }
    }

    /// Whether an output that got `report` would be the reference of the later versions (the
    /// first that passes on a large problem): the caller then keeps a copy for [`Self::keep`].
    pub fn wants(&self, report: &CheckReport) -> bool {
        !self.full && self.first_passed.is_none() && report.passed()
    }

    /// Makes `values` (a version that passed, its loss too) the reference of later versions.
    pub fn keep(&mut self, values: Vec<f64>) {
        self.first_passed = Some(values);
    }
}

/// The f64 reference of the fused problem.
enum Reference {
    /// Every output.
    Full(reference::LinearCeOutput),
    /// At sampled places of the `[dH | dW]` buffer.
    Sampled(SampledValues),
}

/// A sampled reference laid out for `check::compare_at_with_slack`.
struct SampledValues {
    loss: f64,
    at: Vec<usize>,
    values: Vec<f64>,
    terms: Vec<f64>,
    /// Where the dW samples start in `at` (dH's come first).
    dw_from: usize,
}

impl Reference {
    fn loss(&self) -> f64 {
        match self {
            Reference::Full(r) => r.loss,
            Reference::Sampled(s) => s.loss,
        }
    }

    /// dH and dW (back to back in `got`) against the f64 values, each element within the
    /// bf16 tolerance plus its own allowance from its terms; the worse of the two parts.
    fn check(&self, got: &[bf16], shape: Shape, chunks: usize) -> CheckReport {
        let tol = tolerance::gradient();
        let split = shape.tokens * shape.hidden;
        match self {
            Reference::Full(r) => worse(
                check::compare_with_slack(
                    &got[..split],
                    &r.dh.values,
                    &tolerance::gradient_slack(&r.dh.terms, chunks),
                    &[shape.tokens, shape.hidden],
                    tol,
                ),
                check::compare_with_slack(
                    &got[split..],
                    &r.dw.values,
                    &tolerance::gradient_slack(&r.dw.terms, chunks),
                    &[shape.vocab, shape.hidden],
                    tol,
                ),
            ),
            Reference::Sampled(s) => {
                let slack = tolerance::gradient_slack(&s.terms, chunks);
                let part = |range: std::ops::Range<usize>| {
                    check::compare_at_with_slack(
                        got,
                        Some(&s.at[range.clone()]),
                        &s.values[range.clone()],
                        &slack[range],
                        &[got.len()],
                        tol,
                    )
                };
                worse(part(0..s.dw_from), part(s.dw_from..s.at.len()))
            }
        }
    }
}

/// Where the sampled reference looks.
struct Samples {
    dh_tokens: Vec<usize>,
    dw_rows: Vec<usize>,
    dw_columns: Vec<usize>,
}

impl Samples {
    /// dH rows of [`sampled_tokens`]; dW rows: the first and last vocabulary entries, the
    /// targets of the sampled tokens (whose dW rows hold the `-1` of the one-hot), and random
    /// ones; dW columns: the first, middle and last hidden index (each crosses every
    /// vocabulary tile of the dW GEMM).
    fn choose(targets: &[i32], shape: Shape, ignore_index: i32, seed: u64) -> Self {
        use rand::{Rng, SeedableRng};
        let dh_tokens = sampled_tokens(targets, ignore_index);
        let v = shape.vocab;
        let mut dw_rows = vec![0, v - 1];
        dw_rows.extend(
            dh_tokens
                .iter()
                .filter_map(|&t| usize::try_from(targets[t]).ok()),
        );
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed.wrapping_add(3));
        while dw_rows.len() < SAMPLED_DW_ROWS.min(v) {
            dw_rows.push(rng.random_range(0..v));
            dw_rows.sort_unstable();
            dw_rows.dedup();
        }
        dw_rows.sort_unstable();
        dw_rows.dedup();
        let mut dw_columns = vec![0, shape.hidden / 2, shape.hidden - 1];
        dw_columns.dedup();
        Self {
            dh_tokens,
            dw_rows,
            dw_columns,
        }
    }

    /// The sampled values at their flat indices of the `[dH | dW]` buffer.
    fn flatten(&self, r: &reference::SampledLinearCe, shape: Shape) -> SampledValues {
        let (hd, v) = (shape.hidden, shape.vocab);
        let dw_base = shape.tokens * hd;
        let mut at: Vec<usize> = self
            .dh_tokens
            .iter()
            .flat_map(|&t| t * hd..(t + 1) * hd)
            .collect();
        let dw_from = at.len();
        at.extend(
            self.dw_rows
                .iter()
                .flat_map(|&row| dw_base + row * hd..dw_base + (row + 1) * hd),
        );
        at.extend(
            self.dw_columns
                .iter()
                .flat_map(|&c| (0..v).map(move |row| dw_base + row * hd + c)),
        );
        let values = [&r.dh.values[..], &r.dw_rows.values, &r.dw_columns.values].concat();
        let terms = [&r.dh.terms[..], &r.dw_rows.terms, &r.dw_columns.terms].concat();
        assert_eq!(at.len(), values.len(), "one index per sampled value");
        SampledValues {
            loss: r.loss,
            at,
            values,
            terms,
            dw_from,
        }
    }
}

/// The logits `H W^T` of the whole problem, for the sampled reference: a plain cuBLAS GEMM
/// (not the versions' chunked code) with an f32 output, `LOGITS_BLOCK_BYTES` of rows at a
/// time, rounded to bf16 on the host as the reference rounds its logits.
fn reference_logits(
    gpu: &Gpu,
    cublas: &Cublas,
    h: &CudaSlice<bf16>,
    w: &CudaSlice<bf16>,
    shape: Shape,
) -> Result<Vec<bf16>> {
    let Shape {
        tokens,
        hidden,
        vocab,
    } = shape;
    let rows = (LOGITS_BLOCK_BYTES / (4 * vocab)).clamp(1, tokens);
    let mut block = gpu.alloc_poisoned::<f32>(rows * vocab)?;
    let mut logits = Vec::with_capacity(tokens * vocab);
    for start in (0..tokens).step_by(rows) {
        let n = rows.min(tokens - start);
        let g = GemmEx {
            b: Stored::Transposed,
            ..GemmEx::new(n, vocab, hidden)
        };
        let h_rows = h.slice(start * hidden..(start + n) * hidden);
        let mut out = block.slice_mut(..n * vocab);
        cublas.gemm_ex::<bf16, f32>(&g, &h_rows, w, &mut out)?;
        gpu.synchronize()?;
        let got = gpu.download(&block)?;
        logits.extend(got[..n * vocab].iter().map(|&x| bf16::from_f32(x)));
    }
    Ok(logits)
}

/// The reference's logits at `tokens` against the exact f64 products rounded to bf16: each
/// within one bf16 ulp (2^-7 relative; the f32 sums may round a product near a rounding
/// boundary the other way) plus 1e-3 for f32 sums that cancel. A failure is an error of the
/// reference, not of a version.
fn check_reference_logits(
    h: &[bf16],
    w: &[bf16],
    logits: &[bf16],
    shape: Shape,
    tokens: &[usize],
) -> Result<()> {
    let exact = reference::logits_rows(h, w, shape, Rounding::Bf16, tokens);
    let v = shape.vocab;
    let at: Vec<usize> = tokens.iter().flat_map(|&t| t * v..(t + 1) * v).collect();
    let tol = common::Tolerance::new(1e-3, 1.0 / 128.0).with_max_rel_l2(1e-2);
    let report = check::compare_at(logits, &at, &exact, &[logits.len()], tol);
    if !report.passed() {
        anyhow::bail!("the reference's cuBLAS logits disagree with the f64 products: {report}");
    }
    Ok(())
}

fn max_abs(v: &[f64]) -> f64 {
    v.iter().fold(0.0f64, |m, x| m.max(x.abs()))
}

/// The report of the two parts that is worse (a failure over a pass, else the larger L2).
fn worse(a: CheckReport, b: CheckReport) -> CheckReport {
    match (a.passed(), b.passed()) {
        (true, false) => b,
        (false, _) => a,
        (true, true) if b.rel_l2_err > a.rel_l2_err => b,
        _ => a,
    }
}

/// The first and last token, an ignored one if any, and one in the middle.
fn sampled_tokens(targets: &[i32], ignore_index: i32) -> Vec<usize> {
    let t = targets.len();
    let mut rows = vec![0, t - 1, t / 2];
    if let Some(i) = targets.iter().position(|&y| y == ignore_index) {
        rows.push(i);
    } else {
        rows.push(t / 3);
    }
    rows.sort_unstable();
    rows.dedup();
    rows.truncate(SAMPLED_TOKENS);
    rows
}

//! day13 on the GPU: every op, version and storage type against the f64 reference, over
//! shapes whose element counts are 1, primes, and not multiples of the 16-byte pack, of the
//! 256-thread block or of a vec block's 512 packs; bias-dropout-add also with widths that no
//! pack divides (the one-column kernel) and more row groups than the grid's 65535 in y. The
//! GELU and SiLU ops' `vec_fast` runs over the same shapes and all three storage types. The
//! rectifiers also run with scalars other than torch's defaults, and every rectifier and SiLU
//! op on inputs made of the points where torch's choices show: x exactly 0, -0.0, exactly at
//! HardTanh's bounds and just either side, +-inf and NaN, against NaN and infinite dy.
//!
//! Three tests here need no GPU: the special inputs hold what the GPU test claims, and a CPU
//! replay of the rectifiers' and SiLU's f32 arithmetic meets the reference on them (exactly
//! for the rectifiers, NaN for NaN), so a GPU failure there is the kernel's, not the test's.

use common::session::{Refused, launch_and_read};
use common::{Element, Gpu, measure::check, testing};
use day13::reference::{exact_tolerance, tolerance_for};
use day13::{Activations, HostInputs, Op, OpParams};
use half::{bf16, f16};

/// (rows, cols): 1; primes; 4097 and 1000 (no pack divides them); 8 x 4096 (whole packs,
/// several blocks); 3 x 65537 (a long leftover run after 24576 packs); 4 x 8 (one pack per row).
const SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (1, 3),
    (1, 7),
    (3, 7),
    (13, 331),
    (1, 4097),
    (7, 1000),
    (8, 4096),
    (3, 65_537),
    (4, 8),
];

/// Scalars other than torch's defaults: a steeper slope and asymmetric bounds; a negative
/// slope and equal bounds (the bound everywhere, no gradient anywhere).
const OTHER_PARAMS: [OpParams; 2] = [
    OpParams {
        negative_slope: 0.2,
        min_val: -0.5,
        max_val: 2.0,
    },
    OpParams {
        negative_slope: -0.5,
        min_val: 0.25,
        max_val: 0.25,
    },
];

fn check_op<T: Element>(gpu: &Gpu, day: &Activations, op: Op, rows: usize, cols: usize) {
    let host = HostInputs::<T>::random(op, rows, cols, (rows * 31 + cols) as u64);
    check_inputs(gpu, day, &host, "random");
}

/// Every version of `host.op` on `host`'s inputs, against its reference.
fn check_inputs<T: Element>(gpu: &Gpu, day: &Activations, host: &HostInputs<T>, what: &str) {
    let (op, rows, cols) = (host.op, host.rows, host.cols);
    let expected = host.reference();
    let inputs = host.upload(gpu).unwrap();
    for &version in op.versions() {
        let what = format!(
            "{} {version} {} {rows}x{cols}, {what} inputs, {:?}",
            op.name(),
            T::NAME,
            host.params
        );
        let plan = day
            .plan::<T>(gpu, version, &inputs)
            .unwrap_or_else(|e| panic!("{what}: {e:#}"));
        let mut launch = plan.launch;
        let mut out = gpu.alloc_poisoned::<T>(op.outputs() * rows * cols).unwrap();
        let got = launch_and_read(gpu, &mut out, &mut |out| launch(out))
            .unwrap_or_else(|e| panic!("{what}: {e:#}"));
        let tolerance = op.tolerance::<T>(version);
        let report = check::compare(&got, &expected, &[op.outputs(), rows, cols], tolerance);
        assert!(report.passed(), "{what}: {report}");
    }
}

fn every_op<T: Element>(gpu: &Gpu, day: &Activations) {
    for op in Op::ALL {
        for &(rows, cols) in SHAPES {
            check_op::<T>(gpu, day, op, rows, cols);
        }
    }
}

/// The rectifiers that take scalars, with [`OTHER_PARAMS`], over the same shapes.
fn rectifiers_with_other_scalars<T: Element>(gpu: &Gpu, day: &Activations) {
    let takes_scalars = Op::ALL
        .into_iter()
        .filter(|&op| !OpParams::default().scalars(op).is_empty());
    for op in takes_scalars {
        for params in OTHER_PARAMS {
            for &(rows, cols) in SHAPES {
                let seed = (rows * 31 + cols) as u64;
                let host = HostInputs::<T>::random(op, rows, cols, seed).with_params(params);
                check_inputs(gpu, day, &host, "random");
            }
        }
    }
}

/// x values where the ops' choices show: zeros of both signs, numbers just either side of 0,
/// HardTanh's bounds and the numbers just either side of each (a factor 1 +- 2^-7 from it,
/// which every storage type holds), infinities, NaN, values of both signs in between; for
/// SiLU, where e^-x overflows f32 (x < -88.7) or sends `1 + e` past __fdividef's range.
fn special_x(op: Op, params: &OpParams) -> Vec<f64> {
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    let mut xs = vec![0.0, -0.0, inf, -inf, nan, 0.5, -3.0, 7.0];
    if op.is_piecewise_linear() {
        xs.extend([2f64.powi(-20), -(2f64.powi(-20))]);
        for bound in [params.min_val as f64, params.max_val as f64] {
            let step = 2f64.powi(-7) * bound.abs();
            xs.extend([bound, bound - step, bound + step]);
        }
    } else {
        xs.extend([-1.2785, 20.0, -20.0, 88.0, -88.0, 100.0, -100.0]);
    }
    // A count with no factor in common with the dy values' (8 or 7; the test without a GPU
    // checks it), so that every x meets every dy.
    if xs.len().is_multiple_of(2) {
        xs.push(-0.75);
    }
    xs
}

/// dy values: NaN and, for the rectifiers, infinities, which their selects drop where the
/// gradient is 0 (a product with 0 would keep them as NaN). SiLU's backward multiplies, as
/// torch's does, so an infinite dy there meets f32's underflow of s at x < -88 (0 * inf) and
/// the f64 reference's tiny s: they differ, and torch's is the f32 one; it is left out.
fn special_dy(op: Op) -> Vec<f64> {
    let mut dys = vec![1.0, -0.5, 0.375, f64::NAN, 2.0, -0.0, 0.75];
    if op.is_piecewise_linear() {
        dys = vec![
            1.0,
            -0.5,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            2.0,
            -0.0,
            0.375,
        ];
    }
    dys
}

/// `op`'s inputs over `rows x cols` with x and dy cycling through the special values.
fn special_inputs<T: Element>(op: Op, params: OpParams, rows: usize, cols: usize) -> HostInputs<T> {
    let mut host = HostInputs::<T>::random(op, rows, cols, 7).with_params(params);
    let cycle = |values: Vec<f64>| -> Vec<T> {
        (0..rows * cols)
            .map(|i| T::from_f64(values[i % values.len()]))
            .collect()
    };
    for (name, tensor) in op.inputs().iter().zip(host.tensors.iter_mut()) {
        *tensor = match *name {
            "dy" => cycle(special_dy(op)),
            _ => cycle(special_x(op, &params)),
        };
    }
    host
}

/// The ops checked on the special inputs: the rectifiers (with torch's scalars and the
/// others) and SiLU.
fn special_problems() -> Vec<(Op, OpParams)> {
    let mut problems = Vec::new();
    for op in Op::ALL {
        if op.is_piecewise_linear() {
            problems.push((op, OpParams::default()));
            if !OpParams::default().scalars(op).is_empty() {
                problems.extend(OTHER_PARAMS.map(|p| (op, p)));
            }
        } else if matches!(op, Op::Silu | Op::SiluBwd) {
            problems.push((op, OpParams::default()));
        }
    }
    problems
}

/// (rows, cols) of the special inputs: the values land in whole packs and in the leftovers;
/// the larger two hold every (x, dy) pair.
const SPECIAL_SHAPES: &[(usize, usize)] = &[(1, 37), (3, 4099), (16, 1024)];

fn special_points<T: Element>(gpu: &Gpu, day: &Activations) {
    for (op, params) in special_problems() {
        for &(rows, cols) in SPECIAL_SHAPES {
            check_inputs(
                gpu,
                day,
                &special_inputs::<T>(op, params, rows, cols),
                "special",
            );
        }
    }
}

#[test]
fn special_inputs_meet_every_boundary_and_every_dy() {
    // Runs without a GPU: the inputs the GPU test below checks do hold what it claims.
    for (op, params) in special_problems() {
        let host = special_inputs::<f32>(op, params, 3, 4099);
        let x = host.tensors.last().unwrap();
        assert!(
            x.iter().any(|v| *v == 0.0 && v.is_sign_negative()),
            "{op:?}: -0.0"
        );
        assert!(
            x.iter().any(|v| *v == 0.0 && v.is_sign_positive()),
            "{op:?}: 0"
        );
        assert!(x.iter().any(|v| v.is_nan()), "{op:?}: NaN");
        assert!(x.contains(&f32::INFINITY) && x.contains(&f32::NEG_INFINITY));
        if op.is_piecewise_linear() {
            assert!(
                x.contains(&params.min_val) && x.contains(&params.max_val),
                "{op:?}"
            );
        }
        if host.tensors.len() == 2 {
            // Every x value meets every dy value: the two cycles have coprime lengths.
            let (nx, ndy) = (special_x(op, &params).len(), special_dy(op).len());
            assert_eq!(gcd(nx, ndy), 1, "{op:?}: {nx} x values, {ndy} dy values");
            assert!(nx * ndy <= 3 * 4099);
            assert!(host.tensors[0].iter().any(|v| v.is_nan()));
        }
        // The reference has NaN where torch does: relu(NaN), silu(-inf), ...
        assert!(host.reference().iter().any(|v| v.is_nan()), "{op:?}");
    }
}

/// rectifiers.cu's arithmetic on the CPU: f32 from the stored inputs, the op in f32, rounded
/// to `T` (to nearest even, as `cvt.rn`).
fn rectifier_replay<T: Element>(host: &HostInputs<T>) -> Vec<T> {
    let p = &host.params;
    let f32s = |t: &Vec<T>| -> Vec<f32> { t.iter().map(|v| v.to_f64() as f32).collect() };
    let x = f32s(host.tensors.last().unwrap());
    let dy = f32s(&host.tensors[0]);
    let out = |i: usize| -> f32 {
        let (x, dy) = (x[i], dy[i]);
        match host.op {
            Op::Relu => {
                if x <= 0.0 {
                    0.0
                } else {
                    x
                }
            }
            Op::ReluBwd => {
                if x <= 0.0 {
                    0.0
                } else {
                    dy
                }
            }
            Op::LeakyRelu => {
                if x > 0.0 {
                    x
                } else {
                    x * p.negative_slope
                }
            }
            Op::LeakyReluBwd => {
                if x > 0.0 {
                    dy
                } else {
                    dy * p.negative_slope
                }
            }
            Op::Hardtanh => x.clamp(p.min_val, p.max_val),
            Op::HardtanhBwd => {
                if x <= p.min_val || x >= p.max_val {
                    0.0
                } else {
                    dy
                }
            }
            other => panic!("{other:?} is not a rectifier"),
        }
    };
    (0..x.len()).map(|i| T::from_f64(out(i) as f64)).collect()
}

fn rectifiers_replay_exactly<T: Element>() {
    for (op, params) in special_problems() {
        if !op.is_piecewise_linear() {
            continue;
        }
        let host = special_inputs::<T>(op, params, 3, 4099);
        let report = check::compare(
            &rectifier_replay(&host),
            &host.reference(),
            &[3, 4099],
            exact_tolerance(),
        );
        assert!(report.passed(), "{op:?} {} {params:?}: {report}", T::NAME);
    }
}

#[test]
fn the_rectifiers_f32_arithmetic_matches_the_rounded_reference_exactly() {
    // Runs without a GPU: the zero tolerance holds for a kernel that does what rectifiers.cu
    // says, on the special points, in every storage type (f16's subnormals included).
    rectifiers_replay_exactly::<f32>();
    rectifiers_replay_exactly::<f16>();
    rectifiers_replay_exactly::<bf16>();
}

/// `SiluWith<AccurateExp>` and `SiluBwdWith<AccurateExp>` on the CPU: `expf` as the exact e^a
/// rounded to f32 (it overflows to inf past 88.7 as expf does), `__fdividef(1, d)` as 1 / d
/// except its documented 0 for d > 2^126, then the kernels' f32 steps and the rounding to `T`.
fn silu_replay<T: Element>(host: &HostInputs<T>) -> Vec<T> {
    let sigmoid = |x: f32| -> f32 {
        let d = 1.0 + ((-x) as f64).exp() as f32;
        if d > 2f32.powi(126) { 0.0 } else { 1.0 / d }
    };
    let f32s = |t: &Vec<T>| -> Vec<f32> { t.iter().map(|v| v.to_f64() as f32).collect() };
    let x = f32s(host.tensors.last().unwrap());
    let dy = f32s(&host.tensors[0]);
    let out = |i: usize| -> f32 {
        let s = sigmoid(x[i]);
        match host.op {
            Op::Silu => x[i] * s,
            Op::SiluBwd => dy[i] * s * x[i].mul_add(1.0 - s, 1.0),
            other => panic!("{other:?} is not SiLU"),
        }
    };
    (0..x.len()).map(|i| T::from_f64(out(i) as f64)).collect()
}

fn silu_replays_within_tolerance<T: Element>() {
    for op in [Op::Silu, Op::SiluBwd] {
        let host = special_inputs::<T>(op, OpParams::default(), 3, 4099);
        let report = check::compare(
            &silu_replay(&host),
            &host.reference(),
            &[3, 4099],
            tolerance_for::<T>(1),
        );
        assert!(report.passed(), "{op:?} {}: {report}", T::NAME);
    }
}

#[test]
fn silu_arithmetic_meets_the_reference_at_infinities_nan_and_overflow() {
    // Runs without a GPU: NaN exactly where the reference has NaN (silu(-inf), the gradient at
    // +-inf), 0 where e^-x overflows, within the tolerance elsewhere.
    silu_replays_within_tolerance::<f32>();
    silu_replays_within_tolerance::<f16>();
    silu_replays_within_tolerance::<bf16>();
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[test]
fn every_op_and_version_matches_the_reference() {
    let Some((gpu, day)) = testing::day_or_skip("day13 GPU correctness", Activations::load) else {
        return;
    };
    every_op::<f32>(&gpu, &day);
    every_op::<f16>(&gpu, &day);
    every_op::<bf16>(&gpu, &day);
    rectifiers_with_other_scalars::<f32>(&gpu, &day);
    rectifiers_with_other_scalars::<f16>(&gpu, &day);
    rectifiers_with_other_scalars::<bf16>(&gpu, &day);
}

#[test]
fn rectifiers_and_silu_choose_as_torch_at_kinks_infinities_and_nan() {
    let Some((gpu, day)) = testing::day_or_skip("day13 GPU special points", Activations::load)
    else {
        return;
    };
    special_points::<f32>(&gpu, &day);
    special_points::<f16>(&gpu, &day);
    special_points::<bf16>(&gpu, &day);
}

#[test]
fn bias_dropout_add_over_more_row_groups_than_the_grid_holds() {
    let Some((gpu, day)) =
        testing::day_or_skip("day13 GPU bias-dropout-add, many rows", Activations::load)
    else {
        return;
    };
    // 262147 rows = 65537 groups of 4 (and 3 rows over): the grid's y stops at 65535, so
    // blocks go round the row loop twice.
    check_op::<f16>(&gpu, &day, Op::BiasDropoutAdd, 262_147, 8);
    check_op::<f32>(&gpu, &day, Op::BiasDropoutAdd, 262_147, 3);
}

#[test]
fn wrong_versions_and_sizes_are_refused() {
    let Some((gpu, day)) = testing::day_or_skip("day13 GPU launcher checks", Activations::load)
    else {
        return;
    };
    let inputs = HostInputs::<f32>::random(Op::GeluTanh, 2, 8, 0)
        .upload(&gpu)
        .unwrap();
    let Err(err) = day.plan::<f32>(&gpu, "unfused", &inputs) else {
        panic!("gelu_tanh has no unfused version");
    };
    assert!(err.is::<Refused>(), "{err}");
    let swiglu = HostInputs::<f32>::random(Op::Swiglu, 2, 8, 0)
        .upload(&gpu)
        .unwrap();
    let Err(err) = day.plan::<f32>(&gpu, "vec_fast", &swiglu) else {
        panic!("swiglu has no vec_fast version");
    };
    assert!(err.is::<Refused>(), "{err}");

    let plan = day.plan::<f32>(&gpu, "vec", &inputs).unwrap();
    let mut launch = plan.launch;
    let mut short = gpu.alloc_poisoned::<f32>(15).unwrap();
    let err = launch(&mut short).unwrap_err();
    assert!(err.to_string().contains("output holds 15"), "{err}");

    let reversed = OpParams {
        min_val: 1.0,
        max_val: -1.0,
        ..OpParams::default()
    };
    let hardtanh = HostInputs::<f32>::random(Op::Hardtanh, 2, 8, 0)
        .with_params(reversed)
        .upload(&gpu)
        .unwrap();
    let Err(err) = day.plan::<f32>(&gpu, "vec", &hardtanh) else {
        panic!("hardtanh with min_val > max_val must be refused");
    };
    assert!(
        format!("{err:#}").contains("min_val 1 is greater than max_val -1"),
        "{err:#}"
    );

    let mut bad = HostInputs::<f32>::random(Op::Swiglu, 2, 8, 0)
        .upload(&gpu)
        .unwrap();
    bad.tensors[1] = gpu.upload(&[1.0f32; 15]).unwrap();
    let Err(err) = day.plan::<f32>(&gpu, "vec", &bad) else {
        panic!("an x of the wrong length must be refused");
    };
    assert!(err.to_string().contains("`x` holds 15"), "{err}");
}

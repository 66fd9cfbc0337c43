//! day23 on the GPU: every version, with both epilogues (exact int32; bf16 scaled per tensor
//! and per channel) and zero points off, per tensor and per channel, against the CPU
//! references, every output, on shapes off every tile (1, primes, one past a tile, k a
//! multiple of 16 but not of the 128-byte k step), and on a shape with more tiles than three
//! waves of 132 SMs. Then k at the int32 bound with the worst-case inputs, the refusals (k
//! not a multiple of 16, k past the bound), and cuBLASLt (the ceiling row) on the same
//! problems. Outputs are poisoned before each run.

use common::Tolerance;
use common::measure::check;
use common::session::{Refused, launch_and_read};
use common::{Gpu, measure::inputs, testing};
use day23::cublaslt::CublasLtInt8;
use day23::problem::{self, DeviceOperands, Quant, Shape};
use day23::{Int8Gemm, Out, OutElement, Version, check_k, max_k};
use half::bf16;

fn shape(m: usize, n: usize, k: usize) -> Shape {
    Shape { m, n, k }
}

fn shapes() -> Vec<Shape> {
    vec![
        shape(1, 1, 16),
        shape(7, 9, 16),
        shape(17, 31, 48),
        shape(128, 256, 128),
        shape(129, 257, 144),
        shape(200, 312, 1008),
        shape(513, 97, 272),
        shape(1000, 1001, 1024),
        shape(64, 1536, 128),
    ]
}

/// The zero points and scales each shape runs with.
fn quants(n: usize) -> Vec<Quant> {
    vec![
        Quant::none(),
        Quant::per_tensor(-3, 7),
        Quant::per_tensor(0, -128),
        Quant::per_tensor(127, 0),
        Quant {
            scale_a: 0.5,
            scale_b: vec![0.125],
            ..Quant::per_tensor(2, -5)
        },
        Quant::per_channel(-3, n, n as u64),
        Quant::per_channel(0, n, 7),
    ]
}

/// Runs `version` on the operands and compares every output with the reference; false
/// when the version refused the problem (only the Hopper version on another GPU may).
fn check_one<T: OutElement>(
    gpu: &Gpu,
    day: &Int8Gemm,
    version: Version,
    ops: &mut DeviceOperands,
    expected: &[f64],
    tolerance: Tolerance,
    what: &str,
) -> bool {
    let s = ops.shape;
    if let Err(e) = day.plan(version, T::OUT, &s) {
        assert!(e.is::<Refused>(), "{what}: {e:#}");
        assert!(
            version.is_hopper_only() && !day.is_hopper(),
            "{what} was refused: {e:#}"
        );
        return false;
    }
    let mut c = gpu.alloc_poisoned::<T>(s.m * s.n).unwrap();
    let got = launch_and_read(gpu, &mut c, &mut |c| day.run(gpu, version, ops, c))
        .unwrap_or_else(|e| panic!("{what}: {e:#}"));
    let report = check::compare(&got, expected, &[s.m, s.n], tolerance);
    assert!(report.passed(), "{what}: {report}");
    true
}

/// Every version and both outputs on `s` with `q`, every output checked; counts the runs of
/// each version in `ran`.
fn check_problem(
    gpu: &Gpu,
    day: &Int8Gemm,
    s: Shape,
    q: &Quant,
    a: &[i8],
    b: &[i8],
    ran: &mut [usize],
) {
    let all: Vec<usize> = (0..s.m * s.n).collect();
    let exact = problem::reference_s32(a, b, q, &s, &all);
    let scaled = problem::scaled(&exact, q, &s, &all);
    let exact: Vec<f64> = exact.into_iter().map(|v| v as f64).collect();
    let mut ops = DeviceOperands::upload(gpu, s, a, b, q).unwrap();
    for (v, version) in Version::ALL.into_iter().enumerate() {
        let what = |out: Out| format!("{} {} {s:?} {q:?}", version.name(), out.name());
        let exact_ran = check_one::<i32>(
            gpu,
            day,
            version,
            &mut ops,
            &exact,
            Tolerance::new(0.0, 0.0),
            &what(Out::S32),
        );
        let scaled_ran = check_one::<bf16>(
            gpu,
            day,
            version,
            &mut ops,
            &scaled,
            problem::bf16_tolerance(),
            &what(Out::Bf16),
        );
        assert_eq!(exact_ran, scaled_ran);
        ran[v] += usize::from(exact_ran);
    }
}

fn assert_every_version_ran(test: &str, gpu: &Gpu, ran: &[usize]) {
    let versions = Version::ALL.map(|v| (v.name(), v.is_hopper_only()));
    testing::assert_every_version_ran_or_needs_hopper(
        test,
        versions,
        ran,
        testing::needs_sm90a(gpu),
    );
}

fn random_operands(s: &Shape, seed: u64) -> (Vec<i8>, Vec<i8>) {
    (
        inputs::uniform(s.m * s.k, -128.0, 127.0, seed),
        inputs::uniform(s.n * s.k, -128.0, 127.0, seed + 1),
    )
}

#[test]
fn every_version_and_epilogue_matches_the_reference_on_odd_shapes() {
    let Some((gpu, day)) = testing::day_or_skip("day23 GPU test", Int8Gemm::load) else {
        return;
    };
    let mut ran = [0; Version::ALL.len()];
    for s in shapes() {
        let (a, b) = random_operands(&s, (s.m * 31 + s.n * 7 + s.k) as u64);
        // The largest shapes (a billion multiply-adds per CPU reference) take one problem
        // without zero points and one with all of them per channel.
        let qs = if s.m * s.n * s.k > 1 << 27 {
            vec![Quant::none(), Quant::per_channel(-3, s.n, s.n as u64)]
        } else {
            quants(s.n)
        };
        for q in qs {
            check_problem(&gpu, &day, s, &q, &a, &b, &mut ran);
        }
    }
    assert_every_version_ran("day23 odd shapes", &gpu, &ran);
}

/// More output tiles than three waves of the H100's 132 SMs (wgmma's 128 x 256 tiles: 21 x 20
/// = 420), so the persistent kernel computes most tiles after its first wave; m and n off the
/// tiles, k = 32 (a quarter of one 128-byte k step). n = 5000 keeps C's rows a multiple of 16
/// bytes in int32 and bf16, so `wgmma_tma_store` stores by TMA here, its staging buffers
/// reused from tile to tile and its boxes clipped at both edges.
#[test]
fn a_persistent_kernel_is_right_after_its_first_wave() {
    let Some((gpu, day)) = testing::day_or_skip("day23 GPU test (multi-wave)", Int8Gemm::load)
    else {
        return;
    };
    let s = shape(2600, 5000, 32);
    assert!(s.m.div_ceil(128) * s.n.div_ceil(256) > 3 * 132);
    let (a, b) = random_operands(&s, 5);
    let mut ran = [0; Version::ALL.len()];
    check_problem(
        &gpu,
        &day,
        s,
        &Quant::per_channel(-3, s.n, 9),
        &a,
        &b,
        &mut ran,
    );
    assert_every_version_ran("day23 multi-wave", &gpu, &ran);
}

/// k at the largest multiple of 16 under the int32 bound, with the inputs that reach it:
/// (a - za)(b - zb) = 255 x (-255) in every term with zero points (-2 147 385 600 in all),
/// and (-128)(-128) = 16384 without (2 147 221 504). One step more is refused.
#[test]
fn k_at_the_int32_bound_is_exact_and_one_more_step_is_refused() {
    let Some((gpu, day)) = testing::day_or_skip("day23 GPU test (k bound)", Int8Gemm::load) else {
        return;
    };
    let mut ran = [0; Version::ALL.len()];
    for (zero_points, a_value, b_value, q) in [
        (true, 127i8, -128i8, Quant::per_tensor(-128, 127)),
        (false, -128, -128, Quant::none()),
    ] {
        let k = max_k(zero_points) / 16 * 16;
        let s = shape(5, 9, k);
        let (a, b) = (vec![a_value; s.m * s.k], vec![b_value; s.n * s.k]);
        let want = problem::reference_s32(&a, &b, &q, &s, &[0])[0];
        assert!(want.abs() > 2_147_000_000 && want.abs() <= i64::from(i32::MAX) + 1);
        check_problem(&gpu, &day, s, &q, &a, &b, &mut ran);
        // Random operands at the same k: the sums' corrections wrap, the result must not.
        let (a, b) = random_operands(&s, 3);
        check_problem(&gpu, &day, s, &q, &a, &b, &mut ran);

        let past = shape(5, 9, k + 16);
        let mut ops =
            DeviceOperands::upload(&gpu, past, &vec![0; 5 * past.k], &vec![0; 9 * past.k], &q)
                .unwrap();
        assert!(check_k(past.k, zero_points).is_err());
        let mut c = gpu.alloc_poisoned::<i32>(past.m * past.n).unwrap();
        for version in Version::ALL {
            let err = day.run(&gpu, version, &mut ops, &mut c).unwrap_err();
            assert!(
                err.to_string().contains("can overflow the int32 output"),
                "{}: {err:#}",
                version.name()
            );
        }
    }
    assert_every_version_ran("day23 k bound", &gpu, &ran);
}

#[test]
fn k_off_16_bytes_is_refused_by_every_version() {
    let Some((gpu, day)) = testing::day_or_skip("day23 GPU test (refusals)", Int8Gemm::load) else {
        return;
    };
    for k in [1, 8, 24, 1000] {
        let s = shape(33, 17, k);
        for version in Version::ALL {
            for out in [Out::S32, Out::Bf16] {
                let err = day.plan(version, out, &s).err().expect("refused");
                assert!(err.is::<common::UsageError>(), "{err:#}");
                assert!(err.to_string().contains("not a multiple of 16"), "{err:#}");
            }
        }
        // No operands can be made for it either.
        let (a, b) = random_operands(&s, 1);
        assert!(DeviceOperands::upload(&gpu, s, &a, &b, &Quant::none()).is_err());
    }
}

/// The ceiling row on the shapes cuBLASLt's INT8 path takes (multiples of 4), exact, and its
/// refusal of the others.
#[test]
fn cublaslt_is_exact_and_refuses_sizes_off_4() {
    let Some(gpu) = testing::gpu_or_skip("day23 GPU test (cuBLASLt)") else {
        return;
    };
    let lt = CublasLtInt8::open(&gpu).unwrap();
    for s in [
        shape(4, 4, 16),
        shape(128, 256, 128),
        shape(1000, 1004, 1024),
        shape(64, 1536, 144),
    ] {
        let (a, b) = random_operands(&s, 11);
        let all: Vec<usize> = (0..s.m * s.n).collect();
        let want: Vec<f64> = problem::reference_s32(&a, &b, &Quant::none(), &s, &all)
            .into_iter()
            .map(|v| v as f64)
            .collect();
        let plan = lt.plan(s.m, s.n, s.k).unwrap();
        let (a_dev, b_dev) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
        let mut c = gpu.alloc_poisoned::<i32>(s.m * s.n).unwrap();
        let got = launch_and_read(&gpu, &mut c, &mut |c| {
            lt.run_int8(&gpu, &plan, &a_dev, &b_dev, c)
        })
        .unwrap();
        let report = check::compare(&got, &want, &[s.m, s.n], Tolerance::new(0.0, 0.0));
        assert!(report.passed(), "cublaslt {s:?}: {report}");
    }
    let err = lt.plan(7, 9, 16).err().expect("refused");
    assert!(
        err.is::<Refused>() && err.to_string().contains("multiples of 4"),
        "{err:#}"
    );
}

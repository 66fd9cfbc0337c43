//! day15 on the GPU: every version against the exact CPU reference over sizes that are not
//! multiples of the float4, the block, the tile or the fused kernel's chunk.

use common::measure::poison_check;
use common::reference::quantize as qref;
use common::session::launch_and_read;
use common::{Element, Gpu, Tolerance, measure::check, measure::inputs, testing};
use cudarc::driver::CudaSlice;
use day15::int8_matmul::{self, Int8Matmul, Shape};
use day15::quantize::{Quantize, Scheme, Version};

const SIZES: &[usize] = &[
    1,
    3,
    4,
    5,
    255,
    1000,
    4097,
    65_537,
    (1 << 20) + 3,
    // Larger than what the fused kernel keeps on chip at this size: its re-read path runs.
    (12 << 20) + 1,
];

/// Runs one quantize version twice (the fused kernel's counter must carry over launches) and
/// checks q exactly, poison-valued elements by a second fill, and the parameters.
fn check_quantize<Q: Element>(
    gpu: &Gpu,
    day: &Quantize,
    scheme: Scheme,
    version: Version,
    x: &[f32],
    want: (qref::QuantParams, Vec<Q>),
) {
    let n = x.len();
    let what = format!("{} {} n={n}", scheme.name(), version.name());
    let (params, q) = want;
    let reference = qref::as_f64(&q);
    let split = poison_check::split::<Q>(&reference);
    let x_dev = gpu.upload(x).unwrap();
    let mut params_dev = gpu.alloc_poisoned::<f32>(2).unwrap();
    let mut out = gpu.alloc_poisoned::<Q>(n).unwrap();
    let mut plan = day.plan(gpu, scheme, version, n).unwrap();
    for run in 0..2 {
        let what = format!("{what} run {run}");
        let mut launch = |out: &mut CudaSlice<Q>| plan.launch(gpu, &x_dev, out, &mut params_dev);
        testing::assert_exact_even_where_poison_valued(
            gpu,
            &split,
            &mut out,
            &mut launch,
            &[n],
            &what,
        );
        let p = gpu.download(&params_dev).unwrap();
        assert_eq!(
            (p[0], p[1]),
            (params.scale, params.zero_point as f32),
            "{what}: scale and zero point"
        );
    }
}

fn check_all_quantize(gpu: &Gpu, day: &Quantize, x: &[f32]) {
    for version in Version::ALL {
        check_quantize(gpu, day, Scheme::Sym, version, x, qref::quantize_sym(x));
        check_quantize(gpu, day, Scheme::Asym, version, x, qref::quantize_asym(x));
    }
}

#[test]
fn quantize_matches_the_cpu_bit_for_bit_on_odd_sizes() {
    let Some((gpu, day)) = testing::day_or_skip("day15 quantize correctness", Quantize::load)
    else {
        return;
    };
    for (i, &n) in SIZES.iter().enumerate() {
        // The range's extreme sits at a random place: the last element, inside the tail.
        let mut x: Vec<f32> = inputs::uniform(n, -3.0, 5.0, i as u64);
        if n > 2 {
            x[n - 1] = -7.25;
        }
        check_all_quantize(&gpu, &day, &x);
    }
}

#[test]
fn quantize_handles_zeros_one_sign_and_ties() {
    let Some((gpu, day)) = testing::day_or_skip("day15 quantize edge cases", Quantize::load) else {
        return;
    };
    // All zero: scale 1. All positive or all negative: the asymmetric range widens to 0.
    check_all_quantize(&gpu, &day, &[0.0; 37]);
    check_all_quantize(&gpu, &day, &inputs::uniform::<f32>(1001, 0.5, 2.0, 9));
    check_all_quantize(&gpu, &day, &inputs::uniform::<f32>(1001, -2.0, -0.5, 10));
    // amax = 127 makes scale 1 and every x.5 a tie: half to even, not away from zero.
    let ties: Vec<f32> = (0..254).map(|i| i as f32 - 126.5).chain([127.0]).collect();
    check_all_quantize(&gpu, &day, &ties);
}

fn check_dequantize<Q: Element>(
    gpu: &Gpu,
    day: &Quantize,
    scheme: Scheme,
    q: &[Q],
    p: qref::QuantParams,
) {
    let n = q.len();
    let want: Vec<f64> = qref::dequantize(q, p)
        .iter()
        .map(|&v| f64::from(v))
        .collect();
    let q_dev = gpu.upload(q).unwrap();
    let params = gpu.upload(&[p.scale, p.zero_point as f32]).unwrap();
    let mut y = gpu.alloc_poisoned::<f32>(n).unwrap();
    let plan = day.plan_dequantize(scheme, n).unwrap();
    let got = launch_and_read(gpu, &mut y, &mut |y| plan.launch(gpu, &q_dev, &params, y)).unwrap();
    let report = check::compare(&got, &want, &[n], Tolerance::EXACT);
    assert!(report.passed(), "dequantize {} n={n}: {report}", Q::NAME);
}

#[test]
fn dequantize_matches_the_cpu_bit_for_bit_on_odd_sizes() {
    let Some((gpu, day)) = testing::day_or_skip("day15 dequantize correctness", Quantize::load)
    else {
        return;
    };
    for (i, &n) in SIZES.iter().enumerate() {
        let x: Vec<f32> = inputs::uniform(n, -3.0, 5.0, 100 + i as u64);
        let (p, q) = qref::quantize_sym(&x);
        check_dequantize(&gpu, &day, Scheme::Sym, &q, p);
        let (p, q) = qref::quantize_asym(&x);
        check_dequantize(&gpu, &day, Scheme::Asym, &q, p);
    }
}

#[test]
fn int8_matmul_is_exact_on_odd_shapes() {
    let Some((gpu, day)) = testing::day_or_skip("day15 int8 matmul correctness", Int8Matmul::load)
    else {
        return;
    };
    let shapes = [
        (1, 1, 1, 0, 0),
        (1, 300, 64, 5, -9),
        (257, 1, 1000, -128, 127),
        (33, 65, 17, -3, 7),
        (128, 128, 32, 1, 1),
        (129, 127, 35, 127, -128),
        (200, 190, 4100, -3, 7),
        // k a multiple of 16 (the 16-byte loader) with partial tiles in m and n.
        (300, 260, 96, 11, -2),
    ];
    for (i, &(m, n, k, za, zb)) in shapes.iter().enumerate() {
        let s = Shape { m, n, k };
        let a: Vec<i8> = inputs::uniform(m * k, -128.0, 127.0, 2 * i as u64);
        let b_t: Vec<i8> = inputs::uniform(n * k, -128.0, 127.0, 2 * i as u64 + 1);
        let want: Vec<f64> = qref::int8_matmul(&a, &b_t, za, zb, m, n, k, None)
            .into_iter()
            .map(|v| v as f64)
            .collect();
        let (a_dev, b_dev) = (gpu.upload(&a).unwrap(), gpu.upload(&b_t).unwrap());
        for version in int8_matmul::Version::ALL {
            let plan = day.plan(version, s).unwrap();
            let mut c = gpu.alloc_poisoned::<i32>(m * n).unwrap();
            let got = launch_and_read(&gpu, &mut c, &mut |c| {
                plan.launch(&gpu, &a_dev, &b_dev, c, za, zb)
            })
            .unwrap();
            let report = check::compare(&got, &want, &[m, n], Tolerance::EXACT);
            assert!(report.passed(), "{} {m}x{n}x{k}: {report}", version.name());
        }
    }
}

#[test]
fn impossible_requests_are_refused() {
    let Some((gpu, day)) = testing::day_or_skip("day15 refusals", Int8Matmul::load) else {
        return;
    };
    let a = gpu.upload(&[1i8; 8]).unwrap();
    let mut c = gpu.alloc_poisoned::<i32>(4).unwrap();
    let naive = int8_matmul::Version::Naive;
    let too_deep = Shape {
        m: 1,
        n: 1,
        k: qref::INT8_MATMUL_MAX_K + 1,
    };
    let err = day.plan(naive, too_deep).err().unwrap();
    assert!(err.to_string().contains("overflow"), "{err}");
    let plan = day.plan(naive, Shape { m: 2, n: 2, k: 3 }).unwrap();
    let err = plan.launch(&gpu, &a, &a, &mut c, 0, 0).unwrap_err();
    assert!(err.to_string().contains("elements"), "{err}");
    let plan = day.plan(naive, Shape { m: 2, n: 2, k: 4 }).unwrap();
    let err = plan.launch(&gpu, &a, &a, &mut c, 300, 0).unwrap_err();
    assert!(err.to_string().contains("int8 range"), "{err}");

    let q = Quantize::load(&gpu).unwrap();
    let x = gpu.upload(&[1.0f32; 8]).unwrap();
    let mut params = gpu.alloc_poisoned::<f32>(2).unwrap();
    // Symmetric q is i8; a u8 buffer is refused, and so is a wrong length.
    let mut wrong_type = gpu.alloc_poisoned::<u8>(8).unwrap();
    let mut plan = q.plan(&gpu, Scheme::Sym, Version::TwoPass, 8).unwrap();
    let err = plan
        .launch(&gpu, &x, &mut wrong_type, &mut params)
        .unwrap_err();
    assert!(err.to_string().contains("must be i8"), "{err}");
    let mut short = gpu.alloc_poisoned::<i8>(7).unwrap();
    assert!(plan.launch(&gpu, &x, &mut short, &mut params).is_err());
    assert!(q.plan(&gpu, Scheme::Sym, Version::Fused, 0).is_err());
}

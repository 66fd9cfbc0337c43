//! day24 on the GPU: quantize and dequantize bit for bit against the CPU reference (NaN,
//! infinity, zero blocks and rounding ties included), and every GEMV and GEMM version over
//! shapes with K = 16, 32, 48 and 4112 (not a multiple of 32: the 8-byte path), N = 1, 7, 129
//! and more rows than the GPU has SMs, into poisoned outputs.

use common::measure::poison_check;
use common::session::{Refused, launch_and_read};
use common::{Gpu, measure::check, measure::inputs, testing};
use day24::Nvfp4Dev;
use day24::gemm::{self, Gemm};
use day24::gemv::{self, Gemv, Weights};
use day24::quantize::Quantize;
use day24::reference::{self as fmt, Nvfp4};
use half::bf16;

fn as_f64(bytes: &[u8]) -> Vec<f64> {
    bytes.iter().map(|&b| f64::from(b)).collect()
}

/// Quantizes `x` (rows x cols) on the GPU twice (the amax scratch must be cleared each time)
/// and compares codes, scales and the tensor scale with the CPU's, exactly.
fn check_quantize(gpu: &Gpu, day: &Quantize, x: &[bf16], rows: usize, cols: usize) {
    let what = format!("quantize {rows} x {cols}");
    let want = fmt::quantize(x, rows, cols);
    let n = rows * cols;
    let x_dev = gpu.upload(x).unwrap();
    let mut packed = gpu.alloc_poisoned::<u8>(n / 2).unwrap();
    let mut plan = day.plan_quantize(gpu, rows, cols).unwrap();
    let reference = as_f64(&want.packed);
    let split = poison_check::split::<u8>(&reference);
    for run in 0..2 {
        gpu.poison(&mut plan.scales).unwrap();
        gpu.poison(&mut plan.tensor_scale).unwrap();
        let what = format!("{what} run {run}");
        let mut launch = |p: &mut _| plan.launch(gpu, &x_dev, p);
        let codes = format!("{what}, codes");
        let dims = [n / 2];
        testing::assert_exact_even_where_poison_valued(
            gpu,
            &split,
            &mut packed,
            &mut launch,
            &dims,
            &codes,
        );
        assert_eq!(
            gpu.download(&plan.scales).unwrap(),
            want.scales,
            "{what}: scales"
        );
        let got_ts = gpu.download(&plan.tensor_scale).unwrap()[0];
        assert_eq!(
            got_ts.to_bits(),
            want.tensor_scale.to_bits(),
            "{what}: tensor scale"
        );
    }
}

/// Dequantizes `q` on the GPU and compares with the CPU's bf16, bit for bit (NaN with NaN).
fn check_dequantize(gpu: &Gpu, day: &Quantize, q: &Nvfp4) {
    let want = fmt::dequantize(q);
    let w = Nvfp4Dev::upload(gpu, q).unwrap();
    let mut y = gpu.alloc_poisoned::<bf16>(q.rows * q.cols).unwrap();
    let plan = day.plan_dequantize(q.rows, q.cols).unwrap();
    let got = launch_and_read(gpu, &mut y, &mut |y| plan.launch(gpu, &w, y)).unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
        assert!(
            same,
            "dequantize {} x {} at {i}: {g} ({:#06x}), the CPU has {w} ({:#06x})",
            q.rows,
            q.cols,
            g.to_bits(),
            w.to_bits()
        );
    }
}

const SHAPES: &[(usize, usize)] = &[
    (1, 16),
    (7, 32),
    (3, 48),
    (129, 4112),
    (1000, 64),
    (5000, 16),
];

#[test]
fn quantize_and_dequantize_match_the_cpu_bit_for_bit() {
    let Some((gpu, day)) = testing::day_or_skip("day24 quantize correctness", Quantize::load)
    else {
        return;
    };
    for (i, &(rows, cols)) in SHAPES.iter().enumerate() {
        let mut x: Vec<bf16> = inputs::uniform(rows * cols, -3.0, 5.0, i as u64);
        // An outlier at the end, inside the last block.
        let last = x.len() - 1;
        x[last] = bf16::from_f32(-97.0);
        check_quantize(&gpu, &day, &x, rows, cols);
        check_dequantize(&gpu, &day, &fmt::quantize(&x, rows, cols));
    }
}

#[test]
fn quantize_handles_zeros_ties_subnormal_scales_and_non_finite_values() {
    let Some((gpu, day)) = testing::day_or_skip("day24 quantize edge cases", Quantize::load) else {
        return;
    };
    let b = bf16::from_f32;
    // All zero: tensor scale 1, every scale and code 0.
    check_quantize(&gpu, &day, &[b(0.0); 64], 2, 32);
    // Ties: amax 2688 makes the tensor scale 1, and the block {6, ties} gets the scale
    // e4m3(6 / 6) = 1, so each value is its own e2m1 input.
    let ties = [
        6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0,
        -0.0,
    ];
    let mut x: Vec<bf16> = ties.iter().map(|&v| b(v)).collect();
    x.extend([b(2688.0)].iter().chain([b(1.0); 15].iter()));
    check_quantize(&gpu, &day, &x, 1, 32);
    let q = fmt::quantize(&x, 1, 32);
    assert_eq!(q.tensor_scale, 1.0);
    assert_eq!(q.scales[0], 0x38); // e4m3 1.0
    // A block tiny next to the amax: its scale is an e4m3 subnormal, or 0 (code 0 written).
    let mut x: Vec<bf16> = inputs::uniform(64, -1.0, 1.0, 5);
    x[0] = b(30000.0);
    for (i, v) in x[16..32].iter_mut().enumerate() {
        *v = b(0.05 * (i as f32 - 7.5)); // block amax / (6 ts) ~ 0.0056: subnormal
    }
    for v in &mut x[32..48] {
        *v = b(1e-9);
    }
    check_quantize(&gpu, &day, &x, 2, 32);
    // Tiny tensors: at amax ~1e-30 every divisor (e4m3 scale x tensor scale) is under
    // 2^-100, where the kernel divides by IEEE division; at ~1e-25 the divisors of the large
    // blocks are over it (one reciprocal per block) and those of the small blocks under.
    for (amax, seed) in [(1e-30f32, 7), (1e-25, 8)] {
        let mut x: Vec<bf16> = inputs::uniform(96, -1.0, 1.0, seed)
            .iter()
            .map(|v: &bf16| b(v.to_f32() * amax))
            .collect();
        // Scale ~0.004 (an e4m3 subnormal): under 2^-100 at amax 1e-25 too.
        for v in &mut x[48..64] {
            *v = b(v.to_f32() * 1e-5);
        }
        check_quantize(&gpu, &day, &x, 2, 48);
    }
    // NaN and infinity: their blocks become NaN, the rest ignore them.
    let mut x: Vec<bf16> = inputs::uniform(96, -2.0, 2.0, 6);
    x[3] = bf16::NAN;
    x[40] = bf16::INFINITY;
    x[95] = bf16::NEG_INFINITY;
    check_quantize(&gpu, &day, &x, 2, 48);
    check_dequantize(&gpu, &day, &fmt::quantize(&x, 2, 48));
}

/// Every GEMV version on `n x k` against the f64 reference of its own weights (NVFP4, or the
/// bf16 they were quantized from), into a poisoned y.
fn check_gemv(gpu: &Gpu, day: &Gemv, n: usize, k: usize, seed: u64) {
    let w_bf16: Vec<bf16> = inputs::uniform(n * k, -1.0, 1.0, seed);
    let x: Vec<bf16> = inputs::uniform(k, -1.0, 1.0, seed + 1);
    let w = fmt::quantize(&w_bf16, n, k);
    let max = |m: &[f64]| m.iter().copied().fold(0.0, f64::max);
    let x_dev = gpu.upload(&x).unwrap();
    let mut y = gpu.alloc_poisoned::<f32>(n).unwrap();
    for version in gemv::Version::ALL {
        let plan = day.plan(version, n, k).unwrap();
        let (want, mag, got) = if version == gemv::Version::Bf16Warp {
            let (want, mag) = common::reference::gemv::gemv(&w_bf16, &x, n, k);
            let w_dev = gpu.upload(&w_bf16).unwrap();
            let got = launch_and_read(gpu, &mut y, &mut |y| {
                plan.launch(gpu, Weights::Bf16(&w_dev), &x_dev, y)
            })
            .unwrap();
            (want, mag, got)
        } else {
            let (want, mag) = fmt::gemv(&w, &x);
            let w_dev = Nvfp4Dev::upload(gpu, &w).unwrap();
            let got = launch_and_read(gpu, &mut y, &mut |y| {
                plan.launch(gpu, Weights::Nvfp4(&w_dev), &x_dev, y)
            })
            .unwrap();
            (want, mag, got)
        };
        let report = check::compare(&got, &want, &[n], gemv::tolerance(k, max(&mag)));
        let version = version.name();
        assert!(report.passed(), "{version} {n} x {k}: {report}");
    }
}

#[test]
fn gemv_versions_are_right_on_odd_shapes() {
    let Some((gpu, day)) = testing::day_or_skip("day24 gemv correctness", Gemv::load) else {
        return;
    };
    let many = 8 * gpu.info.sms as usize + 13; // more rows than one per SM's warp
    let mut seed = 100;
    for &k in &[16, 32, 48, 4112, 8192] {
        for &n in &[1, 7, 129, many] {
            check_gemv(&gpu, &day, n, k, seed);
            seed += 2;
        }
    }
}

/// Shapes up to this many multiply-adds are checked at every output (at most a few hundred
/// million f64 products for the reference, a second or two in a release build).
const FULL_CHECK_MACS: usize = 1 << 28;

#[test]
fn gemm_is_right_on_odd_shapes() {
    let Some((gpu, day)) = testing::day_or_skip("day24 gemm correctness", Gemm::load) else {
        return;
    };
    let shapes = [
        (1, 1, 16),
        (7, 129, 48),
        (129, 7, 32),
        (130, 257, 4112),
        (300, 200, 64),
        // More tiles than SMs: 17 x 13 = 221 blocks of mma_bf16.
        (2100, 1600, 48),
        // wgmma_rs, every output checked: 9 x 16 = 144 tiles of 256 x 128 on its persistent grid
        // of 132 CTAs, so 12 CTAs take a second tile (its loads start under the first tile's
        // last step); one partial k-step.
        (2050, 1930, 16),
        // Scales 4-byte aligned (k a multiple of 64), two k-steps, odd m and n.
        (515, 389, 256),
        // wgmma_rs, sampled in every tile: 17 x 17 = 289 tiles (each CTA takes 2 or 3), k-steps
        // of 128 with a partial last one, scales not 4-byte aligned.
        (4100, 2100, 208),
    ];
    for (i, &(m, n, k)) in shapes.iter().enumerate() {
        let a: Vec<bf16> = inputs::uniform(m * k, -1.0, 1.0, 200 + 2 * i as u64);
        let w_bf16: Vec<bf16> = inputs::uniform(n * k, -1.0, 1.0, 201 + 2 * i as u64);
        let w = fmt::quantize(&w_bf16, n, k);
        let at: Vec<usize> = if m * n * k <= FULL_CHECK_MACS {
            (0..m * n).collect()
        } else {
            common::reference::matmul::sample_outputs_every_tile(m, n, 4096, i as u64)
        };
        let (want, _) = fmt::gemm_at(&a, &w, m, &at);
        let (a_dev, w_dev) = (gpu.upload(&a).unwrap(), Nvfp4Dev::upload(&gpu, &w).unwrap());
        for version in gemm::Version::ALL {
            let plan = match day.plan(&gpu, version, &a_dev, m, n, k) {
                Err(e) if e.is::<Refused>() => {
                    let version = version.name();
                    println!("SKIPPED {version} on {m} x {n} x {k}: not for this GPU or size");
                    continue;
                }
                plan => plan.unwrap(),
            };
            let version = version.name();
            let mut c = gpu.alloc_poisoned::<f32>(m * n).unwrap();
            let got = launch_and_read(&gpu, &mut c, &mut |c| plan.launch(&gpu, &a_dev, &w_dev, c))
                .unwrap();
            let report = check::compare_at(&got, &at, &want, &[m, n], gemm::tolerance(k));
            assert!(report.passed(), "{version} {m} x {n} x {k}: {report}");
            // Every output was written, not only the sampled ones.
            assert!(
                got.iter().all(|v| v.is_finite()),
                "{version} {m} x {n} x {k}: an output was never written"
            );
        }
    }
}

#[test]
fn launchers_refuse_what_the_kernels_cannot_take() {
    let Some((gpu, gemv_day)) = testing::day_or_skip("day24 refusals", Gemv::load) else {
        return;
    };
    let err = gemv_day.plan(gemv::Version::Bf16Warp, 2, 40).err().unwrap();
    assert!(err.to_string().contains("multiple of 16"), "{err}");
    let q = Quantize::load(&gpu).unwrap();
    let err = q.plan_quantize(&gpu, 2, 40).err().unwrap();
    assert!(err.to_string().contains("multiple of 16"), "{err}");
    // A wrong buffer length, each in turn (the shape itself is fine: 5 x 16 needs x of 80 and
    // packed of 40): the launcher must compare every length with rows x cols.
    let mut plan = q.plan_quantize(&gpu, 5, 16).unwrap();
    let w = gpu.upload(&[bf16::from_f32(1.0); 80]).unwrap();
    let short_x = gpu.upload(&[bf16::from_f32(1.0); 64]).unwrap();
    let mut packed = gpu.alloc_poisoned::<u8>(40).unwrap();
    let err = plan.launch(&gpu, &short_x, &mut packed).unwrap_err();
    assert!(err.to_string().contains("needs x of 80"), "{err}");
    let mut short_packed = gpu.alloc_poisoned::<u8>(32).unwrap();
    let err = plan.launch(&gpu, &w, &mut short_packed).unwrap_err();
    assert!(err.to_string().contains("packed of 40"), "{err}");
    // The same plan with the right lengths is taken: the refusals above are the lengths'.
    plan.launch(&gpu, &w, &mut packed).unwrap();
    // The GEMV: x of the wrong length, and NVFP4 weights given to the bf16 version.
    let nv = Nvfp4Dev {
        rows: 5,
        cols: 16,
        packed,
        scales: plan.scales,
        tensor_scale: plan.tensor_scale,
    };
    let mut y5 = gpu.alloc_poisoned::<f32>(5).unwrap();
    let rows4 = gemv_day.plan(gemv::Version::Nvfp4Rows4, 5, 16).unwrap();
    let x = gpu.upload(&[bf16::from_f32(1.0); 40]).unwrap();
    let err = rows4
        .launch(&gpu, Weights::Nvfp4(&nv), &x, &mut y5)
        .unwrap_err();
    assert!(err.to_string().contains("x of 40"), "{err}");
    let x16 = gpu.upload(&[bf16::from_f32(1.0); 16]).unwrap();
    let bf16_warp = gemv_day.plan(gemv::Version::Bf16Warp, 5, 16).unwrap();
    let err = bf16_warp
        .launch(&gpu, Weights::Nvfp4(&nv), &x16, &mut y5)
        .unwrap_err();
    assert!(err.to_string().contains("takes bf16 weights"), "{err}");
    rows4
        .launch(&gpu, Weights::Nvfp4(&nv), &x16, &mut y5)
        .unwrap();
    // wgmma_rs holds A's TMA map from its plan: another A of the same size is an error.
    let gemm_day = Gemm::load(&gpu).unwrap();
    let a = gpu.upload(&[bf16::from_f32(1.0); 48]).unwrap();
    let other_a = gpu.upload(&[bf16::from_f32(1.0); 48]).unwrap();
    match gemm_day.plan(&gpu, gemm::Version::WgmmaRs, &a, 3, 5, 16) {
        Err(e) if e.is::<Refused>() => println!("SKIPPED wgmma_rs on another A: {e}"),
        plan => {
            let plan = plan.unwrap();
            let mut c = gpu.alloc_poisoned::<f32>(15).unwrap();
            let err = plan.launch(&gpu, &other_a, &nv, &mut c).unwrap_err();
            assert!(err.to_string().contains("another A"), "{err}");
            plan.launch(&gpu, &a, &nv, &mut c).unwrap();
        }
    }
}

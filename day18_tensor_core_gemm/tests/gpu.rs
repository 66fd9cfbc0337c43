//! day18 on the GPU: every version (and cuBLAS through `gemm_ex`) in every operand layout
//! against the f64 reference, every output, over sizes that are not multiples of any tile (1,
//! primes, one past a tile), k not a multiple of 8 or of 64, batches, bf16 and f16; outputs
//! poisoned before each run. Each version takes a shape or refuses it exactly as the rules
//! say (k % 8 for K-major operands, m % 8 / n % 8 for MN-major ones, nt only for the
//! mma.sync versions and wgmma_cluster, n % 8 and C's batch stride for the versions that move
//! C by TMA). Then alpha and beta with padded batch strides, beta = 0.5 and 1 over several
//! waves of tiles (wgmma_prefetch_c loads each tile's C during the main loop; wgmma_tma_store
//! adds into C in L2 at beta = 1), views at odd offsets through `Gemm::run`, which version it
//! chooses, and the refusals' wording.

use common::element::Element;
use common::gpu::cublas::{Cublas, GemmEx, Stored};
use common::gpu::cublaslt::{CublasLt, LtProduct};
use common::measure::check::{self, Tolerance};
use common::reference::matmul as reference;
use common::session::{Refused, launch_and_read};
use common::{Gpu, measure::inputs, testing};
use cudarc::driver::CudaSlice;
use day18::{Gemm, GemmShape, Layout, TensorCoreGemm, Version, fp8};
use half::{bf16, f16};

fn shapes() -> Vec<GemmShape> {
    let mut shapes = Vec::new();
    let one = |m, n, k| GemmShape {
        m,
        n,
        k,
        ..GemmShape::square(1)
    };
    for (m, n, k) in [
        (1, 1, 8),
        (1, 1, 1),
        (8, 8, 1),
        (17, 31, 40),
        (24, 40, 13),
        (128, 256, 64),
        (129, 257, 72),
        (136, 264, 72),
        (200, 312, 1000),
        (300, 200, 999),
        (513, 97, 264),
        (520, 96, 264),
        (1000, 1001, 1024),
        (1000, 1000, 1000),
        (64, 1536, 128),
    ] {
        shapes.push(one(m, n, k));
    }
    shapes.push(GemmShape {
        m: 130,
        n: 270,
        k: 136,
        batch: 3,
        ..GemmShape::square(1)
    });
    shapes.push(GemmShape {
        m: 136,
        n: 272,
        k: 200,
        batch: 2,
        ..GemmShape::square(1)
    });
    shapes
}

fn unit_roundoff<T: Element>() -> f64 {
    match T::NAME {
        "f16" => 2f64.powi(-11),
        _ => 2f64.powi(-8),
    }
}

/// Whether `version` should refuse `g`, by the rules the README states.
fn should_refuse(version: Version, g: &GemmEx, hopper: bool) -> bool {
    let layout = Layout::of(g);
    let k_major_operand = !layout.a_mn_major() || !layout.b_mn_major();
    !version.layouts().contains(&layout)
        || (version != Version::MmaLdmatrix && k_major_operand && !g.k.is_multiple_of(8))
        || (layout.a_mn_major() && !g.m.is_multiple_of(8))
        || (layout.b_mn_major() && !g.n.is_multiple_of(8))
        || (version.is_hopper_only() && !hopper)
        || (version.stores_by_tma() && !tma_can_store_c(g))
}

/// The TMA stores (and wgmma_prefetch_c loads) C in rows of 16-byte multiples, matrices
/// 16-byte multiples apart.
fn tma_can_store_c(g: &GemmEx) -> bool {
    g.n.is_multiple_of(8) && (g.batch == 1 || (g.stride_c > 0 && g.stride_c.is_multiple_of(8)))
}

/// cuBLAS and every version on `shape`, every output checked; adds one to `ran[v]` for each
/// version `Version::ALL[v]` that ran (was not refused).
fn check_shape<T: Element>(
    gpu: &Gpu,
    cublas: &Cublas,
    day: &TensorCoreGemm,
    shape: &GemmShape,
    ran: &mut [usize],
) {
    let seed = (shape.m * 31 + shape.n * 7 + shape.k) as u64;
    let a: Vec<T> = inputs::uniform(shape.a_len(), -1.0, 1.0, seed);
    let b: Vec<T> = inputs::uniform(shape.b_len(), -1.0, 1.0, seed + 1);
    let g = shape.gemm_ex();
    let expected = reference::gemm_ex(&a, &b, None, &g);
    let tolerance = reference::tolerance_stored_in(shape.k, unit_roundoff::<T>());
    let out_shape = [shape.batch, shape.m, shape.n];
    let (a_dev, b_dev) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
    let mut c = gpu.alloc_poisoned::<T>(shape.c_len()).unwrap();
    let layout = shape.layout.name();

    let got = launch_and_read(gpu, &mut c, &mut |c| {
        cublas.gemm_ex::<T, T>(&g, &a_dev, &b_dev, c)
    })
    .unwrap();
    let report = check::compare(&got, &expected, &out_shape, tolerance);
    assert!(
        report.passed(),
        "cublas {layout} {shape:?} {}: {report}",
        T::NAME
    );

    for (v, version) in Version::ALL.into_iter().enumerate() {
        let what = format!("{} {layout} {shape:?} {}", version.name(), T::NAME);
        let refuse = should_refuse(version, &g, day.is_hopper());
        if let Err(e) = day.plan::<T>(version, &g) {
            assert!(e.is::<Refused>(), "{what}: {e:#}");
            assert!(refuse, "{what} was refused: {e:#}");
            continue;
        }
        assert!(!refuse, "{what} was taken, but the rules refuse it");
        let got = launch_and_read(gpu, &mut c, &mut |c| {
            day.gemm(gpu, version, &g, &a_dev, &b_dev, c)
        })
        .unwrap_or_else(|e| panic!("{what}: {e:#}"));
        let report = check::compare(&got, &expected, &out_shape, tolerance);
        assert!(report.passed(), "{what}: {report}");
        ran[v] += 1;
    }
}

/// [`check_shape`] on each of `shapes` in every layout, the linear layer's first (if the
/// MN-major descriptor is wrong, nt still passes and the failure names the layout): in bf16,
/// and in f16 too where `f16_in(layout)`. Returns how many shapes each version ran.
fn check_in_every_layout(
    gpu: &Gpu,
    day: &TensorCoreGemm,
    shapes: &[GemmShape],
    f16_in: impl Fn(Layout) -> bool,
) -> [usize; Version::ALL.len()] {
    let cublas = Cublas::open(gpu).unwrap();
    let mut ran = [0; Version::ALL.len()];
    for layout in Layout::ALL {
        for &shape in shapes {
            let shape = GemmShape { layout, ..shape };
            check_shape::<bf16>(gpu, &cublas, day, &shape, &mut ran);
            if f16_in(layout) {
                check_shape::<f16>(gpu, &cublas, day, &shape, &mut ran);
            }
        }
    }
    ran
}

/// Fails for a version that ran on none of the shapes (a version that refused everything
/// would otherwise pass); the Hopper versions on another GPU say so in one line instead.
fn assert_every_version_ran(test: &str, day: &TensorCoreGemm, ran: &[usize]) {
    let versions = Version::ALL.map(|v| (v.name(), v.is_hopper_only()));
    let off_hopper = (!day.is_hopper()).then(|| "needs an sm_90 GPU (sm_90a kernels)".to_string());
    testing::assert_every_version_ran_or_needs_hopper(test, versions, ran, off_hopper);
}

#[test]
fn every_version_and_layout_matches_the_reference_on_odd_shapes() {
    let Some((gpu, day)) = testing::day_or_skip("day18 GPU test", TensorCoreGemm::load) else {
        return;
    };
    let ran = check_in_every_layout(&gpu, &day, &shapes(), |_| true);
    assert_every_version_ran("day18 odd shapes", &day, &ran);
}

/// Shapes with more output tiles than three waves of the H100's 132 SMs (396), every output
/// checked: a persistent kernel (the wgmma versions) computes most tiles after its first
/// wave, which the default run's sampled check sees only at samples. Sizes off every tile
/// (m = 2600 is 20 tile rows and 40; n = 5000 is 19 tile columns of 256 and 136; k = 72 is
/// one k-tile of 64 and 8) but multiples of 8, so every layout's TMA takes them; and a batch
/// whose tiles run across products (6 x 8 x 9 = 432 tiles).
fn multi_wave_shapes() -> Vec<GemmShape> {
    let tiles = |s: &GemmShape| s.batch * s.m.div_ceil(128) * s.n.div_ceil(256);
    let shapes = vec![
        GemmShape {
            m: 2600,
            n: 5000,
            k: 72,
            ..GemmShape::square(1)
        },
        GemmShape {
            m: 1000,
            n: 2056,
            k: 24,
            batch: 6,
            ..GemmShape::square(1)
        },
    ];
    for s in &shapes {
        assert!(tiles(s) > 3 * 132, "{s:?}: only {} tiles", tiles(s));
        // wgmma_cluster counts tiles per cluster of two tile rows.
        assert!(
            s.batch * s.m.div_ceil(256) * s.n.div_ceil(256) > 132,
            "{s:?}"
        );
    }
    shapes
}

#[test]
fn persistent_versions_are_checked_in_full_over_several_waves() {
    let Some((gpu, day)) = testing::day_or_skip("day18 GPU multi-wave", TensorCoreGemm::load)
    else {
        return;
    };
    let ran = check_in_every_layout(&gpu, &day, &multi_wave_shapes(), |l| l == Layout::NT);
    assert_every_version_ran("day18 multi-wave", &day, &ran);
    // Every persistent version took every shape in each of its layouts (none refused).
    for (version, &count) in Version::ALL.iter().zip(&ran) {
        if version.is_hopper_only() && day.is_hopper() {
            let expected = version.layouts().len() * 2 + 2;
            assert_eq!(count, expected, "{} ran {count} shapes", version.name());
        }
    }
}

/// `C = alpha op(A) op(B) + beta C` over the multi-wave shapes, every layout, every output:
/// each CTA of a persistent version reads C for several tiles, so wgmma_prefetch_c's loads of
/// C go round its staging and its barrier's phases more than once (the padded test below has
/// fewer tiles than SMs). Tiles of one k step (k = 24) and of two (k = 72).
#[test]
fn reading_c_over_several_waves() {
    let Some((gpu, day)) =
        testing::day_or_skip("day18 GPU beta over several waves", TensorCoreGemm::load)
    else {
        return;
    };
    let mut ran = [0; Version::ALL.len()];
    // beta = 0.5 reads C (wgmma_prefetch_c's loads); beta = 1 is wgmma_tma_store's
    // reduce-add into C in L2.
    for (layout, (alpha, beta)) in Layout::ALL
        .into_iter()
        .flat_map(|l| [(-0.75, 0.5), (1.0, 1.0)].map(|ab| (l, ab)))
    {
        for shape in multi_wave_shapes() {
            let shape = GemmShape { layout, ..shape };
            let g = GemmEx {
                alpha,
                beta,
                ..shape.gemm_ex()
            };
            let seed = (shape.m * 31 + shape.n * 7 + shape.k) as u64;
            let a: Vec<bf16> = inputs::uniform(shape.a_len(), -1.0, 1.0, seed);
            let b: Vec<bf16> = inputs::uniform(shape.b_len(), -1.0, 1.0, seed + 1);
            let c0: Vec<bf16> = inputs::uniform(shape.c_len(), -1.0, 1.0, seed + 2);
            let expected = reference::gemm_ex(&a, &b, Some(&c0), &g);
            let tolerance = reference::tolerance_stored_in(shape.k, unit_roundoff::<bf16>());
            let (a_dev, b_dev) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
            for (v, version) in Version::ALL.into_iter().enumerate() {
                let what = format!("{} {} beta {beta} {shape:?}", version.name(), layout.name());
                let tolerance = if rounds_twice(version, &g) {
                    two_roundings(tolerance, &expected, g.beta, unit_roundoff::<bf16>())
                } else {
                    tolerance
                };
                if let Err(e) = day.plan::<bf16>(version, &g) {
                    assert!(e.is::<Refused>(), "{what}: {e:#}");
                    assert!(
                        should_refuse(version, &g, day.is_hopper()),
                        "{what} was refused: {e:#}"
                    );
                    continue;
                }
                let mut c = gpu.upload(&c0).unwrap();
                day.gemm(&gpu, version, &g, &a_dev, &b_dev, &mut c)
                    .unwrap_or_else(|e| panic!("{what}: {e:#}"));
                gpu.synchronize().unwrap();
                let got = gpu.download(&c).unwrap();
                let report = check::compare(&got, &expected, &[shape.c_len()], tolerance);
                assert!(report.passed(), "{what}: {report}");
                ran[v] += 1;
            }
        }
    }
    assert_every_version_ran("day18 beta multi-wave", &day, &ran);
    for (version, &count) in Version::ALL.iter().zip(&ran) {
        if version.is_hopper_only() && day.is_hopper() {
            let expected = version.layouts().len() * 2 * 2;
            assert_eq!(count, expected, "{} ran {count} shapes", version.name());
        }
    }
}

/// Whether `version` rounds `alpha op(A) op(B)` to the output type before adding C:
/// wgmma_tma_store's epilogue at beta = 1, whose TMA adds the stored tile into C in L2.
fn rounds_twice(version: Version, g: &GemmEx) -> bool {
    version.adds_into_c_in_l2() && g.beta == 1.0
}

/// The tolerance of a result rounded twice: the product rounded to the output type first,
/// an error relative to the product, not to the result (a product of 10 and a C of -9.8
/// leave 0.2 with an error of the product's half ulp): one output roundoff of the largest
/// product as an absolute allowance, and a second relative one.
fn two_roundings(tolerance: Tolerance, expected: &[f64], beta: f32, unit: f64) -> Tolerance {
    let largest = expected.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    Tolerance {
        // |alpha op(A) op(B)| <= |result| + |beta C|, and C is in [-1, 1].
        atol: tolerance.atol + unit * (largest + f64::from(beta.abs())),
        rtol: 2.0 * tolerance.rtol,
        max_rel_l2: 2.0 * tolerance.max_rel_l2,
    }
}

/// `C = alpha op(A) op(B) + beta C` with every stride padded: A and B matrices 8 elements
/// further apart than their size (the gaps hold data that must not be read), C `c_pad`
/// elements further: 3 (odd: the second product's rows start off a 4-byte boundary, so the
/// epilogue's paired stores must fall back to single ones, and the TMA store refuses) or 8
/// (16 bytes: the TMA store takes it); the gaps must stay as they were.
fn check_alpha_beta<T: Element>(
    gpu: &Gpu,
    cublas: &Cublas,
    day: &TensorCoreGemm,
    layout: Layout,
    (alpha, beta): (f32, f32),
    c_pad: usize,
    ran: &mut [usize],
) {
    let (batch, m, n, k) = (2, 136, 264, 200);
    let g = GemmEx {
        a: layout.a,
        b: layout.b,
        alpha,
        beta,
        batch,
        stride_a: m * k + 8,
        stride_b: k * n + 8,
        stride_c: m * n + c_pad,
        ..GemmEx::new(m, n, k)
    };
    let a: Vec<T> = inputs::uniform(batch * g.stride_a, -1.0, 1.0, 11);
    let b: Vec<T> = inputs::uniform(batch * g.stride_b, -1.0, 1.0, 12);
    let c0: Vec<T> = inputs::uniform(batch * g.stride_c, -1.0, 1.0, 13);
    let products = reference::gemm_ex(&a, &b, Some(&c0), &g);
    // The whole C buffer: products where they go, the gaps untouched.
    let mut expected: Vec<f64> = c0.iter().map(|v| v.to_f64()).collect();
    for (flat, v) in products.iter().enumerate() {
        let (z, ij) = (flat / (m * n), flat % (m * n));
        expected[z * g.stride_c + ij] = *v;
    }
    let tolerance = reference::tolerance_stored_in(k, unit_roundoff::<T>());
    let (a_dev, b_dev) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
    let run_checked =
        |name: &str,
         tolerance: Tolerance,
         launch: &mut dyn FnMut(&mut CudaSlice<T>) -> anyhow::Result<()>| {
            // beta = 0: C poisoned (NaN), which must never be read; otherwise C holds c0.
            let mut c = if beta == 0.0 {
                gpu.alloc_poisoned::<T>(c0.len()).unwrap()
            } else {
                gpu.upload(&c0).unwrap()
            };
            launch(&mut c).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            gpu.synchronize().unwrap();
            let got = gpu.download(&c).unwrap();
            let got = if beta == 0.0 {
                // The gaps were poisoned, not c0: compare the products only.
                let mut kept = Vec::with_capacity(batch * m * n);
                for z in 0..batch {
                    kept.extend_from_slice(&got[z * g.stride_c..z * g.stride_c + m * n]);
                }
                (kept, products.clone())
            } else {
                (got, expected.clone())
            };
            let report = check::compare(&got.0, &got.1, &[got.1.len()], tolerance);
            assert!(report.passed(), "{name}: {report}");
        };
    let what = format!(
        "{} alpha {alpha} beta {beta} C pad {c_pad} {}",
        layout.name(),
        T::NAME
    );
    // cuBLAS, measured on the H100: with C 16-byte aligned (pad 8) and beta != 0 its bf16
    // kernels round alpha op(A) op(B) to bf16 before adding beta C. That first rounding is
    // relative to the product, not to the result (a product of 10 and a C of -9.8 leave 0.2
    // with an error of the product's half ulp), so its row gets one output roundoff of the
    // largest product as an absolute allowance, and a second relative one. Ours round once.
    // wgmma_tma_store's epilogue at beta = 1 rounds the same way (its TMA adds the rounded
    // product into C in L2).
    let cublas_tolerance = if beta != 0.0 {
        two_roundings(tolerance, &expected, beta, unit_roundoff::<T>())
    } else {
        tolerance
    };
    run_checked(&format!("cublas {what}"), cublas_tolerance, &mut |c| {
        cublas.gemm_ex::<T, T>(&g, &a_dev, &b_dev, c)
    });
    for (v, version) in Version::ALL.into_iter().enumerate() {
        if day.plan::<T>(version, &g).is_err() {
            assert!(
                should_refuse(version, &g, day.is_hopper()),
                "{} {what} refused",
                version.name()
            );
            continue;
        }
        let tolerance = if rounds_twice(version, &g) {
            cublas_tolerance
        } else {
            tolerance
        };
        run_checked(&format!("{} {what}", version.name()), tolerance, &mut |c| {
            day.gemm(gpu, version, &g, &a_dev, &b_dev, c)
        });
        ran[v] += 1;
    }
}

#[test]
fn alpha_beta_and_padded_strides_in_every_layout() {
    let Some((gpu, day)) = testing::day_or_skip("day18 GPU alpha/beta", TensorCoreGemm::load)
    else {
        return;
    };
    let cublas = Cublas::open(&gpu).unwrap();
    let mut ran = [0; Version::ALL.len()];
    for layout in Layout::ALL {
        for c_pad in [3, 8] {
            for (alpha, beta) in [(-0.75, 0.5), (2.0, 0.0), (1.0, 1.0)] {
                check_alpha_beta::<bf16>(
                    &gpu,
                    &cublas,
                    &day,
                    layout,
                    (alpha, beta),
                    c_pad,
                    &mut ran,
                );
            }
            check_alpha_beta::<f16>(&gpu, &cublas, &day, layout, (0.5, -1.0), c_pad, &mut ran);
        }
    }
    assert_every_version_ran("day18 alpha/beta", &day, &ran);
}

/// [`Gemm::run`] on views that start `offset` elements into their buffers: 8 (16 bytes, every
/// version may take it), 3 (off 16 bytes: the TMA and cp.async refuse, so layout nt falls back
/// to mma_ldmatrix and the MN-major layouts are refused).
#[test]
fn the_library_entry_point_takes_views_and_refuses_what_it_must() {
    let Some((gpu, gemm)) = testing::day_or_skip("day18 GPU Gemm::run", Gemm::load) else {
        return;
    };
    let (m, n, k) = (72, 80, 96);
    for layout in Layout::ALL {
        for offset in [8usize, 3] {
            let what = format!("{} offset {offset}", layout.name());
            let g = GemmEx {
                a: layout.a,
                b: layout.b,
                alpha: 1.5,
                beta: 0.25,
                ..GemmEx::new(m, n, k)
            };
            let a: Vec<bf16> = inputs::uniform(offset + m * k, -1.0, 1.0, 21);
            let b: Vec<bf16> = inputs::uniform(offset + k * n, -1.0, 1.0, 22);
            let c0: Vec<bf16> = inputs::uniform(offset + m * n, -1.0, 1.0, 23);
            let expected = reference::gemm_ex(&a[offset..], &b[offset..], Some(&c0[offset..]), &g);
            let (a_dev, b_dev) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
            let mut c = gpu.upload(&c0).unwrap();
            let result = {
                let (a_view, b_view) = (a_dev.slice(offset..), b_dev.slice(offset..));
                let mut c_view = c.slice_mut(offset..);
                gemm.run::<bf16>(&gpu, &g, &a_view, &b_view, &mut c_view)
            };
            let aligned = offset.is_multiple_of(8);
            if !aligned && layout != Layout::NT {
                let e = result.expect_err(&what);
                assert!(
                    e.is::<Refused>() && e.to_string().contains("16-byte"),
                    "{what}: {e:#}"
                );
                continue;
            }
            result.unwrap_or_else(|e| panic!("{what}: {e:#}"));
            gpu.synchronize().unwrap();
            let got = gpu.download(&c).unwrap();
            assert_eq!(
                got[..offset],
                c0[..offset],
                "{what}: C before the view was written"
            );
            let tolerance = reference::tolerance_stored_in(k, unit_roundoff::<bf16>());
            let report = check::compare(&got[offset..], &expected, &[m, n], tolerance);
            assert!(report.passed(), "{what}: {report}");
        }
    }
    // Which version it picks: wgmma_tma_store for every layout on Hopper when sizes allow
    // (wgmma_prefetch_c where C is read), wgmma_overlap when C's rows are not 16-byte
    // multiples.
    if gemm.versions().is_hopper() {
        for layout in Layout::ALL {
            let g = GemmEx {
                a: layout.a,
                b: layout.b,
                ..GemmEx::new(128, 256, 64)
            };
            assert_eq!(gemm.choose::<bf16>(&g).unwrap(), Version::WgmmaAuto);
            let accumulating = GemmEx { beta: 1.0, ..g };
            assert_eq!(
                gemm.choose::<bf16>(&accumulating).unwrap(),
                Version::WgmmaAuto
            );
            let reading_c = GemmEx { beta: 0.5, ..g };
            assert_eq!(
                gemm.choose::<bf16>(&reading_c).unwrap(),
                Version::WgmmaPrefetchC
            );
            // n = 250: C's rows are not 16-byte multiples. With B K-major only the TMA store
            // minds (an MN-major B has rows of n too, and every Hopper version refuses).
            if !layout.b_mn_major() {
                let odd_n = GemmEx { n: 250, ..g };
                assert_eq!(gemm.choose::<bf16>(&odd_n).unwrap(), Version::WgmmaOverlap);
                let odd_n = GemmEx {
                    n: 250,
                    ..reading_c
                };
                assert_eq!(gemm.choose::<bf16>(&odd_n).unwrap(), Version::WgmmaOverlap);
            }
        }
        // k = 30 in layout nt: only mma_ldmatrix takes it.
        let odd_k = GemmEx {
            b: Stored::Transposed,
            ..GemmEx::new(64, 64, 30)
        };
        assert_eq!(gemm.choose::<bf16>(&odd_k).unwrap(), Version::MmaLdmatrix);
    }
}

/// The sizes each rule refuses, with its reason in the message.
#[test]
fn refusals_are_refusals() {
    let Some((_gpu, day)) = testing::day_or_skip("day18 refusal test", TensorCoreGemm::load) else {
        return;
    };
    let nt = |m, n, k| GemmEx {
        b: Stored::Transposed,
        ..GemmEx::new(m, n, k)
    };
    let refusal = |v: Version, g: &GemmEx| -> String {
        let Err(e) = day.plan::<bf16>(v, g) else {
            panic!("{} took {g:?}", v.name());
        };
        assert!(e.is::<Refused>(), "{e:#}");
        e.to_string()
    };
    let odd_k = nt(64, 64, 30);
    for v in [
        Version::MmaPipelined,
        Version::WgmmaTma,
        Version::WgmmaOverlap,
        Version::WgmmaTmaStore,
        Version::WgmmaPrefetchC,
        Version::WgmmaN192,
        Version::WgmmaN128,
        Version::WgmmaN64,
        Version::WgmmaAuto,
    ] {
        assert!(refusal(v, &odd_k).contains("multiple of 8"));
    }
    assert!(day.plan::<bf16>(Version::MmaLdmatrix, &odd_k).is_ok());
    assert!(day.plan::<f32>(Version::MmaLdmatrix, &odd_k).is_err());
    if !day.is_hopper() {
        return;
    }
    // MN-major A with m = 1001, MN-major B with n = 1001 (rows of 2002 bytes).
    let tn = |m, n, k| GemmEx {
        a: Stored::Transposed,
        ..GemmEx::new(m, n, k)
    };
    let why = refusal(Version::WgmmaOverlap, &tn(1001, 64, 64));
    assert!(why.contains("m = 1001") && why.contains("[k, m]"), "{why}");
    let why = refusal(Version::WgmmaTma, &GemmEx::new(64, 1001, 64));
    assert!(why.contains("n = 1001") && why.contains("[k, n]"), "{why}");
    // Both MN-major: k is the number of rows, any k goes.
    assert!(
        day.plan::<bf16>(Version::WgmmaOverlap, &tn(64, 64, 30))
            .is_ok()
    );
    // K-major only versions name the layout.
    for v in [
        Version::MmaLdmatrix,
        Version::MmaPipelined,
        Version::WgmmaCluster,
    ] {
        let why = refusal(v, &tn(64, 64, 64));
        assert!(why.contains("K-major") && why.contains("tn"), "{why}");
    }
    // A batch stride the TMA cannot take: 0 (broadcast) and not a multiple of 16 bytes.
    for stride_b in [0, 64 * 64 + 4] {
        let g = GemmEx {
            batch: 2,
            stride_b,
            ..nt(64, 64, 64)
        };
        assert!(refusal(Version::WgmmaOverlap, &g).contains("batch strides"));
    }
    // The TMA store (and wgmma_prefetch_c's loads of C): C's rows (n = 1001) and C's batch
    // stride (not 16 bytes) refused.
    let odd_stride_c = GemmEx {
        batch: 2,
        stride_c: 64 * 64 + 4,
        ..nt(64, 64, 64)
    };
    for v in Version::ALL.into_iter().filter(|v| v.stores_by_tma()) {
        let why = refusal(v, &nt(64, 1001, 64));
        assert!(
            why.contains("n = 1001") && why.contains("TMA stores"),
            "{why}"
        );
        assert!(refusal(v, &odd_stride_c).contains("C's batch stride"));
    }
    assert!(
        day.plan::<bf16>(Version::WgmmaOverlap, &odd_stride_c)
            .is_ok()
    );
}

/// The FP8 versions (e4m3 in, bf16 out) against the f64 reference of the decoded inputs,
/// every output, with `fp8::tolerance`: odd m and n, one past a tile, k from one step of 32
/// to several stages, and a shape of more than three waves; cuBLASLt's FP8 GEMM on the shapes
/// its alignment rule takes. Then the FP8 refusals.
#[test]
fn fp8_versions_match_the_reference() {
    let Some((gpu, day)) = testing::day_or_skip("day18 GPU FP8", TensorCoreGemm::load) else {
        return;
    };
    if !day.is_hopper() {
        println!("SKIPPED day18 GPU FP8: the FP8 versions need an sm_90 GPU (Hopper)");
        return;
    }
    let lt = CublasLt::open(&gpu).unwrap();
    let mut ran = [0usize; Version::FP8.len()];
    for (m, n, k) in [
        (1, 8, 16),
        (17, 40, 32),
        (129, 257, 144),
        (136, 264, 144),
        (200, 312, 1024),
        (1000, 1000, 1008),
        (2600, 5000, 128),
    ] {
        let g = GemmEx {
            b: Stored::Transposed,
            alpha: 0.75,
            ..GemmEx::new(m, n, k)
        };
        let seed = (m * 31 + n * 7 + k) as u64;
        let a = fp8::uniform_e4m3(m * k, seed);
        let b = fp8::uniform_e4m3(n * k, seed + 1);
        let expected = fp8::reference(&fp8::decode(&a), &fp8::decode(&b), (m, n, k), g.alpha);
        let tolerance = fp8::tolerance(k);
        let (a_dev, b_dev) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
        let mut c = gpu.alloc_poisoned::<bf16>(m * n).unwrap();
        let what = format!("{m} x {n} x {k}");
        if let Ok(plan) = lt.plan(LtProduct::E4m3ToBf16, m, n, k) {
            let got = launch_and_read(&gpu, &mut c, &mut |c| {
                lt.run_fp8(&gpu, &plan, &a_dev, &b_dev, c, g.alpha)
            })
            .unwrap();
            let report = check::compare(&got, &expected, &[m, n], tolerance);
            assert!(report.passed(), "cublaslt {what}: {report}");
        }
        for (v, version) in Version::FP8.into_iter().enumerate() {
            let refuse = version.stores_by_tma() && !n.is_multiple_of(8);
            if let Err(e) = day.plan_fp8(version, &g) {
                assert!(
                    refuse && e.is::<Refused>(),
                    "{} {what}: {e:#}",
                    version.name()
                );
                continue;
            }
            assert!(!refuse, "{} took {what}", version.name());
            let got = launch_and_read(&gpu, &mut c, &mut |c| {
                day.gemm_fp8(&gpu, version, &g, &a_dev, &b_dev, c)
            })
            .unwrap_or_else(|e| panic!("{} {what}: {e:#}", version.name()));
            let report = check::compare(&got, &expected, &[m, n], tolerance);
            assert!(report.passed(), "{} {what}: {report}", version.name());
            ran[v] += 1;
        }
    }
    // wgmma_tma_store refuses n = 257 (C's rows must be 16-byte multiples).
    assert_eq!(ran, [7, 6, 6, 6], "FP8 shapes run per version");

    let refusal = |v: Version, g: &GemmEx| -> String {
        let Err(e) = day.plan_fp8(v, g) else {
            panic!("{} took {g:?} in FP8", v.name());
        };
        assert!(e.is::<Refused>(), "{e:#}");
        e.to_string()
    };
    let nt = |m, n, k| GemmEx {
        b: Stored::Transposed,
        ..GemmEx::new(m, n, k)
    };
    // 16 e4m3 per 16-byte piece of a row: k = 24 is not a whole number of them.
    assert!(refusal(Version::WgmmaOverlap, &nt(64, 64, 24)).contains("multiple of 16"));
    let tn = GemmEx {
        a: Stored::Transposed,
        ..GemmEx::new(64, 64, 64)
    };
    assert!(refusal(Version::WgmmaTmaStore, &tn).contains("K-major"));
    assert!(refusal(Version::WgmmaTma, &nt(64, 64, 64)).contains("no FP8 kernel"));
}

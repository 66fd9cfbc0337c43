//! day18 on the GPU: every version (and cuBLAS through `gemm_ex`) against the f64 reference,
//! every output, over sizes that are not multiples of any tile (1, primes, one past a tile),
//! k not a multiple of 8 (refused by the cp.async and TMA versions, taken by mma_ldmatrix),
//! batches, bf16 and f16; outputs poisoned before each run.

use common::check;
use common::cublas::{Cublas, GemmEx, Stored};
use common::element::Element;
use common::reference::matmul as reference;
use common::session::{Refused, launch_and_read};
use common::{Gpu, inputs, testing};
use day18::{GemmShape, Operands, TensorCoreGemm, Version};
use half::{bf16, f16};

fn shapes() -> Vec<GemmShape> {
    let mut shapes = Vec::new();
    let one = |m, n, k| GemmShape { m, n, k, batch: 1 };
    for (m, n, k) in [
        (1, 1, 8),
        (1, 1, 1),
        (17, 31, 40),
        (128, 256, 64),
        (129, 257, 72),
        (200, 300, 1000),
        (300, 200, 999),
        (513, 97, 264),
        (1000, 1001, 1024),
        (64, 1536, 128),
    ] {
        shapes.push(one(m, n, k));
    }
    shapes.push(GemmShape {
        m: 130,
        n: 270,
        k: 136,
        batch: 3,
    });
    shapes
}

fn unit_roundoff<T: Element>() -> f64 {
    match T::NAME {
        "f16" => 2f64.powi(-11),
        _ => 2f64.powi(-8),
    }
}

fn check_shape<T: Element>(gpu: &Gpu, cublas: &Cublas, day: &TensorCoreGemm, shape: &GemmShape) {
    let seed = (shape.m * 31 + shape.n * 7 + shape.k) as u64;
    let a: Vec<T> = inputs::uniform(shape.a_len(), -1.0, 1.0, seed);
    let b: Vec<T> = inputs::uniform(shape.b_len(), -1.0, 1.0, seed + 1);
    let all: Vec<usize> = (0..shape.c_len()).collect();
    let expected = reference::matmul_bt_at(&a, &b, (shape.batch, shape.m, shape.n, shape.k), &all);
    let tolerance = reference::tolerance_stored_in(shape.k, unit_roundoff::<T>());
    let out_shape = [shape.batch, shape.m, shape.n];
    let (a_dev, b_dev) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
    let mut c = gpu.alloc_poisoned::<T>(shape.c_len()).unwrap();

    let g = GemmEx {
        b: Stored::Transposed,
        batch: shape.batch,
        ..GemmEx::new(shape.m, shape.n, shape.k)
    };
    let got = launch_and_read(gpu, &mut c, &mut |c| {
        cublas.gemm_ex::<T, T, _, _, _>(&g, &a_dev, &b_dev, c)
    })
    .unwrap();
    let report = check::compare(&got, &expected, &out_shape, tolerance);
    assert!(report.passed(), "cublas {shape:?} {}: {report}", T::NAME);

    for version in Version::ALL {
        let what = format!("{} {shape:?} {}", version.name(), T::NAME);
        if let Err(e) = day.plan::<T>(version, shape) {
            assert!(e.is::<Refused>(), "{what}: {e:#}");
            // Only the versions that need k % 8 == 0 (or Hopper) refuse.
            let hopper_missing = version.is_hopper_only() && gpu.info.arch != "sm_90";
            assert!(
                !shape.k.is_multiple_of(8) || hopper_missing,
                "{what} was refused: {e:#}"
            );
            assert_ne!(
                version,
                Version::MmaLdmatrix,
                "{what}: mma_ldmatrix takes every shape"
            );
            continue;
        }
        let got = launch_and_read(gpu, &mut c, &mut |c| {
            let ops = Operands {
                a: &a_dev,
                b: &b_dev,
            };
            day.gemm(gpu, version, shape, ops, c)
        })
        .unwrap_or_else(|e| panic!("{what}: {e:#}"));
        let report = check::compare(&got, &expected, &out_shape, tolerance);
        assert!(report.passed(), "{what}: {report}");
    }
}

#[test]
fn every_version_matches_the_reference_on_odd_shapes() {
    let Some(gpu) = testing::gpu_or_skip("day18 GPU test") else {
        return;
    };
    let cublas = Cublas::open(&gpu).unwrap();
    let day = TensorCoreGemm::load(&gpu).unwrap();
    for shape in shapes() {
        check_shape::<bf16>(&gpu, &cublas, &day, &shape);
        check_shape::<f16>(&gpu, &cublas, &day, &shape);
    }
}

#[test]
fn refusals_are_refusals() {
    let Some(gpu) = testing::gpu_or_skip("day18 refusal test") else {
        return;
    };
    let day = TensorCoreGemm::load(&gpu).unwrap();
    let odd_k = GemmShape {
        m: 64,
        n: 64,
        k: 30,
        batch: 1,
    };
    for v in [
        Version::MmaPipelined,
        Version::WgmmaTma,
        Version::WgmmaOverlap,
    ] {
        let Err(e) = day.plan::<bf16>(v, &odd_k) else {
            panic!("{} took k = 30", v.name());
        };
        assert!(
            e.is::<Refused>() && e.to_string().contains("multiple of 8"),
            "{e:#}"
        );
    }
    assert!(day.plan::<bf16>(Version::MmaLdmatrix, &odd_k).is_ok());
    assert!(day.plan::<f32>(Version::MmaLdmatrix, &odd_k).is_err());
}

//! day10 on the GPU: every version against the f64 reference (O and L, every row) over
//! sequence lengths that are not multiples of any tile, both head dims, causal and not,
//! seqlen_q != seqlen_k (rows the causal mask empties), GQA and MQA, variable lengths.

use common::check::{self, Tolerance};
use common::element::Element;
use common::reference::attention::{AttentionShape, attention_forward};
use common::session::{Refused, launch_and_read};
use common::{Gpu, inputs, testing};
use day10::{DeviceProblem, FlashAttention, Tensors, Version};
use half::{bf16, f16};

fn shapes() -> Vec<AttentionShape> {
    let mut shapes = Vec::new();
    for d in [64, 128] {
        for causal in [false, true] {
            for len in [1, 17, 100, 257, 1000] {
                shapes.push(AttentionShape::uniform(2, len, len, 2, 2, d, causal));
            }
            // More queries than keys (causal: the first 157 rows see nothing), and fewer.
            shapes.push(AttentionShape::uniform(1, 257, 100, 2, 2, d, causal));
            shapes.push(AttentionShape::uniform(1, 100, 257, 2, 2, d, causal));
            // GQA (2 query heads per kv head) and MQA.
            shapes.push(AttentionShape::uniform(2, 130, 130, 4, 2, d, causal));
            shapes.push(AttentionShape::uniform(1, 77, 150, 4, 1, d, causal));
            // Variable lengths in one batch, one of them with more queries than keys.
            shapes.push(AttentionShape {
                heads: 2,
                kv_heads: 1,
                head_dim: d,
                seqlens_q: vec![1, 17, 100, 257, 65],
                seqlens_k: vec![1, 30, 100, 200, 64],
                causal,
            });
        }
    }
    shapes
}

fn tolerance<T: Element>() -> (Tolerance, Tolerance) {
    let o = match T::NAME {
        "f16" => Tolerance::new(2e-3, 4e-3).with_max_rel_l2(2e-3),
        _ => Tolerance::new(1.6e-2, 3e-2).with_max_rel_l2(1e-2),
    };
    (o, Tolerance::new(2e-4, 2e-5))
}

fn check_shape<T: Element>(gpu: &Gpu, day: &FlashAttention, shape: &AttentionShape, seed: u64) {
    let d = shape.head_dim;
    let q_len = shape.total_q() * shape.heads * d;
    let k_len = shape.total_k() * shape.kv_heads * d;
    let q: Vec<T> = inputs::uniform(q_len, -2.0, 2.0, seed);
    let k: Vec<T> = inputs::uniform(k_len, -2.0, 2.0, seed + 1);
    let v: Vec<T> = inputs::uniform(k_len, -1.0, 1.0, seed + 2);
    let expected = attention_forward(&q, &k, &v, shape, shape.default_scale());
    let problem = DeviceProblem::new(gpu, shape).unwrap();
    let (q_dev, k_dev, v_dev) = (
        gpu.upload(&q).unwrap(),
        gpu.upload(&k).unwrap(),
        gpu.upload(&v).unwrap(),
    );
    let (o_tol, l_tol) = tolerance::<T>();
    for version in Version::ALL {
        if version == Version::FaHopper && day.fastest() != Version::FaHopper {
            continue; // not a Hopper GPU: said once, in the test below
        }
        let mut o = gpu.alloc_poisoned::<T>(q_len).unwrap();
        let mut lse = gpu
            .alloc_poisoned::<f32>(shape.total_q() * shape.heads)
            .unwrap();
        let mut scores = gpu
            .alloc_poisoned::<f32>((problem.score_bytes() / 4).max(1) as usize)
            .unwrap();
        let got = launch_and_read(gpu, &mut o, &mut |o| {
            let tensors = Tensors {
                q: &q_dev,
                k: &k_dev,
                v: &v_dev,
                lse: &mut lse,
                scores: Some(&mut scores),
            };
            day.forward(gpu, version, &problem, tensors, o)
        })
        .unwrap_or_else(|e| panic!("{} on {shape:?}: {e:#}", version.name()));
        let what = format!("{} {} on {shape:?}", version.name(), T::NAME);
        let o_check = check::compare(&got, &expected.o, &[q_len], o_tol);
        assert!(o_check.passed(), "{what}: O {o_check}");
        let lse_got = gpu.download(&lse).unwrap();
        let l_check = check::compare(&lse_got, &expected.lse, &[lse_got.len()], l_tol);
        assert!(l_check.passed(), "{what}: L {l_check}");
    }
}

#[test]
fn every_version_matches_the_reference_on_odd_shapes() {
    let Some(gpu) = testing::gpu_or_skip("day10 GPU correctness") else {
        return;
    };
    let day = FlashAttention::load(&gpu).unwrap();
    if day.fastest() != Version::FaHopper {
        eprintln!("skipped: fa_hopper needs a Hopper GPU (sm_90a); the other versions run");
    }
    for (i, shape) in shapes().iter().enumerate() {
        check_shape::<bf16>(&gpu, &day, shape, 10 * i as u64);
        if i % 3 == 0 {
            check_shape::<f16>(&gpu, &day, shape, 10 * i as u64 + 5);
        }
    }
}

#[test]
fn sizes_a_version_cannot_take_are_refused() {
    let Some(gpu) = testing::gpu_or_skip("day10 GPU refusals") else {
        return;
    };
    let day = FlashAttention::load(&gpu).unwrap();
    // S of 1 x 200000^2 floats (149 GiB): the naive version refuses, the flash ones plan.
    let long = AttentionShape::uniform(1, 200_000, 200_000, 1, 1, 64, false);
    let problem = DeviceProblem::new(&gpu, &long).unwrap();
    let Err(err) = day.plan::<bf16>(Version::Naive, &problem) else {
        panic!("naive planned a 149 GiB score matrix");
    };
    assert!(
        err.is::<Refused>() && err.to_string().contains("memory wall"),
        "{err}"
    );
    assert!(day.plan::<bf16>(Version::Fa2Mma, &problem).is_ok());
    // Head dim 96: only the naive version is compiled for it.
    let odd = AttentionShape::uniform(1, 10, 10, 1, 1, 96, false);
    let problem = DeviceProblem::new(&gpu, &odd).unwrap();
    assert!(day.plan::<bf16>(Version::Naive, &problem).is_ok());
    let Err(err) = day.plan::<bf16>(Version::Fa2Scalar, &problem) else {
        panic!("fa2_scalar planned head dim 96");
    };
    assert!(err.is::<Refused>(), "{err}");
    let Err(err) = day.plan::<bf16>(Version::FaHopper, &problem) else {
        panic!("fa_hopper planned head dim 96");
    };
    assert!(err.is::<Refused>(), "{err}");
    // f32 storage is not an attention dtype here.
    assert!(day.plan::<f32>(Version::Fa2Mma, &problem).is_err());
}

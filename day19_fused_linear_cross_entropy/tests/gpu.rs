//! day19 on the GPU: the fused versions (naive, chunked with 1, several and ragged chunks)
//! against the f64 reference over T of 1, 17, 100 and V of 1, 31, 1000, 4099 (odd V: rows off
//! 16-byte boundaries), with ignored targets (all of them too: loss 0, no NaN), label
//! smoothing and z-loss; cross-entropy alone, both row kernels, out of place and in place.
//! `chunked_day18` (day 18's GEMM as the backend) on the vocabularies it takes (V and Hd
//! multiples of 8), and its refusal of the others before anything runs. Each fused check
//! plans once (`FusedPlan::prepare`) and runs the plan twice, as a timed run does.

use common::gpu::cublas::Cublas;
use common::session::Refused;
use common::session::launch_and_read;
use common::{Gpu, measure::check, measure::inputs, testing};
use day19::reference::{self, CeOptions, IGNORE_INDEX, Rounding};
use day19::{
    CeProblem, CrossEntropy, Day18Gemm, FusedPlan, GemmBackend, RowKernel, Shape, make_inputs,
    make_targets, tolerance,
};
use half::bf16;

const TOKENS: &[usize] = &[1, 17, 100];
const VOCABS: &[usize] = &[1, 31, 1000, 4099];
const HIDDEN: usize = 72;

fn options(eps: f64, z: f64) -> CeOptions {
    CeOptions {
        label_smoothing: eps,
        z_loss: z,
        ignore_index: IGNORE_INDEX,
    }
}

#[allow(clippy::too_many_arguments)]
fn check_fused(
    gpu: &Gpu,
    ce: &CrossEntropy,
    backend: &dyn GemmBackend,
    shape: Shape,
    chunk: usize,
    opts: &CeOptions,
    ignore_fraction: f64,
) {
    let what = format!(
        "fused ({}) {shape:?} chunk {chunk} {opts:?} ignore {ignore_fraction}",
        backend.name()
    );
    let seed = (shape.tokens * 7919 + shape.vocab * 31 + chunk) as u64;
    let (h, w, targets) = make_inputs(shape, ignore_fraction, opts.ignore_index, seed);
    let expected = reference::linear_cross_entropy(&h, &w, &targets, shape, opts, Rounding::Bf16);
    let (h_dev, w_dev, t_dev) = (
        gpu.upload(&h).unwrap(),
        gpu.upload(&w).unwrap(),
        gpu.upload(&targets).unwrap(),
    );
    let mut plan =
        FusedPlan::new(gpu, shape, chunk, opts).unwrap_or_else(|e| panic!("{what}: {e:#}"));
    let chunks = shape.tokens.div_ceil(plan.chunk);
    let mut grads = gpu
        .alloc_poisoned::<bf16>((shape.tokens + shape.vocab) * shape.hidden)
        .unwrap();
    let mut loss = gpu.alloc_poisoned::<f32>(1).unwrap();
    let launches = plan
        .prepare(gpu, ce, backend, &h_dev, &w_dev, &grads)
        .unwrap_or_else(|e| panic!("{what}: {e:#}"));
    // Twice from the same plan and launches, as timed runs launch them (the outputs poisoned
    // before each): both must pass.
    for pass in ["first run", "second run"] {
        let got = launch_and_read(gpu, &mut grads, &mut |g| {
            plan.run(gpu, &launches, &h_dev, &w_dev, &t_dev, opts, g, &mut loss)
        })
        .unwrap_or_else(|e| panic!("{what} {pass}: {e:#}"));
        let split = shape.tokens * shape.hidden;
        // Element by element: the bf16 tolerance plus each element's allowance from the sum of
        // its terms' magnitudes, so a small gradient is held to its own scale, not the largest
        // one's.
        let dh = check::compare_with_slack(
            &got[..split],
            &expected.dh.values,
            &tolerance::gradient_slack(&expected.dh.terms, chunks),
            &[shape.tokens, shape.hidden],
            tolerance::gradient(),
        );
        assert!(dh.passed(), "{what} {pass}: dH {dh}");
        let dw = check::compare_with_slack(
            &got[split..],
            &expected.dw.values,
            &tolerance::gradient_slack(&expected.dw.terms, chunks),
            &[shape.vocab, shape.hidden],
            tolerance::gradient(),
        );
        assert!(dw.passed(), "{what} {pass}: dW {dw}");
        let got_loss = gpu.download(&loss).unwrap();
        let l = check::compare(&got_loss, &[expected.loss], &[1], tolerance::LOSS);
        assert!(l.passed(), "{what} {pass}: loss {l}");
        gpu.poison(&mut loss).unwrap();
    }
}

/// [`check_fused`] with `backend` on each T of `TOKENS` and V of `vocabs` (Hd = 72): naive
/// (one chunk), then chunks of 16 (ragged at 17 and 100) and of 7, with the default options;
/// and chunks of 16 with label smoothing, z-loss and a quarter of the targets ignored.
/// Returns how many checks ran.
fn check_every_token_count(
    gpu: &Gpu,
    ce: &CrossEntropy,
    backend: &dyn GemmBackend,
    vocabs: &[usize],
) -> usize {
    let mut ran = 0;
    for &tokens in TOKENS {
        for &vocab in vocabs {
            let shape = Shape {
                tokens,
                hidden: HIDDEN,
                vocab,
            };
            for chunk in [tokens, 16, 7] {
                check_fused(gpu, ce, backend, shape, chunk, &CeOptions::default(), 0.0);
                ran += 1;
            }
            check_fused(gpu, ce, backend, shape, 16, &options(0.1, 1e-3), 0.25);
            ran += 1;
        }
    }
    ran
}

#[test]
fn fused_versions_match_the_reference_on_odd_shapes() {
    let Some((gpu, ce)) = testing::day_or_skip("day19 GPU fused correctness", CrossEntropy::load)
    else {
        return;
    };
    let cublas = Cublas::open(&gpu).unwrap();
    check_every_token_count(&gpu, &ce, &cublas, VOCABS);
}

/// V that day 18's TMA path takes (multiples of 8) and Hd = 72: 1, several and ragged chunks.
const DAY18_VOCABS: &[usize] = &[8, 1000, 4096];

#[test]
fn chunked_day18_matches_the_reference() {
    let Some((gpu, ce)) = testing::day_or_skip("day19 GPU chunked_day18", CrossEntropy::load)
    else {
        return;
    };
    let day18 = Day18Gemm::load(&gpu).unwrap();
    if !gpu_is_hopper(&gpu) {
        testing::note_skip(
            "day19 chunked_day18 correctness",
            "day 18's MN-major GEMMs need an sm_90 GPU",
        );
        return;
    }
    let ran = check_every_token_count(&gpu, &ce, &day18, DAY18_VOCABS);
    assert!(ran > 0, "chunked_day18 ran no shape");
    // Everything ignored, and the cluster kernel's long rows.
    let shape = Shape {
        tokens: 17,
        hidden: 40,
        vocab: 1000,
    };
    check_fused(&gpu, &ce, &day18, shape, 5, &options(0.1, 1e-2), 1.0);
    let shape = Shape {
        tokens: 33,
        hidden: 64,
        vocab: 32768,
    };
    check_fused(&gpu, &ce, &day18, shape, 8, &options(0.05, 1e-4), 0.1);
}

fn gpu_is_hopper(gpu: &Gpu) -> bool {
    gpu.info.arch == "sm_90"
}

/// V or Hd off a multiple of 8: day 18's dH and dW GEMMs read W and H along V and Hd (MN-major
/// operands), and refuse; the version is refused before anything is enqueued, with the GEMM
/// and the reason in the message.
#[test]
fn chunked_day18_refuses_what_day18_refuses() {
    let Some(gpu) = testing::gpu_or_skip("day19 GPU chunked_day18 refusals") else {
        return;
    };
    let day18 = Day18Gemm::load(&gpu).unwrap();
    let opts = CeOptions::default();
    for (hidden, vocab) in [(72, 31), (72, 4099), (13, 1000)] {
        let shape = Shape {
            tokens: 17,
            hidden,
            vocab,
        };
        let plan = FusedPlan::new(&gpu, shape, 16, &opts).unwrap();
        let err = plan
            .check_backend(&day18)
            .expect_err("day18 took V or Hd off a multiple of 8");
        assert!(err.is::<Refused>(), "{err:#}");
        let text = err.to_string();
        assert!(
            text.contains("day18 GEMM") && text.contains("multiple of 8"),
            "{text}"
        );
        // prepare() refuses the same way, before anything is enqueued.
        let ce = CrossEntropy::load(&gpu).unwrap();
        let (h, w, _) = make_inputs(shape, 0.0, opts.ignore_index, 5);
        let (h, w) = (gpu.upload(&h).unwrap(), gpu.upload(&w).unwrap());
        let grads = gpu.alloc_poisoned::<bf16>((17 + vocab) * hidden).unwrap();
        let err = plan
            .prepare(&gpu, &ce, &day18, &h, &w, &grads)
            .err()
            .expect("day18 prepared V or Hd off a multiple of 8");
        assert!(err.is::<Refused>(), "{err:#}");
    }
    // cuBLAS takes all of them.
    let cublas = Cublas::open(&gpu).unwrap();
    let plan = FusedPlan::new(
        &gpu,
        Shape {
            tokens: 17,
            hidden: 13,
            vocab: 31,
        },
        16,
        &opts,
    )
    .unwrap();
    assert!(plan.check_backend(&cublas).is_ok());
}

/// More chunks than the H100 has SMs (140 chunks of one token): dW accumulated 139 times (day
/// 18's at beta = 1 is the TMA's reduce-add into dW), every chunk's dH and row losses, over a
/// vocabulary that is not a multiple of any tile and is long enough for cluster_push (32776).
#[test]
fn more_chunks_than_sms() {
    let Some((gpu, ce)) = testing::day_or_skip("day19 GPU many chunks", CrossEntropy::load) else {
        return;
    };
    let shape = Shape {
        tokens: 140,
        hidden: 64,
        vocab: 32776,
    };
    assert_eq!(RowKernel::best_for(shape.vocab), RowKernel::ClusterPush);
    let cublas = Cublas::open(&gpu).unwrap();
    check_fused(&gpu, &ce, &cublas, shape, 1, &options(0.05, 1e-4), 0.1);
    if gpu_is_hopper(&gpu) {
        let day18 = Day18Gemm::load(&gpu).unwrap();
        check_fused(&gpu, &ce, &day18, shape, 1, &options(0.05, 1e-4), 0.1);
    } else {
        testing::note_skip("day19 chunked_day18 many chunks", "needs an sm_90 GPU");
    }
}

#[test]
fn all_ignored_gives_zero_loss_and_zero_gradients() {
    let Some((gpu, ce)) = testing::day_or_skip("day19 GPU all ignored", CrossEntropy::load) else {
        return;
    };
    let cublas = Cublas::open(&gpu).unwrap();
    let shape = Shape {
        tokens: 17,
        hidden: 40,
        vocab: 1000,
    };
    check_fused(&gpu, &ce, &cublas, shape, 5, &options(0.1, 1e-2), 1.0);
}

#[test]
fn a_hidden_size_not_a_multiple_of_8_and_a_long_vocabulary_work() {
    let Some((gpu, ce)) = testing::day_or_skip("day19 GPU odd hidden", CrossEntropy::load) else {
        return;
    };
    let cublas = Cublas::open(&gpu).unwrap();
    // Hd = 13: no GEMM operand is 16-byte aligned; V = 32768: the cluster kernel's rows.
    for (hidden, vocab) in [(13, 1000), (64, 32768)] {
        let shape = Shape {
            tokens: 33,
            hidden,
            vocab,
        };
        check_fused(&gpu, &ce, &cublas, shape, 8, &options(0.05, 1e-4), 0.1);
    }
}

fn check_ce_only(
    gpu: &Gpu,
    ce: &CrossEntropy,
    which: RowKernel,
    rows: usize,
    vocab: usize,
    opts: &CeOptions,
    in_place: bool,
) {
    let what = format!("{which:?} {rows} x {vocab} {opts:?} in place {in_place}");
    let seed = (rows * 131 + vocab) as u64;
    let CeProblem {
        logits,
        targets,
        expected,
        inv_count: inv,
    } = CeProblem::new(rows, vocab, 0.2, opts, seed, seed);
    let mut plan = ce
        .plan(gpu, which, (rows, vocab), opts)
        .unwrap_or_else(|e| panic!("{what}: {e:#}"));
    let logits_dev = gpu.upload(&logits).unwrap();
    let targets_dev = gpu.upload(&targets).unwrap();
    let mut loss = gpu.alloc_poisoned::<f32>(1).unwrap();
    let got = if in_place {
        let scratch = &mut plan.scratch;
        let mut buf = gpu.upload(&logits).unwrap();
        ce.count_valid(gpu, &targets_dev, vocab, opts, scratch)
            .unwrap();
        ce.rows_in_place(
            gpu,
            &plan.rows,
            &mut buf.as_view_mut(),
            &targets_dev.as_view(),
            &mut scratch.row_loss.as_view_mut(),
            &scratch.inv_count,
            opts,
        )
        .unwrap_or_else(|e| panic!("{what}: {e:#}"));
        ce.mean_loss(gpu, rows, scratch, &mut loss).unwrap();
        gpu.synchronize().unwrap();
        gpu.download(&buf).unwrap()
    } else {
        let mut grad = gpu.alloc_poisoned::<bf16>(rows * vocab).unwrap();
        launch_and_read(gpu, &mut grad, &mut |g| {
            ce.forward_backward(gpu, &mut plan, &logits_dev, &targets_dev, g, &mut loss)
        })
        .unwrap_or_else(|e| panic!("{what}: {e:#}"))
    };
    let report = check::compare(
        &got,
        &expected.dlogits,
        &[rows, vocab],
        tolerance::dlogits(inv),
    );
    assert!(report.passed(), "{what}: dlogits {report}");
    let got_loss = gpu.download(&loss).unwrap();
    let l = check::compare(&got_loss, &[expected.loss], &[1], tolerance::CE_LOSS);
    assert!(l.passed(), "{what}: loss {l}");
}

#[test]
fn cross_entropy_alone_matches_the_reference() {
    let Some((gpu, ce)) = testing::day_or_skip("day19 GPU cross-entropy", CrossEntropy::load)
    else {
        return;
    };
    // Rows of 8 (one pack, so 7 blocks of a cluster have empty slices), 4096 (a cluster slice of
    // 64 packs), 131072 (the cluster's largest),
    // and vocabularies the cluster kernel refuses but two_pass takes (odd, and over the limit).
    let shapes = [
        (1, 1),
        (3, 7),
        (17, 8),
        (5, 4096),
        (33, 4099),
        (9, 32000),
        // More rows than cluster_stream's 16 clusters x 4 stages: every stage reused.
        (100, 4104),
        (4, 131072),
        (2, 131080),
        (3, 200_003),
    ];
    for which in RowKernel::ALL {
        let name = which.name();
        // A version that refused every shape would pass this test without running.
        let mut ran = 0;
        for &(rows, vocab) in &shapes {
            if which.refusal(vocab).is_some() {
                continue;
            }
            ran += 1;
            for in_place in [false, true] {
                check_ce_only(
                    &gpu,
                    &ce,
                    which,
                    rows,
                    vocab,
                    &CeOptions::default(),
                    in_place,
                );
            }
            check_ce_only(&gpu, &ce, which, rows, vocab, &options(0.1, 1e-4), false);
        }
        assert!(ran >= 4, "{name} ran only {ran} of the shapes");
    }
}

#[test]
fn the_loss_is_deterministic() {
    let Some((gpu, ce)) = testing::day_or_skip("day19 GPU determinism", CrossEntropy::load) else {
        return;
    };
    let (rows, vocab) = (300, 32000);
    let logits = gpu
        .upload(&inputs::logits::<bf16>(rows * vocab, 3))
        .unwrap();
    let targets = gpu
        .upload(&make_targets(rows, vocab, 0.1, IGNORE_INDEX, 3))
        .unwrap();
    let opts = CeOptions::default();
    for which in RowKernel::ALL {
        let name = which.name();
        let mut plan = ce.plan(&gpu, which, (rows, vocab), &opts).unwrap();
        let mut grad = gpu.alloc_poisoned::<bf16>(rows * vocab).unwrap();
        let mut loss = gpu.alloc_poisoned::<f32>(1).unwrap();
        let mut bits = Vec::new();
        for _ in 0..4 {
            ce.forward_backward(&gpu, &mut plan, &logits, &targets, &mut grad, &mut loss)
                .unwrap();
            bits.push(gpu.download(&loss).unwrap()[0].to_bits());
        }
        assert!(
            bits.iter().all(|&b| b == bits[0]),
            "{name}: loss bits differ: {bits:x?}"
        );
    }
}

#[test]
fn refusals_are_clear() {
    let Some((gpu, ce)) = testing::day_or_skip("day19 GPU refusals", CrossEntropy::load) else {
        return;
    };
    let shape = Shape {
        tokens: 4,
        hidden: 8,
        vocab: 10,
    };
    let opts = CeOptions::default();
    assert!(FusedPlan::new(&gpu, shape, 0, &opts).is_err());
    assert!(FusedPlan::new(&gpu, shape, 2, &options(1.5, 0.0)).is_err());
    // Naive logits larger than the device: refused, not attempted.
    let huge = Shape {
        tokens: 1 << 20,
        hidden: 8,
        vocab: 1 << 20,
    };
    let err = FusedPlan::new(&gpu, huge, huge.tokens, &opts)
        .err()
        .expect("refused");
    assert!(err.is::<common::session::Refused>(), "{err:#}");
    // cluster8 on a vocabulary off 16-byte rows: refused when planned.
    let err = ce
        .plan_rows(&gpu, RowKernel::Cluster8, 2, 31)
        .err()
        .expect("refused");
    assert!(err.is::<Refused>(), "{err:#}");
    assert!(err.to_string().contains("16-byte"), "{err:#}");
    let mut loss = gpu.alloc_poisoned::<f32>(1).unwrap();
    // Wrong buffer sizes.
    let mut plan = FusedPlan::new(&gpu, shape, 2, &opts).unwrap();
    let cublas = Cublas::open(&gpu).unwrap();
    let h = gpu.upload(&[bf16::ONE; 4 * 8]).unwrap();
    let short_w = gpu.upload(&[bf16::ONE; 9 * 8]).unwrap();
    let w = gpu.upload(&[bf16::ONE; 10 * 8]).unwrap();
    let short_t = gpu.upload(&[0i32; 3]).unwrap();
    let mut grads = gpu.alloc_poisoned::<bf16>(14 * 8).unwrap();
    let err = plan
        .prepare(&gpu, &ce, &cublas, &h, &short_w, &grads)
        .err()
        .expect("prepared on a short W");
    assert!(err.to_string().contains("do not make"), "{err:#}");
    let launches = plan.prepare(&gpu, &ce, &cublas, &h, &w, &grads).unwrap();
    let err = plan
        .run(
            &gpu, &launches, &h, &w, &short_t, &opts, &mut grads, &mut loss,
        )
        .unwrap_err();
    assert!(err.to_string().contains("do not make"), "{err:#}");
}

/// The binary on a problem past the full reference (T Hd V > 2^31): the sampled f64 check
/// (loss, dH rows, dW rows and columns from every token's lse) must pass for every fused
/// version, with V odd (rows off 16-byte boundaries; chunked_day18 refuses it) and ragged chunks.
#[test]
fn the_binary_checks_a_large_problem_at_samples_and_passes() {
    if testing::gpu_or_skip("day19 GPU sampled check").is_none() {
        return;
    }
    let bin = testing::day_binary(env!("CARGO_BIN_EXE_day19"));
    let out = std::process::Command::new(&bin)
        .args(["--tokens", "1000", "--hidden", "264", "--vocab", "20001"])
        .args([
            "--chunk",
            "384",
            "--ignore-fraction",
            "0.1",
            "--label-smoothing",
            "0.1",
        ])
        .args([
            "--kernel",
            "naive,chunked_cublas",
            "--iters",
            "2",
            "--warmup",
            "1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", bin.display());
    assert!(stderr.contains("f64 reference: loss"), "{stderr}");
}

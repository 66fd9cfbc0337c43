//! day20 on the GPU: every version, in both modes, against the f64 reference (dQ, dK, dV,
//! every element, outputs poisoned) over day 10's grid of shapes: sequence lengths that are
//! not multiples of any tile, head dims 64 and 128 (and 256, which `fa_hopper` and the naive
//! version take), causal and not, seqlen_q != seqlen_k (rows the causal mask empties), GQA and
//! MQA, variable lengths; and the deterministic mode's bits the same over three runs, in
//! different block orders where the version has more than one.

use common::element::Element;
use common::family::attention::{self, GridOutcome};
use common::reference::attention::{AttentionShape, BackwardInputs, attention_forward};
use common::session::{Refused, launch_and_read};
use common::{Gpu, testing};
use day20::{
    BackwardProblem, BackwardTensors, ExpectedGradients, FlashAttention, Gradient, HopperBuffers,
    Mode, Version, Workspace, WorkspaceBuffers,
};
use half::{bf16, f16};

/// The H100's SMs.
const H100_SMS: usize = 132;

/// More tiles than the H100 has SMs (132), fully checked: fa_hopper has 5 key tiles x 8 heads
/// x 4 sequences = 160 (its persistent blocks, one per SM, go round their loop a second time),
/// fa2_mma 320 blocks (two per SM), so the second round of tiles (and, deterministic, the
/// ordered dQ adds across rounds) is checked element by element, not only sampled.
fn multi_wave_shape(d: usize, causal: bool) -> AttentionShape {
    AttentionShape::uniform(4, 600, 600, 8, 8, d, causal)
}

/// The odd shapes both attention days check (`common::attention`), with this day's multi-wave
/// shape in each block of head dim and mask; then the same at head dim 256 (`fa_hopper`'s
/// 64-key tiles make the multi-wave shape 10 x 8 x 4 = 320 blocks, a block per tile).
fn shapes() -> Vec<AttentionShape> {
    let per_block = |d, causal| {
        let mut shapes = attention::odd_test_shapes(d, causal);
        shapes.push(multi_wave_shape(d, causal));
        shapes.push(attention::varlen_test_shape(d, causal));
        shapes
    };
    let mut shapes = attention::test_grid(per_block);
    for causal in [false, true] {
        shapes.extend(per_block(256, causal));
    }
    shapes
}

/// Checks every version and mode on one shape; what fails is added to `out.failures` (the
/// test goes on, so that one GPU run reports every failing case), and each version that ran is
/// counted in `out.ran`.
fn check_shape<T: Element>(
    gpu: &Gpu,
    day: &FlashAttention,
    shape: &AttentionShape,
    seed: u64,
    out: &mut GridOutcome,
) {
    let (q, k, v) = attention::random_qkv::<T>(shape, seed);
    let (q_len, k_len) = (q.len(), k.len());
    let d_o: Vec<T> = attention::random_d_o(shape, seed);
    // The forward from the CPU, stored as the GPU's would be: O in T, L in f32.
    let fwd = attention_forward(&q, &k, &v, shape, shape.default_scale());
    let o: Vec<T> = fwd.o.iter().map(|&x| T::from_f64(x)).collect();
    let lse: Vec<f32> = fwd.lse.iter().map(|&x| x as f32).collect();
    let o64: Vec<f64> = o.iter().map(|x| x.to_f64()).collect();
    let lse64: Vec<f64> = lse.iter().map(|&x| x as f64).collect();
    let x = BackwardInputs {
        q: &q,
        k: &k,
        v: &v,
        d_o: &d_o,
        o: &o64,
        lse: &lse64,
    };
    // Every row and key, with each element's allowance: what the CLI checks at its samples.
    let expected = ExpectedGradients::at(&x, shape, &shape.all_query_rows(), &shape.all_key_rows());

    let problem = BackwardProblem::new(gpu, shape).unwrap();
    let up = |x: &[T]| gpu.upload(x).unwrap();
    let (q_dev, k_dev, v_dev, o_dev, d_o_dev) = (up(&q), up(&k), up(&v), up(&o), up(&d_o));
    let lse_dev = gpu.upload(&lse).unwrap();
    let tensors = || BackwardTensors {
        q: &q_dev,
        k: &k_dev,
        v: &v_dev,
        o: &o_dev,
        d_o: &d_o_dev,
        lse: &lse_dev,
    };
    // Each gradient of `got` against the reference, every element; a failure says `what`.
    let check = |what: &str, got: &[T], failures: &mut Vec<String>| {
        let parts = [
            (Gradient::Dq, &got[..q_len]),
            (Gradient::Dk, &got[q_len..q_len + k_len]),
            (Gradient::Dv, &got[q_len + k_len..]),
        ];
        for (which, part) in parts {
            let report = expected.check(which, part, None, &[part.len()]);
            if !report.passed() {
                failures.push(format!("{what}: {} {report}", which.name()));
            }
        }
    };
    let bits = |x: &[T]| -> Vec<u64> { x.iter().map(|v| v.to_f64().to_bits()).collect() };
    for version in Version::ALL {
        let planned = day.kernel_for::<T>(version, &problem);
        if !version.takes_head_dim(shape.head_dim) {
            // fa2_scalar and fa2_mma at head dim 256: refused with a reason, not failed.
            match planned {
                Err(e) if e.is::<Refused>() => continue,
                _ => {
                    out.failures
                        .push(format!("{} planned {shape:?}", version.name()));
                    continue;
                }
            }
        }
        if let Err(e) = planned {
            if e.is::<Refused>()
                && version == Version::FaHopper
                && testing::needs_sm90a(gpu).is_some()
            {
                continue; // said once, by the test; the other versions still run
            }
            out.failures
                .push(format!("{} refused {shape:?}: {e:#}", version.name()));
            continue;
        }
        let mut launched = false;
        for mode in [Mode::Atomic, Mode::Deterministic] {
            let what = format!("{} {mode:?} {} on {shape:?}", version.name(), T::NAME);
            let mut plan = match day.plan(gpu, version, mode, &problem, tensors()) {
                Ok(plan) => plan,
                Err(e) => {
                    out.failures.push(format!("{what}: {e:#}"));
                    continue;
                }
            };
            let mut grads = gpu.alloc_poisoned::<T>(q_len + 2 * k_len).unwrap();
            let got = match launch_and_read(gpu, &mut grads, &mut |g| plan.launch(g)) {
                Ok(got) => got,
                Err(e) => {
                    out.failures.push(format!("{what}: {e:#}"));
                    continue;
                }
            };
            launched = true;
            check(&what, &got, &mut out.failures);
            // A workspace of the caller's buffers, made as `Workspace::from_buffers` asks (the
            // PyTorch layer's, per call): within the reference's allowance, and in the
            // deterministic mode the same bits as the version's own workspace.
            if version != Version::Naive {
                let theirs = format!("{what}, the caller's workspace");
                match on_callers_buffers(gpu, day, version, mode, &problem, tensors(), &mut grads) {
                    Ok(other) => {
                        check(&theirs, &other, &mut out.failures);
                        if mode == Mode::Deterministic && bits(&got) != bits(&other) {
                            out.failures.push(format!("{theirs}: changed bits"));
                        }
                    }
                    Err(e) => out.failures.push(format!("{theirs}: {e:#}")),
                }
            }
            if mode == Mode::Deterministic {
                let again = launch_and_read(gpu, &mut grads, &mut |g| plan.launch(g)).unwrap();
                if bits(&got) != bits(&again) {
                    out.failures.push(format!("{what}: a rerun changed bits"));
                }
                // fa_hopper numbers its blocks in sections of kv heads: one head per section,
                // then all of them, are two more launch orders that must give the same bits.
                if version == Version::FaHopper {
                    for heads in [1, shape.kv_heads] {
                        plan.set_head_section(heads);
                        let reordered =
                            launch_and_read(gpu, &mut grads, &mut |g| plan.launch(g)).unwrap();
                        if bits(&got) != bits(&reordered) {
                            out.failures
                                .push(format!("{what}: {heads} kv heads per section changed bits"));
                        }
                    }
                }
            }
        }
        if launched {
            *out.ran.entry(version.name()).or_default() += 1;
        }
    }
}

/// The backward in `mode` on a workspace made of buffers allocated here at
/// [`day20::workspace_lens`], as the PyTorch layer makes them: D, L2 and the counters zeroed,
/// the accumulator poisoned.
fn on_callers_buffers<T: Element>(
    gpu: &Gpu,
    day: &FlashAttention,
    version: Version,
    mode: Mode,
    problem: &BackwardProblem,
    t: BackwardTensors<'_, T>,
    grads: &mut cudarc::driver::CudaSlice<T>,
) -> anyhow::Result<Vec<T>> {
    let lens = day20::workspace_lens(version, problem)?;
    let hopper = match version {
        Version::FaHopper => Some(HopperBuffers {
            lse2: gpu.stream.alloc_zeros::<f32>(lens.lse2)?,
            semaphores: gpu.stream.alloc_zeros::<i32>(lens.semaphores)?,
            tickets: gpu.stream.alloc_zeros::<i32>(lens.tickets)?,
        }),
        _ => None,
    };
    let buffers = WorkspaceBuffers {
        delta: gpu.stream.alloc_zeros::<f32>(lens.delta)?,
        dq_accum: gpu.alloc_poisoned::<f32>(lens.dq_accum)?,
        hopper,
    };
    // Owned here, so freed when the plan drops: only a caller that does not own them leaks
    // them (`Workspace::leak`).
    let ws = Workspace::from_buffers(version, problem, buffers)?;
    let mut plan = day.plan_in(gpu, version, mode, problem, t, ws)?;
    launch_and_read(gpu, grads, &mut |g| plan.launch(g))
}

#[test]
fn every_version_and_mode_matches_the_reference_on_odd_shapes() {
    let checks = [check_shape::<bf16>, check_shape::<f16>];
    let (names, load) = (&Version::NAMES, FlashAttention::load);
    attention::check_every_version("day20 GPU correctness", load, names, &shapes(), checks);
}

#[test]
fn the_multi_wave_shape_gives_fa_hopper_more_tiles_than_sms() {
    // No GPU needed: the tiles are the launcher's own grid of them.
    for d in [64, 128, 256] {
        for causal in [false, true] {
            let shape = multi_wave_shape(d, causal);
            let (x, y, z) = day20::hopper_grid(&shape);
            let blocks = (x * y * z) as usize;
            assert!(blocks > H100_SMS, "{blocks} blocks for {shape:?}");
            assert!(shapes().contains(&shape));
        }
    }
}

#[test]
fn sizes_a_version_cannot_take_are_refused() {
    // P and dS of 1 x 100000^2 floats each (75 GiB): naive refuses, the flash ones plan.
    let long = AttentionShape::uniform(1, 100_000, 100_000, 1, 1, 64, false);
    let planned = |gpu: &Gpu, day: &FlashAttention, shape: &AttentionShape, name: &str| {
        let problem = BackwardProblem::new(gpu, shape)?;
        day.kernel_for::<bf16>(Version::from_name(name).unwrap(), &problem)
            .map(drop)
    };
    let load = FlashAttention::load;
    let Some((gpu, day)) = attention::check_refusals("day20 GPU refusals", load, &long, planned)
    else {
        return;
    };
    // f32 storage is not an attention dtype here.
    let odd = BackwardProblem::new(&gpu, &AttentionShape::uniform(1, 10, 10, 1, 1, 96, false));
    assert!(
        day.kernel_for::<f32>(Version::Fa2Mma, &odd.unwrap())
            .is_err()
    );
}

//! day10 on the GPU: every version against the f64 reference (O and L, every row) over
//! sequence lengths that are not multiples of any tile, head dims 64 and 128 (every version)
//! and 256 (`fa_hopper` and naive; `fa2_scalar` and `fa2_mma` must refuse it), causal and not,
//! seqlen_q != seqlen_k (rows the causal mask empties), GQA and MQA, variable lengths, and
//! shapes with several waves of `fa_hopper`'s persistent grid. O is checked with
//! `day10::o_tolerance` and each element's own allowance (`day10::o_slack`), as the CLI does.

use common::element::Element;
use common::family::attention::{self, GridOutcome};
use common::reference::attention::AttentionShape;
use common::session::{Refused, launch_and_read};
use common::{Gpu, testing};
use day10::{DeviceProblem, ExpectedO, FlashAttention, HopperTile, Inputs, Version};
use half::{bf16, f16};

/// The H100's SMs: `fa_hopper` runs one block per SM without a mask, each walking its share
/// of the work items.
const H100_SMS: usize = 132;

/// Shapes that give `fa_hopper` at least three waves of work items on an H100 (three or more
/// items per block of its persistent grid without a mask; as many blocks, handed out as SMs
/// free up, with it), small enough for the f64 reference to stay quick: fully checked, so
/// every item of every wave is compared element by element.
fn multi_wave_shapes(d: usize, causal: bool) -> Vec<AttentionShape> {
    vec![
        // 2 query tiles x 4 heads x 52 sequences = 416 items at either head dim.
        AttentionShape::uniform(52, 200, 200, 4, 2, d, causal),
        // 96 sequences of lengths 1 to 288, keys of other lengths (causal: some rows see
        // nothing): 3 (head dim 128) or 2 query tiles x 4 heads x 96 = 1152 or 768 items,
        // those past a short sequence's end skipped by the walk.
        AttentionShape {
            heads: 4,
            kv_heads: 2,
            head_dim: d,
            seqlens_q: (0..96).map(|i| 1 + (i * 53) % 300).collect(),
            seqlens_k: (0..96).map(|i| 1 + (i * 97) % 300).collect(),
            causal,
        },
    ]
}

/// Head dim 256, which only `fa_hopper` (64-key tiles) and the naive version take: the same
/// odd shapes and packed batch as the other head dims (lengths 1, 17, 100, 257, 1000, 257
/// queries on 100 keys and the reverse, GQA, MQA), and the first multi-wave shape (416 items;
/// the second would double the f64 reference's time for no new case).
fn hd256_shapes(causal: bool) -> Vec<AttentionShape> {
    let mut shapes = attention::odd_test_shapes(256, causal);
    shapes.push(attention::varlen_test_shape(256, causal));
    shapes.extend(multi_wave_shapes(256, causal).into_iter().take(1));
    shapes
}

/// The odd shapes both attention days check (`common::attention`), with this day's multi-wave
/// shapes in each block of head dim and mask, then the head dim 256 blocks.
fn shapes() -> Vec<AttentionShape> {
    let mut shapes = attention::test_grid(|d, causal| {
        let mut shapes = attention::odd_test_shapes(d, causal);
        shapes.push(attention::varlen_test_shape(d, causal));
        shapes.extend(multi_wave_shapes(d, causal));
        shapes
    });
    for causal in [false, true] {
        shapes.extend(hd256_shapes(causal));
    }
    shapes
}

/// Checks every version on one shape, `fa_hopper` with each tile of the head dim (head dim 64
/// has two, one of them chosen by the length and the mask). What fails goes to `out.failures`
/// (the test goes on, so one GPU run reports every failing case); each version that ran is
/// counted in `out.ran`.
fn check_shape<T: Element>(
    gpu: &Gpu,
    day: &FlashAttention,
    shape: &AttentionShape,
    seed: u64,
    out: &mut GridOutcome,
) {
    let (q, k, v) = attention::random_qkv::<T>(shape, seed);
    let expected = ExpectedO::at_rows(&q, &k, &v, shape, &shape.all_query_rows());
    let (q_dev, k_dev, v_dev) = (
        gpu.upload(&q).unwrap(),
        gpu.upload(&k).unwrap(),
        gpu.upload(&v).unwrap(),
    );
    let x = Inputs {
        q: &q_dev,
        k: &k_dev,
        v: &v_dev,
    };
    for version in Version::ALL {
        let what = format!("{} {} on {shape:?}", version.name(), T::NAME);
        let tiles: Vec<&HopperTile> = match version {
            Version::FaHopper => HopperTile::all_for_head_dim(shape.head_dim).collect(),
            _ => Vec::new(),
        };
        if tiles.len() < 2 {
            let problem = DeviceProblem::new(gpu, shape).unwrap();
            check_version(gpu, day, &problem, version, x, &expected, &what, out);
            continue;
        }
        for tile in tiles {
            let what = format!("{what} with {} consumers", tile.consumers);
            let problem = DeviceProblem::new(gpu, shape).unwrap();
            let problem = problem.with_hopper_tile(tile).unwrap();
            check_version(gpu, day, &problem, version, x, &expected, &what, out);
        }
    }
}

/// Checks one version on `problem` (refused where it does not take the head dim).
#[allow(clippy::too_many_arguments)]
fn check_version<T: Element>(
    gpu: &Gpu,
    day: &FlashAttention,
    problem: &DeviceProblem,
    version: Version,
    x: Inputs<'_, T>,
    expected: &ExpectedO,
    what: &str,
    out: &mut GridOutcome,
) {
    let shape = &problem.shape;
    let d = shape.head_dim;
    let q_len = shape.total_q() * shape.heads * d;
    let o_shape = [shape.total_q(), shape.heads, d];
    let l_shape = [shape.total_q(), shape.heads];
    let planned = day.plan::<T>(gpu, version, problem, x);
    if !version.takes_head_dim(d) {
        // fa2_scalar and fa2_mma at head dim 256: refused, with a reason, not failed.
        match planned {
            Err(e) if e.is::<Refused>() => {}
            Err(e) => out
                .failures
                .push(format!("{what}: an error, not a refusal: {e:#}")),
            Ok(_) => out
                .failures
                .push(format!("{what}: planned a head dim it does not take")),
        }
        return;
    }
    let plan = match planned {
        Ok(plan) => plan,
        Err(e) => {
            if e.is::<Refused>()
                && version == Version::FaHopper
                && testing::needs_sm90a(gpu).is_some()
            {
                return; // said once, by the test
            }
            out.failures.push(format!("{what}: refused: {e:#}"));
            return;
        }
    };
    let mut o = gpu.alloc_poisoned::<T>(q_len).unwrap();
    let mut lse = gpu
        .alloc_poisoned::<f32>(shape.total_q() * shape.heads)
        .unwrap();
    let mut scores = match version {
        Version::Naive => Some(
            gpu.alloc_poisoned::<f32>((problem.score_bytes() / 4).max(1) as usize)
                .unwrap(),
        ),
        _ => None,
    };
    let got = launch_and_read(gpu, &mut o, &mut |o| {
        plan.launch(o, &mut lse, scores.as_mut())
    });
    let got = match got {
        Ok(got) => got,
        Err(e) => {
            out.failures.push(format!("{what}: {e:#}"));
            return;
        }
    };
    *out.ran.entry(version.name()).or_default() += 1;
    let o_check = expected.check_o(&got, None, &o_shape);
    if !o_check.passed() {
        out.failures.push(format!("{what}: O {o_check}"));
    }
    let lse_got = gpu.download(&lse).unwrap();
    let l_check = expected.check_lse(&lse_got, None, &l_shape);
    if !l_check.passed() {
        out.failures.push(format!("{what}: L {l_check}"));
    }
}

#[test]
fn every_version_matches_the_reference_on_odd_shapes() {
    let checks = [check_shape::<bf16>, check_shape::<f16>];
    let (names, load) = (&Version::NAMES, FlashAttention::load);
    attention::check_every_version("day10 GPU correctness", load, names, &shapes(), checks);
}

#[test]
fn the_multi_wave_shapes_give_fa_hopper_several_waves() {
    // No GPU needed: the work items are the launcher's own count.
    let all = shapes();
    for d in [64, 128, 256] {
        for causal in [false, true] {
            let multi_wave: Vec<AttentionShape> = multi_wave_shapes(d, causal)
                .into_iter()
                .filter(|shape| all.contains(shape))
                .collect();
            assert!(
                !multi_wave.is_empty(),
                "no multi-wave shape at head dim {d}"
            );
            for (shape, tile) in multi_wave
                .iter()
                .flat_map(|s| HopperTile::all_for_head_dim(d).map(move |tile| (s, tile)))
            {
                let items = day10::hopper_work_items(shape, tile);
                assert!(
                    items >= 3 * H100_SMS,
                    "{items} items for {shape:?}, {tile:?}"
                );
            }
        }
    }
}

#[test]
fn sizes_a_version_cannot_take_are_refused() {
    // S of 1 x 200000^2 floats (149 GiB): the naive version refuses, the flash ones plan.
    let long = AttentionShape::uniform(1, 200_000, 200_000, 1, 1, 64, false);
    let refused = attention::check_refusals(
        "day10 GPU refusals",
        FlashAttention::load,
        &long,
        |gpu, day, shape, name| {
            let version = Version::from_name(name).unwrap();
            day.kernel_for::<bf16>(version, &DeviceProblem::new(gpu, shape)?)
                .map(drop)
        },
    );
    let Some((gpu, day)) = refused else {
        return;
    };
    // Head dim 256: fa_hopper's (on Hopper) and naive's; fa2_scalar and fa2_mma refuse it.
    let wide = AttentionShape::uniform(1, 10, 10, 1, 1, 256, false);
    let problem = DeviceProblem::new(&gpu, &wide).unwrap();
    assert!(day.kernel_for::<bf16>(Version::Naive, &problem).is_ok());
    for version in [Version::Fa2Scalar, Version::Fa2Mma] {
        let Err(err) = day.kernel_for::<f16>(version, &problem) else {
            panic!("{} planned head dim 256", version.name());
        };
        assert!(
            err.is::<Refused>() && err.to_string().contains("not 256"),
            "{err}"
        );
    }
    if testing::needs_sm90a(&gpu).is_none() {
        assert!(day.kernel_for::<bf16>(Version::FaHopper, &problem).is_ok());
    }
    // f32 storage is not an attention dtype here.
    assert!(day.kernel_for::<f32>(Version::Fa2Mma, &problem).is_err());
}

/// Many short items per block, launched again and again: `fa_hopper`'s producer hands each
/// block's items to its consumers through one slot per Q stage (one stage at head dim 256, two
/// at 64 and 128), rewriting a slot as soon as every consumer thread has arrived on q_empty,
/// and ends with an end-of-work mark in the next slot. A consumer that read a slot after its
/// rewrite (a missing or misplaced arrival) would compute another item's rows, or stop early
/// and leave rows unwritten: the first launch is checked against the f64 reference, and every
/// later one, into freshly poisoned outputs, must give the same bits (each row's order of
/// arithmetic is fixed, so a correct kernel repeats itself exactly). Causal with fewer keys
/// than queries, so some items see no key (no S product before their release) and some one
/// tile; ~6 items per block of the 132.
#[test]
fn fa_hopper_hands_items_over_the_same_way_every_launch() {
    const LAUNCHES: usize = 40;
    let Some(gpu) = testing::gpu_or_skip("day10 fa_hopper item hand-off") else {
        return;
    };
    if let Some(why) = testing::needs_sm90a(&gpu) {
        testing::note_skip("day10 fa_hopper item hand-off", &why);
        return;
    }
    let day = FlashAttention::load(&gpu).unwrap();
    let mut failures = Vec::new();
    for d in [64, 128, 256] {
        let shape = AttentionShape {
            heads: 2,
            kv_heads: 1,
            head_dim: d,
            seqlens_q: (0..200).map(|i| 1 + (i * 37) % 300).collect(),
            seqlens_k: (0..200).map(|i| 1 + (i * 53) % 180).collect(),
            causal: true,
        };
        let tile = HopperTile::for_shape(&shape).unwrap();
        let items = day10::hopper_work_items(&shape, tile);
        assert!(items >= 3 * H100_SMS, "{items} items at head dim {d}");
        let q_len = shape.total_q() * shape.heads * d;
        let (q, k, v) = attention::random_qkv::<bf16>(&shape, 7 + d as u64);
        let problem = DeviceProblem::new(&gpu, &shape).unwrap();
        let (q_dev, k_dev, v_dev) = (
            gpu.upload(&q).unwrap(),
            gpu.upload(&k).unwrap(),
            gpu.upload(&v).unwrap(),
        );
        let inputs = Inputs {
            q: &q_dev,
            k: &k_dev,
            v: &v_dev,
        };
        let plan = day
            .plan::<bf16>(&gpu, Version::FaHopper, &problem, inputs)
            .unwrap();
        let mut o = gpu.alloc_poisoned::<bf16>(q_len).unwrap();
        let mut lse = gpu
            .alloc_poisoned::<f32>(shape.total_q() * shape.heads)
            .unwrap();
        // One launch into poisoned O and L; their bits.
        let mut launch = || -> (Vec<u16>, Vec<u32>) {
            gpu.poison(&mut lse).unwrap();
            let got =
                launch_and_read(&gpu, &mut o, &mut |o| plan.launch(o, &mut lse, None)).unwrap();
            let lse_got = gpu.download(&lse).unwrap();
            (
                got.iter().map(|x| x.to_bits()).collect(),
                lse_got.iter().map(|x| x.to_bits()).collect(),
            )
        };
        let first = launch();
        let expected = ExpectedO::at_rows(&q, &k, &v, &shape, &shape.all_query_rows());
        let first_o: Vec<bf16> = first.0.iter().map(|&b| bf16::from_bits(b)).collect();
        let first_l: Vec<f32> = first.1.iter().map(|&b| f32::from_bits(b)).collect();
        let o_check = expected.check_o(&first_o, None, &[shape.total_q(), shape.heads, d]);
        let l_check = expected.check_lse(&first_l, None, &[shape.total_q(), shape.heads]);
        if !o_check.passed() || !l_check.passed() {
            failures.push(format!("head dim {d}, launch 1: O {o_check}, L {l_check}"));
            continue;
        }
        for n in 2..=LAUNCHES {
            let again = launch();
            if again != first {
                let rows = again.0.iter().zip(&first.0).filter(|(a, b)| a != b).count();
                failures.push(format!(
                    "head dim {d}, launch {n}: {rows} of {} O elements differ from launch 1",
                    first.0.len()
                ));
                break;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

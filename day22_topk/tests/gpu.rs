//! day22 on the GPU: every version against the CPU reference, values bit for bit and indices
//! exactly, with poisoned outputs, over widths 1, 2, 31, 33, 1000, 4097, 131071 and 1048576
//! (odd widths take the scalar path, multiples of 4 or 8 the 16-byte one), k of 1, 2, 7, 32, 64,
//! 100, 128, 129, 300 and 1024 (each up to the width: 32 and 128 fill warp_bitonic's smallest and
//! largest list, 129 is the first it refuses, 129 and 300 pad to 256 and 512 in the sorts), 1, 3 and 130 rows (few rows split each row over many
//! warps or blocks: a 4097-wide row leaves warp_bitonic a last segment of one element), f32 and
//! bf16. Row 1 of every 3 has the special values (NaNs of both signs and two payloads, +-inf,
//! +-0, subnormals, ties) scattered over it, row 2 of every 3 is one value repeated (every
//! element a tie, the answer is the first k columns). Each version runs each shape twice, so a
//! run that depends on state left by the one before (radix_select's histograms) fails too.

use common::session::{Refused, launch_and_read};
use common::{Gpu, measure::inputs, testing};
use day22::reference::{self, TopkValue, special_bf16, special_f32};
use day22::{Shape, TopK, VERSIONS};
use half::bf16;

const WIDTHS: &[usize] = &[1, 2, 31, 33, 1000, 4097, 131_071, 1 << 20];
const KS: &[usize] = &[1, 2, 7, 32, 64, 100, 128, 129, 300, 1024];
/// Beyond the grid: more warps and blocks than the GPU holds at once, on short rows.
const EXTRA: &[(usize, usize, usize)] = &[(5000, 33, 7), (3000, 1000, 100)];

fn rows_for(width: usize) -> &'static [usize] {
    if width >= 131_071 {
        &[1, 3]
    } else {
        &[1, 3, 130]
    }
}

/// What each version ran, and what went wrong, over the whole grid.
struct Tally {
    ran: Vec<(&'static str, usize)>,
    failures: Vec<String>,
}

impl Tally {
    fn new() -> Self {
        Self {
            ran: VERSIONS.iter().map(|&v| (v, 0)).collect(),
            failures: Vec::new(),
        }
    }
}

/// Logits, with row r % 3 == 1 sprinkled with the special values (each twice when the row is
/// long enough) and row r % 3 == 2 all one value (-0.0 or 1.5 in turn).
fn input<T: TopkValue>(shape: Shape, specials: &[T], seed: u64) -> Vec<T> {
    let mut x: Vec<T> = inputs::logits(shape.elements(), seed);
    for (r, row) in x.chunks_exact_mut(shape.width).enumerate() {
        match r % 3 {
            1 => {
                let w = row.len();
                for j in 0..32.min(w) {
                    row[j * w / 32.min(w)] = specials[j % specials.len()];
                }
            }
            2 => row.fill(T::from_f64(if r % 2 == 0 { -0.0 } else { 1.5 })),
            _ => {}
        }
    }
    x
}

fn check_shape<T: TopkValue>(gpu: &Gpu, day: &TopK, shape: Shape, specials: &[T], t: &mut Tally) {
    let seed = (shape.rows * 7919 + shape.width * 31 + shape.k) as u64;
    let x = input(shape, specials, seed);
    let expected_indices = reference::top_k_indices(&x, shape.width, shape.k);
    let expected_values = reference::gather(&x, shape.width, shape.k, &expected_indices);
    let x_dev = gpu.upload(&x).unwrap();
    let out_shape = [shape.rows, shape.k];
    let what = format!(
        "{} x {}, k {}, {}",
        shape.rows,
        shape.width,
        shape.k,
        T::NAME
    );
    for (version, ran) in t.ran.iter_mut() {
        let mut plan = match day.plan::<T>(gpu, version, shape) {
            Ok(plan) => plan,
            Err(e) if e.is::<Refused>() => {
                // Only warp_bitonic may refuse, and only above its k.
                if *version != "warp_bitonic" || shape.k <= day22::warp_bitonic::MAX_K {
                    t.failures.push(format!("{version} {what}: refused: {e}"));
                }
                continue;
            }
            Err(e) => panic!("{version} {what}: {e:#}"),
        };
        let mut values = gpu.alloc_poisoned::<T>(shape.outputs()).unwrap();
        let mut indices = gpu.alloc_poisoned::<u32>(shape.outputs()).unwrap();
        for run in ["first run", "second run"] {
            gpu.poison(&mut indices).unwrap();
            let got_values = launch_and_read(gpu, &mut values, &mut |v| {
                (plan.launch)(&x_dev, v, &mut indices)
            })
            .unwrap_or_else(|e| panic!("{version} {what}: {e:#}"));
            let got_indices = gpu.download(&indices).unwrap();
            let v = reference::compare_values(&got_values, &expected_values, &out_shape);
            let i = reference::compare_indices(&got_indices, &expected_indices, &out_shape);
            if !v.passed() {
                t.failures
                    .push(format!("{version} {what} ({run}) values: {v}"));
            }
            if !i.passed() {
                t.failures
                    .push(format!("{version} {what} ({run}) indices: {i}"));
            }
        }
        *ran += 1;
    }
}

fn grid<T: TopkValue>(gpu: &Gpu, day: &TopK, specials: &[T], t: &mut Tally) {
    for &width in WIDTHS {
        for &rows in rows_for(width) {
            for &k in KS.iter().filter(|&&k| k <= width) {
                check_shape(gpu, day, Shape::new(rows, width, k).unwrap(), specials, t);
            }
        }
    }
    for &(rows, width, k) in EXTRA {
        check_shape(gpu, day, Shape::new(rows, width, k).unwrap(), specials, t);
    }
}

#[test]
fn every_version_matches_the_reference_bit_for_bit() {
    let Some((gpu, day)) = testing::day_or_skip("day22 GPU correctness", TopK::load) else {
        return;
    };
    let mut tally = Tally::new();
    grid::<f32>(&gpu, &day, &special_f32(), &mut tally);
    grid::<bf16>(&gpu, &day, &special_bf16(), &mut tally);
    testing::assert_every_version_ran(
        "day22 GPU correctness",
        tally.ran.iter().copied(),
        |_| None,
        tally.failures,
    );
}

#[test]
fn warp_bitonic_refuses_k_above_its_list_and_bad_buffers_are_errors() {
    let Some((gpu, day)) = testing::day_or_skip("day22 GPU refusals", TopK::load) else {
        return;
    };
    let shape = Shape::new(2, 4096, 129).unwrap();
    let refused = day.plan::<f32>(&gpu, "warp_bitonic", shape).err().unwrap();
    assert!(refused.is::<Refused>(), "{refused}");
    assert!(day.plan::<f32>(&gpu, "radix_select", shape).is_ok());
    assert!(day.plan::<f32>(&gpu, "nope", shape).is_err());
    let mut launch = day.plan::<f32>(&gpu, "radix_select", shape).unwrap().launch;
    let x = gpu.upload(&[1.0f32; 4096]).unwrap();
    let mut values = gpu.alloc_poisoned::<f32>(2 * 129).unwrap();
    let mut indices = gpu.alloc_poisoned::<u32>(2 * 129).unwrap();
    let err = launch(&x, &mut values, &mut indices).unwrap_err();
    assert!(
        err.to_string().contains("do not fit 2 rows of 4096"),
        "{err}"
    );
}

//! day21 on the GPU: every version, both storage types, against the f64 reference, outputs
//! poisoned before each run.
//! - conv1d: lengths 1, 2, 31 (shorter than a block, than vec_regs' 8 outputs, than the
//!   filter), 1000, 2049 (one past a vec_regs block) and 1000003 (a prime: many blocks and a
//!   ragged end), widths 1, 2, 3, 4, 6, 7, 8, 14, 15, 16, 30, 31 (odd and even; each vec_regs
//!   instance, 3, 7, 15 and 31 taps, at its narrowest and widest, and the even width whose
//!   right padding fills the instance's window).
//! - conv2d (one image): 1 x 1, 3 x 7, 33 x 130 (no pack divides the width), 9 x 40 and
//!   20 x 256 (whole packs per row, in both types), 67 x 1029, and 600 x 2100 (more vec_regs
//!   blocks than the GPU has SMs: 323 in f32, 171 in bf16); filters 1x1, 2x2, 3x3, 4x4, 5x5,
//!   7x7, 3x5, 5x2.
//! - conv2d_nchw: 1 and 3 input channels, 1, 3, 9 and 16 output channels (vec_regs takes 8 per
//!   thread: 9 leaves a group of one), batches of 1 and 2 (with one output channel too), over
//!   the first five images.
//! - A filter too large for the constant copy: const_filter and vec_regs are refused, the
//!   others still run and match.

use std::collections::HashMap;

use common::session::{Refused, launch_and_read};
use common::{Element, Gpu, testing};
use day21::reference::Conv2dShape;
use day21::{CONST_FILTER_CAPACITY, Conv, HostInputs, Shape, VERSIONS};
use half::bf16;

const LENGTHS: &[usize] = &[1, 2, 31, 1000, 2049, 1_000_003];
const WIDTHS: &[usize] = &[1, 2, 3, 4, 6, 7, 8, 14, 15, 16, 30, 31];
const IMAGES: &[(usize, usize)] = &[
    (1, 1),
    (3, 7),
    (33, 130),
    (9, 40),
    (20, 256),
    (67, 1029),
    (600, 2100),
];
const FILTERS: &[(usize, usize)] = &[
    (1, 1),
    (2, 2),
    (3, 3),
    (4, 4),
    (5, 5),
    (7, 7),
    (3, 5),
    (5, 2),
];
/// (batch, C_in, C_out).
const CHANNELS: &[(usize, usize, usize)] =
    &[(1, 3, 1), (2, 3, 16), (1, 1, 3), (2, 3, 9), (2, 3, 1)];

/// Runs every version on `shape`; counts the ones that ran and collects the failures.
struct Grid<'g> {
    gpu: &'g Gpu,
    day: &'g Conv,
    ran: HashMap<&'static str, usize>,
    failures: Vec<String>,
}

impl<'g> Grid<'g> {
    fn new(gpu: &'g Gpu, day: &'g Conv) -> Self {
        Self {
            gpu,
            day,
            ran: VERSIONS.iter().map(|&v| (v, 0)).collect(),
            failures: Vec::new(),
        }
    }

    /// Checks every version of `shape` in T; `refused` lists the versions that must refuse it.
    fn check<T: Element>(&mut self, shape: Shape, refused: &[&str]) {
        let seed = (shape.input_len() * 31 + shape.weight_len()) as u64;
        let host = HostInputs::<T>::random(shape, seed);
        let reference = host.reference();
        let check = host.check(&reference);
        let (x, w) = host.upload(self.gpu).unwrap();
        let dims = shape.output_dims();
        for &version in VERSIONS {
            let what = format!("{version} {} {shape:?}", T::NAME);
            let plan = match self.day.plan::<T>(self.gpu, version, &shape) {
                Ok(plan) if refused.contains(&version) => {
                    drop(plan);
                    self.failures
                        .push(format!("{what}: should have been refused"));
                    continue;
                }
                Ok(plan) => plan,
                Err(e) if e.is::<Refused>() && refused.contains(&version) => continue,
                Err(e) => {
                    self.failures.push(format!("{what}: {e:#}"));
                    continue;
                }
            };
            let mut launch = plan.launch;
            let mut y = self.gpu.alloc_poisoned::<T>(shape.output_len()).unwrap();
            let got = match launch_and_read(self.gpu, &mut y, &mut |y| launch(&x, &w, y)) {
                Ok(got) => got,
                Err(e) => panic!("{what}: {e:#}"),
            };
            let report = check.compare(&got, &reference.values, &dims);
            if report.passed() {
                *self.ran.get_mut(version).unwrap() += 1;
            } else {
                self.failures.push(format!("{what}: {report}"));
            }
        }
    }

    fn finish(self, test: &str) {
        let ran = self.ran.into_iter();
        testing::assert_every_version_ran(test, ran, |_| None, self.failures);
    }
}

/// The opening and the end of a grid test: the GPU and the day (or the `SKIPPED` line that
/// `what` names), a fresh [`Grid`] that `fill` checks shapes on, then its verdict as `test`.
fn on_a_grid(what: &str, test: &str, fill: impl FnOnce(&mut Grid)) {
    let Some((gpu, day)) = testing::day_or_skip(what, Conv::load) else {
        return;
    };
    let mut grid = Grid::new(&gpu, &day);
    fill(&mut grid);
    grid.finish(test);
}

fn image(h: usize, w: usize, (kh, kw): (usize, usize)) -> Conv2dShape {
    Conv2dShape {
        batch: 1,
        in_channels: 1,
        out_channels: 1,
        height: h,
        width: w,
        kernel_h: kh,
        kernel_w: kw,
    }
}

fn both_types(grid: &mut Grid, shape: Shape, refused: &[&str]) {
    grid.check::<f32>(shape, refused);
    grid.check::<bf16>(shape, refused);
}

#[test]
fn conv1d_every_version_matches_the_reference() {
    on_a_grid("day21 GPU conv1d correctness", "day21 conv1d", |grid| {
        for &n in LENGTHS {
            for &width in WIDTHS {
                both_types(grid, Shape::Conv1d { n, width }, &[]);
            }
        }
    });
}

#[test]
fn conv2d_single_image_every_version_matches_the_reference() {
    on_a_grid("day21 GPU conv2d correctness", "day21 conv2d", |grid| {
        for &(h, w) in IMAGES {
            for &filter in FILTERS {
                both_types(grid, Shape::Conv2d(image(h, w, filter)), &[]);
            }
        }
    });
}

#[test]
fn conv2d_nchw_every_version_matches_the_reference() {
    on_a_grid(
        "day21 GPU conv2d_nchw correctness",
        "day21 conv2d_nchw",
        |grid| {
            for &(batch, in_channels, out_channels) in CHANNELS {
                for &(h, w) in &IMAGES[..5] {
                    // 5 x 5 with one output channel takes vec_regs' fixed-size kernel: here with
                    // several input channels, whose tiles it stages one after another.
                    for &filter in &[(1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (7, 7), (3, 5)] {
                        let shape = Conv2dShape {
                            batch,
                            in_channels,
                            out_channels,
                            ..image(h, w, filter)
                        };
                        both_types(grid, Shape::Conv2d(shape), &[]);
                    }
                }
            }
        },
    );
}

#[test]
fn a_filter_beyond_the_constant_copy_is_refused_by_the_versions_that_need_it() {
    on_a_grid(
        "day21 GPU constant-memory limit",
        "day21 constant-memory limit",
        |grid| {
            // 32 x 64 x 2 x 2 = 8192 taps: the most the copy holds, every version runs.
            let at_limit = Conv2dShape {
                batch: 1,
                in_channels: 64,
                out_channels: 32,
                ..image(5, 9, (2, 2))
            };
            assert_eq!(at_limit.weight_len(), CONST_FILTER_CAPACITY);
            both_types(grid, Shape::Conv2d(at_limit), &[]);
            let over = Conv2dShape {
                out_channels: 33,
                ..at_limit
            };
            both_types(grid, Shape::Conv2d(over), &["const_filter", "vec_regs"]);
        },
    );
}

#[test]
fn wrong_buffers_are_refused_before_the_launch() {
    let Some((gpu, day)) = testing::day_or_skip("day21 GPU launcher checks", Conv::load) else {
        return;
    };
    let shape = Shape::Conv1d { n: 100, width: 5 };
    let mut launch = day.plan::<f32>(&gpu, "vec_regs", &shape).unwrap().launch;
    let x = gpu.upload(&[1.0f32; 100]).unwrap();
    let w = gpu.upload(&[1.0f32; 4]).unwrap();
    let mut y = gpu.alloc_poisoned::<f32>(100).unwrap();
    let err = launch(&x, &w, &mut y).unwrap_err();
    assert!(err.to_string().contains("100 x 5 x 100 expected"), "{err}");
    let wide = Shape::Conv1d { n: 100, width: 32 };
    assert!(day.plan::<f32>(&gpu, "naive", &wide).is_err());
    let Err(err) = day.plan::<half::f16>(&gpu, "naive", &shape) else {
        panic!("f16 has no kernels");
    };
    assert!(err.to_string().contains("no f16 kernels"), "{err}");
}

//! day01 on the GPU: the naive softmax against the CPU reference over odd shapes, rows with
//! -inf entries, and a row that is all -inf (defined as zeros).

use common::session::launch_and_read;
use common::{check, inputs, reference, testing};
use day01::{NaiveSoftmax, tolerance};

/// (rows, cols): single row and column, widths that are no power of two, more rows than one
/// block, and the 4096 width of the default problem.
const SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (1, 4097),
    (3, 1000),
    (257, 17),
    (1000, 1),
    (65, 2048),
    (4096, 128),
    (130, 4096),
];

fn check_shape(gpu: &common::Gpu, day: &NaiveSoftmax, rows: usize, cols: usize, x: &[f32]) {
    let expected = reference::softmax::softmax_rows(x, rows, cols);
    let x_dev = gpu.upload(x).unwrap();
    let mut out = gpu.alloc_poisoned::<f32>(rows * cols).unwrap();
    let got = launch_and_read(gpu, &mut out, &mut |out| {
        day.launch(gpu, &x_dev, out, rows, cols)
    })
    .unwrap();
    let report = check::compare(&got, &expected, &[rows, cols], tolerance(cols));
    assert!(report.passed(), "{rows} x {cols}: {report}");
}

#[test]
fn matches_the_reference_on_odd_shapes() {
    let Some(gpu) = testing::gpu_or_skip("day01 GPU correctness") else {
        return;
    };
    let day = NaiveSoftmax::load(&gpu).unwrap();
    for (i, &(rows, cols)) in SHAPES.iter().enumerate() {
        let x: Vec<f32> = inputs::logits(rows * cols, i as u64);
        check_shape(&gpu, &day, rows, cols, &x);
    }
}

#[test]
fn minus_infinity_entries_and_an_all_minus_infinity_row() {
    let Some(gpu) = testing::gpu_or_skip("day01 GPU -inf rows") else {
        return;
    };
    let day = NaiveSoftmax::load(&gpu).unwrap();
    let (rows, cols) = (5, 300);
    let mut x: Vec<f32> = inputs::logits(rows * cols, 42);
    // Row 1: every third entry masked. Row 3: all masked, so its output is defined as zeros
    // and nothing of it may leak into rows 2 and 4.
    for c in (0..cols).step_by(3) {
        x[cols + c] = f32::NEG_INFINITY;
    }
    x[3 * cols..4 * cols].fill(f32::NEG_INFINITY);
    check_shape(&gpu, &day, rows, cols, &x);
}

#[test]
fn wrong_sizes_are_refused() {
    let Some(gpu) = testing::gpu_or_skip("day01 GPU launcher checks") else {
        return;
    };
    let day = NaiveSoftmax::load(&gpu).unwrap();
    let x = gpu.upload(&[0.5f32; 12]).unwrap();
    let mut out = gpu.alloc_poisoned::<f32>(12).unwrap();
    assert!(day.launch(&gpu, &x, &mut out, 5, 3).is_err());
    assert!(day.launch(&gpu, &x, &mut out, 0, 12).is_err());
    assert!(day.launch(&gpu, &x, &mut out, 4, 3).is_ok());
}

//! NVFP4: NVIDIA's 4-bit floating-point format, as the day stores and reads it, and the f64
//! CPU references of its kernels.
//!
//! A tensor of `rows x cols` (cols a multiple of 16) becomes three things:
//! - `packed`: one e2m1 code per value, two per byte, the **even index in the low nibble**
//!   (`byte i = code[2i] | code[2i + 1] << 4`), row-major, `rows * cols / 2` bytes;
//! - `scales`: one FP8 e4m3 scale per 16 consecutive values of a row, row-major,
//!   `rows * cols / 16` bytes;
//! - `tensor_scale`: one f32 for the whole tensor.
//!
//! A value is `e2m1(code) * e4m3(scale) * tensor_scale`.
//!
//! e2m1 (1 sign, 2 exponent bits with bias 1, 1 mantissa bit) has 8 magnitudes,
//! `{0, 0.5, 1, 1.5, 2, 3, 4, 6}`, and no infinity or NaN. e4m3 (the "fn" variant: 1 sign,
//! 4 exponent bits with bias 7, 3 mantissa bits) reaches 448, has subnormals down to 2^-9,
//! no infinity, and one NaN per sign (`0x7f`, `0xff`).
//!
//! Quantization repeats the kernel's f32 arithmetic operation by operation, so the GPU's bytes
//! are compared exactly:
//! 1. `amax` = the largest finite `|x|` of the tensor; `tensor_scale = amax / 2688`
//!    (2688 = 6 * 448, the largest e2m1 times the largest e4m3), or 1 when `amax` is 0.
//! 2. Per block of 16: `scale = e4m3(block_amax / (6 * tensor_scale))`, rounded to nearest
//!    even and saturated to 448 (PTX `cvt.rn.satfinite.e4m3x2.f32`).
//! 3. Per value: `code = e2m1(x / (e4m3_value(scale) * tensor_scale))`, rounded to nearest
//!    even and saturated to 6. The sign is kept, so a negative value that rounds to 0 (and
//!    -0) is code 8, "-0". A block whose scale decodes to 0 (all zeros, or values too small
//!    for e4m3 at this tensor scale) writes code 0 everywhere: nothing is divided by 0.
//!
//! Non-finite input (the format has no infinity, and NaN only in the scale): a block that
//! holds a NaN or an infinity gets the e4m3 NaN `0x7f` as its scale and code 0 for all 16
//! values, so the whole block dequantizes to NaN; `amax` and the other blocks ignore it. A
//! tensor with a non-finite value thus stays visibly broken where it was broken, instead of
//! saturating into plausible numbers.
//!
//! Rounding ties go to the even code (mantissa bit 0): 0.25 -> 0, 0.75 -> 1, 1.25 -> 1,
//! 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4; above 5 everything is 6.

use half::bf16;

/// The e2m1 magnitudes, by the code's low 3 bits.
pub const E2M1_VALUES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// Values per scale block.
pub const BLOCK: usize = 16;

/// 6 * 448: `tensor_scale = amax / TENSOR_SCALE_DIVISOR`.
pub const TENSOR_SCALE_DIVISOR: f32 = 2688.0;

/// The e4m3 scale written for a block that holds NaN or infinity.
pub const E4M3_NAN: u8 = 0x7f;

/// The value of a 4-bit e2m1 code (only the low 4 bits are read).
pub fn e2m1_decode(code: u8) -> f32 {
    let v = E2M1_VALUES[(code & 7) as usize];
    if code & 8 != 0 { -v } else { v }
}

/// `v` rounded to the nearest e2m1 code, ties to the even code, saturated to +-6, sign kept.
/// Each comparison moves past one midpoint between neighbouring magnitudes: strict where the
/// code below is even (a tie stays), `>=` where the code above is even (a tie moves up). The
/// kernel does the same seven comparisons. NaN gives code 0 (never asked for: non-finite
/// blocks are handled before).
pub fn e2m1_encode(v: f32) -> u8 {
    let a = v.abs();
    let magnitude = u8::from(a > 0.25)
        + u8::from(a >= 0.75)
        + u8::from(a > 1.25)
        + u8::from(a >= 1.75)
        + u8::from(a > 2.5)
        + u8::from(a >= 3.5)
        + u8::from(a > 5.0);
    if v.is_sign_negative() && !v.is_nan() {
        magnitude | 8
    } else {
        magnitude
    }
}

/// The value of an e4m3 byte: NaN for `0x7f` and `0xff`, subnormals below 2^-6.
pub fn e4m3_decode(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let magnitude = b & 0x7f;
    if magnitude == 0x7f {
        return f32::NAN;
    }
    let exponent = i32::from(magnitude >> 3);
    let mantissa = f32::from(magnitude & 7);
    let v = if exponent == 0 {
        mantissa * 2f32.powi(-9)
    } else {
        (1.0 + mantissa / 8.0) * 2f32.powi(exponent - 7)
    };
    sign * v
}

/// `v` rounded to the nearest e4m3 value (ties to even), saturated to +-448 (`satfinite`):
/// NaN gives `0x7f`, anything past 448 (infinity included) gives 448 with its sign.
pub fn e4m3_encode(v: f32) -> u8 {
    if v.is_nan() {
        return E4M3_NAN;
    }
    let sign = if v.is_sign_negative() { 0x80 } else { 0 };
    let a = v.abs();
    let magnitude = if a < 2f32.powi(-6) {
        // Subnormal: multiples of 2^-9; scaling by 2^9 is exact, and 8 carries into the
        // first normal code (0x08 = 2^-6).
        (a * 512.0).round_ties_even() as u32
    } else {
        let exponent = (a.to_bits() >> 23) as i32 - 127;
        let fraction = a / 2f32.powi(exponent) - 1.0; // exact: a power-of-two scaling
        let mantissa = (fraction * 8.0).round_ties_even() as u32; // 8 carries
        (((exponent + 7) as u32) << 3) + mantissa
    };
    sign | magnitude.min(0x7e) as u8
}

/// A tensor in NVFP4 (see the module docs for the layout).
#[derive(Debug, Clone, PartialEq)]
pub struct Nvfp4 {
    pub rows: usize,
    pub cols: usize,
    pub packed: Vec<u8>,
    pub scales: Vec<u8>,
    pub tensor_scale: f32,
}

impl Nvfp4 {
    /// The code of element (row, col).
    pub fn code(&self, row: usize, col: usize) -> u8 {
        let byte = self.packed[(row * self.cols + col) / 2];
        if col.is_multiple_of(2) {
            byte & 0xf
        } else {
            byte >> 4
        }
    }

    /// The scale byte of element (row, col)'s block.
    pub fn scale(&self, row: usize, col: usize) -> u8 {
        self.scales[(row * self.cols + col) / BLOCK]
    }

    /// The exact value of element (row, col), in f64: `code * scale` has at most 6
    /// significant bits and the tensor scale 24, so the product is exact.
    pub fn value(&self, row: usize, col: usize) -> f64 {
        f64::from(e2m1_decode(self.code(row, col)))
            * f64::from(e4m3_decode(self.scale(row, col)))
            * f64::from(self.tensor_scale)
    }

    /// `code * scale` of every element as f32 (exact), row-major: the weights a GEMV or GEMM
    /// multiplies before the tensor scale.
    pub fn unscaled(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.rows * self.cols);
        for r in 0..self.rows {
            for c in 0..self.cols {
                out.push(e2m1_decode(self.code(r, c)) * e4m3_decode(self.scale(r, c)));
            }
        }
        out
    }
}

/// The largest finite `|x|`.
pub fn finite_amax(x: &[bf16]) -> f32 {
    x.iter()
        .map(|v| v.to_f32().abs())
        .filter(|v| v.is_finite())
        .fold(0.0, f32::max)
}

/// `amax / 2688`, or 1 for an all-zero (or all non-finite) tensor.
pub fn tensor_scale(amax: f32) -> f32 {
    if amax == 0.0 {
        1.0
    } else {
        amax / TENSOR_SCALE_DIVISOR
    }
}

/// One block of 16 values -> its 16 codes and its scale byte, as the kernel does it.
pub fn quantize_block(x: &[bf16], tensor_scale: f32) -> ([u8; BLOCK], u8) {
    assert_eq!(x.len(), BLOCK, "a block is 16 values");
    let mut codes = [0u8; BLOCK];
    if x.iter().any(|v| !v.to_f32().is_finite()) {
        return (codes, E4M3_NAN);
    }
    let block_amax = x.iter().map(|v| v.to_f32().abs()).fold(0.0, f32::max);
    let scale = e4m3_encode(block_amax / (6.0 * tensor_scale));
    let denominator = e4m3_decode(scale) * tensor_scale;
    if denominator != 0.0 {
        for (code, v) in codes.iter_mut().zip(x) {
            *code = e2m1_encode(v.to_f32() / denominator);
        }
    }
    (codes, scale)
}

/// Quantizes a row-major `rows x cols` bf16 tensor; `cols` must be a multiple of 16.
pub fn quantize(x: &[bf16], rows: usize, cols: usize) -> Nvfp4 {
    assert_eq!(x.len(), rows * cols, "x is not {rows} x {cols}");
    assert!(
        cols.is_multiple_of(BLOCK),
        "cols = {cols} is not a multiple of 16"
    );
    let tensor_scale = tensor_scale(finite_amax(x));
    let mut packed = Vec::with_capacity(x.len() / 2);
    let mut scales = Vec::with_capacity(x.len() / BLOCK);
    for block in x.chunks_exact(BLOCK) {
        let (codes, scale) = quantize_block(block, tensor_scale);
        scales.push(scale);
        packed.extend(codes.chunks_exact(2).map(|p| p[0] | (p[1] << 4)));
    }
    Nvfp4 {
        rows,
        cols,
        packed,
        scales,
        tensor_scale,
    }
}

/// Back to bf16 as the kernel does it: `(code * scale) * tensor_scale` in f32 (the first
/// product is exact, the second rounds), then rounded to nearest even bf16.
pub fn dequantize(q: &Nvfp4) -> Vec<bf16> {
    q.unscaled()
        .into_iter()
        .map(|v| bf16::from_f32(v * q.tensor_scale))
        .collect()
}

/// `y = W x` in f64 from the exact NVFP4 values of `w` (`rows x cols`, x of `cols`), and per
/// row `sum |w x|` (what an f32 accumulation's error bound scales with).
pub fn gemv(w: &Nvfp4, x: &[bf16]) -> (Vec<f64>, Vec<f64>) {
    assert_eq!(x.len(), w.cols, "x does not have cols elements");
    let x: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
    let (mut y, mut magnitudes) = (Vec::with_capacity(w.rows), Vec::with_capacity(w.rows));
    for r in 0..w.rows {
        let (mut dot, mut mag) = (0.0f64, 0.0f64);
        for (c, xc) in x.iter().enumerate() {
            let p = w.value(r, c) * xc;
            dot += p;
            mag += p.abs();
        }
        y.push(dot);
        magnitudes.push(mag);
    }
    (y, magnitudes)
}

/// `C = A W^T` in f64 at the flat indices `at` of the `m x n` output (A row-major `m x k`
/// bf16, W an NVFP4 `n x k`), and each output's `sum |a w|`.
pub fn gemm_at(a: &[bf16], w: &Nvfp4, m: usize, at: &[usize]) -> (Vec<f64>, Vec<f64>) {
    let (n, k) = (w.rows, w.cols);
    assert_eq!(a.len(), m * k, "A is not {m} x {k}");
    at.iter()
        .map(|&i| {
            let (row, col) = (i / n, i % n);
            let (mut dot, mut mag) = (0.0f64, 0.0f64);
            for j in 0..k {
                let p = a[row * k + j].to_f64() * w.value(col, j);
                dot += p;
                mag += p.abs();
            }
            (dot, mag)
        })
        .unzip()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(v: f32) -> bf16 {
        bf16::from_f32(v)
    }

    #[test]
    fn all_16_e2m1_codes_round_trip() {
        for code in 0u8..16 {
            let v = e2m1_decode(code);
            assert_eq!(e2m1_encode(v), code, "code {code:#x} = {v}");
        }
        assert_eq!(e2m1_decode(0x7), 6.0);
        assert_eq!(e2m1_decode(0xf), -6.0);
        assert!(e2m1_decode(0x8).is_sign_negative() && e2m1_decode(0x8) == 0.0);
    }

    #[test]
    fn e2m1_ties_go_to_the_even_code() {
        let cases = [
            (0.25, 0.0),
            (0.75, 1.0),
            (1.25, 1.0),
            (1.75, 2.0),
            (2.5, 2.0),
            (3.5, 4.0),
            (5.0, 4.0),
        ];
        for (x, want) in cases {
            assert_eq!(e2m1_decode(e2m1_encode(x)), want, "{x}");
            assert_eq!(e2m1_decode(e2m1_encode(-x)), -want, "-{x}");
        }
        // Just past a tie goes to the nearer value.
        assert_eq!(e2m1_decode(e2m1_encode(0.2500001)), 0.5);
        assert_eq!(e2m1_decode(e2m1_encode(5.0001)), 6.0);
        assert_eq!(e2m1_decode(e2m1_encode(0.7499999)), 0.5);
    }

    #[test]
    fn e2m1_saturates_and_keeps_the_sign_of_zero() {
        for x in [6.0, 7.0, 1e30, f32::INFINITY] {
            assert_eq!(e2m1_encode(x), 0x7);
            assert_eq!(e2m1_encode(-x), 0xf);
        }
        assert_eq!(e2m1_encode(0.0), 0x0);
        assert_eq!(e2m1_encode(-0.0), 0x8);
        assert_eq!(e2m1_encode(-0.1), 0x8);
    }

    /// The e4m3 value of every byte from its definition, independently of `e4m3_decode`'s
    /// arithmetic: sign, exponent field, mantissa field.
    fn e4m3_by_definition(b: u8) -> f64 {
        let s = if b >> 7 == 1 { -1.0 } else { 1.0 };
        let (e, m) = (i32::from((b >> 3) & 0xf), f64::from(b & 7));
        if e == 0 {
            s * m / 8.0 * 2f64.powi(-6)
        } else {
            s * (1.0 + m / 8.0) * 2f64.powi(e - 7)
        }
    }

    #[test]
    fn every_e4m3_byte_decodes_to_its_value() {
        for b in 0..=255u8 {
            let v = e4m3_decode(b);
            if b & 0x7f == 0x7f {
                assert!(v.is_nan(), "{b:#x}");
                continue;
            }
            assert_eq!(f64::from(v), e4m3_by_definition(b), "{b:#x}");
            // And encodes back to itself (-0 included).
            assert_eq!(e4m3_encode(v), b, "{b:#x} = {v}");
        }
        assert_eq!(e4m3_decode(0x7e), 448.0);
        assert_eq!(e4m3_decode(0x01), 2f32.powi(-9));
        assert_eq!(e4m3_decode(0x08), 2f32.powi(-6));
    }

    #[test]
    fn e4m3_rounds_to_nearest_even_and_saturates() {
        // Between 1 (0x38) and 1.125 (0x39): the tie goes to the even mantissa.
        assert_eq!(e4m3_encode(1.0625), 0x38);
        assert_eq!(e4m3_encode(1.0626), 0x39);
        // Between 1.125 (0x39) and 1.25 (0x3a): the tie goes up to the even one.
        assert_eq!(e4m3_encode(1.1875), 0x3a);
        // 1.9375 is the tie between 1.875 (0x3e) and 2 (0x40): the carry into the exponent.
        assert_eq!(e4m3_encode(1.9375), 0x40);
        // Subnormal ties: 2^-10 is half of the smallest step, to 0; 3 * 2^-10 to 2 * 2^-9.
        assert_eq!(e4m3_encode(2f32.powi(-10)), 0x00);
        assert_eq!(e4m3_encode(3.0 * 2f32.powi(-10)), 0x02);
        // 15.5 * 2^-10 rounds up across the subnormal/normal boundary to 2^-6.
        assert_eq!(e4m3_encode(15.5 * 2f32.powi(-10)), 0x08);
        // Saturation: 464 would round to 480, which is not a value; infinity too.
        for x in [449.0, 464.0, 500.0, 1e30, f32::INFINITY] {
            assert_eq!(e4m3_encode(x), 0x7e, "{x}");
            assert_eq!(e4m3_encode(-x), 0xfe, "-{x}");
        }
        assert_eq!(e4m3_encode(f32::NAN), E4M3_NAN);
        assert_eq!(e4m3_encode(1e-30), 0x00);
    }

    #[test]
    fn a_block_at_the_tensor_amax_uses_the_top_of_both_formats() {
        let x: Vec<bf16> = (0..16)
            .map(|i| b(if i == 3 { -12.0 } else { 1.0 }))
            .collect();
        let q = quantize(&x, 1, 16);
        assert_eq!(q.tensor_scale, 12.0 / 2688.0);
        assert_eq!(q.scales[0], 0x7e); // 448
        assert_eq!(q.code(0, 3), 0xf); // -6
        // 1 / (448 * 12 / 2688) = 0.5 exactly.
        assert_eq!(q.code(0, 0), 0x1);
        // 6 * 448 * (12 / 2688): the tensor scale's one f32 rounding away from -12.
        assert!(
            (q.value(0, 3) + 12.0).abs() < 12.0 * 1e-7,
            "{}",
            q.value(0, 3)
        );
        assert_eq!(dequantize(&q)[3], b(-12.0));
    }

    #[test]
    fn zero_blocks_and_a_zero_tensor_divide_by_nothing() {
        let q = quantize(&[b(0.0); 32], 2, 16);
        assert_eq!(q.tensor_scale, 1.0);
        assert_eq!(q.scales, vec![0, 0]);
        assert_eq!(q.packed, vec![0; 16]);
        assert!(dequantize(&q).iter().all(|v| v.to_f32() == 0.0));
        // A zero block next to a non-zero one.
        let mut x = vec![b(0.0); 16];
        x.extend((0..16).map(|i| b(i as f32 - 7.5)));
        let q = quantize(&x, 1, 32);
        assert_eq!(q.scales[0], 0);
        assert_ne!(q.scales[1], 0);
        assert!(q.packed[..8].iter().all(|&p| p == 0));
    }

    #[test]
    fn non_finite_values_make_their_block_nan_and_are_left_out_of_amax() {
        let mut x: Vec<bf16> = (0..48).map(|i| b((i % 7) as f32 - 3.0)).collect();
        x[5] = bf16::NAN;
        x[20] = bf16::INFINITY;
        let q = quantize(&x, 1, 48);
        assert_eq!(q.tensor_scale, 3.0 / 2688.0);
        assert_eq!(q.scales[0], E4M3_NAN);
        assert_eq!(q.scales[1], E4M3_NAN);
        assert!(q.packed[..16].iter().all(|&p| p == 0));
        let y = dequantize(&q);
        assert!(y[..32].iter().all(|v| v.is_nan()));
        assert!(y[32..].iter().all(|v| v.is_finite()));
    }

    #[test]
    fn packing_puts_the_even_index_in_the_low_nibble() {
        let mut x = vec![b(0.0); 16];
        x[0] = b(6.0); // code 7
        x[1] = b(-1.0); // code 0xa
        let q = quantize(&x, 1, 16);
        assert_eq!(q.packed[0], 0xa7);
        assert_eq!(q.code(0, 0), 0x7);
        assert_eq!(q.code(0, 1), 0xa);
    }

    #[test]
    fn quantize_error_is_within_half_a_step() {
        // Random values: each dequantized value is within half an e2m1 step (the largest, 1,
        // between 4 and 6) of the block's scale of x, or saturated at 6 * scale.
        let x: Vec<bf16> = common::measure::inputs::uniform(64 * 32, -3.0, 5.0, 7);
        let q = quantize(&x, 64, 32);
        for r in 0..64 {
            for c in 0..32 {
                let unit = f64::from(e4m3_decode(q.scale(r, c))) * f64::from(q.tensor_scale);
                let xv = x[r * 32 + c].to_f64();
                let err = (q.value(r, c) - xv).abs();
                assert!(
                    err <= unit * 1.0 + 1e-12,
                    "({r}, {c}): {xv} -> {}",
                    q.value(r, c)
                );
            }
        }
    }

    #[test]
    fn gemv_and_gemm_use_the_exact_values() {
        let x: Vec<bf16> = common::measure::inputs::uniform(3 * 32, -1.0, 1.0, 3);
        let w = quantize(&x, 3, 32);
        let v: Vec<bf16> = (0..32).map(|i| b(if i == 1 { 1.0 } else { 0.0 })).collect();
        let (y, mag) = gemv(&w, &v);
        for r in 0..3 {
            assert_eq!(y[r], w.value(r, 1));
            assert_eq!(mag[r], w.value(r, 1).abs());
        }
        // C = A W^T with A = v as one row: the same as the GEMV.
        let (c, _) = gemm_at(&v, &w, 1, &[0, 1, 2]);
        assert_eq!(c, y);
    }
}

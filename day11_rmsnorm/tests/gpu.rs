//! day11 on the GPU: every version of both passes, every dtype, over the normalization test
//! shapes (rows 1, 3, 17, 1000; widths 1, 7, 127, 128, 504, 512, 1000, 4096, 4097, 8192, 8193 and the
//! register limits 32768 / 32769), against the f64 reference, with poisoned outputs.

use day11::Day11;

common::test_norm_day!(Day11, "block");

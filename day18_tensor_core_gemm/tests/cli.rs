//! day18's binary refuses bad input before opening a GPU: exit 2, one `error:` line, no panic
//! (runs without a GPU).

use common::testing::{assert_refused, day_binary};

#[test]
fn bad_inputs_are_refused_before_the_gpu() {
    let bin = day_binary(env!("CARGO_BIN_EXE_day18"));
    let max = "2147483647";
    let cases: &[(&[&str], &str)] = &[
        (&["--m", "0", "--n", "64", "--k", "64"], "at least 1"),
        (&["--m", "64", "--n", "0", "--k", "64"], "at least 1"),
        (&["--m", "64", "--n", "64", "--k", "0"], "at least 1"),
        (&["--size", "0"], "at least 1"),
        (&["--size", "64", "--batch", "0"], "at least 1"),
        (&["--size", "-1"], "-1"),
        (&["--size", "4294967296"], "below 2^31"),
        (&["--size", "64", "--batch", "4294967296"], "below 2^31"),
        // Each below 2^31, their products past 2^64: refused, not wrapped.
        (
            &["--m", max, "--n", max, "--k", max, "--batch", max],
            "too large to address",
        ),
        (&["--size", max, "--batch", "8"], "too large to address"),
        // Addressable, far beyond the host.
        (&["--size", "1000000"], "host memory"),
        (&["--size", "64", "--dtype", "f32"], "bf16 or f16"),
        (&["--size", "64", "--dtype", "nope"], "--dtype"),
        (&["--size", "64", "--kernel", "nope"], "no kernel `nope`"),
        (&["--size", "64", "--a", "sideways"], "--a"),
    ];
    for (args, expect) in cases {
        assert_refused(&bin, args, expect);
    }
}

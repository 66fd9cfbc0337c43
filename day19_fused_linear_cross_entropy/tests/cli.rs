//! day19's binary refuses bad input before opening a GPU: exit 2, one `error:` line, no panic
//! (runs without a GPU).

use common::testing::{assert_refused, day_binary};

#[test]
fn bad_inputs_are_refused_before_the_gpu() {
    let bin = day_binary(env!("CARGO_BIN_EXE_day19"));
    let huge = "18446744073709551615";
    let cases: &[(&[&str], &str)] = &[
        (&["--tokens", "0"], "--tokens"),
        (&["--hidden", "0"], "--hidden"),
        (&["--vocab", "0"], "--vocab"),
        (&["--chunk", "0"], "--chunk"),
        (&["--tokens", "-3"], "-3"),
        (&["--vocab", "3000000000"], "below 2^31"),
        (&["--hidden", "3000000000"], "--hidden"),
        (&["--tokens", huge], "--tokens"),
        (&["--hidden", huge, "--vocab", "8"], "--hidden"),
        // Each within its limit, T x Hd x V past 2^64: refused, not wrapped.
        (
            &[
                "--tokens",
                "268435455",
                "--hidden",
                "2147483647",
                "--vocab",
                "2147483647",
            ],
            "too large to address",
        ),
        // Addressable, far beyond the host.
        (
            &["--tokens", "100000000", "--vocab", "1000000"],
            "host memory",
        ),
        (&["--label-smoothing", "1.5"], "label smoothing"),
        (&["--label-smoothing", "NaN"], "label smoothing"),
        (&["--z-loss=-1"], "z-loss"),
        (&["--z-loss", "inf"], "z-loss"),
        (&["--ignore-fraction", "2"], "--ignore-fraction"),
        (&["--ignore-fraction", "NaN"], "--ignore-fraction"),
        (&["--kernel", "nope"], "no kernel `nope`"),
    ];
    for (args, expect) in cases {
        assert_refused(&bin, args, expect);
    }
}

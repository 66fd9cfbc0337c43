//! day16's binary refuses bad input before opening a GPU: exit 2, one `error:` line, no panic
//! (runs without a GPU).

use common::testing::{assert_refused, day_binary};

#[test]
fn bad_inputs_are_refused_before_the_gpu() {
    let bin = day_binary(env!("CARGO_BIN_EXE_day16"));
    let cases: &[(&[&str], &str)] = &[
        (&["--n", "0"], "--n"),
        (&["--n", "-5"], "-5"),
        (&["--n", "abc"], "--n"),
        (&["--segment-len", "0"], "--segment-len"),
        (
            &["--n", "4096", "--segment-len", "5000"],
            "whole number of segments",
        ),
        // n x 8 bytes overflows u64.
        (
            &["--problem", "sum", "--n", "18446744073709551615"],
            "too many",
        ),
        // Fits the counter, not the host.
        (
            &["--problem", "sum", "--n", "1000000000000000"],
            "host memory",
        ),
        // The i32 scan's prefixes could overflow.
        (&["--problem", "scan", "--n", "600000000"], "overflow i32"),
        (&["--problem", "nope"], "--problem"),
        (&["--kernel", "nope"], "no kernel `nope`"),
        (
            &["--problem", "sum", "--kernel", "decoupled_lookback"],
            "sum has none of these versions",
        ),
        (&["--iters", "0"], "--iters"),
    ];
    for (args, expect) in cases {
        assert_refused(&bin, args, expect);
    }
}

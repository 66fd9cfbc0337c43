//! day13's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

use common::testing::{assert_refused, day_binary};

/// (arguments separated by spaces, what the error must say).
const REFUSED: &[(&str, &str)] = &[
    ("--rows 0", "invalid value '0' for '--rows"),
    ("--cols 0", "invalid value '0' for '--cols"),
    (
        "--rows 18446744073709551615",
        "--rows x --cols: 18446744073709551615 x 4096 is too large",
    ),
    (
        "--rows 4294967296 --cols 4294967296",
        "4294967296 x 4294967296 is too large to address",
    ),
    ("--rows 1000000000000000 --cols 1", "of host memory"),
    ("--op nope", "invalid value 'nope' for '--op"),
    ("--dtype i8", "invalid value 'i8' for '--dtype"),
    ("--kernel nope", "there is no kernel `nope` here"),
    (
        "--kernel unfused --op gelu_tanh",
        "--kernel unfused: gelu_tanh has none of these versions",
    ),
    (
        "--kernel vec_fast --op gelu_erf,swiglu_bwd",
        "--kernel vec_fast: swiglu_bwd has none of these versions",
    ),
];

#[test]
fn bad_requests_are_refused_before_the_gpu() {
    let binary = day_binary(env!("CARGO_BIN_EXE_day13"));
    for (args, expect) in REFUSED {
        let args: Vec<&str> = args.split_whitespace().collect();
        assert_refused(&binary, &args, expect);
    }
}

//! day05's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

use common::testing::{assert_refused, day_binary};

/// (arguments separated by spaces, what the error must say).
const REFUSED: &[(&str, &str)] = &[
    ("--rows 0 --cols 4", "invalid value '0' for '--rows"),
    ("--rows 4 --cols 0", "invalid value '0' for '--cols"),
    ("--rows -3 --cols 4", "unexpected argument '-3'"),
    ("--rows 4x --cols 4", "invalid value '4x'"),
    (
        "--rows 18446744073709551615 --cols 4",
        "--rows x --cols: 18446744073709551615 x 4 is too large",
    ),
    (
        "--rows 4294967296 --cols 4294967296",
        "4294967296 x 4294967296 is too large to address",
    ),
    ("--rows 1000000000000000 --cols 1", "of host memory"),
    (
        "--rows 4",
        "the following required arguments were not provided",
    ),
    ("--sweep --rows 4 --cols 4", "cannot be used with"),
    (
        "--rows 4 --cols 4 --kernel nope",
        "there is no kernel `nope` here",
    ),
    (
        "--rows 4 --cols 4 --iters 0",
        "invalid value '0' for '--iters",
    ),
    (
        "--rows 4 --cols 4 --dtype i8",
        "invalid value 'i8' for '--dtype",
    ),
];

#[test]
fn bad_requests_are_refused_before_the_gpu() {
    let binary = day_binary(env!("CARGO_BIN_EXE_day05"));
    for (args, expect) in REFUSED {
        let args: Vec<&str> = args.split_whitespace().collect();
        assert_refused(&binary, &args, expect);
    }
}

//! day14's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

/// (arguments separated by spaces, what the error must say).
const REFUSED: &[(&str, &str)] = &[
    ("--m 0 --n 4", "'--m <M>': must be at least 1"),
    ("--m 4 --n 0", "'--n <N>': must be at least 1"),
    (
        "--m 1 --n 18446744073709551615",
        "--m x --n: 1 x 18446744073709551615 x 4 is too large",
    ),
    (
        "--m 18446744073709551615 --n 1",
        "--m x --n: 18446744073709551615 x 1 x 4 is too large",
    ),
    (
        "--m 768614336404564650 --n 1",
        "--m x --n: the sum is too large",
    ),
    (
        "--m 4294967296 --n 4294967296",
        "4294967296 x 4294967296 is too large to address",
    ),
    ("--m 1000000000000 --n 1000", "of host memory"),
    (
        "--m 4",
        "the following required arguments were not provided",
    ),
    (
        "--m 4 --n 4 --kernel nope",
        "there is no kernel `nope` here",
    ),
];

common::test_refused_requests!("day14", REFUSED);

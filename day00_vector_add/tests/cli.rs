//! day00's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

/// (arguments separated by spaces, what the error must say).
const REFUSED: &[(&str, &str)] = &[
    ("--n 0", "'--n <N>': must be at least 1"),
    ("--n 12abc", "invalid value '12abc'"),
    (
        "--n 18446744073709551615",
        "--n: 18446744073709551615 elements is too many to address",
    ),
    ("--n 2305843009213693952", "too many to address"),
    ("--n 1000000000000000", "of host memory"),
    ("--n 5 --kernel nope", "there is no kernel `nope` here"),
    ("--n 5 --iters 0", "'--iters <ITERS>': must be at least 1"),
];

common::test_refused_requests!("day00", REFUSED);

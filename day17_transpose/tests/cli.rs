//! day17's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

/// (arguments separated by spaces, what the error must say).
const REFUSED: &[(&str, &str)] = &[
    ("--rows 0", "'--rows <ROWS>': must be at least 1"),
    ("--n 0", "'--n <N>': must be at least 1"),
    (
        "--rows 4294967296 --cols 4294967296",
        "4294967296 x 4294967296 is too large to address",
    ),
    ("--rows 1000000000000000 --cols 1", "of host memory"),
    (
        "--op reverse --n 18446744073709551615",
        "--n: 18446744073709551615 elements is too many to address",
    ),
    ("--op reverse --n 1000000000000000", "of host memory"),
    (
        "--op transpose --rows 5000000 --cols 1",
        "no transpose version takes 5000000 x 1",
    ),
    (
        "--op transpose --kernel naive --rows 600000 --cols 1",
        "no transpose version takes 600000 x 1",
    ),
    (
        "--op transpose --kernel inplace_vec4",
        "--kernel inplace_vec4: transpose has none of these versions",
    ),
    (
        "--op reverse --kernel tiled",
        "--kernel tiled: reverse has none of these versions",
    ),
    (
        "--op copy --kernel tiled",
        "--kernel tiled: copy has none of these versions",
    ),
    ("--op nope", "there is no op `nope` here"),
    ("--kernel nope", "there is no kernel `nope` here"),
];

common::test_refused_requests!("day17", REFUSED);

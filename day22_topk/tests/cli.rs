//! day22's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

/// (arguments separated by spaces, what the error must say).
const REFUSED: &[(&str, &str)] = &[
    ("--rows 4 --width 16 --k 0", "'--k <K>': must be at least 1"),
    (
        "--rows 0 --width 16 --k 1",
        "'--rows <ROWS>': must be at least 1",
    ),
    (
        "--rows 4 --width 0 --k 1",
        "'--width <WIDTH>': must be at least 1",
    ),
    (
        "--rows 4 --width 16 --k 17",
        "--k 17 is more than the row's --width 16",
    ),
    (
        "--rows 4 --width 4096 --k 1025",
        "--k is 1025, more than the 1024",
    ),
    (
        "--rows 1 --width 1048577 --k 1",
        "--width is 1048577, more than the 1048576",
    ),
    (
        "--rows 18446744073709551615 --width 1048576 --k 1",
        "is too large to address",
    ),
    ("--rows 100000000 --width 1048576 --k 1", "of host memory"),
    (
        "--rows 4 --width abc --k 1",
        "invalid value 'abc' for '--width",
    ),
    (
        "--rows 4 --width 16",
        "the following required arguments were not provided",
    ),
    (
        "--rows 4 --width 16 --k 2 --dtype f16",
        "invalid value 'f16' for '--dtype",
    ),
    (
        "--rows 4 --width 16 --k 2 --kernel nope",
        "there is no kernel `nope` here",
    ),
    (
        "--kernel warp_bitonic,nope",
        "there is no kernel `nope` here",
    ),
];

common::test_refused_requests!("day22", REFUSED);

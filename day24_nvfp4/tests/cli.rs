//! day24's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

/// (arguments separated by spaces, what the error must say).
const REFUSED: &[(&str, &str)] = &[
    ("--rows 0", "'--rows <ROWS>': must be at least 1"),
    ("--cols 0", "'--cols <COLS>': must be at least 1"),
    ("--m 0", "'--m <M>': must be at least 1"),
    ("--n 0 --k 16", "'--n <N>': must be at least 1"),
    (
        "--op quantize --rows 4 --cols 40",
        "K = 40 is not a multiple of 16",
    ),
    (
        "--op dequantize --rows 3 --cols 8",
        "K = 8 is not a multiple of 16",
    ),
    ("--op gemv --n 7 --k 100", "K = 100 is not a multiple of 16"),
    (
        "--op gemm --m 5 --n 7 --k 24",
        "K = 24 is not a multiple of 16",
    ),
    (
        "--n 7",
        "the following required arguments were not provided",
    ),
    (
        "--op quantize --rows 4294967296 --cols 4294967296",
        "is too large to address",
    ),
    (
        "--op quantize --rows 1000000000000000 --cols 16",
        "of host memory",
    ),
    ("--op gemv --n 1000000000000 --k 1024", "of host memory"),
    (
        "--op gemm --m 100000000 --n 16 --k 16",
        "the grid takes at most 65535 in y",
    ),
    ("--op nope", "there is no op `nope` here"),
    ("--kernel nope", "there is no kernel `nope` here"),
    (
        "--kernel mma_bf16 --op gemv",
        "--kernel mma_bf16: gemv has none of these versions",
    ),
    (
        "--kernel quantize --op dequantize",
        "--kernel quantize: dequantize has none of these versions",
    ),
];

common::test_refused_requests!("day24", REFUSED);

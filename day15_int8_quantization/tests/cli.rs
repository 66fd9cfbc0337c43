//! day15's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

/// (arguments separated by spaces, what the error must say).
const REFUSED: &[(&str, &str)] = &[
    ("--rows 0", "'--rows <ROWS>': must be at least 1"),
    ("--m 0", "'--m <M>': must be at least 1"),
    ("--k 0", "'--k <K>': must be at least 1"),
    (
        "--rows 4294967296 --cols 4294967296",
        "4294967296 x 4294967296 is too large to address",
    ),
    ("--rows 1000000000000000 --cols 1", "of host memory"),
    (
        "--op int8_matmul --k 33026",
        "k = 33026 can overflow the int32 output",
    ),
    (
        "--op int8_matmul --m 1048561",
        "needs more than 65535 blocks in y",
    ),
    ("--op int8_matmul --n 2147483648", "is past i32"),
    (
        "--op int8_matmul --m 1048560 --n 2147483647 --k 33025",
        "too large to count its 2 m n k operations",
    ),
    (
        "--op int8_matmul --m 1000 --n 2000000000 --k 33025",
        "of host memory",
    ),
    ("--za 128", "--za and --zb must be in the int8 range"),
    ("--zb=-129", "--za and --zb must be in the int8 range"),
    (
        "--op quantize_sym --za 1000",
        "--za and --zb must be in the int8 range",
    ),
    ("--za 99999999999", "invalid value '99999999999' for '--za"),
    ("--op nope", "there is no op `nope` here"),
    ("--kernel nope", "there is no kernel `nope` here"),
    (
        "--kernel naive --op quantize_sym",
        "--kernel naive: quantize_sym has none of these versions",
    ),
    (
        "--kernel two_pass --op dequantize",
        "--kernel two_pass: dequantize has none of these versions",
    ),
    (
        "--kernel vec4 --op int8_matmul",
        "--kernel vec4: int8_matmul has none of these versions",
    ),
];

common::test_refused_requests!("day15", REFUSED);

//! day23's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

/// (arguments separated by spaces, what the error must say).
const REFUSED: &[(&str, &str)] = &[
    ("--size 0", "must be at least 1"),
    ("--m 0 --n 16 --k 16", "must be at least 1"),
    ("--size 1000", "k = 1000 is not a multiple of 16"),
    ("--m 16 --n 16 --k 24", "k = 24 is not a multiple of 16"),
    ("--size 2147483648", "dimensions must be below 2^31"),
    (
        "--m 16 --n 16 --k 131072",
        "k = 131072 can overflow the int32 output",
    ),
    (
        "--m 16 --n 16 --k 33040 --za 1",
        "k = 33040 can overflow the int32 output",
    ),
    (
        "--m 16 --n 16 --k 33040 --per-channel",
        "k = 33040 can overflow the int32 output",
    ),
    (
        "--size 64 --za 128",
        "zero points must be in the int8 range",
    ),
    (
        "--size 64 --zb=-129",
        "zero points must be in the int8 range",
    ),
    ("--za 3", "give --size or --m --n --k with them"),
    ("--out bf16", "give --size or --m --n --k with them"),
    ("--size 64 --out f32", "invalid value 'f32' for '--out"),
    ("--size 64 --m 64", "cannot be used with"),
    ("--m 2000000 --n 2000000 --k 16", "of host memory"),
    ("--kernel nope", "there is no kernel `nope` here"),
];

common::test_refused_requests!("day23", REFUSED);

//! day06's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

use common::testing::{assert_refused, day_binary};

/// (arguments separated by spaces, what the error must say).
const REFUSED: &[(&str, &str)] = &[
    ("--size 0", "invalid value '0' for '--size"),
    ("--m 0 --n 4 --k 4", "invalid value '0' for '--m"),
    ("--m 4 --n 4 --k 0", "invalid value '0' for '--k"),
    ("--size 2147483648", "--size 2147483648 is too large"),
    (
        "--m 4 --n 18446744073709551615 --k 4",
        "--n 18446744073709551615 is too large",
    ),
    (
        "--size 2147483647",
        "2 m n k: 2 x 2147483647 x 2147483647 x 2147483647 is too large",
    ),
    ("--m 2000000000 --n 2000000000 --k 1", "the matrices:"),
    ("--m 1000000 --n 1000000 --k 1000", "of host memory"),
    ("--size 4 --m 4", "cannot be used with"),
    (
        "--m 4 --n 4",
        "the following required arguments were not provided",
    ),
    ("--sweep --size 4", "cannot be used with"),
    ("--size 4 --kernel nope", "there is no kernel `nope` here"),
];

#[test]
fn bad_requests_are_refused_before_the_gpu() {
    let binary = day_binary(env!("CARGO_BIN_EXE_day06"));
    for (args, expect) in REFUSED {
        let args: Vec<&str> = args.split_whitespace().collect();
        assert_refused(&binary, &args, expect);
    }
}

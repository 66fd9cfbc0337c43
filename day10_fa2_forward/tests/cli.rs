//! day10's binary on bad input: each is refused with exit code 2 and one `error:` line that
//! says what is wrong, before any GPU is opened (so these run, and pass, without one): no
//! panic, no division by zero, no abort while building a vector, no size that wraps around.

use common::family::attention;

/// Head dim 256 is fa_hopper's (and naive's) alone: the fa2 versions by themselves refuse it.
const HEAD_DIM_256: &[(&str, &str)] = &[
    (
        "--head-dim 256 --kernel fa2_mma",
        "fa_hopper for [64, 128, 256]",
    ),
    (
        "--head-dim 256 --kernel fa2_scalar,fa2_mma",
        "--head-dim 256",
    ),
];

common::test_refused_requests!("day10", attention::REFUSED_REQUESTS, HEAD_DIM_256);

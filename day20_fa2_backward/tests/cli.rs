//! day20's binary on bad input: each is refused with exit code 2 and one `error:` line that
//! says what is wrong, before any GPU is opened (so these run, and pass, without one): no
//! panic, no division by zero, no abort while building a vector, no size that wraps around.

use common::family::attention;

/// `(arguments, what the error must say)` that only this day refuses.
const REFUSED: &[(&str, &str)] = &[
    ("--head-dim 80 --kernel fa_hopper", "--head-dim 80"),
    ("--deterministic --batch 0", "must be at least 1"),
    ("--deterministic --dtype f32", "bf16 or f16"),
];

common::test_refused_requests!("day20", attention::REFUSED_REQUESTS, REFUSED);

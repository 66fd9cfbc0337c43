//! day10's binary on bad input: each is refused with exit code 2 and one `error:` line that
//! says what is wrong, before any GPU is opened (so these run, and pass, without one): no
//! panic, no division by zero, no abort while building a vector, no size that wraps around.

use common::family::attention;
use common::testing::{assert_all_refused, day_binary};

#[test]
fn bad_requests_are_refused_before_the_gpu() {
    let binary = day_binary(env!("CARGO_BIN_EXE_day10"));
    assert_all_refused(&binary, attention::REFUSED_REQUESTS);
    // Head dim 256 is fa_hopper's (and naive's) alone: the fa2 versions by themselves refuse it.
    assert_all_refused(
        &binary,
        &[
            (
                "--head-dim 256 --kernel fa2_mma",
                "fa_hopper for [64, 128, 256]",
            ),
            (
                "--head-dim 256 --kernel fa2_scalar,fa2_mma",
                "--head-dim 256",
            ),
        ],
    );
}

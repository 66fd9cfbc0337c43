//! day03's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

use common::family::softmax;
use common::testing::{assert_all_refused, day_binary};

/// `(arguments, what the error must say)` that only this day refuses.
const REFUSED: &[(&str, &str)] = &[
    (
        "--rows 4 --cols 4 --dtype i8",
        "invalid value 'i8' for '--dtype",
    ),
    (
        "--rows 4 --cols 4 --kernel day02_warp --dtype f16",
        "--kernel day02_warp takes f32 only, not f16",
    ),
    (
        "--sweep --kernel day02_warp --dtype bf16",
        "--kernel day02_warp takes f32 only, not bf16",
    ),
];

#[test]
fn bad_requests_are_refused_before_the_gpu() {
    let binary = day_binary(env!("CARGO_BIN_EXE_day03"));
    assert_all_refused(&binary, &[softmax::REFUSED_REQUESTS, REFUSED].concat());
}

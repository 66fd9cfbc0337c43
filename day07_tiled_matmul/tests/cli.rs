//! day07's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

use common::family::matmul;
use common::testing::{assert_all_refused, day_binary};

#[test]
fn bad_requests_are_refused_before_the_gpu() {
    let binary = day_binary(env!("CARGO_BIN_EXE_day07"));
    assert_all_refused(&binary, matmul::REFUSED_REQUESTS);
}

//! day04's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

use common::family::{runner, softmax};

/// `(arguments, what the error must say)` that only this day refuses.
const REFUSED: &[(&str, &str)] = &[(
    "--rows 4 --cols 4 --dtype i8",
    "invalid value 'i8' for '--dtype",
)];

common::test_refused_requests!(
    "day04",
    runner::ROWS_REFUSED,
    softmax::REFUSED_REQUESTS,
    REFUSED
);

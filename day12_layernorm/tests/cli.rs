//! day12's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

use common::family::{norm, runner};

common::test_refused_requests!("day12", runner::ROWS_REFUSED, norm::REFUSED_REQUESTS);

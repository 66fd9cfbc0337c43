//! day07's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

use common::family::matmul;

common::test_refused_requests!("day07", matmul::REFUSED_REQUESTS);

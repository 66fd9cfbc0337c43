//! day21's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

/// (arguments separated by spaces, what the error must say).
const REFUSED: &[(&str, &str)] = &[
    (
        "--op conv2d --image 1073741825x1",
        "--image height is 1073741825, more than the 1073741824 this can take",
    ),
    (
        "--op conv2d_nchw --in-channels 7000 --out-channels 7000 --filter 7x7 --image 1x1",
        "the filter (--out-channels x --in-channels x --filter) is 2401000000, more than the",
    ),
    (
        "--op conv1d --length 0",
        "'--length <LENGTH>': must be at least 1",
    ),
    (
        "--op conv1d --width 0",
        "'--width <WIDTH>': must be at least 1",
    ),
    (
        "--op conv1d --width 32",
        "--width is 32, more than the 31 this can take",
    ),
    (
        "--op conv2d --image 0x5",
        "invalid value '0x5' for '--image",
    ),
    ("--op conv2d --image 64", "is not of the form AxB"),
    (
        "--op conv2d --filter 3x0",
        "invalid value '3x0' for '--filter",
    ),
    (
        "--op conv2d --filter 8x3",
        "--filter height is 8, more than the 7 this can take",
    ),
    (
        "--op conv2d_nchw --filter 3x9",
        "--filter width is 9, more than the 7 this can take",
    ),
    (
        "--op conv2d_nchw --in-channels 0",
        "'--in-channels <IN_CHANNELS>': must be at least 1",
    ),
    (
        "--op conv2d --out-channels 4",
        "--batch/--in-channels/--out-channels is not a size of conv2d",
    ),
    (
        "--op conv1d --image 8x8",
        "--image/--filter is not a size of conv1d",
    ),
    (
        "--op conv2d --length 8",
        "--length/--width is not a size of conv2d",
    ),
    (
        "--op conv1d --length 18446744073709551615",
        "the problem: the sum is too large to address",
    ),
    (
        "--op conv1d --length 4611686018427387903",
        "the problem: 9223372036854775813 x 4 is too large to address",
    ),
    (
        "--op conv2d_nchw --image 1073741824x1073741824",
        "the problem: 16 x 3 x 1073741824 x 1073741824 is too large to address",
    ),
    ("--op conv1d --length 100000000000000", "of host memory"),
    ("--op nope", "invalid value 'nope' for '--op"),
    ("--op conv1d --dtype f16", "day21 has no f16 kernels"),
    ("--op conv1d --dtype i8", "invalid value 'i8' for '--dtype"),
    (
        "--length 8",
        "the following required arguments were not provided",
    ),
    ("--kernel nope", "there is no kernel `nope` here"),
];

common::test_refused_requests!("day21", REFUSED);

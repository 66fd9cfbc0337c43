//! day13's command line: each bad request below is refused with exit 2 and one `error:` line
//! saying why, before any GPU is opened (so this runs, and must pass, on machines without one).

/// (arguments separated by spaces, what the error must say).
const REFUSED: &[(&str, &str)] = &[
    ("--rows 0", "'--rows <ROWS>': must be at least 1"),
    ("--cols 0", "'--cols <COLS>': must be at least 1"),
    (
        "--rows 18446744073709551615",
        "--rows x --cols: 18446744073709551615 x 4096 is too large",
    ),
    (
        "--rows 4294967296 --cols 4294967296",
        "4294967296 x 4294967296 is too large to address",
    ),
    ("--rows 1000000000000000 --cols 1", "of host memory"),
    ("--op nope", "invalid value 'nope' for '--op"),
    ("--dtype i8", "invalid value 'i8' for '--dtype"),
    ("--kernel nope", "there is no kernel `nope` here"),
    (
        "--kernel unfused --op gelu_tanh",
        "--kernel unfused: gelu_tanh has none of these versions",
    ),
    (
        "--kernel vec_fast --op gelu_erf,swiglu_bwd",
        "--kernel vec_fast: swiglu_bwd has none of these versions",
    ),
    (
        "--kernel vec_fast --op silu,relu_bwd",
        "--kernel vec_fast: relu_bwd has none of these versions",
    ),
    // The rectifiers' scalars: finite as f32, HardTanh's bounds in order, and only for an op
    // that takes them.
    (
        "--op leaky_relu --negative-slope nan",
        "invalid value 'nan' for '--negative-slope <NEGATIVE_SLOPE>': not finite as an f32",
    ),
    (
        "--op leaky_relu_bwd --negative-slope inf",
        "invalid value 'inf' for '--negative-slope",
    ),
    (
        "--op leaky_relu --negative-slope 1e39",
        "invalid value '1e39' for '--negative-slope <NEGATIVE_SLOPE>': not finite as an f32",
    ),
    (
        "--op leaky_relu --negative-slope 0.0.1",
        "invalid value '0.0.1' for '--negative-slope <NEGATIVE_SLOPE>': not a number",
    ),
    (
        "--op hardtanh_bwd --max-val -inf",
        "invalid value '-inf' for '--max-val <MAX_VAL>': not finite as an f32",
    ),
    (
        "--op hardtanh --min-val NaN",
        "invalid value 'NaN' for '--min-val <MIN_VAL>': not finite as an f32",
    ),
    (
        "--op hardtanh --min-val 2",
        "--min-val 2 is greater than --max-val 1",
    ),
    (
        "--op hardtanh_bwd --min-val -2 --max-val -3",
        "--min-val -2 is greater than --max-val -3",
    ),
    (
        "--op hardtanh --max-val=-1.5",
        "--min-val -1 is greater than --max-val -1.5",
    ),
    (
        "--op relu,leaky_relu_bwd --min-val -2",
        "--min-val applies to hardtanh and hardtanh_bwd only; name one with --op",
    ),
    (
        "--op hardtanh --negative-slope 0.2",
        "--negative-slope applies to leaky_relu and leaky_relu_bwd only; name one with --op",
    ),
    (
        "--op gelu_tanh,silu_bwd --max-val 3",
        "--max-val applies to hardtanh and hardtanh_bwd only",
    ),
];

common::test_refused_requests!("day13", REFUSED);

//! day20's binary on bad input: each is refused with exit code 2 and one `error:` line that
//! says what is wrong, before any GPU is opened (so these run, and pass, without one): no
//! panic, no division by zero, no abort while building a vector, no size that wraps around.

use common::testing::{assert_refused, day_binary};

/// `(flags, what the error must say)`.
const BAD_INPUTS: &[(&[&str], &str)] = &[
    // Zeros: a division by zero, or an empty problem, before.
    (&["--seqlen", "0"], "must be at least 1"),
    (&["--seqlen-k", "0"], "must be at least 1"),
    (&["--head-dim", "0"], "must be at least 1"),
    (&["--heads", "0"], "must be at least 1"),
    (&["--kv-heads", "0"], "must be at least 1"),
    (&["--batch", "0"], "must be at least 1"),
    (&["--varlen", "0"], "must be at least 1"),
    (&["--varlen", "5,0,3"], "must be at least 1"),
    (&["--seqlen=-3"], "not a whole number"),
    (&["--seqlen", "1e15"], "not a whole number"),
    // Huge sizes: an abort while building the lengths, or a product that wraps.
    (
        &["--batch", "1000000000000000"],
        "--batch is 1000000000000000",
    ),
    (&["--seqlen", "1000000000000000"], "2^31"),
    (
        &[
            "--seqlen",
            "8",
            "--batch",
            "1",
            "--seqlen-k",
            "1000000000000000",
        ],
        "2^31",
    ),
    (
        &["--seqlen", "8", "--seqlen-k", "1000000000000000"],
        "too large to address",
    ),
    (
        &["--seqlen", "1152921504606846976", "--batch", "64"],
        "too large to address",
    ),
    (
        &["--varlen", "18446744073709551615,1"],
        "the query lengths: the sum is too large",
    ),
    (&["--heads", "70000", "--seqlen", "8"], "65535"),
    // Head dims and groups no kernel takes.
    (&["--head-dim", "2048"], "--head-dim is 2048"),
    (
        &["--head-dim", "96", "--kernel", "fa2_mma"],
        "--head-dim 96",
    ),
    (
        &["--head-dim", "80", "--kernel", "fa_hopper"],
        "--head-dim 80",
    ),
    (&["--head-dim", "96", "--sweep"], "--head-dim 96"),
    (&["--heads", "4", "--kv-heads", "3"], "must divide"),
    (&["--heads", "4", "--kv-heads", "8"], "must divide"),
    // Refused up front now, not after opening the GPU and compiling.
    (&["--dtype", "f32"], "bf16 or f16"),
    (&["--varlen", "4,5", "--seqlen", "4"], "--varlen replaces"),
    (&["--kernel", "fa3"], "no kernel `fa3`"),
    (&["--deterministic", "--batch", "0"], "must be at least 1"),
    (&["--deterministic", "--dtype", "f32"], "bf16 or f16"),
];

#[test]
fn bad_input_is_refused_before_the_gpu_is_opened() {
    let binary = day_binary(env!("CARGO_BIN_EXE_day20"));
    // Every case runs, and the failures are reported together.
    let failed: Vec<String> = BAD_INPUTS
        .iter()
        .filter(|(args, expect)| {
            std::panic::catch_unwind(|| assert_refused(&binary, args, expect)).is_err()
        })
        .map(|(args, _)| args.join(" "))
        .collect();
    assert!(failed.is_empty(), "not refused as expected: {failed:?}");
}

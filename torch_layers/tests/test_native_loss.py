"""The fused linear cross-entropy's entry points, with neither torch nor a GPU: sizes and
options the kernels cannot take are a ValueError before any device is opened, and the default
chunk is day 19's."""

import pytest

from day_kernels import _native


def call(tokens=8, hidden=64, vocab=1000, chunk=1, ignore_index=-100, smoothing=0.0, z_loss=0.0):
    return _native.fused_linear_cross_entropy(
        0, 0, tokens, hidden, vocab, chunk, ignore_index, smoothing, z_loss, 0, 0, 0, 0, 0,
        (0, 0, 0, 0),
    )


@pytest.mark.parametrize("tokens, hidden, vocab", [(0, 64, 1000), (8, 0, 1000), (8, 64, 0)])
def test_an_empty_problem_is_a_value_error(tokens, hidden, vocab):
    with pytest.raises(ValueError, match="at least one of each"):
        call(tokens, hidden, vocab)


@pytest.mark.parametrize(
    "sizes, what",
    [
        ((8, 64, 2**31), "the vocabulary is 2147483648"),
        ((8, 2**31, 8), "the hidden size is 2147483648"),
        ((2**28, 64, 8), "tokens is 268435456"),
        ((2**20, 2**31 - 1, 2**31 - 1), "too large to address"),
    ],
)
def test_sizes_past_the_kernels_limits_are_value_errors(sizes, what):
    with pytest.raises(ValueError, match=what):
        call(*sizes)


@pytest.mark.parametrize("chunk", [0, 9])
def test_a_chunk_of_no_tokens_or_more_than_all_is_a_value_error(chunk):
    # The Python layer passes its chunk_size capped at the tokens, or day 19's default.
    with pytest.raises(ValueError, match=f"a chunk of {chunk} tokens; it takes from 1 to the 8"):
        call(chunk=chunk)


@pytest.mark.parametrize(
    "options, what",
    [
        ({"smoothing": 1.5}, "label smoothing must be in"),
        ({"smoothing": float("nan")}, "label smoothing must be in"),
        ({"z_loss": -1e-4}, "z-loss coefficient must be finite"),
        ({"z_loss": float("inf")}, "z-loss coefficient must be finite"),
        ({"ignore_index": 2**31}, "is not an int32"),
    ],
)
def test_options_out_of_range_are_value_errors(options, what):
    with pytest.raises(ValueError, match=what):
        call(**options)


def test_the_default_chunk_is_day_19s():
    chunk = _native.fused_linear_cross_entropy_chunk
    assert chunk(8192, 4096, 128256) == 1024
    # Small vocabularies: one chunk; a few tokens: all of them; never below 128 rows otherwise.
    assert chunk(8192, 4096, 1000) == 8192
    assert chunk(17, 64, 1000) == 17
    assert chunk(8192, 1024, 1 << 20) == 128
    with pytest.raises(ValueError, match="at least one of each"):
        chunk(0, 64, 1000)

"""fused_linear_cross_entropy refuses bad arguments before anything runs (torch, no GPU
needed): every check of what the arguments say comes before the one of where they are, so CPU
tensors reach each of them."""

import pytest
import torch

from day_kernels import fused_linear_cross_entropy


def problem(tokens=16, hidden=64, vocab=100, h_dtype=torch.bfloat16, w_dtype=torch.bfloat16,
            labels_dtype=torch.int64):
    h = torch.zeros(tokens, hidden, dtype=h_dtype)
    w = torch.zeros(vocab, hidden, dtype=w_dtype)
    labels = torch.zeros(tokens, dtype=labels_dtype)
    return h, w, labels


def test_cpu_tensors_are_a_value_error():
    with pytest.raises(ValueError, match="h is on cpu; the kernels run on CUDA tensors"):
        fused_linear_cross_entropy(*problem())


@pytest.mark.parametrize(
    "dtypes, what",
    [
        ({"h_dtype": torch.float32}, "h is float32; it must be bfloat16"),
        ({"h_dtype": torch.float16}, "h is float16; it must be bfloat16"),
        ({"w_dtype": torch.float32}, "weight is float32; it must be bfloat16"),
        ({"labels_dtype": torch.int32}, "labels is int32; it must be int64"),
        ({"labels_dtype": torch.float32}, "labels is float32; it must be int64"),
    ],
)
def test_dtypes_the_kernels_do_not_take_are_type_errors(dtypes, what):
    with pytest.raises(TypeError, match=what):
        fused_linear_cross_entropy(*problem(**dtypes))


def test_hidden_sizes_that_do_not_match_are_a_value_error():
    h, _, labels = problem(hidden=64)
    w = torch.zeros(100, 65, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="h's hidden size is 64 but weight \\(100, 65\\) has 65 columns"):
        fused_linear_cross_entropy(h, w, labels)


def test_a_transposed_weight_is_a_value_error():
    # [hidden, vocab] (a matmul's right operand) is not nn.Linear's layout.
    h, w, labels = problem(hidden=64, vocab=100)
    with pytest.raises(ValueError, match="must be \\[vocab, hidden\\]"):
        fused_linear_cross_entropy(h, w.T.contiguous(), labels)


@pytest.mark.parametrize("labels_shape", [(15,), (17,), (4, 4), (16, 1)])
def test_labels_of_the_wrong_length_or_shape_are_a_value_error(labels_shape):
    h, w, _ = problem(tokens=16)
    with pytest.raises(ValueError, match="holds 16 tokens: labels must be \\(16,\\)"):
        fused_linear_cross_entropy(h, w, torch.zeros(labels_shape, dtype=torch.int64))


def test_labels_of_hs_leading_shape_pass_the_shape_checks():
    h = torch.zeros(2, 8, 64, dtype=torch.bfloat16)
    w = torch.zeros(100, 64, dtype=torch.bfloat16)
    for labels in (torch.zeros(2, 8, dtype=torch.int64), torch.zeros(16, dtype=torch.int64)):
        with pytest.raises(ValueError, match="is on cpu"):
            fused_linear_cross_entropy(h, w, labels)


@pytest.mark.parametrize(
    "h_shape, w_shape, what",
    [
        ((64,), (100, 64), "h has shape \\(64,\\); it must be \\[..., hidden\\]"),
        ((16, 64), (100, 64, 1), "weight has shape \\(100, 64, 1\\)"),
        ((0, 64), (100, 64), "0 tokens"),
        ((16, 64), (0, 64), "vocabulary 0"),
    ],
)
def test_shapes_the_kernels_cannot_take_are_value_errors(h_shape, w_shape, what):
    h = torch.zeros(h_shape, dtype=torch.bfloat16)
    w = torch.zeros(w_shape, dtype=torch.bfloat16)
    labels = torch.zeros(h_shape[:-1] if len(h_shape) > 1 else (1,), dtype=torch.int64)
    with pytest.raises(ValueError, match=what):
        fused_linear_cross_entropy(h, w, labels)


def test_a_non_contiguous_h_is_a_value_error():
    h = torch.zeros(64, 16, dtype=torch.bfloat16).T
    _, w, labels = problem(tokens=16, hidden=64)
    with pytest.raises(ValueError, match=r"h is not contiguous .* pass h.contiguous\(\)"):
        fused_linear_cross_entropy(h, w, labels)


def test_not_a_tensor_is_a_type_error():
    _, w, labels = problem()
    with pytest.raises(TypeError, match="h must be a torch.Tensor, not list"):
        fused_linear_cross_entropy([[1.0]], w, labels)


@pytest.mark.parametrize(
    "options, error, what",
    [
        ({"reduction": "none"}, ValueError, "reduction must be 'mean' or 'sum', not 'none'"),
        ({"reduction": "avg"}, ValueError, "reduction must be"),
        ({"label_smoothing": 1.5}, ValueError, "label_smoothing must be in \\[0, 1\\]"),
        ({"label_smoothing": -0.1}, ValueError, "label_smoothing must be in"),
        ({"label_smoothing": "0.1"}, TypeError, "label_smoothing must be a number"),
        ({"lse_square_scale": -1e-4}, ValueError, "lse_square_scale must be finite and >= 0"),
        ({"lse_square_scale": float("nan")}, ValueError, "lse_square_scale must be finite"),
        ({"ignore_index": 2**31}, ValueError, "ignore_index 2147483648 is not an int32"),
        ({"ignore_index": -100.0}, TypeError, "ignore_index must be an int"),
        ({"chunk_size": 0}, ValueError, "chunk_size must be at least 1 token"),
        ({"chunk_size": 64.0}, TypeError, "chunk_size must be an int"),
    ],
)
def test_options_the_kernels_cannot_take_are_refused(options, error, what):
    with pytest.raises(error, match=what):
        fused_linear_cross_entropy(*problem(), **options)

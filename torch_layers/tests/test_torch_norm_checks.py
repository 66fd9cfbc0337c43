"""rms_norm and layer_norm refuse bad arguments before anything runs (torch, no GPU needed)."""

import pytest
import torch

from day_kernels import layer_norm, rms_norm


def args(kind, dtype=torch.bfloat16, shape=(4, 64), cols=None):
    """x, weight (and bias) on the CPU: everything right but the device."""
    cols = shape[-1] if cols is None else cols
    x = torch.zeros(shape, dtype=dtype)
    params = [torch.ones(cols, dtype=dtype)]
    if kind == "layer":
        params.append(torch.zeros(cols, dtype=dtype))
    return [x, *params]


def call(kind, *a, **kw):
    return (layer_norm if kind == "layer" else rms_norm)(*a, **kw)


KINDS = ["rms", "layer"]
NAMES = {"rms": "rms_norm", "layer": "layer_norm"}


@pytest.mark.parametrize("kind", KINDS)
def test_a_cpu_tensor_is_a_value_error(kind):
    with pytest.raises(ValueError, match=f"{NAMES[kind]}: x is on cpu; the kernels run on CUDA tensors"):
        call(kind, *args(kind))


@pytest.mark.parametrize("kind", KINDS)
def test_a_dtype_the_kernels_do_not_take_is_a_type_error(kind):
    with pytest.raises(TypeError, match="x is float64; it must be bfloat16 or float16 or float32"):
        call(kind, *args(kind, torch.float64))


@pytest.mark.parametrize("kind", KINDS)
def test_parameters_of_another_dtype_than_x_are_a_type_error(kind):
    x, weight, *rest = args(kind)
    with pytest.raises(TypeError, match=r"the tensors must share one dtype \(x bfloat16, weight float32"):
        call(kind, x, weight.float(), *rest)


@pytest.mark.parametrize("kind", KINDS)
def test_a_non_contiguous_tensor_is_a_value_error(kind):
    x, *params = args(kind, shape=(64, 4), cols=4)
    x = x.t()  # [4, 64] seen through strides (1, 4)
    params = [p.new_ones(64) for p in params]
    with pytest.raises(ValueError, match=r"x is not contiguous .* pass x.contiguous\(\)"):
        call(kind, x, *params)


@pytest.mark.parametrize("kind", KINDS)
def test_a_weight_of_the_wrong_length_is_a_value_error(kind):
    x, *params = args(kind, cols=63)
    with pytest.raises(ValueError, match=r"weight has shape \(63,\); it must be \(64,\), x's last dimension"):
        call(kind, x, *params)


def test_a_bias_of_the_wrong_length_is_a_value_error():
    x, weight, _ = args("layer")
    with pytest.raises(ValueError, match=r"bias has shape \(4, 64\); it must be \(64,\)"):
        layer_norm(x, weight, torch.zeros(4, 64, dtype=x.dtype))


@pytest.mark.parametrize("kind", KINDS)
def test_a_scalar_x_is_a_value_error(kind):
    _, *params = args(kind, shape=(1,))
    with pytest.raises(ValueError, match="x is a scalar"):
        call(kind, torch.tensor(1.0, dtype=torch.bfloat16), *params)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("eps", [-1e-5, float("nan"), float("inf")])
def test_an_eps_that_is_negative_or_not_finite_is_a_value_error(kind, eps):
    with pytest.raises(ValueError, match="eps must be a non-negative finite number"):
        call(kind, *args(kind), eps=eps)


@pytest.mark.parametrize("kind", KINDS)
def test_not_a_tensor_is_a_type_error(kind):
    _, *params = args(kind)
    with pytest.raises(TypeError, match="x must be a torch.Tensor, not list"):
        call(kind, [1.0], *params)

"""The norm and SwiGLU entry points of the extension, with neither torch nor a GPU: sizes,
dtypes and eps the kernels cannot take are a ValueError before any device is opened."""

import pytest

from day_kernels import _native

NORMS = {
    "rms_norm_forward": lambda rows, cols, dtype="bfloat16", eps=1e-6: _native.rms_norm_forward(
        0, 0, dtype, rows, cols, eps, 0, 0, 0),
    "rms_norm_backward": lambda rows, cols, dtype="bfloat16", eps=1e-6: _native.rms_norm_backward(
        0, 0, dtype, rows, cols, eps, 0, 0, 0, 0, 0),
    "layer_norm_forward": lambda rows, cols, dtype="bfloat16", eps=1e-5: _native.layer_norm_forward(
        0, 0, dtype, rows, cols, eps, 0, 0, 0, 0),
    "layer_norm_backward": lambda rows, cols, dtype="bfloat16", eps=1e-5: _native.layer_norm_backward(
        0, 0, dtype, rows, cols, eps, 0, 0, 0, 0, 0),
}


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("rows, cols", [(0, 64), (4, 0)])
def test_an_empty_norm_is_a_value_error(name, rows, cols):
    with pytest.raises(ValueError, match="is empty"):
        NORMS[name](rows, cols)


@pytest.mark.parametrize("name", NORMS)
def test_a_norm_too_large_to_address_is_a_value_error(name):
    with pytest.raises(ValueError, match="cannot be addressed"):
        NORMS[name](2**62, 2**10)


@pytest.mark.parametrize("name", NORMS)
def test_an_unknown_dtype_is_a_value_error(name):
    with pytest.raises(ValueError, match="bfloat16, float16 or float32 tensors, not float64"):
        NORMS[name](4, 64, dtype="float64")


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("eps", [-1.0, float("nan"), 1e39])
def test_an_eps_the_kernels_cannot_take_is_a_value_error(name, eps):
    with pytest.raises(ValueError, match="eps must be"):
        NORMS[name](4, 64, eps=eps)


def test_an_empty_swiglu_is_a_value_error():
    with pytest.raises(ValueError, match="empty"):
        _native.swiglu_forward(0, 0, "bfloat16", 0, 0, 0, 0)
    with pytest.raises(ValueError, match="empty"):
        _native.swiglu_backward(0, 0, "bfloat16", 0, 0, 0, 0, 0)


def test_a_swiglu_too_large_to_address_is_a_value_error():
    with pytest.raises(ValueError, match="cannot be addressed"):
        _native.swiglu_backward(0, 0, "float32", 2**62, 0, 0, 0, 0)


def test_swiglu_of_an_unknown_dtype_is_a_value_error():
    with pytest.raises(ValueError, match="bfloat16, float16 or float32 tensors, not int8"):
        _native.swiglu_forward(0, 0, "int8", 8, 0, 0, 0)

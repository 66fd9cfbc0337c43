"""The extension itself, with neither torch nor a GPU: it imports, and refuses clearly."""

import os

import pytest

import day_kernels
from day_kernels import _native


def test_the_package_imports_without_torch():
    assert callable(_native.attention_forward)
    assert "flash_attention" in day_kernels.__all__


def test_a_shape_the_kernels_cannot_take_is_a_value_error_before_any_gpu_work():
    # Zero heads: refused by day 10's own validation, before a device is opened.
    with pytest.raises(ValueError, match="heads"):
        _native.attention_forward(0, 0, "bfloat16", [8], [8], 0, 0, 64, False, 0, 0, 0, 0, 0, 0)
    # The backward's workspace is sized the same way: refused before a device is opened.
    with pytest.raises(ValueError, match="heads"):
        _native.attention_workspace(0, 0, "bfloat16", ([8], [8], 0, 0, 64, False))


def test_an_unknown_dtype_is_a_value_error():
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        _native.attention_forward(0, 0, "float64", [8], [8], 2, 2, 64, False, 0, 0, 0, 0, 0, 0)


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="this machine has a GPU")
def test_no_gpu_is_a_runtime_error_with_one_clear_line():
    with pytest.raises(RuntimeError) as e:
        day_kernels.device_summary(0)
    assert "\n" not in str(e.value)
    assert "NVIDIA" in str(e.value) or "CUDA" in str(e.value)

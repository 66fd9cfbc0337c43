"""swiglu refuses bad arguments before anything runs (torch, no GPU needed)."""

import pytest
import torch

from day_kernels import swiglu


def pair(dtype=torch.bfloat16, shape=(4, 64)):
    return torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)


def test_a_cpu_tensor_is_a_value_error():
    with pytest.raises(ValueError, match="swiglu: gate is on cpu; the kernels run on CUDA tensors"):
        swiglu(*pair())


def test_a_dtype_the_kernels_do_not_take_is_a_type_error():
    with pytest.raises(TypeError, match="gate is float64; it must be bfloat16 or float16 or float32"):
        swiglu(*pair(torch.float64))


def test_two_dtypes_are_a_type_error():
    gate, up = pair()
    with pytest.raises(TypeError, match=r"the tensors must share one dtype \(gate bfloat16, up float16\)"):
        swiglu(gate, up.half())


def test_a_non_contiguous_tensor_is_a_value_error():
    gate, up = pair(shape=(64, 4))
    with pytest.raises(ValueError, match=r"gate is not contiguous .* pass gate.contiguous\(\)"):
        swiglu(gate.t(), up.t().contiguous())


def test_the_halves_of_a_fused_projection_must_be_made_contiguous():
    h = torch.zeros(4, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="gate is not contiguous"):
        swiglu(*h.chunk(2, dim=-1))


def test_shapes_that_differ_are_a_value_error():
    gate, _ = pair()
    with pytest.raises(ValueError, match=r"gate \(4, 64\) and up \(1, 64\) must have one shape"):
        swiglu(gate, torch.zeros(1, 64, dtype=gate.dtype))


def test_not_a_tensor_is_a_type_error():
    with pytest.raises(TypeError, match="up must be a torch.Tensor, not float"):
        swiglu(pair()[0], 1.0)

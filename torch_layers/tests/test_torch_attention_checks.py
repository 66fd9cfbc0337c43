"""flash_attention refuses bad arguments before anything runs (torch, no GPU needed)."""

import pytest
import torch

from day_kernels import flash_attention


def qkv(dtype=torch.bfloat16, shape=(2, 16, 4, 64)):
    return [torch.zeros(shape, dtype=dtype) for _ in range(3)]


def test_a_cpu_tensor_is_a_value_error():
    with pytest.raises(ValueError, match="q is on cpu; the kernels run on CUDA tensors"):
        flash_attention(*qkv())


def test_a_dtype_the_kernels_do_not_take_is_a_type_error():
    with pytest.raises(TypeError, match="q is float32; it must be bfloat16 or float16"):
        flash_attention(*qkv(torch.float32))


def test_a_non_contiguous_tensor_is_a_value_error():
    q, k, v = qkv(shape=(2, 4, 16, 64))
    with pytest.raises(ValueError, match=r"q is not contiguous .* pass q.contiguous\(\)"):
        flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))


def test_a_tensor_of_the_wrong_rank_is_a_value_error():
    # Each tensor's own checks come before its device, q's before k's.
    with pytest.raises(ValueError, match="q has 2 dimensions"):
        flash_attention(torch.zeros(16, 64, dtype=torch.bfloat16), *qkv()[1:])


def test_not_a_tensor_is_a_type_error():
    with pytest.raises(TypeError, match="q must be a torch.Tensor, not list"):
        flash_attention([1.0], *qkv()[1:])

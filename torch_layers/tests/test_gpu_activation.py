"""swiglu on the GPU: the output and the gradients of gate and up against ``F.silu(gate) * up``
by PyTorch's autograd in float64 on the same stored inputs.

The tolerance is day 13's (``day13::reference::tolerance_for`` with one
rounding): per element ``atol + rtol |ref|`` with ``atol = 1e-5`` (plus 2^-24 for f16, where
it turns subnormal) and ``rtol = 1e-5 + u`` (``u`` half an ulp of the storage: 2^-8 bf16,
2^-11 f16, 0 f32): f32 evaluation within a few ulp, absolute near the gradient's zero
crossings, then one rounding to the storage. The relative L2 error stays under 5e-3 (bf16),
1e-3 (f16), 1e-5 (f32). Inputs as the day's own: gate and up uniform in [-6, 6] (both tails
of the sigmoid), the upstream gradient in [-1, 1].
"""

import pytest
import torch
import torch.nn.functional as F

from day_kernels import _native, swiglu
from day_kernels._tensors import DTYPE_NAMES, where
from gpu_checks import check, offset_copy

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# Half an ulp (relative), the absolute floor, the bound on the relative L2 error.
STORAGE = {
    torch.bfloat16: (2.0**-8, 0.0, 5e-3),
    torch.float16: (2.0**-11, 2.0**-24, 1e-3),
    torch.float32: (0.0, 0.0, 1e-5),
}
# One element; fewer than a pack; rows of odd widths; whole packs and a leftover; a 3-D shape.
SHAPES = [(1,), (7,), (3, 1000), (257, 4097), (257, 5120), (2, 3, 64), (5, 4096 + 3)]


def tolerance(dtype):
    half_ulp, floor, rel_l2 = STORAGE[dtype]
    return 1e-5 + floor, 1e-5 + half_ulp, rel_l2


def inputs(shape, dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def uniform(lo, hi):
        return (torch.rand(shape, generator=gen, device="cuda") * (hi - lo) + lo).to(dtype)

    return uniform(-6.0, 6.0), uniform(-6.0, 6.0), uniform(-1.0, 1.0)


def run_and_check(gate, up, dout):
    g = gate.clone().requires_grad_()
    u = up.clone().requires_grad_()
    out = swiglu(g, u)
    out.backward(dout)
    g64 = gate.double().requires_grad_()
    u64 = up.double().requires_grad_()
    want = F.silu(g64) * u64
    want.backward(dout.double())
    what = f"swiglu {tuple(gate.shape)} {DTYPE_NAMES[gate.dtype]}"
    assert out.shape == gate.shape and out.dtype == gate.dtype
    tol = tolerance(gate.dtype)
    check(f"{what} out", out, want.detach(), tol)
    check(f"{what} dgate", g.grad, g64.grad, tol)
    check(f"{what} dup", u.grad, u64.grad, tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: DTYPE_NAMES[d])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_output_and_gradients_match_torch(shape, dtype):
    run_and_check(*inputs(shape, dtype, seed=sum(shape)))


@pytest.mark.parametrize("which", ["gate", "up", "dout"])
def test_tensors_off_16_byte_boundaries_take_the_scalar_version(which):
    gate, up, dout = inputs((257, 4096), torch.bfloat16, seed=1)
    if which == "gate":
        gate = offset_copy(gate)
    elif which == "up":
        up = offset_copy(up)
    else:
        dout = offset_copy(dout)
    run_and_check(gate, up, dout)


def test_a_broadcast_upstream_gradient():
    gate, up, _ = inputs((3, 1000), torch.float16, seed=2)
    dout = torch.ones((), dtype=gate.dtype, device=gate.device).expand_as(gate)
    run_and_check(gate, up, dout)


def test_on_a_side_stream():
    gate, up, dout = inputs((257, 4096), torch.bfloat16, seed=3)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run_and_check(gate, up, dout)
    torch.cuda.current_stream().wait_stream(stream)


def test_empty_tensors_give_empty_results():
    gate = torch.empty(0, 64, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    up = torch.empty(0, 64, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    out = swiglu(gate, up)
    out.backward(torch.empty_like(out))
    assert out.shape == (0, 64) and gate.grad.shape == (0, 64) and up.grad.shape == (0, 64)


def test_vec_runs_on_aligned_tensors_and_scalar_on_the_others():
    gate, up, dout = inputs((3, 4096), torch.bfloat16)
    device, stream = where(gate.device)
    n = gate.numel()
    out = torch.empty_like(gate)
    grads = torch.empty(2 * n, dtype=gate.dtype, device=gate.device)
    assert _native.swiglu_forward(device, stream, "bfloat16", n, gate.data_ptr(), up.data_ptr(),
                                  out.data_ptr()) == "vec"
    assert _native.swiglu_backward(device, stream, "bfloat16", n, dout.data_ptr(), gate.data_ptr(),
                                   up.data_ptr(), grads.data_ptr()) == "vec"
    odd = offset_copy(gate)
    assert _native.swiglu_forward(device, stream, "bfloat16", n, odd.data_ptr(), up.data_ptr(),
                                  out.data_ptr()) == "scalar"
    torch.cuda.synchronize()

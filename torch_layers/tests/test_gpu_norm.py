"""rms_norm and layer_norm on the GPU: y and the gradients of x, weight (and bias) against
PyTorch's own in float64.

The reference is ``F.rms_norm`` (the formula where this torch lacks it) and ``F.layer_norm``,
run with autograd in float64 on the same stored inputs; the tolerances are days 11 and 12's
(``common/src/reference/norm.rs``): per element ``atol + rtol |ref|`` with ``gamma = (terms +
8) 2^-24`` for a chain of ``terms`` f32 additions, ``atol = floor + gamma * scale`` (the
magnitudes the absolute errors scale with: LayerNorm's mean, dx's cancelling terms, the column
sums' terms) and ``rtol = max(gamma, 1e-5) + u`` (``u`` half an ulp of the storage: 2^-8
bf16, 2^-11 f16, 0 f32); and a relative L2 error under 5e-3 (bf16), 1e-3 (f16), 1e-5 (f32),
except for a part whose root mean square is under its atol or that has fewer than 64 elements,
which is judged per element only (as ``check_backward``). The terms are bounded over every
version that may run: a row's chain is at most ``max(32 + 10, cols / 256 + 10)`` (the
register versions' elements per thread plus the tree, the block versions' strided share plus
the tree), a column sum's at most ``rows + rows / 32 + 32``.

Inputs as the days' own: x uniform in [-1, 3) (mean 1: a LayerNorm that forgets the mean
fails), the weight in [0.5, 1.5), the bias in [-0.5, 0.5), dy in [-1, 1).
"""

import math

import pytest
import torch
import torch.nn.functional as F

from day_kernels import _native, layer_norm, rms_norm
from day_kernels._tensors import DTYPE_NAMES, where
from gpu_checks import check, offset_copy

UNIT = 2.0**-24
# Half an ulp of the storage (relative), the absolute floor, the bound on the relative L2 error.
STORAGE = {
    torch.bfloat16: (2.0**-8, 1e-12, 5e-3),
    torch.float16: (2.0**-11, 2.0**-24, 1e-3),
    torch.float32: (0.0, 1e-12, 1e-5),
}
EPS = {"rms": 1e-6, "layer": 1e-5}
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
ROWS = [1, 3, 257]
# 64, 1000, 4096, 5120: whole 16-byte packs, the register versions; 4097: not whole packs
# (scalar-load register kernels forward, bwd_vec_regs backward); 8193: past the backward's
# register tiers (bwd_split).
COLS = [64, 1000, 4096, 5120, 4097, 8193]


def tolerance(dtype, terms, scale):
    """(atol, rtol, max relative L2) of an output of `dtype` computed with chains of `terms`
    f32 additions, whose absolute error scales with `scale`."""
    half_ulp, floor, rel_l2 = STORAGE[dtype]
    gamma = (terms + 8) * UNIT
    return floor + gamma * scale, max(gamma, 1e-5) + half_ulp, rel_l2


def row_terms(cols):
    return max(32 + 10, math.ceil(cols / 256) + 10)


def col_terms(rows):
    return rows + math.ceil(rows / 32) + 32


def inputs(kind, rows, cols, dtype, seed=0):
    """x, weight, bias (None for RMSNorm), dy on the GPU, as stored."""
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def uniform(shape, lo, hi):
        return (torch.rand(shape, generator=gen, device="cuda") * (hi - lo) + lo).to(dtype)

    x = uniform((rows, cols), -1.0, 3.0)
    weight = uniform((cols,), 0.5, 1.5)
    bias = uniform((cols,), -0.5, 0.5) if kind == "layer" else None
    dy = uniform((rows, cols), -1.0, 1.0)
    return x, weight, bias, dy


def torch_reference(kind, x, weight, bias, dy, eps):
    """y and the gradients {x, weight[, bias]} by PyTorch's autograd in float64."""
    leaves = {"x": x.double(), "weight": weight.double()}
    if bias is not None:
        leaves["bias"] = bias.double()
    for t in leaves.values():
        t.requires_grad_()
    cols = x.shape[-1]
    if kind == "layer":
        y = F.layer_norm(leaves["x"], (cols,), leaves["weight"], leaves["bias"], eps)
    elif hasattr(F, "rms_norm"):
        y = F.rms_norm(leaves["x"], (cols,), leaves["weight"], eps)
    else:
        xx = leaves["x"]
        y = xx * torch.rsqrt(xx.pow(2).mean(-1, keepdim=True) + eps) * leaves["weight"]
    y.backward(dy.double())
    return y.detach(), {name: t.grad for name, t in leaves.items()}


def error_scales(kind, x, weight, bias, dy, eps):
    """The magnitudes the days' absolute errors scale with (``reference::norm``'s
    ``error_scale``, ``dx_scale``, ``dweight_scale``, ``dbias_scale``), in float64."""
    x, w, dy = x.double(), weight.double(), dy.double()
    layer = kind == "layer"
    mean = x.mean(-1, keepdim=True) if layer else torch.zeros_like(x[..., :1])
    rstd = torch.rsqrt((x - mean).pow(2).mean(-1, keepdim=True) + eps)
    xhat = (x - mean) * rstd
    g = dy * w
    row_max = x.abs().amax(-1, keepdim=True)
    scales = {"y": 0.0}
    if layer:
        b_max = bias.double().abs().max()
        scales["y"] = (2 * rstd * row_max * w.abs().max() + b_max).max().item()
    # LayerNorm's xhat carries the mean's error, rstd * row_terms * u * max|x|.
    xhat_error = rstd * row_max if layer else torch.zeros_like(rstd)
    scales["weight"] = (dy.abs() * (xhat.abs() + xhat_error)).sum(0).max().item()
    scales["bias"] = dy.abs().sum(0).max().item()
    g_max = g.abs().amax(-1, keepdim=True)
    xhat_max = xhat.abs().amax(-1, keepdim=True)
    g_xhat_max = (g * xhat).abs().amax(-1, keepdim=True)
    mean_error = g_max + rstd * row_max * g_xhat_max if layer else torch.zeros_like(g_max)
    scales["x"] = (rstd * (g_max + 3 * xhat_max * g_xhat_max + mean_error)).max().item()
    return scales


def run_layer(kind, x, weight, bias, dy):
    """y and the gradients by the layer, on copies of the inputs."""
    leaves = {"x": x.clone(), "weight": weight.clone()}
    if bias is not None:
        leaves["bias"] = bias.clone()
    for t in leaves.values():
        t.requires_grad_()
    if kind == "layer":
        y = layer_norm(leaves["x"], leaves["weight"], leaves["bias"], eps=EPS[kind])
    else:
        y = rms_norm(leaves["x"], leaves["weight"], eps=EPS[kind])
    y.backward(dy)
    return y.detach(), {name: t.grad for name, t in leaves.items()}


def run_and_check(kind, x, weight, bias, dy):
    rows = x.numel() // x.shape[-1]
    cols = x.shape[-1]
    eps = EPS[kind]
    y, grads = run_layer(kind, x, weight, bias, dy)
    want_y, want = torch_reference(kind, x, weight, bias, dy, eps)
    scales = error_scales(kind, x.reshape(rows, cols), weight, bias, dy.reshape(rows, cols), eps)
    dtype = x.dtype
    assert y.dtype == dtype and y.shape == x.shape
    what = f"{kind} {tuple(x.shape)} {DTYPE_NAMES[dtype]}"
    rt, ct = row_terms(cols), col_terms(rows)
    check(f"{what} y", y, want_y, tolerance(dtype, rt, scales["y"]))
    check(f"{what} dx", grads["x"], want["x"], tolerance(dtype, rt, scales["x"]))
    check(f"{what} dweight", grads["weight"], want["weight"], tolerance(dtype, ct + rt + 8, scales["weight"]))
    if bias is not None:
        check(f"{what} dbias", grads["bias"], want["bias"], tolerance(dtype, ct + 8, scales["bias"]))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: DTYPE_NAMES[d])
@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_outputs_and_gradients_match_torch(kind, rows, cols, dtype):
    run_and_check(kind, *inputs(kind, rows, cols, dtype, seed=rows * 100003 + cols))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: DTYPE_NAMES[d])
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_a_row_past_the_forward_register_tiers(kind, dtype):
    # 32769 columns: vec_regs refuses, block / welford_block take it; bwd_split backward.
    run_and_check(kind, *inputs(kind, 3, 32769, dtype, seed=7))


@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_leading_dimensions_are_rows(kind):
    x, weight, bias, dy = inputs(kind, 2 * 3 * 5, 1000, torch.bfloat16, seed=3)
    run_and_check(kind, x.view(2, 3, 5, 1000), weight, bias, dy.view(2, 3, 5, 1000))


@pytest.mark.parametrize("which", ["x", "weight", "dy"])
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_tensors_off_16_byte_boundaries_take_the_scalar_load_versions(kind, which):
    x, weight, bias, dy = inputs(kind, 257, 4096, torch.bfloat16, seed=11)
    if which == "x":
        x = offset_copy(x)
    elif which == "weight":
        weight = offset_copy(weight)
    else:
        dy = offset_copy(dy)
    assert (x.data_ptr() % 16, weight.data_ptr() % 16, dy.data_ptr() % 16).count(0) == 2
    run_and_check(kind, x, weight, bias, dy)


@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_a_broadcast_upstream_gradient(kind):
    # The gradient of y.sum(): one value expanded over x's shape (stride 0), which the layer
    # makes contiguous before the kernels read it by rows.
    x, weight, bias, _ = inputs(kind, 3, 1000, torch.float16, seed=5)
    dy = torch.ones((), dtype=x.dtype, device=x.device).expand_as(x)
    assert dy.stride() == (0, 0)
    run_and_check(kind, x, weight, bias, dy)


@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_on_a_side_stream(kind):
    x, weight, bias, dy = inputs(kind, 257, 4096, torch.bfloat16, seed=13)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run_and_check(kind, x, weight, bias, dy)
    torch.cuda.current_stream().wait_stream(stream)


@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_an_empty_batch_gives_an_empty_output_and_zero_parameter_gradients(kind):
    x, weight, bias, _ = inputs(kind, 1, 64, torch.bfloat16)
    x = x[:0].clone().requires_grad_()
    ww = weight.clone().requires_grad_()
    if kind == "layer":
        bb = bias.clone().requires_grad_()
        y = layer_norm(x, ww, bb, eps=1e-5)
    else:
        y = rms_norm(x, ww)
    assert y.shape == (0, 64)
    y.backward(torch.empty_like(y))
    assert x.grad.shape == (0, 64) and (ww.grad == 0).all()
    if kind == "layer":
        assert (bb.grad == 0).all()


def native_version(kind, rows, cols, dtype, backward):
    """Runs the native call directly on fresh tensors; returns the version it reports."""
    x, weight, bias, dy = inputs(kind, rows, cols, dtype)
    device, stream = where(x.device)
    name = DTYPE_NAMES[dtype]
    eps = EPS[kind]
    if backward:
        params = 1 if kind == "rms" else 2
        dx = torch.empty_like(x)
        dparams = torch.empty(params * cols, dtype=dtype, device="cuda")
        fn = _native.rms_norm_backward if kind == "rms" else _native.layer_norm_backward
        return fn(device, stream, name, rows, cols, eps, x.data_ptr(), weight.data_ptr(),
                  dy.data_ptr(), dx.data_ptr(), dparams.data_ptr())
    y = torch.empty_like(x)
    if kind == "rms":
        return _native.rms_norm_forward(device, stream, name, rows, cols, eps, x.data_ptr(),
                                        weight.data_ptr(), y.data_ptr())
    return _native.layer_norm_forward(device, stream, name, rows, cols, eps, x.data_ptr(),
                                      weight.data_ptr(), bias.data_ptr(), y.data_ptr())


@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_the_fastest_version_runs_and_the_next_takes_what_it_refuses(kind):
    block = "block" if kind == "rms" else "welford_block"
    bf16 = torch.bfloat16
    assert native_version(kind, 3, 4096, bf16, backward=False) == "vec_regs"
    assert native_version(kind, 3, 4097, bf16, backward=False) == "vec_regs"
    assert native_version(kind, 3, 32769, bf16, backward=False) == block
    assert native_version(kind, 3, 4096, bf16, backward=True) == "bwd_vec_pipe"
    assert native_version(kind, 3, 4097, bf16, backward=True) == "bwd_vec_regs"
    assert native_version(kind, 3, 8193, bf16, backward=True) == "bwd_split"
    torch.cuda.synchronize()


def test_a_backward_on_a_thread_with_no_current_context():
    # Autograd runs backwards on a thread of its own, where PyTorch may have made no context
    # current: the backward's scratch allocation must find the device's context there. A new
    # thread that calls the extension before any CUDA work of its own is that thread.
    import threading

    rows, cols = 64, 512
    x, w, dy = (torch.randn(n, device="cuda", dtype=torch.bfloat16) for n in ((rows, cols), (cols,), (rows, cols)))
    dx, dw = torch.empty_like(x), torch.empty_like(w)
    device, stream = where(x.device)
    failures = []

    def run():
        try:
            _native.rms_norm_backward(device, stream, "bfloat16", rows, cols, 1e-6, x.data_ptr(),
                                      w.data_ptr(), dy.data_ptr(), dx.data_ptr(), dw.data_ptr())
        except Exception as e:  # noqa: BLE001 (reported below)
            failures.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    torch.cuda.synchronize()
    assert not failures, failures[0]
    assert torch.isfinite(dx).all() and torch.isfinite(dw).all()

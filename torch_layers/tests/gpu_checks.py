"""What the ``test_gpu_*`` files share: the element-wise and relative L2 check of an output
against its float64 reference, and a tensor off the 16-byte boundary the vector loads need.
"""

import math

import torch


def check(name, got, want, tol):
    """`got` against the float64 `want` with `tol` = (atol, rtol, max relative L2): every
    element within ``atol + rtol |want|`` (a NaN never is), and the relative L2 error under its
    bound, except for an output of fewer than 64 elements or whose root mean square is under
    its atol, which is judged per element only."""
    atol, rtol, max_rel_l2 = tol
    got = got.double().flatten()
    want = want.flatten()
    err = (got - want).abs()
    bound = atol + rtol * want.abs()
    bad = ~(err <= bound)  # a NaN is out of tolerance
    if bad.any():
        worst = torch.where(bad, err - bound, torch.zeros_like(err)).nan_to_num(math.inf).argmax()
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {want.numel()} elements out of tolerance (atol "
            f"{atol:.3g}, rtol {rtol:.3g}); worst at flat index {int(worst)}: got "
            f"{got[worst].item():.6g}, want {want[worst].item():.6g}"
        )
    rms = want.pow(2).mean().sqrt().item()
    if want.numel() < 64 or rms < atol:
        return
    rel_l2 = ((got - want).norm() / want.norm().clamp_min(1e-300)).item()
    assert rel_l2 <= max_rel_l2, f"{name}: relative L2 error {rel_l2:.3g} over {max_rel_l2}"


def offset_copy(t):
    """t's values in a tensor that starts one element into its storage: contiguous, but not
    16-byte aligned."""
    storage = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = storage[1:].view(t.shape)
    view.copy_(t)
    return view

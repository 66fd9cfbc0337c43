"""``fused_linear_cross_entropy``: day 19's chunked linear + cross-entropy as an operator and an
autograd function.

Day 19 computes the loss and both gradients in one pass over chunks of tokens, never holding
the whole ``[tokens, vocab]`` logits: per chunk, the logits (cuBLAS), the loss rows with their
gradient written over the logits in place, the chunk's dH and its share of dW. So the forward
computes dH and dW too and keeps them; the backward only multiplies them by the incoming
gradient of the loss, as Liger Kernel's fused linear cross-entropy does.

The operator (``torch.ops.day_kernels``): ``fused_linear_cross_entropy(h, weight, labels,
ignore_index, label_smoothing, lse_square_scale, chunk_size) -> (loss, grads)``, day 19's
whole pass: the mean loss (a float32 scalar) and the one buffer its kernels write, dH's rows
then dW's (``[tokens + vocab, hidden]``, bfloat16), the gradients of that mean.
"""

import math

import torch
from torch.autograd.function import once_differentiable

from . import _native
from ._library import define
from ._tensors import autocast, cuda_tensor, on_device, same_device, where

_FN = "fused_linear_cross_entropy"
# cuBLAS's workspace per call: what cuBLAS itself keeps by default on Hopper (32 MiB), so the
# GEMMs may choose the algorithms they choose in day 19's own runs.
_CUBLAS_WORKSPACE_BYTES = 32 << 20
_REDUCTIONS = ("mean", "sum")
_INT32 = (-(2**31), 2**31 - 1)


def fused_linear_cross_entropy(
    h,
    weight,
    labels,
    ignore_index=-100,
    reduction="mean",
    label_smoothing=0.0,
    lse_square_scale=0.0,
    chunk_size=None,
):
    """``F.cross_entropy(h @ weight.T, labels, ...)`` without the logits, differentiable in
    ``h`` and ``weight`` (day 19's ``chunked_cublas``).

    ``h`` is ``[..., hidden]`` (the last hidden states; every leading dimension a token),
    ``weight`` ``[vocab, hidden]``: nn.Linear's layout, ``lm_head.weight`` as it is (day 19's
    W). Both bfloat16, contiguous, on one CUDA device. ``labels`` are int64, one per token:
    ``[tokens]`` or h's leading shape; a label equal to ``ignore_index`` adds nothing to the
    loss or the gradients, and so does one outside ``[0, vocab)`` (torch raises a device
    assert there; the kernels never read out of bounds).

    Per token, with ``z = h W^T`` and ``lse = logsumexp(z)``: ``lse - (1 - label_smoothing)
    z_y - label_smoothing mean(z) + lse_square_scale lse^2`` (torch's ``label_smoothing``,
    Liger's ``lse_square_scale`` for the z-loss). ``reduction`` ``"mean"`` divides the sum by
    the tokens not ignored (0, not NaN, when all are ignored), ``"sum"`` does not;
    ``"none"`` is refused: the gradients are computed in the forward, for one scalar loss.
    ``chunk_size`` (tokens per chunk) defaults to day 19's choice,
    :func:`default_chunk_size`.

    Returns the loss, a float32 scalar. The gradients are computed with the loss whether
    or not anything requires them, and kept until the backward, which scales them in place:
    in eager mode a second backward through the same call (``retain_graph=True``) is refused
    (a compiled graph scales a copy, and allows it). Not differentiable twice. Under
    autocast, h and the weight are cast to bfloat16 first, whatever autocast's dtype: day
    19's kernels compute in bfloat16.
    """
    options = _options(ignore_index, reduction, label_smoothing, lse_square_scale, chunk_size)
    h, weight = autocast(h, weight, dtype=torch.bfloat16)
    tokens = _check(_OP, h, weight, labels)
    hidden = h.shape[-1]
    flat_labels = labels.reshape(tokens)
    return _FusedLinearCrossEntropy.apply(h.view(tokens, hidden), weight, flat_labels, *options)


def default_chunk_size(tokens, hidden, vocab):
    """Day 19's chunk for a problem (tokens per chunk, at most ``tokens``): the logits of a
    chunk about four times the size of h, a power of two of at least 128 rows."""
    return _native.fused_linear_cross_entropy_chunk(tokens, hidden, vocab)


def _name(dtype):
    return str(dtype).replace("torch.", "")


def _check(op, h, weight, labels):
    """Checks the tensors; returns the token count. What the arguments say (types, shapes,
    dtypes, layout) comes before where they are (a device the operator ``op`` runs on), so that
    every mistake in them is reported the same way with or without a GPU."""
    for name, t in (("h", h), ("weight", weight), ("labels", labels)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{_FN}: {name} must be a torch.Tensor, not {type(t).__name__}")
    if h.dim() < 2:
        raise ValueError(f"{_FN}: h has shape {tuple(h.shape)}; it must be [..., hidden], a row per token")
    if weight.dim() != 2:
        raise ValueError(
            f"{_FN}: weight has shape {tuple(weight.shape)}; it must be [vocab, hidden], "
            f"nn.Linear's layout (lm_head.weight)"
        )
    hidden = h.shape[-1]
    tokens = math.prod(h.shape[:-1])
    if weight.shape[1] != hidden:
        raise ValueError(
            f"{_FN}: h's hidden size is {hidden} but weight {tuple(weight.shape)} has "
            f"{weight.shape[1]} columns; weight must be [vocab, hidden], nn.Linear's layout"
        )
    if labels.shape != h.shape[:-1] and tuple(labels.shape) != (tokens,):
        shapes = f"({tokens},)" + ("" if h.dim() == 2 else f" or {tuple(h.shape[:-1])}")
        raise ValueError(
            f"{_FN}: labels has shape {tuple(labels.shape)}; h {tuple(h.shape)} holds {tokens} "
            f"tokens: labels must be {shapes}, one per token"
        )
    if tokens == 0 or hidden == 0 or weight.shape[0] == 0:
        raise ValueError(
            f"{_FN}: {tokens} tokens, hidden size {hidden} and vocabulary {weight.shape[0]}; "
            f"the kernels take at least one of each"
        )
    for name, t in (("h", h), ("weight", weight)):
        if t.dtype != torch.bfloat16:
            raise TypeError(f"{_FN}: {name} is {_name(t.dtype)}; it must be bfloat16 (day 19's kernels)")
    if labels.dtype != torch.int64:
        raise TypeError(f"{_FN}: labels is {_name(labels.dtype)}; it must be int64, as torch's cross_entropy takes")
    # Their dtypes are checked above, with the kernels' reason; then layout and device.
    for name, t in (("h", h), ("weight", weight)):
        cuda_tensor(_FN, name, t, (torch.bfloat16,), op=op)
    on_device(_FN, "labels", labels, op)
    same_device(_FN, h=h, weight=weight, labels=labels)
    return tokens


def _options(ignore_index, reduction, label_smoothing, lse_square_scale, chunk_size):
    """The scalar arguments, checked: (reduction, ignore_index, label_smoothing,
    lse_square_scale, chunk_size)."""
    if reduction not in _REDUCTIONS:
        raise ValueError(
            f"{_FN}: reduction must be 'mean' or 'sum', not {reduction!r} (the gradients are "
            f"computed in the forward, for one scalar loss)"
        )
    return (reduction, *_scalars(ignore_index, label_smoothing, lse_square_scale, chunk_size))


def _scalars(ignore_index, label_smoothing, lse_square_scale, chunk_size):
    """The operator's scalar arguments, checked: (ignore_index, label_smoothing,
    lse_square_scale, chunk_size)."""
    ignore_index = _integer("ignore_index", ignore_index)
    if not _INT32[0] <= ignore_index <= _INT32[1]:
        raise ValueError(f"{_FN}: ignore_index {ignore_index} is not an int32, as the kernels' labels are")
    label_smoothing = _number("label_smoothing", label_smoothing)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{_FN}: label_smoothing must be in [0, 1], not {label_smoothing}")
    lse_square_scale = _number("lse_square_scale", lse_square_scale)
    # Comparisons only (NaN fails both): under torch.compile the value may be a symbolic float.
    if not 0.0 <= lse_square_scale < math.inf:
        raise ValueError(f"{_FN}: lse_square_scale must be finite and >= 0, not {lse_square_scale}")
    if chunk_size is not None:
        chunk_size = _integer("chunk_size", chunk_size)
        if chunk_size < 1:
            raise ValueError(f"{_FN}: chunk_size must be at least 1 token, not {chunk_size}")
    return ignore_index, label_smoothing, lse_square_scale, chunk_size


def _integer(name, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{_FN}: {name} must be an int, not {type(value).__name__}")
    return value


def _number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{_FN}: {name} must be a number, not {type(value).__name__}")
    return float(value)


def _forward_cuda(h, weight, labels, ignore_index, label_smoothing, lse_square_scale, chunk_size):
    tokens = _check(_OP, h, weight, labels)
    _scalars(ignore_index, label_smoothing, lse_square_scale, chunk_size)
    hidden = h.shape[-1]
    vocab = weight.shape[0]
    # Day 19's targets are int32. Labels past int32 are clamped first, so that none wraps into
    # [0, vocab): outside it, they count as ignored, as every out-of-range label does.
    labels32 = labels.reshape(tokens).clamp(*_INT32).to(torch.int32).contiguous()
    grads = torch.empty(tokens + vocab, hidden, dtype=h.dtype, device=h.device)
    loss = torch.empty((), dtype=torch.float32, device=h.device)
    # The call's scratch, from PyTorch's allocator on this stream like any other temporary:
    # a chunk of logits, each token's loss then 1/N, and cuBLAS's workspace. Nothing is
    # allocated below, so a CUDA graph can capture the call.
    chunk = _chunk(tokens, hidden, vocab, chunk_size)
    logits = torch.empty(chunk * vocab, dtype=torch.bfloat16, device=h.device)
    rows = torch.empty(tokens + 1, dtype=torch.float32, device=h.device)
    workspace = torch.empty(_CUBLAS_WORKSPACE_BYTES, dtype=torch.uint8, device=h.device)
    device, stream = where(h.device)
    _native.fused_linear_cross_entropy(
        device, stream, tokens, hidden, vocab, chunk, ignore_index, label_smoothing,
        lse_square_scale, h.data_ptr(), weight.data_ptr(), labels32.data_ptr(),
        grads.data_ptr(), loss.data_ptr(),
        (logits.data_ptr(), rows.data_ptr(), workspace.data_ptr(), _CUBLAS_WORKSPACE_BYTES),
    )
    return loss, grads


def _chunk(tokens, hidden, vocab, chunk_size):
    """Tokens per chunk: ``chunk_size`` or day 19's default, at most ``tokens``."""
    if chunk_size is None:
        return default_chunk_size(tokens, hidden, vocab)
    return min(chunk_size, tokens)


def _forward_fake(h, weight, labels, ignore_index, label_smoothing, lse_square_scale, chunk_size):
    tokens = _check(_OP, h, weight, labels)
    _scalars(ignore_index, label_smoothing, lse_square_scale, chunk_size)
    return h.new_empty((), dtype=torch.float32), h.new_empty((tokens + weight.shape[0], h.shape[-1]))


_OP = "day_kernels::fused_linear_cross_entropy"
fused_linear_cross_entropy_op = define(
    "fused_linear_cross_entropy(Tensor h, Tensor weight, Tensor labels, int ignore_index, "
    "float label_smoothing, float lse_square_scale, int? chunk_size) -> (Tensor loss, Tensor grads)",
    _forward_cuda,
    _forward_fake,
)


class _FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, h, weight, labels, reduction, ignore_index, label_smoothing, lse_square_scale, chunk_size
    ):
        loss, grads = fused_linear_cross_entropy_op(
            h, weight, labels, ignore_index, label_smoothing, lse_square_scale, chunk_size
        )
        ctx.tokens = h.shape[0]
        # Day 19 gives the mean and gradients of the mean; the sum is N times both, N the
        # labels it counted (the same rule as its kernels: not ignored, inside [0, vocab)).
        if reduction == "sum":
            vocab = weight.shape[0]
            count = ((labels != ignore_index) & (labels >= 0) & (labels < vocab)).sum().to(torch.float32)
            ctx.save_for_backward(grads, count)
            return loss * count
        ctx.save_for_backward(grads)
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss):
        grads, *count = _saved(ctx)
        # On the device, no sync: one multiply of each gradient by the incoming gradient (and N
        # for a sum). The factor is a float32 tensor of one dimension, not a 0-dim one: torch
        # would round a 0-dim factor to the gradients' bfloat16 first (1/3 off by 2^-9); this
        # way the product is taken in float32 and rounded once, as it is stored.
        factor = grad_loss.to(torch.float32).reshape(1)
        if count:
            factor = factor * count[0]
        tokens = ctx.tokens
        dh = _scaled(grads[:tokens], factor) if ctx.needs_input_grad[0] else None
        dw = _scaled(grads[tokens:], factor) if ctx.needs_input_grad[1] else None
        return dh, dw, None, None, None, None, None, None


def _saved(ctx):
    """The forward's saved gradients. In eager mode the backward scales them in place, so a
    second backward through the same call finds them changed (autograd's version check) and
    is refused with what happened."""
    if torch.compiler.is_compiling():
        return ctx.saved_tensors
    try:
        return ctx.saved_tensors
    except RuntimeError:
        raise RuntimeError(
            f"{_FN}: the backward already ran for this call; its gradients were computed in "
            f"the forward and scaled in place. Call {_FN} again rather than keep its graph"
        ) from None


def _scaled(grad, factor):
    """grad times factor, rounded once to grad's dtype. In place in eager mode: a copy of dW
    would cost its size again. A compiled graph is functional (the multiply is a new tensor
    there whichever is written), so it is written out of place."""
    if torch.compiler.is_compiling():
        return (grad * factor).to(grad.dtype)
    return grad.mul_(factor)

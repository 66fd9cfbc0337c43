"""The layers' kernels as PyTorch operators: ``torch.ops.day_kernels.*``.

Each layer's kernels are operators of one library, ``day_kernels``, each defined here with its
schema, its CUDA implementation (the checks, then the extension's call on the tensors'
pointers) and its fake implementation (the same checks, then empty outputs of the right
shapes, dtypes and devices). torch.compile traces a layer through the fake implementations
without running anything, and each layer's autograd function calls only the operators, so no
pointer is read inside a traced region.

What the schemas promise: every output is a new tensor; no operator writes into its inputs or
returns a view of one. A backward returns what its kernels write: the attention's and SwiGLU's
one buffer, which the layer's autograd function takes apart in views, and the norms' dx and
parameters' gradients, two tensors. Every operator is
tagged ``needs_contiguous_strides`` (the kernels read rows back to back, so Inductor hands
them contiguous tensors).

Every operator can be captured in a CUDA graph (Inductor's ``mode="reduce-overhead"``, or
``torch.cuda.graph``): what a call writes besides its outputs is tensors made for that call
(the attention's tickets and workspace, the loss's scratch) or memory taken and freed in
stream order on the call's stream (the norms' partial sums), which a capture records in the
graph. The one thing the extension keeps from call to call, the attention's sequence offsets
on the device, is kept for good once a capture has used it. A capture must not be the first
call of a layer on a device (loading its kernels synchronizes, which a capture forbids) nor
of an attention problem (making its offsets does too): either gets a ``ValueError`` saying
so. PyTorch's recipes (a warm-up before ``torch.cuda.graph``, Inductor's warm-up run)
make those calls first anyway.

The operators are defined with ``torch.library.Library`` rather than
``torch.library.custom_op``, whose Python wrapper adds to the cost of every call: the layers'
host time per call is what they are slowest at.
"""

import torch

NAMESPACE = "day_kernels"

# Kept for as long as the package is loaded: the registrations end when the library object is
# collected.
_LIBRARY = torch.library.Library(NAMESPACE, "DEF")


def _tags(*names):
    """The tags of these names that this build of torch knows (an older one lacks some)."""
    return tuple(getattr(torch.Tag, name) for name in names if hasattr(torch.Tag, name))


def define(schema, cuda, fake):
    """Defines the operator ``day_kernels::NAME`` that ``schema`` (``"NAME(Tensor x, ...) ->
    Tensor"``) declares, with ``cuda`` its implementation for CUDA tensors and ``fake`` the
    one torch.compile and the meta device run; returns the operator (its ``OpOverload``)."""
    name = schema.split("(", 1)[0]
    _LIBRARY.define(schema, tags=_tags("needs_contiguous_strides"))
    _LIBRARY.impl(name, cuda, "CUDA")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_LIBRARY)
    return getattr(getattr(torch.ops, NAMESPACE), name).default


@torch.compiler.assume_constant_result
def has_kernel(op, device_type):
    """Whether the operator ``op`` (``"day_kernels::NAME"``) has an implementation for tensors
    on ``device_type``: CUDA's, the fake one on the meta device, or one registered from
    outside (a test's CPU reference). torch.compile takes the answer as a constant of the
    trace, as the registrations are made before it."""
    try:
        key = torch._C._dispatch_key_for_device(device_type)
    except RuntimeError:
        return False
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, key)

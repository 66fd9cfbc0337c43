"""What the operator tests share (``test_torch_operators.py`` on the CPU, ``test_gpu_compile.py``
on the GPU): one block of a small GPT over every layer, on ours or on PyTorch's, and a training
step's loss and gradients copied out. Imported only by files that need torch."""

import torch
import torch.nn.functional as F

import day_kernels as dk


class TinyModel(torch.nn.Module):
    """Embedding, RMSNorm, grouped-query causal attention, LayerNorm, a SwiGLU MLP and the loss
    (label smoothing 0.05): on our layers (``ours=True``) or on PyTorch's. ``cu_seqlens`` (ours
    only) runs packed sequences."""

    def __init__(self, ours=True, vocab=64, width=64, heads=4, kv_heads=2):
        super().__init__()
        self.ours = ours
        self.head_dim = width // heads
        self.embed = torch.nn.Embedding(vocab, width)
        self.norm1 = torch.nn.Parameter(1 + torch.randn(width) / 10)
        self.q = torch.nn.Linear(width, width, bias=False)
        self.kv = torch.nn.Linear(width, 2 * kv_heads * self.head_dim, bias=False)
        self.proj = torch.nn.Linear(width, width, bias=False)
        self.norm2 = torch.nn.LayerNorm(width)
        self.gate = torch.nn.Linear(width, 2 * width, bias=False)
        self.up = torch.nn.Linear(width, 2 * width, bias=False)
        self.down = torch.nn.Linear(2 * width, width, bias=False)
        self.head = torch.nn.Linear(width, vocab, bias=False)

    def forward(self, tokens, labels, cu_seqlens=None):
        x = self.embed(tokens)
        width = x.shape[-1]
        if self.ours:
            h = dk.rms_norm(x, self.norm1)
        else:
            h = F.rms_norm(x, (width,), self.norm1, 1e-6)
        shape = (*x.shape[:-1], -1, self.head_dim)
        q = self.q(h).view(shape)
        k, v = self.kv(h).view(shape).chunk(2, dim=-2)
        if self.ours:
            a = dk.flash_attention(q, k.contiguous(), v.contiguous(), causal=True,
                                   cu_seqlens_q=cu_seqlens, cu_seqlens_k=cu_seqlens)
        else:
            assert cu_seqlens is None, "PyTorch's side of the model runs batched sequences only"
            a = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
            ).transpose(1, 2)
        x = x + self.proj(a.flatten(-2))
        if self.ours:
            h = dk.layer_norm(x, self.norm2.weight, self.norm2.bias)
            x = x + self.down(dk.swiglu(self.gate(h), self.up(h)))
            return dk.fused_linear_cross_entropy(x, self.head.weight, labels, label_smoothing=0.05)
        h = F.layer_norm(x, (width,), self.norm2.weight, self.norm2.bias)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        logits = F.linear(x, self.head.weight).float()
        return F.cross_entropy(logits.flatten(0, -2), labels.flatten(), label_smoothing=0.05)


def step(model, fn, *args, mark_step=False):
    """The loss and every parameter's gradient of one call of ``fn`` (the model, or the model
    compiled), copied out: a CUDA graph's outputs are overwritten by its next replay, which
    ``mark_step`` announces."""
    model.zero_grad(set_to_none=True)
    if mark_step:
        torch.compiler.cudagraph_mark_step_begin()
    loss = fn(*args)
    loss.backward()
    return loss.detach().clone(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}

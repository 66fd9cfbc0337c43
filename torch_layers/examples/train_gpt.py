"""Train a small GPT twice, on PyTorch's layers and on the days' kernels, and compare the runs.

What it shows: the days' kernels (``day_kernels``: flash attention, RMSNorm, SwiGLU and the
fused linear cross-entropy) can replace PyTorch's own layers in a real training loop, forward
and backward, without changing what the model learns, and how fast the step runs with them.

The model is a decoder-only GPT on bytes (vocabulary 256, so no tokenizer; ``--vocab`` widens
the embedding and the output layer to a real vocabulary's size): learned position
embeddings, pre-norm blocks with RMSNorm, causal self-attention, a SwiGLU MLP, no biases.
Parameters are float32; the step computes in bfloat16 under ``torch.autocast``. The corpus is
this repository's own text (its Markdown, Rust, CUDA and Python files), so nothing is
downloaded; the last 5% is held out for validation.

By default one process trains five times on the same batches in the same order:

- ``torch-A``: PyTorch's layers (``F.scaled_dot_product_attention``, ``F.rms_norm``,
  ``F.silu(gate) * up``, ``F.cross_entropy`` on the logits), initialised from seed A;
- ``torch-B``, ``torch-C`` and ``torch-D`` (``--noise-runs``, 3 by default): the same from
  seeds B, B + 1 and B + 2: how far runs of PyTorch itself drift apart (the noise);
- ``ours-A``: the days' kernels, from seed A, so it starts from exactly torch-A's weights.

The verdict, on the mean absolute gap of two runs' smoothed losses over the last 100 steps:
the curves agree when ours-A's mean gap to PyTorch's runs is at most ``NOISE_MARGIN`` (1.5)
times the largest gap between two of PyTorch's runs. Every run ends within a few thousandths
of the others, so one pair of seeds measures the noise poorly: judged against torch-B alone,
ours-A's gap to torch-A came out either way from run to run. Ours is faster when its tokens/s
beat the fastest PyTorch run. It prints a table and writes ``results.json`` and
``loss.png`` into ``--out``. In ``results.json`` each run has ``loss[i]`` (step i's batch,
before its update), ``loss_ema``, ``grad_norm``, ``lr``, ``val`` (``[updates made, loss]``
pairs, the first before any update), ``tokens_per_s``, ``step_ms_median`` (the GPU's clock),
``host_ms_median`` (the host's, until the step's last call returns), ``kernel_ms_per_step``
and ``kernels`` (with ``--profile-steps``: the GPU's busy time per step and the costliest
kernels, from PyTorch's profiler over that many more steps), ``compile`` and
``peak_memory_gib``; ``verdict`` holds every gap, the noise, the difference and the two
answers, ``environment`` the GPU's name and the versions.

Run it (an NVIDIA GPU, PyTorch with CUDA, and the ``day_kernels`` wheel installed)::

    python torch_layers/examples/train_gpt.py --out /tmp/gpt
    python torch_layers/examples/train_gpt.py --quick --out /tmp/gpt-quick   # a smoke test
    python torch_layers/examples/train_gpt.py --layers torch --quick         # no extension
    python torch_layers/examples/train_gpt.py --compile default --out /tmp/gpt-compiled

The small GPT's step is bound by the host (the Python and launch cost of its many small
kernels); ``--gpu-bound`` trains a model whose step the GPU bounds (about 1.0B parameters, see
``GPU_BOUND``), to compare the kernels' speed rather than the host's; ``--layers`` torch, ours
or liger trains one model each::

    python torch_layers/examples/train_gpt.py --gpu-bound --layers torch --out /tmp/big-torch
    python torch_layers/examples/train_gpt.py --gpu-bound --layers ours --out /tmp/big-ours
    python torch_layers/examples/train_gpt.py --gpu-bound --layers liger --out /tmp/big-liger

Exit codes: 0 when it ran (whatever the verdict), 1 with ``--require-agreement`` when the
curves do not agree, 2 when it cannot run (no CUDA GPU, no ``day_kernels``, bad flags).
"""

import argparse
import gc
import itertools
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

# Everything torch-related is imported inside main(), so a machine without torch gets one
# `error:` line instead of a traceback.
torch = None
nn = None
F = None

BYTES = 256  # the tokens are bytes; --vocab may make the output layer wider than this
CORPUS_SUFFIXES = (".md", ".rs", ".cu", ".cuh", ".py")
SKIPPED_DIRS = {"target", "__pycache__"}  # and every hidden folder (.git, .github, ...)
VAL_FRACTION = 0.05
EMA_BETA = 0.9  # smoothing of the per-step loss for the verdict (a time constant of ~10 steps)
VERDICT_WINDOW = 100  # the verdict compares the last this-many steps
NOISE_NAMES = "BCDEFGH"  # the noise runs: torch-B, torch-C, ...
# How much farther than PyTorch's farthest pair ours-A may be, on average, from PyTorch's runs.
# If each run's curve ended at an offset drawn independently from one normal distribution,
# ours-A being one more such run, this rule with four PyTorch runs would call it apart about
# one time in seventeen (one in two for the rule of one pair, which compared ours-A's gap to
# torch-A with torch-B's), and an offset 8 of the distribution's standard deviations would be
# caught 99 times in 100 (from a simulation of that model, not a property of training).
NOISE_MARGIN = 1.5

# The full run and the smoke test; any flag given on the command line wins over both.
DEFAULTS = dict(
    n_layer=6, width=512, heads=8, context=1024, batch_size=8, steps=300, lr=1e-3, warmup=30,
    eval_every=50, eval_batches=4, timing_warmup=10, log_every=25,
)
QUICK = dict(
    n_layer=2, width=512, heads=8, context=128, batch_size=8, steps=20, lr=1e-3, warmup=5,
    eval_every=10, eval_batches=2, timing_warmup=5, log_every=5,
)
# A model whose step the GPU, not the host, bounds: 16 layers of width 2048 with heads of 128,
# 4096 tokens of context and an output layer of 32,768 words (about 1.0B parameters); the
# bytes are still the tokens, so the rows past 256 are never a target but cost what a real
# vocabulary's do.
GPU_BOUND = dict(
    n_layer=16, width=2048, heads=16, context=4096, vocab=32768, batch_size=2, steps=250,
    lr=3e-4, warmup=20, eval_every=125, eval_batches=2, timing_warmup=30, log_every=25,
)


def fail(message):
    """One `error:` line and exit code 2: the script could not run at all."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


# ----------------------------------------------------------------------------------------------
# The two implementations of the layers. The model below calls only these four methods, so the
# module tree, its parameters and its initialisation are the same whichever one it is given.
# Both receive the same bf16 tensors: the model casts the norms' inputs and weights itself, so
# the comparison is kernel against kernel, not bf16 against float32.
# ----------------------------------------------------------------------------------------------


class TorchLayers:
    """PyTorch's own layers, as a PyTorch user writes them."""

    name = "torch"

    def rms_norm(self, x, weight, eps):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)

    def attention(self, q, k, v):
        # q, k, v: [batch, seqlen, heads, head_dim]; SDPA wants [batch, heads, seqlen, head_dim]
        # (a transposed view is fine for it: only the last dimension must be dense).
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return o.transpose(1, 2)  # back to [batch, seqlen, heads, head_dim]

    def swiglu(self, gate, up):
        return F.silu(gate) * up

    def loss(self, h, weight, labels):
        # h: [tokens, hidden]. Under autocast the product runs in bf16; the logits
        # ([tokens, 256] here, small) are upcast so the softmax and the mean run in float32.
        return F.cross_entropy(F.linear(h, weight).float(), labels)


class OurLayers:
    """The days' kernels through ``day_kernels``. They take contiguous bf16 CUDA tensors only
    (anything else raises ValueError or TypeError), so this adapter makes q, k and v contiguous
    and casts the lm_head weight; the casts are differentiable, so the float32 parameters get
    their gradients through them."""

    name = "ours"

    def __init__(self, dk, deterministic=False):
        self.dk = dk
        # deterministic=True makes the attention backward's dQ the same bits every run (its
        # default accumulates dQ with atomics, whose order varies from run to run).
        self.deterministic = deterministic

    def rms_norm(self, x, weight, eps):
        return self.dk.rms_norm(x, weight, eps=eps)

    def attention(self, q, k, v):
        # Slices of the fused qkv projection are strided views: the kernels read rows back to
        # back, so each is copied once into its own [batch, seqlen, heads, head_dim] tensor.
        return self.dk.flash_attention(
            q.contiguous(), k.contiguous(), v.contiguous(),
            causal=True, deterministic=self.deterministic,
        )

    def swiglu(self, gate, up):
        # The one call of day_kernels' SwiGLU: silu(gate) * up, in one kernel each way.
        return self.dk.swiglu(gate, up)

    def loss(self, h, weight, labels):
        # Never holds the [tokens, vocab] logits: it walks the vocabulary in chunks.
        return self.dk.fused_linear_cross_entropy(
            h, weight.to(torch.bfloat16), labels, reduction="mean"
        ).float()


class LigerLayers:
    """Liger Kernel's Triton layers (``liger_kernel``), the peer a PyTorch user reaches for to
    fuse these same layers: its RMSNorm, SwiGLU and fused linear cross-entropy. It has no
    attention of its own, so attention is PyTorch's (``F.scaled_dot_product_attention``)."""

    name = "liger"

    def __init__(self, functional):
        self.fn = functional  # liger_kernel.transformers.functional

    def rms_norm(self, x, weight, eps):
        return self.fn.liger_rms_norm(x, weight, eps)

    def attention(self, q, k, v):
        return TorchLayers.attention(self, q, k, v)

    def swiglu(self, gate, up):
        return self.fn.liger_swiglu(gate, up)

    def loss(self, h, weight, labels):
        return self.fn.liger_fused_linear_cross_entropy(
            h, weight.to(torch.bfloat16), labels, reduction="mean"
        ).float()


# ----------------------------------------------------------------------------------------------
# The model. Classes are defined inside a function because `nn` is imported in main().
# ----------------------------------------------------------------------------------------------


def swiglu_hidden(width):
    """The SwiGLU MLP's hidden size: 8/3 of the width (the same parameter count as a 4x GELU
    MLP), rounded up to a multiple of 64 so its matrix products tile well: 1408 for 512."""
    return 64 * math.ceil(8 * width / 3 / 64)


def build_model_classes():
    class RMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))
            self.eps = eps

        def forward(self, x, layers):
            # The residual stream is float32; the norm reads it as bf16 (our kernel takes bf16
            # only, and PyTorch's gets the same tensor so that only the kernels differ).
            bf16 = torch.bfloat16
            return layers.rms_norm(x.to(bf16).contiguous(), self.weight.to(bf16), self.eps)

    class Attention(nn.Module):
        def __init__(self, width, heads):
            super().__init__()
            self.heads = heads
            self.head_dim = width // heads
            self.qkv = nn.Linear(width, 3 * width, bias=False)
            self.proj = nn.Linear(width, width, bias=False)

        def forward(self, x, layers):
            b, s, width = x.shape
            # One product for q, k and v; unbind gives three [b, s, heads, head_dim] views.
            q, k, v = self.qkv(x).view(b, s, 3, self.heads, self.head_dim).unbind(2)
            o = layers.attention(q, k, v)  # [b, s, heads, head_dim]
            return self.proj(o.reshape(b, s, width))

    class MLP(nn.Module):
        def __init__(self, width):
            super().__init__()
            hidden = swiglu_hidden(width)
            # Two products rather than one fused [2 * hidden] one: each output is then a
            # contiguous tensor, as the SwiGLU kernel wants, with no copy.
            self.gate = nn.Linear(width, hidden, bias=False)
            self.up = nn.Linear(width, hidden, bias=False)
            self.down = nn.Linear(hidden, width, bias=False)

        def forward(self, x, layers):
            return self.down(layers.swiglu(self.gate(x), self.up(x)))

    class Block(nn.Module):
        def __init__(self, width, heads):
            super().__init__()
            self.norm1 = RMSNorm(width)
            self.attn = Attention(width, heads)
            self.norm2 = RMSNorm(width)
            self.mlp = MLP(width)

        def forward(self, x, layers):
            # Pre-norm: the residual stream itself is never normalised, only what each branch reads.
            x = x + self.attn(self.norm1(x, layers), layers)
            return x + self.mlp(self.norm2(x, layers), layers)

    class GPT(nn.Module):
        """The module tree is the same for both implementations: `layers` is an argument of
        forward, not a submodule, so it owns no parameters and draws nothing from the RNG."""

        def __init__(self, n_layer, width, heads, context, vocab=BYTES):
            super().__init__()
            self.context = context
            self.wte = nn.Embedding(vocab, width)
            self.wpe = nn.Embedding(context, width)  # learned positions: the simplest choice
            self.blocks = nn.ModuleList(Block(width, heads) for _ in range(n_layer))
            self.norm_f = RMSNorm(width)
            # Untied from wte: with 256 bytes, tying would save only 256 x width parameters,
            # and an untied head keeps the embedding's gather and the loss kernel's weight
            # apart (one float32 table read by index, one bf16 matrix the loss kernel reads).
            self.lm_head = nn.Linear(width, vocab, bias=False)
            self._init_weights(n_layer)

        def _init_weights(self, n_layer):
            # GPT-2's: N(0, 0.02) everywhere, the projections back into the residual stream
            # scaled by 1/sqrt(2 * n_layer) so its variance does not grow with depth.
            for module in self.modules():
                if isinstance(module, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(module.weight, mean=0.0, std=0.02)
            for block in self.blocks:
                for w in (block.attn.proj.weight, block.mlp.down.weight):
                    nn.init.normal_(w, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

        def forward(self, idx, targets, layers):
            b, s = idx.shape
            pos = torch.arange(s, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)  # float32 [b, s, width]: the residual stream
            for block in self.blocks:
                x = block(x, layers)
            h = self.norm_f(x, layers)  # bf16 [b, s, width], contiguous
            width = h.shape[-1]
            return layers.loss(h.reshape(b * s, width), self.lm_head.weight, targets.reshape(b * s))

    return GPT


# ----------------------------------------------------------------------------------------------
# Data: the repository's own text, as bytes.
# ----------------------------------------------------------------------------------------------


def load_corpus(root):
    """Every Markdown, Rust, CUDA and Python file under `root` (not under target/, hidden
    folders or __pycache__), sorted by path and concatenated as bytes. A walk of the folder,
    not `git ls-files`: the copy on a GPU host has no .git."""
    root = Path(root).resolve()
    paths = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS]
        for name in files:
            if name.endswith(CORPUS_SUFFIXES) and not name.startswith("."):
                paths.append(Path(folder, name).relative_to(root).as_posix())
    paths.sort()
    corpus = b"".join((root / p).read_bytes() for p in paths)
    return corpus, paths


class Batches:
    """Every batch of a run, fixed before training: the start offsets of all steps come from
    one `torch.Generator` seeded with --data-seed, so each run sees the same batches in the
    same order whatever its model does. The tokens stay on the GPU; a batch is one gather."""

    def __init__(self, tokens, context, batch_size, count, seed):
        self.tokens = tokens  # uint8 on the GPU
        self.offsets = torch.arange(context + 1, device=tokens.device)
        g = torch.Generator().manual_seed(seed)
        # A window of context + 1 bytes: the inputs and, shifted by one, the targets.
        self.starts = torch.randint(
            0, len(tokens) - context, (count, batch_size), generator=g
        ).to(tokens.device)

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, i):
        window = self.tokens[self.starts[i][:, None] + self.offsets].long()  # [batch, ctx + 1]
        return window[:, :-1].contiguous(), window[:, 1:].contiguous()


# ----------------------------------------------------------------------------------------------
# Training.
# ----------------------------------------------------------------------------------------------


def lr_at(step, cfg):
    """Linear warm-up to --lr, then cosine down to a tenth of it at the last step."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.45 * (1.0 + math.cos(math.pi * min(1.0, progress))))


def make_optimizer(model, lr):
    # Weight decay on the matrices and embeddings, not on the norms' gains.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": 0.1},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    try:
        # One kernel for the whole update instead of several per parameter.
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True), True
    except (TypeError, RuntimeError, ValueError):
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8), False


def evaluate(model, val_batches, layers):
    """Mean loss over the fixed validation batches (the same ones for every run)."""
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        losses = [model(x, y, layers).float() for x, y in val_batches]
    model.train()
    return torch.stack(losses).mean().item()


def train_one(name, layers, seed, cfg, GPT, train_batches, val_batches, device, ranks=None):
    """One training run; returns its record (losses, validation, speed, memory).

    ``ranks`` is this process's place in a data-parallel run (``train_gpt_ddp.py``): it wraps
    the model, takes this process's rows of each batch and averages the losses over the
    processes. Without it the run is this process's alone."""
    # Free the last run's tensors first, so each run's peak memory is its own.
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)

    # The weights are drawn on the CPU from `seed`: the same seed gives the same bits whichever
    # layers the model will run on (nothing about `layers` touches the RNG). That, and the
    # fixed batches, is as deterministic as it gets: two runs from one seed still differ in the
    # last bits, because attention's backward (PyTorch's and ours, unless
    # --deterministic-attention) adds dQ's parts with atomics in whatever order they land, and
    # the drift grows over the steps. The noise runs (torch-B, ...) size such drift for the verdict.
    torch.manual_seed(seed)
    model = GPT(cfg.n_layer, cfg.width, cfg.heads, cfg.context, cfg.vocab)
    with torch.no_grad():
        checksum = sum(p.double().sum().item() for p in model.parameters())
    model.to(device)
    # The step runs the model compiled where --compile asks (the same mode for every run, so
    # the verdict compares like with like); validation runs it eagerly, which needs no second
    # compile for no_grad.
    step_model = model if ranks is None else ranks.wrap(model)
    if cfg.compile != "none":
        step_model = torch.compile(step_model, mode=cfg.compile)
    n_params = sum(p.numel() for p in model.parameters())
    opt, fused = make_optimizer(model, cfg.lr)

    steps = cfg.steps
    tokens_per_step = cfg.batch_size * cfg.context
    losses = torch.zeros(steps, device=device)  # kept on the GPU: no sync per step
    grad_norms = torch.zeros(steps, device=device)
    lrs = []
    val = [(0, evaluate(model, val_batches, layers))]  # before any update
    # One pair of CUDA events around each step: the time between them is the step's time on
    # the GPU's clock, excluding validation and printing between steps. The first steps are
    # left out of tokens/s: they compile kernels (NVRTC for ours, cuBLAS/cuDNN set-up for both,
    # and torch.compile's graphs). The host's time per step, from the step's start to its last
    # call returning, is what the Python side costs: where it exceeds the GPU's, the host is
    # what the step waits on.
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(steps)
    ]
    host_ms = []
    compiled = "" if cfg.compile == "none" else f", torch.compile (mode {cfg.compile})"
    print(f"-- {name}: {layers.name} layers, seed {seed}, {n_params / 1e6:.2f}M parameters, "
          f"AdamW{' (fused)' if fused else ''}{compiled}", flush=True)
    def train_step(step, lr):
        """One update on step `step`'s batch; returns the loss (on the GPU) and the gradients'
        norm before clipping."""
        if cfg.compile == "reduce-overhead":
            # A new iteration: the CUDA graphs may overwrite the last step's outputs.
            torch.compiler.cudagraph_mark_step_begin()
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = train_batches[step]
        if ranks is not None:
            x, y = ranks.shard(x, y)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(x, y, layers)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach(), norm

    wall = time.perf_counter()
    for step in range(steps):
        start, end = events[step]
        host = time.perf_counter()
        start.record()
        lr = lr_at(step, cfg)
        losses[step], grad_norms[step] = train_step(step, lr)
        end.record()
        host_ms.append((time.perf_counter() - host) * 1e3)
        lrs.append(lr)

        last = step + 1 == steps
        if (step + 1) % cfg.eval_every == 0 or last:
            val.append((step + 1, evaluate(model, val_batches, layers)))
        if (step + 1) % cfg.log_every == 0 or last:
            v = f", val {val[-1][1]:.4f}" if val[-1][0] == step + 1 else ""
            shown = losses[step] if ranks is None else ranks.mean(losses[step].clone())
            print(f"   {name} step {step + 1:4d}/{steps}  loss {shown.item():.4f}{v}  "
                  f"lr {lr:.2e}", flush=True)
    torch.cuda.synchronize(device)
    wall = time.perf_counter() - wall
    if ranks is not None:
        # Each process's loss is over its own rows: their mean is the whole batch's loss.
        ranks.mean(losses)

    peak_gib = torch.cuda.max_memory_allocated(device) / 2**30  # the run's, not the profiler's
    kernels = None
    if cfg.profile_steps:
        kernels = profile_kernels(train_step, steps - 1, lrs[-1], cfg.profile_steps)

    warm = min(cfg.timing_warmup, steps - 1)
    step_ms = [s.elapsed_time(e) for s, e in events[warm:]]
    timed_s = sum(step_ms) / 1e3
    record = dict(
        name=name,
        layers=layers.name,
        seed=seed,
        parameters=n_params,
        init_checksum=checksum,
        fused_adamw=fused,
        loss=losses.tolist(),
        grad_norm=grad_norms.tolist(),
        lr=lrs,
        val=[[s, v] for s, v in val],
        timed_steps=len(step_ms),
        step_ms_median=sorted(step_ms)[len(step_ms) // 2] if step_ms else None,
        host_ms_median=sorted(host_ms[warm:])[len(host_ms[warm:]) // 2] if host_ms[warm:] else None,
        compile=cfg.compile,
        tokens_per_s=tokens_per_step * len(step_ms) / timed_s if timed_s > 0 else None,
        peak_memory_gib=peak_gib,
        wall_s=wall,
        kernel_ms_per_step=kernels["ms_per_step"] if kernels else None,
        kernels=kernels,
    )
    record["loss_ema"] = ema(record["loss"])
    del model, step_model, opt, losses, grad_norms
    return record


def profile_kernels(train_step, step, lr, count, top=12):
    """The GPU's work per step, from PyTorch's profiler over `count` more updates on step
    `step`'s batch, after the recorded ones (so the profiler's own cost touches no timed step
    and no recorded loss): the kernels' (and copies') time per step in ms, and the `top`
    kernels by time, each with its ms per step and launches per step."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(count):
            train_step(step, lr)
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:  # PyTorch before 2.4 named it for CUDA
            us = e.self_cuda_time_total
        if us > 0:
            rows.append((us / 1e3 / count, e.count / count, e.key))
    rows.sort(reverse=True)
    print(f"   kernels: {sum(r[0] for r in rows):.2f} ms per step over {count} profiled steps; "
          f"the top {min(top, len(rows))}:")
    for ms, calls, name in rows[:top]:
        print(f"   {ms:9.3f} ms  {calls:5.0f}x  {name[:100]}")
    return dict(
        profiled_steps=count,
        ms_per_step=sum(r[0] for r in rows),
        top=[dict(name=name, ms_per_step=ms, calls_per_step=calls)
             for ms, calls, name in rows[:top]],
    )


# ----------------------------------------------------------------------------------------------
# The verdict, the table, the JSON and the plot.
# ----------------------------------------------------------------------------------------------


def ema(values, beta=EMA_BETA):
    """Exponential moving average, bias-corrected so its first values are not pulled to 0."""
    out, m = [], 0.0
    for i, v in enumerate(values):
        m = beta * m + (1 - beta) * v
        out.append(m / (1 - beta ** (i + 1)))
    return out


def mean_abs_gap(a, b):
    gaps = [abs(x - y) for x, y in zip(a, b)]
    return sum(gaps) / len(gaps) if gaps else float("nan")


def torch_runs(runs):
    """PyTorch's runs of a `--layers both` plan: torch-A, then the noise runs in seed order."""
    return [r for name, r in runs.items() if name.startswith("torch-")]


def verdict(runs, steps):
    """Noise: the largest gap between two of PyTorch's runs (other seeds, the same data and
    layers); difference: ours-A's mean gap to them; they agree when the difference is at most
    NOISE_MARGIN times the noise. A gap is the mean absolute difference of
    two smoothed losses over the last VERDICT_WINDOW steps (half the run when it is shorter).
    Bits differ between two runs even from one seed (atomics in attention's backward on both
    sides), and by the window that drift can be as large as the gap between two seeds (ours-A
    from torch-A, against torch-B from torch-A, came out either way). Taken as one more run
    like PyTorch's, ours-A's gaps to them are draws of the size of theirs to each other, and
    their mean seldom passes the largest of them by much; if its curve is off, it is off from
    all of them."""
    torch, ours = torch_runs(runs), runs["ours-A"]
    window = min(VERDICT_WINDOW, max(1, steps // 2))

    def gap(x, y):
        return mean_abs_gap(x["loss_ema"][-window:], y["loss_ema"][-window:])

    # The same on validation losses (the points at or after the window's start), reported only.
    first = steps - window

    def val_gap(x, y):
        vx = {s: v for s, v in x["val"] if s >= first}
        vy = {s: v for s, v in y["val"] if s in vx}
        return mean_abs_gap([vx[s] for s in vy], [vy[s] for s in vy])

    pairs = list(itertools.combinations(torch, 2))
    noise_pairs = {f"{x['name']}/{y['name']}": gap(x, y) for x, y in pairs}
    differences = {r["name"]: gap(ours, r) for r in torch}
    noise = max(noise_pairs.values())
    difference = sum(differences.values()) / len(differences)
    val_noise = max(val_gap(x, y) for x, y in pairs)
    val_difference = sum(val_gap(ours, r) for r in torch) / len(torch)
    finite = all(math.isfinite(v) for r in (*torch, ours) for v in r["loss"])
    agree = finite and math.isfinite(difference) and difference <= NOISE_MARGIN * noise
    torch_tps = max((r["tokens_per_s"] or 0.0) for r in torch)
    a = runs["torch-A"]
    ours_tps = ours["tokens_per_s"] or 0.0
    return dict(
        window_steps=window,
        ema_beta=EMA_BETA,
        noise=noise,
        difference=difference,
        margin=NOISE_MARGIN,
        noise_pairs=noise_pairs,
        differences=differences,
        agree=agree,
        all_losses_finite=finite,
        val_noise=val_noise,
        val_difference=val_difference,
        same_initial_weights=a["init_checksum"] == ours["init_checksum"],
        torch_tokens_per_s=torch_tps,
        ours_tokens_per_s=ours_tps,
        speedup=ours_tps / torch_tps if torch_tps > 0 else None,
        faster=ours_tps > torch_tps,
    )


def fmt(v, spec):
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def print_table(runs):
    print()
    print(f"{'run':<9} {'layers':<6} {'seed':>6} {'loss (ema)':>10} {'val loss':>9} "
          f"{'tokens/s':>10} {'step ms':>8} {'host ms':>8} {'kernel ms':>9} {'peak GiB':>9}")
    for r in runs.values():
        print(f"{r['name']:<9} {r['layers']:<6} {r['seed']:>6} {fmt(r['loss_ema'][-1], '.4f'):>10} "
              f"{fmt(r['val'][-1][1], '.4f'):>9} {fmt(r['tokens_per_s'], ',.0f'):>10} "
              f"{fmt(r['step_ms_median'], '.2f'):>8} {fmt(r.get('host_ms_median'), '.2f'):>8} "
              f"{fmt(r.get('kernel_ms_per_step'), '.2f'):>9} {fmt(r['peak_memory_gib'], '.2f'):>9}")


def print_verdict(v):
    w = v["window_steps"]
    print()
    print(f"gap: the mean |x - y| of two runs' smoothed losses over the last {w} steps")
    for pair, g in v["noise_pairs"].items():
        print(f"  {pair:<22} {fmt(g, '.5f')}")
    for name, g in v["differences"].items():
        print(f"  {'ours-A/' + name:<22} {fmt(g, '.5f')}")
    print(f"noise       {fmt(v['noise'], '.5f')}  the largest gap between two of PyTorch's runs "
          f"(validation: {fmt(v['val_noise'], '.5f')})")
    print(f"difference  {fmt(v['difference'], '.5f')}  ours-A's mean gap to PyTorch's runs "
          f"(validation: {fmt(v['val_difference'], '.5f')})")
    if not v["same_initial_weights"]:
        print("warning: torch-A and ours-A did not start from the same weights")
    if not v["all_losses_finite"]:
        print("warning: a run's loss was not finite (NaN or inf)")
    print(f"agree:  {'yes' if v['agree'] else 'NO'} (difference {'<=' if v['agree'] else '>'} "
          f"{v['margin']} x noise)")
    speedup = f"{v['speedup']:.2f}x" if v["speedup"] else "-"
    print(f"faster: {'yes' if v['faster'] else 'no'}: ours {v['ours_tokens_per_s']:,.0f} tokens/s, "
          f"torch {v['torch_tokens_per_s']:,.0f} (the fastest of PyTorch's runs): {speedup}")


def finite_or_none(obj):
    """JSON has no NaN: a diverged loss is written as null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_none(v) for v in obj]
    return obj


def plot(runs, path, title):
    """The smoothed losses against step (raw losses faint, validation as points) and, below,
    each run's gap to torch-A. Needs matplotlib; without it, one line says so."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"note: matplotlib is not installed; no {path.name}")
        return
    colors = {"torch-A": "tab:blue", "torch-B": "tab:green", "torch-C": "tab:olive",
              "torch-D": "tab:cyan", "ours-A": "tab:red"}
    # Ours dashed: from torch-A's seed it should lie on torch-A's curve, which stays visible.
    styles = {"ours-A": "--"}
    gaps = len(runs) > 1 and "torch-A" in runs  # the lower panel: the gaps to torch-A
    if gaps:
        fig, (top, bottom) = plt.subplots(
            2, 1, figsize=(9, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]}
        )
    else:
        fig, top = plt.subplots(figsize=(9, 5))
        bottom = top
    for name, r in runs.items():
        color = colors.get(name, "black")
        # loss[i] is step i's batch before its update, i.e. after i updates, as the validation
        # point (s, v) is after s updates: both plot at the number of updates made.
        steps = range(len(r["loss"]))
        tps = f"{r['tokens_per_s']:,.0f} tokens/s" if r["tokens_per_s"] else "untimed"
        top.plot(steps, r["loss"], color=color, alpha=0.15, linewidth=0.8)
        top.plot(steps, r["loss_ema"], styles.get(name, "-"), color=color, linewidth=1.6,
                 label=f"{name} ({r['layers']}, seed {r['seed']}): {tps}")
        vs, vl = zip(*r["val"])
        top.plot(vs, vl, "o", color=color, markersize=4, markerfacecolor="none")
    top.set_ylabel(f"training loss (EMA {EMA_BETA}), validation (o)")
    top.set_title(title)
    top.grid(alpha=0.3)
    top.legend(loc="upper right")
    if gaps:
        ref = runs["torch-A"]["loss_ema"]
        for name in [n for n in runs if n != "torch-A"]:
            # Floored so that a gap of exactly 0 (identical bits) still fits a log scale.
            gap = [max(abs(x - y), 1e-6) for x, y in zip(runs[name]["loss_ema"], ref)]
            bottom.plot(range(len(gap)), gap, color=colors.get(name, "black"),
                        label=f"|{name} - torch-A|")
        bottom.set_yscale("log")
        bottom.set_ylabel("gap of smoothed losses")
        bottom.legend(loc="upper right", fontsize="small")
        bottom.grid(alpha=0.3)
    bottom.set_xlabel("step (updates made)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------
# The command line.
# ----------------------------------------------------------------------------------------------


def parse_args(argv):
    here = Path(__file__).resolve()
    p = argparse.ArgumentParser(
        description="Train a small byte-level GPT on PyTorch's layers and on the days' kernels "
        "from the same seed on the same batches, and compare the loss curves and tokens/s.",
    )
    p.add_argument("--layers", choices=("both", "torch", "ours", "liger"), default="both",
                   help="both (default): torch seed A, torch seed B, ours seed A; torch, ours or "
                   "liger (Liger Kernel's layers, where liger_kernel is installed): that one run "
                   "alone, seed A (no verdict)")
    preset = p.add_mutually_exclusive_group()
    preset.add_argument("--quick", action="store_true",
                        help="a smoke test: 2 layers, 128 tokens of context, 20 steps")
    preset.add_argument("--gpu-bound", action="store_true",
                        help="a model the GPU bounds: 16 layers, width 2048, heads of 128, context "
                        "4096, vocabulary 32768, batch 2, 250 steps (about 1.0B parameters)")
    p.add_argument("--steps", type=int, help="optimizer steps per run (300; quick 20)")
    p.add_argument("--n-layer", type=int, help="transformer blocks (6; quick 2)")
    p.add_argument("--width", type=int, help="model width (512)")
    p.add_argument("--heads", type=int, help="attention heads (8: head dim 64)")
    p.add_argument("--context", type=int, help="tokens per sequence (1024; quick 128)")
    p.add_argument("--vocab", type=int,
                   help="rows of the embedding and the output layer (256, the bytes; at least 256)")
    p.add_argument("--batch-size", type=int, help="sequences per step (8)")
    p.add_argument("--lr", type=float, help="peak learning rate (1e-3)")
    p.add_argument("--warmup", type=int, help="learning-rate warm-up steps (30; quick 5)")
    p.add_argument("--eval-every", type=int, help="validation every this many steps (50; quick 10)")
    p.add_argument("--eval-batches", type=int, help="batches per validation (4; quick 2)")
    p.add_argument("--timing-warmup", type=int,
                   help="first steps left out of tokens/s (10; quick 5): they compile kernels")
    p.add_argument("--log-every", type=int, help="print the loss every this many steps (25; quick 5)")
    p.add_argument("--seed", type=int, default=1234, help="seed A: torch-A's and ours-A's weights")
    p.add_argument("--seed-b", type=int, help="seed B: torch-B's weights (seed A + 1)")
    p.add_argument("--noise-runs", type=int, default=3,
                   help="PyTorch runs from other seeds (B, B + 1, ...) that size the noise (3: "
                   "torch-B, torch-C and torch-D)")
    p.add_argument("--data-seed", type=int, default=0, help="the batches' order (the same for every run)")
    p.add_argument("--compile", choices=("none", "default", "reduce-overhead"), default="none",
                   help="run every model's step under torch.compile with this mode (default: none, "
                   "eager); reduce-overhead captures CUDA graphs")
    p.add_argument("--profile-steps", type=int, default=0,
                   help="after the run, this many more updates under PyTorch's profiler: the "
                   "kernels' ms per step and the costliest kernels (default 0: none)")
    p.add_argument("--deterministic-attention", action="store_true",
                   help="our attention backward with a fixed-order dQ (the same bits each run)")
    p.add_argument("--corpus-root", type=Path, default=here.parents[2],
                   help="the folder whose text is the corpus (default: this repository's root)")
    p.add_argument("--out", type=Path, default=Path("train_gpt_out"),
                   help="where results.json and loss.png go (./train_gpt_out)")
    p.add_argument("--require-agreement", action="store_true",
                   help="exit 1 when ours-A's curve does not agree with PyTorch's runs' (needs "
                   "--layers both)")
    cfg = p.parse_args(argv)

    preset = GPU_BOUND if cfg.gpu_bound else QUICK if cfg.quick else DEFAULTS
    for key, value in {"vocab": BYTES, **preset}.items():
        if getattr(cfg, key) is None:
            setattr(cfg, key, value)
    if cfg.seed_b is None:
        cfg.seed_b = cfg.seed + 1
    for key in ("steps", "n_layer", "width", "heads", "context", "batch_size", "eval_every",
                "eval_batches", "log_every"):
        if getattr(cfg, key) < 1:
            p.error(f"--{key.replace('_', '-')} must be at least 1")
    if cfg.vocab < BYTES:
        p.error(f"--vocab {cfg.vocab}: the tokens are bytes, so it must be at least {BYTES}")
    if cfg.warmup < 0 or cfg.timing_warmup < 0 or cfg.profile_steps < 0:
        p.error("--warmup, --timing-warmup and --profile-steps must not be negative")
    if not cfg.lr > 0:
        p.error("--lr must be positive")
    if cfg.width % cfg.heads:
        p.error(f"--width {cfg.width} is not a multiple of --heads {cfg.heads}")
    if cfg.layers in ("both", "ours") and cfg.width // cfg.heads not in (64, 128, 256):
        p.error(f"head dim {cfg.width // cfg.heads} (width / heads): the attention kernels take 64, 128 or 256")
    if cfg.require_agreement and cfg.layers != "both":
        p.error("--require-agreement compares runs: it needs --layers both")
    if not 1 <= cfg.noise_runs <= len(NOISE_NAMES):
        p.error(f"--noise-runs must be 1 to {len(NOISE_NAMES)}")
    if cfg.layers == "both" and cfg.seed_b <= cfg.seed < cfg.seed_b + cfg.noise_runs:
        p.error(f"--seed-b {cfg.seed_b} gives the noise runs seeds {cfg.seed_b} to "
                f"{cfg.seed_b + cfg.noise_runs - 1}, which must not hold --seed {cfg.seed}: they "
                "measure the noise between seeds")
    cfg.warmup = min(cfg.warmup, cfg.steps)
    return cfg


def main(argv=None):
    global torch, nn, F
    cfg = parse_args(sys.argv[1:] if argv is None else argv)

    try:
        import torch as _torch
        import torch.nn as _nn
        import torch.nn.functional as _F
    except ImportError as e:
        fail(f"PyTorch is not installed ({e})")
    torch, nn, F = _torch, _nn, _F
    if not torch.cuda.is_available():
        fail("no CUDA GPU: PyTorch sees none (torch.cuda.is_available() is False)")

    dk = liger = None
    if cfg.layers == "liger":
        try:
            import liger_kernel.transformers.functional as liger
        except Exception as e:  # ImportError, or Triton's own on a machine it cannot run on
            fail(f"liger_kernel cannot be imported ({type(e).__name__}: {e}); "
                 "pip install liger-kernel, or run --layers torch")
    elif cfg.layers != "torch":
        try:
            import day_kernels

            # Each layer is imported on first use: ask for all four now, so a missing one
            # fails here with one line rather than in the middle of a run.
            for fn in ("flash_attention", "rms_norm", "swiglu", "fused_linear_cross_entropy"):
                getattr(day_kernels, fn)
            dk = day_kernels
        except Exception as e:  # ImportError, AttributeError, or the native library's own
            fail(f"day_kernels cannot be imported ({type(e).__name__}: {e}); install its wheel "
                 "(maturin build in torch_layers/) or run --layers torch")

    device = torch.device("cuda", torch.cuda.current_device())
    gpu = torch.cuda.get_device_name(device)

    corpus, files = load_corpus(cfg.corpus_root)
    n_val = int(len(corpus) * VAL_FRACTION)
    # Each part must hold at least one window of context + 1 bytes.
    if n_val < cfg.context + 1 or len(corpus) - n_val < cfg.context + 1:
        fail(f"the corpus under {cfg.corpus_root} is {len(corpus):,} bytes in {len(files)} files: "
             f"too little for a validation part of {VAL_FRACTION:.0%} with {cfg.context + 1} bytes "
             "per window (give --corpus-root the repository's root, or a smaller --context)")
    tokens = torch.frombuffer(bytearray(corpus), dtype=torch.uint8).to(device)
    train_tokens, val_tokens = tokens[:-n_val], tokens[-n_val:]
    # The validation part is the tail of the sorted file list, so it is a few whole files the
    # model never trains on.
    train_batches = Batches(train_tokens, cfg.context, cfg.batch_size, cfg.steps, cfg.data_seed)
    val_set = Batches(val_tokens, cfg.context, cfg.batch_size, cfg.eval_batches, cfg.data_seed + 1)
    val_batches = [val_set[i] for i in range(len(val_set))]

    GPT = build_model_classes()
    torch_layers = TorchLayers()
    our_layers = OurLayers(dk, cfg.deterministic_attention) if dk is not None else None
    plan = {
        "both": [("torch-A", torch_layers, cfg.seed)]
        + [(f"torch-{letter}", torch_layers, cfg.seed_b + i)
           for i, letter in enumerate(NOISE_NAMES[:cfg.noise_runs])]
        + [("ours-A", our_layers, cfg.seed)],
        "torch": [("torch-A", torch_layers, cfg.seed)],
        "ours": [("ours-A", our_layers, cfg.seed)],
        "liger": [("liger-A", LigerLayers(liger) if liger is not None else None, cfg.seed)],
    }[cfg.layers]

    print(f"GPU: {gpu}; torch {torch.__version__} (CUDA {torch.version.cuda})")
    print(f"corpus: {len(files)} files under {Path(cfg.corpus_root).resolve()}, {len(corpus):,} bytes "
          f"({len(corpus) - n_val:,} train, {n_val:,} validation)")
    print(f"model: {cfg.n_layer} layers, width {cfg.width}, {cfg.heads} heads, SwiGLU hidden "
          f"{swiglu_hidden(cfg.width)}, context {cfg.context}, vocabulary {cfg.vocab}; "
          f"batch {cfg.batch_size} x {cfg.context} "
          f"tokens, {cfg.steps} steps")

    runs = {}
    for name, layers, seed in plan:
        runs[name] = train_one(name, layers, seed, cfg, GPT, train_batches, val_batches, device)

    print_table(runs)
    result_verdict = None
    if cfg.layers == "both":
        result_verdict = verdict(runs, cfg.steps)
        print_verdict(result_verdict)

    cfg.out.mkdir(parents=True, exist_ok=True)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(cfg).items()}
    config["swiglu_hidden"] = swiglu_hidden(cfg.width)
    results = dict(
        config=config,
        environment=dict(
            gpu=gpu,
            torch=torch.__version__,
            cuda=torch.version.cuda,
            python=platform.python_version(),
            day_kernels=day_kernels_version() if dk is not None else None,
            device_summary=device_summary(dk),
        ),
        corpus=dict(root=str(Path(cfg.corpus_root).resolve()), files=len(files),
                    bytes=len(corpus), train_bytes=len(corpus) - n_val, val_bytes=n_val),
        runs=list(runs.values()),
        verdict=result_verdict,
    )
    json_path = cfg.out / "results.json"
    json_path.write_text(json.dumps(finite_or_none(results), indent=1) + "\n")
    png_path = cfg.out / "loss.png"
    title = (f"{cfg.n_layer} x {cfg.width} byte GPT, context {cfg.context}, "
             f"batch {cfg.batch_size}: {gpu}")
    plot(runs, png_path, title)
    print(f"\nwrote {json_path}" + (f" and {png_path}" if png_path.exists() else ""))

    if cfg.require_agreement and not result_verdict["agree"]:
        return 1
    return 0


def day_kernels_version():
    try:
        from importlib.metadata import version

        return version("day-kernels")
    except Exception:
        return None


def device_summary(dk):
    try:
        return dk.device_summary() if dk is not None else None
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())

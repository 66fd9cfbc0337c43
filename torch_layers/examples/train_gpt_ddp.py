"""Train ``train_gpt.py``'s small GPT on several GPUs with DistributedDataParallel, and check
that its loss curve is the one-GPU run's.

Data parallel training is what a user of these layers does next: one process per GPU, each
holding the whole model, each running its share of every batch's sequences forward and
backward; after the backward, DDP averages every gradient over the processes (an all-reduce
through NCCL), so each process's optimizer makes the same update the one-GPU run would make
from the whole batch. The layers need nothing for it: a process runs them on its own GPU and
PyTorch's current stream, as in a one-GPU run.

Each process trains on the same batches as ``train_gpt.py`` (the same ``--data-seed``), taking
its rows of each one (``--batch-size`` must be a multiple of the processes), from seed A's
weights: first on PyTorch's layers (``torch-ddpN``), then on ours (``ours-ddpN``). With
``--against`` (a ``results.json`` that ``train_gpt.py`` wrote with ``--layers both`` and the
same flags) it compares each with the same layers' one-GPU run from the same seed, by the mean
absolute gap of the smoothed loss over the last steps, as ``train_gpt.py``'s verdict does. Only
the order in which sums are added differs between the two: the batch split over the GPUs and
the all-reduce. How far that alone moves a curve is what PyTorch's own layers show
(``torch-ddpN`` against ``torch-A``); the seeds' gap (the largest between two of the one-GPU
run's PyTorch seeds, ``torch-A``, ``torch-B``, ...) is the other yardstick. Ours agree when
their gap (``ours-ddpN`` against ``ours-A``) is no larger than the larger of the two.

Run it with ``torchrun`` (2 GPUs or more; ``python -m torch.distributed.run`` is the same)::

    python torch_layers/examples/train_gpt.py --out /tmp/gpt
    torchrun --standalone --nproc-per-node 2 torch_layers/examples/train_gpt_ddp.py \\
        --against /tmp/gpt/results.json --out /tmp/gpt-ddp

It takes ``train_gpt.py``'s flags (``--layers``: ``both``, the default, ``ours`` or ``torch``;
``--seed-b`` does not apply; ``--require-agreement`` needs ``--against`` and ``both``) and writes ``results.json`` (the run,
its tokens/s over all the GPUs, the verdict) into ``--out``. NVLink multicast (NCCL's NVLS) is
turned off: the all-reduce needs none of it.

Exit codes of each process: 0 when it ran (whatever the verdict), 1 with
``--require-agreement`` when the curves do not agree, 2 when it cannot run (not started by
torchrun, fewer than 2 processes or GPUs, no ``day_kernels``, flags or a corpus that differ
from the ``--against`` run's), each with its ``error:`` line. torchrun itself exits 1 when any
process fails, whatever that process's code; the verdict is in ``results.json``.
"""

import argparse
import itertools
import json
import math
import os
import sys
from pathlib import Path

import train_gpt as base

# NVLink multicast stays off for NCCL, PyTorch's symmetric memory and NVSHMEM, whatever the
# caller's environment says: the all-reduce does not need it, and some hosts cannot share it.
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

# The flags that must be the --against run's for the two curves to be comparable.
SAME_AS_AGAINST = (
    "steps", "n_layer", "width", "heads", "context", "vocab", "batch_size", "lr", "warmup",
    "seed", "data_seed", "deterministic_attention", "compile",
)


class Ranks:
    """This process's place in the run: its rank among ``world`` processes, its GPU."""

    def __init__(self, rank, world, device):
        self.rank, self.world, self.device = rank, world, device

    def wrap(self, model):
        from torch.nn.parallel import DistributedDataParallel

        # The weights were drawn from the same seed in every process; DDP also broadcasts
        # rank 0's at the start, so every process begins from the same bits.
        return DistributedDataParallel(model, device_ids=[self.device.index])

    def shard(self, x, y):
        """This process's rows of the batch: the batch is cut into ``world`` equal parts."""
        rows = x.shape[0] // self.world
        part = slice(self.rank * rows, (self.rank + 1) * rows)
        return x[part], y[part]

    def mean(self, t):
        """``t`` averaged over the processes, in place (every process must call it)."""
        import torch.distributed as dist

        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        return t


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Train train_gpt.py's GPT with DistributedDataParallel (start it with "
        "torchrun) and compare it with the one-GPU run.",
        epilog="Every other flag is train_gpt.py's (python train_gpt.py --help), but --seed-b and --noise-runs.",
    )
    p.add_argument("--against", type=Path,
                   help="results.json of train_gpt.py --layers both with the same flags: the "
                   "one-GPU curves to compare with")
    p.add_argument("--require-agreement", action="store_true",
                   help="exit 1 when the curve does not agree with the --against run's")
    own, rest = p.parse_known_args(argv)
    cfg = base.parse_args(rest)
    if cfg.layers == "liger":
        base.fail("--layers liger: data parallel runs train PyTorch's layers and ours (both, "
                  "torch or ours)")
    if own.require_agreement and (own.against is None or cfg.layers != "both"):
        base.fail("--require-agreement compares runs: it needs --against and --layers both")
    cfg.against, cfg.require_agreement = own.against, own.require_agreement
    return cfg


def check_against(cfg, against):
    """The --against run's results, after checking that its flags are this run's."""
    try:
        results = json.loads(against.read_text())
    except (OSError, ValueError) as e:
        base.fail(f"--against {against}: {e}")
    runs = {r["name"]: r for r in results.get("runs", [])}
    if not {"torch-A", "torch-B", "ours-A"} <= runs.keys():
        base.fail(f"--against {against}: it holds no torch-A, torch-B and ours-A runs "
                  "(train_gpt.py --layers both writes them)")
    theirs = results["config"]
    # A results.json from before --vocab existed trained on the bytes alone.
    theirs = {"vocab": base.BYTES} | theirs
    differ = [k for k in SAME_AS_AGAINST if theirs.get(k) != getattr(cfg, k)]
    if differ:
        pairs = ", ".join(f"{k}: {getattr(cfg, k)} here, {theirs.get(k)} there" for k in differ)
        base.fail(f"--against {against} ran with other flags ({pairs})")
    cfg.against_corpus_bytes = results.get("corpus", {}).get("bytes")
    return runs


def verdict(ddp, runs, steps):
    """The gaps of the last steps' smoothed losses, as train_gpt.py's verdict takes them:
    the largest between two of PyTorch's seeds on one GPU (torch-A, torch-B, ...), and between
    each layers' run here and their one-GPU run from the same seed."""
    window = min(base.VERDICT_WINDOW, max(1, steps // 2))

    def gap(a, b):
        return base.mean_abs_gap(a["loss_ema"][-window:], b["loss_ema"][-window:])

    one_gpu = {"torch": runs["torch-A"], "ours": runs["ours-A"]}
    seeds = base.torch_runs(runs)
    seed_noise = max(gap(x, y) for x, y in itertools.combinations(seeds, 2))
    result = dict(window_steps=window, seed_noise=seed_noise)
    for layers, run in ddp.items():
        result[f"{layers}_gap"] = gap(run, one_gpu[layers])
        result[f"{layers}_same_initial_weights"] = (
            run["init_checksum"] == one_gpu[layers]["init_checksum"])
        result[f"{layers}_one_gpu_tokens_per_s"] = one_gpu[layers]["tokens_per_s"]
    if {"torch", "ours"} <= ddp.keys():
        finite = all(math.isfinite(v) for r in ddp.values() for v in r["loss"])
        result["noise"] = max(result["seed_noise"], result["torch_gap"])
        result["agree"] = (finite and math.isfinite(result["ours_gap"])
                           and result["ours_gap"] <= result["noise"])
        result["all_losses_finite"] = finite
    return result


def print_verdict(v, world):
    fmt = base.fmt
    print(f"\nseed noise  {fmt(v['seed_noise'], '.5f')}  the largest mean |x - y| of two PyTorch "
          f"seeds on one GPU, last {v['window_steps']} steps")
    for layers in ("torch", "ours"):
        if f"{layers}_gap" in v:
            one = "torch-A" if layers == "torch" else "ours-A"
            print(f"{layers + ' gap':<11} {fmt(v[f'{layers}_gap'], '.5f')}  mean |{layers}-ddp{world}"
                  f" - {one}|: {world} GPUs against one, the same layers and seed")
    if "agree" in v:
        print(f"agree:  {'yes' if v['agree'] else 'NO'} (ours' gap "
              f"{'<=' if v['agree'] else '>'} the larger of the seed noise and torch's gap)")


def main(argv=None):
    cfg = parse_args(sys.argv[1:] if argv is None else argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        base.fail("start it with torchrun (torchrun --standalone --nproc-per-node 2 "
                  "torch_layers/examples/train_gpt_ddp.py ...)")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if world < 2:
        base.fail(f"{world} process: data parallel training needs 2 or more (--nproc-per-node)")
    if cfg.batch_size % world:
        base.fail(f"--batch-size {cfg.batch_size} is not a multiple of the {world} processes")
    os.environ.update(MULTICAST_OFF)

    try:
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        base.fail(f"PyTorch is not installed ({e})")
    base.torch, base.nn, base.F = torch, nn, F
    if torch.cuda.device_count() <= local:
        base.fail(f"process {local} on this host needs GPU {local}; PyTorch sees "
                  f"{torch.cuda.device_count()}")
    runs_against = check_against(cfg, cfg.against) if cfg.against else None

    dk = None
    if cfg.layers != "torch":
        try:
            import day_kernels as dk
        except Exception as e:
            base.fail(f"day_kernels cannot be imported ({type(e).__name__}: {e})")
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    if rank != 0:
        sys.stdout = open(os.devnull, "w")  # one process reports

    corpus, files = base.load_corpus(cfg.corpus_root)
    if runs_against is not None and cfg.against_corpus_bytes != len(corpus):
        base.fail(f"--against {cfg.against} trained on a corpus of {cfg.against_corpus_bytes} "
                  f"bytes; this one is {len(corpus):,} (give the same --corpus-root)")
    n_val = int(len(corpus) * base.VAL_FRACTION)
    tokens = torch.frombuffer(bytearray(corpus), dtype=torch.uint8).to(device)
    train_tokens, val_tokens = tokens[:-n_val], tokens[-n_val:]
    train_batches = base.Batches(train_tokens, cfg.context, cfg.batch_size, cfg.steps, cfg.data_seed)
    val_set = base.Batches(val_tokens, cfg.context, cfg.batch_size, cfg.eval_batches,
                           cfg.data_seed + 1)
    val_batches = [val_set[i] for i in range(len(val_set))]
    gpu = torch.cuda.get_device_name(device)
    print(f"GPUs: {world} x {gpu}; torch {torch.__version__} (CUDA {torch.version.cuda}, "
          f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))})")
    print(f"model: {cfg.n_layer} layers, width {cfg.width}, {cfg.heads} heads, context "
          f"{cfg.context}; batch {cfg.batch_size} x {cfg.context} tokens, "
          f"{cfg.batch_size // world} sequences per GPU, {cfg.steps} steps")

    all_layers = {"torch": base.TorchLayers()}
    if dk is not None:
        all_layers["ours"] = base.OurLayers(dk, cfg.deterministic_attention)
    chosen = ("torch", "ours") if cfg.layers == "both" else (cfg.layers,)
    ranks = Ranks(rank, world, device)
    runs = {}
    for layers in chosen:
        run = base.train_one(f"{layers}-ddp{world}", all_layers[layers], cfg.seed, cfg,
                             base.build_model_classes(), train_batches, val_batches, device,
                             ranks=ranks)
        run["processes"] = world
        runs[layers] = run
    result = None
    if rank == 0:
        base.print_table({r["name"]: r for r in runs.values()})
        if runs_against is not None:
            result = verdict(runs, runs_against, cfg.steps)
            print_verdict(result, world)
        cfg.out.mkdir(parents=True, exist_ok=True)
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(cfg).items()}
        results = dict(
            config=config,
            environment=dict(gpu=gpu, gpus=world, torch=torch.__version__,
                             cuda=torch.version.cuda,
                             nccl=".".join(map(str, torch.cuda.nccl.version()))),
            runs=list(runs.values()),
            verdict=result,
        )
        path = cfg.out / "results.json"
        path.write_text(json.dumps(base.finite_or_none(results), indent=1) + "\n")
        print(f"\nwrote {path}")
    dist.destroy_process_group()
    if cfg.require_agreement and result is not None and not result.get("agree"):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``examples/train_gpt.py``'s flags, with neither torch nor a GPU: the presets, the vocabulary
and the runs it refuses before training (CI runs these)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import train_gpt  # noqa: E402
import train_gpt_ddp as ddp  # noqa: E402


def _refused(parse, argv, capsys, message):
    with pytest.raises(SystemExit) as e:
        parse(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_the_gpu_bound_preset_is_the_model_it_names_and_a_flag_wins_over_it():
    cfg = train_gpt.parse_args(["--gpu-bound"])
    got = {k: getattr(cfg, k) for k in train_gpt.GPU_BOUND}
    assert got == train_gpt.GPU_BOUND
    assert (cfg.n_layer, cfg.width, cfg.width // cfg.heads, cfg.context, cfg.vocab) == (16, 2048, 128, 4096, 32768)
    assert train_gpt.parse_args(["--gpu-bound", "--steps", "7"]).steps == 7


def test_the_vocabulary_is_the_bytes_unless_asked_and_never_fewer(capsys):
    assert train_gpt.parse_args([]).vocab == train_gpt.BYTES == 256
    assert train_gpt.parse_args(["--quick"]).vocab == 256
    assert train_gpt.parse_args(["--vocab", "50000"]).vocab == 50000
    _refused(train_gpt.parse_args, ["--vocab", "255"], capsys, "at least 256")


def test_presets_do_not_mix_and_profiling_counts_steps(capsys):
    _refused(train_gpt.parse_args, ["--quick", "--gpu-bound"], capsys, "not allowed with")
    _refused(train_gpt.parse_args, ["--profile-steps", "-1"], capsys, "must not be negative")
    assert train_gpt.parse_args([]).profile_steps == 0


def test_liger_takes_a_head_dim_our_kernels_do_not_and_ours_refuse_it(capsys):
    # Liger's run uses PyTorch's attention, which takes any head dim; ours take 64, 128, 256.
    assert train_gpt.parse_args(["--layers", "liger", "--width", "480", "--heads", "8"]).layers == "liger"
    _refused(train_gpt.parse_args, ["--layers", "ours", "--width", "480", "--heads", "8"], capsys,
             "head dim 60")


def test_data_parallel_runs_refuse_liger_and_compare_the_vocabulary(capsys):
    _refused(ddp.parse_args, ["--layers", "liger"], capsys, "--layers liger")
    assert "vocab" in ddp.SAME_AS_AGAINST


STEPS = 300


def _run(name, level, tokens_per_s=1.0):
    """A run whose smoothed loss and validation losses are `level` at every step."""
    return dict(name=name, loss=[level] * STEPS, loss_ema=[level] * STEPS,
                val=[[s, level] for s in range(0, STEPS + 1, 50)], init_checksum=1.0,
                tokens_per_s=tokens_per_s)


def _runs(ours, *torch_levels):
    names = ["torch-A"] + [f"torch-{c}" for c in train_gpt.NOISE_NAMES[:len(torch_levels) - 1]]
    runs = {n: _run(n, level) for n, level in zip(names, torch_levels)}
    runs["ours-A"] = _run("ours-A", ours)
    return runs


def test_the_noise_is_the_farthest_pair_of_pytorchs_runs_and_ours_is_judged_by_its_mean_gap():
    # PyTorch's runs at 1.000, 1.002 and 1.005: pairs 0.002, 0.005, 0.003, the noise 0.005.
    # Ours at 1.004: 0.004 from torch-A, more than torch-B is (0.002), which the old verdict
    # (torch-A and torch-B alone) called a disagreement; its mean gap is 0.0023.
    v = train_gpt.verdict(_runs(1.004, 1.000, 1.002, 1.005), STEPS)
    assert v["noise"] == pytest.approx(0.005)
    assert v["difference"] == pytest.approx((0.004 + 0.002 + 0.001) / 3)
    assert set(v["noise_pairs"]) == {"torch-A/torch-B", "torch-A/torch-C", "torch-B/torch-C"}
    assert v["agree"]
    assert v["val_noise"] == pytest.approx(0.005) and v["val_difference"] == pytest.approx(v["difference"])


def test_a_curve_off_from_every_pytorch_run_disagrees_past_the_margin():
    # Ours 0.01 above the highest of PyTorch's runs: its mean gap (0.0127) passes 1.5 x 0.005.
    v = train_gpt.verdict(_runs(1.015, 1.000, 1.002, 1.005), STEPS)
    assert not v["agree"]
    # 0.004 above: a mean gap of 0.0067, past the noise but within the margin.
    v = train_gpt.verdict(_runs(1.009, 1.000, 1.002, 1.005), STEPS)
    assert v["noise"] < v["difference"] <= train_gpt.NOISE_MARGIN * v["noise"] and v["agree"]
    # One noise run: the one pair is the noise, as before.
    v = train_gpt.verdict(_runs(1.0005, 1.000, 1.002), STEPS)
    assert v["noise"] == pytest.approx(0.002) and v["agree"]


def test_a_loss_that_is_not_finite_never_agrees():
    runs = _runs(1.000, 1.000, 1.002, 1.005)
    runs["ours-A"]["loss"][7] = float("nan")
    assert not train_gpt.verdict(runs, STEPS)["agree"]


def test_the_fastest_pytorch_run_is_the_one_to_beat():
    runs = _runs(1.0, 1.0, 1.002, 1.005)
    runs["torch-C"]["tokens_per_s"] = 3.0
    runs["ours-A"]["tokens_per_s"] = 2.0
    v = train_gpt.verdict(runs, STEPS)
    assert v["torch_tokens_per_s"] == 3.0 and not v["faster"]


def test_noise_runs_are_counted_and_never_take_seed_a(capsys):
    assert train_gpt.parse_args([]).noise_runs == 3
    _refused(train_gpt.parse_args, ["--noise-runs", "0"], capsys, "--noise-runs must be 1 to")
    # Seed B 1233 with 3 noise runs would give torch-C seed 1234, seed A's.
    _refused(train_gpt.parse_args, ["--seed-b", "1233"], capsys, "must not hold --seed 1234")
    assert train_gpt.parse_args(["--seed-b", "1233", "--noise-runs", "1"]).seed_b == 1233


def test_the_verdict_prints_every_gap(capsys):
    train_gpt.print_verdict(train_gpt.verdict(_runs(1.004, 1.000, 1.002, 1.005), STEPS))
    out = capsys.readouterr().out
    for pair in ("torch-A/torch-B", "torch-B/torch-C", "ours-A/torch-C"):
        assert pair in out
    assert "agree:  yes (difference <= 1.5 x noise)" in out

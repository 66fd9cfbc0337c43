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

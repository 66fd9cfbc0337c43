"""``examples/train_gpt_ddp.py``'s checks and verdict, with neither torch nor a GPU: what it
refuses before training, and how it judges the curves (CI runs these)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import train_gpt_ddp as ddp  # noqa: E402

STEPS = 300


def _run(name, level, checksum=1.0):
    """A run whose smoothed loss is `level` at every step."""
    return dict(name=name, loss=[level] * STEPS, loss_ema=[level] * STEPS,
                init_checksum=checksum, tokens_per_s=1.0)


def _one_gpu_results(path, **flags):
    """A results.json as train_gpt.py --layers both writes it, with the default flags but
    `flags`."""
    cfg = ddp.parse_args([])
    config = {k: getattr(cfg, k) for k in ddp.SAME_AS_AGAINST} | flags
    runs = [_run("torch-A", 1.0), _run("torch-B", 1.01), _run("ours-A", 1.0)]
    path.write_text(json.dumps(dict(config=config, corpus=dict(bytes=1000), runs=runs)))
    return path


def test_require_agreement_needs_a_run_to_agree_with(capsys):
    for argv in (["--require-agreement"], ["--require-agreement", "--against", "x.json",
                                           "--layers", "ours"]):
        with pytest.raises(SystemExit) as e:
            ddp.parse_args(argv)
        assert e.value.code == 2
        assert "needs --against and --layers both" in capsys.readouterr().err


def test_a_one_gpu_run_with_other_flags_is_refused_naming_them(tmp_path, capsys):
    path = _one_gpu_results(tmp_path / "results.json", width=256, compile="default")
    cfg = ddp.parse_args(["--against", str(path)])
    with pytest.raises(SystemExit) as e:
        ddp.check_against(cfg, path)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "width: 512 here, 256 there" in err and "compile: none here, default there" in err


def test_a_one_gpu_run_without_its_three_runs_is_refused(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(dict(config={}, runs=[_run("ours-A", 1.0)])))
    with pytest.raises(SystemExit) as e:
        ddp.check_against(ddp.parse_args(["--against", str(path)]), path)
    assert e.value.code == 2
    assert "no torch-A, torch-B and ours-A" in capsys.readouterr().err


def test_the_same_flags_pass_and_the_corpus_is_kept_for_its_check(tmp_path):
    path = _one_gpu_results(tmp_path / "results.json")
    cfg = ddp.parse_args(["--against", str(path)])
    runs = ddp.check_against(cfg, path)
    assert set(runs) == {"torch-A", "torch-B", "ours-A"}
    assert cfg.against_corpus_bytes == 1000


@pytest.mark.parametrize("ours, agree", [(1.015, True), (1.02, True), (1.025, False)])
def test_ours_agree_within_the_larger_of_the_seed_gap_and_torchs_own(tmp_path, ours, agree):
    # Seeds 0.01 apart, PyTorch's layers 0.02 from their one-GPU run: the noise is 0.02.
    path = _one_gpu_results(tmp_path / "results.json")
    runs = ddp.check_against(ddp.parse_args(["--against", str(path)]), path)
    here = {"torch": _run("torch-ddp2", 1.02), "ours": _run("ours-ddp2", ours)}
    v = ddp.verdict(here, runs, STEPS)
    assert v["seed_noise"] == pytest.approx(0.01)
    assert v["torch_gap"] == pytest.approx(0.02)
    assert v["noise"] == pytest.approx(0.02)
    assert v["agree"] is agree
    assert v["ours_same_initial_weights"]


def test_a_loss_that_is_not_finite_never_agrees(tmp_path):
    path = _one_gpu_results(tmp_path / "results.json")
    runs = ddp.check_against(ddp.parse_args(["--against", str(path)]), path)
    broken = _run("ours-ddp2", 1.0)
    broken["loss"][-1] = float("nan")
    v = ddp.verdict({"torch": _run("torch-ddp2", 1.02), "ours": broken}, runs, STEPS)
    assert not v["all_losses_finite"] and not v["agree"]

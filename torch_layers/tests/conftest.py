"""What the tests need, and one line when it is missing.

``test_native*.py`` and ``test_example_*.py`` need neither torch nor a GPU (CI runs them). The ``test_torch_*`` files need
torch; the ``test_gpu_*`` files need torch and a CUDA GPU. Without them those files are not
collected and one ``SKIPPED`` line says why; with ``REQUIRE_GPU=1`` a missing GPU (or torch) is
a failure instead.
"""

import os

import pytest


def _missing():
    """(what torch-only tests lack, what GPU tests lack): None where nothing is missing."""
    try:
        import torch
    except ImportError:
        return "torch is not installed", "torch is not installed"
    if not torch.cuda.is_available():
        return None, "torch sees no CUDA GPU"
    return None, None


_NO_TORCH, _NO_GPU = _missing()
collect_ignore_glob = []
if _NO_TORCH:
    collect_ignore_glob.append("test_torch_*.py")
if _NO_GPU:
    collect_ignore_glob.append("test_gpu_*.py")


@pytest.fixture(autouse=True)
def _fresh_compiler_caches():
    """Each test traces from scratch. The operator tests and the GPU tests compile the same
    ``TinyModel.forward`` (tiny_model.py); kept from test to test, its compiled variants add
    up, across files, to Dynamo's limit of 8 per code object, and the next ``fullgraph``
    compile fails."""
    if not _NO_TORCH:
        import torch

        torch._dynamo.reset()
    yield


def pytest_configure(config):
    if _NO_GPU and os.environ.get("REQUIRE_GPU") == "1":
        raise pytest.UsageError(f"REQUIRE_GPU=1 but {_NO_GPU}: the GPU tests cannot run")


def pytest_terminal_summary(terminalreporter):
    skipped = [("test_gpu_*", _NO_GPU)]
    if _NO_TORCH:
        skipped.insert(0, ("test_torch_*", _NO_TORCH))
    for files, why in skipped:
        if why:
            terminalreporter.write_line(f"SKIPPED {files}.py: {why}")

"""CPU test suite: every kernel runs through Triton's interpreter on CPU tensors.

GPU tests (marker ``gpu``) run their kernels in subprocesses without the interpreter and are skipped
when no GPU is present.
"""

from __future__ import annotations

import os
import time

os.environ["TRITON_INTERPRET"] = "1"  # must precede the first `import triton`

import pytest


@pytest.fixture(autouse=True)
def _isolated_storage(tmp_path, monkeypatch):
    """Each test gets its own storage root and a clean environment."""
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", str(tmp_path / "storage"))
    for name in (
        "TRITON_DEJAVU_FORCE_FALLBACK",
        "TRITON_DEJAVU_USE_ONLY_RESTORED",
        "TRITON_DEJAVU_USE_ISOLATED_PROCESS",
        "TRITON_DEJAVU_ISOLATION_TIMEOUT",
        "TRITON_DEJAVU_NUMERICAL_CHECK",
        "TRITON_DEJAVU_COMPILE_THREADS",
        "TRITON_DEJAVU_PROGRESS",
        "TRITON_DEJAVU_TAG",
        "TRITON_DEJAVU_READ_ONLY",
        "TRITON_DEJAVU_DETERMINISTIC",
        "TRITON_DEJAVU_MISSES_FILE",
        "TRITON_PRINT_AUTOTUNING",
        "TRITON_DEJAVU_DEBUG_DEBUG",
        "TRITON_DEJAVU_DISABLE_JITCACHE",
        "TRITON_DEJAVU_SPLIT_CACHE",
        "TRITON_DEJAVU_HASH_SEARCH_PARAMS",
        "TRITON_DEJAVU_INSTANCE_RUN_ID",
        "_TRITON_DEJAVU_DETERMINED_CUDA_VERSION",
        "_TRITON_DEJAVU_DETERMINED_ROCM_VERSION",
    ):
        monkeypatch.delenv(name, raising=False)
    from triton_dejavu_like._log import forget_warnings

    forget_warnings()  # each test sees the warnings its own actions cause
    from triton_dejavu_like import reset_misses

    reset_misses()
    yield


class FakeClock:
    """``time.monotonic`` under the test's control: it moves only when the test moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    """A fake ``time.monotonic``, so that a time budget is tested without timing anything."""
    fake = FakeClock()
    monkeypatch.setattr(time, "monotonic", fake)
    return fake


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:  # pragma: no cover
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA or ROCm GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

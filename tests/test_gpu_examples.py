"""The examples on a GPU: compiled kernels at realistic sizes, checked against torch, tuned in one
process and restored in the next with zero benchmark launches.

The pytest process runs with ``TRITON_INTERPRET=1`` (see conftest.py); the examples run in
subprocesses without it. Run with ``python -m pytest -m gpu tests/test_gpu_examples.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from example_runs import (
    EXAMPLES,
    EXAMPLES_DIR,
    _common,
    assert_restored,
    assert_tuned,
    run,
    run_demo,
    tune_each,
)

pytestmark = pytest.mark.gpu

FULL = ("--size", "full")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory):
    return tune_each(tmp_path_factory, gpu=True, args=FULL)


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_is_correct_on_the_gpu(example: str, tuned) -> None:
    report = tuned[example][1]
    assert "interpreter" not in report["device"]
    assert "/cpu/" not in report["cache_path"]
    assert_tuned(report)


@pytest.mark.parametrize("example", EXAMPLES)
def test_second_process_restores_without_benchmarking_on_the_gpu(example: str, tuned) -> None:
    storage, first = tuned[example]
    assert_restored(first, run(example, storage, gpu=True, args=FULL))


def test_gpu_restore_survives_lines_added_above_the_kernel(tuned, tmp_path: Path) -> None:
    """Triton recompiles (its cache key holds the line number) but nothing is tuned again."""
    storage, first = tuned["softmax"]
    moved = _common.copy_with_lines_above_kernel(EXAMPLES_DIR / "softmax.py", tmp_path)
    assert_restored(first, run(moved, storage, gpu=True, args=FULL))


def test_demo_on_the_gpu(tmp_path: Path) -> None:
    proc = run_demo(_common.example_env(tmp_path / "storage", gpu=True), timeout_s=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "interpreter" not in proc.stdout
    assert "process 2: restored" in proc.stdout
    assert any(os.scandir(tmp_path / "storage"))

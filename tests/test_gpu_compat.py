"""triton-dejavu-style kernels tuned in one process and restored in a fresh one with zero benchmarks.

``gpu_compat_kernels.py`` holds a variable-length flash-attention forward written the way
triton-dejavu's flash-attention test case is (a ConfigSpace over BLOCK_M/BLOCK_N/PRE_LOAD_V/
num_warps/num_stages with a kwarg condition, a 29-argument key of strides, sizes and flags,
``cu_seqlens``, ``use_cuda_graph=True``, ``warmup``/``rep``) and RMSNorms whose configs carry
per-config pre-hooks. Each run is a fresh process sharing one storage directory: the first tunes,
the second must restore the same config from the same file with no benchmark launch, and both must
match torch. The GPU tests (marker ``gpu``) run the kernels compiled at full size; the CPU test runs
the same flow through Triton's interpreter at tiny sizes.

    python -m pytest -m gpu tests/test_gpu_compat.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parent / "gpu_compat_kernels.py"
ROOT = SCRIPT.parent.parent
CASES = ("attention", "rmsnorm", "rmsnorm_persistent")


def run_kernels(storage: Path, cache: Path, *, gpu: bool, timeout_s: float) -> dict[str, dict[str, Any]]:
    """Run every case in one fresh process; its reports by case name."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not (k.lstrip("_").startswith("TRITON_DEJAVU_") or k == "TRITON_PRINT_AUTOTUNING")
    }
    env.update(TRITON_DEJAVU_STORAGE=str(storage), TRITON_CACHE_DIR=str(cache), TRITON_DEJAVU_PROGRESS="0")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    if gpu:
        env.pop("TRITON_INTERPRET", None)
    else:
        env["TRITON_INTERPRET"] = "1"
    report = storage.parent / f"report-{len(list(storage.parent.glob('report-*')))}.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--case", "all", "--report", str(report)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if not report.exists():
        raise RuntimeError(
            f"no report (status {proc.returncode})\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    reports = {r["case"]: {**r, "stdout": proc.stdout} for r in json.loads(report.read_text())}
    return reports


def tune_then_restore(tmp_path: Path, *, gpu: bool, timeout_s: float) -> tuple[dict, dict]:
    storage, cache = tmp_path / "storage", tmp_path / "triton-cache"
    storage.mkdir()
    first = run_kernels(storage, cache, gpu=gpu, timeout_s=timeout_s)
    second = run_kernels(storage, cache, gpu=gpu, timeout_s=timeout_s)
    return first, second


def check(first: dict[str, Any], second: dict[str, Any], *, gpu: bool) -> None:
    assert first["ok"], first["stdout"]
    assert first["decision"] == "tuned"
    assert first["configs_timed"] == first["configs_in_space"] > 1
    assert first["bench_launches"] >= first["configs_timed"]
    assert Path(first["cache_path"]).is_file()
    assert second["ok"], second["stdout"]
    assert second["decision"] == "restored", second["stdout"]
    assert second["bench_launches"] == 0, second["stdout"]
    assert second["config"] == first["config"]
    assert second["pre_hook"] == first["pre_hook"]
    assert second["cache_path"] == first["cache_path"]
    assert ("interpreter" in first["device"]) != gpu


def check_all(first: dict, second: dict, *, gpu: bool) -> None:
    assert set(first) == set(second) == set(CASES)
    for case in CASES:
        check(first[case], second[case], gpu=gpu)
    assert first["attention"]["key_length"] == 29
    assert second["rmsnorm_persistent"]["pre_hook"] == "zero_ticket"


def test_tune_then_restore_under_the_interpreter(tmp_path: Path) -> None:
    first, second = tune_then_restore(tmp_path, gpu=False, timeout_s=300)
    check_all(first, second, gpu=False)


@pytest.fixture(scope="module")
def gpu_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    return tune_then_restore(tmp_path_factory.mktemp("gpu-compat"), gpu=True, timeout_s=900)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES)
def test_tune_then_restore_on_the_gpu(case: str, gpu_runs: tuple[dict, dict]) -> None:
    first, second = gpu_runs
    check(first[case], second[case], gpu=True)


@pytest.mark.gpu
def test_gpu_reports_cover_the_key_and_the_hook(gpu_runs: tuple[dict, dict]) -> None:
    first, second = gpu_runs
    check_all(first, second, gpu=True)
    assert "/cpu/" not in first["attention"]["cache_path"]

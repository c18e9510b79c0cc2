"""Storage on a GPU: compiled kernels tuned by several processes at once into one storage, the
platform in the path, a restore with zero benchmarks, and the command line on real results.

The pytest process runs Triton's interpreter (conftest.py); the tuning runs in subprocesses without
it. Run with ``python -m pytest -m gpu tests/test_gpu_storage.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from process_helpers import all_exit

pytestmark = pytest.mark.gpu

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path

    import torch
    import triton
    import triton.language as tl

    import triton_dejavu_like as tdl


    @tdl.autotune(
        key=["n"],
        configs=[
            triton.Config({"BLOCK": b}, num_warps=w)
            for b in map(int, os.environ.get("AXPY_BLOCKS", "256,1024").split(","))
            for w in (2, 4)
        ],
        warmup=5,
        rep=10,
    )
    @triton.jit
    def axpy(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, 2 * x + y, mask=mask)


    jitted, launches = axpy.fn, []
    _run = jitted.run


    def counting_run(*args, **kwargs):
        if not kwargs.get("warmup", False):
            launches.append(1)
        return _run(*args, **kwargs)


    jitted.run = counting_run  # every launch beyond the caller's own is a benchmark launch
    go = Path(sys.argv[1])
    while not go.exists():
        time.sleep(0.01)
    decisions = []
    for n in map(int, sys.argv[2:]):
        x = torch.randn(n, device="cuda")
        y = torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        axpy[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
        torch.testing.assert_close(out, 2 * x + y)
        decisions.append(axpy.last_decision)
    benchmarks = len(launches) - len(decisions)
    from triton_dejavu_like.measure.compile_pool import CompilePool

    pool = CompilePool._instance  # compile workers, where this process compiled candidates
    workers = sorted(pool._executor._processes) if pool is not None else []
    config = axpy.best_config.all_kwargs()
    print(json.dumps({
        "decisions": decisions, "benchmarks": benchmarks, "path": str(axpy.cache_path()),
        "config": config, "workers": workers,
    }))
    """
)


def gpu_env(storage: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEJAVU_STORAGE"] = str(storage)
    return env


def start(script: Path, go: Path, env: dict[str, str], sizes: list[int]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(script), str(go), *map(str, sizes)], stdout=subprocess.PIPE, text=True, env=env
    )


def result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0
    return json.loads(out.strip().splitlines()[-1])


def test_processes_on_one_gpu_share_one_storage_and_a_later_one_restores(tmp_path):
    script = tmp_path / "axpy.py"
    script.write_text(SCRIPT)
    storage = tmp_path / "storage"
    env = gpu_env(storage)
    go = tmp_path / "go"
    groups = [[1 << 16, 1 << 17], [1 << 18, 1 << 19], [1 << 20, 3000]]
    procs = [start(script, go, env, sizes) for sizes in groups]
    go.touch()
    results = [result(p) for p in procs]
    assert all(r["decisions"] == ["tuned", "tuned"] for r in results)
    [path] = {r["path"] for r in results}
    assert "gpu_interpreter" not in path and ("/cuda_" in path or "/rocm_" in path)
    later = result(start(script, go, env, [n for sizes in groups for n in sizes]))
    assert set(later["decisions"]) == {"restored"} and later["benchmarks"] == 0

    listed = subprocess.run(
        [sys.executable, "-m", "triton_dejavu_like", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)["files"]
    assert row["keys"] == 6 and row["identity"]["kernel"] == "axpy"
    shown = subprocess.run(
        [sys.executable, "-m", "triton_dejavu_like", "show", "axpy"], capture_output=True, text=True, env=env
    )
    assert shown.returncode == 0 and shown.stdout.count("  key (") == 6, shown.stdout + shown.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="forked compile workers are the Linux default")
def test_processes_that_miss_one_key_at_once_tune_it_once_with_compile_workers(tmp_path):
    # a serving deployment's processes start together: per key one of them compiles (in its own
    # worker processes) and times the candidates, the others wait and restore its pick; two keys
    # are tuned at once by two processes, each with its own workers, and no worker outlives them
    script = tmp_path / "axpy.py"
    script.write_text(SCRIPT)
    env = gpu_env(tmp_path / "storage")
    env["AXPY_BLOCKS"] = "128,256,512,1024,2048,4096"  # 12 candidates: compiled by forked workers
    go = tmp_path / "go"
    sizes = [1 << 20] * 3 + [3 << 18] * 2
    procs = [start(script, go, env, [n]) for n in sizes]
    go.touch()
    results = [result(p) for p in procs]
    for group in (results[:3], results[3:]):
        assert sorted(r["decisions"][0] for r in group) == ["restored"] * (len(group) - 1) + ["tuned"]
        [tuner] = [r for r in group if r["decisions"] == ["tuned"]]
        assert tuner["benchmarks"] >= 12 and tuner["workers"]  # it timed every config, compiled by workers
        assert all(r["benchmarks"] == 0 for r in group if r is not tuner)
        assert len({json.dumps(r["config"], sort_keys=True) for r in group}) == 1
    assert all_exit(pid for r in results for pid in r["workers"])

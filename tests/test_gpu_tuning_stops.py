"""On a GPU, an error that does not depend on the candidate ends tuning at the first one.

The scenario runs as a script in a subprocess (the test process runs Triton's interpreter), with
16 candidates: enough for compile worker processes, which compile ahead while the tuning process
times. A broken tuner ``pre_hook`` (under the GPU timer of ours), a ``do_bench`` that raises an
error of its own, and a broken hook in an isolated worker (forkserver: it imports the script to
find the kernel) each run once; the error raised is the typed one; the isolated worker is gone, and
the compile workers tune the next kernel, are shut down once idle, and a later run forks new ones.
A grid function that raises (a typo: ``META["BLOCK_SIZE"]``) likewise ends tuning at the first
candidate, in process and isolated.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from process_helpers import run_script

pytestmark = pytest.mark.gpu

SCENARIO = textwrap.dedent(
    """
    import json
    import multiprocessing
    import os
    import time

    import torch
    import triton
    import triton.language as tl

    import triton_dejavu_like as tdl
    from triton_dejavu_like.measure import compile_pool

    CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 512, 1024, 2048) for w in (1, 2, 4, 8)]
    LOG = os.environ["TDL_TEST_STOP_LOG"]  # what ran where: one line per call of the functions below


    def logged(what):
        with open(LOG, "a") as f:
            f.write(f"{what} {os.getpid()}\\n")


    def broken_pre_hook(nargs, reset_only=False):
        logged("pre_hook")
        raise KeyError("workspace")


    def own_error_bench(kernel_call, quantiles):
        logged("do_bench")
        kernel_call()
        raise TypeError("bad quantiles")


    def typo_grid(n):  # reads META["BLOCK_SIZE"] where the configs set BLOCK: a KeyError
        def grid(meta):
            logged("grid")
            return (triton.cdiv(n, meta["BLOCK_SIZE"]),)

        return grid


    @triton.jit
    def body(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


    @tdl.autotune(key=["n"], configs=CONFIGS, pre_hook=broken_pre_hook, use_isolated_process=True)
    @triton.jit
    def isolated(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


    @tdl.autotune(key=["n"], configs=CONFIGS, use_isolated_process=True)
    @triton.jit
    def isolated_grid(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


    def launch(kernel, n, grid=None):
        x = torch.randn(n, device="cuda")
        out = torch.zeros_like(x)
        kernel[grid or (lambda meta: (triton.cdiv(n, meta["BLOCK"]),))](x, out, n)
        return bool(torch.equal(out, x * 2))


    def attempt(kernel, n, grid=None):
        open(LOG, "w").close()
        try:
            launch(kernel, n, grid)
            raised = None
        except Exception as exc:
            classes = [c.__name__ for c in (KeyError, TypeError, tdl.AutotuningError) if isinstance(exc, c)]
            raised = {"classes": classes, "stopped_by": getattr(exc, "stopped_by", None), "message": str(exc)}
        with open(LOG) as f:
            calls = [line.split() for line in f]
        here = [int(pid) == os.getpid() for _, pid in calls]
        return {"raised": raised, "calls": [what for what, _ in calls], "here": here}


    if __name__ == "__main__":
        n = 1 << 20
        report = {"isolated": attempt(isolated, n)}
        report["children_after_isolated"] = len(multiprocessing.active_children())
        for name, function in (("pre_hook", broken_pre_hook), ("do_bench", own_error_bench)):
            report[name] = attempt(tdl.autotune(key=["n"], configs=CONFIGS, **{name: function})(body), n)
        report["grid"] = attempt(tdl.autotune(key=["n"], configs=CONFIGS)(body), n, typo_grid(n))
        report["grid_isolated"] = attempt(isolated_grid, n, typo_grid(n))
        # the compile workers that the runs in process started stay, to serve later runs
        children = multiprocessing.active_children()
        report["isolation_workers_after_grid"] = sum(p.name == "triton-dejavu-like-worker" for p in children)
        compile_pool.IDLE_RELEASE_S = 1.0  # from the end of the next run on
        working = tdl.autotune(key=["n"], configs=CONFIGS)(body)
        report["next_ok"] = launch(working, n) and working.last_decision == "tuned"
        pool = compile_pool.CompilePool._instance
        before = set(pool._executor._processes) if pool is not None else set()
        time.sleep(3.0)  # idle: the pool is shut down, and a later run forks new workers
        report["workers_before_idle"] = len(before)
        report["idle_shut_down"] = compile_pool.CompilePool._instance is None
        again = tdl.autotune(key=["n"], configs=CONFIGS)(body)
        report["after_idle_ok"] = launch(again, n // 2) and again.last_decision == "tuned"  # a new key
        pool = compile_pool.CompilePool._instance
        report["fresh_workers"] = pool is not None and not before & set(pool._executor._processes)
        print(json.dumps(report))
    """
)


def test_an_error_no_candidate_escapes_ends_tuning_on_the_gpu(tmp_path):
    report = run_script(tmp_path, "gpu_stop_scenario.py", SCENARIO, TDL_TEST_STOP_LOG=str(tmp_path / "log"))
    print(json.dumps(report, indent=1))  # for the record (pytest -s)
    cases = {"isolated": "pre_hook", "pre_hook": "pre_hook", "do_bench": "do_bench", "grid": "grid"}
    cases["grid_isolated"] = "grid"
    for case, stopped_by in cases.items():
        result = report[case]
        error = "TypeError" if case == "do_bench" else "KeyError"
        assert result["raised"]["classes"] == [error, "AutotuningError"], case
        assert result["raised"]["stopped_by"] == stopped_by
        assert "tuning stopped at the first candidate" in result["raised"]["message"]
        assert len(result["calls"]) == 1, case  # not one call per candidate
    assert report["isolated"]["here"] == [False] and report["pre_hook"]["here"] == [True]
    assert report["children_after_isolated"] == 0
    # the grid function is called in this process: in the launch, or (isolated, forkserver) to send
    # the candidate's grid to the worker, which never starts
    assert report["grid"]["here"] == [True] and report["grid_isolated"]["here"] == [True]
    assert report["isolation_workers_after_grid"] == 0
    assert report["next_ok"]
    assert report["workers_before_idle"] > 0 and report["idle_shut_down"]
    assert report["after_idle_ok"] and report["fresh_workers"]

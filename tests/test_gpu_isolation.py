"""Isolated tuning on a GPU: candidates that fault, hang or compute wrong values are ruled out.

The scenario runs as a script in a subprocess (the test process runs Triton's interpreter). Its
kernel is a module-level global of that script, so forkserver workers import it as ``__main__``.
Among the candidates, one stores without a mask far past the end of its buffer (an illegal memory
access, which leaves the worker's CUDA context unusable), one waits forever on a flag, and one tiles
its block so that part of it is never written. Tuning must finish with a valid config, the caller's
CUDA context must still work, and the stored entry must give each bad candidate its reason.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from process_helpers import run_script

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 20


SCENARIO = textwrap.dedent(
    """
    import json
    import sys
    import time

    import torch
    import triton
    import triton.language as tl

    import triton_dejavu_like as tdl
    from triton_dejavu_like.measure.isolation import IsolationError

    FAR = tl.constexpr(1 << 40)  # elements past the end of the buffer: no allocation reaches that far


    def config(block, tile, bug=0, warps=4):
        return triton.Config({"BLOCK": block, "TILE": tile, "BUG": bug}, num_warps=warps)


    CONFIGS = [
        config(256, 256),
        config(1024, 1024, warps=8),
        config(4096, 4096, bug=1, warps=8),  # unmasked store far out of bounds
        config(1024, 512),
        config(768, 512),  # 768 // 512 = 1 tile: the last 256 elements of each block are never written
        config(512, 512, bug=2),  # waits forever on a flag nobody sets
        config(2048, 1024, warps=8),
        config(512, 256),
    ]


    @tdl.autotune(
        key=["n"],
        configs=CONFIGS,
        use_isolated_process=True,
        isolation_timeout_s=float(sys.argv[2]),
        numerical_check=True,
        check_outputs=["out_ptr"],
    )
    @triton.jit
    def tiled_copy(x_ptr, out_ptr, flag_ptr, n, BLOCK: tl.constexpr, TILE: tl.constexpr, BUG: tl.constexpr):
        pid = tl.program_id(0)
        if BUG == 2:
            while tl.load(flag_ptr, volatile=True) == 0:
                pass
        for t in tl.static_range(BLOCK // TILE):
            offs = pid * BLOCK + t * TILE + tl.arange(0, TILE)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask)
            if BUG == 1:
                tl.store(out_ptr + offs.to(tl.int64) + FAR, x)
            else:
                tl.store(out_ptr + offs, x, mask=mask)


    def tune(n):
        x = torch.randn(n, device="cuda")
        out = torch.zeros(n, device="cuda")
        flag = torch.zeros(1, dtype=torch.int32, device="cuda")
        start = time.perf_counter()
        tiled_copy[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, flag, n)
        torch.cuda.synchronize()
        return time.perf_counter() - start, bool(torch.equal(out, x))


    def fork_refusal():
        forked = tdl.autotune(
            key=["n"], configs=CONFIGS[:2], use_isolated_process=True, isolation_start_method="fork"
        )
        try:
            forked(tiled_copy.fn)[(1,)](*(torch.zeros(1, device="cuda") for _ in range(3)), 1)
        except IsolationError as exc:
            return str(exc)
        return None


    if __name__ == "__main__":
        first_s, first_ok = tune(int(sys.argv[1]))
        entry = json.loads(tiled_copy.cache_path().read_text())["entries"]
        (first,) = entry.values()
        second_s, second_ok = tune(int(sys.argv[1]) // 2 + 1)  # a second key, tuned by new workers
        y = torch.arange(10, device="cuda", dtype=torch.float32) * 2  # the caller's context works
        print(json.dumps({
            "first_s": first_s,
            "second_s": second_s,
            "results_ok": first_ok and second_ok and bool((y.sum() == 90).item()),
            "best": first["config"]["kwargs"],
            "ruled_out": [[r["config"]["kwargs"], r["reason"]] for r in first["ruled_out"]],
            "fork_refusal": fork_refusal(),
        }))
    """
)


def test_faulting_hanging_and_wrong_candidates_are_ruled_out_on_the_gpu(tmp_path):
    report = run_script(
        tmp_path, "gpu_isolation_scenario.py", SCENARIO, "1000000", str(TIMEOUT_S), timeout=540
    )
    print(json.dumps(report, indent=1))  # the reasons and timings, for the record (pytest -s)
    assert report["results_ok"]
    best = report["best"]
    assert best["BUG"] == 0 and best["BLOCK"] % best["TILE"] == 0
    reasons = {(c["BLOCK"], c["TILE"], c["BUG"]): r for c, r in report["ruled_out"]}
    assert set(reasons) == {(4096, 4096, 1), (512, 512, 2), (768, 512, 0)}
    assert reasons[(4096, 4096, 1)].startswith("CandidateCrashed")
    assert reasons[(512, 512, 2)].startswith(f"CandidateTimedOut: no result within {TIMEOUT_S} s")
    assert reasons[(768, 512, 0)].startswith("NumericalMismatch: 'out_ptr'")
    assert "'fork' cannot be used once CUDA is initialised" in report["fork_refusal"]


COMPILER_CRASH = textwrap.dedent(
    """
    import json, os, resource, subprocess, sys

    import torch
    import triton
    import triton.language as tl

    import triton_dejavu_like as tdl

    CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 512, 1024, 2048) for w in (2, 4, 8)]


    @tdl.autotune(key=["n"], configs=CONFIGS, numerical_check=os.environ["TDL_TEST_CHECK"] == "1")
    @triton.jit
    def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


    def crash_the_compiler(**hook):  # as an LLVM abort on some configs would
        if hook["fn"].name.endswith("scale") and "num_warps=2," in hook["repr"]:
            if os.environ.get("TDL_TEST_HANG") == "1":  # or a ptxas that never returns
                subprocess.run(["sleep", "600"])
            os.abort()


    if __name__ == "__main__":
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        triton.knobs.runtime.jit_cache_hook = crash_the_compiler  # inherited by the forked workers
        n = 1 << 20
        x = torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        scale[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        (entry,) = json.loads(scale.cache_path().read_text())["entries"].values()
        print(json.dumps({
            "ok": bool(torch.equal(out, x * 2)),
            "best": [entry["config"]["kwargs"], entry["config"]["num_warps"]],
            "ruled_out": [[r["config"]["num_warps"], r["reason"]] for r in entry["ruled_out"]],
        }))
    """
)


@pytest.mark.parametrize("compiler", ["crashes", "hangs"])
@pytest.mark.parametrize("check", ["0", "1"], ids=["unchecked", "numerical_check"])
def test_configs_that_crash_the_compiler_are_ruled_out_by_compile_workers(tmp_path, check, compiler):
    # a crash in the compiler ends a compile worker, never the tuning process: the config is ruled
    # out and the others are tuned (before, the tuning process compiled it again, and died). The
    # first config crashes: with the numerical check it is tried as the reference before the search,
    # compiled by a worker first (before, this process compiled it, and died). A compiler that hangs
    # has its workers stopped after TRITON_DEJAVU_COMPILE_TIMEOUT (before, tuning hung with it)
    report = run_script(
        tmp_path,
        "compiler_crash.py",
        COMPILER_CRASH,
        timeout=240,
        TRITON_DEJAVU_COMPILE_PROCESSES="1",
        TRITON_DEJAVU_COMPILE_TIMEOUT="8",
        TDL_TEST_CHECK=check,
        TDL_TEST_HANG="1" if compiler == "hangs" else "0",
    )
    print(json.dumps(report, indent=1))
    assert report["ok"] and report["best"][1] != 2
    assert len(report["ruled_out"]) == 4 and all(w == 2 for w, _ in report["ruled_out"])
    said = "TRITON_DEJAVU_COMPILE_TIMEOUT" if compiler == "hangs" else "compile worker died"
    assert all(said in reason for _, reason in report["ruled_out"]), report


AUTOGRAD_ARGUMENT = textwrap.dedent(
    """
    import json

    import torch
    import triton
    import triton.language as tl

    import triton_dejavu_like as tdl


    @tdl.autotune(
        key=["n"],
        configs=[triton.Config({"BLOCK": b}) for b in (256, 1024)],
        use_isolated_process=True,
        numerical_check=True,
        check_outputs=["out_ptr"],
    )
    @triton.jit
    def double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


    if __name__ == "__main__":
        n = 4096
        weight = torch.nn.Parameter(torch.randn(n, device="cuda"))
        x = weight * 3  # inside a model's forward: tracked by autograd, not a leaf
        out = torch.empty(n, device="cuda")
        double[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        x.sum().backward()  # autograd still works on what was sent
        print(json.dumps({
            "ok": bool(torch.equal(out, x.detach() * 2)),
            "grad_ok": bool(torch.equal(weight.grad, torch.full_like(weight, 3.0))),
            "decision": double.last_decision,
        }))
    """
)


def test_an_argument_that_autograd_tracks_is_sent_to_an_isolated_worker(tmp_path):
    # torch refuses to send a tensor that requires grad and is not a leaf: the worker needs its
    # memory only, so it gets the tensor detached
    report = run_script(tmp_path, "autograd_argument.py", AUTOGRAD_ARGUMENT)
    assert report == {"ok": True, "grad_ok": True, "decision": "tuned"}

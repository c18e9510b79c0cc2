"""On a GPU, a key missed while a CUDA graph is captured does not break the capture.

Timing a candidate synchronises the device, which ends a capture with an error (upstream's
autotuner fails there). The scenario runs as a script in a subprocess (the test process runs
Triton's interpreter): one key is tuned before capturing; inside ``torch.cuda.graph`` a launch with
another key is answered by the nearest tuned key without timing anything, the capture completes,
and the replayed graph computes the right result. After the capture, a new key is tuned as usual.
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
    import warnings

    import torch
    import triton
    import triton.language as tl

    import triton_dejavu_like as tdl

    timed = []


    def counting_bench(kernel_call, quantiles):
        timed.append(1)
        return triton.testing.do_bench(kernel_call, warmup=2, rep=5, quantiles=quantiles)


    @tdl.autotune(
        key=["n"],
        configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 1024) for w in (2, 4)],
        do_bench=counting_bench,
    )
    @triton.jit
    def axpy(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, 2 * x + tl.load(y_ptr + offs, mask=mask), mask=mask)


    def launch(x, y, out, n):
        axpy[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)


    x = torch.randn(1 << 16, device="cuda")
    y = torch.randn_like(x)
    out = torch.zeros_like(x)
    launch(x, y, out, 1 << 15)  # tuned before capturing
    torch.cuda.synchronize()
    tuned_config, timed_before = str(axpy.best_config), len(timed)

    graph = torch.cuda.CUDAGraph()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.cuda.graph(graph):
            launch(x, y, out, 1 << 16)  # a miss: no timing may run here
    said = [str(w.message) for w in caught if issubclass(w.category, tdl.DejavuWarning)]
    during = {"decision": axpy.last_decision, "config": str(axpy.best_config)}
    during["timed"] = len(timed) - timed_before
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    replay_ok = bool(torch.allclose(out, 2 * x + y))

    launch(x[:1000], y[:1000], out[:1000], 1000)  # after the capture: tuned as usual
    after = {"decision": axpy.last_decision, "timed": len(timed) - timed_before - during["timed"]}
    print(json.dumps({"tuned_config": tuned_config, "during": during, "said": said, "replay_ok": replay_ok,
                      "after": after, "misses": {k: len(v) for k, v in tdl.misses().items()}}))
    """
)


def test_a_miss_during_cuda_graph_capture_is_answered_without_breaking_the_capture(tmp_path):
    report = run_script(tmp_path, "gpu_graph_scenario.py", SCENARIO)
    print(json.dumps(report, indent=1))  # for the record (pytest -s)
    assert report["during"] == {"decision": "nearest", "config": report["tuned_config"], "timed": 0}
    assert report["replay_ok"]
    assert len(report["said"]) == 1 and "a CUDA graph is being captured" in report["said"][0]
    assert report["after"]["decision"] == "tuned" and report["after"]["timed"] > 0
    assert report["misses"] == {"__main__.axpy": 1}  # by module.qualname, as warnings name kernels

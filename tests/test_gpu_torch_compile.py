"""On a GPU, an autotuned kernel inside a ``torch.compile``-d function (docs/compat.md).

Inductor compiles a user-defined autotuned kernel into code of its own, with the kernel's config
list and its own autotuner: this package's decisions are neither used nor stored for that call.
Wrapped in a ``torch.library.custom_op``, the launch stays opaque to the compiler and runs this
package's tuner: a second process restores the key tuned eagerly by the first, with no benchmark.
"""

from __future__ import annotations

import textwrap

import pytest
from process_helpers import run_script

pytestmark = pytest.mark.gpu

SCENARIO = textwrap.dedent(
    """
    import json
    import sys

    import torch
    import triton
    from gpu_kernels import double

    import triton_dejavu_like as tdl
    from triton_dejavu_like.tuner.report import observe_decisions

    CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 1024, 4096) for w in (2, 4, 8)]
    timed = []


    def counting_bench(kernel_call, quantiles):
        timed.append(1)
        return triton.testing.do_bench(kernel_call, warmup=2, rep=5, quantiles=quantiles)


    twice = tdl.autotune(key=["n"], configs=CONFIGS, do_bench=counting_bench)(double)


    def launch(x):
        out = torch.empty_like(x)
        n = x.numel()
        twice[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        return out


    @torch.library.custom_op("tdl_test::twice", mutates_args=())
    def twice_op(x: torch.Tensor) -> torch.Tensor:
        return launch(x)


    @twice_op.register_fake
    def _(x):
        return torch.empty_like(x)


    def run(function, x):
        with observe_decisions() as seen:
            y = function(x)
            torch.cuda.synchronize()
        right = bool(torch.equal(y, x * 2 + 1))
        return {"sources": [d.source for d in seen], "right": right, "timed": len(timed)}


    x = torch.randn(1 << 20, device="cuda")
    if sys.argv[1] == "eager":
        report = {"eager": run(lambda t: launch(t) + 1, x)}
    else:
        report = {"opaque": run(torch.compile(lambda t: twice_op(t) + 1), x)}
        report["inlined"] = run(torch.compile(lambda t: launch(t) + 1), x)
    print(json.dumps(report))
    """
)


def test_a_custom_op_keeps_the_stored_decision_under_torch_compile(tmp_path):
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    eager = run_script(tmp_path, "compile_scenario.py", SCENARIO, "eager", **env)["eager"]
    assert eager["sources"] == ["tuned"] and eager["right"] and eager["timed"] == 9  # every config timed once
    report = run_script(tmp_path, "compile_scenario.py", SCENARIO, "compiled", **env)
    print(report)  # for the record (pytest -s)
    assert report["opaque"] == {"sources": ["restored"], "right": True, "timed": 0}
    # compiled into inductor's code: the call never reaches this package's tuner
    assert report["inlined"]["sources"] == [] and report["inlined"]["right"]
    assert report["inlined"]["timed"] == 0

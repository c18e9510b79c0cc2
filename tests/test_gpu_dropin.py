"""On a GPU, patterns of real kernel libraries that the interpreter cannot show.

- A ``@triton.heuristics`` under the tuner that reads ``num_warps`` (AMD's gluon kernels): the
  winner must be launched with every option, also those equal to the backend's defaults (the
  interpreter's launches always pass them).
- An ``early_config_prune`` that changes the listed configs in place (Triton 2.x's matmul sets
  ``num_stages``): a second process restores the winner with no benchmark.
"""

from __future__ import annotations

import textwrap

import pytest
from process_helpers import run_script

pytestmark = pytest.mark.gpu

SCENARIO = textwrap.dedent(
    """
    import json

    import torch
    import triton
    import triton.language as tl

    import triton_dejavu_like as tdl
    from triton_dejavu_like import _compat

    defaults = _compat.launch_option_defaults(tdl.store.identity.detect_platform(False).backend)
    timed = []


    def counting_bench(kernel_call, quantiles):
        timed.append(1)
        return triton.testing.do_bench(kernel_call, warmup=2, rep=5, quantiles=quantiles)


    def in_place(configs, nargs, **kwargs):
        for config in configs:
            config.num_stages = defaults["num_stages"]
        return configs


    warps = (2, defaults["num_warps"])


    @tdl.autotune(
        key=["n"],
        configs=[triton.Config({"BLOCK": b}, num_warps=w, num_stages=1) for b in (256, 1024) for w in warps],
        prune_configs_by={"early_config_prune": in_place},
        do_bench=counting_bench,
    )
    @triton.heuristics({"WARPS": lambda nargs: nargs["num_warps"]})
    @triton.jit
    def scaled(x_ptr, out_ptr, n, BLOCK: tl.constexpr, WARPS: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * WARPS, mask=mask)


    n = 1 << 16
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    ok = []
    for _ in range(2):  # tuned (or restored), then the launch table
        scaled[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        torch.cuda.synchronize()
        ok.append(bool(torch.equal(out, x * scaled.best_config.num_warps)))
    print(json.dumps({"decision": scaled.last_decision, "timed": len(timed), "ok": ok,
                      "config": str(scaled.best_config)}))
    """
)


def test_a_heuristic_reading_num_warps_and_an_in_place_prune_tune_then_restore(tmp_path):
    first = run_script(tmp_path, "gpu_dropin_scenario.py", SCENARIO)
    second = run_script(tmp_path, "gpu_dropin_scenario.py", SCENARIO)
    print(first, second)  # for the record (pytest -s)
    assert first["ok"] == [True, True] and first["timed"] >= 4
    assert second == {**first, "decision": "restored", "timed": 0}

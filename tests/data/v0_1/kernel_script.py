"""Tunes (or restores) a small kernel and prints what happened as JSON; its cache file beside it was
written by release 0.1 from this very script, so a later release must restore from it unchanged."""

import json
import os

os.environ["TRITON_INTERPRET"] = "1"

import torch
import triton
import triton.language as tl

import triton_dejavu_like as tdl

CALLS = []


def bench(kernel_call, quantiles=(0.5, 0.2, 0.8)):
    kernel_call()  # runs the config's pre_hook, which records its BLOCK
    CALLS.append(bench.block)
    return [float(bench.block) / 16, float(bench.block) / 17, float(bench.block) / 15]


def observe(nargs):
    bench.block = nargs["BLOCK"]


@tdl.autotune(
    key=["n"],
    configs=[triton.Config({"BLOCK": b}, num_warps=w, pre_hook=observe) for b in (16, 32) for w in (2, 4)],
    do_bench=bench,
)
@triton.jit
def v01_scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


decisions = []
for n in (64, 100):
    x = torch.arange(n, dtype=torch.float32)
    out = torch.empty_like(x)
    v01_scale[lambda meta, n=n: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    assert torch.equal(out, x * 2)
    decisions.append(v01_scale.last_decision)
print(json.dumps({"path": str(v01_scale.cache_path()), "decisions": decisions, "benchmarks": len(CALLS)}))

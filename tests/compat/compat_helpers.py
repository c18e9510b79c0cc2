"""Shared pieces of the compatibility suite: the Triton version, the two decorators, kernels, and a
deterministic benchmark that knows which config it times (through a per-config ``pre_hook``, so the
autotuner-level ``pre_hook`` stays free for the hook and reset/restore scenarios)."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from triton_release import TRITON

import triton_dejavu_like as tdl


def both(since: tuple[int, int] = (3, 3), why: str = "") -> list[Any]:
    """``[triton.autotune, triton_dejavu_like.autotune]`` as pytest params; upstream skipped where
    it cannot run under the interpreter, or where the behaviour under test appeared later."""
    reason = why or "upstream cannot run under the interpreter without do_bench (Triton 3.2)"
    skip = max(since, (3, 3)) > TRITON  # the installed release is older
    return [
        pytest.param(triton.autotune, id="upstream", marks=pytest.mark.skipif(skip, reason=reason)),
        pytest.param(tdl.autotune, id="ours"),
    ]


def is_ours(autotune: Callable[..., Any]) -> bool:
    return autotune is tdl.autotune


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def accumulate_kernel(acc_ptr, x_ptr, n, BLOCK: tl.constexpr):
    """acc += x, in place: benchmarking it repeatedly needs reset_to_zero or restore_value."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(acc_ptr + offs, mask=mask)
    tl.store(acc_ptr + offs, acc + tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def scaled_add_kernel(x_ptr, y_ptr, out_ptr, n, ALPHA: tl.constexpr, BLOCK: tl.constexpr):
    """out = (x + y) * ALPHA: ALPHA comes from ``@triton.heuristics`` in the stacking scenarios."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, (x + y) * ALPHA, mask=mask)


BLOCKS = (16, 32, 64, 128)
#: The default timings: BLOCK 32 is fastest, then 64, 128, 16.
TIMES = {16: 5.0, 32: 2.0, 64: 3.0, 128: 4.0}


class Bench:
    """A deterministic ``do_bench(kernel_call, quantiles)``: runs the call once (hooks and errors
    happen as in a real benchmark), then answers ``times[BLOCK]`` for the config being timed. The
    config is known because every config from :meth:`configs` has a ``pre_hook`` that reports its
    ``BLOCK`` here (a config's pre_hook runs first in every benchmark launch)."""

    def __init__(self, times: dict[int, float] | None = None, scalar: bool = False) -> None:
        self.times = dict(TIMES if times is None else times)
        self.scalar = scalar
        self.current: int | None = None
        self.timed: list[int] = []
        self.quantiles: list[Any] = []
        self.launched: list[int] = []  # every config pre_hook call, benchmark or not

    def config_hook(self, nargs: dict[str, Any]) -> None:
        self.current = nargs["BLOCK"]
        self.launched.append(nargs["BLOCK"])

    def configs(self, blocks: Sequence[int] = BLOCKS) -> list[triton.Config]:
        return [triton.Config({"BLOCK": b}, num_warps=1, pre_hook=self.config_hook) for b in blocks]

    def __call__(self, kernel_call: Callable[[], Any], quantiles: Any = None, **_: Any) -> Any:
        self.current = None
        self.quantiles.append(quantiles)
        kernel_call()
        assert self.current is not None, "the benchmark launch did not run the config's pre_hook"
        self.timed.append(self.current)
        t = self.times[self.current]
        if self.scalar:
            return t
        n = len(quantiles) if quantiles else 3
        return [t * (1 + 0.1 * i) for i in range(n)]


def grid(n: int) -> Callable[[dict[str, Any]], tuple[int]]:
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


def add_inputs(n: int = 100) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.arange(n, dtype=torch.float32), torch.ones(n, dtype=torch.float32), torch.empty(n)


def run_add(tuner: Any, n: int = 100) -> torch.Tensor:
    x, y, out = add_inputs(n)
    tuner[grid(n)](x, y, out, n)
    assert torch.equal(out, x + y), "wrong result"
    return out


def key_for(n: int, tensors: int = 3) -> tuple[Any, ...]:
    """The tuning key upstream builds for ``add_kernel(x, y, out, n)`` with key ``["n"]``."""
    return (n, *(["torch.float32"] * tensors))


def blocks_of(configs: Any) -> list[int]:
    return sorted(c.kwargs["BLOCK"] for c in configs)

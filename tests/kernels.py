"""Small kernels and a deterministic benchmark shared by the CPU tests (run under the interpreter)."""

from __future__ import annotations

import os
import threading

os.environ.setdefault("TRITON_INTERPRET", "1")

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

import triton_dejavu_like as tdl

SCALE: tl.constexpr = tl.constexpr(1)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, (x + y) * SCALE, mask=mask)


@triton.jit
def accumulate_kernel(acc_ptr, x_ptr, n, BLOCK: tl.constexpr):
    """acc += x: an in-place kernel, so benchmarking needs reset_to_zero / restore_value."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(acc_ptr + offs, mask=mask)
    tl.store(acc_ptr + offs, acc + tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha, mask=mask)


#: double_or_not_kernel's MODE: right, wrong, or writing nothing.
RIGHT, WRONG, SKIP = 0, 1, 2


@triton.jit
def double_or_not_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, MODE: tl.constexpr):
    """out = 2 * x (MODE RIGHT), a wrong 3 * x (WRONG), or nothing written (SKIP)."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if MODE != 2:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * (2 + MODE), mask=mask)


@triton.jit
def noop_kernel(a_ptr, b_ptr, n, m, alpha, flag: tl.constexpr = 0, BLOCK: tl.constexpr = 16):
    pass


def block_configs(blocks=(16, 32, 64, 128), warps=(1,)) -> list[triton.Config]:
    return [triton.Config({"BLOCK": b}, num_warps=w) for b in blocks for w in warps]


def grid(n: int) -> Callable[[dict[str, Any]], tuple[int]]:
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


class FakeBench:
    """A deterministic ``do_bench``: runs the call once (so hooks and errors happen), then answers a
    time that depends only on the config, read from the kernel's launch through a pre-hook-free path:
    the time is ``times[BLOCK]`` (default: 1000 / BLOCK, so the largest block wins)."""

    def __init__(self, times: dict[int, float] | None = None) -> None:
        self.times = times
        self.calls = 0
        self.blocks: list[int] = []
        self.current_block: int | None = None

    def __call__(self, kernel_call: Callable[[], Any], quantiles=(0.5, 0.2, 0.8)) -> list[float]:
        self.calls += 1
        kernel_call()
        block = self.current_block
        self.blocks.append(block)
        t = (self.times or {}).get(block, 1000.0 / block if block else 1.0)
        return [t, t * 0.9, t * 1.1]


def observe_block(bench: FakeBench) -> Callable[..., None]:
    """A per-config pre_hook factory is not needed: the tuner's pre_hook sees the full arguments."""

    def pre_hook(nargs: dict[str, Any], reset_only: bool = False) -> None:
        if not reset_only:
            bench.current_block = nargs.get("BLOCK")

    return pre_hook


def tuned_add(bench: FakeBench | None = None, **options: Any) -> tdl.Autotuner:
    """A fresh autotuner around ``add_kernel`` with a FakeBench wired in (unless options override)."""
    options.setdefault("key", ["n"])
    if "configs" not in options and "config_space" not in options:
        options["configs"] = block_configs()
    if bench is not None:
        options.setdefault("do_bench", bench)
        options.setdefault("pre_hook", observe_block(bench))
    return tdl.autotune(**options)(add_kernel)


def run_add(tuner: tdl.Autotuner, n: int = 100, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    x = torch.arange(n, dtype=dtype)
    y = torch.ones(n, dtype=dtype)
    out = torch.empty(n, dtype=dtype)
    tuner[grid(n)](x, y, out, n)
    assert torch.equal(out, x + y), "wrong result"
    return out


class Refused(Exception):
    """A candidate's error that does not pickle: its constructor takes other arguments than it
    passes on, and it holds a lock."""

    def __init__(self, required: int, limit: int) -> None:
        super().__init__(f"needs {required} bytes, has {limit}")
        self.required, self.limit = required, limit
        self.lock = threading.Lock()


def refused(nargs: dict[str, Any]) -> None:
    """A config pre_hook: the candidate fails with :class:`Refused` (required: 1000 per BLOCK)."""
    raise Refused(nargs["BLOCK"] * 1000, 1000)

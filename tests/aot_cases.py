"""A SPEC for the ``tune`` tests: an add kernel over six sizes whose best block depends on the size
(a deterministic do_bench), a case that kills its process while $TDL_TEST_CRASH_MARKER exists, and
a case list that Ray workers cannot load while that path with ``.hang`` or ``.fail`` appended exists."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from kernels import add_kernel, block_configs, run_add

import triton_dejavu_like as tdl

SIZES = (16, 40, 100, 200, 500, 1000)


def best_block(n: int) -> int:
    return 16 if n < 64 else 32 if n < 300 else 128


class SizeBench:
    """Time = distance of the config's BLOCK from the best block for the call's n."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    def pre_hook(self, nargs: dict[str, Any], reset_only: bool = False) -> None:
        if not reset_only:
            self.seen = dict(nargs)

    def __call__(self, kernel_call, quantiles=(0.5, 0.2, 0.8)):
        kernel_call()
        t = 1.0 + abs(self.seen["BLOCK"] - best_block(self.seen["n"]))
        return [t, t, t]


BENCH = SizeBench()
ADD = tdl.autotune(key=["n"], configs=block_configs(), do_bench=BENCH, pre_hook=BENCH.pre_hook)(add_kernel)


def add(n: int) -> None:
    run_add(ADD, n)


def crash() -> None:
    marker = os.environ.get("TDL_TEST_CRASH_MARKER")
    if marker and Path(marker).exists():
        os._exit(3)
    run_add(ADD, 3000)


def cases() -> list[tdl.TuneCase]:
    return [tdl.TuneCase(f"add-{n}", add, (n,)) for n in SIZES]


def cases_with_crash() -> list[tdl.TuneCase]:
    return [*cases()[:3], tdl.TuneCase("crash", crash), *cases()[3:]]


def cases_workers_cannot_load() -> list[tdl.TuneCase]:
    """The cases; in any process but $TDL_TEST_DRIVER_PID (the test's), loading them never ends
    while the marker's ``.hang`` file exists, and raises while its ``.fail`` file exists."""
    marker = os.environ.get("TDL_TEST_CRASH_MARKER", "")
    if marker and str(os.getpid()) != os.environ.get("TDL_TEST_DRIVER_PID"):
        if Path(marker + ".fail").exists():
            raise RuntimeError("this SPEC cannot be loaded here")
        while Path(marker + ".hang").exists():
            time.sleep(0.2)
    return cases()

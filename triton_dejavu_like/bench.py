"""Benchmarkers: the user's ``do_bench``, Triton's GPU timers, or a CPU timer for the interpreter.

A benchmarker takes a zero-argument ``kernel_call`` and the quantiles to report, and returns their
times in milliseconds (upstream's ``do_bench`` contract).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import _compat

#: Upstream's quantiles: median, 20th and 80th percentile.
QUANTILES: tuple[float, float, float] = (0.5, 0.2, 0.8)

DoBench = Callable[..., Any]
Benchmarker = Callable[[Callable[[], Any], Sequence[float]], list[float]]


def quantiles_of(samples: Sequence[float], quantiles: Sequence[float]) -> list[float]:
    """Linear-interpolated quantiles, as ``torch.quantile`` computes them."""
    ordered = sorted(samples)
    n = len(ordered)
    out = []
    for q in quantiles:
        pos = q * (n - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, n - 1)
        out.append(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))
    return out


def cpu_do_bench(
    kernel_call: Callable[[], Any],
    quantiles: Sequence[float] = QUANTILES,
    *,
    warmup: float | None = None,
    rep: float | None = None,
    min_runs: int = 3,
    max_runs: int = 100,
) -> list[float]:
    """Wall-clock timing on the CPU (for ``TRITON_INTERPRET=1``): ``warmup``/``rep`` are milliseconds.

    One untimed call (more while ``warmup`` ms last), then timed calls until ``rep`` ms have passed,
    at least ``min_runs`` and at most ``max_runs`` of them.
    """
    warmup_ms = 0.0 if warmup is None else float(warmup)
    rep_ms = 20.0 if rep is None else float(rep)
    start = time.perf_counter()
    kernel_call()
    while (time.perf_counter() - start) * 1e3 < warmup_ms:
        kernel_call()
    samples: list[float] = []
    spent = 0.0
    while len(samples) < max_runs and (len(samples) < min_runs or spent < rep_ms):
        t0 = time.perf_counter()
        kernel_call()
        elapsed = (time.perf_counter() - t0) * 1e3
        samples.append(elapsed)
        spent += elapsed
    return quantiles_of(samples, quantiles)


def normalise(result: Any, n: int) -> list[float]:
    """A do_bench result as ``n`` floats: a single number is repeated, a sequence is taken as is."""
    if isinstance(result, (int, float)):
        return [float(result)] * n
    values = [float(v) for v in result]
    if not values:
        raise ValueError("do_bench returned no timings")
    if len(values) < n:
        values += [values[0]] * (n - len(values))
    return values[:n]


def make_benchmarker(
    *,
    do_bench: DoBench | None,
    warmup: float | None,
    rep: float | None,
    use_cuda_graph: bool,
    interpreted: bool,
) -> Benchmarker:
    """The benchmarker a tuner uses. A user-given ``do_bench`` is always honoured, GPU or CPU."""
    if do_bench is not None:

        def user(kernel_call: Callable[[], Any], quantiles: Sequence[float]) -> list[float]:
            return normalise(do_bench(kernel_call, quantiles=tuple(quantiles)), len(quantiles))

        return user
    if interpreted:

        def cpu(kernel_call: Callable[[], Any], quantiles: Sequence[float]) -> list[float]:
            return cpu_do_bench(kernel_call, quantiles, warmup=warmup, rep=rep)

        return cpu
    if use_cuda_graph:

        def graph(kernel_call: Callable[[], Any], quantiles: Sequence[float]) -> list[float]:
            bench = _compat.gpu_do_bench_cudagraph()
            result = bench(kernel_call, rep=rep if rep is not None else 100, quantiles=list(quantiles))
            return normalise(result, len(quantiles))

        return graph

    def gpu(kernel_call: Callable[[], Any], quantiles: Sequence[float]) -> list[float]:
        bench = _compat.gpu_do_bench()
        result = bench(
            kernel_call,
            warmup=warmup if warmup is not None else 25,
            rep=rep if rep is not None else 100,
            quantiles=list(quantiles),
        )
        return normalise(result, len(quantiles))

    return gpu

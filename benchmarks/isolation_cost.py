"""What isolation costs: the same kernel and configs tuned in process and in worker processes.

Every measurement runs in a fresh process with empty storage, so that it tunes; the only
difference between the two modes is ``TRITON_DEJAVU_USE_ISOLATED_PROCESS``. With a cold Triton
cache, compiling dominates both; with a warm one (every candidate already compiled), what remains
is timing, and for isolation the worker start and one round trip per candidate.

    python benchmarks/isolation_cost.py [--size 4096] [--rounds 3] [--json out.json]
    TRITON_INTERPRET=1 python benchmarks/isolation_cost.py --size 48 --rounds 1   # CPU smoke run

``--round-trip fork forkserver`` measures instead what isolation adds per candidate, alone: a
worker's start and the round trip of one request, with a ``do_bench`` that does not launch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

import triton_dejavu_like as tdl

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
DEVICE = "cpu" if INTERPRETED else "cuda"
DTYPE = torch.float32 if INTERPRETED else torch.float16
if INTERPRETED:  # the interpreter ignores warps and stages: keep the smoke run short
    CONFIGS = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": 16}) for m in (16, 32) for n in (16, 32)]
else:  # 48 candidates, all of which fit in an H100's shared memory
    CONFIGS = [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=s)
        for m in (64, 128)
        for n in (64, 128)
        for k in (32, 64)
        for w in (4, 8)
        for s in (2, 3, 4)
    ]


@tdl.autotune(key=["M", "N", "K"], configs=CONFIGS)
@triton.jit
def block_matmul(
    a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr
):
    """C = A @ B for contiguous row-major matrices, one output tile per program."""
    tiles_n = tl.cdiv(N, BLOCK_N)
    rm = (tl.program_id(0) // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    rn = (tl.program_id(0) % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        rk = k + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm * K + rk[None, :], mask=(rm < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn, mask=(rk[:, None] < K) & (rn < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm * N + rn, acc.to(c_ptr.dtype.element_ty), mask=(rm < M) & (rn < N))


def no_launch(kernel_call, quantiles):
    return [1.0, 1.0, 1.0]


@tdl.autotune(
    key=["n"],
    configs=[triton.Config({"BLOCK": 16 * 2**i}, num_warps=w) for i in range(8) for w in (1, 2, 4, 8)],
    do_bench=no_launch,
)
@triton.jit
def untimed(x_ptr, n, BLOCK: tl.constexpr):
    pass


def round_trip(method: str) -> str:
    """Start a worker with ``method`` and send it one request per candidate of ``untimed``."""
    from triton_dejavu_like.measure.isolation import IsolatedEvaluator, IsolationSettings

    x = torch.zeros(1 << 20, device=DEVICE)
    recipe = dataclasses.replace(untimed.kernel_recipe(), isolation=IsolationSettings(True, 60, method))
    ctx = recipe.context(
        (x, x.numel()),
        {"grid": lambda meta: (1,), "warmup": False},
        interpreted=INTERPRETED,
        benchmarker=recipe.timing.benchmarker(INTERPRETED),  # the kernel's do_bench, no_launch
    )
    evaluator = IsolatedEvaluator(ctx, recipe=recipe)
    start = time.perf_counter()
    evaluator.prepare(untimed.configs)
    started = time.perf_counter() - start
    requests = []
    for config in untimed.configs:
        start = time.perf_counter()
        evaluator.measure(config)
        requests.append((time.perf_counter() - start) * 1e3)
    evaluator.close()
    requests.sort()
    return (
        f"| {method} | {started:.3f} | {statistics.median(requests):.3f} | "
        f"{requests[int(0.9 * len(requests))]:.3f} | {len(requests)} |"
    )


class _WorkerStarts(logging.Handler):
    """Collects the start-up time of each isolation worker from the package's debug log."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seconds: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "worker %s started" in str(record.msg):
            self.seconds.append(float(record.args[-1]))


def tune_once(size: int) -> dict:
    """Tune ``block_matmul`` for one problem in this process; what it took."""
    starts = _WorkerStarts()
    logger = logging.getLogger("triton_dejavu_like.measure.isolation")
    logger.addHandler(starts)
    logger.setLevel(logging.DEBUG)
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    a = torch.randn((size, size), device=DEVICE, dtype=DTYPE, generator=gen)
    b = torch.randn((size, size), device=DEVICE, dtype=DTYPE, generator=gen)
    c = torch.empty((size, size), device=DEVICE, dtype=DTYPE)
    grid = lambda meta: (triton.cdiv(size, meta["BLOCK_M"]) * triton.cdiv(size, meta["BLOCK_N"]),)  # noqa: E731
    if not INTERPRETED:
        torch.cuda.synchronize()
    start = time.perf_counter()
    block_matmul[grid](a, b, c, size, size, size)
    if not INTERPRETED:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    error = float((c.float() - a.float() @ b.float()).abs().max() / (a.float() @ b.float()).abs().max())
    return {
        "seconds": seconds,
        "candidates": len(block_matmul.configs_timings),
        "decision": block_matmul.last_decision,
        "worker_starts_s": starts.seconds,
        "relative_error": error,
    }


def measure(size: int, isolated: bool, cache_dir: Path, work: Path) -> dict:
    storage = Path(tempfile.mkdtemp(prefix="storage-", dir=work))
    env = {
        **os.environ,
        "TRITON_CACHE_DIR": str(cache_dir),
        "TRITON_DEJAVU_STORAGE": str(storage),
        "TRITON_DEJAVU_USE_ISOLATED_PROCESS": "1" if isolated else "0",
        "TRITON_DEJAVU_PROGRESS": "0",
    }
    cmd = [sys.executable, __file__, "--role", "tune", "--size", str(size)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"tuning failed:\n{done.stdout}\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["decision"] != "tuned":
        raise RuntimeError(f"expected a tuning run, got {result['decision']}")
    if not result["relative_error"] < 2e-2:
        raise RuntimeError(
            f"the tuned kernel computed a wrong product (relative error {result['relative_error']:.3g})"
        )
    return result


def run(size: int, rounds: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="tdl-isolation-") as tmp:
        work = Path(tmp)
        warm = work / "warm-cache"
        measure(size, False, warm, work)  # fills the warm cache with every candidate
        for cache in ("cold", "warm"):
            for isolated in (False, True):
                runs = []
                for _ in range(rounds):
                    cache_dir = Path(tempfile.mkdtemp(prefix="cold-", dir=work)) if cache == "cold" else warm
                    runs.append(measure(size, isolated, cache_dir, work))
                rows.append({"cache": cache, "mode": "isolated" if isolated else "in-process", "runs": runs})
    return rows


def table(rows: list[dict], size: int) -> str:
    where = "CPU interpreter" if INTERPRETED else torch.cuda.get_device_name()
    lines = [
        f"block_matmul {size}x{size}x{size} {str(DTYPE).removeprefix('torch.')}, {len(CONFIGS)} candidates; "
        f"{where}, triton {triton.__version__}, torch {torch.__version__}; median of "
        f"{len(rows[0]['runs'])} fresh process(es) per row",
        "",
        "| Triton cache | mode | tuning (s) | ms per candidate | isolated / in-process | worker start (s) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    baseline: dict[str, float] = {}
    for row in rows:
        seconds = statistics.median(r["seconds"] for r in row["runs"])
        candidates = row["runs"][0]["candidates"]
        baseline.setdefault(row["cache"], seconds)
        starts = [s for r in row["runs"] for s in r["worker_starts_s"]]
        start = f"{statistics.median(starts):.2f} (x{len(starts) // len(row['runs'])})" if starts else "-"
        lines.append(
            f"| {row['cache']} | {row['mode']} | {seconds:.2f} | {seconds / candidates * 1e3:.1f} "
            f"| {seconds / baseline[row['cache']]:.2f} | {start} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--role", choices=["tune"])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--round-trip", nargs="+", choices=["fork", "forkserver", "spawn"])
    args = parser.parse_args()
    if args.round_trip:
        print("| start method | worker start + prepare (s) | request median (ms) | p90 (ms) | requests |")
        print("| --- | --- | --- | --- | --- |")
        for method in args.round_trip:
            print(round_trip(method))
        return
    if args.role == "tune":
        print(json.dumps(tune_once(args.size)))
        return
    rows = run(args.size, args.rounds)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows, args.size))


if __name__ == "__main__":
    main()

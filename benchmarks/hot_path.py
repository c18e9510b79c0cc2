"""Per-launch cost of an in-memory hit: ours vs upstream ``triton.autotune`` vs a plain launch.

GPU mode (default) launches a tiny vector add (launch-bound: the GPU work is far shorter than the
launch) many times and reports wall time per launch. ``--stub`` replaces the kernel by a Python stub
whose ``run`` does nothing, which isolates the autotuners' own Python overhead and runs anywhere.

    python benchmarks/hot_path.py            # on a GPU
    python benchmarks/hot_path.py --stub     # CPU only: wrapper overhead
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

if "--stub" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TRITON_DEJAVU_STORAGE", tempfile.mkdtemp(prefix="tdl-hot-"))
os.environ.setdefault("TRITON_DEJAVU_PROGRESS", "0")

import torch
import triton
import triton.language as tl

import triton_dejavu_like as tdl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (128, 256, 512, 1024) for w in (2, 4)]


class StubKernel:
    """A kernel whose launch does nothing: what remains is the autotuner's own cost."""

    def __init__(self, fn):
        self.fn = fn.fn if hasattr(fn, "fn") else fn
        self.arg_names = ["x_ptr", "y_ptr", "out_ptr", "n"]

    def run(self, *args, grid, warmup, **kwargs):
        return None

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)


def per_launch_us(launch, iters: int, repeats: int, sync) -> float:
    launch()
    sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            launch()
        sync()
        samples.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(samples)


def bench_do_bench(fn, quantiles):
    """Used only to make tuning instant in stub mode (no timing is being compared there)."""
    fn()
    return [1.0, 1.0, 1.0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stub", action="store_true", help="measure wrapper overhead with a no-op kernel")
    parser.add_argument("--iters", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    n = 1024
    if args.stub:
        kernel = StubKernel(add_kernel)
        x = y = out = torch.empty(n)
        do_bench = bench_do_bench

        def sync():
            return None
    else:
        kernel = add_kernel
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        do_bench = None
        sync = torch.cuda.synchronize

    ours = tdl.autotune(key=["n"], configs=CONFIGS, do_bench=do_bench)(kernel)
    upstream = triton.autotune(configs=CONFIGS, key=["n"], do_bench=do_bench)(kernel)
    grid = (1,)
    ours[grid](x, y, out, n)
    upstream[grid](x, y, out, n)
    fixed = ours.best_config.all_kwargs()  # the very launch options a tuned call passes
    rows = [
        ("plain triton.jit, fixed config", lambda: kernel[grid](x, y, out, n, **fixed)),
        ("triton_dejavu_like.autotune (hit)", lambda: ours[grid](x, y, out, n)),
        ("triton.autotune (hit)", lambda: upstream[grid](x, y, out, n)),
    ]
    results = {name: per_launch_us(fn, args.iters, args.repeats, sync) for name, fn in rows}
    plain = results[rows[0][0]]
    device = "stub (no launch)" if args.stub else torch.cuda.get_device_name()
    print(f"hot path per launch, {device}, triton {triton.__version__}, torch {torch.__version__}")
    print(f"{'path':<38}{'us/launch':>10}{'vs plain':>10}{'over plain':>12}")
    for name, value in results.items():
        print(f"{name:<38}{value:>10.2f}{value / plain:>9.2f}x{value - plain:>+10.2f}us")


if __name__ == "__main__":
    main()

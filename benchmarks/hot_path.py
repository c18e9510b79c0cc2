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
from triton.runtime.autotuner import Autotuner

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
        self.arg_names = list(fn.arg_names)  # constexprs included, as a JITFunction lists them

    def run(self, *args, grid, warmup, **kwargs):
        return None

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)


def per_launch_us(launches: list, iters: int, repeats: int, sync) -> list[float]:
    """Median wall time per launch of each callable, measured in interleaved rounds (so drift in
    clocks or load hits every row alike)."""
    for launch in launches:
        launch()
    sync()
    samples: list[list[float]] = [[] for _ in launches]
    for _ in range(repeats):
        for row, launch in enumerate(launches):
            t0 = time.perf_counter()
            for _ in range(iters):
                launch()
            sync()
            samples[row].append((time.perf_counter() - t0) / iters * 1e6)
    return [statistics.median(s) for s in samples]


def bench_do_bench(fn, quantiles):
    """Used only to make tuning instant in stub mode (no timing is being compared there)."""
    fn()
    return [1.0, 1.0, 1.0]


def add_case(stub: bool):
    n = 1024
    if stub:
        kernel = StubKernel(add_kernel)
        tensors = (torch.empty(n), torch.empty(n), torch.empty(n))
    else:
        kernel = add_kernel
        tensors = (
            torch.randn(n, device="cuda"),
            torch.randn(n, device="cuda"),
            torch.empty(n, device="cuda"),
        )

    def launch(k, inputs, **meta):
        return k[(1,)](*inputs, n, **meta)

    return "vector add (1024)", kernel, CONFIGS, ["n"], tensors, launch


def rmsnorm_case():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gpu_cases import rmsnorm_case as make

    case = make(rows=4, cols=4096)
    return "rmsnorm (4x4096 fp16)", case.kernel, case.configs, case.key, case.make_inputs(), case.launch


def measure(case, stub: bool, iters: int, repeats: int) -> list[tuple[str, float]]:
    _, kernel, configs, key, inputs, launch = case
    do_bench = bench_do_bench if stub else None
    sync = (lambda: None) if stub else torch.cuda.synchronize
    ours = tdl.autotune(key=key, configs=configs, do_bench=do_bench)(kernel)
    # what triton.autotune builds; made directly, because Triton 3.2's decorator drops do_bench and its
    # Autotuner then asks a GPU driver for a benchmarker (the stub runs without one)
    upstream = Autotuner(kernel, kernel.arg_names, configs, key, None, None, do_bench=do_bench)
    launch(ours, inputs)
    launch(upstream, inputs)
    best = ours.best_config
    as_written = {**best.kwargs, "num_warps": best.num_warps}  # how tutorials launch a fixed config
    rows = [
        ("plain jit: meta-params + num_warps", lambda: launch(kernel, inputs, **as_written)),
        ("plain jit: every Config option", lambda: launch(kernel, inputs, **best.all_kwargs())),
        ("triton_dejavu_like.autotune (hit)", lambda: launch(ours, inputs)),
        ("triton.autotune (hit)", lambda: launch(upstream, inputs)),
    ]
    times = per_launch_us([fn for _, fn in rows], iters, repeats, sync)
    return [(row, t) for (row, _), t in zip(rows, times)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stub", action="store_true", help="measure wrapper overhead with a no-op kernel")
    parser.add_argument("--iters", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    if not args.stub and not torch.cuda.is_available():
        sys.exit("needs a GPU (--stub runs without one)")
    cases = [add_case(args.stub)] + ([] if args.stub else [rmsnorm_case()])
    device = "stub (no launch)" if args.stub else torch.cuda.get_device_name()
    print(f"hot path per launch, {device}, triton {triton.__version__}, torch {torch.__version__}")
    print("| kernel | path | us/launch | vs plain | over plain |\n| --- | --- | --- | --- | --- |")
    for case in cases:
        results = measure(case, args.stub, args.iters, args.repeats)
        plain = results[0][1]
        for row, value in results:
            print(f"| {case[0]} | {row} | {value:.2f} | {value / plain:.2f}x | {value - plain:+.2f} us |")


if __name__ == "__main__":
    main()

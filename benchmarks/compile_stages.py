"""Where one config's compile time goes, stage by stage (GPU, NVIDIA backend).

A seeded sample of ``--n`` configs of the 648-config matmul space (``large_space.py``'s kernel
and space) is compiled one after another with ``JITFunction.warmup`` in this process, into an
empty Triton cache, after one untimed compile that loads the backend. Each stage of Triton's
pipeline is timed: the front end (Python AST to Triton IR, ``ASTSource.make_ir``), then ``ttir``,
``ttgir``, ``llir``, ``ptx`` and ``cubin`` (ptxas). Printed: the mean time of each stage per config
and its share of the total. The front end and ``ttir`` see only the kernel's source and constexprs,
not ``num_warps`` or ``num_stages``: that share is what configs differing only in those could share.

    python benchmarks/compile_stages.py [--n 24] [--seed 0]
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def timed(name: str, fn: Callable[..., Any], spent: dict[str, list[float]]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name].append(time.perf_counter() - start)

    return run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shape", default="4096x4096x4096")
    args = parser.parse_args(argv)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="compile-stages-")
    sys.path.insert(0, str(HERE))
    import large_space
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler.compiler import ASTSource

    spent: dict[str, list[float]] = collections.defaultdict(list)
    add_stages, make_ir = CUDABackend.add_stages, ASTSource.make_ir

    def add_timed_stages(self: Any, stages: dict[str, Any], *rest: Any) -> None:
        add_stages(self, stages, *rest)
        for name in list(stages):
            stages[name] = timed(name, stages[name], spent)

    CUDABackend.add_stages = add_timed_stages
    ASTSource.make_ir = timed("front end", make_ir, spent)
    problem = large_space.Problem(args.shape)
    if not problem.gpu:
        print("needs a GPU")
        return 1
    raw = large_space._import_kernel()
    call = (*problem.args(), problem.c.stride(0), problem.c.stride(1))
    configs = large_space.make_space(False).configs()
    random.Random(args.seed).shuffle(configs)
    raw.warmup(*call, grid=(1,), **configs[-1].all_kwargs())  # loads the backend
    spent.clear()
    total, failed = [], 0
    for config in configs[: args.n]:
        start = time.perf_counter()
        try:
            raw.warmup(*call, grid=(1,), **config.all_kwargs())
        except Exception:  # over the device's shared memory and the like
            failed += 1
        total.append(time.perf_counter() - start)
    whole = statistics.fmean(total)
    print(f"{args.n} configs ({failed} failed), {whole * 1e3:.0f} ms per config on average")
    print("| stage | ms per config (mean) | share |")
    print("| --- | ---: | ---: |")
    rows = [(name, sum(times) / args.n) for name, times in spent.items()]
    rows.append(("everything else (cache, hashing, loading)", whole - sum(t for _, t in rows)))
    for name, per_config in rows:
        print(f"| {name} | {per_config * 1e3:.0f} | {per_config / whole:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

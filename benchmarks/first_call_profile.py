"""Where a cold first call spends the time before the search hands out its first candidate (GPU).

One tuning run of the 648-config matmul space (``large_space.py``'s kernel and space) in this
process, with an empty Triton cache and storage, under ``cProfile`` from the launch until the
search's first ``ask``; prints that interval, the whole first call, and the functions with the
largest cumulative time (main thread only: SMAC's import runs in another thread).

    python benchmarks/first_call_profile.py [--shape 4096x4096x4096] [--strategy bo] [--top 45]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", default="4096x4096x4096")
    parser.add_argument("--strategy", default="bo", choices=("bo", "random", "exhaustive"))
    parser.add_argument("--top", type=int, default=45)
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="first-call-")
    os.environ["TRITON_CACHE_DIR"] = f"{work}/triton-cache"
    os.environ["TRITON_DEJAVU_STORAGE"] = f"{work}/storage"
    os.environ["TRITON_DEJAVU_PROGRESS"] = "0"
    sys.path.insert(0, str(HERE))
    from gpu_cases import require_gpu

    require_gpu()
    import large_space

    import triton_dejavu_like as tdl
    from triton_dejavu_like.search import base

    profile = cProfile.Profile()
    first_ask: list[float] = []
    ask = base.BatchSearch.ask

    def ask_once_profiled(self: Any, n: int) -> list[int]:
        if not first_ask:
            profile.disable()
            first_ask.append(time.perf_counter())
        return ask(self, n)

    base.BatchSearch.ask = ask_once_profiled
    kwargs: dict[str, Any] = {}
    if args.strategy != "exhaustive":
        kwargs = {"use_bo": True} if args.strategy == "bo" else {"use_random_search": True}
    problem = large_space.Problem(args.shape)
    kernel = tdl.autotune(key=["M", "N", "K"], config_space=large_space.make_space(False), **kwargs)(
        large_space._import_kernel()
    )
    problem.sync()
    start = time.perf_counter()
    profile.enable()
    problem.launch(kernel)
    problem.sync()
    end = time.perf_counter()
    print(
        f"{args.shape} {args.strategy}: first ask after {first_ask[0] - start:.3f} s; "
        f"first call {end - start:.2f} s"
    )
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(args.top)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The first launch of a kernel over a large ConfigSpace: time and memory, against its size.

Each case is a fresh process (CPU interpreter, ``TRITON_INTERPRET=1``, empty storage) that builds a
ConfigSpace of ``--sizes`` points (4 BLOCK x A x 100 B x 5 num_warps x 5 num_stages), optionally with
a kwarg condition or a config condition keeping 1% of them (one B per A), and launches a kernel decorated with
``autotune(config_space=..., use_random_search=True, search_max_share=21 / points kept)`` once, with
a deterministic ``do_bench`` (no timer: what is measured is the tuner's own work). It prints the
wall time of building the space, of the first launch (listing, storage identity, search, the 21
candidates run by the interpreter, the stored result), of a second launch with another key value
(tuned again over the same list: what a new key costs once the space is listed), the peak memory
the process added (``ru_maxrss``) and how many candidates each key timed. With ``--baseline DIR``
(another checkout of the package, e.g. ``git worktree add /tmp/base main``) every case also runs
against that tree, and the ratios baseline / this tree are printed.

    python benchmarks/config_space_scale.py                                   # 1e4, 1e5, 1e6 points
    python benchmarks/config_space_scale.py --sizes 1000000 --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CONDITIONS = ("none", "kwarg", "config")


def child(points: int, condition: str) -> dict[str, Any]:
    """One case in this process: build the space, launch once, report."""
    import resource
    import time

    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["TRITON_DEJAVU_STORAGE"] = tempfile.mkdtemp(prefix="space-scale-")
    import torch
    import triton
    import triton.language as tl

    import triton_dejavu_like as tdl

    @triton.jit
    def copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr, A: tl.constexpr, B: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)

    seen: list[tuple[int, int, int, int]] = []

    def observe(nargs: dict[str, Any]) -> None:
        seen.append((nargs["A"], nargs["B"], nargs["BLOCK"], nargs["num_warps"]))

    timed = []

    def bench(kernel_call: Any, quantiles: Any = (0.5, 0.2, 0.8)) -> list[float]:
        kernel_call()  # runs the space's pre_hook: the config's values
        a, b, block, warps = seen[-1]
        timed.append(seen[-1])
        t = 1.0 + abs(a - 37) / 50 + abs(b - 61) / 80 + abs(block - 64) / 256 + warps / 100
        return [t, t, t]

    def one_in_a_hundred(kwargs: dict[str, Any]) -> bool:
        return (kwargs["A"] * 7 + kwargs["B"]) % 100 == 0

    extra: dict[str, Any] = {}
    if condition == "kwarg":
        extra["kwarg_conditions"] = [one_in_a_hundred]
    elif condition == "config":
        extra["conditions"] = [lambda config: one_in_a_hundred(config.kwargs)]
    kept = points // 100 if condition != "none" else points
    x = torch.arange(64, dtype=torch.float32)
    out = torch.empty_like(x)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    space = tdl.ConfigSpace(
        {"BLOCK": [16, 32, 64, 128], "A": list(range(points // 10_000)), "B": list(range(100))},
        num_warps=[1, 2, 4, 8, 16],
        num_stages=[1, 2, 3, 4, 5],
        pre_hook=observe,
        **extra,
    )
    built = time.perf_counter()
    tuner = tdl.autotune(
        config_space=space, key=["n"], use_random_search=True, search_max_share=21 / kept, do_bench=bench
    )(copy)
    tuner[lambda meta: (triton.cdiv(64, meta["BLOCK"]),)](x, out, 64)
    launched = time.perf_counter()
    assert torch.equal(out, x) and tuner.last_decision == "tuned"
    first_timed = len(timed)
    tuner[lambda meta: (triton.cdiv(63, meta["BLOCK"]),)](x, out, 63)  # another key, the same space
    again = time.perf_counter()
    assert tuner.last_decision == "tuned" and len(timed) == 2 * first_timed
    return {
        "build_s": built - start,
        "first_launch_s": launched - built,
        "second_key_s": again - launched,
        "maxrss_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024,
        "timed": first_timed,
    }


def run_case(tree: Path, points: int, condition: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [sys.executable, __file__, "--child", str(points), condition]
    proc = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"case {points} {condition} failed under {tree}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=list(CONDITIONS))
    parser.add_argument("--baseline", type=Path, help="another checkout of the package to compare with")
    parser.add_argument("--child", nargs=2, metavar=("POINTS", "CONDITION"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(int(args.child[0]), args.child[1])))
        return 0
    for points in args.sizes:
        if points % 10_000 or points < 10_000:
            parser.error(f"--sizes: a multiple of 10000, got {points}")
    trees = {"this tree": HERE.parent}
    if args.baseline is not None:
        trees["baseline"] = args.baseline.resolve()
    print(
        f"{'points':>9} {'condition':>9} {'tree':>9} {'build s':>8} {'launch s':>9} {'key 2 s':>8} "
        f"{'+MB':>7} {'timed':>5}"
    )
    for points in args.sizes:
        for condition in args.conditions:
            results = {}
            for name, tree in trees.items():
                r = results[name] = run_case(tree, points, condition)
                print(
                    f"{points:>9} {condition:>9} {name:>9} {r['build_s']:>8.2f} {r['first_launch_s']:>9.2f} "
                    f"{r['second_key_s']:>8.2f} "
                    f"{r['maxrss_mb']:>7.0f} {r['timed']:>5}",
                    flush=True,
                )
            if "baseline" in results:
                ours, base = results["this tree"], results["baseline"]
                time_ratio = (base["build_s"] + base["first_launch_s"]) / (
                    ours["build_s"] + ours["first_launch_s"]
                )
                memory_ratio = base["maxrss_mb"] / max(ours["maxrss_mb"], 1.0)
                key_ratio = base["second_key_s"] / ours["second_key_s"]
                ratios = f"time {time_ratio:.1f}x, second key {key_ratio:.1f}x, memory {memory_ratio:.1f}x"
                print(f"{'':>9} {'':>9} {'ratio':>9} baseline / this tree: {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How compiling the matmul's 48 candidates scales with compile threads (empty Triton cache each time).

Uses the package's own ``precompile`` (``triton.AsyncCompileMode`` with a thread pool where the
Triton release has it), in a fresh process per thread count.

    python benchmarks/compile_scaling.py [--threads 1 2 4 8 16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(threads: int) -> dict:
    sys.path.insert(0, str(HERE))
    import torch
    from gpu_cases import matmul_case

    from triton_dejavu_like.measure import LaunchContext
    from triton_dejavu_like.measure.precompile import precompile

    case = matmul_case()
    a, b, c = case.make_inputs()
    M, K = a.shape
    N = b.shape[1]
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    ctx = LaunchContext(
        fn=case.kernel,
        args=args,
        kwargs={"grid": (1,), "warmup": False},
        nargs={},
        pre_hook=lambda *a, **k: None,
        post_hook=lambda *a, **k: None,
        benchmarker=None,
        kernel_name="matmul",
    )
    torch.cuda.synchronize()
    start = time.perf_counter()
    failures = precompile(ctx, case.configs, threads=threads)
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    for config in case.configs:  # first launches: everything must now come from the kernel cache
        if config not in failures:
            case.launch(case.kernel, (a, b, c), **config.all_kwargs())
    torch.cuda.synchronize()
    return {
        "threads": threads,
        "compile_s": compile_s,
        "first_launches_s": time.perf_counter() - start,
        "failed": len(failures),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--child", type=int)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child)))
        return
    sys.path.insert(0, str(HERE))
    from gpu_cases import require_gpu

    require_gpu()
    rows = []
    for threads in args.threads:
        with tempfile.TemporaryDirectory(prefix="tdl-cc-") as cache:
            result = subprocess.run(
                [sys.executable, __file__, "--child", str(threads)],
                env={**os.environ, "TRITON_CACHE_DIR": cache},
                capture_output=True,
                text=True,
                timeout=900,
            )
        if result.returncode != 0:
            raise RuntimeError(result.stderr)
        rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
    base = rows[0]["compile_s"]
    print(f"{'threads':>8}{'compile s':>11}{'speed-up':>10}{'1st launches s':>16}{'failed':>8}")
    for r in rows:
        print(
            f"{r['threads']:>8}{r['compile_s']:>11.2f}{base / r['compile_s']:>9.1f}x"
            f"{r['first_launches_s']:>16.2f}{r['failed']:>8}"
        )


if __name__ == "__main__":
    main()

"""Where a cold tuning run of an example case spends its time, and whether its timing kept the stream
gates (GPU; a diagnostic).

Each run is a fresh process with an empty Triton cache and storage, tuning one case of
``gpu_cases.py`` (the 48-config matmul or the 24-config RMSNorm) on its first call, instrumented from
outside. Printed per run (one JSON line), in seconds from the start of the first call: for each
step, how often it ran, when it first started, how long its first run took, its summed time and when
its last run ended. Steps: ``pool.start`` (forking the compile workers), ``ask`` (the search),
``compiled`` (each worker compile, submit to done), ``wait`` (this process idle, waiting for a
compile), ``measure`` (one candidate's screen), ``estimate`` (its first launch and one timed
launch), ``timed`` (gated timed launches), ``make_gate``, ``refine``. ``gates_off`` says why the
process stopped using the gates, or null: a first ``timed`` of more than a second and a reason here
mean a gate opened by itself.

    python benchmarks/first_timing.py --case matmul --runs 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def instrumented_run(case_name: str) -> dict[str, Any]:
    """Tune ``case_name`` on its first call in this process, with the steps recorded."""
    sys.path.insert(0, str(HERE))
    import torch
    from gpu_cases import CASES

    import triton_dejavu_like as tdl
    from triton_dejavu_like.measure import bench, compile_pool, gate, pipeline
    from triton_dejavu_like.search import base

    events: list[tuple[str, float, float]] = []
    now = time.perf_counter

    def record(owner: Any, attr: str, label: str) -> None:
        original: Callable[..., Any] = getattr(owner, attr)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = now()
            try:
                return original(*args, **kwargs)
            finally:
                events.append((label, start, now()))

        setattr(owner, attr, wrapper)

    record(compile_pool.CompilePool, "start", "pool.start")
    record(base.BatchSearch, "ask", "ask")
    record(pipeline.cf, "wait", "wait")
    record(bench.GpuBenchmarker, "__call__", "measure")
    record(bench.GpuBenchmarker, "_estimate", "estimate")
    record(bench.GpuBenchmarker, "_timed", "timed")
    record(bench.GpuBenchmarker, "refine", "refine")
    record(bench, "make_gate", "make_gate")
    submit = compile_pool.CompilePool.submit

    def timed_submit(self: Any, call: Any, config: Any) -> Any:
        start = now()
        future = submit(self, call, config)
        future.add_done_callback(lambda _f: events.append(("compiled", start, now())))
        return future

    compile_pool.CompilePool.submit = timed_submit  # type: ignore[method-assign]
    case = CASES[case_name]()
    inputs = case.make_inputs()
    torch.cuda.synchronize()
    tuner = tdl.autotune(key=case.key, configs=case.configs)(case.kernel)
    t0 = now()
    case.launch(tuner, inputs)
    torch.cuda.synchronize()
    out: dict[str, Any] = {"case": case_name, "first_call_s": round(now() - t0, 3)}
    for label in sorted({e[0] for e in events}):
        runs = [e for e in events if e[0] == label]
        out[label] = {
            "n": len(runs),
            "first_start": round(runs[0][1] - t0, 3),
            "first_s": round(runs[0][2] - runs[0][1], 3),
            "sum_s": round(sum(e[2] - e[1] for e in runs), 3),
            "last_end": round(max(e[2] for e in runs) - t0, 3),
        }
    out["gates_off"] = gate._unavailable
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", choices=["matmul", "rmsnorm"], default="matmul")
    parser.add_argument("--runs", type=int, default=2, help="fresh processes, each with an empty cache")
    parser.add_argument("--role", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role:
        print("RESULT " + json.dumps(instrumented_run(args.case)))
        return 0
    sys.path.insert(0, str(HERE))
    from gpu_cases import require_gpu

    require_gpu()
    from tuning_timeline import print_fresh_result

    role = ["--role", "--case", args.case]
    failed = sum(
        not print_fresh_result(__file__, role, args.case, timeout=300, interpret=False)
        for _ in range(args.runs)
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

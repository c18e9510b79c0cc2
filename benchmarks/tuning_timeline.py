"""Where the time of one tuning run on the 648-config matmul space goes (GPU; a diagnostic).

Each run is a fresh process with an empty Triton cache and storage (``large_space.py``'s
``role_tune``), instrumented from outside: ``BatchSearch.ask``/``tell``, the pipeline's waits for
compiles, and each compile worker task's submit-to-done time. Printed per run (one JSON line):

- ``search_span_s``: first ask to last result; ``first_ask_after_call_start_s``: what comes
  before (storage identity, forking the workers, warming the compiler);
- ``ask_s``: time in ``ask`` (the strategy: fits, proposals, waiting for SMAC's import on the
  first fit; ``ask_max_s`` the longest single ask); ``wait_s``: this process idle, waiting for a
  compile; ``parent_other_s``: the rest of the span (timing candidates, bookkeeping);
- ``worker_util_16``: summed compile-task time / (16 x span);
- ``last_improvement_s`` (the best time last improved by 1 %), ``first_empty_ask_s`` (the first
  ask that handed out nothing while work was pending: the stop, a polish wait or the cap);
- ``tells_per_s_by_second``: results per second of the span; ``polish``: (time, neighbours handed
  out, results so far) when a stalled search polishes.

    python benchmarks/tuning_timeline.py --runs 4096x4096x4096:bo:0 512x4096x1024:bo:2
    python benchmarks/tuning_timeline.py --tiny --runs 64x64x64:bo:0    # CPU interpreter, a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def instrumented_run(shape: str, strategy: str, seed: int, tiny: bool) -> dict[str, Any]:
    """One tuning run in this process, with the events recorded."""
    sys.path.insert(0, str(HERE))
    import large_space

    from triton_dejavu_like.measure import pipeline
    from triton_dejavu_like.measure.compile_pool import CompilePool
    from triton_dejavu_like.search import base

    events: list[tuple[Any, ...]] = []
    now = time.perf_counter
    ask, tell, wait, submit = (
        base.BatchSearch.ask,
        base.BatchSearch.tell,
        pipeline.cf.wait,
        CompilePool.submit,
    )
    spent = base.BatchSearch._attempt_spent

    def timed_ask(self: Any, n: int) -> list[int]:
        t = now()
        out = ask(self, n)
        events.append(("ask", t, now(), n, len(out), len(self.pending)))
        return out

    def timed_tell(self: Any, index: int, value: float) -> None:
        events.append(("tell", now(), index, value))
        tell(self, index, value)

    def timed_wait(futures: Any, **kwargs: Any) -> Any:
        t = now()
        out = wait(futures, **kwargs)
        events.append(("wait", t, now()))
        return out

    def timed_submit(self: Any, call: Any, config: Any) -> Any:
        t = now()
        future = submit(self, call, config)
        future.add_done_callback(lambda _f, t=t: events.append(("compiled", t, now())))
        return future

    def noted_spent(self: Any) -> bool:
        out = spent(self)
        if self._polishing:
            events.append(("polish", now(), len(self._polishing), len(self.results)))
        return out

    base.BatchSearch.ask, base.BatchSearch.tell = timed_ask, timed_tell
    pipeline.cf.wait, CompilePool.submit = timed_wait, timed_submit
    base.BatchSearch._attempt_spent = noted_spent

    started = now()
    result = large_space.role_tune({"shape": shape, "strategy": strategy, "seed": seed, "tiny": tiny})
    of = {kind: [e for e in events if e[0] == kind] for kind in ("ask", "tell", "wait", "compiled", "polish")}
    t0 = of["ask"][0][1]
    span = max(e[1] for e in of["tell"]) - t0
    ask_s = sum(e[2] - e[1] for e in of["ask"])
    wait_s = sum(e[2] - e[1] for e in of["wait"])
    best, last_improvement = float("inf"), None
    for e in of["tell"]:
        if e[3] < best * 0.99:
            best, last_improvement = e[3], e[1] - t0
    empty = [e[1] - t0 for e in of["ask"] if e[4] == 0 and e[3] > 0]
    seconds = range(int(span) + 1)
    return {
        "shape": shape,
        "strategy": strategy,
        "seed": seed,
        "first_call_s": result["first_call_s"],
        "phases_s": result["phases_s"],
        "evaluated": result["evaluated"],
        "best": large_space.config_label(result["best"]),
        "first_ask_after_call_start_s": t0 - started,
        "search_span_s": span,
        "ask_s": ask_s,
        "ask_max_s": max(e[2] - e[1] for e in of["ask"]),
        "wait_s": wait_s,
        "parent_other_s": span - ask_s - wait_s,
        "worker_util_16": sum(e[2] - e[1] for e in of["compiled"]) / (16 * span) if span > 0 else None,
        "last_improvement_s": last_improvement,
        "first_empty_ask_s": empty[0] if empty else None,
        "tells_per_s_by_second": [sum(1 for e in of["tell"] if k <= e[1] - t0 < k + 1) for k in seconds],
        "polish": [(round(e[1] - t0, 2), e[2], e[3]) for e in of["polish"]],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--runs",
        nargs="+",
        default=["4096x4096x4096:bo:0", "512x4096x1024:bo:0"],
        help="SHAPE:STRATEGY:SEED, strategy exhaustive, random or bo",
    )
    parser.add_argument("--role", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=200)
    parser.add_argument("--tiny", action="store_true", help="the 12-config space under the interpreter")
    args = parser.parse_args(argv)
    if args.role:
        shape, strategy, seed, tiny = args.role
        print("RESULT " + json.dumps(instrumented_run(shape, strategy, int(seed), tiny == "1")))
        return 0
    for run in args.runs:
        if len(run.split(":")) != 3 or run.split(":")[1] not in ("exhaustive", "random", "bo"):
            parser.error(f"--runs {run}: expected SHAPE:STRATEGY:SEED, strategy exhaustive, random or bo")
    failed = 0
    for run in args.runs:
        shape, strategy, seed = run.split(":")
        role = ["--role", shape, strategy, seed, "1" if args.tiny else "0"]
        failed += not print_fresh_result(__file__, role, run, timeout=args.timeout, interpret=args.tiny)
    return 1 if failed else 0


def print_fresh_result(script: str, role: list[str], label: str, *, timeout: float, interpret: bool) -> bool:
    """Run ``script role`` in a fresh process with an empty Triton cache and storage and print the
    line it marked ``RESULT`` (or ``label`` and the end of its stderr); whether it gave one."""
    with tempfile.TemporaryDirectory(prefix="timeline-") as work:
        env = dict(os.environ, TRITON_CACHE_DIR=f"{work}/triton-cache")
        env.update(TRITON_DEJAVU_STORAGE=f"{work}/st", TRITON_DEJAVU_PROGRESS="0")
        env.pop("TRITON_INTERPRET", None)
        if interpret:
            env["TRITON_INTERPRET"] = "1"
        done = subprocess.run(
            [sys.executable, script, *role],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    lines = [line[7:] for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    print(lines[0] if lines else f"{label}: failed\n{done.stderr[-2000:]}", flush=True)
    return bool(lines)


if __name__ == "__main__":
    sys.exit(main())

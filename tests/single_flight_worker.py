"""A process that tunes one key of ``double_kernel`` (run as a script by test_single_flight.py).

``python single_flight_worker.py GO N [--started PATH --release PATH]``: waits for the file GO, launches the
kernel for size N with a counting ``do_bench`` that returns a random time per config (so processes
that tune independently pick different configs), and prints one JSON line: the decision, how many
benchmarks this process ran and the chosen BLOCK. ``--started``: at the first benchmark, writes this
process's pid to PATH, then waits there until the file ``--release`` names exists (a holder kept
mid-tuning until the test lets it go, or kills it). ``--meet DIR --count K``:
at the first benchmark, wait (at most 60 s) until K processes have benchmarked (they tune at once).
``--stale S``: a lease is stale after S s without a heartbeat (every S / 10 s), instead of 30 s.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent)]  # this checkout's package

from storage_helpers import InstantBench, launch, make_tuner  # noqa: E402

from triton_dejavu_like.store import lease  # noqa: E402


class RandomBench(InstantBench):
    def __init__(
        self, delay_s: float, started: Path | None, release: Path | None, meet: Path | None, count: int
    ) -> None:
        super().__init__(delay_s)
        self.started = started
        self.release = release
        self.meet = meet
        self.count = count

    def __call__(self, kernel_call, quantiles=(0.5, 0.2, 0.8)):  # type: ignore[no-untyped-def]
        super().__call__(kernel_call, quantiles)
        if self.started is not None and not self.started.exists():
            written = self.started.with_name(f"{self.started.name}.{os.getpid()}")
            written.write_text(str(os.getpid()))
            written.replace(self.started)  # whole: a reader never sees it empty
            deadline = time.monotonic() + 300
            while self.release is not None and not self.release.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        if self.meet is not None and self.calls == 1:
            (self.meet / str(os.getpid())).touch()
            deadline = time.monotonic() + 60
            while len(list(self.meet.iterdir())) < self.count and time.monotonic() < deadline:
                time.sleep(0.01)
        return [random.uniform(1.0, 2.0)] * len(quantiles)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("go")
    parser.add_argument("n", type=int)
    parser.add_argument("--started")
    parser.add_argument("--release")
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--meet")
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--stale", type=float)
    args = parser.parse_args()
    if args.stale is not None:
        lease.STALE_AFTER_S, lease.HEARTBEAT_S = args.stale, args.stale / 10
    go = Path(args.go)
    deadline = time.monotonic() + 120
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    started, release, meet = (Path(p) if p else None for p in (args.started, args.release, args.meet))
    bench = RandomBench(args.delay, started, release, meet, args.count)
    tuner = make_tuner(bench=bench)
    launch(tuner, args.n)
    best = tuner.best_config
    assert best is not None
    result = {"decision": tuner.last_decision, "benchmarks": bench.calls, "block": best.kwargs["BLOCK"]}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

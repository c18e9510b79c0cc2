"""Tune once, restore forever: one example kernel in two fresh processes that share a storage directory.

The first process tunes the kernel and stores the winner; the second finds it in storage and
launches it with zero benchmark runs. Each process counts the launches of its kernel from outside
the package: every launch beyond the program's own is one the autotuner made to time a candidate.
On a machine without a GPU the kernels run through Triton's interpreter on tiny problems.

    python examples/demo.py [--example matmul|rmsnorm|softmax|attention]

Results go to ``$TRITON_DEJAVU_STORAGE`` when it is set, else to a temporary directory removed at
the end. Exits 1 if an output is wrong or the second process benchmarked anything.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import _common as common  # picks the GPU, or the interpreter when there is none

EXAMPLES = ("matmul", "rmsnorm", "softmax", "attention")


def problems(first: Mapping[str, Any], second: Mapping[str, Any]) -> list[str]:
    """What went wrong in a tune-then-restore pair (empty when the demo succeeded)."""
    found = []
    for label, report in (("first", first), ("second", second)):
        if not report["ok"]:
            found.append(
                f"the {label} process computed a wrong result "
                f"(error {report['max_error']:.2e} > {report['tolerance']:.0e})"
            )
    if second["decision"] != "restored":
        found.append(f"the second process did not restore from storage (decision: {second['decision']})")
    if second["bench_launches"] != 0:
        found.append(f"the second process made {second['bench_launches']} benchmark launches instead of 0")
    if second["config"] != first["config"]:
        found.append(f"the second process launched {second['config']}, not the tuned {first['config']}")
    return found


def _line(label: str, report: Mapping[str, Any], wall_s: float) -> str:
    timed = f"{report['configs_timed']} configs timed, " if report["decision"] == "tuned" else ""
    return (
        f"  {label}: {report['decision']} in {report['first_call_s']:.2f} s, {timed}"
        f"{report['bench_launches']} benchmark launches, max error {report['max_error']:.1e} "
        f"(process {wall_s:.1f} s)"
    )


def demo(example: str, storage: Path, *, gpu: bool) -> int:
    script = common.EXAMPLES_DIR / f"{example}.py"
    reports = []
    walls = []
    for _ in range(2):
        start = time.perf_counter()
        reports.append(common.run_example_process(script, storage, gpu=gpu))
        walls.append(time.perf_counter() - start)
    first, second = reports
    problem = ", ".join(f"{k}={v}" for k, v in first["problem"].items())
    config = ", ".join(f"{k}={v}" for k, v in first["config"].items() if v is not None)
    print(f"{example} ({problem}) on {first['device']}")
    print("two fresh processes sharing one storage directory:")
    print(_line("process 1", first, walls[0]))
    print(_line("process 2", second, walls[1]))
    print(f"  config: {config}")
    print(f"  results: {second['cache_path']}")
    if first["decision"] == "restored":
        print("  (the storage directory already held this result, so both processes restored it)")
    found = problems(first, second)
    for message in found:
        print(f"FAILED: {message}")
    if not found:
        print(
            f"OK: tuned once ({first['bench_launches']} benchmark launches), "
            "then restored with 0 benchmark launches"
        )
    return 1 if found else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--example", choices=EXAMPLES, default="matmul", help="kernel to tune and restore")
    args = parser.parse_args()
    gpu = common.ON_GPU
    configured = os.environ.get("TRITON_DEJAVU_STORAGE")
    if configured:
        return demo(args.example, Path(configured), gpu=gpu)
    with tempfile.TemporaryDirectory(prefix="triton-dejavu-like-demo-") as tmp:
        status = demo(args.example, Path(tmp) / "storage", gpu=gpu)
        print("  (a temporary directory, removed now; set TRITON_DEJAVU_STORAGE to keep the results)")
        return status


if __name__ == "__main__":
    sys.exit(main())

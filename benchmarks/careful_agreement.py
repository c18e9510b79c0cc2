"""Do careful measurements in different processes agree? (GPU)

The six best configs of the examples' matmul at 512x4096x1024 (fp16; a 13 us kernel whose best
configs lie within 2-3% of each other) are timed by the package's careful stage
(``GpuBenchmarker.refine`` with ``final_margin=0``: every round, shuffled, L2 flushed before each
launch) ``--repeats`` times in each of ``--processes`` fresh processes, one process at a time, in
these conditions:

- ``quiet``: nothing else runs;
- ``cpu-load``: ``--load`` other processes spin on the CPU meanwhile (the tuner's careful stage
  can overlap the compile workers' last compiles);
- ``gil``: a thread of the measuring process itself spins in Python meanwhile (the tuner's
  pipeline threads share the interpreter with the timing loop);
- ``realloc``: quiet, but every repeat times a new set of inputs (the earlier ones stay allocated,
  so the new ones sit elsewhere in memory): does the spread between processes come from where the
  inputs lie?
- ``reflush``: quiet, but every repeat flushes the L2 with a new buffer (the earlier ones stay
  allocated);

The timing goes through the package's stream gates (``measure/gate.py``); a condition whose name
ends in ``-ungated`` times without them (as before 2026-11-25, fourth session).

Every process also allocates a pad of a different size before the inputs, so the inputs do not
sit at the same addresses in every process. Printed: each config's time relative to the first
config, as the median over repeats and processes, with its spread within a process (median
absolute deviation of the repeats, averaged over processes) and between processes (of the
per-process medians); and whether the fastest config is the same in every process.

    python benchmarks/careful_agreement.py [--processes 6] [--repeats 3] [--conditions quiet ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SHAPE = "512x4096x1024"
#: (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages), best first on the recorded space
TOP = [
    (128, 128, 64, 8, 8, 5),
    (64, 128, 64, 8, 4, 4),
    (128, 128, 64, 8, 8, 4),
    (128, 128, 64, 1, 8, 5),
    (128, 128, 64, 1, 4, 5),
    (128, 128, 64, 8, 4, 4),
]
KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
NAMES = ["{}x{}x{} G{} w{} s{}".format(*t) for t in TOP]


def clocks() -> str:
    try:
        return subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def child(condition: str, pad_mb: float, repeats: int, load: int) -> dict:
    import large_space
    import torch

    from triton_dejavu_like.measure.bench import GpuBenchmarker, TimingPolicy

    pad = torch.empty(int(pad_mb * 2**20), dtype=torch.int8, device="cuda")  # noqa: F841 - moves the inputs
    raw = large_space._import_kernel()
    problems: list = []  # every set of inputs stays allocated, so a new one lands elsewhere

    def fresh_calls() -> list:
        problems.append(large_space.Problem(SHAPE))
        problem = problems[-1]
        return [lambda c=dict(zip(KEYS, t)), p=problem: p.launch(raw, **c) for t in TOP]

    calls = fresh_calls()
    for call in calls:
        call()
    torch.cuda.synchronize()
    GpuBenchmarker.gated = not condition.endswith("ungated")
    spinners: list[subprocess.Popen] = []
    stop = threading.Event()
    if condition.startswith("cpu-load"):
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
    elif condition.startswith("gil"):

        def spin() -> None:
            x = 0
            while not stop.is_set():
                x += 1

        threading.Thread(target=spin, daemon=True).start()
    try:
        benches = [GpuBenchmarker(None, None, False, TimingPolicy(final_margin=0.0))]
        runs = []
        for repeat in range(repeats):
            if condition.startswith("realloc") and repeat:
                calls = fresh_calls()
            if condition.startswith("reflush") and repeat:  # earlier flush buffers stay allocated
                benches.append(GpuBenchmarker(None, None, False, TimingPolicy(final_margin=0.0)))
            runs.append([q[0] for q in benches[-1].refine(calls)])
        seen = clocks()
    finally:
        stop.set()
        for p in spinners:
            p.kill()
            p.wait()
    return {"runs": runs, "clocks": seen, "a_ptr_mod_2mb": problems[0].a.data_ptr() % 2**21}


def mad(values: Sequence[float]) -> float:
    m = statistics.median(values)
    return statistics.median(abs(v - m) for v in values)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--load", type=int, default=15, help="spinning processes (cpu-load)")
    parser.add_argument(
        "--conditions", nargs="+", default=["quiet", "realloc", "cpu-load", "gil", "gil-ungated"]
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--pad-mb", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.pad_mb, args.repeats, args.load)))
        return 0

    import torch

    if not torch.cuda.is_available():
        print("needs a GPU")
        return 1
    print(f"{torch.cuda.get_device_name()}; {SHAPE}; times relative to {NAMES[0]}", flush=True)
    for condition in args.conditions:
        per_process: list[list[list[float]]] = []  # process -> repeat -> config ratio
        for p in range(args.processes):
            pad = 1.0 + 2.37 * p  # MiB: a different offset in every process
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    condition,
                    "--pad-mb",
                    str(pad),
                    "--repeats",
                    str(args.repeats),
                    "--load",
                    str(args.load),
                ],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if out.returncode:
                print(out.stderr[-2000:])
                return 1
            result = json.loads(out.stdout.strip().splitlines()[-1])
            ratios = [[t / run[0] for t in run] for run in result["runs"]]
            per_process.append(ratios)
            best = [NAMES[min(range(len(run)), key=run.__getitem__)] for run in result["runs"]]
            print(
                f"  {condition} process {p}: pad {pad:.2f} MiB, a % 2MiB = {result['a_ptr_mod_2mb']}, "
                f"clocks {result['clocks']}; {NAMES[0]} "
                f"{statistics.median(run[0] for run in result['runs']) * 1e3:.2f} us; "
                f"fastest per repeat: {', '.join(best)}; "
                + " ".join(f"{statistics.median(r[i] for r in ratios):.3f}" for i in range(len(TOP))),
                flush=True,
            )
        print(f"\n{condition}: {args.processes} processes x {args.repeats} repeats")
        print(
            "| config | median ratio | spread within a process | between processes "
            "| range of process medians |"
        )
        print("| --- | ---: | ---: | ---: | --- |")
        for i, name in enumerate(NAMES):
            medians = [statistics.median(r[i] for r in proc) for proc in per_process]
            within = statistics.mean(mad([r[i] for r in proc]) for proc in per_process)
            allv = [r[i] for proc in per_process for r in proc]
            print(
                f"| {name} | {statistics.median(allv):.3f} | {within:.4f} | {mad(medians):.4f} | "
                f"{min(medians):.3f}-{max(medians):.3f} |"
            )
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

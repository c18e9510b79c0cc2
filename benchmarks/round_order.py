"""Does the position of a launch in an interleaved round bias its time? (GPU)

Four configs of the examples' matmul at 512x4096x1024 (fp16, 128x128x64 tiles, 8 warps; GROUP_M 1
or 8, 4 or 5 stages), a 13 us kernel whose best configs lie within 2% of each other, timed in one
process by several methods; every line prints each config's median and its ratio to the second
config's (G8 s5):

- ``fixed order`` / ``fixed, reversed``: interleaved rounds, L2 flushed before each launch, the
  calls in the same order every round (the careful stage before 2026-11-25), given in the listed
  and in the reverse order; a position bias shows as a verdict that flips with the order;
- ``careful stage`` / ``careful, reversed``: the package's careful stage
  (``GpuBenchmarker.refine`` with ``final_margin=0``: every round), whose rounds are shuffled;
- ``one at a time``: each config's launches back to back, L2 flushed before each;
- ``cuda graph``: 200 launches captured in a CUDA graph per config, no flush (warm L2).

    python benchmarks/round_order.py [--rounds 2000] [--repeats 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CONFIGS = [
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": g, "num_warps": 8, "num_stages": s}
    for g, s in ((1, 5), (8, 5), (8, 4), (1, 4))
]
NAMES = [f"G{c['GROUP_M']} s{c['num_stages']}" for c in CONFIGS]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rounds", type=int, default=2000, help="launches per config (fixed order, one at a time)"
    )
    parser.add_argument("--repeats", type=int, default=1, help="how many times to run every method")
    args = parser.parse_args(argv)

    import large_space  # the matmul kernel and its inputs
    import torch

    from triton_dejavu_like.measure.bench import GpuBenchmarker, TimingPolicy

    if not torch.cuda.is_available():
        print("needs a GPU")
        return 1
    raw = large_space._import_kernel()
    problem = large_space.Problem("512x4096x1024")
    calls: list[Callable[[], None]] = [lambda c=c: problem.launch(raw, **c) for c in CONFIGS]
    for call in calls:
        call()
    torch.cuda.synchronize()
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")

    def event_pair() -> tuple[torch.cuda.Event, torch.cuda.Event]:
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def flushed_launch(call: Callable[[], None]) -> tuple[torch.cuda.Event, torch.cuda.Event]:
        """One launch after an L2 flush, between two events (read after a synchronize)."""
        flush.zero_()
        start, end = event_pair()
        start.record()
        call()
        end.record()
        return start, end

    def median_ms(pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]]) -> float:
        return statistics.median(s.elapsed_time(e) for s, e in pairs)

    def fixed_order(order: list[int]) -> list[float]:
        events: list[list[tuple[torch.cuda.Event, torch.cuda.Event]]] = [[] for _ in calls]
        for _ in range(args.rounds):
            for i in order:
                events[i].append(flushed_launch(calls[i]))
        torch.cuda.synchronize()
        return [median_ms(per) for per in events]

    def one_at_a_time() -> list[float]:
        out = []
        for call in calls:
            pairs = [flushed_launch(call) for _ in range(args.rounds)]
            torch.cuda.synchronize()
            out.append(median_ms(pairs))
        return out

    def cuda_graph(launches: int = 200) -> list[float]:
        out = []
        for call in calls:
            graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
            with torch.cuda.stream(stream):
                call()
                torch.cuda.synchronize()
                with torch.cuda.graph(graph):
                    for _ in range(launches):
                        call()
            times = []
            for _ in range(20):
                start, end = event_pair()
                start.record()
                graph.replay()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / launches)
            out.append(statistics.median(times))
        return out

    def careful(order: list[int]) -> list[float]:
        bench = GpuBenchmarker(None, None, False, TimingPolicy(final_margin=0.0))
        medians = [q[0] for q in bench.refine([calls[i] for i in order])]
        out = [0.0] * len(calls)
        for position, i in enumerate(order):
            out[i] = medians[position]
        return out

    listed, reversed_ = list(range(len(calls))), list(range(len(calls)))[::-1]
    methods: list[tuple[str, Callable[[], list[float]]]] = [
        ("fixed order", lambda: fixed_order(listed)),
        ("fixed, reversed", lambda: fixed_order(reversed_)),
        ("careful stage", lambda: careful(listed)),
        ("careful, reversed", lambda: careful(reversed_)),
        ("one at a time", one_at_a_time),
        ("cuda graph", cuda_graph),
    ]
    print(f"{torch.cuda.get_device_name()}; medians in us, and / {NAMES[1]}")
    print("| method | " + " | ".join(NAMES) + " |")
    print("| --- |" + " ---: |" * len(NAMES))
    for _ in range(args.repeats):
        for label, method in methods:
            medians = method()
            cells = [f"{m * 1e3:.3f} ({m / medians[1]:.3f})" for m in medians]
            print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One rank of a gloo process group tuning ``double_kernel`` together with the others.

``python ranks_worker.py INIT_FILE RANK WORLD [killed_leader]``: initialises torch.distributed (gloo,
``file://`` rendezvous), enables :func:`triton_dejavu_like.distributed` (unless
``TRITON_DEJAVU_DISTRIBUTED=1`` enables it), meets the other ranks at a barrier, then launches the
kernel for the scenario's keys with a counting ``do_bench`` that returns a random time per config
(ranks tuning alone would disagree). Prints one JSON line.

Phases, one after the other: ``same`` (every rank misses key 500); ``different`` (rank r misses key
600 + r, then all miss 700); ``raise`` (all miss key 800; rank 2 raises from its benchmark, a
BaseException, and goes on). Each phase reports the benchmarks run, the configs chosen, the entries
recorded (each rank records the group's entry: their ``tuned_at``) and whether the rank raised. Then
``fail``: every config raises ``OutOfResources`` on every rank (key 900); the rank reports the
classes of the error it raised. Then ``hook``: the tuner's ``pre_hook`` raises on every rank (key
1000); the rank reports the benchmarks it ran and what it raised. Then ``check``:
``double_or_not_kernel`` with the numerical check (key 1100), whose first config is right and whose
configs 1, 2 and 3 (the first of each other member's share) compute a wrong result fastest; the rank
reports the config chosen, whether its result was right, which of the configs it knows of were
valid, the benchmarks and the launches (the tuner's ``pre_hook`` calls) it ran.

With ``killed_leader``, only that: rank 0 leads key 1200 and is killed at its first benchmark; the
others report the config they launch.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import datetime
import json
import math
import random
import signal
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent)]  # this checkout's package

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
from kernels import RIGHT, WRONG, double_or_not_kernel  # noqa: E402
from storage_helpers import InstantBench, launch, make_tuner  # noqa: E402
from triton.runtime.errors import OutOfResources  # noqa: E402

import triton_dejavu_like as tdl  # noqa: E402

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (16, 32, 64, 128) for w in (1, 2)]
#: ``double_or_not_kernel``'s configs: those of the blocks in WRONG_BLOCKS compute a wrong result.
WRONG_BLOCKS = (32, 64, 128)
CHECKED_CONFIGS = [
    triton.Config({"BLOCK": b, "MODE": WRONG if b in WRONG_BLOCKS else RIGHT})
    for b in (16, 32, 64, 128, 256, 512, 1024, 2048)
]


class Boom(BaseException):
    pass


def out_of_resources(nargs: dict) -> None:
    raise OutOfResources(nargs["BLOCK"] * 1000, 1000, "shared memory")


def launching_bench(kernel_call, quantiles=(0.5, 0.2, 0.8)):  # type: ignore[no-untyped-def]
    launching_bench.calls += 1  # type: ignore[attr-defined]
    kernel_call()
    return [1.0] * len(quantiles)


launching_bench.calls = 0  # type: ignore[attr-defined]


def missing_buffer(nargs: dict, reset_only: bool = False) -> None:
    raise KeyError("workspace")


class RandomBench(InstantBench):
    def __init__(self, explode: bool) -> None:
        super().__init__(delay_s=0.05)
        self.explode = explode

    def __call__(self, kernel_call, quantiles=(0.5, 0.2, 0.8)):  # type: ignore[no-untyped-def]
        super().__call__(kernel_call, quantiles)
        if self.explode:
            raise Boom("this rank fails")
        return [random.uniform(1.0, 2.0)] * len(quantiles)


class BlockBench:
    """A ``do_bench`` whose time depends on the config only: 0.1 ms for a wrong config, else
    1000 / BLOCK (the largest block wins); its ``pre_hook`` counts the launches and sees the config."""

    def __init__(self) -> None:
        self.calls = self.launches = 0
        self.block, self.mode = 0, RIGHT

    def pre_hook(self, nargs: dict, reset_only: bool = False) -> None:
        if not reset_only:
            self.launches += 1
            self.block, self.mode = nargs["BLOCK"], nargs["MODE"]

    def __call__(self, kernel_call, quantiles=(0.5, 0.2, 0.8)):  # type: ignore[no-untyped-def]
        self.calls += 1
        kernel_call()
        return [0.1 if self.mode == WRONG else 1000 / self.block] * len(quantiles)


def counted_records(tuner: tdl.Autotuner) -> list[list[str]]:
    """The entries the tuner's store records from now on, one list per record, each entry as its
    ``tuned_at`` (the same in every rank's record of one result)."""
    recorded: list[list[str]] = []
    store = tuner._process_state().store
    original = store.record

    def record(entries: dict) -> bool:
        recorded.append([entry.to_json()["tuned_at"] for entry in entries.values()])
        return original(entries)

    store.record = record  # type: ignore[method-assign]
    return recorded


def checked_phase() -> dict:
    """Tune ``double_or_not_kernel`` with the numerical check: what the rank chose, judged and launched."""
    bench = BlockBench()
    tuner = make_tuner(
        double_or_not_kernel,
        bench=bench,
        configs=CHECKED_CONFIGS,
        pre_hook=bench.pre_hook,
        numerical_check=True,
    )
    recorded = counted_records(tuner)
    dist.barrier()
    n = 1100
    x = torch.arange(n, dtype=torch.float32)
    out = torch.empty_like(x)
    tuner[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    best = tuner.best_config
    assert best is not None
    valid = {str(c.kwargs["BLOCK"]): math.isfinite(t[0]) for c, t in tuner.configs_timings.items()}
    return {
        "config": [best.kwargs["BLOCK"], best.kwargs["MODE"]],
        "correct": bool(torch.equal(out, x * 2)),
        "valid": valid,
        "benchmarks": bench.calls,
        "launches": bench.launches,
        "recorded": len(recorded),
    }


def killed(kernel_call, quantiles=(0.5, 0.2, 0.8)):  # type: ignore[no-untyped-def]
    os.kill(os.getpid(), signal.SIGKILL)


def killed_leader(rank: int) -> dict:
    """Key 1200: rank 0 misses it first (the others 2 s later, within the join window) and is killed
    (SIGKILL) at its first benchmark; the others report the config they launch and what they raised."""
    tuner = make_tuner(bench=killed if rank == 0 else RandomBench(explode=False), configs=CONFIGS)
    dist.barrier()
    if rank:
        time.sleep(2.0)
    launch(tuner, 1200)
    best = tuner.best_config
    assert best is not None
    return {"config": [best.kwargs["BLOCK"], best.num_warps]}


def main() -> None:
    init, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    timeout = datetime.timedelta(seconds=60)
    dist.init_process_group(
        "gloo", init_method=f"file://{init}", rank=rank, world_size=world, timeout=timeout
    )
    if os.environ.get("TRITON_DEJAVU_DISTRIBUTED") != "1":
        tdl.distributed()
    if sys.argv[4:] == ["killed_leader"]:
        print(json.dumps({"rank": rank, "killed_leader": killed_leader(rank)}), flush=True)
        os._exit(0)
    bench = RandomBench(explode=False)
    tuner = make_tuner(bench=bench, configs=CONFIGS)
    recorded = counted_records(tuner)
    phases = {}
    for phase, keys in (("same", [500]), ("different", [600 + rank, 700]), ("raise", [800])):
        bench.explode = phase == "raise" and rank == 2
        bench.calls, recorded[:] = 0, []
        dist.barrier()  # the ranks start each phase at about the same moment (no rank has raised yet)
        configs, raised = [], False
        for n in keys:
            try:
                launch(tuner, n)
                best = tuner.best_config
                assert best is not None
                configs.append([best.kwargs["BLOCK"], best.num_warps])
            except Boom:
                raised = True
        phases[phase] = {
            "benchmarks": bench.calls,
            "configs": configs,
            "recorded": len(recorded),
            "entries": recorded[:],
            "raised": raised,
        }
    configs = [triton.Config(c.kwargs, num_warps=c.num_warps, pre_hook=out_of_resources) for c in CONFIGS]
    failing = make_tuner(bench=launching_bench, configs=configs)
    dist.barrier()
    try:
        launch(failing, 900)
        phases["fail"] = {"raised": []}
    except Exception as exc:
        classes = (OutOfResources, tdl.AutotuningError)
        phases["fail"] = {"raised": [cls.__name__ for cls in classes if isinstance(exc, cls)]}
    broken = make_tuner(bench=launching_bench, configs=CONFIGS, pre_hook=missing_buffer)
    launching_bench.calls = 0  # type: ignore[attr-defined]
    dist.barrier()
    try:
        launch(broken, 1000)
        phases["hook"] = {"raised": None}
    except KeyError as exc:
        stopped_by = getattr(exc, "stopped_by", None)
        phases["hook"] = {"raised": str(exc), "stopped_by": stopped_by, "benchmarks": launching_bench.calls}  # type: ignore[attr-defined]
    phases["check"] = checked_phase()
    print(json.dumps({"rank": rank, **phases}), flush=True)
    os._exit(0)  # no teardown collective: a rank that finished early must not wait for the others


if __name__ == "__main__":
    main()

"""Processes and ranks that miss one key at once: single-flight and split tuning vs tuning everywhere.

Default mode: N processes (``--processes``, default 4) share one fresh storage root and miss the
same key of a real kernel (a row-wise softmax over a space of BLOCK x num_warps x num_stages) at the
same moment (each signals it is ready after its imports; the parent then starts them together).
Measured: the wall time from the start to the last process done, with single flight (default) and
with ``TRITON_DEJAVU_SINGLE_FLIGHT=0`` (N independent tunings), how many processes benchmarked, how
many configs each knows a timing of (``configs_timings``: what it measured; a leading rank also
knows the timings the other ranks gathered), and the configs the processes chose.

``--distributed``: N ranks (torchrun-style variables; NCCL on GPUs, ``cuda:rank % devices``, so with
one GPU the ranks share it; gloo on CPU) with :func:`triton_dejavu_like.distributed` miss one key
together, vs one rank alone; the wall time of the miss and the benchmarks per rank.

``--tiny``: the interpreter on CPU tensors with a small space (for machines without a GPU).

    python benchmarks/single_flight.py [--processes 4] [--tiny]
    python benchmarks/single_flight.py --distributed [--processes 8] [--tiny]

Prints markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _kernel(tiny: bool):  # type: ignore[no-untyped-def]
    import triton
    import triton.language as tl

    import triton_dejavu_like as tdl

    space = (
        tdl.ConfigSpace({"BLOCK": [64, 128, 256, 512]}, num_warps=[1, 2], num_stages=[1])
        if tiny
        else tdl.ConfigSpace(
            {"BLOCK": [1024, 2048, 4096, 8192]}, num_warps=[2, 4, 8, 16], num_stages=[1, 2, 3]
        )
    )

    @tdl.autotune(key=["n_cols"], config_space=space)
    @triton.jit
    def softmax(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)

    return softmax


def worker(args: argparse.Namespace) -> None:
    """One process: import, say it is ready, wait for the start, miss the key once."""
    import torch

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    device = "cpu" if args.tiny else f"cuda:{rank % max(1, torch.cuda.device_count())}"
    if device != "cpu":
        torch.cuda.set_device(device)
    import triton_dejavu_like as tdl

    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo" if args.tiny else "nccl")
        tdl.distributed()
    kernel = _kernel(args.tiny)
    rows, cols = (4, 200) if args.tiny else (4096, 4000)
    x = torch.randn(rows, cols, device=device)
    out = torch.empty_like(x)
    Path(args.ready, str(os.getpid())).touch()
    while not Path(args.go).exists():
        time.sleep(0.005)
    start = time.perf_counter()
    kernel[(rows,)](x, out, cols)
    if device != "cpu":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    best = kernel.best_config
    print(
        json.dumps(
            {
                "seconds": seconds,
                "decision": kernel.last_decision,
                "benchmarked": len(kernel.configs_timings) if kernel.last_decision == "tuned" else 0,
                "config": f"BLOCK={best.kwargs['BLOCK']} w{best.num_warps} s{best.num_stages}",
            }
        ),
        flush=True,
    )
    os._exit(0)  # no teardown collective


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_group(n: int, tiny: bool, *, single_flight: bool = True, ranks: bool = False) -> dict:
    """Start ``n`` workers on a fresh root, release them together, collect their results."""
    with tempfile.TemporaryDirectory() as tmp:
        ready, go = Path(tmp, "ready"), Path(tmp, "go")
        ready.mkdir()
        env = {**os.environ, "TRITON_DEJAVU_STORAGE": str(Path(tmp, "store")), "TRITON_DEJAVU_PROGRESS": "0"}
        env["TRITON_DEJAVU_SINGLE_FLIGHT"] = "1" if single_flight else "0"
        if tiny:
            env["TRITON_INTERPRET"] = "1"
        if ranks:
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(n))
        command = [sys.executable, __file__, "--role", "worker", "--ready", str(ready), "--go", str(go)]
        procs = [
            subprocess.Popen(
                command + (["--tiny"] if tiny else []),
                stdout=subprocess.PIPE,
                text=True,
                env={**env, "RANK": str(i), "LOCAL_RANK": str(i)} if ranks else env,
            )
            for i in range(n)
        ]
        deadline = time.monotonic() + 600
        while len(list(ready.iterdir())) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        start = time.perf_counter()
        go.touch()
        results = [json.loads(p.communicate(timeout=3600)[0].strip().splitlines()[-1]) for p in procs]
        wall = time.perf_counter() - start
    return {"wall_s": wall, "results": results}


def _row(label: str, group: dict) -> str:
    results = group["results"]
    tuned = sum(1 for r in results if r["benchmarked"])
    benchmarked = "/".join(str(r["benchmarked"]) for r in results)
    configs = sorted({r["config"] for r in results})
    slowest = max(r["seconds"] for r in results)
    median = statistics.median(r["seconds"] for r in results)
    return (
        f"| {label} | {group['wall_s']:.2f} s | {slowest:.2f} s | {median:.2f} s | {tuned} | {benchmarked} "
        f"| {len(configs)}: {', '.join(configs)} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--tiny", action="store_true", help="interpreter on CPU, small space")
    parser.add_argument("--distributed", action="store_true", help="ranks tuning together vs one rank")
    parser.add_argument("--role", choices=["worker"], help=argparse.SUPPRESS)
    parser.add_argument("--ready", help=argparse.SUPPRESS)
    parser.add_argument("--go", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "worker":
        worker(args)
        return
    n = args.processes
    header = (
        "| run | wall (start to last done) | slowest miss | median miss | processes that benchmarked "
        "| timings known per process | distinct configs chosen |\n"
        "| --- | --- | --- | --- | --- | --- | --- |"
    )
    print(
        f"# {'ranks tuning together' if args.distributed else 'single flight'}, {n} processes"
        f"{' (tiny, interpreter)' if args.tiny else ''}\n"
    )
    print(header)
    if args.distributed:
        print(_row("1 rank alone", run_group(1, args.tiny)))
        print(_row(f"{n} ranks, split", run_group(n, args.tiny, ranks=True)))
    else:
        print(_row(f"{n} processes, single flight", run_group(n, args.tiny)))
        print(_row(f"{n} processes, independent", run_group(n, args.tiny, single_flight=False)))


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    main()

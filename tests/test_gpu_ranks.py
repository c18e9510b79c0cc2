"""Two ranks on two GPUs (NCCL) tune together, and a rank that misses a key later follows the group.

Each rank is a fresh process (torchrun-style variables, ``cuda:RANK``, NCCL) with a storage root of
its own, as on two hosts: what one rank knows of the other's work comes through the process group
only. Both miss a key at once (the candidates are split between them and they launch one config),
then rank 0 misses a second key alone while rank 1 waits at a barrier, and rank 1 misses it after:
it launches the config rank 0 chose, without timing anything. A second run of both ranks on the
same roots restores every key from each rank's own store with no tuning. Skipped with fewer than two
GPUs (two NCCL ranks cannot share one).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from process_helpers import script_env

pytestmark = pytest.mark.gpu

SCENARIO = textwrap.dedent(
    """
    import json
    import os

    import torch
    import torch.distributed as dist
    import triton
    from gpu_kernels import double

    import triton_dejavu_like as tdl

    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    tdl.distributed()

    BLOCKS, WARPS = (256, 512, 1024, 2048, 4096), (1, 2, 4, 8)
    CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in BLOCKS for w in WARPS]


    twice = tdl.autotune(key=["n"], configs=CONFIGS)(double)


    def launch(n):
        x = torch.randn(n, device="cuda")
        out = torch.zeros_like(x)
        twice[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        torch.cuda.synchronize()
        best = twice.best_config
        return {
            "decision": twice.last_decision,
            "config": [best.kwargs["BLOCK"], best.num_warps],
            "timed": len(twice.configs_timings or {}) if twice.last_decision == "tuned" else 0,
            "right": bool(torch.equal(out, x * 2)),
        }


    report = {}
    dist.barrier()
    report["together"] = launch(1 << 22)
    dist.barrier()
    if rank == 0:
        report["late"] = launch(1 << 21)
    dist.barrier()
    if rank == 1:
        report["late"] = launch(1 << 21)
    dist.barrier()
    print(json.dumps(report), flush=True)
    dist.destroy_process_group()
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(tmp_path: Path, world: int = 2) -> list[dict]:
    script = tmp_path / "gpu_ranks_scenario.py"
    script.write_text(SCENARIO)
    env = script_env(tmp_path, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(world))
    env["TRITON_DEJAVU_PROGRESS"] = "0"
    procs, logs = [], []
    for rank in range(world):
        rank_env = {**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        rank_env["TRITON_DEJAVU_STORAGE"] = str(tmp_path / f"storage-{rank}")  # one store per "host"
        rank_env["TRITON_CACHE_DIR"] = str(tmp_path / f"triton-cache-{rank}")
        out, err = tmp_path / f"rank-{rank}.out", tmp_path / f"rank-{rank}.err"  # files: no pipe fills up
        logs.append((out, err))
        with out.open("w") as stdout, err.open("w") as stderr:
            procs.append(
                subprocess.Popen([sys.executable, str(script)], env=rank_env, stdout=stdout, stderr=stderr)
            )
    reports = []
    try:
        for proc, (out, err) in zip(procs, logs, strict=True):
            assert proc.wait(timeout=300) == 0, err.read_text()[-4000:]
            reports.append(json.loads(out.read_text().strip().splitlines()[-1]))
    finally:
        for proc in procs:
            proc.kill()
    return reports


@pytest.fixture(scope="module")
def two_gpus() -> None:
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")


def test_two_ranks_split_a_key_agree_and_a_late_rank_follows_the_group(tmp_path, two_gpus):
    first = _run_ranks(tmp_path)
    print(json.dumps(first, indent=1))  # for the record (pytest -s)
    leader, member = sorted((r["together"] for r in first), key=lambda r: -r["timed"])
    assert leader["decision"] == member["decision"] == "tuned"
    assert leader["config"] == member["config"]  # one config launched by the group
    assert leader["timed"] == 20 and 0 < member["timed"] < 20  # the member timed its share only
    assert all(r["together"]["right"] and r["late"]["right"] for r in first)
    late_first, late_second = first[0]["late"], first[1]["late"]
    assert late_first["decision"] == "tuned" and late_first["timed"] > 0
    assert late_second["config"] == late_first["config"]  # the group's decision, from rank 0
    assert late_second["timed"] == 0

    again = _run_ranks(tmp_path)
    print(json.dumps(again, indent=1))
    for before, after in zip(first, again, strict=True):
        for phase in ("together", "late"):
            assert after[phase]["decision"] == "restored", phase  # from this rank's own store
            assert after[phase]["config"] == before[phase]["config"]
            assert after[phase]["right"]

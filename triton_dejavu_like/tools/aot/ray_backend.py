"""Cases spread over a Ray cluster (the ``distributed`` extra, ``triton_dejavu_like[distributed]``).

Each Ray task (``num_gpus=1``, a fresh worker process: ``max_calls=1``) tunes a batch of cases into a
temporary storage root seeded with the target's files, and returns the case results and the bytes
of the cache files the cases used. The driver parses and validates those bytes like any file read
from disk (nothing is unpickled from a store) and merges them into the target as each task ends.
A task that is lost (its worker or node died) reports its cases "lost"; the other tasks' results
are kept. The SPEC (its file or module) must be importable where the tasks run: the same path on
every node, or shipped with Ray's ``runtime_env`` (``working_dir``, ``py_modules``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ... import _env
from ...store import inventory
from . import merging
from .case import load_cases
from .pool import PACKAGE_PARENT
from .run import CaseResult, run_case


class RayUnavailable(RuntimeError):
    """Ray is not installed (the ``distributed`` extra), or the cluster cannot be reached."""


def tune_batch(spec: str, names: Sequence[str], known: dict[str, bytes]) -> dict[str, Any]:
    """The body of a Ray task: the cases ``names`` of ``spec`` in a temporary root seeded with
    ``known``; returns ``{"results": [CaseResult JSON], "files": {relative path: bytes}}``."""
    root = Path(tempfile.mkdtemp(prefix="tdl-ray-tune-"))
    try:
        merging.seed(root, known)
        cases = {case.name: case for case in load_cases(spec)}
        where = f"ray node {os.uname().nodename} pid {os.getpid()}"
        results = [run_case_named(cases, name, root, where) for name in names]
        used = sorted({f for r in results for f in r.files})
        files = {f: (root / f).read_bytes() for f in used if (root / f).is_file()}
        return {"results": [r.to_json() for r in results], "files": files}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_case_named(cases: dict[str, Any], name: str, root: Path, worker: str) -> CaseResult:
    if name not in cases:
        return CaseResult(name, "failed", error="the SPEC has no such case on this worker", worker=worker)
    return run_case(cases[name], root, worker=worker)


def batches(names: Sequence[str], size: int) -> list[list[str]]:
    return [list(names[i : i + size]) for i in range(0, len(names), size)]


def run_on_ray(
    spec: str,
    names: Sequence[str],
    target: Path,
    on_result: Callable[[CaseResult], None],
    *,
    address: str | None = None,
    batch_size: int = 1,
) -> tuple[list[CaseResult], list[inventory.Problem]]:
    """Run the cases on Ray (connecting to ``address``, or the running/a new local cluster when
    None; a program that called ``ray.init`` itself keeps its connection) and merge into ``target``."""
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(
            "--ray needs Ray: pip install 'triton_dejavu_like[distributed]' (or 'ray>=2.9')"
        ) from exc
    if not ray.is_initialized():
        try:
            ray.init(address=address, log_to_driver=True)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RayUnavailable(f"cannot connect to Ray at {address or 'a local cluster'}: {exc}") from exc
    env = {**_env.for_workers(), "PYTHONPATH": os.pathsep.join((PACKAGE_PARENT, os.getcwd()))}
    task = ray.remote(num_gpus=1, max_calls=1, max_retries=0)(tune_batch).options(
        runtime_env={"env_vars": env}
    )
    known = ray.put(merging.read_tree(target))
    running = {task.remote(spec, batch, known): batch for batch in batches(names, batch_size)}
    results: list[CaseResult] = []
    problems: list[inventory.Problem] = []
    while running:
        (ref,), _ = ray.wait(list(running), num_returns=1)
        batch = running.pop(ref)
        try:
            answer = ray.get(ref)
            got = [CaseResult.from_json(r) for r in answer["results"]]
            files = answer["files"]
            if not all(isinstance(k, str) and isinstance(v, bytes) for k, v in files.items()):
                raise TypeError("the task returned cache files that are not bytes")
            problems += merging.merge_bytes(target, files, f"ray task {ref.hex()[:12]}")
        except (ray.exceptions.RayError, ValueError, KeyError, TypeError, AttributeError) as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            why = f"Ray task lost: {type(exc).__name__}: {first}"
            got = [CaseResult(name, "lost", error=why, worker="ray") for name in batch]
        for result in got:
            on_result(result)
        results += got
    return results, problems

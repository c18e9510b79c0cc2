"""Cases spread over a Ray cluster (the ``distributed`` extra, ``triton_dejavu_like[distributed]``).

One Ray actor per GPU of the cluster (``num_gpus=1``, no restarts) loads the SPEC once and tunes
batches of ``--batch-size`` cases into its own temporary storage root, seeded with the target's
files; the driver hands each actor its next batch as soon as it answers, so a worker pays Python's,
torch's and CUDA's start and its first compiles once, not once per case. An answer carries the case
results and the bytes of the cache files the batch used: the driver parses and validates those
bytes like any file read from disk (nothing is unpickled from a store) and merges them into the
target as each batch ends. An actor that dies (its process or node) loses its batch, reported
"lost"; a new actor takes its place while batches remain, and the other batches' results are kept.
An actor must answer ``ready()`` within a start timeout (placed on a GPU, the SPEC loaded) or it is
dropped with an error; with no actor left, the batches not run are reported lost: the run ends.
The SPEC (its file or module) must be importable where the actors run: the same path on every node,
or shipped with Ray's ``runtime_env`` (``working_dir``, ``py_modules``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ... import _env
from ...store import inventory
from . import merging
from .case import load_cases
from .pool import worker_pythonpath
from .run import CaseResult, run_case

#: Seconds a Ray worker may take to start (placed on a GPU, the SPEC loaded) before it is dropped.
START_TIMEOUT_S = 300.0


class RayUnavailable(RuntimeError):
    """Ray is not installed (the ``distributed`` extra), or the cluster cannot be reached."""


class CaseRunner:
    """A Ray actor's state: the SPEC's cases and, from its first batch on, a temporary storage root
    seeded with ``known`` (an actor dropped before it got work leaves no directory behind)."""

    def __init__(self, spec: str, known: dict[str, bytes]) -> None:
        self.cases = {case.name: case for case in load_cases(spec)}
        self.known: dict[str, bytes] | None = known
        self.root: Path | None = None
        self.where = f"ray node {os.uname().nodename} pid {os.getpid()}"

    def ready(self) -> str:
        """Answers once the actor runs (placed on a GPU, the SPEC loaded): where it runs."""
        return self.where

    def run(self, names: Sequence[str]) -> dict[str, Any]:
        """Tune ``names``; ``{"results": [CaseResult JSON], "files": {relative path: bytes}}``."""
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="tdl-ray-tune-"))
            merging.seed(self.root, self.known or {})
            self.known = None
        root = self.root
        results = [run_case_named(self.cases, name, root, self.where) for name in names]
        used = sorted({f for r in results for f in r.files})
        files = {f: (root / f).read_bytes() for f in used if (root / f).is_file()}
        return {"results": [r.to_json() for r in results], "files": files}

    def close(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


def run_case_named(cases: dict[str, Any], name: str, root: Path, worker: str) -> CaseResult:
    if name not in cases:
        return CaseResult(name, "failed", error="the SPEC has no such case on this worker", worker=worker)
    return run_case(cases[name], root, worker=worker)


def worker_env() -> dict[str, str]:
    """The variables a Ray worker gets: the package's settings, and a PYTHONPATH that finds this
    package, the SPEC (the working directory) and whatever the driver's PYTHONPATH holds (Ray's
    ``env_vars`` replace the worker's own: without it, a Ray found there cannot start a worker)."""
    return {**_env.for_workers(), "PYTHONPATH": worker_pythonpath(os.environ.get("PYTHONPATH", ""))}


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
    start_timeout_s: float = START_TIMEOUT_S,
) -> tuple[list[CaseResult], list[inventory.Problem], list[str]]:
    """Run the cases on Ray (connecting to ``address``, or the running/a new local cluster when
    None; a program that called ``ray.init`` itself keeps its connection) and merge into ``target``.

    Returns the results, the problems of the merged files, and errors: workers that did not start
    within ``start_timeout_s`` (the cluster cannot place them, or the SPEC does not load there) are
    dropped with an error, and if none is left the cases not run are reported lost."""
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
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus < 1:
        raise RayUnavailable(
            "the Ray cluster has no GPU, and each tuning worker needs one (did Ray detect them? "
            "`ray start --head --num-gpus N` names them)"
        )
    actor = ray.remote(num_gpus=1, max_restarts=0, max_task_retries=0)(CaseRunner).options(
        runtime_env={"env_vars": worker_env()}
    )
    known = ray.put(merging.read_tree(target))
    todo = deque(batches(names, batch_size))
    idle: list[Any] = []
    # answer ref -> (actor, its batch; None while the actor starts: the ref is its ready() call)
    running: dict[Any, tuple[Any, list[str] | None]] = {}
    deadlines: dict[Any, float] = {}  # ready() ref -> when its actor counts as unable to start
    results: list[CaseResult] = []
    problems: list[inventory.Problem] = []
    errors: list[str] = []

    def start_one() -> None:
        runner = actor.remote(spec, known)
        ref = runner.ready.remote()
        running[ref] = (runner, None)
        deadlines[ref] = time.monotonic() + start_timeout_s

    def not_started(ref: Any, why: str) -> None:
        runner, _ = running.pop(ref)
        del deadlines[ref]
        ray.kill(runner)
        errors.append(f"a Ray worker did not start: {why}")

    for _ in range(min(gpus, len(todo))):
        start_one()
    try:
        while todo or any(batch is not None for _, batch in running.values()):
            while todo and idle:
                runner, batch = idle.pop(), todo.popleft()
                running[runner.run.remote(batch)] = (runner, batch)
            if not running:  # every worker failed to start: nothing will run what is left
                why = f"not run: no Ray worker could start ({errors[-1] if errors else 'none was started'})"
                got = [CaseResult(name, "lost", error=why, worker="ray") for b in todo for name in b]
                todo.clear()
                for result in got:
                    on_result(result)
                results += got
                break
            wait_s = min((d - time.monotonic() for d in deadlines.values()), default=None)
            done, _ = ray.wait(
                list(running), num_returns=1, timeout=None if wait_s is None else max(0.0, wait_s)
            )
            if not done:  # a starting worker is overdue: the cluster cannot place it, or it hangs
                now = time.monotonic()
                for ref in [r for r, d in deadlines.items() if d <= now]:
                    not_started(ref, f"not ready within {start_timeout_s:g} s (no free GPU for it?)")
                continue
            (ref,) = done
            if running[ref][1] is None:  # a worker finished starting, or failed to
                try:
                    ray.get(ref)
                except ray.exceptions.RayError as exc:
                    # Ray's message ends with the exception the actor's __init__ raised
                    not_started(ref, (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300])
                else:
                    del deadlines[ref]
                    idle.append(running.pop(ref)[0])
                continue
            runner, batch = running.pop(ref)
            try:
                answer = ray.get(ref)
                got = [CaseResult.from_json(r) for r in answer["results"]]
                files = answer["files"]
                if not all(isinstance(k, str) and isinstance(v, bytes) for k, v in files.items()):
                    raise TypeError("the worker returned cache files that are not bytes")
                problems += merging.merge_bytes(target, files, f"ray worker {ref.hex()[:12]}")
                idle.append(runner)
            except (ray.exceptions.RayError, ValueError, KeyError, TypeError, AttributeError) as exc:
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                why = f"Ray task lost: {type(exc).__name__}: {first}"
                got = [CaseResult(name, "lost", error=why, worker="ray") for name in batch or ()]
                ray.kill(runner)
                if todo:  # its GPU is free again: a fresh worker takes the next batch
                    start_one()
            for result in got:
                on_result(result)
            results += got
    finally:
        # a worker still starting may never start (no GPU for it): only one that answered is closed
        answered = (
            set(ray.wait(list(deadlines), num_returns=len(deadlines), timeout=0)[0]) if deadlines else set()
        )
        started = [*idle, *(r for ref, (r, batch) in running.items() if batch is not None or ref in answered)]
        for runner in started:
            with contextlib.suppress(ray.exceptions.RayError):  # a lost worker has nothing to clean
                ray.get(runner.close.remote(), timeout=60)
        for runner in [*idle, *(r for r, _ in running.values())]:
            ray.kill(runner)
    return results, problems, errors

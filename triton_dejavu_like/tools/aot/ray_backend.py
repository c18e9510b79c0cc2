"""Cases spread over a Ray cluster (the ``distributed`` extra, ``triton_dejavu_like[distributed]``).

One Ray actor per GPU of the cluster (``num_gpus=1``, no restarts) loads the SPEC once and tunes
batches of ``--batch-size`` cases into its own temporary storage root, seeded with the target's
files; the driver hands each actor its next batch as soon as it answers, so a worker pays Python's,
torch's and CUDA's start and its first compiles once, not once per case. An answer carries the case
results and the bytes of the cache files the batch used: the driver parses and validates those
bytes like any file read from disk (nothing is unpickled from a store) and merges them into the
target as each batch ends. An actor that dies (its process or node) loses its batch, reported
"lost"; a new actor takes its place while batches remain, and the other batches' results are kept
(what the dead actor stored before is collected from its node at the end, as below).
An actor must answer ``ready()`` within a start timeout (placed on a GPU, the SPEC loaded) or it is
dropped with an error; with no actor left, the batches not run are reported lost: the run ends.
The package's warnings of an actor (loading the SPEC, tuning) come back with its answers and are
issued by the driver, once for all actors. Interrupted (Ctrl-C) or stopped by an error, the driver
kills the actors that are running a batch, then a task on each one's node returns the cache files
of its temporary root as bytes (merged like an answer's) and removes the root; every wait of this
is bounded by ``STOP_TIMEOUT_S``.
The SPEC (its file or module) must be importable where the actors run: the same path on every node,
or shipped with Ray's ``runtime_env`` (``working_dir``, ``py_modules``); a SPEC file is sent by its
absolute path (the actors' working directory is not the driver's).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ... import _env
from ..._log import (
    DejavuConfigWarning,
    DejavuStorageWarning,
    DejavuWarning,
    encode_warning,
    reissue_warning,
    relay_warnings,
    warn_once,
)
from ...store import inventory
from . import merging
from .case import absolute_spec, load_cases
from .pool import add_problems, kept_for_merge, not_merged, worker_pythonpath
from .run import CaseResult, run_case

#: Seconds a Ray worker may take to start (placed on a GPU, the SPEC loaded) before it is dropped.
START_TIMEOUT_S = 300.0
#: Seconds the driver gives its workers, once the run ends, to close, and to busy ones (interrupted:
#: killed) to hand over what they stored.
STOP_TIMEOUT_S = 60.0
#: How an actor's temporary storage root is named (in the temporary directory of its node).
ROOT_PREFIX = "tdl-ray-tune-"


class RayUnavailable(RuntimeError):
    """Ray is not installed (the ``distributed`` extra), or the cluster cannot be reached."""


class CaseRunner:
    """A Ray actor's state: the SPEC's cases and, from its first batch on, a temporary storage root
    seeded with ``known`` (an actor dropped before it got work leaves no directory behind; its name
    is chosen at once, for the driver to collect it if the actor is killed in a batch). The package's
    warnings are kept (:func:`~triton_dejavu_like._log.encode_warning`) and go with the next answer."""

    def __init__(self, spec: str, known: dict[str, bytes], layers: Sequence[dict[str, bytes]] = ()) -> None:
        self._warnings: list[dict[str, Any]] = []
        self._warnings_lock = threading.Lock()  # warnings may come from any thread of the actor
        relay_warnings(self._keep_warning)  # also those of loading the SPEC (a kernel's decoration)
        self.cases = {case.name: case for case in load_cases(spec)}
        self.known: dict[str, bytes] | None = known
        self.layers = list(layers)  # the driver's read-only layers, each as read_tree's files
        self.root = Path(tempfile.gettempdir()) / f"{ROOT_PREFIX}{uuid.uuid4().hex}"
        self.where = f"ray node {os.uname().nodename} pid {os.getpid()}"

    def ready(self) -> dict[str, Any]:
        """Answers once the actor runs (placed on a GPU, the SPEC loaded): where it runs, its node
        (Ray's id) and root, and the warnings of loading the SPEC."""
        import ray

        node = ray.get_runtime_context().get_node_id()
        return {"where": self.where, "node": node, "root": str(self.root), "warnings": self._take_warnings()}

    def run(self, names: Sequence[str]) -> dict[str, Any]:
        """Tune ``names``; ``{"results": [CaseResult JSON], "files": {relative path: bytes},
        "warnings": [encoded warning]}``."""
        root = self.root
        if self.known is not None:
            root.mkdir(mode=0o700)
            merging.seed(root, self.known)
            self.known = None
            self._seed_layers()
        results = [run_case_named(self.cases, name, root, self.where) for name in names]
        used = sorted({f for r in results for f in r.files})
        files = {f: (root / f).read_bytes() for f in used if (root / f).is_file()}
        return {"results": [r.to_json() for r in results], "files": files, "warnings": self._take_warnings()}

    def _seed_layers(self) -> None:
        """The driver's read-only layers, written beside the root and named by this process's
        ``TRITON_DEJAVU_STORAGE`` (after the root, in their order): what a layer holds is restored
        here, as on the driver, not tuned again."""
        folders = []
        for i, files in enumerate(self.layers):
            folder = layers_folder(self.root) / str(i)
            folder.mkdir(parents=True)
            merging.seed(folder, files)
            folders.append(str(folder))
        self.layers = []
        os.environ[_env.STORAGE] = os.pathsep.join([str(self.root), *folders])

    def close(self) -> None:
        remove_root(self.root)

    def _keep_warning(
        self, category: type[DejavuWarning], subject: str, message: str, args: tuple[Any, ...]
    ) -> None:
        with self._warnings_lock:
            self._warnings.append(encode_warning(category, subject, message, args))

    def _take_warnings(self) -> list[dict[str, Any]]:
        with self._warnings_lock:
            taken, self._warnings = self._warnings, []
        return taken


def collect_root(root: str) -> dict[str, bytes]:
    """A Ray task on the node of an actor killed in a batch: the cache files its temporary ``root``
    holds, as bytes (for the driver to validate and merge), and the root removed."""
    path = Path(root)
    if not path.name.startswith(ROOT_PREFIX):  # never remove anything but an actor's root
        raise ValueError(f"not a tuning worker's root: {root}")
    try:
        return merging.read_tree(path)
    finally:
        remove_root(path)


def layers_folder(root: Path) -> Path:
    """Where an actor whose temporary root is ``root`` keeps its copies of the read-only layers."""
    return root.with_name(f"{root.name}-layers")


def remove_root(root: Path) -> None:
    """Remove an actor's temporary root and its copies of the layers."""
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(layers_folder(root), ignore_errors=True)


def run_case_named(cases: dict[str, Any], name: str, root: Path, worker: str) -> CaseResult:
    if name not in cases:
        return CaseResult(name, "failed", error="the SPEC has no such case on this worker", worker=worker)
    return run_case(cases[name], root, worker=worker)


def worker_env() -> dict[str, str]:
    """The variables a Ray worker gets: the package's settings, and a PYTHONPATH that finds this
    package, the SPEC (the working directory) and whatever the driver's PYTHONPATH holds (Ray's
    ``env_vars`` replace the worker's own: without it, a Ray found there cannot start a worker)."""
    return {**_env.for_workers(), "PYTHONPATH": worker_pythonpath(os.environ.get("PYTHONPATH", ""))}


def _init_keeping_sigterm(ray: Any, address: str | None) -> None:
    """``ray.init``, then the SIGTERM handler it replaced is put back: Ray's exits at once (status 1,
    or an abort), where ``tune``'s stops the run as Ctrl-C does (the actors' results merged, exit
    status 130). Only the main thread has handlers to keep."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        ray.init(address=address, log_to_driver=True)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


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
            _init_keeping_sigterm(ray, address)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RayUnavailable(f"cannot connect to Ray at {address or 'a local cluster'}: {exc}") from exc
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus < 1:
        raise RayUnavailable(
            "the Ray cluster has no GPU, and each tuning worker needs one (did Ray detect them? "
            "`ray start --head --num-gpus N` names them)"
        )
    if os.environ.get("TRITON_INTERPRET", "").strip():
        warn_once(
            DejavuConfigWarning,
            "TRITON_INTERPRET --ray",
            "TRITON_INTERPRET=%r is set here and not passed to the Ray workers: each node's own "
            "environment decides whether its kernels run in Triton's interpreter (set it where the "
            "node starts, `TRITON_INTERPRET=1 ray start ...`, to tune the interpreter there)",
            os.environ["TRITON_INTERPRET"][:40],
        )
    # the actors' working directory is not this one: a file SPEC named relative to it fails there
    scheduler = _Scheduler(ray, absolute_spec(spec), target, on_result, start_timeout_s)
    scheduler.todo.extend(batches(names, batch_size))
    for _ in range(min(gpus, len(scheduler.todo))):
        scheduler.start_one()
    try:
        scheduler.run()
    finally:
        scheduler.shut_down()
        if scheduler.kept is not None:
            scheduler.errors.append(kept_for_merge(target, [scheduler.kept]))
    return scheduler.results, scheduler.problems, scheduler.errors


class _Scheduler:
    """One ``run_on_ray``: starts actors, hands each started one its next batch, merges answers.

    ``running`` maps each awaited reference to its actor and batch; the batch is None while the
    actor starts (the reference is its ``ready()`` call, due by ``deadlines[ref]``). ``homes`` maps
    each started actor to its node and temporary root."""

    def __init__(
        self,
        ray: Any,
        spec: str,
        target: Path,
        on_result: Callable[[CaseResult], None],
        start_timeout_s: float,
    ) -> None:
        self.ray, self.spec, self.target = ray, spec, target
        self.on_result, self.start_timeout_s = on_result, start_timeout_s
        self.runtime_env = {"env_vars": worker_env()}
        self.actor = ray.remote(num_gpus=1, max_restarts=0, max_task_retries=0)(CaseRunner).options(
            runtime_env=self.runtime_env
        )
        self.collector = ray.remote(num_cpus=0, max_retries=0)(collect_root)
        self.known = ray.put(merging.read_tree(target))
        layers = [merging.read_tree(layer) for layer in _env.storage_roots()[1:]]
        # sent to the actors, which restore what they hold; what an actor still tunes that a layer
        # holds (the layer changed meanwhile) is not merged
        self.layers = ray.put(layers)
        self.held = merging.held_keys(layers)
        self.todo: deque[list[str]] = deque()
        self.actors: list[Any] = []
        self.idle: list[Any] = []
        self.running: dict[Any, tuple[Any, list[str] | None]] = {}
        self.deadlines: dict[Any, float] = {}
        self.homes: dict[Any, tuple[str, str]] = {}
        self.lost: list[Any] = []  # actors whose batch failed: their roots are collected at the end
        self.results: list[CaseResult] = []
        self.problems: list[inventory.Problem] = []
        self.errors: list[str] = []
        self.kept: Path | None = None  # a local folder holding the answers that could not be merged
        self._kept_count = 0

    def start_one(self) -> None:
        runner = self.actor.remote(self.spec, self.known, self.layers)
        self.actors.append(runner)
        ref = runner.ready.remote()
        self.running[ref] = (runner, None)
        self.deadlines[ref] = time.monotonic() + self.start_timeout_s

    def run(self) -> None:
        while self.todo or any(batch is not None for _, batch in self.running.values()):
            while self.todo and self.idle:
                runner, batch = self.idle.pop(), self.todo.popleft()
                self.running[runner.run.remote(batch)] = (runner, batch)
            if not self.running:  # every worker failed to start: nothing will run what is left
                last = self.errors[-1] if self.errors else "none was started"
                self._lose([n for b in self.todo for n in b], f"not run: no Ray worker could start ({last})")
                self.todo.clear()
                return
            wait_s = min((d - time.monotonic() for d in self.deadlines.values()), default=None)
            done, _ = self.ray.wait(
                list(self.running), num_returns=1, timeout=None if wait_s is None else max(0.0, wait_s)
            )
            if not done:  # a starting worker is overdue: the cluster cannot place it, or it hangs
                now = time.monotonic()
                for ref in [r for r, d in self.deadlines.items() if d <= now]:
                    self._not_started(
                        ref, f"not ready within {self.start_timeout_s:g} s (no free GPU for it?)"
                    )
                continue
            (ref,) = done
            runner, batch = self.running[ref]  # taken out by the handler: until then shut_down sees it
            if batch is None:
                self._started(ref, runner)
            else:
                self._answered(ref, runner, batch)

    def _started(self, ref: Any, runner: Any) -> None:
        """A worker finished starting, or failed to."""
        del self.running[ref], self.deadlines[ref]
        try:
            answer = self.ray.get(ref)
            self.homes[runner] = (answer["node"], answer["root"])
        except (self.ray.exceptions.RayError, KeyError, TypeError) as exc:
            # Ray's message ends with the exception the actor's __init__ raised
            self.ray.kill(runner)
            self.errors.append(f"a Ray worker did not start: {_line(exc, -1, type(exc).__name__)}")
        else:
            self.idle.append(runner)
            self._reissue(answer.get("warnings"), f"ray worker {ref.hex()[:12]}")

    def _not_started(self, ref: Any, why: str) -> None:
        runner, _ = self.running.pop(ref)
        del self.deadlines[ref]
        self.ray.kill(runner)
        self.errors.append(f"a Ray worker did not start: {why}")

    def _answered(self, ref: Any, runner: Any, batch: list[str]) -> None:
        ray = self.ray
        origin = f"ray worker {ref.hex()[:12]}"
        try:
            answer = ray.get(ref)
            got = [CaseResult.from_json(r) for r in answer["results"]]
            files = _cache_files(answer["files"])
            # case by case, as a worker process's: a case whose files cannot be merged fails
            got = [self._merge_case(result, files, origin) for result in got]
            self.idle.append(runner)  # idle, then no longer running: never out of shut_down's sight
            del self.running[ref]
        except (ray.exceptions.RayError, ValueError, KeyError, TypeError, AttributeError) as exc:
            self.lost.append(runner)
            del self.running[ref]
            ray.kill(runner)
            self._lose(batch, f"Ray task lost: {type(exc).__name__}: {_line(exc, 0, '')}")
            if self.todo:  # its GPU is free again: a fresh worker takes the next batch
                self.start_one()
            return
        self._reissue(answer.get("warnings"), origin)
        self._report(got)

    def _merge_case(self, result: CaseResult, files: dict[str, bytes], origin: str) -> CaseResult:
        problems, in_layer = self._merge({f: files[f] for f in result.files if f in files}, origin)
        return not_merged(_restorable(result, in_layer), self.target, problems)

    def _merge(self, files: dict[str, bytes], origin: str) -> tuple[list[inventory.Problem], set[str]]:
        """Merge cache files a worker returned as bytes (validated, never unpickled). Files that
        cannot be merged (the target cannot be written) are kept in a local folder, the only copy
        of the results once the actors' roots are removed; the run's errors name it and the
        ``merge`` command."""
        problems, in_layer = merging.merge_bytes(self.target, files, origin, self.held)
        add_problems(self.problems, problems)
        if problems:
            if self.kept is None:
                self.kept = Path(tempfile.mkdtemp(prefix="tdl-tune-"))
            self._kept_count += 1
            merging.seed(self.kept / f"answer-{self._kept_count}", files)
        return problems, in_layer

    def _reissue(self, warnings: Any, origin: str) -> None:
        """Issue a worker's warnings here, where the user sees them: once for all workers."""
        for warning in warnings if isinstance(warnings, list) else [warnings]:
            if not reissue_warning(warning):
                self.errors.append(f"{origin}: unreadable warning {str(warning)[:200]!r}")

    def _lose(self, names: Sequence[str], why: str) -> None:
        self._report([CaseResult(name, "lost", error=why, worker="ray") for name in names])

    def _report(self, got: list[CaseResult]) -> None:
        for result in got:
            self.on_result(result)
        self.results += got

    def shut_down(self) -> None:
        """Close (remove its temporary root) and kill every actor, within ``STOP_TIMEOUT_S``. A
        worker still starting may never start (no GPU for it), so only one that answered is asked to
        close. One running a batch (the run was interrupted, or stopped by an error) is killed at
        once; what it stored, and what the actors whose batch failed stored, is collected from their
        nodes and merged."""
        ray = self.ray
        deadline = time.monotonic() + STOP_TIMEOUT_S
        starting = list(self.deadlines)
        answered = _wait_all(ray, starting, time.monotonic())
        busy = {ref: r for ref, (r, batch) in self.running.items() if batch is not None}
        try:
            closing = [r.close.remote() for r in [*self.idle, *(self.running[ref][0] for ref in answered)]]
            self._collect(busy, deadline)
            _wait_all(ray, closing, deadline)
        finally:  # whatever went wrong above, no actor outlives the run
            for runner in self.actors:
                ray.kill(runner)

    def _collect(self, busy: dict[Any, Any], deadline: float) -> None:
        """Kill the actors running a batch (``ray.cancel`` does not stop a running task of a sync
        actor: it only flags it), then merge the cache files of
        their roots and of those of the actors whose batch failed (a crash keeps what the actor
        stored before it, as a worker process's does), read and removed by a task on each one's node
        once its process is gone (its references fail then)."""
        if not busy and not self.lost:
            return
        ray = self.ray
        for runner in busy.values():
            ray.kill(runner)
        _wait_all(ray, list(busy), deadline)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        tasks: dict[str, Any] = {}  # root -> its collecting task
        for runner in [*busy.values(), *self.lost]:
            node, root = self.homes[runner]
            try:
                on_node = NodeAffinitySchedulingStrategy(node, soft=False)
                tasks[root] = self.collector.options(
                    runtime_env=self.runtime_env, scheduling_strategy=on_node
                ).remote(root)
            except (ray.exceptions.RayError, ValueError) as exc:  # a node Ray no longer knows
                _not_merged(root, exc)
        done = set(_wait_all(ray, list(tasks.values()), deadline))
        for root, ref in tasks.items():
            try:
                if ref not in done:
                    raise TimeoutError(f"no answer within {STOP_TIMEOUT_S:g} s")
                self._merge(_cache_files(ray.get(ref)), f"ray worker {root}")
            except (ray.exceptions.RayError, TimeoutError, TypeError) as exc:
                _not_merged(root, exc)


def _restorable(result: CaseResult, in_layer: set[str]) -> CaseResult:
    """A case that tuned keys a read-only layer holds (not merged): those are not reported tuned,
    and with none left the case is ``stored``, as in a process that restores them from the layer."""
    tuned = [key for key in result.tuned if key not in in_layer]
    if result.status != "tuned" or len(tuned) == len(result.tuned):
        return result
    return dataclasses.replace(result, tuned=tuned, status="tuned" if tuned else "stored")


def _cache_files(files: Any) -> dict[str, bytes]:
    """What a worker returned as its cache files, checked: relative paths and their bytes."""
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and isinstance(v, bytes) for k, v in files.items()
    ):
        raise TypeError("the worker returned cache files that are not bytes")
    return files


def _not_merged(root: str, exc: BaseException) -> None:
    warn_once(
        DejavuStorageWarning,
        root,
        "the keys a stopped Ray worker stored in %s on its node were not merged (%s): "
        "a new `tune` run tunes them again; remove the folder if it is left there",
        root,
        _line(exc, -1, type(exc).__name__),
    )


def _wait_all(ray: Any, refs: list[Any], deadline: float) -> list[Any]:
    """The references of ``refs`` that are done by ``deadline`` (a ``time.monotonic()`` time)."""
    if not refs:
        return []
    return ray.wait(refs, num_returns=len(refs), timeout=max(0.0, deadline - time.monotonic()))[0]


def _line(exc: BaseException, which: int, empty: str) -> str:
    """One line of an exception's message (Ray's span many; ``empty`` if it has none), cut to 300
    characters."""
    return (str(exc).strip().splitlines() or [empty])[which][:300]

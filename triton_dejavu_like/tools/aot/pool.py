"""Cases spread over local worker processes: one per GPU (``--gpus``) or N on the CPU (``--workers``).

Each worker is a fresh Python process (:mod:`.worker`) with its own storage root, seeded with what
the target already stores; cases are handed out one at a time, so a fast worker takes more. After
every case its cache files are merged into the target, and each worker's whole root once more at the
end, also when the run is interrupted (keeping what a lost or stopped worker stored before). A
worker that dies loses only the case it was running (reported "lost", not retried: it may be what
killed the worker); the others go on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..._log import reissue_warning
from ...store import inventory
from . import merging
from .run import CaseResult

PACKAGE_PARENT = str(Path(__file__).resolve().parents[3])


def worker_pythonpath(existing: str) -> str:
    """A worker's PYTHONPATH: this package, the SPEC's directory (the working directory), then
    ``existing`` (the driver's: where torch, triton or Ray may have been found)."""
    return os.pathsep.join(p for p in (PACKAGE_PARENT, os.getcwd(), existing) if p)


# Ctrl-C in a terminal interrupts the whole process group, also a worker still importing torch and
# triton: ``python -m`` would print that import's traceback; this leaves as the worker's own code does
_WORKER_BOOT = (
    "import sys\n"
    "try:\n"
    "    from triton_dejavu_like.tools.aot.worker import main\n"
    "    sys.exit(main(sys.argv[1:]))\n"
    "except KeyboardInterrupt:\n"
    "    sys.exit(130)\n"
)


def worker_argv(args: Sequence[str]) -> list[str]:
    """The command line of a worker process (:mod:`.worker`) given its arguments."""
    return [sys.executable, "-c", _WORKER_BOOT, *args]


@dataclass
class Slot:
    """Where one worker runs: its name in reports and the environment it adds."""

    name: str
    env: dict[str, str] = field(default_factory=dict)


def gpu_slots(gpus: Sequence[str]) -> list[Slot]:
    return [Slot(f"gpu {g}", {"CUDA_VISIBLE_DEVICES": g}) for g in gpus]


def cpu_slots(count: int) -> list[Slot]:
    return [Slot(f"worker {i}") for i in range(count)]


@dataclass
class _Worker:
    slot: Slot
    root: Path
    process: subprocess.Popen[str]
    case: str | None = None
    finished: bool = False


OnResult = Callable[[CaseResult], None]


class WorkerPool:
    """Run the cases of ``spec`` named ``names`` on ``slots``, merging into ``target``."""

    def __init__(self, spec: str, slots: Sequence[Slot], target: Path, on_result: OnResult) -> None:
        if not slots:
            raise ValueError("a worker pool needs at least one slot")
        self.spec, self.slots, self.target, self.on_result = spec, list(slots), target, on_result
        self.problems: list[inventory.Problem] = []
        self.errors: list[str] = []  # a worker that could not load the SPEC
        self._events: queue.Queue[tuple[int, str | None]] = queue.Queue()
        self.pids: list[int] = []

    def run(self, names: Sequence[str]) -> list[CaseResult]:
        results: list[CaseResult] = []
        pending = deque(names)
        tmp = Path(tempfile.mkdtemp(prefix="tdl-tune-"))
        workers: list[_Worker] = []
        try:
            known = merging.read_tree(self.target)
            for i, slot in enumerate(self.slots):  # one by one: those started are stopped if the next fails
                workers.append(self._start(i, slot, tmp / f"w{i}", known))
            while not all(w.finished for w in workers):
                index, line = self._events.get()
                worker = workers[index]
                if line is None:
                    self._finish(worker, results)
                    continue
                message = self._parse(worker, line)
                if message is None:
                    continue
                if message["kind"] == "warning":
                    self._warn(worker, message)
                    continue
                if message["kind"] == "result":
                    results.append(self._take(worker, message["result"]))
                elif message["kind"] == "error":
                    self.errors.append(f"{worker.slot.name}: {message.get('message')}")
                    _close(worker.process.stdin)
                    continue
                self._assign(worker, pending)
            for name in pending:
                results.append(self._lost(name, None, "not run: every worker was lost"))
        finally:
            for w in workers:
                if w.process.poll() is None:
                    w.process.kill()
                    w.process.wait()
            self._merge_all(workers, tmp)  # also when interrupted: what the running cases stored is kept
        return results

    def _merge_all(self, workers: Sequence[_Worker], tmp: Path) -> None:
        """Merge each worker's whole root into the target, then remove them, unless one could not be
        merged: then they are kept for a merge by hand (the error names them and the command)."""
        unmerged = []
        try:
            for w in workers:
                problems = merging.merge_paths(self.target, w.root)
                add_problems(self.problems, problems)
                if problems:
                    unmerged.append(w.root)
        finally:
            if unmerged:
                self.errors.append(kept_for_merge(self.target, unmerged))
            else:
                shutil.rmtree(tmp, ignore_errors=True)

    # --- the workers ---------------------------------------------------------------------------------

    def _start(self, index: int, slot: Slot, root: Path, known: dict[str, bytes]) -> _Worker:
        root.mkdir(parents=True)
        merging.seed(root, known)
        env = dict(os.environ)
        env.update(slot.env)
        env["PYTHONPATH"] = worker_pythonpath(env.get("PYTHONPATH", ""))
        read_end, write_end = os.pipe()
        try:
            process = subprocess.Popen(
                worker_argv(
                    ["--spec", self.spec, "--root", str(root), "--fd", str(write_end), "--name", slot.name]
                ),
                stdin=subprocess.PIPE,
                stdout=sys.stderr.fileno() if _has_fileno(sys.stderr) else None,
                env=env,
                pass_fds=(write_end,),
                text=True,
            )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        self.pids.append(process.pid)
        reader = threading.Thread(target=self._read, args=(index, read_end), daemon=True)
        reader.start()
        return _Worker(slot, root, process)

    def _read(self, index: int, fd: int) -> None:
        with os.fdopen(fd, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                self._events.put((index, line))
        self._events.put((index, None))

    def _parse(self, worker: _Worker, line: str) -> dict[str, Any] | None:
        try:
            message = json.loads(line)
            if not isinstance(message, dict) or message.get("kind") not in (
                "ready",
                "result",
                "error",
                "warning",
            ):
                raise ValueError("unknown message")
        except ValueError:
            self.errors.append(f"{worker.slot.name}: unreadable message {line[:200]!r}")
            return None
        return message

    def _warn(self, worker: _Worker, message: dict[str, Any]) -> None:
        """Issue a worker's warning here, where the user sees it: once for all workers."""
        if not reissue_warning(message):
            self.errors.append(f"{worker.slot.name}: unreadable warning {str(message)[:200]!r}")

    def _assign(self, worker: _Worker, pending: deque[str]) -> None:
        worker.case = pending.popleft() if pending else None
        try:
            if worker.case is None:
                _close(worker.process.stdin)
            else:
                assert worker.process.stdin is not None
                worker.process.stdin.write(json.dumps(worker.case) + "\n")
                worker.process.stdin.flush()
        except OSError:  # the worker is gone: its end of the pipe reports it
            pass

    def _take(self, worker: _Worker, data: Any) -> CaseResult:
        try:
            result = CaseResult.from_json(data)
        except ValueError as exc:
            worker.case, name = None, worker.case or "?"
            return self._lost(name, worker, f"unreadable result: {exc}")
        problems = merging.merge_paths(self.target, worker.root, result.files)
        add_problems(self.problems, problems)
        result = not_merged(result, self.target, problems)
        worker.case = None
        self.on_result(result)
        return result

    def _finish(self, worker: _Worker, results: list[CaseResult]) -> None:
        status = worker.process.wait()
        worker.finished = True
        _close(worker.process.stdin)
        if worker.case is not None:
            results.append(self._lost(worker.case, worker, f"{worker.slot.name} exited with status {status}"))
            worker.case = None

    def _lost(self, name: str, worker: _Worker | None, why: str) -> CaseResult:
        result = CaseResult(name, "lost", error=why, worker=worker.slot.name if worker else None)
        self.on_result(result)
        return result


def add_problems(into: list[inventory.Problem], problems: Sequence[inventory.Problem]) -> None:
    """Each problem once: every case of a target that cannot be written meets the same one."""
    for problem in problems:
        if problem not in into:
            into.append(problem)


def not_merged(result: CaseResult, target: Path, problems: Sequence[inventory.Problem]) -> CaseResult:
    """A tuned case whose cache files could not be merged into ``target`` fails, as a case run in
    this process whose results are not stored: "tuned but not merged"."""
    if not problems or result.status != "tuned":
        return result
    reason = f"tuned but not merged into {target}: {problems[0].reason}"
    return dataclasses.replace(result, status="failed", error=reason[:2000])


def kept_for_merge(target: Path, kept: Sequence[Path]) -> str:
    """The error naming the stores kept because they could not be merged, and the command that
    merges them once the target can be written."""
    roots = " ".join(str(r) for r in kept)
    return (
        f"results not merged into {target} are kept in {roots}; merge them with "
        f"python -m triton_dejavu_like merge {roots} --root {target}"
    )


def _close(stream: IO[str] | None) -> None:
    if stream is not None:
        with contextlib.suppress(OSError):
            stream.close()


def _has_fileno(stream: Any) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True

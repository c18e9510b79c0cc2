"""Isolated benchmarking: compile and time candidates in a worker process that may crash or hang.

A candidate that kills its process (a segfault, ``os._exit``, an illegal memory access that poisons
the CUDA context) or gives no result within the timeout is ruled out with the reason; the worker is
replaced and tuning goes on. One worker serves the candidates of a tuning run until it dies, so a
space of hundreds of candidates costs a few worker starts, not hundreds.

How a worker gets the kernel and the call
- ``fork`` (the default under the interpreter, while CUDA is not initialised in this process): the
  worker is a copy of this process and inherits the kernel, the arguments (grid function included),
  the hooks, the timer and the numerical check; nothing is pickled.
- ``forkserver`` (the default on a GPU) and ``spawn``: a fresh process cannot inherit a CUDA context.
  It imports the module that defines the kernel and finds the autotuner there by the kernel's
  qualified name, so the decorated kernel must be a module-level global (a script run as
  ``__main__`` works when its work sits under ``if __name__ == "__main__":``; a kernel defined inside
  a function, or typed into an interactive session, fails with :class:`IsolationError` before any
  worker starts). The hooks, ``do_bench``, timing policy and ``reference_fn`` are the worker's own
  autotuner's, made by the same decorator. Tensors travel by CUDA IPC (shared memory on the CPU)
  through torch's multiprocessing reductions; other arguments must be picklable. The launch grid
  is computed here for each candidate, so grid functions need not be picklable (an error of the
  grid function ends tuning here, as in a launch in process).

Either way, the worker copies the storage of every tensor argument (views and aliasing kept) before
it runs anything and lets go of the originals: a candidate that writes out of bounds corrupts only
the worker's copies, and the hooks (``reset_to_zero``, ``restore_value``, the tuner's and each
config's ``pre_hook``) run on those copies, in the worker, around each launch.
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator, Sequence
from multiprocessing.connection import wait
from typing import Any

from ... import _env
from ..._compat import Config
from ..._log import DejavuTuningWarning, DejavuWarning, warn_once
from ...codec import EncodingError, config_id, encode_config
from ...store.identity import callable_name
from ..checked import rule_out_unwritten
from ..evaluate import Evaluator
from ..forking import forking, kill_descendants
from ..launch import Failure, LaunchContext, TuningStopped, one_line
from ..recipe import KernelRecipe
from ._cuda import current_device
from .settings import (
    FORKSERVER_PRELOAD,
    GRACE_S,
    STARTUP_TIMEOUT_S,
    CandidateCrashed,
    CandidateTimedOut,
    Description,
    IsolationError,
)
from .transfer import (
    KernelRef,
    launch_grid,
    map_tensors,
    private_copies,
    unpack_exception,
)
from .worker import ForkBootstrap, RemoteBootstrap, worker_main

log = logging.getLogger(__name__)

# --- the parent's side -------------------------------------------------------------------------------


class IsolatedEvaluator(Evaluator):
    """Times candidates in a worker process; a crash or a timeout rules the candidate out.

    The numerical check, when given, runs in the worker (where the outputs are); the candidate that
    became the reference (measured, or run untimed for it: :meth:`adopt_reference`) is remembered
    here, and a replacement worker recomputes the reference from it before timing anything. So are
    the candidates timed before there was a reference (they wrote nothing), and the verdict on them
    that the worker gave with the reference: a worker that timed them may be gone when the search
    ends.
    """

    def __init__(self, ctx: LaunchContext, *, recipe: KernelRecipe) -> None:
        super().__init__(ctx)
        self.timeout_s = recipe.isolation.timeout()
        self.start_method = recipe.isolation.method(ctx.interpreted)
        self.check = recipe.check
        self._link = _Link(ctx, recipe, self.start_method)
        self._worker: _Worker | None = None
        self._broken: IsolationError | None = None
        self._reference: Description | None = None
        self._unchecked: list[Config] = []
        self._unwritten_mismatch: str | None = None
        self._descriptions: dict[Config, Description] = {}
        #: Candidates whose launch grid the grid function failed to give (computed here for a
        #: forkserver/spawn worker): measuring one ends tuning.
        self._stops: dict[Config, TuningStopped] = {}
        #: Candidates that killed their worker or timed out while run for the numerical reference:
        #: ruled out with that reason, not run again (another worker start, another timeout).
        self._lost: dict[Config, CandidateCrashed | CandidateTimedOut] = {}

    # --- the Evaluator interface --------------------------------------------------------------------

    def prepare(self, configs: Sequence[Config]) -> dict[Config, Failure]:
        """Start the worker and let it compile the candidates (in parallel where Triton can); the
        worker's failures come back as themselves where they can be rebuilt here, else as their
        one-line reasons. A candidate whose grid function raised ends the batch sent: the
        candidates before it are timed first, as upstream's would be, then timing it ends tuning
        (:meth:`measure`)."""
        ruled_out: dict[Config, Failure] = {}
        sendable: list[Config] = []
        for config in configs:
            lost = self._lost.get(config)
            if lost is not None:
                ruled_out[config] = lost
                continue
            try:
                self._describe(config)
                sendable.append(config)
            except IsolationError as exc:
                ruled_out[config] = exc
            except TuningStopped:
                break
        if not sendable:
            return ruled_out
        self._ensure_worker()  # a worker that cannot start fails the tuning here, with the reason
        request = ("prepare", [self._describe(c) for c in sendable])
        try:
            reply = self._request(request, self._compile_timeout(len(sendable)), "compiling the candidates")
        except TuningStopped:  # the numerical check's reference_fn (or the hook before it) failed
            raise
        except Exception as exc:  # compiling ahead is an optimisation: each is compiled when timed
            warn_once(
                DejavuTuningWarning,
                self.ctx.kernel_name,
                "%s: compiling the candidates in a worker failed (%s); each is compiled when it is timed",
                self.ctx.kernel_name,
                one_line(exc),
            )
            return ruled_out
        for index, packed in reply[1].items():
            ruled_out[sendable[index]] = packed.failure()
        return ruled_out

    def measure(self, config: Config) -> list[float]:
        lost = self._lost.get(config)
        if lost is not None:
            raise type(lost)(str(lost))
        description = self._describe(config)
        _, timings, became_reference, unchecked, mismatch, number = self._request(
            ("measure", description), self.timeout_s, "compiling and timing it"
        )
        self.ctx.benchmarker.answers_numbers = number  # as the worker's timing function answered
        if became_reference:
            self._reference, self._unwritten_mismatch = description, mismatch
        if unchecked:
            self._unchecked.append(config)
        return timings

    def refine(self, configs: Sequence[Config]) -> dict[Config, list[float]] | None:
        request = ("refine", [self._describe(c) for c in configs])
        try:
            _, timings = self._request(request, self.timeout_s * max(1, len(configs)), "re-timing finalists")
        except TuningStopped:
            raise
        except Exception as exc:  # the finalists keep their first timings
            warn_once(
                DejavuTuningWarning,
                self.ctx.kernel_name,
                "%s: re-timing the finalists in a worker failed (%s); keeping their first timings",
                self.ctx.kernel_name,
                one_line(exc),
            )
            return None
        return None if timings is None else dict(zip(configs, timings))

    def adopt_reference(self, config: Config) -> bool:
        if self.check is None:
            return False
        description = self._describe(config)
        what = "computing the numerical reference"
        try:
            reply = self._request(("reference", description), self.timeout_s, what)
        except (CandidateCrashed, CandidateTimedOut) as exc:
            self._lost[config] = exc
            raise
        _, has_reference, became_reference = reply
        if became_reference:
            self._reference = description
        return has_reference

    def late_rule_outs(self) -> dict[Config, str]:
        return rule_out_unwritten(
            self.ctx.kernel_name,
            self.check.outputs if self.check is not None else None,
            self._unchecked,
            reference=self._reference is not None,
            mismatch=self._unwritten_mismatch,
        )

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    # --- workers ------------------------------------------------------------------------------------

    def _describe(self, config: Config) -> Description:
        """What a worker is sent for ``config`` (made once); :class:`IsolationError` if it cannot be
        sent, :class:`TuningStopped` (each time) if the grid function raised for it."""
        description = self._descriptions.get(config)
        if description is None:
            stop = self._stops.get(config)
            if stop is not None:
                raise stop
            try:
                description = self._descriptions[config] = self._link.describe(config)
            except TuningStopped as exc:
                self._stops[config] = exc
                raise
        return description

    def _compile_timeout(self, n: int) -> float:
        return self.timeout_s * max(1, math.ceil(n / max(1, _env.compile_threads())))

    def _request(self, message: tuple[Any, ...], timeout_s: float, what: str) -> tuple[Any, ...]:
        """The worker's reply to ``message``; a candidate's error is raised here as itself, an error
        that does not depend on the candidate as :class:`TuningStopped`."""
        worker = self._ensure_worker()
        try:
            reply = _not_stopped(worker.call(message, timeout_s, what))
        except (CandidateCrashed, CandidateTimedOut):
            self._discard()
            raise
        if reply[0] == "error":
            _, packed, context_error = reply
            if context_error is not None:
                self._discard()
                raise CandidateCrashed(f"CUDA context lost: {context_error}")
            raise unpack_exception(packed)
        return reply

    def _ensure_worker(self) -> _Worker:
        if self._broken is not None:
            raise self._broken
        if self._worker is None:
            try:
                self._worker = self._start()
            except IsolationError as exc:
                self._broken = exc
                raise
        return self._worker

    def _start(self) -> _Worker:
        name = self.ctx.kernel_name
        begin = time.perf_counter()
        worker = self._link.start(self._reference)
        with _starting(worker, name):
            reply = worker.receive(STARTUP_TIMEOUT_S, "starting")
            if reply[0] != "ready":
                raise IsolationError(f"{name}: a worker could not start: {reply[1]}")
            if self.check is not None:
                what = "computing the numerical reference"
                reply = _not_stopped(worker.call(("prepare", []), self.timeout_s, what))
                if reply[0] == "error":
                    raise IsolationError(
                        f"{name}: a worker could not compute the numerical reference: {reply[1].reason}"
                    )
        log.debug(
            "%s: worker %s started (%s) in %.3f s",
            name,
            worker.process.pid,
            self.start_method,
            time.perf_counter() - begin,
        )
        return worker

    def _discard(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker = None


class _Link:
    """How this process starts workers and names candidates to them, by start method."""

    def __init__(self, ctx: LaunchContext, recipe: KernelRecipe, method: str) -> None:
        self.ctx, self.recipe, self.method = ctx, recipe, method
        self.remote = method != "fork"
        self.ref = KernelRef.of(recipe) if self.remote else None
        self.grid_here = self.remote and callable(ctx.kwargs.get("grid"))
        self._hook_owners: dict[str, int] | None = None

    def describe(self, config: Config) -> Description:
        hook = None
        if config.pre_hook is not None:
            hook = self._hook_owner(config)
        grid = launch_grid(self.ctx, config) if self.grid_here else None
        try:
            return encode_config(config), hook, grid
        except EncodingError as exc:
            raise IsolationError(f"it cannot be sent to a worker ({exc})") from exc

    def _hook_owner(self, config: Config) -> int:
        """The index of the kernel config with this candidate's fields and pre_hook."""
        if self._hook_owners is None:
            self._hook_owners = {
                config_id(c): i for i, c in enumerate(self.recipe.configs) if c.pre_hook is not None
            }
        index = self._hook_owners.get(config_id(config))
        if index is None or self.recipe.configs[index].pre_hook != config.pre_hook:
            raise IsolationError(
                "its pre_hook is not that of one of the kernel's configs (made by early_config_prune?), "
                "so a worker cannot find it"
            )
        return index

    def start(self, reference: Description | None) -> _Worker:
        """A started worker; it answers ``ready`` (or ``failed``) once it can take candidates."""
        if not self.remote:
            return _Worker("fork", ForkBootstrap(self.ctx, self.recipe, reference))
        assert self.ref is not None
        timer = callable_name(self.recipe.timing.do_bench)
        bootstrap = RemoteBootstrap(self.ref, dict(os.environ), current_device(), reference, timer)
        worker = _Worker(self.method, bootstrap)
        with _starting(worker, self.ctx.kernel_name):
            hello = worker.receive(STARTUP_TIMEOUT_S, "starting")
            if hello[0] != "hello":
                raise IsolationError(f"{self.ctx.kernel_name}: a worker could not start: {hello[1]}")
            self._send_call(worker)
        return worker

    def _send_call(self, worker: _Worker) -> None:
        kwargs = dict(self.ctx.kwargs)
        if self.grid_here:
            del kwargs["grid"]
        # CPU tensors are sent through shared memory, which would move the caller's own storage there
        args, kwargs = private_copies((self.ctx.args, kwargs), lambda t: t.device.type == "cpu")
        # the others go as they are (CUDA IPC), but torch refuses to send one that autograd tracks
        # and that is not a leaf (an activation inside a model's forward): the worker needs its memory only
        args, kwargs = map_tensors((args, kwargs), lambda t: t.detach() if t.requires_grad else t)
        try:
            worker.conn.send(("call", args, kwargs))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            raise CandidateCrashed(worker.death()) from None
        except Exception as exc:
            raise IsolationError(self._unsendable(args, kwargs, exc)) from exc

    def _unsendable(self, args: tuple[Any, ...], kwargs: dict[str, Any], exc: Exception) -> str:
        from multiprocessing.reduction import ForkingPickler

        named = {**dict(zip(self.ctx.nargs, args)), **kwargs}
        culprit = "an argument"
        for name, value in named.items():
            try:
                ForkingPickler.dumps(value)
            except Exception:
                culprit = f"argument {name!r} ({type(value).__name__})"
                break
        return (
            f"{self.ctx.kernel_name}: {culprit} cannot be sent to a {self.method} worker "
            f"({type(exc).__name__}: {one_line(exc)}); only tensors and picklable values can"
        )


class _Worker:
    """A worker process and this process's end of the pipe to it."""

    def __init__(self, method: str, bootstrap: Any) -> None:
        context = multiprocessing.get_context(method)
        if method == "forkserver":
            context.set_forkserver_preload(FORKSERVER_PRELOAD)  # read when the server starts
        self.conn, child_conn = context.Pipe()
        inherited = self.conn if method == "fork" else None  # the child closes its copy of our end
        self.process = context.Process(
            target=worker_main,
            args=(child_conn, inherited, bootstrap, os.getpid()),
            name="triton-dejavu-like-worker",
            daemon=True,
        )
        with forking() if method == "fork" else contextlib.nullcontext():
            self.process.start()
        child_conn.close()

    def call(self, message: tuple[Any, ...], timeout_s: float, what: str) -> tuple[Any, ...]:
        try:
            self.conn.send(message)
        except (BrokenPipeError, ConnectionResetError, EOFError):
            raise CandidateCrashed(self.death()) from None
        return self.receive(timeout_s, what)

    def receive(self, timeout_s: float, what: str) -> tuple[Any, ...]:
        """The next message from the worker; raises if it dies or gives none within ``timeout_s``.

        Warnings the worker sends on the way are issued here, where the user sees them."""
        timeout_s = _env.seconds(timeout_s)  # a timeout times the requests' candidates may overflow the wait
        deadline = time.monotonic() + timeout_s
        while True:
            ready = wait([self.conn, self.process.sentinel], max(0.0, deadline - time.monotonic()))
            if self.conn in ready:
                try:
                    message = self.conn.recv()
                except (EOFError, OSError):
                    raise CandidateCrashed(self.death()) from None
                if message[0] != "warning":
                    return message
                _, category, subject, text, args = message
                if isinstance(category, type) and issubclass(category, DejavuWarning):
                    warn_once(category, subject, text, *args)
                continue
            if not ready:
                self.kill()
                raise CandidateTimedOut(f"no result within {timeout_s:g} s ({what}); worker killed")
            raise CandidateCrashed(self.death())

    def death(self) -> str:
        """Why the worker is gone, in a few words."""
        self.process.join(GRACE_S)
        code = self.process.exitcode
        if code is None:
            self.kill()
            return "the worker closed its pipe"
        if code < 0:
            try:
                return f"worker killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"worker killed by signal {-code}"
        return f"worker exited with code {code}"

    def stop(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(("stop",))
        self.process.join(GRACE_S)
        self.kill()

    def kill(self) -> None:
        if self.process.exitcode is None:
            if self.process.pid is not None:
                kill_descendants(self.process.pid)  # ptxas, say, if it hung there
            self.process.kill()
            self.process.join(GRACE_S)
            if self.process.exitcode is None:  # stuck in the kernel (a GPU driver call): leaked
                warn_once(
                    DejavuTuningWarning,
                    f"worker:{self.process.pid}",
                    "an isolated tuning worker (pid %s) did not exit within %g s of SIGKILL; it may "
                    "still hold a GPU and its memory (check for it with nvidia-smi or ps)",
                    self.process.pid,
                    GRACE_S,
                )
        self.conn.close()


def _not_stopped(reply: tuple[Any, ...]) -> tuple[Any, ...]:
    """``reply``, unless it says that the worker stopped tuning (:class:`TuningStopped`, raised here)."""
    if reply[0] == "stopped":
        _, what, packed = reply
        raise TuningStopped(what, packed.failure())
    return reply


@contextlib.contextmanager
def _starting(worker: _Worker, kernel_name: str) -> Iterator[None]:
    """Kill ``worker`` if its start fails; its death or silence while starting is an IsolationError."""
    try:
        yield
    except (CandidateCrashed, CandidateTimedOut) as exc:
        worker.kill()
        raise IsolationError(f"{kernel_name}: a worker could not start: {exc}") from exc
    except BaseException:
        worker.kill()
        raise

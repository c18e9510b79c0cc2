"""The worker's side: how a worker process starts, gets the kernel call, and answers requests."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import pickle
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ... import _compat
from ..._compat import Config
from ..._log import log, relay_warnings
from ...codec import config_id, decode_config
from ...store.identity import callable_name
from ..checked import CheckedEvaluator
from ..evaluate import Evaluator, InProcessEvaluator
from ..launch import LaunchContext, TuningStopped, one_line
from ..recipe import KernelRecipe
from ._cuda import cuda_context_error, synchronize
from .settings import Description, IsolationError
from .transfer import KernelRef, die_with_parent, exit_with_process, pack_failure, private_copies

# --- the worker's side --------------------------------------------------------------------------------


@dataclass
class ForkBootstrap:
    """What a forked worker inherits (never pickled)."""

    ctx: LaunchContext
    recipe: KernelRecipe
    reference: Description | None

    def open(self, conn: Connection) -> _Session:
        import torch

        # GNU OpenMP, which torch's CPU ops run on, deadlocks in a child forked after the parent used
        # it; with one thread, torch never enters an OpenMP region (torch's DataLoader does the same)
        torch.set_num_threads(1)
        args, kwargs = private_copies((self.ctx.args, self.ctx.kwargs))
        ctx = dataclasses.replace(self.ctx, args=args, kwargs=kwargs, nargs=dict(zip(self.ctx.nargs, args)))
        return _Session.of(ctx, self.recipe, self.reference)


@dataclass(frozen=True)
class RemoteBootstrap:
    """What a forkserver/spawn worker is started with (picklable; the call follows on the pipe)."""

    ref: KernelRef
    env: dict[str, str]
    device: int | None
    reference: Description | None
    #: The name of the user's ``do_bench`` the tuning process times with (None: the package's timer).
    do_bench: str | None = None

    def open(self, conn: Connection) -> _Session:
        os.environ.clear()  # a fork server keeps the environment it was started with
        os.environ.update(self.env)
        import torch

        if self.device is not None:
            torch.cuda.set_device(self.device)
        recipe = self.ref.resolve()
        self._check_timer(recipe)
        conn.send(("hello",))
        _, args, kwargs = conn.recv()
        args, kwargs = private_copies((args, kwargs))  # the originals (IPC mappings) are dropped here
        table = "grid" not in kwargs  # the parent computes each candidate's grid (and stops on its errors)
        if table:
            kwargs["grid"] = _GridTable()
        interpreted = _compat.is_interpreted(recipe.fn)
        benchmarker = recipe.timing.benchmarker(interpreted)
        ctx = recipe.context(args, kwargs, interpreted=interpreted, benchmarker=benchmarker)
        if table:  # a grid missing from the table is the candidate's failure, not the user's grid's
            ctx = dataclasses.replace(ctx, users_grid=False)
        return _Session.of(ctx, recipe, self.reference)

    def _check_timer(self, recipe: KernelRecipe) -> None:
        """:class:`IsolationError` when the kernel this worker imported times with another function
        than the tuning process (a ``do_bench`` assigned to the kernel outside its module): its
        timings would not be the user's."""
        found = callable_name(recipe.timing.do_bench)
        # a main script's functions are __mp_main__'s here (multiprocessing imports it under that name)
        found = found.replace("__mp_main__.", "__main__.") if found is not None else None
        if found != self.do_bench:
            raise IsolationError(
                f"the kernel {self.ref.module}.{self.ref.qualname} imported by the worker times with "
                f"{_timer(found)}, the tuning process with {_timer(self.do_bench)}: a worker that imports "
                "the kernel sees a do_bench given to autotune or assigned in the kernel's module, not one "
                "assigned elsewhere (assign it there, or tune without isolation)"
            )


def _timer(name: str | None) -> str:
    return f"do_bench {name}" if name is not None else "the package's timer"


class _Session:
    """A worker's evaluator and how it answers each request."""

    def __init__(self, evaluator: Evaluator, decode: Callable[[Description], Config]) -> None:
        self.evaluator = evaluator
        self.decode = decode
        self.context_error: str | None = None

    @classmethod
    def of(cls, ctx: LaunchContext, recipe: KernelRecipe, reference: Description | None) -> _Session:
        grid = ctx.kwargs.get("grid")
        decode = functools.partial(_decode, recipe, grid if isinstance(grid, _GridTable) else None)
        reference_config = decode(reference) if reference is not None else None
        return cls(recipe.checked(InProcessEvaluator(ctx), reference_config), decode)

    def handle(self, request: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """The reply to a request, or None to stop."""
        kind = request[0]
        if kind == "measure":
            return self._guarded(self._measure, request[1])
        if kind == "prepare":
            return self._guarded(self._prepare, request[1])
        if kind == "refine":
            return self._guarded(self._refine, request[1])
        if kind == "reference":
            return self._guarded(self._adopt_reference, request[1])
        return None

    def _measure(self, description: Description) -> tuple[Any, ...]:
        """The timings, whether the candidate became the numerical check's reference (and then why a
        candidate that writes nothing mismatches it), whether it was timed with no reference, and
        whether the timing function answered one number."""
        config = self.decode(description)
        timings = self.evaluator.measure(config)
        check = self.evaluator if isinstance(self.evaluator, CheckedEvaluator) else None
        became_reference = check is not None and check.reference_config is config
        unchecked = check is not None and config in check.unchecked
        mismatch = check.unwritten_mismatch() if check is not None and became_reference else None
        number = self.evaluator.ctx.benchmarker.answers_numbers
        return ("ok", [float(t) for t in timings], became_reference, unchecked, mismatch, number)

    def _adopt_reference(self, description: Description) -> tuple[Any, ...]:
        """Whether the check has a reference after running the candidate for it, and whether the
        candidate became the reference (:meth:`Evaluator.adopt_reference`)."""
        config = self.decode(description)
        has_reference = self.evaluator.adopt_reference(config)
        check = self.evaluator if isinstance(self.evaluator, CheckedEvaluator) else None
        return ("ok", has_reference, check is not None and check.reference_config is config)

    def _prepare(self, descriptions: list[Description]) -> tuple[Any, ...]:
        configs = [self.decode(d) for d in descriptions]
        ruled_out = self.evaluator.prepare(configs)
        failures = {i: pack_failure(ruled_out[c]) for i, c in enumerate(configs) if c in ruled_out}
        return ("prepared", failures)

    def _refine(self, descriptions: list[Description]) -> tuple[Any, ...]:
        configs = [self.decode(d) for d in descriptions]
        timings = self.evaluator.refine(configs)
        return ("refined", None if timings is None else [[float(t) for t in timings[c]] for c in configs])

    def _guarded(self, action: Callable[[Any], tuple[Any, ...]], argument: Any) -> tuple[Any, ...]:
        try:
            reply = action(argument)
            synchronize()  # an asynchronous CUDA error belongs to this request
            return reply
        except Exception as exc:
            self.context_error = cuda_context_error()
            if isinstance(exc, TuningStopped) and isinstance(exc.error, Exception) and not self.context_error:
                return ("stopped", exc.what, pack_failure(exc.error))
            return ("error", pack_failure(exc), self.context_error)


def worker_main(conn: Connection, inherited: Connection | None, bootstrap: Any, owner: int) -> None:
    """A worker's process; ``owner``: the pid of the tuning process, whose end ends the worker.

    It leaves with ``os._exit`` once the parent stops it: multiprocessing would otherwise wait for
    every non-daemon thread a candidate or a hook left running before the process ends, and the
    parent would wait :data:`~.settings.GRACE_S` for it, then kill it."""
    if inherited is not None:
        inherited.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills its workers
    die_with_parent()
    exit_with_process(owner)  # a fork server's child outlives the tuning process without this
    relay_warnings(functools.partial(_send_warning, conn))
    _serve(conn, bootstrap)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def _serve(conn: Connection, bootstrap: Any) -> None:
    """Start the session and answer requests until the parent stops the worker or goes away."""
    try:
        session = bootstrap.open(conn)
    except Exception as exc:
        log.debug("worker setup failed", exc_info=True)
        conn.send(("failed", f"{type(exc).__name__}: {one_line(exc)}"))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        reply = session.handle(request)
        if reply is None:
            return
        conn.send(reply)
        if session.context_error is not None:
            os._exit(0)  # the CUDA context is unusable; exit without running its teardown


def _send_warning(
    conn: Connection, category: type[Warning], subject: str, message: str, args: tuple[Any, ...]
) -> None:
    """Send a warning to the parent, which issues it (its arguments as text if they cannot travel)."""
    try:
        pickle.dumps(args)
    except Exception:
        message, args = message % args, ()
    conn.send(("warning", category, subject, message, args))


def _decode(recipe: KernelRecipe, grids: _GridTable | None, description: Description) -> Config:
    encoded, hook, grid = description
    owner = recipe.configs[hook] if hook is not None else None
    config, _ = decode_config(encoded, pre_hook=owner.pre_hook if owner is not None else None)
    if owner is not None and config_id(owner) != config_id(config):
        raise IsolationError("the worker lists the kernel's configs in another order than the parent")
    if grid is not None and grids is not None:
        grids.add(config, grid)
    return config


class _GridTable:
    """The launch grid of each candidate, computed by the parent (which has the grid function)."""

    def __init__(self) -> None:
        self._grids: dict[tuple[str, ...], dict[tuple[Any, ...], tuple[int, ...]]] = {}

    def add(self, config: Config, grid: tuple[int, ...]) -> None:
        names = tuple(sorted(config.kwargs))
        self._grids.setdefault(names, {})[tuple(config.kwargs[n] for n in names)] = grid

    def __call__(self, meta: dict[str, Any]) -> tuple[int, ...]:
        for names, grids in self._grids.items():
            grid = grids.get(tuple(meta.get(n) for n in names))
            if grid is not None:
                return grid
        raise KeyError("no launch grid was sent for this candidate")

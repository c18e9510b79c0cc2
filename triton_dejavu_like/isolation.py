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
  is computed here for each candidate, so grid functions need not be picklable.

Either way, the worker copies the storage of every tensor argument (views and aliasing kept) before
it runs anything and lets go of the originals: a candidate that writes out of bounds corrupts only
the worker's copies, and the hooks (``reset_to_zero``, ``restore_value``, the tuner's and each
config's ``pre_hook``) run on those copies, in the worker, around each launch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import inspect
import logging
import math
import multiprocessing
import os
import pickle
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from . import _compat, _env
from ._compat import Config
from .codec import EncodingError, config_id, decode_config, encode_config
from .evaluate import Evaluator, InProcessEvaluator, LaunchContext
from .numerics import CheckedEvaluator, NumericalCheck

log = logging.getLogger(__name__)

#: Seconds a candidate may take in a worker (compile + benchmark) before it is ruled out.
DEFAULT_TIMEOUT_S = 120.0
#: Seconds a worker may take to start (import the kernel's module, receive and copy the arguments).
STARTUP_TIMEOUT_S = 300.0
#: Seconds a stopping or dying worker is given to exit before it is killed.
_GRACE_S = 5.0
START_METHODS = ("fork", "forkserver", "spawn")
#: Imported once by the fork server, so that each worker it forks starts with them loaded.
_FORKSERVER_PRELOAD = ["torch", "triton", "triton_dejavu_like"]

#: What identifies a candidate to a worker: its typed fields, the index of the kernel config whose
#: ``pre_hook`` it has (or None), and its launch grid when the worker cannot compute it (or None).
Description = tuple[dict[str, Any], int | None, tuple[int, ...] | None]


class IsolationError(RuntimeError):
    """Isolated benchmarking cannot run: a worker cannot reach the kernel, start, or receive the call."""


class CandidateCrashed(RuntimeError):
    """The worker running a candidate died: a signal, an exit, or a CUDA context the candidate broke."""


class CandidateTimedOut(RuntimeError):
    """A candidate gave no result within the timeout; its worker was killed."""


class WorkerError(RuntimeError):
    """An exception raised in a worker that could not be sent back as itself."""


@dataclass(frozen=True)
class IsolationSettings:
    """A tuner's isolation arguments; a field left at None is read from the environment or defaulted."""

    enabled: bool | None = None
    timeout_s: float | None = None
    start_method: str | None = None

    def __post_init__(self) -> None:
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(f"isolation_timeout_s must be > 0, got {self.timeout_s!r}")
        if self.start_method is not None and self.start_method not in START_METHODS:
            raise ValueError(
                f"isolation_start_method must be one of {', '.join(START_METHODS)}, got {self.start_method!r}"
            )

    def active(self) -> bool:
        """``use_isolated_process``, or ``TRITON_DEJAVU_USE_ISOLATED_PROCESS`` when it is None."""
        return bool(self.enabled) if self.enabled is not None else _env.use_isolated_process()

    def timeout(self) -> float:
        """``isolation_timeout_s``, else ``TRITON_DEJAVU_ISOLATION_TIMEOUT``, else the default."""
        if self.timeout_s is not None:
            return float(self.timeout_s)
        configured = _env.isolation_timeout_s()
        return configured if configured is not None else DEFAULT_TIMEOUT_S

    def method(self, interpreted: bool) -> str:
        """The start method: ``fork`` under the interpreter before CUDA is initialised, else forkserver."""
        cuda = _cuda_initialized()
        if self.start_method == "fork" and cuda:
            raise IsolationError(
                "isolation_start_method='fork' cannot be used once CUDA is initialised in this process "
                "(the worker would inherit an unusable CUDA context); use 'forkserver' or 'spawn'"
            )
        if self.start_method is not None:
            return self.start_method
        available = multiprocessing.get_all_start_methods()
        if interpreted and not cuda and "fork" in available:
            return "fork"
        return "forkserver" if "forkserver" in available else "spawn"


@dataclass(frozen=True)
class KernelRef:
    """Where a fresh process finds an autotuner: the kernel's module and its qualified name there."""

    module: str
    qualname: str

    @classmethod
    def of(cls, tuner: Any) -> KernelRef:
        """The reference to ``tuner``; :class:`IsolationError` if a fresh process could not follow it."""
        fn = _compat.python_function(tuner.fn)
        ref = cls(fn.__module__, fn.__qualname__)
        where = f"{ref.module}.{ref.qualname}"
        if "<locals>" in ref.qualname:
            raise IsolationError(
                f"{where} is defined inside a function: a {_REMOTE} worker imports the kernel's module "
                "and can only find kernels defined at module level (move it there, or tune in process)"
            )
        module = sys.modules.get(ref.module)
        if module is None or (ref.module == "__main__" and not getattr(module, "__file__", None)):
            raise IsolationError(
                f"{where} is not defined in an importable file (an interactive session or `python -c`?): "
                f"a {_REMOTE} worker cannot import it"
            )
        try:
            found = ref.find(module)
        except LookupError:
            found = None
        if found is not tuner:
            raise IsolationError(
                f"the module-level name {where} is not this autotuner, so a {_REMOTE} worker cannot find "
                "it: decorate the module-level kernel with autotune and launch it under that name"
            )
        return ref

    def find(self, module: Any) -> Any:
        """The autotuner under the name in ``module`` (through ``triton.heuristics`` wrappers)."""
        from .autotuner import Autotuner

        obj = module
        for part in self.qualname.split("."):
            obj = getattr(obj, part, None)
        while obj is not None and not isinstance(obj, Autotuner):
            obj = getattr(obj, "fn", None)
        if obj is None:
            raise LookupError(f"no autotuner at {self.module}.{self.qualname}")
        return obj

    def resolve(self) -> Any:
        """The autotuner, importing its module in this process (a worker)."""
        return self.find(importlib.import_module(self.module))


_REMOTE = "forkserver/spawn"


# --- the parent's side -------------------------------------------------------------------------------


class IsolatedEvaluator(Evaluator):
    """Times candidates in a worker process; a crash or a timeout rules the candidate out.

    The numerical check, when given, runs in the worker (where the outputs are); the candidate that
    became the reference is remembered here, and a replacement worker recomputes the reference from
    it before timing anything.
    """

    def __init__(
        self,
        ctx: LaunchContext,
        *,
        tuner: Any,
        settings: IsolationSettings,
        check: NumericalCheck | None = None,
    ) -> None:
        super().__init__(ctx)
        self.timeout_s = settings.timeout()
        self.start_method = settings.method(ctx.interpreted)
        self.check = check
        self._link = _Link(ctx, tuner, check, self.start_method)
        self._worker: _Worker | None = None
        self._broken: IsolationError | None = None
        self._reference: Description | None = None
        self._descriptions: dict[Config, Description] = {}
        #: How many worker processes this evaluator started (the first one, then one per crash or hang).
        self.worker_starts = 0

    # --- the Evaluator interface --------------------------------------------------------------------

    def prepare(self, configs: Sequence[Config]) -> dict[Config, str]:
        """Start the worker and let it compile the candidates (in parallel where Triton can)."""
        ruled_out: dict[Config, str] = {}
        sendable: list[Config] = []
        for config in configs:
            try:
                self._describe(config)
                sendable.append(config)
            except IsolationError as exc:
                ruled_out[config] = f"{type(exc).__name__}: {exc}"
        if not sendable:
            return ruled_out
        self._ensure_worker()  # a worker that cannot start fails the tuning here, with the reason
        request = ("prepare", [self._describe(c) for c in sendable])
        try:
            reply = self._request(request, self._compile_timeout(len(sendable)), "compiling the candidates")
        except Exception as exc:  # compiling ahead is an optimisation: each is compiled when timed
            log.warning(
                "%s: compiling the candidates in a worker failed (%s); each is compiled when it is timed",
                self.ctx.kernel_name,
                _one_line(exc),
            )
            return ruled_out
        for index, reason in reply[1].items():
            ruled_out[sendable[index]] = reason
        return ruled_out

    def measure(self, config: Config) -> list[float]:
        description = self._describe(config)
        _, timings, became_reference = self._request(
            ("measure", description), self.timeout_s, "compiling and timing it"
        )
        if became_reference:
            self._reference = description
        return timings

    def refine(self, configs: Sequence[Config]) -> dict[Config, list[float]] | None:
        request = ("refine", [self._describe(c) for c in configs])
        try:
            _, timings = self._request(request, self.timeout_s * max(1, len(configs)), "re-timing finalists")
        except Exception as exc:  # the finalists keep their first timings
            log.warning(
                "%s: re-timing the finalists in a worker failed (%s); keeping their first timings",
                self.ctx.kernel_name,
                _one_line(exc),
            )
            return None
        return None if timings is None else dict(zip(configs, timings))

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    # --- workers ------------------------------------------------------------------------------------

    def _describe(self, config: Config) -> Description:
        description = self._descriptions.get(config)
        if description is None:
            description = self._descriptions[config] = self._link.describe(config)
        return description

    def _compile_timeout(self, n: int) -> float:
        from .precompile import compile_threads

        return self.timeout_s * max(1, math.ceil(n / max(1, compile_threads())))

    def _request(self, message: tuple[Any, ...], timeout_s: float, what: str) -> tuple[Any, ...]:
        """The worker's reply to ``message``; a candidate's error is raised here as itself."""
        worker = self._ensure_worker()
        try:
            reply = worker.call(message, timeout_s, what)
        except (CandidateCrashed, CandidateTimedOut):
            self._discard()
            raise
        if reply[0] == "error":
            _, blob, summary, context_error = reply
            if context_error is not None:
                self._discard()
                raise CandidateCrashed(f"CUDA context lost: {context_error}")
            raise _unpack_exception(blob, summary)
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
                reply = worker.call(("prepare", []), self.timeout_s, "computing the numerical reference")
                if reply[0] == "error":
                    raise IsolationError(
                        f"{name}: a worker could not compute the numerical reference: {reply[2]}"
                    )
        self.worker_starts += 1
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

    def __init__(self, ctx: LaunchContext, tuner: Any, check: NumericalCheck | None, method: str) -> None:
        self.ctx, self.tuner, self.check, self.method = ctx, tuner, check, method
        self.remote = method != "fork"
        self.ref = KernelRef.of(tuner) if self.remote else None
        self.grid_here = self.remote and callable(ctx.kwargs.get("grid"))
        self._hook_owners: dict[str, int] | None = None

    def describe(self, config: Config) -> Description:
        hook = None
        if config.pre_hook is not None:
            hook = self._hook_owner(config)
        grid = None
        if self.grid_here:
            try:
                grid = launch_grid(self.ctx, config)
            except Exception as exc:
                raise IsolationError(
                    f"its launch grid cannot be computed ({type(exc).__name__}: {exc})"
                ) from exc
        try:
            return encode_config(config), hook, grid
        except EncodingError as exc:
            raise IsolationError(f"it cannot be sent to a worker ({exc})") from exc

    def _hook_owner(self, config: Config) -> int:
        """The index of the kernel config with this candidate's fields and pre_hook."""
        if self._hook_owners is None:
            self._hook_owners = {
                config_id(c): i for i, c in enumerate(self.tuner.configs) if c.pre_hook is not None
            }
        index = self._hook_owners.get(config_id(config))
        if index is None or self.tuner.configs[index].pre_hook != config.pre_hook:
            raise IsolationError(
                "its pre_hook is not that of one of the kernel's configs (made by early_config_prune?), "
                "so a worker cannot find it"
            )
        return index

    def start(self, reference: Description | None) -> _Worker:
        """A started worker; it answers ``ready`` (or ``failed``) once it can take candidates."""
        if not self.remote:
            return _Worker("fork", _ForkBootstrap(self.ctx, self.tuner, self.check, reference))
        assert self.ref is not None
        bootstrap = _RemoteBootstrap(
            self.ref,
            dict(os.environ),
            _current_device(),
            self.check is not None,
            self.ctx.kernel_name,
            reference,
        )
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
            f"({type(exc).__name__}: {_one_line(exc)}); only tensors and picklable values can"
        )


class _Worker:
    """A worker process and this process's end of the pipe to it."""

    def __init__(self, method: str, bootstrap: Any) -> None:
        context = multiprocessing.get_context(method)
        if method == "forkserver":
            context.set_forkserver_preload(_FORKSERVER_PRELOAD)  # read when the server starts
        self.conn, child_conn = context.Pipe()
        inherited = self.conn if method == "fork" else None  # the child closes its copy of our end
        self.process = context.Process(
            target=_worker_main,
            args=(child_conn, inherited, bootstrap),
            name="triton-dejavu-like-worker",
            daemon=True,
        )
        self.process.start()
        child_conn.close()

    def call(self, message: tuple[Any, ...], timeout_s: float, what: str) -> tuple[Any, ...]:
        try:
            self.conn.send(message)
        except (BrokenPipeError, ConnectionResetError, EOFError):
            raise CandidateCrashed(self.death()) from None
        return self.receive(timeout_s, what)

    def receive(self, timeout_s: float, what: str) -> tuple[Any, ...]:
        """The next message from the worker; raises if it dies or stays silent for ``timeout_s``."""
        ready = wait([self.conn, self.process.sentinel], timeout_s)
        if self.conn in ready:
            try:
                return self.conn.recv()
            except (EOFError, OSError):
                raise CandidateCrashed(self.death()) from None
        if not ready:
            self.kill()
            raise CandidateTimedOut(f"no result within {timeout_s:g} s ({what}); worker killed")
        raise CandidateCrashed(self.death())

    def death(self) -> str:
        """Why the worker is gone, in a few words."""
        self.process.join(_GRACE_S)
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
        self.process.join(_GRACE_S)
        self.kill()

    def kill(self) -> None:
        if self.process.exitcode is None:
            self.process.kill()
            self.process.join(_GRACE_S)
            if self.process.exitcode is None:
                log.warning("worker %s did not exit after SIGKILL", self.process.pid)
        self.conn.close()


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


# --- the worker's side --------------------------------------------------------------------------------


@dataclass
class _ForkBootstrap:
    """What a forked worker inherits (never pickled)."""

    ctx: LaunchContext
    tuner: Any
    check: NumericalCheck | None
    reference: Description | None

    def open(self, conn: Connection) -> _Session:
        import torch

        # GNU OpenMP, which torch's CPU ops run on, deadlocks in a child forked after the parent used
        # it; with one thread, torch never enters an OpenMP region (torch's DataLoader does the same)
        torch.set_num_threads(1)
        args, kwargs = private_copies((self.ctx.args, self.ctx.kwargs))
        ctx = dataclasses.replace(self.ctx, args=args, kwargs=kwargs, nargs=dict(zip(self.ctx.nargs, args)))
        return _Session.of(ctx, self.tuner, self.check, self.reference)


@dataclass(frozen=True)
class _RemoteBootstrap:
    """What a forkserver/spawn worker is started with (picklable; the call follows on the pipe)."""

    ref: KernelRef
    env: dict[str, str]
    device: int | None
    check: bool
    kernel_name: str
    reference: Description | None

    def open(self, conn: Connection) -> _Session:
        os.environ.clear()  # a fork server keeps the environment it was started with
        os.environ.update(self.env)
        import torch

        if self.device is not None:
            torch.cuda.set_device(self.device)
        tuner = self.ref.resolve()
        conn.send(("hello",))
        _, args, kwargs = conn.recv()
        args, kwargs = private_copies((args, kwargs))  # the originals (IPC mappings) are dropped here
        if "grid" not in kwargs:
            kwargs["grid"] = _GridTable()
        interpreted = _compat.is_interpreted(tuner.fn)
        benchmarker = tuner.make_benchmarker(interpreted)
        ctx = LaunchContext(
            fn=tuner.fn,
            args=args,
            kwargs=kwargs,
            nargs=dict(zip(tuner.arg_names, args)),
            pre_hook=tuner.pre_hook,
            post_hook=tuner.post_hook,
            benchmarker=benchmarker,
            kernel_name=self.kernel_name,
            interpreted=interpreted,
        )
        return _Session.of(ctx, tuner, tuner.numerical_check if self.check else None, self.reference)


class _Session:
    """A worker's evaluator and how it answers each request."""

    def __init__(self, evaluator: Evaluator, decode: Callable[[Description], Config]) -> None:
        self.evaluator = evaluator
        self.decode = decode
        self.context_error: str | None = None

    @classmethod
    def of(
        cls, ctx: LaunchContext, tuner: Any, check: NumericalCheck | None, reference: Description | None
    ) -> _Session:
        grid = ctx.kwargs.get("grid")
        decode = functools.partial(_decode, tuner, grid if isinstance(grid, _GridTable) else None)
        evaluator: Evaluator = InProcessEvaluator(ctx)
        if check is not None:
            reference_config = decode(reference) if reference is not None else None
            evaluator = CheckedEvaluator(evaluator, check, reference_config=reference_config)
        return cls(evaluator, decode)

    def handle(self, request: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """The reply to a request, or None to stop."""
        kind = request[0]
        if kind == "measure":
            return self._guarded(self._measure, request[1])
        if kind == "prepare":
            return self._guarded(self._prepare, request[1])
        if kind == "refine":
            return self._guarded(self._refine, request[1])
        return None

    def _measure(self, description: Description) -> tuple[Any, ...]:
        config = self.decode(description)
        timings = self.evaluator.measure(config)
        became_reference = getattr(self.evaluator, "reference_config", None) is config
        return ("ok", [float(t) for t in timings], became_reference)

    def _prepare(self, descriptions: list[Description]) -> tuple[Any, ...]:
        configs = [self.decode(d) for d in descriptions]
        ruled_out = self.evaluator.prepare(configs)
        return ("prepared", {i: ruled_out[c] for i, c in enumerate(configs) if c in ruled_out})

    def _refine(self, descriptions: list[Description]) -> tuple[Any, ...]:
        configs = [self.decode(d) for d in descriptions]
        timings = self.evaluator.refine(configs)
        return ("refined", None if timings is None else [[float(t) for t in timings[c]] for c in configs])

    def _guarded(self, action: Callable[[Any], tuple[Any, ...]], argument: Any) -> tuple[Any, ...]:
        try:
            reply = action(argument)
            _synchronize()  # an asynchronous CUDA error belongs to this request
            return reply
        except Exception as exc:
            self.context_error = _cuda_context_error()
            blob, summary = _pack_exception(exc)
            return ("error", blob, summary, self.context_error)


def _worker_main(conn: Connection, inherited: Connection | None, bootstrap: Any) -> None:
    if inherited is not None:
        inherited.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills its workers
    _die_with_parent()
    try:
        session = bootstrap.open(conn)
    except Exception as exc:
        log.debug("worker setup failed", exc_info=True)
        conn.send(("failed", f"{type(exc).__name__}: {_one_line(exc)}"))
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


def _decode(tuner: Any, grids: _GridTable | None, description: Description) -> Config:
    encoded, hook, grid = description
    owner = tuner.configs[hook] if hook is not None else None
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


# --- helpers ---------------------------------------------------------------------------------------


def launch_grid(ctx: LaunchContext, config: Config) -> tuple[int, ...]:
    """The grid ``config`` launches with: the grid function called on the arguments as Triton binds them."""
    grid = ctx.kwargs["grid"]
    _, named = ctx.full_args(config)
    parameters = inspect.signature(_compat.python_function(ctx.fn)).parameters
    meta = {n: p.default for n, p in parameters.items() if p.default is not inspect.Parameter.empty}
    meta.update(named)
    _apply_heuristics(ctx.fn, meta)
    return tuple(int(d) for d in grid(meta))


def _apply_heuristics(fn: Any, meta: dict[str, Any]) -> None:
    """Add the values ``triton.heuristics`` layers under the autotuner compute at launch."""
    from triton.runtime.autotuner import Heuristics

    layer = fn
    while isinstance(layer, Heuristics):
        for name, heuristic in layer.values.items():
            meta[name] = heuristic(meta)
        layer = layer.fn


def private_copies(value: Any, select: Callable[[Any], bool] | None = None) -> Any:
    """``value`` with each tensor in it (or each ``select`` accepts) moved onto a copy of its storage.

    Tensors that share a storage share the copy, with their offsets, sizes and strides, so views
    and aliasing are kept. Tuples, lists, dicts and dataclasses (e.g. tensor descriptors) are
    rebuilt around their copied tensors.
    """
    import torch

    copies: dict[tuple[Any, int], Any] = {}

    def copy(tensor: Any) -> Any:
        if select is not None and not select(tensor):
            return tensor
        storage = tensor.untyped_storage()
        key = (tensor.device, storage.data_ptr())
        clone = copies.get(key)
        if clone is None:
            clone = copies[key] = storage.clone()
        moved = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
        return moved.set_(clone, tensor.storage_offset(), tensor.size(), tensor.stride())

    return _map_tensors(value, copy)


def _map_tensors(value: Any, fn: Callable[[Any], Any]) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(_map_tensors(v, fn) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            f.name: _map_tensors(getattr(value, f.name), fn) for f in dataclasses.fields(value) if f.init
        }
        return dataclasses.replace(value, **fields)
    return value


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _current_device() -> int | None:
    import torch

    return torch.cuda.current_device() if torch.cuda.is_initialized() else None


def _synchronize() -> None:
    if _cuda_initialized():
        import torch

        torch.cuda.synchronize()


def _cuda_context_error() -> str | None:
    """The error that makes this process's CUDA context unusable, or None if it still works."""
    try:
        _synchronize()
    except Exception as exc:
        return _one_line(exc)
    return None


def _die_with_parent() -> None:
    """On Linux, have the kernel SIGKILL this worker when the process that started it dies."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _pack_exception(exc: Exception) -> tuple[bytes | None, str]:
    """The exception pickled if it survives the round trip, and a one-line summary."""
    summary = f"{type(exc).__name__}: {_one_line(exc)}"
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)
    except Exception:
        blob = None
    return blob, summary


def _unpack_exception(blob: bytes | None, summary: str) -> Exception:
    if blob is not None:
        with contextlib.suppress(Exception):
            exc = pickle.loads(blob)
            if isinstance(exc, Exception):
                return exc
    return WorkerError(summary)


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "START_METHODS",
    "CandidateCrashed",
    "CandidateTimedOut",
    "IsolatedEvaluator",
    "IsolationError",
    "IsolationSettings",
    "KernelRef",
    "WorkerError",
    "launch_grid",
    "private_copies",
]

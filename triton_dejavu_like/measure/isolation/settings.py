"""Isolation settings, limits and errors (shared by the parent and the worker side)."""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass
from typing import Any

from ... import _env
from ._cuda import cuda_initialized

#: Seconds a candidate may take in a worker (compile + benchmark) before it is ruled out.
DEFAULT_TIMEOUT_S = 120.0
#: Seconds a worker may take to start (import the kernel's module, receive and copy the arguments).
STARTUP_TIMEOUT_S = 300.0
#: Seconds a stopping or dying worker is given to exit before it is killed.
GRACE_S = 5.0
START_METHODS = ("fork", "forkserver", "spawn")
#: Imported once by the fork server, so that each worker it forks starts with them loaded.
FORKSERVER_PRELOAD = ["torch", "triton", "triton_dejavu_like"]

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
    """An exception raised in a worker that could not be rebuilt here: ``reason`` is its one-line
    reason (``Type: message``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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

    def ignored(self) -> list[str]:
        """The isolation arguments given that have no effect: candidates are not isolated."""
        if self.active():
            return []
        given = {"isolation_timeout_s": self.timeout_s, "isolation_start_method": self.start_method}
        return [name for name, value in given.items() if value is not None]

    def timeout(self) -> float:
        """``isolation_timeout_s``, else ``TRITON_DEJAVU_ISOLATION_TIMEOUT``, else the default."""
        if self.timeout_s is not None:
            return _env.seconds(self.timeout_s)  # inf and huge values: no timeout, as the variable's
        configured = _env.isolation_timeout_s()
        return configured if configured is not None else DEFAULT_TIMEOUT_S

    def method(self, interpreted: bool) -> str:
        """The start method: ``fork`` under the interpreter before CUDA is initialised, else forkserver."""
        cuda = cuda_initialized()
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

"""Isolated benchmarking: candidates compiled and timed in worker processes that may crash or hang.

``parent`` (the evaluator and its workers), ``worker`` (what runs in the worker process),
``transfer`` (what crosses between them), ``settings`` (settings, limits, errors).
"""

from __future__ import annotations

from .parent import IsolatedEvaluator
from .settings import (
    DEFAULT_TIMEOUT_S,
    START_METHODS,
    CandidateCrashed,
    CandidateTimedOut,
    IsolationError,
    IsolationSettings,
    WorkerError,
)
from .transfer import KernelRef, launch_grid, private_copies

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

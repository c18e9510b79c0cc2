"""Forking worker processes while other threads run, and stopping them with what they started."""

from __future__ import annotations

import contextlib
import glob
import os
import re
import signal
import warnings
from collections.abc import Iterator

from .._log import remove_warning_filters

#: The DeprecationWarning of Python 3.12+ when a process with threads forks.
_FORK_WARNING = re.compile(r".*use of fork\(\) may lead to deadlocks", re.IGNORECASE)


@contextlib.contextmanager
def forking() -> Iterator[None]:
    """Fork worker processes in this block without Python's warning (3.12+) that the process has
    threads: the package forks knowingly, while its own threads run (a tuning lease's heartbeat,
    tqdm's monitor, CUDA's), and a forked worker runs only the package's worker code. The user
    cannot act on the warning. Only this block's filter is taken out at the end, so the filters that
    other threads add meanwhile stay; while it is in place, the same warning of another thread's
    fork is not shown either."""
    entry = ("ignore", _FORK_WARNING, DeprecationWarning, None, 0)
    warnings.filters.insert(0, entry)
    try:
        yield
    finally:
        remove_warning_filters([entry])


def kill_descendants(pid: int) -> None:
    """SIGKILL every process that process ``pid`` started, and theirs, where the system lists a
    process's children (Linux's ``/proc``; elsewhere nothing is done): a worker stopped while it
    waits for ptxas must not leave ptxas running on a core. Call it before stopping the worker
    (its children then still list under it)."""
    doomed: list[int] = []
    stack = _children(pid)
    while stack:
        child = stack.pop()
        doomed.append(child)
        stack.extend(_children(child))
    for child in doomed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for listing in glob.glob(f"/proc/{pid}/task/*/children"):
        with contextlib.suppress(OSError, ValueError), open(listing) as file:
            found.extend(int(child) for child in file.read().split())
    return found

"""Forking worker processes while other threads run."""

from __future__ import annotations

import contextlib
import re
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

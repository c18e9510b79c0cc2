"""Helpers for tests that watch processes (Linux: they read ``/proc``)."""

from __future__ import annotations

import time
from collections.abc import Iterable


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def all_exit(pids: Iterable[int], timeout_s: float = 10.0) -> bool:
    """Whether every process of ``pids`` has exited within ``timeout_s``."""
    pids = list(pids)
    deadline = time.monotonic() + timeout_s
    while any(alive(pid) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True

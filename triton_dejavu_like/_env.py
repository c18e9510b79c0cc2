"""The environment variables the package reads (names shared with triton-dejavu)."""

from __future__ import annotations

import os

FORCE_FALLBACK = "TRITON_DEJAVU_FORCE_FALLBACK"
USE_ONLY_RESTORED = "TRITON_DEJAVU_USE_ONLY_RESTORED"
USE_ISOLATED_PROCESS = "TRITON_DEJAVU_USE_ISOLATED_PROCESS"
ISOLATION_TIMEOUT = "TRITON_DEJAVU_ISOLATION_TIMEOUT"
NUMERICAL_CHECK = "TRITON_DEJAVU_NUMERICAL_CHECK"
DEBUG = "TRITON_DEJAVU_DEBUG"


def flag(name: str) -> bool:
    """True for 1/true/yes/on (any case); false when unset or anything else."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def force_fallback() -> bool:
    return flag(FORCE_FALLBACK)


def use_only_restored() -> bool:
    return flag(USE_ONLY_RESTORED)


def use_isolated_process() -> bool:
    return flag(USE_ISOLATED_PROCESS)


def isolation_timeout_s() -> float | None:
    """Seconds a candidate may take in an isolated worker; None when unset."""
    raw = os.environ.get(ISOLATION_TIMEOUT, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ValueError(f"{ISOLATION_TIMEOUT} must be a number of seconds > 0, got {raw!r}")
    return value


def numerical_check() -> bool:
    return flag(NUMERICAL_CHECK)


def debug() -> bool:
    return flag(DEBUG)

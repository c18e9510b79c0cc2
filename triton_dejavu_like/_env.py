"""The environment variables the package reads (names shared with triton-dejavu)."""

from __future__ import annotations

import os

FORCE_FALLBACK = "TRITON_DEJAVU_FORCE_FALLBACK"
USE_ONLY_RESTORED = "TRITON_DEJAVU_USE_ONLY_RESTORED"
USE_ISOLATED_PROCESS = "TRITON_DEJAVU_USE_ISOLATED_PROCESS"
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


def debug() -> bool:
    return flag(DEBUG)

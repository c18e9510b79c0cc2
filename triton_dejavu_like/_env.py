"""Every environment variable the package reads, with its validation (names shared with triton-dejavu).

No other module reads ``os.environ`` for a ``TRITON_DEJAVU_*`` variable. A value that cannot be
used is reported once (:class:`~triton_dejavu_like.DejavuConfigWarning`, naming the variable, the
value and what is accepted) and the default applies: a typo in a deployment's environment never
stops a kernel launch. Values are read when they are needed, so tests and programs may change them
at run time.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from ._log import DejavuConfigWarning, warn_once

STORAGE = "TRITON_DEJAVU_STORAGE"
TAG = "TRITON_DEJAVU_TAG"
FORCE_FALLBACK = "TRITON_DEJAVU_FORCE_FALLBACK"
USE_ONLY_RESTORED = "TRITON_DEJAVU_USE_ONLY_RESTORED"
USE_ISOLATED_PROCESS = "TRITON_DEJAVU_USE_ISOLATED_PROCESS"
ISOLATION_TIMEOUT = "TRITON_DEJAVU_ISOLATION_TIMEOUT"
NUMERICAL_CHECK = "TRITON_DEJAVU_NUMERICAL_CHECK"
DEBUG = "TRITON_DEJAVU_DEBUG"
DEBUG_DEBUG = "TRITON_DEJAVU_DEBUG_DEBUG"
HASH_SEARCH_PARAMS = "TRITON_DEJAVU_HASH_SEARCH_PARAMS"
SPLIT_CACHE = "TRITON_DEJAVU_SPLIT_CACHE"
#: triton-dejavu's switch for its jitcache; ``jitcache`` here never changes the launch, so it is not read.
DISABLE_JITCACHE = "TRITON_DEJAVU_DISABLE_JITCACHE"
#: Written by triton-dejavu for its split cache manager; neither read nor written here.
INSTANCE_RUN_ID = "TRITON_DEJAVU_INSTANCE_RUN_ID"
COMPILE_THREADS = "TRITON_DEJAVU_COMPILE_THREADS"
PROGRESS = "TRITON_DEJAVU_PROGRESS"
CUDA_VERSION_OVERRIDE = "_TRITON_DEJAVU_DETERMINED_CUDA_VERSION"
ROCM_VERSION_OVERRIDE = "_TRITON_DEJAVU_DETERMINED_ROCM_VERSION"

#: Every variable above, for documentation and for tests that clear the environment.
ALL = (
    STORAGE,
    TAG,
    FORCE_FALLBACK,
    USE_ONLY_RESTORED,
    USE_ISOLATED_PROCESS,
    ISOLATION_TIMEOUT,
    NUMERICAL_CHECK,
    DEBUG,
    DEBUG_DEBUG,
    HASH_SEARCH_PARAMS,
    SPLIT_CACHE,
    DISABLE_JITCACHE,
    INSTANCE_RUN_ID,
    COMPILE_THREADS,
    PROGRESS,
    CUDA_VERSION_OVERRIDE,
    ROCM_VERSION_OVERRIDE,
)

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
#: Timeouts above this many seconds (or ``inf``) are clamped to it: in effect, no timeout.
MAX_TIMEOUT_S = 1e6
DEFAULT_COMPILE_THREADS_CAP = 16


def _raw(name: str) -> str:
    return os.environ.get(name, "").strip()


def _invalid(name: str, raw: str, accepted: str, default: object) -> None:
    warn_once(
        DejavuConfigWarning,
        f"{name}={raw}",
        "%s=%r is not valid (%s); using the default (%s)",
        name,
        raw[:80],
        accepted,
        default,
    )


def flag(name: str, default: bool = False) -> bool:
    """1/true/yes/on or 0/false/no/off (any case); unset or empty: ``default``."""
    raw = _raw(name)
    if not raw:
        return default
    value = raw.lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    _invalid(name, raw, "use 1/true/yes/on or 0/false/no/off", "on" if default else "off")
    return default


def force_fallback() -> bool:
    return flag(FORCE_FALLBACK)


def use_only_restored() -> bool:
    return flag(USE_ONLY_RESTORED)


def use_isolated_process() -> bool:
    return flag(USE_ISOLATED_PROCESS)


def numerical_check() -> bool:
    return flag(NUMERICAL_CHECK)


def debug() -> bool:
    """``TRITON_DEJAVU_DEBUG`` or triton-dejavu's ``TRITON_DEJAVU_DEBUG_DEBUG`` (one level here)."""
    return flag(DEBUG) or flag(DEBUG_DEBUG)


def hash_search_params() -> bool:
    """``TRITON_DEJAVU_HASH_SEARCH_PARAMS`` (default on): off leaves the search strategy and budget
    out of the storage identity."""
    return flag(HASH_SEARCH_PARAMS, default=True)


def split_cache() -> bool:
    """``TRITON_DEJAVU_SPLIT_CACHE``: accepted, not supported (the tuner warns once)."""
    return flag(SPLIT_CACHE)


def progress() -> bool:
    """``TRITON_DEJAVU_PROGRESS=0`` turns the progress bar off (default on; it only shows on a terminal)."""
    return flag(PROGRESS, default=True)


def seconds(value: float) -> float:
    """A timeout in seconds, clamped to :data:`MAX_TIMEOUT_S` (``inf`` and huge values: no timeout)."""
    return min(float(value), MAX_TIMEOUT_S)


def isolation_timeout_s() -> float | None:
    """Seconds a candidate may take in an isolated worker; None when unset or invalid.

    Accepted: a number of seconds > 0 (``inf`` or anything above 1e6 means no practical timeout and
    is clamped to 1e6 s).
    """
    raw = _raw(ISOLATION_TIMEOUT)
    if not raw:
        return None
    try:
        value = float(raw)
    except (ValueError, OverflowError):
        value = math.nan
    if not value > 0:  # also NaN
        _invalid(ISOLATION_TIMEOUT, raw, "a number of seconds > 0; inf means no timeout", "120 s")
        return None
    return seconds(value)


def compile_threads() -> int:
    """Threads or processes that compile candidates: ``TRITON_DEJAVU_COMPILE_THREADS`` (0 or 1: serial),
    default ``min(16, cores)``."""
    default = min(DEFAULT_COMPILE_THREADS_CAP, os.cpu_count() or 1)
    raw = _raw(COMPILE_THREADS)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        _invalid(COMPILE_THREADS, raw, "a whole number >= 0", default)
        return default
    return value


def storage_roots() -> list[Path]:
    """``TRITON_DEJAVU_STORAGE`` split on ``os.pathsep``: the first root is written, the others are
    read-only layers searched in order. Empty when unset. A relative path is taken relative to the
    working directory at the time of the call (the first call of each kernel)."""
    raw = os.environ.get(STORAGE, "")
    return [Path(part).expanduser().absolute() for part in raw.split(os.pathsep) if part.strip()]


def tag() -> str | None:
    """``TRITON_DEJAVU_TAG``, the deployment name of stored results (None: unset)."""
    return _raw(TAG) or None


def cuda_version_override() -> str | None:
    return _raw(CUDA_VERSION_OVERRIDE) or None


def rocm_version_override() -> str | None:
    return _raw(ROCM_VERSION_OVERRIDE) or None

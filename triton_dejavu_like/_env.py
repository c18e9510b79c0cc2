"""Every environment variable the package reads, with its validation (names shared with triton-dejavu).

No other module reads ``os.environ`` for a ``TRITON_DEJAVU_*`` variable. A value that cannot be
used is reported once (:class:`~triton_dejavu_like.DejavuConfigWarning`, naming the variable, the
value and what is accepted) and the default applies: a typo in a deployment's environment never
stops a kernel launch. Values are read when they are needed, so tests and programs may change them
at run time.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Sequence
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
COMPILE_PROCESSES = "TRITON_DEJAVU_COMPILE_PROCESSES"
COMPILE_START = "TRITON_DEJAVU_COMPILE_START"
COMPILE_TIMEOUT = "TRITON_DEJAVU_COMPILE_TIMEOUT"
PROGRESS = "TRITON_DEJAVU_PROGRESS"
READ_ONLY = "TRITON_DEJAVU_READ_ONLY"
DETERMINISTIC = "TRITON_DEJAVU_DETERMINISTIC"
MISSES_FILE = "TRITON_DEJAVU_MISSES_FILE"
SINGLE_FLIGHT = "TRITON_DEJAVU_SINGLE_FLIGHT"
SINGLE_FLIGHT_TIMEOUT = "TRITON_DEJAVU_SINGLE_FLIGHT_TIMEOUT"
DISTRIBUTED = "TRITON_DEJAVU_DISTRIBUTED"
JOIN_WINDOW = "TRITON_DEJAVU_JOIN_WINDOW"
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
    COMPILE_PROCESSES,
    COMPILE_START,
    COMPILE_TIMEOUT,
    PROGRESS,
    READ_ONLY,
    DETERMINISTIC,
    MISSES_FILE,
    SINGLE_FLIGHT,
    SINGLE_FLIGHT_TIMEOUT,
    DISTRIBUTED,
    JOIN_WINDOW,
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


def _invalid(name: str, raw: str, accepted: str, default: object, *, using: str = "the default") -> None:
    warn_once(
        DejavuConfigWarning,
        f"{name}={raw}",
        "%s=%r is not valid (%s); using %s (%s)",
        name,
        raw[:80],
        accepted,
        using,
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


def read_only() -> bool:
    """``TRITON_DEJAVU_READ_ONLY=1``: the default of :func:`triton_dejavu_like.tuning` is off (no
    benchmarking, nothing written). A safety switch fails safe: unlike other flags, a value that is
    neither a true nor a false value (``enabled``, a typo) turns it on, with the bad-value warning."""
    raw = _raw(READ_ONLY)
    if raw and raw.lower() not in _TRUE + _FALSE:
        _invalid(
            READ_ONLY,
            raw,
            "use 1/true/yes/on or 0/false/no/off",
            "any value but 0/false/no/off turns it on: a safety switch fails safe",
            using="read-only mode",
        )
        return True
    return flag(READ_ONLY)


def deterministic() -> bool:
    """``TRITON_DEJAVU_DETERMINISTIC=1``: no timing at run time; a key is answered from the store,
    else by the read-only rules, identically in every process."""
    return flag(DETERMINISTIC)


def misses_file() -> Path | None:
    """``TRITON_DEJAVU_MISSES_FILE``: where a process appends the keys it answered without tuning
    (JSON lines); None when unset."""
    raw = _raw(MISSES_FILE)
    return Path(raw).expanduser().absolute() if raw else None


def single_flight() -> bool:
    """``TRITON_DEJAVU_SINGLE_FLIGHT=0`` lets every process tune a missed key itself (default on: one
    process tunes it under a lease in the store, the others wait for its result)."""
    return flag(SINGLE_FLIGHT, default=True)


def single_flight_timeout_s() -> float | None:
    """Seconds a process waits for another one tuning the same key; None (unset or invalid): the
    wait scales with the expected tuning time. Accepted: a number of seconds > 0."""
    return _positive_seconds(SINGLE_FLIGHT_TIMEOUT, "scaled with the expected tuning time")


def distributed() -> bool:
    """``TRITON_DEJAVU_DISTRIBUTED=1``: ranks of the default process group tune missed keys together."""
    return flag(DISTRIBUTED)


def join_window_s() -> float | None:
    """``TRITON_DEJAVU_JOIN_WINDOW``: seconds the first rank to miss a key waits for the other ranks
    to miss it too, before it closes the group; None (unset or invalid): the default (2 s).
    Accepted: a number of seconds >= 0 (0: only ranks that missed the key at once tune together)."""
    return _positive_seconds(JOIN_WINDOW, "2 s", zero=True)


def _positive_seconds(name: str, default: str, *, zero: bool = False) -> float | None:
    """A number of seconds > 0 (>= 0 with ``zero``), clamped; None when unset or invalid."""
    raw = _raw(name)
    if not raw:
        return None
    try:
        value = float(raw)
    except (ValueError, OverflowError):
        value = math.nan
    if not (value >= 0 if zero else value > 0):  # also NaN
        accepted = f"a number of seconds {'>=' if zero else '>'} 0; inf means no timeout"
        _invalid(name, raw, accepted, default)
        return None
    return seconds(value)


def seconds(value: float) -> float:
    """A timeout in seconds, clamped to :data:`MAX_TIMEOUT_S` (``inf`` and huge values: no timeout)."""
    return min(float(value), MAX_TIMEOUT_S)


def isolation_timeout_s() -> float | None:
    """Seconds a candidate may take in an isolated worker; None when unset or invalid.

    Accepted: a number of seconds > 0 (``inf`` or anything above 1e6 means no practical timeout and
    is clamped to 1e6 s).
    """
    return _positive_seconds(ISOLATION_TIMEOUT, "120 s")


#: Seconds a candidate's compile may take in a compile worker before the worker is stopped and the
#: candidate ruled out (``TRITON_DEJAVU_COMPILE_TIMEOUT``): a matmul config compiles in under a
#: second and the largest attention configs in tens of seconds, even with every core compiling; the
#: margin covers a host shared by several tuning processes, while a compiler that hangs (an LLVM
#: pass or ptxas in a loop) costs minutes, not the process.
DEFAULT_COMPILE_TIMEOUT_S = 300.0


def compile_timeout_s() -> float:
    """``TRITON_DEJAVU_COMPILE_TIMEOUT``: seconds a candidate may compile in a worker process
    (default :data:`DEFAULT_COMPILE_TIMEOUT_S`). Accepted: a number of seconds > 0 (``inf`` or
    anything above 1e6 means no practical timeout and is clamped to 1e6 s)."""
    configured = _positive_seconds(COMPILE_TIMEOUT, f"{DEFAULT_COMPILE_TIMEOUT_S:g} s")
    return DEFAULT_COMPILE_TIMEOUT_S if configured is None else configured


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


#: Under ``TRITON_DEJAVU_COMPILE_PROCESSES=auto`` (the default), tuning runs with at least this many
#: candidates compile them in worker processes (fewer do not pay for starting the workers), by the
#: way the workers start (:func:`compile_start`): forking 16 workers costs about 0.2 s once per
#: process, a fork server that imports torch and starts CUDA in each worker seconds. On an H200 the
#: 24-config RMSNorm example tuned in 1.6 s with forked workers against 3.9 s in threads.
PROCESS_COMPILE_MIN = {"fork": 8, "forkserver": 128}


def compile_processes() -> str:
    """``TRITON_DEJAVU_COMPILE_PROCESSES``: ``auto`` (default: worker processes for runs of at least
    :data:`PROCESS_COMPILE_MIN` candidates on a GPU, by start method), ``1``/``on`` (always),
    ``0``/``off`` (threads only)."""
    raw = _raw(COMPILE_PROCESSES).lower()
    if raw in ("", "auto"):
        return "auto"
    if raw in _TRUE:
        return "on"
    if raw in _FALSE:
        return "off"
    _invalid(COMPILE_PROCESSES, raw, "use auto, 1/on or 0/off", "auto")
    return "auto"


def compile_start() -> str:
    """``TRITON_DEJAVU_COMPILE_START``: how compile workers start. ``fork`` (default where the platform
    has it): forked from the tuning process, they compile without using CUDA (the parent answers
    what compiling asks the driver); ``forkserver``: each worker imports torch and starts CUDA."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    default = "fork" if "fork" in methods else "forkserver"
    raw = _raw(COMPILE_START).lower()
    if not raw:
        return default
    if raw in ("fork", "forkserver") and raw in methods:
        return raw
    _invalid(COMPILE_START, raw, "use fork or forkserver (where the platform has it)", default)
    return default


def storage_roots() -> list[Path]:
    """``TRITON_DEJAVU_STORAGE`` split on ``os.pathsep``: the first root is written, the others are
    read-only layers searched in order (an empty first part: the user cache directory is written).
    Empty when unset. A relative path is taken relative to the
    working directory at the time of the call (the first call of each kernel)."""
    parts = [part.strip() for part in os.environ.get(STORAGE, "").split(os.pathsep)]
    roots = [Path(part).expanduser().absolute() for part in parts if part]
    if roots and not parts[0]:  # "$RW:/shared/base" with RW unset: never write into the layer
        roots.insert(0, user_cache_root())
        warn_once(
            DejavuConfigWarning,
            f"{STORAGE} first part empty",
            "%s=%r: its first part (the written root) is empty; writing under the user cache directory "
            "%s, and every root named is a read-only layer",
            STORAGE,
            os.environ.get(STORAGE, "")[:200],
            roots[0],
        )
    return roots


def user_cache_root() -> Path:
    """The default root: the user cache directory (platformdirs)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("triton_dejavu_like", appauthor=False))


@contextlib.contextmanager
def storage_root_set_to(root: Path, layers: Sequence[Path] | None = None) -> Iterator[None]:
    """Within the block, ``TRITON_DEJAVU_STORAGE`` writes into ``root`` and keeps its read-only layers,
    or has ``layers`` instead when given (for tools that tune into a chosen root in this process:
    kernels that open their store inside the block write there, and restore what a layer holds, as
    a process with the variable does; worker processes started inside it inherit it)."""
    before = os.environ.get(STORAGE)
    kept = storage_roots()[1:] if layers is None else layers
    os.environ[STORAGE] = os.pathsep.join([str(root), *(str(layer) for layer in kept)])
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(STORAGE, None)
        else:
            os.environ[STORAGE] = before


def visible_gpus() -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` split on commas (None when unset: every GPU of the host is visible)."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    return [part.strip() for part in raw.split(",") if part.strip()]


#: Variables of :data:`ALL` that triton-dejavu reads and this package does not.
NOT_READ = (DISABLE_JITCACHE, INSTANCE_RUN_ID)


def for_workers() -> dict[str, str]:
    """The variables a tuning worker on another machine must share with this process to store
    results under the same identity and run the same way: every ``TRITON_DEJAVU_*`` variable the
    package reads but the storage root, empty when unset here (every reader takes an empty value as
    unset: a node's own value, such as a cluster image's ``TRITON_DEJAVU_TAG``, must not change the
    results), and ``TRITON_PRINT_AUTOTUNING`` when set. Not ``TRITON_INTERPRET``: whether a node runs
    its kernels in Triton's interpreter is the node's own (a CPU-only driver needs it to load the
    SPEC; a GPU node given it would tune the interpreter)."""
    out = {name: os.environ.get(name, "") for name in ALL if name != STORAGE and name not in NOT_READ}
    if "TRITON_PRINT_AUTOTUNING" in os.environ:
        out["TRITON_PRINT_AUTOTUNING"] = os.environ["TRITON_PRINT_AUTOTUNING"]
    return out


def tag() -> str | None:
    """``TRITON_DEJAVU_TAG``, the deployment name of stored results (None: unset)."""
    return _raw(TAG) or None


def cuda_version_override() -> str | None:
    return _raw(CUDA_VERSION_OVERRIDE) or None


def rocm_version_override() -> str | None:
    return _raw(ROCM_VERSION_OVERRIDE) or None

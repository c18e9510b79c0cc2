"""Keys answered without tuning: a counter in this process, and an optional JSON-lines file.

Every key that a kernel answers without tuning while tuning is off (read-only or deterministic
mode) is counted here: :func:`misses` returns ``{kernel label: {key tuple: count}}``, the label
being the kernel's ``module.qualname`` as warnings name it (two kernels of one short name in
different modules are told apart). A key is answered once per process (the answer is then kept in
memory), so within one process the count is how many times the key was decided (again after
``reset_misses()`` or a new kernel object).

With ``TRITON_DEJAVU_MISSES_FILE=path`` each such answer is also appended to ``path`` as one JSON
line (``{"label", "kernel", "key", "key_text", "answer", "config", "pid", "time"}``: ``kernel`` is
the short name the store uses, the key is in the package's typed JSON), so that
``python -m triton_dejavu_like misses path`` can aggregate what several serving processes missed,
by label (lines written before the label was added are grouped by their short name), each key
with its values as JSON (:attr:`MissSummary.key_values`) for a SPEC that tunes them. The file is
kept outside the store: a path inside a storage root (of ``TRITON_DEJAVU_STORAGE``, the kernel's
``custom_data_storage``, an ``add_store`` folder) is refused. Its directory must exist (nothing
is created); each line is written with one ``write`` in append mode, so processes sharing the file
do not interleave lines.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from .. import _env
from .._compat import Config
from .._log import DejavuStorageWarning, warn_once
from ..codec import DecodingError, EncodingError, decode_key, describe_config, encode_key
from ..store import default_root, registered_stores
from ..store.files import open_regular

#: The answers a miss can get without tuning.
ANSWERS = ("nearest", "heuristic", "default")
#: A line of a misses file is a few hundred bytes; a longer one than this is not read.
MAX_LINE_BYTES = 1 << 20

_lock = threading.Lock()
_counts: dict[str, Counter[tuple[Any, ...]]] = {}


def misses() -> dict[str, dict[tuple[Any, ...], int]]:
    """``{kernel label: {key tuple: count}}`` of the keys this process answered without tuning; the
    label is the kernel's ``module.qualname``, as warnings name it."""
    with _lock:
        return {label: dict(counts) for label, counts in _counts.items()}


def reset_misses() -> None:
    """Forget the counted misses (the misses file is left as it is)."""
    with _lock:
        _counts.clear()


@dataclass(frozen=True)
class Miss:
    """One key answered without tuning: the kernel's label (``module.qualname``) and short name;
    ``root``: its ``custom_data_storage`` root, if it has one (no misses are written there either)."""

    label: str
    kernel: str
    key: tuple[Any, ...]
    answer: str
    config: Config
    root: Path | None = None


def record_miss(miss: Miss) -> None:
    """Count a key answered without tuning, and append it to the misses file when one is set."""
    with _lock:
        _counts.setdefault(miss.label, Counter())[miss.key] += 1
    path = _env.misses_file()
    if path is not None:
        _append(path, miss)


def _inside_store(path: Path, own: Path | None) -> Path | None:
    """The storage root ``path`` lies in, if any: a root of ``TRITON_DEJAVU_STORAGE`` (unset: the user
    cache directory), the kernel's ``own`` root, or a folder registered with ``add_store``."""
    roots = _env.storage_roots() or [default_root()]
    roots += [own.expanduser().absolute()] if own is not None else []
    roots += [layer.location for layer in registered_stores() if isinstance(layer.location, Path)]
    for root in roots:
        if path == root or root in path.parents:
            return root
    return None


def _append(path: Path, miss: Miss) -> None:
    root = _inside_store(path, miss.root)
    if root is not None:
        warn_once(
            DejavuStorageWarning,
            str(path),
            "%s=%s lies inside the storage root %s; misses are not written into a store",
            _env.MISSES_FILE,
            path,
            root,
        )
        return
    try:
        encoded: Any = encode_key(miss.key)
    except (EncodingError, ValueError):
        encoded = None
    record = {
        "label": miss.label,
        "kernel": miss.kernel,
        "key": encoded,
        "key_text": repr(miss.key)[:1000],
        "answer": miss.answer,
        "config": describe_config(miss.config),
        "pid": os.getpid(),
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    line = (json.dumps(record, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")
    # created when missing, in a directory that must exist; never waited for: a named pipe nobody
    # reads (a log collector that is down) fails at once instead of blocking the launch
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0)
    flags |= getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError as exc:
        warn_once(
            DejavuStorageWarning,
            str(path),
            "cannot append misses to %s=%s (%s); they are only counted in memory",
            _env.MISSES_FILE,
            path,
            exc,
        )


# --- reading a misses file (the CLI) -------------------------------------------------------------------


@dataclass(frozen=True)
class MissSummary:
    """How often one kernel's key was answered one way, over the lines of a misses file."""

    label: str  # module.qualname (lines without one: the short name)
    kernel: str  # the short name, as the store names the kernel
    key: str  # the key as Python writes it
    answer: str
    count: int
    configs: tuple[str, ...]
    #: the key's values as JSON: ints, finite floats, strings, bools and None as they are, the others
    #: in the package's typed JSON (a torch dtype ``{"torch.dtype": "float16"}``, a tuple, NaN; see
    #: :mod:`~triton_dejavu_like.codec`, whose ``decode_key`` gives the Python values back); None when
    #: the serving process could not encode the key (``key`` is then the only record of it)
    key_values: list[Any] | None = None


def read_misses_file(path: Path) -> tuple[list[MissSummary], int]:
    """The lines of a misses file aggregated by (label, key, answer), most frequent first, and
    the number of lines that could not be used. Raises ``OSError`` (a directory:
    ``IsADirectoryError``) or ``InvalidCacheFile`` (not a regular file).

    The file only grows (every serving process appends to it), so it is read line by line, whatever
    its size; a line longer than :data:`MAX_LINE_BYTES` is counted as unusable."""
    return read_misses_files([path])


def read_misses_files(paths: Iterable[Path]) -> tuple[list[MissSummary], int]:
    """The lines of several misses files (one per deployment, or per day) aggregated as one file's
    (:func:`read_misses_file`)."""

    def lines() -> Iterator[str]:
        for path in paths:
            with open_regular(path) as handle:
                yield from _lines(handle)

    return aggregate(lines())


def _lines(handle: BinaryIO) -> Iterator[str]:
    """The file's lines, each read with a bounded size (an over-long line comes out as one bad line)."""
    while line := handle.readline(MAX_LINE_BYTES + 1):
        if len(line) > MAX_LINE_BYTES:
            while line and not line.endswith(b"\n"):  # skip the rest of it
                line = handle.readline(MAX_LINE_BYTES)
            yield "\0"  # not JSON: counted as unusable
            continue
        yield line.decode("utf-8", errors="replace")


def aggregate(lines: Iterable[str]) -> tuple[list[MissSummary], int]:
    counts: Counter[tuple[str, str, str, str]] = Counter()
    configs: dict[tuple[str, str, str, str], set[str]] = {}
    values: dict[tuple[str, str, str, str], list[Any] | None] = {}
    bad = 0
    for line in lines:
        if not line.strip():
            continue
        group = _parse_line(line)
        if group is None:
            bad += 1
            continue
        what, config, key_values = group
        counts[what] += 1
        configs.setdefault(what, set()).add(config)
        if values.get(what) is None:
            values[what] = key_values
    rows = [MissSummary(*what, n, tuple(sorted(configs[what])), values[what]) for what, n in counts.items()]
    rows.sort(key=lambda r: (-r.count, r.label, r.key, r.answer))
    return rows, bad


def _parse_line(line: str) -> tuple[tuple[str, str, str, str], str, list[Any] | None] | None:
    """``((label, kernel, key text, answer), config, key values)`` of one line (the values as
    :attr:`MissSummary.key_values`), or None if it is no miss record."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    kernel, answer, config = record.get("kernel"), record.get("answer"), record.get("config", "")
    label = record.get("label", kernel)  # lines written before the label: the short name
    if answer not in ANSWERS or not all(isinstance(v, str) for v in (kernel, label, config)):
        return None
    key_values: list[Any] | None = None
    try:  # the typed key when it could be stored; its text otherwise
        key = decode_key(record.get("key"))
        key_text, key_values = repr(key), encode_key(key)
    except (DecodingError, EncodingError, ValueError, TypeError):
        key_text = record.get("key_text")
        if not isinstance(key_text, str):
            return None
    return (label[:1000], kernel[:1000], key_text[:1000], answer), config[:300], key_values

"""Where and how tuning results live on disk, and how they survive crashes, races and bad files.

Layout (every component sanitised, so no name can leave the root)::

    <root>/dejavu_<maj.min>/triton_<ver>/<cuda_X.Y | rocm_X.Y.Z | cpu>/gpu_<name>/<kernel>/
        autotune_config-<h>/code_version-<h>/tune_features-<h>/kernel_configs-<h>/<tag>/cache.json

``cache.json`` holds a schema version, the identity it was made for, and one entry per tuning key.

Guarantees (each one is exercised by the test suite, see ``docs/storage.md``):

- Writes take a lock (one ``cache.json.lock`` per cache file, an ``flock`` the kernel drops when its
  holder dies), re-read the file, merge, write a temporary file in the same directory, fsync it and
  ``os.replace`` it over the old one: readers see the old or the new file, concurrent writers lose
  nothing, and a writer killed at any point leaves the previous file intact.
- A file that is not a valid document (not UTF-8, not JSON, wrong shape, unknown schema, too big)
  is moved aside as ``cache.json.corrupt-*`` with one warning naming it. An entry that is invalid
  in an otherwise valid file (wrong types, non-finite timings, a config naming parameters the kernel
  lacks) is moved to a ``cache.json.rejected-*`` file and the rest of the file stays in use. Nothing
  is deleted, nothing read from a file is executed.
- A file made for another identity, or by a newer schema, is neither used nor overwritten.
- A storage root that cannot be written degrades to in-memory results with one warning per root.
- Files and directories are created with the user's umask; a replaced file keeps its permissions.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import math
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import filelock

from .codec import canonical_json, decode_config, decode_key, key_id
from .identity import Platform, sanitize

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
CACHE_FILE_NAME = "cache.json"
#: A cache file over this size is not read (moved aside): a result file is a few kB per key.
MAX_FILE_BYTES = 64 * 1024 * 1024
LOCK_TIMEOUT_S = 120.0
ENV_STORAGE = "TRITON_DEJAVU_STORAGE"
ENV_TAG = "TRITON_DEJAVU_TAG"
DEFAULT_TAG = "default"
#: Suffixes of the files kept next to a cache file: bad files moved aside, rejected entries, the lock.
CORRUPT_SUFFIX = ".corrupt-"
REJECTED_SUFFIX = ".rejected-"
LOCK_SUFFIX = ".lock"
#: The identity fields of a document, in path order (see :func:`identity_relative_dir`).
IDENTITY_FIELDS = (
    "dejavu",
    "triton",
    "toolchain",
    "gpu",
    "kernel",
    "autotune_config",
    "code_version",
    "tune_features",
    "kernel_configs",
    "tag",
)

_announced_roots: set[str] = set()
_warned: set[tuple[str, str]] = set()
_warn_lock = threading.Lock()


def warn_once(kind: str, subject: str, message: str, *args: Any) -> None:
    """Log a warning once per process for a (kind, subject) pair."""
    with _warn_lock:
        if (kind, subject) in _warned:
            return
        _warned.add((kind, subject))
    log.warning(message, *args)


def default_root() -> Path:
    """``$TRITON_DEJAVU_STORAGE``, else the user cache directory (platformdirs)."""
    configured = os.environ.get(ENV_STORAGE)
    if configured:
        return Path(configured).expanduser()
    import platformdirs

    root = Path(platformdirs.user_cache_dir("triton_dejavu_like", appauthor=False))
    if str(root) not in _announced_roots:
        _announced_roots.add(str(root))
        log.info("storing tuning results under %s (set %s to change)", root, ENV_STORAGE)
    return root


def default_tag() -> str:
    return os.environ.get(ENV_TAG) or DEFAULT_TAG


def identity_relative_dir(identity: Mapping[str, Any]) -> Path:
    """The directory (relative to a storage root) of the cache file made for ``identity``.

    Every component goes through :func:`~triton_dejavu_like.identity.sanitize`: a tag, kernel or GPU
    name holding ``/``, ``..``, spaces or control characters stays one readable path component.
    """
    ident = {name: str(identity[name]) for name in IDENTITY_FIELDS}
    return Path(
        sanitize(f"dejavu_{ident['dejavu']}"),
        sanitize(f"triton_{ident['triton']}"),
        sanitize(ident["toolchain"]),
        sanitize(f"gpu_{ident['gpu']}"),
        sanitize(ident["kernel"]),
        sanitize(f"autotune_config-{ident['autotune_config']}"),
        sanitize(f"code_version-{ident['code_version']}"),
        sanitize(f"tune_features-{ident['tune_features']}"),
        sanitize(f"kernel_configs-{ident['kernel_configs']}"),
        sanitize(ident["tag"]),
    )


@dataclass(frozen=True)
class KernelIdentity:
    """Everything a stored result depends on; it decides the file's path."""

    platform: Platform
    kernel: str
    autotune_config: str
    code_version: str
    tune_features: str
    kernel_configs: str
    tag: str

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.platform.as_dict(),
            "kernel": self.kernel,
            "autotune_config": self.autotune_config,
            "code_version": self.code_version,
            "tune_features": self.tune_features,
            "kernel_configs": self.kernel_configs,
            "tag": self.tag,
        }

    def relative_dir(self) -> Path:
        return identity_relative_dir(self.as_dict())


# --- the document: parsing and validation --------------------------------------------------------------


class InvalidCacheFile(ValueError):
    """A cache file that is not a valid document of this schema (it is moved aside)."""


class NewerSchemaFile(InvalidCacheFile):
    """A cache file written by a newer release (a higher schema version): left untouched."""


@dataclass
class Document:
    """A parsed cache file: its identity, its valid entries, and the entries it had to reject."""

    identity: dict[str, Any]
    entries: dict[str, dict[str, Any]]
    #: key id -> (the raw entry, why it was rejected)
    rejected: dict[str, tuple[Any, str]] = field(default_factory=dict)


def parse_document(raw: bytes, *, parameters: Collection[str] | None = None) -> Document:
    """Parse a cache file's bytes.

    Raises :class:`InvalidCacheFile` when the document as a whole is unusable (encoding, syntax,
    shape, schema, identity); an entry that fails :func:`validate_entry` lands in ``rejected``.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidCacheFile(f"not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    try:
        doc = json.loads(text)  # NaN/Infinity literals parse; validation rejects their entries
    except json.JSONDecodeError as exc:
        raise InvalidCacheFile(f"not JSON ({exc.msg} at line {exc.lineno})") from exc
    except RecursionError as exc:
        raise InvalidCacheFile("JSON nested too deeply") from exc
    except ValueError as exc:  # e.g. an integer over Python's digit limit
        raise InvalidCacheFile(f"not a valid JSON value ({str(exc)[:120]})") from exc
    if not isinstance(doc, dict):
        raise InvalidCacheFile("the document is not an object")
    schema = doc.get("schema")
    if isinstance(schema, int) and not isinstance(schema, bool) and schema > SCHEMA_VERSION:
        raise NewerSchemaFile(f"schema version {schema} is newer than this release reads ({SCHEMA_VERSION})")
    if schema != SCHEMA_VERSION or isinstance(schema, bool):
        raise InvalidCacheFile(f"unknown schema version {schema!r:.40} (this release reads {SCHEMA_VERSION})")
    identity = doc.get("identity")
    if not isinstance(identity, dict):
        raise InvalidCacheFile("'identity' is missing or not an object")
    for name in IDENTITY_FIELDS:
        if not isinstance(identity.get(name), str):
            raise InvalidCacheFile(f"identity field {name!r} is missing or not a string")
    entries = doc.get("entries")
    if not isinstance(entries, dict):
        raise InvalidCacheFile("'entries' is missing or not an object")
    valid: dict[str, dict[str, Any]] = {}
    rejected: dict[str, tuple[Any, str]] = {}
    for kid, entry in entries.items():
        reason = entry_problem(kid, entry, parameters=parameters)
        if reason is not None:
            rejected[kid] = (entry, reason)
        else:
            valid[kid] = entry
    return Document(identity, valid, rejected)


def _finite_number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidCacheFile(f"{what} is not a number: {type(value).__name__}")
    try:
        number = float(value)  # an int too large for a float raises OverflowError
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise InvalidCacheFile(f"{what} is not a finite number")
    return number


def _timings(value: Any, what: str) -> None:
    if not isinstance(value, list) or not value:
        raise InvalidCacheFile(f"{what} is not a non-empty list")
    for v in value:
        if _finite_number(v, what) < 0:
            raise InvalidCacheFile(f"{what} holds a negative time")


def parse_timestamp(text: Any) -> _dt.datetime:
    """An entry's ``tuned_at`` (ISO 8601) as an aware UTC datetime; naive times are taken as UTC."""
    if not isinstance(text, str):
        raise InvalidCacheFile(f"tuned_at is not a string: {text!r:.40}")
    try:
        moment = _dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidCacheFile(f"tuned_at is not an ISO 8601 time: {text!r:.40}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.timezone.utc)
    try:
        return moment.astimezone(_dt.timezone.utc)
    except OverflowError as exc:  # e.g. 0001-01-01T00:00:00+23:59 lands before year 1 in UTC
        raise InvalidCacheFile(f"tuned_at is outside the calendar in UTC: {text!r:.40}") from exc


def _config(data: Any, parameters: Collection[str] | None, what: str) -> None:
    config, _ = decode_config(data)
    if parameters is not None:
        unknown = sorted(set(config.kwargs) - set(parameters))
        if unknown:
            raise InvalidCacheFile(f"{what} names parameters the kernel lacks: {', '.join(unknown)[:120]}")


def entry_problem(kid: str, entry: Any, *, parameters: Collection[str] | None = None) -> str | None:
    """Why ``entry`` (read from disk, so anything at all) cannot be used, or None when it is valid.

    Never raises: whatever goes wrong while validating data read from a file rejects the entry.
    """
    try:
        validate_entry(kid, entry, parameters=parameters)
    except ValueError as exc:  # InvalidCacheFile, DecodingError: a message written for the user
        return str(exc)[:300] or type(exc).__name__
    except Exception as exc:  # data from disk: any other failure also rejects, never crashes
        return f"{type(exc).__name__}: {str(exc)[:280]}"
    return None


def validate_entry(kid: str, entry: Any, *, parameters: Collection[str] | None = None) -> None:
    """Raise if ``entry`` is not a complete, well-typed result for the key filed as ``kid``.

    ``parameters``: the kernel's argument names; a config naming anything else is invalid.
    """
    if not isinstance(entry, dict):
        raise InvalidCacheFile("an entry is not an object")
    key = decode_key(entry.get("key"))
    if key_id(key) != kid:
        raise InvalidCacheFile("the entry's key does not match the name it is filed under")
    _config(entry.get("config"), parameters, "the config")
    _timings(entry.get("timings_ms"), "timings_ms")
    for name in ("evaluated", "space_size"):
        value = entry.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidCacheFile(f"{name} is not a count: {value!r:.40}")
    if not isinstance(entry.get("strategy"), str):
        raise InvalidCacheFile("strategy is not a string")
    _finite_number(entry.get("tuning_time_s"), "tuning_time_s")
    parse_timestamp(entry.get("tuned_at"))
    for name in ("top", "ruled_out"):
        if not isinstance(entry.get(name, []), list):
            raise InvalidCacheFile(f"{name} is not a list")
    for item in entry.get("top", []):
        if not isinstance(item, dict):
            raise InvalidCacheFile("a top-k item is not an object")
        _config(item.get("config"), parameters, "a top-k config")
        _timings(item.get("timings_ms"), "top-k timings_ms")
    for item in entry.get("ruled_out", []):
        if not isinstance(item, dict) or not isinstance(item.get("reason"), str):
            raise InvalidCacheFile("a ruled-out item is not an object with a reason")
        _config(item.get("config"), parameters, "a ruled-out config")


def new_document(identity: Mapping[str, Any], entries: Mapping[str, Any]) -> dict[str, Any]:
    return {"schema": SCHEMA_VERSION, "identity": dict(identity), "entries": dict(entries)}


def dump_document(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def read_bounded(path: Path, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file, refusing anything else (a FIFO would block) or a file too big.

    Raises :class:`InvalidCacheFile` for a file over the limit or not a regular file, ``OSError``
    when it cannot be opened or read.
    """
    limit = MAX_FILE_BYTES if max_bytes is None else max_bytes
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise InvalidCacheFile("not a regular file")
        if info.st_size > limit:
            raise InvalidCacheFile(f"{info.st_size} bytes, over the {limit}-byte limit")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise InvalidCacheFile(f"over the {limit}-byte limit")
    return data


def read_document(path: Path, *, parameters: Collection[str] | None = None) -> Document:
    """Read and parse one cache file (raises ``OSError`` or :class:`InvalidCacheFile`)."""
    return parse_document(read_bounded(path), parameters=parameters)


# --- writing -------------------------------------------------------------------------------------------


def _temp_name(path: Path) -> str:
    return f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # make the rename durable where the platform allows it
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never a mix.

    A new file is created with mode 0o666 minus the umask, like any file the user creates; a file
    that is replaced keeps its permission bits.
    """
    tmp = path.with_name(_temp_name(path))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            if hasattr(os, "fchmod"):
                with contextlib.suppress(FileNotFoundError):
                    os.fchmod(handle.fileno(), stat.S_IMODE(os.stat(path).st_mode))
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def _aside_name(path: Path, suffix: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S")
    return path.with_name(f"{path.name}{suffix}{stamp}-{os.getpid()}-{secrets.token_hex(3)}")


def quarantine(path: Path, reason: str) -> Path | None:
    """Move a bad file aside (never delete it) and say so once, naming the file."""
    target = _aside_name(path, CORRUPT_SUFFIX)
    try:
        os.replace(path, target)
    except OSError as exc:
        log.warning(
            "ignoring unreadable tuning cache %s (%s); could not move it aside: %s", path, reason, exc
        )
        return None
    log.warning("ignoring unreadable tuning cache %s (%s); moved it to %s", path, reason, target.name)
    return target


def remove_orphan_temp_files(path: Path) -> list[Path]:
    """Delete temporary files of ``path`` left by writers that died mid-write.

    Call it only while holding the file's lock: writers create temporary files under the lock, so
    any temporary file seen then belongs to a writer that is gone.
    """
    removed = []
    with contextlib.suppress(OSError):
        for tmp in path.parent.glob(f".{path.name}.*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()
                removed.append(tmp)
    if removed:
        log.debug("removed %d temporary files left by interrupted writers of %s", len(removed), path)
    return removed


@contextlib.contextmanager
def file_lock(path: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the lock of the cache file ``path`` (creating its directory).

    On POSIX this is an ``flock`` on ``<path>.lock``: the kernel releases it when its holder exits or
    is killed, so a dead process never blocks the others.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(path) + LOCK_SUFFIX, timeout=timeout):
        yield


# --- one cache file ------------------------------------------------------------------------------------

EntryMap = dict[str, dict[str, Any]]


class CacheFile:
    """One ``cache.json``: load its entries, and merge new ones into it under the lock.

    ``root`` is the storage root the file lives under (one warning per root when it cannot be
    written); ``parameters`` are the kernel's argument names (a stored config naming anything else
    is rejected).
    """

    def __init__(
        self,
        path: Path,
        identity: Mapping[str, Any],
        *,
        root: Path | None = None,
        parameters: Collection[str] | None = None,
        lock_timeout: float = LOCK_TIMEOUT_S,
    ) -> None:
        self.path = Path(path)
        self.identity = dict(identity)
        self.root = Path(root) if root is not None else self.path.parent
        self.parameters = frozenset(parameters) if parameters is not None else None
        self.lock_timeout = lock_timeout
        self.writable = True

    @classmethod
    def for_identity(
        cls,
        root: Path,
        identity: Mapping[str, Any],
        *,
        parameters: Collection[str] | None = None,
        lock_timeout: float = LOCK_TIMEOUT_S,
    ) -> CacheFile:
        """The cache file a kernel of this identity uses under ``root``."""
        path = Path(root) / identity_relative_dir(identity) / CACHE_FILE_NAME
        return cls(path, identity, root=root, parameters=parameters, lock_timeout=lock_timeout)

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + LOCK_SUFFIX)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with file_lock(self.path, self.lock_timeout):
            yield

    def _read(self, *, exclusive: bool) -> Document | None:
        """The usable document at ``path``, or None (missing, unreadable, invalid, foreign, newer).

        ``exclusive``: the caller holds the lock, so a bad file may be moved aside and rejected
        entries set apart; without it, problems are only reported.
        """
        try:
            doc = read_document(self.path, parameters=self.parameters)
        except FileNotFoundError:
            return None
        except NewerSchemaFile as exc:
            self._refuse(
                "newer",
                "tuning cache %s was written by a newer release (%s); it is neither used nor overwritten",
                exc,
            )
            return None
        except InvalidCacheFile as exc:
            if exclusive:
                quarantine(self.path, str(exc))
            else:
                warn_once("invalid", str(self.path), "ignoring invalid tuning cache %s: %s", self.path, exc)
            return None
        except OSError as exc:  # what cannot be read cannot be merged: leave it as it is
            self._refuse(
                "unreadable", "cannot read tuning cache %s (%s); it is neither used nor overwritten", exc
            )
            return None
        if doc.identity != self.identity:
            self._refuse(
                "foreign",
                "tuning cache %s was made for another identity (%s); it is neither used nor overwritten",
                canonical_json(doc.identity)[:300],
            )
            return None
        if doc.rejected:
            self._set_aside_rejected(doc, exclusive=exclusive)
        return doc

    def _refuse(self, kind: str, message: str, detail: Any) -> None:
        self.writable = False
        warn_once(kind, str(self.path), message, self.path, detail)

    def _set_aside_rejected(self, doc: Document, *, exclusive: bool) -> None:
        """Move invalid entries to a ``cache.json.rejected-*`` file and keep the valid ones in place."""
        first_kid, (_, first_reason) = next(iter(doc.rejected.items()))
        summary = f"{len(doc.rejected)} invalid entries (first: {first_kid[:80]}: {first_reason})"
        if not exclusive:
            warn_once("rejected", str(self.path), "tuning cache %s: ignoring %s", self.path, summary)
            return
        target = _aside_name(self.path, REJECTED_SUFFIX)
        aside = {
            "schema": SCHEMA_VERSION,
            "identity": doc.identity,
            "rejected": {
                kid: {"entry": raw, "reason": reason} for kid, (raw, reason) in doc.rejected.items()
            },
        }
        try:  # first the copy, then the rewrite: a crash in between duplicates, never loses
            atomic_write(target, (json.dumps(aside, indent=1, sort_keys=True) + "\n").encode("utf-8"))
            atomic_write(self.path, dump_document(new_document(doc.identity, doc.entries)))
        except (OSError, ValueError) as exc:
            log.warning(
                "tuning cache %s: ignoring %s; could not move them aside: %s", self.path, summary, exc
            )
            return
        log.warning("tuning cache %s: moved %s to %s", self.path, summary, target.name)
        doc.rejected = {}

    def load(self) -> EntryMap:
        """The stored entries by key id (empty when there is no usable file)."""
        if not self.path.exists():
            return {}
        try:  # the common case, a valid file of ours, needs no lock: writers replace files atomically
            doc = read_document(self.path, parameters=self.parameters)
        except (OSError, InvalidCacheFile, NewerSchemaFile):
            doc = None
        if doc is not None and doc.identity == self.identity and not doc.rejected:
            return dict(doc.entries)
        try:  # anything else is handled under the lock, where a bad file may be moved aside
            with self._locked():
                doc = self._read(exclusive=True)
        except (OSError, filelock.Timeout):
            # read-only or locked for too long: read without the lock (writers replace atomically)
            doc = self._read(exclusive=False)
        return dict(doc.entries) if doc else {}

    def record(self, entries: Mapping[str, dict[str, Any]]) -> bool:
        """Merge ``entries`` into the file (new entries win per key). False if it could not write."""
        valid = {}
        for kid, entry in entries.items():
            problem = entry_problem(kid, entry, parameters=self.parameters)
            if problem is not None:
                warn_once(
                    "unstorable",
                    f"{self.path}:{kid}",
                    "not storing the result for key %s in %s: %s",
                    kid[:200],
                    self.path,
                    problem,
                )
            else:
                valid[kid] = entry
        if not valid:
            return False
        return self.update(lambda current: {**current, **valid})

    def update(self, change: Callable[[EntryMap], EntryMap]) -> bool:
        """Replace the entries by ``change(current entries)`` under the lock; an empty result removes
        the file. False (with a warning) when the file could not be written."""
        if not self.writable:
            return False
        try:
            with self._locked():
                remove_orphan_temp_files(self.path)
                doc = self._read(exclusive=True)
                if not self.writable:
                    return False
                current = dict(doc.entries) if doc else {}
                new = change(dict(current))
                if new == current:
                    return True
                if new:
                    atomic_write(self.path, dump_document(new_document(self.identity, new)))
                else:
                    with contextlib.suppress(FileNotFoundError):
                        self.path.unlink()
            return True
        except filelock.Timeout:
            warn_once(
                "lock-timeout",
                str(self.lock_path),
                "could not lock %s within %.0f s; keeping results in memory",
                self.lock_path,
                self.lock_timeout,
            )
        except OSError as exc:
            warn_once(
                "readonly",
                str(self.root),
                "cannot write tuning results under %s (%s); results stay in memory for this process",
                self.root,
                exc,
            )
        return False

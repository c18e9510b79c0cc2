"""Where and how tuning results live on disk.

Layout (every component sanitised, so no name can leave the root)::

    <root>/dejavu_<maj.min>/triton_<ver>/<cuda_X.Y | rocm_X.Y.Z | cpu>/gpu_<name>/<kernel>/
        autotune_config-<h>/code_version-<h>/tune_features-<h>/kernel_configs-<h>/<tag>/cache.json

``cache.json`` holds a schema version, the identity it was made for, and one entry per tuning key.
Writes take a lock (one lock file per cache file), re-read the file, merge (new results win per
key), write a temporary file in the same directory, fsync it and ``os.replace`` it over the old one,
so readers never see a partial file and concurrent writers lose nothing. A file that cannot be read
or validated is moved aside with a warning; nothing in it is ever executed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import secrets
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock

from .codec import DecodingError, canonical_json, decode_config, decode_key, key_id
from .identity import Platform, package_major_minor, sanitize

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
CACHE_FILE_NAME = "cache.json"
MAX_FILE_BYTES = 64 * 1024 * 1024
LOCK_TIMEOUT_S = 120.0
ENV_STORAGE = "TRITON_DEJAVU_STORAGE"
ENV_TAG = "TRITON_DEJAVU_TAG"
DEFAULT_TAG = "default"

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
        p = self.platform
        return Path(
            sanitize(f"dejavu_{package_major_minor()}"),
            sanitize(f"triton_{p.triton}"),
            sanitize(p.toolchain),
            sanitize(f"gpu_{p.gpu}"),
            sanitize(self.kernel),
            sanitize(f"autotune_config-{self.autotune_config}"),
            sanitize(f"code_version-{self.code_version}"),
            sanitize(f"tune_features-{self.tune_features}"),
            sanitize(f"kernel_configs-{self.kernel_configs}"),
            sanitize(self.tag),
        )


class InvalidCacheFile(ValueError):
    """A cache file that is not a valid document of this schema."""


def _reject_constant(name: str) -> Any:
    raise InvalidCacheFile(f"non-finite number {name} in JSON")


def parse_document(raw: bytes) -> dict[str, Any]:
    """Parse and validate a cache file's bytes; raise :class:`InvalidCacheFile` on any problem."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidCacheFile(f"not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InvalidCacheFile(f"not JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(doc, dict):
        raise InvalidCacheFile("the document is not an object")
    schema = doc.get("schema")
    if schema != SCHEMA_VERSION:
        raise InvalidCacheFile(f"unknown schema version {schema!r:.40} (this version reads {SCHEMA_VERSION})")
    if not isinstance(doc.get("identity"), dict):
        raise InvalidCacheFile("'identity' is missing or not an object")
    entries = doc.get("entries")
    if not isinstance(entries, dict):
        raise InvalidCacheFile("'entries' is missing or not an object")
    for kid, entry in entries.items():
        try:
            validate_entry(kid, entry)
        except (DecodingError, InvalidCacheFile, TypeError, ValueError) as exc:
            raise InvalidCacheFile(f"entry {kid[:80]}: {exc}") from exc
    return doc


def _finite_number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidCacheFile(f"{what} is not a finite number: {value!r:.40}")
    return float(value)


def _timings(value: Any, what: str) -> None:
    if not isinstance(value, list) or not value:
        raise InvalidCacheFile(f"{what} is not a non-empty list")
    for v in value:
        if _finite_number(v, what) < 0:
            raise InvalidCacheFile(f"{what} holds a negative time")


def validate_entry(kid: str, entry: Any) -> None:
    if not isinstance(entry, dict):
        raise InvalidCacheFile("an entry is not an object")
    key = decode_key(entry.get("key"))
    if key_id(key) != kid:
        raise InvalidCacheFile("the entry's key does not match the name it is filed under")
    decode_config(entry.get("config"))
    _timings(entry.get("timings_ms"), "timings_ms")
    for name in ("evaluated", "space_size"):
        value = entry.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidCacheFile(f"{name} is not a count: {value!r:.40}")
    if not isinstance(entry.get("strategy"), str):
        raise InvalidCacheFile("strategy is not a string")
    _finite_number(entry.get("tuning_time_s"), "tuning_time_s")
    if not isinstance(entry.get("tuned_at"), str):
        raise InvalidCacheFile("tuned_at is not a string")
    for item in entry.get("top", []):
        if not isinstance(item, dict):
            raise InvalidCacheFile("a top-k item is not an object")
        decode_config(item.get("config"))
        _timings(item.get("timings_ms"), "top-k timings_ms")
    for item in entry.get("ruled_out", []):
        if not isinstance(item, dict) or not isinstance(item.get("reason"), str):
            raise InvalidCacheFile("a ruled-out item is not an object with a reason")
        decode_config(item.get("config"))


def new_document(identity: Mapping[str, Any], entries: Mapping[str, Any]) -> dict[str, Any]:
    return {"schema": SCHEMA_VERSION, "identity": dict(identity), "entries": dict(entries)}


def dump_document(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never a mix.

    The temporary file is created with mode 0o666 minus the umask, like any file the user creates.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):  # make the rename durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def quarantine(path: Path, reason: str) -> Path | None:
    """Move a bad file aside (never delete it) and say so once, naming the file."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}-{os.getpid()}")
    try:
        os.replace(path, target)
    except OSError as exc:
        log.warning(
            "ignoring unreadable tuning cache %s (%s); could not move it aside: %s", path, reason, exc
        )
        return None
    log.warning("ignoring unreadable tuning cache %s (%s); moved it to %s", path, reason, target.name)
    return target


class CacheFile:
    """One ``cache.json``: load, and record new entries under a lock."""

    def __init__(
        self, path: Path, identity: Mapping[str, Any], *, lock_timeout: float = LOCK_TIMEOUT_S
    ) -> None:
        self.path = Path(path)
        self.identity = dict(identity)
        self.lock_timeout = lock_timeout
        self.writable = True

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(self.lock_path), timeout=self.lock_timeout)
        with lock:
            yield

    def _read(self, *, move_bad_aside: bool) -> dict[str, Any] | None:
        """The valid document at ``path``, or None (missing, unreadable, invalid, foreign)."""
        try:
            size = self.path.stat().st_size
            if size > MAX_FILE_BYTES:
                raise InvalidCacheFile(f"{size} bytes, over the {MAX_FILE_BYTES}-byte limit")
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except InvalidCacheFile as exc:
            if move_bad_aside:
                quarantine(self.path, str(exc))
            return None
        except OSError as exc:
            warn_once("unreadable", str(self.path), "cannot read tuning cache %s: %s", self.path, exc)
            return None
        try:
            doc = parse_document(raw)
        except InvalidCacheFile as exc:
            if move_bad_aside:
                quarantine(self.path, str(exc))
            else:
                warn_once("invalid", str(self.path), "ignoring invalid tuning cache %s: %s", self.path, exc)
            return None
        if doc["identity"] != self.identity:
            warn_once(
                "foreign",
                str(self.path),
                "tuning cache %s was made for another identity (%s); it is neither used nor overwritten",
                self.path,
                canonical_json(doc["identity"])[:300],
            )
            self.writable = False
            return None
        return doc

    def load(self) -> dict[str, dict[str, Any]]:
        """The stored entries by key id (empty when there is no usable file)."""
        if not self.path.exists():
            return {}
        try:
            with self._locked():
                doc = self._read(move_bad_aside=True)
        except (OSError, filelock.Timeout):
            # read-only or locked for too long: read without the lock (writers replace atomically)
            doc = self._read(move_bad_aside=False)
        return dict(doc["entries"]) if doc else {}

    def record(self, entries: Mapping[str, dict[str, Any]]) -> bool:
        """Merge ``entries`` into the file (new entries win per key). False if it could not write."""
        if not self.writable:
            return False
        try:
            with self._locked():
                doc = self._read(move_bad_aside=True)
                if not self.writable:
                    return False
                merged = dict(doc["entries"]) if doc else {}
                merged.update(entries)
                atomic_write(self.path, dump_document(new_document(self.identity, merged)))
            return True
        except filelock.Timeout:
            log.warning(
                "could not lock %s within %.0f s; keeping this result in memory",
                self.lock_path,
                self.lock_timeout,
            )
        except OSError as exc:
            warn_once(
                "readonly",
                str(self.path.parent),
                "cannot write tuning results under %s (%s); results stay in memory for this process",
                self.path.parent,
                exc,
            )
        return False

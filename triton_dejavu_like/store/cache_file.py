"""One cache file on disk, and how it survives crashes, races and bad files.

``cache.json`` holds a schema version, the identity it was made for, and one entry per tuning key
(:class:`~triton_dejavu_like.store.entry.StoredEntry`); where it lives is :mod:`.layout`'s business.

Guarantees (each one is exercised by the test suite, see ``docs/storage.md``):

- Writes take a lock (one ``cache.json.lock`` per cache file, an ``flock`` the kernel drops when its
  holder dies), re-read the file, merge, write a temporary file in the same directory, fsync it and
  ``os.replace`` it over the old one: readers see the old or the new file, concurrent writers lose
  nothing, and a writer killed at any point leaves the previous file intact.
- A file that is not a valid document (not UTF-8, not JSON, wrong shape, unknown schema, too big)
  is moved aside as ``cache.json.corrupt-*`` with one warning naming it. An entry that is invalid
  in an otherwise valid file (wrong types, non-finite timings, a config naming parameters the kernel
  lacks, any value that cannot be read) is moved to a ``cache.json.rejected-*`` file and the rest of
  the file stays in use. A tool's rewrite of files of any identity (``prune``, ``merge``) keeps such
  entries in the file as they are instead: written for another Triton or by a newer release, they may be valid
  there. Nothing is deleted, nothing read from a file is executed.
- A file made for another identity, or by a newer schema, is neither used nor overwritten.
- A change that would make the file larger than :data:`MAX_FILE_BYTES` is not written (readers would
  set the whole file aside): the stored file stays as it is, with one warning.
- A storage root that cannot be written degrades to in-memory results with one warning per root.
- A process does not parse again what it last read or wrote: a file whose bytes hash to the same
  digest holds the same entries, and an entry whose JSON is unchanged is not validated again. A new
  key recorded into a file of thousands costs a read, a hash and a write, not a parse and a dump.
- Files and directories are created with the user's umask; a replaced file keeps its permissions and group.

Every problem the user must act on is a :class:`~triton_dejavu_like.DejavuStorageWarning`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import secrets
import stat
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import filelock

from .._log import DejavuStorageWarning, log, warn_once
from ..codec import canonical_json
from .entry import InvalidEntry, StoredEntry, UnknownEntry, same_json
from .layout import CORRUPT_SUFFIX, IDENTITY_FIELDS, LOCK_SUFFIX, REJECTED_SUFFIX, cache_path

SCHEMA_VERSION = 1
#: A cache file over this size is not read (moved aside): a result file is a few kB per key.
MAX_FILE_BYTES = 64 * 1024 * 1024
LOCK_TIMEOUT_S = 120.0
#: What a lookup of the file fails with when there is no file to read (as ``Path.exists`` takes them;
#: a symlink loop in the file's place is replaced by the next write)
_MISSING = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EBADF)

EntryMap = dict[str, StoredEntry]
#: The top-level members of a cache file this release reads (any other is kept as it is)
_MEMBERS = ("entries", "identity", "schema")


# --- the document: parsing -------------------------------------------------------------------------------


class InvalidCacheFile(ValueError):
    """A cache file that is not a valid document of this schema (it is moved aside)."""


class NewerSchemaFile(InvalidCacheFile):
    """A cache file written by a newer release (a higher schema version): left untouched."""


@dataclass
class Document:
    """A parsed cache file: its identity, its valid entries, and the entries it had to reject."""

    identity: dict[str, Any]
    entries: EntryMap
    #: key id -> (the raw entry, why it was rejected)
    rejected: dict[str, tuple[Any, str]] = field(default_factory=dict)
    #: top-level members other than schema, identity and entries (a note, a later release's field):
    #: written back as they were
    extra: dict[str, Any] = field(default_factory=dict)
    #: the key ids among ``rejected`` of entries holding a value of a kind this release does not read
    #: (:class:`UnknownEntry`: a later release's): kept in the file as they are, never set aside
    unknown: set[str] = field(default_factory=set)


def parse_document(
    raw: bytes,
    *,
    parameters: Collection[str] | None = None,
    only: Collection[str] | None = None,
    known: Mapping[str, StoredEntry] | None = None,
) -> Document:
    """Parse a cache file's bytes.

    Raises :class:`InvalidCacheFile` when the document as a whole is unusable (encoding, syntax,
    shape, schema, identity); an entry that is not valid lands in ``rejected``. With ``only``, just
    the entries of those key ids are validated and returned (a look-up of one key in a big file).
    ``known``: entries validated before with the same ``parameters``; one whose JSON is equal to
    what is read is taken as it is instead of being validated again.
    """
    doc, finite = _load_json(raw)
    identity, entries = _check_header(doc)
    extra = {name: value for name, value in doc.items() if name not in _MEMBERS}
    valid: EntryMap = {}
    rejected: dict[str, tuple[Any, str]] = {}
    unknown: set[str] = set()
    wanted = entries.items() if only is None else ((k, entries[k]) for k in only if k in entries)
    for kid, data in wanted:
        before = known.get(kid) if known is not None else None
        if before is not None and same_json(before.data, data):
            valid[kid] = before
            continue
        try:  # finite: no entry needs to be searched for NaN and infinities
            valid[kid] = StoredEntry.from_json(kid, data, parameters=parameters, finite=finite)
        except InvalidEntry as exc:
            rejected[kid] = (data, str(exc) or "invalid")
            if isinstance(exc, UnknownEntry):
                unknown.add(kid)
    return Document(identity, valid, rejected, extra, unknown)


def _load_json(raw: bytes) -> tuple[Any, bool]:
    """The JSON value of ``raw``, and whether it holds no NaN or infinity (the literals ``NaN`` and
    ``Infinity`` parse, as does ``1e999``; validation rejects the entries holding them)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidCacheFile(f"not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    non_finite: list[str] = []

    def number(literal: str) -> float:
        value = float(literal)
        if not math.isfinite(value):
            non_finite.append(literal)
        return value

    try:
        doc = json.loads(text, parse_float=number, parse_constant=number)
    except json.JSONDecodeError as exc:
        # some of json's messages end in "at" ("Invalid control character at"): not "at at line 1"
        where = f"line {exc.lineno}, column {exc.colno}"
        raise InvalidCacheFile(f"not JSON ({exc.msg.removesuffix(' at')} at {where})") from exc
    except RecursionError as exc:
        raise InvalidCacheFile("JSON nested too deeply") from exc
    except ValueError as exc:  # e.g. an integer over Python's digit limit
        raise InvalidCacheFile(f"not a valid JSON value ({str(exc)[:120]})") from exc
    return doc, not non_finite


def _check_header(doc: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The identity and the raw entries of a parsed document whose schema this release reads."""
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
    if not all(isinstance(value, str) for value in identity.values()):
        raise InvalidCacheFile("an identity field is not a string")  # identities are hashed as JSON
    entries = doc.get("entries")
    if not isinstance(entries, dict):
        raise InvalidCacheFile("'entries' is missing or not an object")
    return identity, entries


def new_document(
    identity: Mapping[str, Any], entries: Mapping[str, Any], extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A document (``entries`` as :class:`StoredEntry` or as the JSON values to write as they are;
    ``extra``: other top-level members, written as they are)."""
    return {
        **(extra or {}),
        "schema": SCHEMA_VERSION,
        "identity": dict(identity),
        "entries": {
            kid: entry.data if isinstance(entry, StoredEntry) else entry for kid, entry in entries.items()
        },
    }


def dump_document(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def _nested_text(value: Any, depth: int, *, allow_nan: bool = False) -> str:
    """``value`` as :func:`dump_document` writes it ``depth`` levels deep (strings in JSON hold no
    newline, so every line but the first is indented by ``depth``)."""
    body = json.dumps(value, indent=1, sort_keys=True, allow_nan=allow_nan)
    return body.replace("\n", "\n" + " " * depth)


def _member_text(kid: str, data: Any, *, allow_nan: bool = False) -> str:
    """One member of ``entries`` as it stands in a file written by :func:`dump_document`."""
    return f"  {json.dumps(kid)}: " + _nested_text(data, 2, allow_nan=allow_nan)


def entry_text(kid: str, entry: StoredEntry) -> str:
    """One entry as it stands in a file written by :func:`dump_document` (without the separator)."""
    return _member_text(kid, entry.data)


def assemble_document(
    identity: Mapping[str, Any], texts: Collection[str], extra: Mapping[str, Any] | None = None
) -> bytes:
    """The bytes :func:`dump_document` writes for ``identity``, entries already turned into text by
    :func:`entry_text` (in key order: what lets a writer serialize only the entries that changed),
    and the other top-level members ``extra``."""
    members = {name: _nested_text(value, 1, allow_nan=True) for name, value in (extra or {}).items()}
    members["entries"] = "{\n" + ",\n".join(texts) + "\n }" if texts else "{}"
    members["identity"] = _nested_text(dict(identity), 1)
    members["schema"] = str(SCHEMA_VERSION)
    body = ",\n".join(f" {json.dumps(name)}: {members[name]}" for name in sorted(members))
    return f"{{\n{body}\n}}\n".encode()


def read_bounded(path: Path) -> bytes:
    """The bytes of a regular file, refusing anything else (a FIFO would block) or a file too big.

    Raises :class:`InvalidCacheFile` for a file over the limit or not a regular file, ``OSError``
    when it cannot be opened or read.
    """
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > MAX_FILE_BYTES:
            raise InvalidCacheFile(f"{size} bytes, over the {MAX_FILE_BYTES}-byte limit")
        data = handle.read(MAX_FILE_BYTES + 1)  # a file that grew since
    if len(data) > MAX_FILE_BYTES:
        raise InvalidCacheFile(f"over the {MAX_FILE_BYTES}-byte limit")
    return data


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading in binary, refusing anything but a regular file (a FIFO would
    block): :class:`InvalidCacheFile`, or ``IsADirectoryError`` for a directory."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):  # someone's directory: refused, never moved aside
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        raise InvalidCacheFile("not a regular file")
    return os.fdopen(fd, "rb")


def read_document(
    path: Path, *, parameters: Collection[str] | None = None, only: Collection[str] | None = None
) -> Document:
    """Read and parse one cache file (raises ``OSError`` or :class:`InvalidCacheFile`); ``only``: as
    for :func:`parse_document`."""
    return parse_document(read_bounded(path), parameters=parameters, only=only)


# --- writing -------------------------------------------------------------------------------------------


def followed(path: Path) -> Path:
    """``path``, or the file it links to: where a write lands and what its lock guards (links are
    followed everywhere, so two roots whose cache files link to one file share its lock)."""
    return Path(os.path.realpath(path)) if os.path.islink(path) else path


def _temp_name(path: Path) -> str:
    return f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # make the rename durable where the platform allows it
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _keep_attributes(fd: int, path: Path) -> None:
    """Give the new file ``fd`` the permission bits, group and owner of the file it replaces at
    ``path`` (nothing when there is none). The group first: a writer of a shared store is mostly
    not its owner, and may give the file to any group it belongs to; the owner only where this
    process may give files away (root). What cannot be kept stays as created."""
    try:
        old = os.stat(path)
    except OSError:
        return
    if hasattr(os, "fchown"):
        for owner in (old.st_uid, -1):
            try:
                os.fchown(fd, owner, old.st_gid)
                break
            except OSError:
                continue
    if hasattr(os, "fchmod"):  # after fchown, which may clear the set-group-ID bit
        with contextlib.suppress(OSError):
            os.fchmod(fd, stat.S_IMODE(old.st_mode))


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never a mix.

    A new file is created with mode 0o666 minus the umask, like any file the user creates; a file
    that is replaced keeps its permission bits and its group (and its owner, where this process may
    give files away). A symbolic link is written through (links are followed everywhere): the file
    it points to is replaced, and the link stays.
    """
    path = followed(path)
    tmp = path.with_name(_temp_name(path))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            _keep_attributes(handle.fileno(), path)
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
        warn_once(
            DejavuStorageWarning,
            str(path),
            "ignoring unreadable tuning cache %s (%s); could not move it aside: %s",
            path,
            reason,
            exc,
        )
        return None
    warn_once(  # each file set aside is news, also a second one of the same path
        DejavuStorageWarning,
        str(target),
        "ignoring unreadable tuning cache %s (%s); moved it to %s",
        path,
        reason,
        target.name,
    )
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
        keep_unreadable: bool = False,
        keep_unknown: bool = True,
    ) -> None:
        self.path = Path(path)
        self.identity = dict(identity)
        self.root = Path(root) if root is not None else self.path.parent
        self.parameters = frozenset(parameters) if parameters is not None else None
        self.lock_timeout = lock_timeout
        #: a tool's rewrite (prune, merge, an import): entries this release cannot read stay in the
        #: file as they are (written by another Triton or a newer release, say), never set aside
        self.keep_unreadable = keep_unreadable
        #: entries of a kind this release does not read (a later release's) stay as they are; False
        #: for a rewrite that removes the whole file (prune of another platform), which sets them aside
        self.keep_unknown = keep_unknown
        #: the raw entries kept as they are at the last read under the lock (with ``keep_unreadable``)
        self.unreadable: dict[str, Any] = {}
        self.writable = True
        #: why the last :meth:`update` wrote nothing although the file is ours (None: it wrote, or
        #: the reason was a warning about the file or its root)
        self.refused: str | None = None
        #: the digest of the bytes last read or written, and that document's valid entries
        self._known: tuple[bytes, EntryMap] | None = None
        #: key id -> (entry, its text) for the entries of the document last written
        self._texts: dict[str, tuple[StoredEntry, str]] = {}
        #: the other top-level members of the document last read whole (written back as they were)
        self._extra: dict[str, Any] = {}

    @classmethod
    def for_identity(
        cls,
        root: Path,
        identity: Mapping[str, Any],
        *,
        parameters: Collection[str] | None = None,
        lock_timeout: float = LOCK_TIMEOUT_S,
        keep_unreadable: bool = False,
    ) -> CacheFile:
        """The cache file a kernel of this identity uses under ``root``."""
        path = cache_path(root, identity)
        return cls(
            path,
            identity,
            root=root,
            parameters=parameters,
            lock_timeout=lock_timeout,
            keep_unreadable=keep_unreadable,
        )

    @property
    def lock_path(self) -> Path:
        path = followed(self.path)
        return path.with_name(path.name + LOCK_SUFFIX)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with file_lock(followed(self.path), self.lock_timeout):
            yield

    def _parse(self, raw: bytes, *, only: Collection[str] | None = None) -> Document:
        """``raw`` parsed as :func:`parse_document` does, without parsing again what this object
        last read or wrote: the same bytes give the same entries, an unchanged entry is not
        validated again."""
        digest = hashlib.sha256(raw).digest()
        known = self._known
        if known is not None and known[0] == digest:
            entries = known[1] if only is None else {k: known[1][k] for k in only if k in known[1]}
            return Document(dict(self.identity), dict(entries))
        doc = parse_document(
            raw, parameters=self.parameters, only=only, known=known[1] if known is not None else None
        )
        if only is None:  # (the same bytes as known, above, hold the same members)
            self._extra = doc.extra
            if doc.identity == self.identity and not doc.rejected:
                self._known = (digest, doc.entries)
        return doc

    def _read_parsed(self, *, only: Collection[str] | None = None) -> Document:
        return self._parse(read_bounded(self.path), only=only)

    def _dump(self, entries: EntryMap, kept: Mapping[str, Any] | None = None) -> bytes:
        """The document of ``entries`` and the raw entries ``kept`` as they are (a valid entry of the
        same key wins), serializing only the entries not written last time."""
        texts: dict[str, tuple[StoredEntry, str]] = {}
        for kid in sorted(entries):
            entry = entries[kid]
            before = self._texts.get(kid)
            if before is not None and (before[0] is entry or same_json(before[0].data, entry.data)):
                texts[kid] = before
            else:
                texts[kid] = (entry, entry_text(kid, entry))
        self._texts = texts
        every = {kid: text for kid, (_, text) in texts.items()}
        for kid, raw in (kept or {}).items():
            if kid not in every:  # NaN and infinities stay as they were read
                every[kid] = _member_text(kid, raw, allow_nan=True)
        return assemble_document(self.identity, [every[kid] for kid in sorted(every)], self._extra)

    def _read(self, *, exclusive: bool) -> Document | None:
        """The usable document at ``path``, or None (missing, unreadable, invalid, foreign, newer).

        ``exclusive``: the caller holds the lock, so a bad file may be moved aside and rejected
        entries set apart; without it, problems are only reported.
        """
        try:
            doc = self._read_parsed()
        except FileNotFoundError:
            return None
        except NewerSchemaFile as exc:
            self._refuse(
                "tuning cache %s was written by a newer release (%s); it is neither used nor overwritten",
                exc,
            )
            return None
        except InvalidCacheFile as exc:
            if exclusive:
                quarantine(self.path, str(exc))
            else:
                warn_once(
                    DejavuStorageWarning,
                    str(self.path),
                    "ignoring invalid tuning cache %s: %s",
                    self.path,
                    exc,
                )
            return None
        except OSError as exc:  # what cannot be read cannot be merged: leave it as it is
            self._refuse("cannot read tuning cache %s (%s); it is neither used nor overwritten", exc)
            return None
        if doc.identity != self.identity:
            self._refuse(
                "tuning cache %s was made for another identity (%s); it is neither used nor overwritten",
                canonical_json(doc.identity)[:300],
            )
            return None
        if doc.rejected:
            self._sort_rejected(doc, exclusive=exclusive)
        return doc

    def _sort_rejected(self, doc: Document, *, exclusive: bool) -> None:
        """Keep in the file, as they are, the entries this release cannot read but a later one may
        (every invalid entry with ``keep_unreadable``), and set the others aside."""
        kept = {
            kid: raw
            for kid, (raw, _) in doc.rejected.items()
            if self.keep_unreadable or (self.keep_unknown and kid in doc.unknown)
        }
        if kept:
            self.unreadable = kept
        if kept and not self.keep_unreadable:
            first_kid = next(iter(kept))
            warn_once(
                DejavuStorageWarning,
                str(self.path),
                "tuning cache %s holds %d entries of a kind this release does not read (first: %s: %s), "
                "written by a later release or with another torch: they are not used here and stay in "
                "the file as they are",
                self.path,
                len(kept),
                first_kid[:80],
                doc.rejected[first_kid][1],
            )
        if len(kept) < len(doc.rejected):
            self._set_aside_rejected(doc, kept, exclusive=exclusive)

    def _refuse(self, message: str, detail: Any) -> None:
        self.writable = False
        warn_once(DejavuStorageWarning, str(self.path), message, self.path, detail)

    def _set_aside_rejected(self, doc: Document, kept: Mapping[str, Any], *, exclusive: bool) -> None:
        """Move invalid entries but those ``kept`` (raw, left as they are) to a ``cache.json.rejected-*``
        file and keep the valid ones in place."""
        invalid = {kid: item for kid, item in doc.rejected.items() if kid not in kept}
        first_kid, (_, first_reason) = next(iter(invalid.items()))
        summary = f"{len(invalid)} invalid entries (first: {first_kid[:80]}: {first_reason})"
        if not exclusive:
            warn_once(
                DejavuStorageWarning, str(self.path), "tuning cache %s: ignoring %s", self.path, summary
            )
            return
        target = _aside_name(self.path, REJECTED_SUFFIX)
        aside = {
            "schema": SCHEMA_VERSION,
            "identity": doc.identity,
            "rejected": {kid: {"entry": raw, "reason": reason} for kid, (raw, reason) in invalid.items()},
        }
        rewritten = new_document(doc.identity, {**kept, **doc.entries}, doc.extra)
        try:  # first the copy, then the rewrite: a crash in between duplicates, never loses
            atomic_write(target, (json.dumps(aside, indent=1, sort_keys=True) + "\n").encode("utf-8"))
            atomic_write(self.path, dump_document(rewritten))
        except (OSError, ValueError) as exc:
            warn_once(
                DejavuStorageWarning,
                str(self.path),
                "tuning cache %s: ignoring %s; could not move them aside: %s",
                self.path,
                summary,
                exc,
            )
            return
        warn_once(
            DejavuStorageWarning,
            str(target),
            "tuning cache %s: moved %s to %s",
            self.path,
            summary,
            target.name,
        )
        doc.rejected = {kid: item for kid, item in doc.rejected.items() if kid in kept}

    def load(self, *, repair: bool = True) -> EntryMap:
        """The stored entries by key id (empty when there is no usable file).

        ``repair=False`` never writes (no lock file, no directory, nothing moved aside): problems
        are only reported. Read-only mode and read-only layers load this way.
        """
        try:
            os.stat(self.path)
        except OSError as exc:
            if exc.errno in _MISSING:
                return {}
            # a folder on the way that this user cannot search
            self._refuse("cannot read tuning cache %s (%s); it is neither used nor overwritten", exc)
            return {}
        try:  # the common case, a valid file of ours, needs no lock: writers replace files atomically
            doc = self._read_parsed()
        except (OSError, InvalidCacheFile):
            doc = None
        if doc is not None and doc.identity == self.identity and not doc.rejected:
            return dict(doc.entries)
        if not repair:
            doc = self._read(exclusive=False)
            return dict(doc.entries) if doc else {}
        try:  # anything else is handled under the lock, where a bad file may be moved aside
            with self._locked():
                doc = self._read(exclusive=True)
        except (OSError, filelock.Timeout):
            # read-only or locked for too long: read without the lock (writers replace atomically)
            doc = self._read(exclusive=False)
        return dict(doc.entries) if doc else {}

    def peek(self, key_id: str) -> StoredEntry | None:
        """The valid entry stored for one key right now, or None: a quick read without the lock that
        repairs nothing (for a process waiting for another one's result)."""
        try:
            doc = self._read_parsed(only=(key_id,))
        except (OSError, InvalidCacheFile):
            return None
        return doc.entries.get(key_id) if doc.identity == self.identity else None

    def record(self, entries: Mapping[str, StoredEntry | Mapping[str, Any]]) -> bool:
        """Merge ``entries`` into the file (new entries win per key). False if it could not write.

        Entries may be given as :class:`StoredEntry` or as JSON objects. Each is validated here as
        a reader of the file will validate it (filed under its own key, naming only the kernel's
        parameters), on a copy made through JSON: the entries this file keeps are what a reader
        gets, and changing the objects given changes nothing stored. An invalid one is not
        stored, with a warning.
        """
        valid: EntryMap = {}
        for kid, entry in entries.items():
            try:
                valid[kid] = self._own(kid, entry)
            except InvalidEntry as exc:
                warn_once(
                    DejavuStorageWarning,
                    f"{self.path}:{kid}",
                    "not storing the result for key %s in %s: %s",
                    kid[:200],
                    self.path,
                    exc,
                )
        if not valid:
            return False
        return self.update(lambda current: {**current, **valid})

    def _own(self, kid: str, entry: StoredEntry | Mapping[str, Any]) -> StoredEntry:
        data = entry.data if isinstance(entry, StoredEntry) else entry
        try:  # sorted as the file holds it, so that a later read compares equal, types included
            data = json.loads(json.dumps(data, sort_keys=True, allow_nan=False))
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidEntry(f"not JSON data ({str(exc)[:200]})") from exc
        return StoredEntry.from_json(kid, data, parameters=self.parameters, finite=True)

    def update(self, change: Callable[[EntryMap], EntryMap]) -> bool:
        """Replace the entries by ``change(current entries)`` under the lock; an empty result removes
        the file. False (with a warning) when the file could not be written, or would be over
        :data:`MAX_FILE_BYTES` (then the stored file is left as it is)."""
        self.refused = None
        if not self.writable:
            return False
        try:
            with self._locked():
                remove_orphan_temp_files(self.path)
                self.unreadable = {}
                doc = self._read(exclusive=True)
                if not self.writable:
                    return False
                if doc is None:  # no file, or one set aside: nothing of it is written back
                    self._extra = {}
                current = dict(doc.entries) if doc else {}
                new = change(dict(current))
                if new == current and (new or self.unreadable or doc is None):
                    return True  # (a file left with no entry is removed)
                if new or self.unreadable:
                    data = self._dump(new, self.unreadable)
                    if len(data) > MAX_FILE_BYTES:  # every reader would set the whole file aside
                        self.refused = (
                            f"it would hold {len(data)} bytes, over the {MAX_FILE_BYTES}-byte limit of a "
                            f"readable file ({len(new)} entries)"
                        )
                        warn_once(
                            DejavuStorageWarning,
                            str(self.path),
                            "not writing tuning cache %s: %s; it stays as it is, and what was not written "
                            "is not stored (make room: python -m triton_dejavu_like prune --keep-newest N, "
                            "or --older-than DATE)",
                            self.path,
                            self.refused,
                        )
                        return False
                    atomic_write(self.path, data)
                    # bytes holding entries kept unread are parsed again (their digest alone would
                    # give the valid entries, and the next rewrite would leave the others out)
                    self._known = None if self.unreadable else (hashlib.sha256(data).digest(), dict(new))
                else:
                    with contextlib.suppress(FileNotFoundError):
                        self.path.unlink()
            return True
        except filelock.Timeout:
            warn_once(
                DejavuStorageWarning,
                str(self.lock_path),
                "could not lock %s within %.3g s; keeping results in memory",
                self.lock_path,
                self.lock_timeout,
            )
        except OSError as exc:
            warn_once(
                DejavuStorageWarning,
                str(self.root),
                "cannot write tuning results under %s (%s); results stay in memory for this process",
                self.root,
                exc,
            )
        return False

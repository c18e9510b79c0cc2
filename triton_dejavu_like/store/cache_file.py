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
- A change that would make the file larger than :data:`.files.MAX_FILE_BYTES` is not written (readers would
  set the whole file aside): the stored file stays as it is, with one warning.
- A storage root that cannot be written degrades to in-memory results with one warning per root.
- A process does not parse again what it last read or wrote: a file whose bytes hash to the same
  digest holds the same entries, and an entry whose JSON is unchanged is not validated again. A new
  key recorded into a file of thousands costs a read, a hash and a write, not a parse and a dump.
- Files and directories are created with the user's umask; a replaced file keeps its permissions and group.

What a document holds and how it is parsed and written is :mod:`.document`; the safe reads and
writes of one file are :mod:`.files`; which invalid entries stay and which are moved aside is
:mod:`.rejected`. Every problem the user must act on is a :class:`~triton_dejavu_like.DejavuStorageWarning`.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import json
import os
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import filelock

from .. import _env
from .._log import DejavuStorageWarning, warn_once
from ..codec import canonical_json
from . import document, files
from .document import Document, EntryMap, InvalidCacheFile, NewerSchemaFile, parse_document
from .entry import InvalidEntry, StoredEntry, same_json
from .files import LOCK_TIMEOUT_S, atomic_write, file_lock, followed, quarantine, remove_orphan_temp_files
from .layout import LOCK_SUFFIX, cache_path
from .rejected import sort_rejected

#: How long a lock is waited for once a wait for it timed out in this process, until one succeeds: a
#: holder stopped (SIGSTOP) or hung costs the full ``lock_timeout`` once, not at every result.
STUCK_LOCK_WAIT_S = 1.0

#: The cache files of this process holding entries back for a stuck lock (written at exit; a forked
#: child, a compile or isolation worker, does not write its parent's).
_holding: weakref.WeakSet[CacheFile] = weakref.WeakSet()
os.register_at_fork(after_in_child=_holding.clear)


@atexit.register
def _write_held_back_at_exit() -> None:
    for cache_file in list(_holding):
        if not cache_file.write_held_back():
            warn_once(
                DejavuStorageWarning,
                f"{cache_file.path}:exit",
                "%d tuning results were not written to %s: its lock was still held when this process "
                "exited (by a stopped or hung process); later processes tune those keys again",
                len(cache_file._held_back),
                cache_file.path,
            )


#: What a lookup of the file fails with when there is no file to read (as ``Path.exists`` takes them;
#: a symlink loop in the file's place is replaced by the next write)
_MISSING = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EBADF)


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
        tool_rewrite: bool = False,
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
        #: a tool's rewrite (merge, prune, an import or export): a root it cannot write is said in
        #: :attr:`refused`, which the tool reports, not with the tuner's warning (results kept in
        #: memory, later processes tuning again: nothing a tool does)
        self.tool_rewrite = tool_rewrite
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
        #: the last wait for the lock timed out (later waits are short until one succeeds)
        self._lock_stuck = False
        #: entries a record could not write for the lock: written with the next record that can,
        #: where the file has no entry of their key by then
        self._held_back: EntryMap = {}
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
        tool_rewrite: bool = False,
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
            tool_rewrite=tool_rewrite,
        )

    @property
    def lock_path(self) -> Path:
        path = followed(self.path)
        return path.with_name(path.name + LOCK_SUFFIX)

    @property
    def _stuck_wait_s(self) -> float:
        """How long the lock is waited for after a wait for it timed out."""
        return min(self.lock_timeout, STUCK_LOCK_WAIT_S)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        timeout = self._stuck_wait_s if self._lock_stuck else self.lock_timeout
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(file_lock(followed(self.path), timeout))
            except filelock.Timeout:
                self._lock_stuck = True
                raise
            self._lock_stuck = False
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
        return self._parse(files.read_bounded(self.path), only=only)

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
                texts[kid] = (entry, document.entry_text(kid, entry))
        self._texts = texts
        every = {kid: text for kid, (_, text) in texts.items()}
        for kid, raw in (kept or {}).items():
            if kid not in every:  # NaN and infinities stay as they were read
                every[kid] = document.member_text(kid, raw, allow_nan=True)
        return document.assemble_document(self.identity, [every[kid] for kid in sorted(every)], self._extra)

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
            kept = sort_rejected(
                self.path,
                doc,
                keep_unreadable=self.keep_unreadable,
                keep_unknown=self.keep_unknown,
                exclusive=exclusive,
            )
            if kept:
                self.unreadable = kept
        return doc

    def _refuse(self, message: str, detail: Any) -> None:
        self.writable = False
        warn_once(DejavuStorageWarning, str(self.path), message, self.path, detail)

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
        held = self._held_back
        if self.update(lambda current: {**held, **current, **valid}):
            self._held_back = {}
            return True
        if self._lock_stuck:
            self._held_back = {**held, **valid}
            _holding.add(self)
        return False

    def write_held_back(self) -> bool:
        """Write the entries held back for the lock (where the file has no entry of their key by
        then); True when none is left. Called at the process's exit for every file holding some: a
        process that records nothing after a stuck lock loses nothing once the lock is free."""
        held = self._held_back
        if not held:
            return True
        if self.update(lambda current: {**held, **current}):
            self._held_back = {}
            return True
        return False

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
        :data:`.files.MAX_FILE_BYTES` (then the stored file is left as it is)."""
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
                    limit = files.MAX_FILE_BYTES
                    if len(data) > limit:  # every reader would set the whole file aside
                        self.refused = (
                            f"it would hold {len(data)} bytes, over the {limit}-byte limit of a "
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
                "could not lock %s within %.3g s; results stay in memory for this process and are "
                "written with its next result, or at its exit, once the lock is free (later waits "
                "last %.3g s). "
                "Another process holds it: one stopped (SIGSTOP) or hung while it writes; continue "
                "or end it (fuser %s names it)",
                self.lock_path,
                self.lock_timeout,
                self._stuck_wait_s,
                self.lock_path,
            )
        except OSError as exc:
            if self.tool_rewrite:
                self.refused = f"cannot write under {self.root} ({exc})"
                return False
            warn_once(
                DejavuStorageWarning,
                str(self.root),
                "cannot write tuning results under %s (%s); results stay in memory for this process "
                "and later processes tune these keys again: point %s (or custom_data_storage=) at a "
                "folder this process can write",
                self.root,
                exc,
                _env.STORAGE,
            )
        return False

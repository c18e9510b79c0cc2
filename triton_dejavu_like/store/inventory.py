"""Managing stored results: find them, merge trees from several machines, prune, export.

Everything here reads cache files with the same validation as the autotuner and writes them through
:class:`~triton_dejavu_like.store.cache_file.CacheFile` (lock, re-read, atomic replace), so running
these operations next to live tuning processes is safe. Nothing here prints; the CLI does.
"""

from __future__ import annotations

import datetime as _dt
import functools
import glob
import io
import json
import os
import tarfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._log import DejavuStorageWarning, warn_once
from ..codec import canonical_json
from . import layout
from .cache_file import CacheFile
from .document import EntryMap, InvalidCacheFile, NewerSchemaFile, dump_document, new_document, parse_document
from .entry import StoredEntry
from .files import MAX_FILE_BYTES, atomic_write, read_bounded, read_document
from .identity import sanitize, stable_hash
from .layout import PLATFORM_FIELDS

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
PREFERENCES = ("newest", "fastest")


def identity_id(identity: Mapping[str, Any]) -> str:
    """A short, stable name for a storage identity (:attr:`StoredFile.identity_id`)."""
    return stable_hash(identity)[:12]


@dataclass
class StoredFile:
    """One valid cache file: where it was read from, its identity and its entries."""

    source: str  # a path, or "<archive>:<member>"
    identity: dict[str, str]
    entries: EntryMap
    rejected: dict[str, tuple[Any, str]] = field(default_factory=dict)
    path: Path | None = None  # on disk (None inside an archive)

    @property
    def identity_id(self) -> str:
        """A short, stable name for the identity (what ``list`` shows and ``show`` accepts)."""
        return identity_id(self.identity)

    @property
    def relative_dir(self) -> Path:
        return layout.relative_dir(self.identity)

    def last_tuned(self) -> _dt.datetime | None:
        return max((e.tuned_at for e in self.entries.values()), default=None)

    def matches(self, **wanted: str | None) -> bool:
        """True when every given identity field (kernel, tag, triton, ...) has the wanted value."""
        return all(value is None or self.identity.get(name) == value for name, value in wanted.items())


@dataclass
class Problem:
    """A file that could not be used, and why."""

    source: str
    reason: str


def triton_dejavu_files(root: Path, kernel: str) -> list[Path]:
    """triton-dejavu's cache files of ``kernel`` under ``root``, which the tuner does not read
    (``import-dejavu`` converts them): files in one of triton-dejavu's layouts (0.5 to 0.7, see
    :data:`~triton_dejavu_like.store.layout.DEJAVU_LAYOUTS`) outside this package's own version level,
    holding triton-dejavu's document (a ``signature`` text and a ``cache`` object). The cost is a few
    globs, each walking only folders named as triton-dejavu names its levels and this kernel."""
    ours = layout.own_version_level()
    try:
        versions = sorted(p for p in Path(root).glob("dejavu_*") if p.name != ours and p.is_dir())
    except OSError:
        return []
    found: set[Path] = set()
    for version in versions:
        for pattern in layout.dejavu_globs(version, kernel):
            for name in glob.glob(pattern):
                levels = layout.dejavu_levels(Path(name))
                if (
                    levels is not None
                    and layout.dejavu_kernel(levels) == kernel
                    and _is_dejavu_doc(Path(name))
                ):
                    found.add(Path(name))
    return sorted(found)


def _is_dejavu_doc(path: Path) -> bool:
    try:
        doc = json.loads(read_bounded(path))
    except (OSError, ValueError, RecursionError):  # InvalidCacheFile and bad JSON are ValueErrors
        return False
    return (
        isinstance(doc, dict) and isinstance(doc.get("signature"), str) and isinstance(doc.get("cache"), dict)
    )


def is_archive(path: Path) -> bool:
    """A gzipped tar archive by its name's ending, in any case (``ship.TAR.GZ``)."""
    return path.name.lower().endswith(ARCHIVE_SUFFIXES)


def is_other_archive(path: Path) -> bool:
    """A name that asks for an archive of another kind (``.tar``, ``.zip``, ...), which export does not
    write: it would otherwise become a directory of that name."""
    other = (".tar", ".zip", ".tar.bz2", ".tar.xz", ".tbz2", ".txz", ".gz")
    return not is_archive(path) and path.name.lower().endswith(other)


def walk_files(directory: Path, wanted: Callable[[str], bool]) -> list[Path]:
    """The files under ``directory`` whose name is ``wanted``, sorted, following directory links.

    The tuner reads and writes through a link inside a root (a directory replaced by a link to another
    disk), so every command sees what the tuner sees. A directory reached twice (a link loop, or two
    links to one place) is walked once.
    """
    found: list[Path] = []
    seen: set[tuple[int, int]] = set()
    for here, dirs, names in os.walk(directory, followlinks=True):
        try:
            info = os.stat(here)
        except OSError:
            dirs[:] = []
            continue
        if (info.st_dev, info.st_ino) in seen:
            dirs[:] = []
            continue
        seen.add((info.st_dev, info.st_ino))
        dirs.sort()
        found.extend(Path(here, name) for name in names if wanted(name))
    return sorted(found)


def _cache_files_under(directory: Path) -> Iterator[Path]:
    for path in walk_files(directory, lambda name: name == layout.CACHE_FILE_NAME):
        if path.is_file():
            yield path


def _archive_members(archive: Path) -> Iterator[tuple[str, bytes]]:
    """The cache files inside a .tar.gz, read in memory: nothing is extracted to disk."""
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            if not member.isfile() or Path(member.name).name != layout.CACHE_FILE_NAME:
                continue
            if member.size > MAX_FILE_BYTES:
                raise InvalidCacheFile(f"{member.name}: {member.size} bytes, over the limit")
            handle = tar.extractfile(member)
            if handle is not None:
                yield member.name, handle.read(MAX_FILE_BYTES + 1)


def read_sources(sources: Iterable[Path]) -> tuple[list[StoredFile], list[Problem]]:
    """Every cache file in ``sources`` (storage trees, cache files or .tar.gz archives).

    A source that does not exist or cannot be read, and every invalid file, is a :class:`Problem`;
    invalid entries of a valid file are kept in ``StoredFile.rejected``.
    """
    files: list[StoredFile] = []
    problems: list[Problem] = []

    def parse(label: str, data: bytes, path: Path | None) -> None:
        try:
            doc = parse_document(data)
        except InvalidCacheFile as exc:
            problems.append(Problem(label, str(exc)))
            return
        files.append(StoredFile(label, doc.identity, doc.entries, doc.rejected, path))

    for source in sources:
        source = Path(source)
        try:
            if source.is_dir():
                for path in _cache_files_under(source):
                    try:
                        parse(str(path), read_bounded(path), path)
                    except (OSError, InvalidCacheFile) as exc:
                        problems.append(Problem(str(path), str(exc)))
            elif is_archive(source):
                for name, data in _archive_members(source):
                    parse(f"{source}:{name}", data, None)
            else:
                parse(str(source), read_bounded(source), source)
        except (OSError, tarfile.TarError, EOFError, InvalidCacheFile) as exc:
            problems.append(Problem(str(source), str(exc) or type(exc).__name__))
    return files, problems


def group_by_identity(files: Iterable[StoredFile]) -> dict[str, list[StoredFile]]:
    groups: dict[str, list[StoredFile]] = {}
    for f in files:
        groups.setdefault(canonical_json(f.identity), []).append(f)
    return groups


def distinct_keys(files: Iterable[StoredFile]) -> int:
    """How many keys ``files`` hold, a key stored in several files of one identity counted once (as
    merging them, or an archive of them, holds it)."""
    return sum(len({kid for f in group for kid in f.entries}) for group in group_by_identity(files).values())


def as_served(layered: Iterable[tuple[int, StoredFile]]) -> list[StoredFile]:
    """The files of layered roots (each with its root's index, 0 the written root) holding what a
    serving process restores from them: a key of an identity comes from the first root that holds it,
    so a later root's file loses the keys an earlier root holds for its identity."""
    by_root: dict[int, list[StoredFile]] = {}
    for index, f in layered:
        by_root.setdefault(index, []).append(f)
    held: dict[str, set[str]] = {}  # identity -> the key ids of the roots before this one
    served: list[StoredFile] = []
    for index in sorted(by_root):
        files = by_root[index]
        for f in files:
            earlier = held.get(canonical_json(f.identity), set())
            entries = {kid: e for kid, e in f.entries.items() if kid not in earlier}
            served.append(replace(f, entries=entries) if len(entries) < len(f.entries) else f)
        for f in files:
            held.setdefault(canonical_json(f.identity), set()).update(f.entries)
    return served


# --- merging -------------------------------------------------------------------------------------------


@dataclass
class Conflict:
    """Two results for one key that chose different configs; ``kept`` won under the preference."""

    identity_id: str
    kernel: str
    key: str  # the key id
    kept: StoredEntry
    dropped: StoredEntry
    kept_from: str
    dropped_from: str


def _sort_key(entry: StoredEntry, prefer: str) -> tuple[float, float]:
    """Larger is better: (newer, faster) or (faster, newer)."""
    newer = entry.tuned_at.timestamp()
    faster = -entry.timings_ms[0]
    return (newer, faster) if prefer == "newest" else (faster, newer)


@dataclass
class MergeResult:
    entries: EntryMap
    origins: dict[str, str]
    conflicts: list[Conflict] = field(default_factory=list)


def merge_entries(
    merged: MergeResult,
    incoming: Mapping[str, StoredEntry],
    origin: str,
    prefer: str,
    *,
    about: StoredFile,
) -> None:
    """Fold ``incoming`` into ``merged``: per key the preferred entry wins (ties keep the one there).

    ``about``: a file of this identity (named in the conflicts).
    """
    for kid, entry in incoming.items():
        current = merged.entries.get(kid)
        if current is None:
            merged.entries[kid], merged.origins[kid] = entry, origin
            continue
        if current == entry:
            continue
        take = _sort_key(entry, prefer) > _sort_key(current, prefer)
        winner, loser = (entry, current) if take else (current, entry)
        win_from, lose_from = (origin, merged.origins[kid]) if take else (merged.origins[kid], origin)
        if current.config_id != entry.config_id:
            merged.conflicts.append(
                Conflict(about.identity_id, about.identity["kernel"], kid, winner, loser, win_from, lose_from)
            )
        merged.entries[kid], merged.origins[kid] = winner, win_from


@dataclass
class MergeReport:
    written: list[str] = field(default_factory=list)
    #: destination files whose stored entries are replaced: (path, entries replaced)
    replaced_in: list[tuple[str, int]] = field(default_factory=list)
    added: int = 0
    replaced: int = 0
    unchanged: int = 0
    conflicts: list[Conflict] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def _combine(
    current: Mapping[str, StoredEntry], group: list[StoredFile], prefer: str, label: str
) -> MergeResult:
    result = MergeResult(dict(current), dict.fromkeys(current, label))
    for f in group:
        merge_entries(result, f.entries, f.source, prefer, about=group[0])
    return result


#: Why a destination file takes no results: it was made for another identity, or by a later release.
OTHER_IDENTITY = "it holds results for another identity"
NEWER_SCHEMA = "it was written by a newer release (a higher schema version), which it is left to"


def destination_entries(target: CacheFile, writer: str, *, dry_run: bool) -> EntryMap | str:
    """The entries a write into ``target`` (its ``update()``) starts from, read without the lock and
    writing nothing; or why that write would take nothing (a file of another identity or a newer
    schema, a file that cannot be read).

    A file that is not a valid document counts as empty and invalid entries as absent: the write sets
    them aside, with a warning. A dry run (``dry_run``) gives that warning itself, saying what
    ``writer`` ("a merge") would do.
    """
    try:
        doc = read_document(target.path, parameters=target.parameters)
    except FileNotFoundError:
        return {}
    except NewerSchemaFile:
        return NEWER_SCHEMA  # as update() refuses it
    except InvalidCacheFile as exc:
        if dry_run:
            warn_once(
                DejavuStorageWarning,
                str(target.path),
                "tuning cache %s is unreadable (%s): %s would set it aside",
                target.path,
                exc,
                writer,
            )
        return {}
    except OSError as exc:
        return f"cannot read or create the destination: {exc}"
    if doc.identity != target.identity:
        return OTHER_IDENTITY
    if doc.rejected and dry_run:
        warn_once(
            DejavuStorageWarning,
            str(target.path),
            "tuning cache %s holds %d invalid entries: %s would %s",
            target.path,
            len(doc.rejected),
            writer,
            "keep them as they are" if target.keep_unreadable else "move them aside",
        )
    return dict(doc.entries)


def _merge_group(
    target: CacheFile, group: list[StoredFile], prefer: str, dry_run: bool
) -> tuple[EntryMap, MergeResult] | str:
    """(the destination's entries before, the merge) or why the destination could not take it."""
    label = str(target.path)
    outcome: list[tuple[EntryMap, MergeResult]] = []

    def change(current: EntryMap) -> EntryMap:
        outcome[:] = [(current, _combine(current, group, prefer, label))]
        return dict(outcome[0][1].entries)

    current = destination_entries(target, "a merge", dry_run=dry_run)
    if isinstance(current, str):
        return current
    if dry_run:  # what update() would do, without the lock and without writing
        change(current)
    elif not target.update(change):
        return OTHER_IDENTITY if not target.writable else target.refused or "it cannot be written"
    return outcome[0]


def merge_into(
    root: Path, files: Iterable[StoredFile], *, prefer: str = "newest", dry_run: bool = False
) -> MergeReport:
    """Merge the entries of ``files`` into the storage tree ``root``, one cache file per identity.

    Files of one identity are combined with each other and with what ``root`` already holds; for a
    key present more than once the ``prefer`` rule picks the winner ("newest": latest ``tuned_at``,
    then fastest; "fastest": lowest median time, then newest). Keys whose candidates chose different
    configs are reported as conflicts. A destination file made for another identity is not touched.
    """
    if prefer not in PREFERENCES:
        raise ValueError(f"prefer must be one of {PREFERENCES}, not {prefer!r}")
    report = MergeReport()
    for group in group_by_identity(files).values():
        target = CacheFile.for_identity(root, group[0].identity, keep_unreadable=True)
        outcome = _merge_group(target, group, prefer, dry_run)
        if isinstance(outcome, str):
            report.problems.append(Problem(str(target.path), f"not merged: {outcome}"))
            continue
        before, result = outcome
        report.written.append(str(target.path))
        replaced = sum(result.entries[kid] != entry for kid, entry in before.items())
        report.added += sum(kid not in before for kid in result.entries)
        report.replaced += replaced
        if replaced:
            report.replaced_in.append((str(target.path), replaced))
        report.unchanged += sum(result.entries[kid] == entry for kid, entry in before.items())
        report.conflicts.extend(result.conflicts)
    return report


# --- pruning -------------------------------------------------------------------------------------------


@dataclass
class PruneReport:
    removed_files: list[str] = field(default_factory=list)
    #: files that keep some entries: (path, entries removed from it)
    rewritten: list[tuple[str, int]] = field(default_factory=list)
    #: the entries removed from each file that stays, by path (oldest first)
    removed_keys: dict[str, list[StoredEntry]] = field(default_factory=dict)
    removed_entries: int = 0
    kept_entries: int = 0
    removed_aside: list[str] = field(default_factory=list)
    #: entries this release cannot read, kept as they are, by file
    unreadable: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def aside_files(root: Path, kernel: str | None) -> list[Path]:
    """Files moved aside as corrupt or rejected (under ``kernel``'s directories only, if given)."""
    kernel_dir = sanitize(kernel) if kernel is not None else None
    found = []
    for path in walk_files(root, lambda name: layout.is_aside_file(Path(name))):
        if kernel_dir is None or layout.kernel_of(path, root) == kernel_dir:
            found.append(path)
    return sorted(found)


def _pruned(
    current: EntryMap, *, drop_all: bool, older_than: _dt.datetime | None, keep_newest: int | None
) -> EntryMap:
    """``current`` without the entries tuned before ``older_than``, then with the ``keep_newest``
    most recently tuned only; nothing with ``drop_all``."""
    if drop_all:
        return {}
    if older_than is not None:
        current = {k: e for k, e in current.items() if e.tuned_at >= older_than}
    if keep_newest is not None and len(current) > keep_newest:
        newest = sorted(current, key=lambda k: (current[k].tuned_at, k), reverse=True)
        current = {k: current[k] for k in newest[:keep_newest]}
    return current


def prune(
    root: Path,
    *,
    keep: Mapping[str, str] | None = None,
    older_than: _dt.datetime | None = None,
    kernel: str | None = None,
    aside: bool = False,
    keep_newest: int | None = None,
    dry_run: bool = False,
) -> PruneReport:
    """Remove stored results under ``root``.

    ``keep``: identity fields (triton, toolchain, gpu, dejavu) a file must have to stay; a file with
    any other value is removed whole. ``older_than``: entries tuned before this moment are removed
    (a file left empty is removed). ``keep_newest``: at most this many entries stay in each file,
    the most recently tuned (a file that nears the size limit of a readable file). ``kernel``: only
    consider this kernel's files. ``aside``: also delete the files moved aside as corrupt or rejected.
    Invalid files are reported, never removed.
    """
    report = PruneReport()
    files, report.problems = read_sources([root])
    for f in files:
        if kernel is not None and f.identity["kernel"] != kernel:
            continue
        drop_all = any(f.identity.get(name) != value for name, value in (keep or {}).items())
        change = functools.partial(_pruned, drop_all=drop_all, older_than=older_than, keep_newest=keep_newest)

        remaining = change(dict(f.entries))
        # entries this release cannot read stay as they are (another Triton's or a newer release's),
        # unless the whole file goes
        kept_unreadable = {} if drop_all else f.rejected
        if not dry_run and (remaining != f.entries or not (remaining or kept_unreadable)):
            target = CacheFile(
                f.path or Path(f.source),
                f.identity,
                root=root,
                keep_unreadable=not drop_all,
                keep_unknown=not drop_all,
            )
            if not target.update(change):  # nothing of it removed: counted as kept
                report.problems.append(Problem(f.source, target.refused or "could not be rewritten"))
                report.kept_entries += len(f.entries)
                continue
        report.removed_entries += len(f.entries) - len(remaining)
        report.kept_entries += len(remaining)
        if kept_unreadable:
            report.unreadable[f.source] = len(kept_unreadable)
        if not remaining and not kept_unreadable:
            report.removed_files.append(f.source)
        elif len(remaining) < len(f.entries):
            report.rewritten.append((f.source, len(f.entries) - len(remaining)))
            gone = [e for kid, e in f.entries.items() if kid not in remaining]
            report.removed_keys[f.source] = sorted(gone, key=lambda e: (e.tuned_at, e.key_id))
    if aside:
        for path in aside_files(root, kernel):
            report.removed_aside.append(str(path))
            if not dry_run:
                try:
                    path.unlink()
                except OSError as exc:
                    report.problems.append(Problem(str(path), f"could not be removed: {exc}"))
    return report


# --- export --------------------------------------------------------------------------------------------


def platforms(files: Iterable[StoredFile]) -> list[dict[str, str]]:
    seen = {canonical_json({n: f.identity[n] for n in PLATFORM_FIELDS}) for f in files}
    return [json.loads(s) for s in sorted(seen)]


def write_archive(destination: Path, files: Iterable[StoredFile], *, dry_run: bool = False) -> list[str]:
    """A .tar.gz holding each identity's merged cache file at its path relative to a storage root.

    Members are written from memory with fixed owner and mode, so the archive unpacks anywhere
    (``tar xzf ... -C $TRITON_DEJAVU_STORAGE``) or merges with ``merge``. Returns the files written,
    named as :func:`read_sources` names them (``<archive>:<member>``).
    """
    members = []
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for group in group_by_identity(files).values():
            merged = MergeResult({}, {})
            for f in group:
                merge_entries(merged, f.entries, f.source, "newest", about=group[0])
            data = dump_document(new_document(group[0].identity, merged.entries))
            name = (group[0].relative_dir / layout.CACHE_FILE_NAME).as_posix()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            moments = [e.tuned_at for e in merged.entries.values()]
            info.mtime = int(max(moments).timestamp()) if moments else 0
            tar.addfile(info, io.BytesIO(data))
            members.append(f"{destination}:{name}")
    if dry_run:
        return members
    destination.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(destination, buffer.getvalue())
    return members

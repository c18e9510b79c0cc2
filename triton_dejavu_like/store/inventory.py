"""Reading stored results: every cache file of storage trees, single files and .tar.gz archives.

Files are read with the same validation as the autotuner, through directory links as the tuner
follows them, archives in memory; :func:`as_served` gives what layered roots serve. Nothing here
writes or prints: merging (:mod:`.tree_merge`), pruning (:mod:`.tree_prune`) and export
(:mod:`.export`) build on it, and the CLI prints.
"""

from __future__ import annotations

import datetime as _dt
import glob
import json
import os
import tarfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..codec import canonical_json
from . import layout
from .document import EntryMap, InvalidCacheFile, parse_document
from .files import MAX_FILE_BYTES, read_bounded
from .identity import stable_hash

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")


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

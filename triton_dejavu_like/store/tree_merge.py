"""Merging stored results into a storage tree: per key the preferred entry, conflicts reported.

Destination files are written through :class:`~triton_dejavu_like.store.cache_file.CacheFile` (lock,
re-read, atomic replace), so a merge next to live tuning processes is safe. Nothing here prints; the
CLI does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .._log import DejavuStorageWarning, warn_once
from .cache_file import CacheFile
from .document import EntryMap, InvalidCacheFile, NewerSchemaFile
from .entry import StoredEntry
from .files import read_document
from .inventory import Problem, StoredFile, group_by_identity

PREFERENCES = ("newest", "fastest")


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
    current: Mapping[str, StoredEntry], group: list[StoredFile], prefer: str, label: str, *, replace: bool
) -> MergeResult:
    """What the destination's entries ``current`` become: ``group`` merged into them, or (``replace``)
    laid over them, so that each key ``group`` holds has ``group``'s preferred entry."""
    result = MergeResult({}, {}) if replace else MergeResult(dict(current), dict.fromkeys(current, label))
    for f in group:
        merge_entries(result, f.entries, f.source, prefer, about=group[0])
    if replace:
        kept = {kid: entry for kid, entry in current.items() if kid not in result.entries}
        result.entries = {**kept, **result.entries}
        result.origins = {**dict.fromkeys(kept, label), **result.origins}
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
    target: CacheFile, group: list[StoredFile], prefer: str, dry_run: bool, replace: bool
) -> tuple[EntryMap, MergeResult] | str:
    """(the destination's entries before, the merge) or why the destination could not take it."""
    label = str(target.path)
    outcome: list[tuple[EntryMap, MergeResult]] = []

    def change(current: EntryMap) -> EntryMap:
        outcome[:] = [(current, _combine(current, group, prefer, label, replace=replace))]
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
    root: Path,
    files: Iterable[StoredFile],
    *,
    prefer: str = "newest",
    dry_run: bool = False,
    replace: bool = False,
) -> MergeReport:
    """Merge the entries of ``files`` into the storage tree ``root``, one cache file per identity.

    Files of one identity are combined with each other and with what ``root`` already holds; for a
    key present more than once the ``prefer`` rule picks the winner ("newest": latest ``tuned_at``,
    then fastest; "fastest": lowest median time, then newest). Keys whose candidates chose different
    configs are reported as conflicts. With ``replace`` (an export: the destination ships what was
    exported) the entries of ``files`` replace those ``root`` holds for their keys, whatever their
    age or time; its other keys stay. A destination file made for another identity is not touched.
    """
    if prefer not in PREFERENCES:
        raise ValueError(f"prefer must be one of {PREFERENCES}, not {prefer!r}")
    report = MergeReport()
    for group in group_by_identity(files).values():
        target = CacheFile.for_identity(root, group[0].identity, keep_unreadable=True, tool_rewrite=True)
        outcome = _merge_group(target, group, prefer, dry_run, replace)
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

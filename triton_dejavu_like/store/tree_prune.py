"""Pruning a storage tree: files of other identities, entries tuned before a date or beyond a count,
files moved aside.

Files are rewritten or removed through :class:`~triton_dejavu_like.store.cache_file.CacheFile` (lock,
re-read, atomic replace), so pruning next to live tuning processes is safe. Nothing here prints; the
CLI does.
"""

from __future__ import annotations

import datetime as _dt
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import layout
from .cache_file import CacheFile
from .document import EntryMap
from .entry import StoredEntry
from .identity import sanitize
from .inventory import Problem, read_sources, walk_files


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
                tool_rewrite=True,
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

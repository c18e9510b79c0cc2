"""Entries a cache file holds that this release cannot use: which stay in the file as they are, and
how the others are moved to a ``cache.json.rejected-*`` file beside it.

An entry of a kind this release does not read (:class:`~triton_dejavu_like.store.entry.UnknownEntry`:
a later release's typed value, a newer torch's dtype) stays in the file, so that a rolling upgrade's
old processes do not take the new ones' results away. A tool's rewrite of files of any identity
(``prune``, ``merge``) keeps every invalid entry as it is. Any other invalid entry is copied to the
rejected file first and then left out of the rewritten file: a crash in between duplicates it, never
loses it. Without the file's lock nothing is moved, only reported.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._log import DejavuStorageWarning, warn_once
from .document import SCHEMA_VERSION, Document, dump_document, new_document
from .files import aside_name, atomic_write
from .layout import REJECTED_SUFFIX


def sort_rejected(
    path: Path, doc: Document, *, keep_unreadable: bool, keep_unknown: bool, exclusive: bool
) -> dict[str, Any]:
    """The raw entries of ``doc.rejected`` to keep in the file as they are (every one with
    ``keep_unreadable``; those of a kind this release does not read with ``keep_unknown``), after
    setting the others aside (``exclusive``: the caller holds the lock) or reporting them."""
    kept = {
        kid: raw
        for kid, (raw, _) in doc.rejected.items()
        if keep_unreadable or (keep_unknown and kid in doc.unknown)
    }
    if kept and not keep_unreadable:
        first_kid = next(iter(kept))
        warn_once(
            DejavuStorageWarning,
            str(path),
            "tuning cache %s holds %d entries of a kind this release does not read (first: %s: %s), "
            "written by a later release or with another torch: they are not used here and stay in "
            "the file as they are",
            path,
            len(kept),
            first_kid[:80],
            doc.rejected[first_kid][1],
        )
    if len(kept) < len(doc.rejected):
        set_aside(path, doc, kept, exclusive=exclusive)
    return kept


def set_aside(path: Path, doc: Document, kept: Mapping[str, Any], *, exclusive: bool) -> None:
    """Move the invalid entries of ``doc`` but those ``kept`` (raw, left as they are) to a
    ``cache.json.rejected-*`` file and keep the valid ones in place; ``doc.rejected`` is left with
    the kept ones. Without ``exclusive`` (the lock), only a warning."""
    invalid = {kid: item for kid, item in doc.rejected.items() if kid not in kept}
    first_kid, (_, first_reason) = next(iter(invalid.items()))
    summary = f"{len(invalid)} invalid entries (first: {first_kid[:80]}: {first_reason})"
    if not exclusive:
        warn_once(DejavuStorageWarning, str(path), "tuning cache %s: ignoring %s", path, summary)
        return
    target = aside_name(path, REJECTED_SUFFIX)
    aside = {
        "schema": SCHEMA_VERSION,
        "identity": doc.identity,
        "rejected": {kid: {"entry": raw, "reason": reason} for kid, (raw, reason) in invalid.items()},
    }
    rewritten = new_document(doc.identity, {**kept, **doc.entries}, doc.extra)
    try:  # first the copy, then the rewrite: a crash in between duplicates, never loses
        atomic_write(target, (json.dumps(aside, indent=1, sort_keys=True) + "\n").encode("utf-8"))
        atomic_write(path, dump_document(rewritten))
    except (OSError, ValueError) as exc:
        warn_once(
            DejavuStorageWarning,
            str(path),
            "tuning cache %s: ignoring %s; could not move them aside: %s",
            path,
            summary,
            exc,
        )
        return
    warn_once(
        DejavuStorageWarning,
        str(target),
        "tuning cache %s: moved %s to %s",
        path,
        summary,
        target.name,
    )
    doc.rejected = {kid: item for kid, item in doc.rejected.items() if kid in kept}

"""Exporting stored results: one .tar.gz holding each identity's merged cache file."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterable
from pathlib import Path

from ..codec import canonical_json
from . import layout
from .document import dump_document, new_document
from .files import atomic_write
from .inventory import StoredFile, group_by_identity
from .layout import PLATFORM_FIELDS
from .tree_merge import MergeResult, merge_entries


def platforms(files: Iterable[StoredFile]) -> list[dict[str, str]]:
    seen = {canonical_json({n: f.identity[n] for n in PLATFORM_FIELDS}) for f in files}
    return [json.loads(s) for s in sorted(seen)]


def write_archive(destination: Path, files: Iterable[StoredFile], *, dry_run: bool = False) -> list[str]:
    """A .tar.gz holding each identity's merged cache file at its path relative to a storage root.

    Members are written from memory with fixed owner and mode, so the archive unpacks anywhere
    (``tar xzf ... -C $TRITON_DEJAVU_STORAGE``) or merges with ``merge``. Returns the files written,
    named as :func:`~.inventory.read_sources` names them (``<archive>:<member>``).
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

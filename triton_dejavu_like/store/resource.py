"""A store's folder read without writing: a path, or a package resource (``importlib.resources``,
also inside a zipped wheel), whose files are read with ``read_bytes`` under the size limit of a
cache file, never extracted."""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .._log import log
from .document import InvalidCacheFile
from .files import MAX_FILE_BYTES, read_bounded

#: What reading a file of a folder may fail with (a zip member: a failed checksum or decompression).
READ_ERRORS = (OSError, InvalidCacheFile, zipfile.BadZipFile, zlib.error)


@runtime_checkable
class Traversable(Protocol):
    """What a layer needs of a folder: ``importlib.resources`` objects and ``pathlib.Path`` qualify."""

    def __truediv__(self, child: str) -> Any: ...

    def is_dir(self) -> bool: ...

    def is_file(self) -> bool: ...

    def read_bytes(self) -> bytes: ...


def read_file(node: Traversable) -> bytes | None:
    """The bytes of the file ``node`` (None when there is none), at most a cache file's limit
    (:class:`InvalidCacheFile` otherwise); raises what :data:`READ_ERRORS` names."""
    if isinstance(node, Path):
        try:
            return read_bounded(node)  # refuses FIFOs and oversized files
        except FileNotFoundError:
            return None
    if not node.is_file():
        return None
    data = node.read_bytes()
    if len(data) > MAX_FILE_BYTES:
        raise InvalidCacheFile(f"{len(data)} bytes, over the {MAX_FILE_BYTES}-byte limit")
    return data


def is_file(node: Traversable) -> bool:
    """Whether ``node`` is a file (or a link to one); False when that cannot be told."""
    try:
        return bool(node.is_file())
    except (OSError, ValueError, zipfile.BadZipFile):
        return False


def subfolders(node: Traversable) -> list[tuple[str, Traversable]]:
    """The folders in ``node`` by name, sorted, hidden ones left out (as a glob's ``*``); none when
    ``node`` is no folder or cannot be listed (also a folder object without ``iterdir``)."""
    try:
        if not node.is_dir():
            return []
        children = [(str(child.name), child) for child in node.iterdir()]  # type: ignore[attr-defined]
        found = [(name, child) for name, child in children if not name.startswith(".") and child.is_dir()]
    except (OSError, ValueError, AttributeError, zipfile.BadZipFile) as exc:
        log.debug("cannot list %s (%s)", node, exc)
        return []
    return sorted(found, key=lambda item: item[0])

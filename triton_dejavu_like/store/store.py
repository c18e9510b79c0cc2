"""Where a kernel's results are loaded from and recorded to: the :class:`Store` protocol.

The tuner talks to a store only through this protocol: a :class:`FileStore` (one cache file under
a storage root, shared by processes), a :class:`~.layered.LayeredStore` (a writable store, then
read-only layers) or a :class:`MemoryStore` (this process only: used when the kernel's storage
identity cannot be computed). A new backend implements the same four methods.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .cache_file import CacheFile
from .document import EntryMap
from .entry import StoredEntry
from .resource import Traversable
from .warm_start import foreign_winners


@runtime_checkable
class Store(Protocol):
    """Loads and records the entries of one kernel identity."""

    def load(self, *, repair: bool = True) -> EntryMap:
        """Every stored entry by key id (read once per process by the tuner). ``repair=False``:
        write nothing, not even to set a bad file aside (read-only mode)."""
        ...

    def record(self, entries: Mapping[str, StoredEntry]) -> bool:
        """Keep ``entries`` (new ones win per key); False when they could not be kept."""
        ...

    def where(self, key_id: str | None = None) -> str:
        """Where the results live, for messages (with ``key_id``: where that key's entry was read)."""
        ...

    def foreign_winners(self) -> list[str]:
        """Config ids that won keys of the same kernel on other platforms (warm-start seeds)."""
        ...


class FileStore:
    """A kernel's cache file under a storage root."""

    def __init__(self, root: Path, identity: Mapping[str, Any], parameters: Collection[str]) -> None:
        self.root = Path(root)
        self.identity = dict(identity)
        self.cache_file = CacheFile.for_identity(self.root, self.identity, parameters=parameters)

    @property
    def path(self) -> Path:
        return self.cache_file.path

    def load(self, *, repair: bool = True) -> EntryMap:
        return self.cache_file.load(repair=repair)

    def record(self, entries: Mapping[str, StoredEntry]) -> bool:
        return self.cache_file.record(entries)

    def where(self, key_id: str | None = None) -> str:
        return str(self.path)

    def foreign_winners(self, layers: Sequence[Traversable] = ()) -> list[str]:
        """The winners of other platforms under this root, then in ``layers`` (read-only roots)."""
        return foreign_winners([self.root, *layers], self.identity, self.path, self.cache_file.parameters)


class MemoryStore:
    """Results kept in this process only."""

    def __init__(self) -> None:
        self.entries: EntryMap = {}

    def load(self, *, repair: bool = True) -> EntryMap:
        return dict(self.entries)

    def record(self, entries: Mapping[str, StoredEntry]) -> bool:
        self.entries.update(entries)
        return True

    def where(self, key_id: str | None = None) -> str:
        return "memory"

    def foreign_winners(self) -> list[str]:
        return []

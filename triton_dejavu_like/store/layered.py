"""Several stores searched in order: a writable root, then read-only layers.

``TRITON_DEJAVU_STORAGE=/rw:/shared/ro1:/shared/ro2`` (``os.pathsep``-separated) writes under the
first root and reads the others as layers; :func:`add_store` lets a kernel library register the store
it ships inside its package (a folder, also inside a zipped wheel: read through
``importlib.resources`` with ``Traversable.read_bytes()``, never extracted, never written).

A :class:`LayeredStore` loads the writable root's entries, then, for keys not found yet, each
layer's in order, and remembers where each entry came from. It records to the writable root only.
A layer is read with the same validation as any cache file; a bad file or entry in a layer is
reported and skipped, never moved aside.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._log import DejavuStorageWarning, log, warn_once
from .document import EntryMap, parse_document
from .entry import StoredEntry
from .layout import CACHE_FILE_NAME, relative_dir
from .resource import READ_ERRORS, Traversable, read_file
from .store import FileStore, Store
from .warm_start import foreign_winners


class StoreLayer:
    """A read-only store root: a directory or a package resource folder."""

    def __init__(self, location: Traversable, label: str | None = None) -> None:
        self.location = location
        self.label = label or str(location)

    def __repr__(self) -> str:
        return f"StoreLayer({self.label!r})"

    def _read(self, identity: Mapping[str, Any]) -> bytes | None:
        node: Any = self.location
        for part in (*relative_dir(identity).parts, CACHE_FILE_NAME):
            node = node / part
        return read_file(node)

    def load(self, identity: Mapping[str, Any], parameters: Collection[str] | None) -> EntryMap:
        """The valid entries this layer holds for ``identity`` (empty when it has none)."""
        where = f"{self.label} ({relative_dir(identity) / CACHE_FILE_NAME})"
        try:
            data = self._read(identity)
            if data is None:
                return {}
            doc = parse_document(data, parameters=parameters)
        except READ_ERRORS as exc:
            warn_once(DejavuStorageWarning, where, "ignoring the tuning cache in layer %s: %s", where, exc)
            return {}
        if doc.identity != dict(identity):
            warn_once(
                DejavuStorageWarning, where, "ignoring the tuning cache in layer %s: another identity", where
            )
            return {}
        if doc.rejected:
            warn_once(
                DejavuStorageWarning,
                where,
                "tuning cache in layer %s: ignoring %d invalid entries",
                where,
                len(doc.rejected),
            )
        return dict(doc.entries)


class LayeredStore:
    """The writable store first, then read-only layers in order (the :class:`Store` protocol)."""

    def __init__(
        self,
        primary: Store,
        layers: Sequence[StoreLayer],
        identity: Mapping[str, Any],
        parameters: Collection[str] | None = None,
    ) -> None:
        self.primary = primary
        self.layers = list(layers)
        self.identity = dict(identity)
        self.parameters = parameters
        self.origins: dict[str, str] = {}

    def load(self, *, repair: bool = True) -> EntryMap:
        entries = self.primary.load(repair=repair)
        origins = dict.fromkeys(entries, self.primary.where())
        for layer in self.layers:
            for kid, entry in layer.load(self.identity, self.parameters).items():
                if kid not in entries:
                    entries[kid] = entry
                    origins[kid] = layer.label
        self.origins = origins
        log.debug("loaded %d entries from %s and %d layer(s)", len(entries), self.where(), len(self.layers))
        return entries

    def add_layers(self, layers: Sequence[StoreLayer], known: Collection[str]) -> EntryMap:
        """Read ``layers`` (registered after this store was loaded) behind the others: their entries
        for keys neither in ``known`` nor found in an earlier layer."""
        found: EntryMap = {}
        for layer in layers:
            self.layers.append(layer)
            for kid, entry in layer.load(self.identity, self.parameters).items():
                if kid not in known and kid not in found:
                    found[kid] = entry
                    self.origins[kid] = layer.label
        return found

    def record(self, entries: Mapping[str, StoredEntry]) -> bool:
        ok = self.primary.record(entries)
        if ok:
            self.origins.update(dict.fromkeys(entries, self.primary.where()))
        return ok

    def where(self, key_id: str | None = None) -> str:
        if key_id is not None and key_id in self.origins:
            return self.origins[key_id]
        return self.primary.where()

    def foreign_winners(self) -> list[str]:
        """The winners of other platforms under the written root and in every layer, each key of a
        sibling identity counted from the first root that holds it (as serving restores it)."""
        layers = [layer.location for layer in self.layers]
        if isinstance(self.primary, FileStore):
            return self.primary.foreign_winners(layers)
        return foreign_winners(layers, self.identity, parameters=self.parameters)


# --- stores registered by kernel libraries -----------------------------------------------------------

_registered: list[StoreLayer] = []
_registered_lock = threading.Lock()
_generation = 0  # grows with every store registered: a kernel compares it at a miss


def add_store(location: str | os.PathLike[str] | Traversable) -> None:
    """Register a read-only store that a kernel library ships (searched after the layers of
    ``TRITON_DEJAVU_STORAGE``, in the order of registration).

    ``location`` is a folder: a path, or a package resource such as
    ``importlib.resources.files("my_kernels") / "tuned"`` (also inside a zipped wheel). It holds
    cache files in the usual layout (``dejavu_*/triton_*/...``). Nothing is ever written there.
    A kernel opens its store at its first miss in the process; one that opened it before reads a
    store registered later at its next miss, for the keys it has not decided yet (a key it already
    answered keeps that answer for the life of the process), so call it when the library is
    imported. A folder that does not exist is reported and skipped. Registering the same folder
    twice has no effect.
    """
    if isinstance(location, (str, os.PathLike)):
        layer = StoreLayer(Path(location).expanduser().absolute())
    elif isinstance(location, Traversable):
        layer = StoreLayer(location)
    else:
        raise TypeError(
            f"add_store takes a path or an importlib.resources folder, not {type(location).__name__}"
        )
    if not usable(layer, "add_store"):
        return
    global _generation
    with _registered_lock:
        if all(known.label != layer.label for known in _registered):
            _registered.append(layer)
            _generation += 1


def usable(layer: StoreLayer, named_by: str) -> bool:
    """Whether ``layer`` is a folder; if not, it is reported once (``named_by``: what named it)."""
    try:
        is_dir = layer.location.is_dir()
    except OSError:
        is_dir = False
    if not is_dir:
        warn_once(
            DejavuStorageWarning, layer.label, "%s: %s is not a folder; not using it", named_by, layer.label
        )
    return is_dir


def registered_stores() -> list[StoreLayer]:
    """The stores registered with :func:`add_store`, in order."""
    with _registered_lock:
        return list(_registered)


def registrations() -> int:
    """How many times :func:`add_store` registered a store in this process: a kernel that has seen
    fewer has stores to read."""
    return _generation


def forget_stores() -> None:
    """Unregister every store added with :func:`add_store` (for tests)."""
    with _registered_lock:
        _registered.clear()

"""The nearest tuned key: how a miss is answered from the store when tuning is off.

Two keys of one kernel are **comparable** when they have the same length and every value that is
not a number (a dtype string, a bool, None, a string) is equal. Numbers (``int`` and finite
``float``, not ``bool``) are sizes, so they are compared on a log scale::

    distance(a, b) = sum over numeric positions i of |s(a_i) - s(b_i)|,   s(x) = sign(x) * log2(1 + |x|)

(M=4096 is as far from 2048 as 2048 is from 1024; a difference of one at small sizes counts about
as much as a doubling.) Among the comparable stored keys whose config is one of the current
candidates, the one at the smallest distance wins; ties are broken by the stored key's id (its
canonical typed JSON), which is the same string in every process, so the answer never depends on
dict order, time or process.

A miss with tuning off does not scan every stored key in Python: a :class:`KeyIndex` is built once
per state of a kernel's entries (:class:`RestoredEntries` drops it when they change). It groups the
entries by what comparable keys share (the length, which positions hold numbers, the other values
and their types) and keeps each group's log-scaled numbers as an array, so a miss looks its group
up and computes the distances of that group's keys only, adding position by position in key order
as :func:`distance` does: the same floating-point sums, so the same choice. Keys whose other values
cannot be grouped (not hashable, or not equal to themselves, such as NaN) are compared one by one
with :func:`distance`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any

from .._compat import Config
from ..store import StoredEntry


def is_number(value: Any) -> bool:
    """An ``int`` of any size (not a ``bool``) or a finite ``float``."""
    if isinstance(value, int):
        return not isinstance(value, bool)
    return isinstance(value, float) and math.isfinite(value)


def _scale(x: float) -> float:
    # 1 + abs(x) stays an int for an int: an int too large for a float still has a logarithm
    scaled = math.log2(1 + abs(x))
    return -scaled if x < 0 else scaled


def distance(a: tuple[Any, ...], b: tuple[Any, ...]) -> float | None:
    """The distance between two keys, or None when they are not comparable."""
    if len(a) != len(b):
        return None
    total = 0.0
    for x, y in zip(a, b):
        if is_number(x) and is_number(y):
            total += abs(_scale(x) - _scale(y))
        elif is_number(x) or is_number(y) or type(x) is not type(y) or x != y:
            return None
    return total


def nearest(
    key: tuple[Any, ...],
    entries: Iterable[StoredEntry] | KeyIndex,
    candidates: list[Config],
    config_id: Callable[[Config], str],
) -> tuple[StoredEntry, Config] | None:
    """The stored entry nearest to ``key`` whose config is among ``candidates``, with that candidate
    (``entries``: the stored entries, or their :class:`KeyIndex`)."""
    index = entries if isinstance(entries, KeyIndex) else KeyIndex(entries)
    by_id = alike(candidates, config_id)
    best = index.nearest(key, by_id.keys())
    if best is None:
        return None
    return best, best.chosen_among(by_id[best.config_id])


#: Marks a numeric position in a key's signature.
_NUMBER = "<number>"


def _signature(key: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """What comparable keys share (equal signatures: comparable keys), or None when it cannot be a
    dict key (a value that is not hashable, or not equal to itself)."""
    signature = tuple(_NUMBER if is_number(v) else (type(v), v) for v in key)
    try:
        hash(signature)
        if any(part is not _NUMBER and part[1] != part[1] for part in signature):
            return None
    except Exception:  # unhashable, or a comparison that fails: compared one by one
        return None
    return signature


class _Group:
    """The stored keys of one signature: their entries, their log-scaled numbers (a row each) and
    their rows by config id."""

    def __init__(self) -> None:
        self.entries: list[StoredEntry] = []
        self.rows: list[list[float]] = []
        self.scaled: Any = None  # a numpy array (entries x numeric positions), made by finish()
        self.by_config: dict[str, list[int]] = {}

    def add(self, entry: StoredEntry) -> None:
        self.by_config.setdefault(entry.config_id, []).append(len(self.entries))
        self.entries.append(entry)
        self.rows.append([_scale(v) for v in entry.key if is_number(v)])

    def finish(self) -> None:
        import numpy as np

        self.scaled = np.array(self.rows, dtype=np.float64).reshape(len(self.rows), -1)
        self.rows = []

    def nearest(
        self, key: tuple[Any, ...], allowed: Collection[str]
    ) -> tuple[float, str, StoredEntry] | None:
        """``(distance, key id, entry)`` of the nearest key whose config id is ``allowed``."""
        import numpy as np

        configs = [cid for cid in self.by_config if cid in allowed]
        if not configs:
            return None
        if len(configs) == len(self.by_config):
            rows = np.arange(len(self.entries))
        else:
            rows = np.sort(np.concatenate([np.asarray(self.by_config[cid]) for cid in configs]))
        scaled = self.scaled[rows]
        total = np.zeros(len(rows))
        for column, value in enumerate(v for v in key if is_number(v)):  # in key order, as distance()
            total += np.abs(_scale(value) - scaled[:, column])
        least = float(total.min())
        tied = [self.entries[row] for row in rows[total == least].tolist()]
        entry = min(tied, key=lambda e: e.key_id)  # of equal ids the first, as a scan in order
        return least, entry.key_id, entry


class KeyIndex:
    """Stored entries ready for :func:`nearest`: grouped by signature, numbers log-scaled once."""

    def __init__(self, entries: Iterable[StoredEntry]) -> None:
        self.groups: dict[tuple[Any, ...], _Group] = {}
        self.loose: list[StoredEntry] = []  # keys without a usable signature: compared one by one
        for entry in entries:
            signature = _signature(entry.key)
            if signature is None:
                self.loose.append(entry)
            else:
                self.groups.setdefault(signature, _Group()).add(entry)
        for group in self.groups.values():
            group.finish()

    def nearest(self, key: tuple[Any, ...], allowed: Collection[str]) -> StoredEntry | None:
        """The stored entry whose config id is ``allowed`` at the least (distance, key id) from ``key``."""
        signature = _signature(key)
        group = self.groups.get(signature) if signature is not None else None
        best = group.nearest(key, allowed) if group is not None else None
        for entry in self.loose if signature is not None else self._every_entry():
            if entry.config_id not in allowed:
                continue
            d = distance(key, entry.key)
            if d is not None and (best is None or (d, entry.key_id) < best[:2]):
                best = (d, entry.key_id, entry)
        return best[2] if best is not None else None

    def _every_entry(self) -> Iterator[StoredEntry]:
        """What a key without a usable signature is compared with: every stored key."""
        for group in self.groups.values():
            yield from group.entries
        yield from self.loose


def _invalidating(method: Callable[..., Any]) -> Callable[..., Any]:
    def changed(self: RestoredEntries, *args: Any, **kwargs: Any) -> Any:
        self._index = None
        return method(self, *args, **kwargs)

    changed.__name__ = method.__name__
    return changed


class RestoredEntries(dict[str, StoredEntry]):
    """A kernel's stored entries by key id (what the tuner restored, or recorded, in this process),
    with the :class:`KeyIndex` of their current state: built at the first nearest-key lookup and
    dropped by any change."""

    _index: KeyIndex | None = None

    __setitem__ = _invalidating(dict.__setitem__)
    __delitem__ = _invalidating(dict.__delitem__)
    __ior__ = _invalidating(dict.__ior__)
    update = _invalidating(dict.update)
    setdefault = _invalidating(dict.setdefault)
    pop = _invalidating(dict.pop)
    popitem = _invalidating(dict.popitem)
    clear = _invalidating(dict.clear)

    def key_index(self) -> KeyIndex:
        if self._index is None:
            self._index = KeyIndex(self.values())
        return self._index


def alike(candidates: Iterable[Config], config_id: Callable[[Config], str]) -> dict[str, list[Config]]:
    """The candidates by config id, those with the same fields (a stored config) in list order."""
    by_id: dict[str, list[Config]] = {}
    for config in candidates:
        by_id.setdefault(config_id(config), []).append(config)
    return by_id

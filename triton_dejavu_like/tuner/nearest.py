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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from .._compat import Config
from ..store import StoredEntry


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _scale(x: float) -> float:
    return math.copysign(math.log2(1.0 + abs(x)), x)


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
    entries: Iterable[StoredEntry],
    candidates: list[Config],
    config_id: Callable[[Config], str],
) -> tuple[StoredEntry, Config] | None:
    """The stored entry nearest to ``key`` whose config is among ``candidates``, with that candidate."""
    by_id = alike(candidates, config_id)
    best: tuple[float, str, StoredEntry] | None = None
    for entry in entries:
        if entry.config_id not in by_id:
            continue
        d = distance(key, entry.key)
        if d is None:
            continue
        if best is None or (d, entry.key_id) < best[:2]:
            best = (d, entry.key_id, entry)
    if best is None:
        return None
    return best[2], best[2].chosen_among(by_id[best[2].config_id])


def alike(candidates: Iterable[Config], config_id: Callable[[Config], str]) -> dict[str, list[Config]]:
    """The candidates by config id, those with the same fields (a stored config) in list order."""
    by_id: dict[str, list[Config]] = {}
    for config in candidates:
        by_id.setdefault(config_id(config), []).append(config)
    return by_id

"""The candidates of a search and the grid they lie on (one dimension per parameter that varies)."""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Hashable, Sequence
from typing import Any

from .._compat import CONFIG_FIELDS, Config


def _is_number(value: Any) -> bool:
    """A number that orders (NumPy's too: ``list(np.arange(...))`` lists ``np.int64``), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _sort_values(values: list[Any]) -> list[Any]:
    if all(_is_number(v) for v in values):
        return sorted(values)
    if all(v is None or _is_number(v) for v in values):
        return [None, *sorted(v for v in values if v is not None)]  # e.g. maxnreg: None, 128, 255
    return values


def _distinct(column: list[Any]) -> list[Any]:
    """The values of ``column`` in the order first seen, each once (equal values, as ``in`` tells
    them: 1, 1.0 and True are one); found by hashing, so that a dimension of many values is not
    compared pair by pair (unhashable values are compared)."""
    out: list[Any] = []
    hashed: dict[Any, None] = {}
    unhashable: list[Any] = []
    for v in column:
        try:
            if v in hashed or any(v == u for u in unhashable):
                continue
            hashed[v] = None
        except TypeError:
            if v in out:
                continue
            unhashable.append(v)
        out.append(v)
    return out


class _Positions:
    """A value's index in a list of distinct values (the first equal one, as ``list.index``)."""

    def __init__(self, values: list[Any]) -> None:
        self.values = values
        self.index: dict[Any, int] = {}
        for i, v in enumerate(values):
            with contextlib.suppress(TypeError):  # an unhashable value: found by list.index
                self.index.setdefault(v, i)

    def __call__(self, value: Any) -> int:
        try:
            return self.index[value]
        except (KeyError, TypeError):
            return self.values.index(value)


class SearchSpace:
    """A list of candidates and the grid they lie on.

    Each dimension is a Config field or meta-parameter whose value differs between candidates; its
    values are sorted when they are numbers (so their order carries information for a model). A
    point of the grid that is not a candidate is excluded (a condition, a pruning, the platform).
    """

    def __init__(
        self,
        candidates: Sequence[Any],
        points: Sequence[tuple[Hashable, ...]],
        names: Sequence[str],
        values: Sequence[Sequence[Any]],
    ) -> None:
        if len(candidates) != len(points):
            raise ValueError("one point per candidate")
        self.candidates = list(candidates)
        self.names = tuple(names)
        self.values = tuple(tuple(v) for v in values)
        self.points = [tuple(p) for p in points]
        self._index = {p: i for i, p in enumerate(self.points)}

    @classmethod
    def from_configs(cls, configs: Sequence[Config]) -> SearchSpace:
        rows = [_config_row(c) for c in configs]
        names: list[str] = []
        for row in rows:
            names.extend(n for n in row if n not in names)
        values: list[list[Any]] = []
        kept: list[str] = []
        for name in names:
            seen = _distinct([row.get(name) for row in rows])
            if len(seen) > 1:
                kept.append(name)
                values.append(_sort_values(seen))
        positions = [(n, _Positions(vals)) for n, vals in zip(kept, values)]
        columns = [[position(row.get(n)) for row in rows] for n, position in positions]
        points = list(zip(*columns)) if columns else [() for _ in rows]
        return cls(configs, points, kept, values)

    @classmethod
    def from_table(
        cls, names: Sequence[str], values: Sequence[Sequence[Any]], rows: Sequence[Sequence[Any]]
    ) -> SearchSpace:
        """A space given as rows of parameter values over a declared grid (replays, tests)."""
        points = [tuple(vals.index(v) for vals, v in zip(values, row)) for row in rows]
        return cls([tuple(r) for r in rows], points, names, values)

    def __len__(self) -> int:
        return len(self.candidates)

    @property
    def grid_size(self) -> int:
        return math.prod(len(v) for v in self.values) if self.values else 1

    def steps(self, dim: int) -> int:
        """How many steps of its values dimension ``dim`` spans (at least 1): a value's index divided
        by this is its position in [0, 1], the scale the models and the local penalty share."""
        return max(1, len(self.values[dim]) - 1)

    def index_of(self, point: Sequence[int]) -> int | None:
        return self._index.get(tuple(point))

    def neighbours(self, index: int) -> list[int]:
        """The candidates that differ from ``index`` in one parameter, by one step of its values."""
        point = self.points[index]
        out = []
        for d, v in enumerate(point):
            for step in (-1, 1):
                if 0 <= v + step < len(self.values[d]):
                    other = self._index.get((*point[:d], v + step, *point[d + 1 :]))
                    if other is not None:
                        out.append(other)
        return out

    def is_numeric(self, dim: int) -> bool:
        return all(_is_number(v) for v in self.values[dim])

    def value_of(self, index: int) -> dict[str, Any]:
        return {n: self.values[d][self.points[index][d]] for d, n in enumerate(self.names)}


def _config_row(config: Config) -> dict[str, Any]:
    row: dict[str, Any] = {f"kwargs.{k}": v for k, v in config.kwargs.items()}
    for name, default in CONFIG_FIELDS.items():
        row[name] = getattr(config, name, default)
    return row

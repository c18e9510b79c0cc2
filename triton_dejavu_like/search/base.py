"""The search interface: a space of candidates, a budget, and strategies that spend it.

A strategy proposes candidate indices and calls :meth:`SearchRun.evaluate`; the run measures each
index once, enforces the budget (it raises :class:`BudgetExhausted` when a new evaluation would go
over it), and remembers every result. Strategies never see configs, timers or storage.
"""

from __future__ import annotations

import contextlib
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .._compat import CONFIG_FIELDS, Config

Objective = Callable[[int], float]


class BudgetExhausted(Exception):
    """Raised by :meth:`SearchRun.evaluate` when the budget allows no further evaluation."""


@dataclass(frozen=True)
class Budget:
    """How much a search may spend: wall time, a share of the space, restarts, and the seed.

    ``max_time_s`` is checked before each new evaluation (one always runs); ``max_share`` caps the
    number of distinct candidates evaluated at ``ceil(max_share * len(space))``; ``max_repeat``
    restarts a search (with the next seed) that found nothing valid, up to that many runs in all.
    """

    max_time_s: float = math.inf
    max_share: float = 1.0
    max_repeat: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.max_time_s > 0:
            raise ValueError(f"search_max_search_t must be > 0, got {self.max_time_s}")
        if not 0 < self.max_share <= 1:
            raise ValueError(f"search_max_share must be in (0, 1], got {self.max_share}")
        if self.max_repeat < 1:
            raise ValueError(f"search_max_repeat must be >= 1, got {self.max_repeat}")

    def max_evaluations(self, space_size: int) -> int:
        return max(1, min(space_size, math.ceil(self.max_share * space_size - 1e-9)))

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_time_s": None if math.isinf(self.max_time_s) else self.max_time_s,
            "max_share": self.max_share,
            "max_repeat": self.max_repeat,
            "seed": self.seed,
        }


def _sort_values(values: list[Any]) -> list[Any]:
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return sorted(values)
    if all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values):
        return [None, *sorted(v for v in values if v is not None)]  # e.g. maxnreg: None, 128, 255
    return values


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
            seen: list[Any] = []
            for row in rows:
                v = row.get(name)
                if v not in seen:
                    seen.append(v)
            if len(seen) > 1:
                kept.append(name)
                values.append(_sort_values(seen))
        points = [tuple(vals.index(row.get(n)) for n, vals in zip(kept, values)) for row in rows]
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

    def index_of(self, point: Sequence[int]) -> int | None:
        return self._index.get(tuple(point))

    def is_numeric(self, dim: int) -> bool:
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values[dim])

    def value_of(self, index: int) -> dict[str, Any]:
        return {n: self.values[d][self.points[index][d]] for d, n in enumerate(self.names)}


def _config_row(config: Config) -> dict[str, Any]:
    row: dict[str, Any] = {f"kwargs.{k}": v for k, v in config.kwargs.items()}
    for name, default in CONFIG_FIELDS.items():
        row[name] = getattr(config, name, default)
    return row


@dataclass
class SearchRun:
    """One search over a space: measures each candidate at most once and enforces the budget."""

    space: SearchSpace
    objective: Objective
    budget: Budget = field(default_factory=Budget)
    results: dict[int, float] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.started = time.monotonic()
        self.limit = self.budget.max_evaluations(len(self.space))
        self.counted = 0

    def restart(self) -> None:
        """A new attempt: a fresh time and share budget; earlier results stay known and free."""
        self.started = time.monotonic()
        self.counted = 0

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    @property
    def exhausted(self) -> bool:
        if self.counted >= self.limit or len(self.results) >= len(self.space):
            return True
        return self.counted > 0 and self.elapsed_s >= self.budget.max_time_s

    def evaluate(self, index: int) -> float:
        if not 0 <= index < len(self.space):
            raise IndexError(f"candidate {index} out of range")
        known = self.results.get(index)
        if known is not None:
            return known
        if self.exhausted:
            raise BudgetExhausted
        value = float(self.objective(index))
        if math.isnan(value):
            value = math.inf
        self.results[index] = value
        self.order.append(index)
        self.counted += 1
        return value

    @property
    def found_valid(self) -> bool:
        return any(math.isfinite(v) for v in self.results.values())

    def best(self) -> int | None:
        finite = [(v, i) for i, v in self.results.items() if math.isfinite(v)]
        return min(finite)[1] if finite else None


class Strategy(ABC):
    """Decides which candidates to evaluate and in what order."""

    name: ClassVar[str]

    @abstractmethod
    def search(self, run: SearchRun, warm_start: Sequence[int], seed: int) -> None:
        """Evaluate candidates through ``run.evaluate`` until done or :class:`BudgetExhausted`."""

    def planned(self, run: SearchRun, warm_start: Sequence[int], seed: int) -> list[int] | None:
        """The candidates the first attempt will evaluate, in order, when known in advance
        (so they can be compiled together before timing); None when proposals depend on results."""
        return None

    def settings(self) -> dict[str, Any]:
        """What about this strategy changes its decisions (part of the storage identity)."""
        return {"strategy": self.name}


def drive(strategy: Strategy, run: SearchRun, warm_start: Sequence[int] = ()) -> SearchRun:
    """Run a strategy, restarting up to ``max_repeat`` times while nothing valid was found."""
    for attempt in range(run.budget.max_repeat):
        if attempt:
            run.restart()
        with contextlib.suppress(BudgetExhausted):
            strategy.search(run, warm_start, run.budget.seed + attempt)
        if run.found_valid or len(run.results) >= len(run.space):
            break
    return run

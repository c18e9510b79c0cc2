"""Running a search against an objective function: one measurement at a time (:func:`drive`, the
synchronous adapter) or with several in flight, completed in a seeded random order
(:func:`drive_batched`: what a pool of compile workers does; replays and tests)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .base import BatchSearch, Budget, Strategy, as_result
from .space import SearchSpace

Objective = Callable[[int], float]


@dataclass
class SearchRun:
    """The synchronous adapter: one search whose candidates are measured through ``objective``.

    :func:`drive` runs a strategy on it one measurement at a time; the budget is the
    :class:`BatchSearch`'s. ``evaluate`` measures one index directly (once)."""

    space: SearchSpace
    objective: Objective
    budget: Budget = field(default_factory=Budget)
    results: dict[int, float] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.limit = self.budget.max_evaluations(len(self.space))
        self.search: BatchSearch | None = None

    def measure(self, index: int) -> float:
        value = as_result(self.objective(index))
        self.results[index] = value
        self.order.append(index)
        return value

    def evaluate(self, index: int) -> float:
        """The result of ``index``, measuring it if it was not (regardless of any strategy)."""
        if not 0 <= index < len(self.space):
            raise IndexError(f"candidate {index} out of range")
        known = self.results.get(index)
        return known if known is not None else self.measure(index)

    @property
    def found_valid(self) -> bool:
        return any(math.isfinite(v) for v in self.results.values())

    def best(self) -> int | None:
        finite = [(v, i) for i, v in self.results.items() if math.isfinite(v)]
        return min(finite)[1] if finite else None


def drive(strategy: Strategy, run: SearchRun, warm_start: Sequence[int] = ()) -> SearchRun:
    """Run a strategy on ``run`` one measurement at a time, within the run's budget."""
    search = BatchSearch(strategy, run.space, run.budget, warm_start, known=run.results)
    run.search = search
    try:
        while batch := search.ask(1):
            index = batch[0]
            search.tell(index, run.measure(index))
    finally:
        search.close()
    return run


def drive_batched(
    strategy: Strategy,
    space: SearchSpace,
    budget: Budget,
    evaluate: Objective,
    batch_size: int = 16,
    warm_start: Sequence[int] = (),
    completion_seed: int | None = 0,
) -> BatchSearch:
    """Run a strategy with up to ``batch_size`` candidates in flight, as a compile pool would.

    The search is asked to fill the free slots; one pending candidate completes at a time, chosen
    at random (seeded by ``completion_seed``; None: the oldest first), so results arrive out of
    order; then the free slot is refilled.
    """
    search = BatchSearch(strategy, space, budget, warm_start)
    rng = random.Random(completion_seed)
    flight: list[int] = []
    try:
        while True:
            free = batch_size - len(flight)
            if free > 0:
                flight += search.ask(free)
            if not flight:
                break
            index = flight.pop(0 if completion_seed is None else rng.randrange(len(flight)))
            search.tell(index, evaluate(index))
    finally:
        search.close()
    return search

"""Exhaustive search: every candidate, warm-start candidates first."""

from __future__ import annotations

from collections.abc import Sequence

from .base import SearchRun, Strategy


def ordered(first: Sequence[int], rest: Sequence[int]) -> list[int]:
    """``first`` (deduplicated) followed by the other members of ``rest``, in order."""
    seen: set[int] = set()
    out: list[int] = []
    for i in (*first, *rest):
        if i not in seen:
            seen.add(i)
            out.append(i)
    return out


class OrderedStrategy(Strategy):
    """A strategy whose whole evaluation order is fixed before the first result."""

    def order(self, n: int, warm_start: Sequence[int], seed: int) -> list[int]:
        raise NotImplementedError

    def search(self, run: SearchRun, warm_start: Sequence[int], seed: int) -> None:
        for index in self.order(len(run.space), warm_start, seed):
            run.evaluate(index)

    def planned(self, run: SearchRun, warm_start: Sequence[int], seed: int) -> list[int] | None:
        return self.order(len(run.space), warm_start, seed)[: run.limit]


class Exhaustive(OrderedStrategy):
    name = "exhaustive"

    def order(self, n: int, warm_start: Sequence[int], seed: int) -> list[int]:
        return ordered(warm_start, range(n))

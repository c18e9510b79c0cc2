"""Exhaustive search: every candidate, warm-start candidates first."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from .base import BatchSearch, Strategy
from .space import SearchSpace


def ordered(first: Sequence[int], rest: Sequence[int]) -> list[int]:
    """``first`` (deduplicated) followed by the other members of ``rest``, in order."""
    return list(dict.fromkeys(itertools.chain(first, rest)))


class OrderedStrategy(Strategy):
    """A strategy whose whole evaluation order is fixed before the first result: trivially batched
    (``propose(n)`` hands out the next ``n`` not yet measured or pending)."""

    def order(self, n: int, warm_start: Sequence[int], seed: int) -> list[int]:
        raise NotImplementedError

    def start(self, space: SearchSpace, warm_start: Sequence[int], seed: int, limit: int) -> None:
        self._order = self.order(len(space), warm_start, seed)
        self._next = 0

    def propose(self, n: int, state: BatchSearch) -> list[int]:
        out: list[int] = []
        while len(out) < n and self._next < len(self._order):
            index = self._order[self._next]
            self._next += 1
            if index not in state.results and index not in state.pending:
                out.append(index)
        return out


class Exhaustive(OrderedStrategy):
    name = "exhaustive"
    adaptive_stop = False

    def order(self, n: int, warm_start: Sequence[int], seed: int) -> list[int]:
        return ordered(warm_start, range(n))

"""Random search without replacement: warm-start candidates first, then a seeded permutation."""

from __future__ import annotations

import random
from collections.abc import Sequence

from .exhaustive import OrderedStrategy, ordered


class RandomSearch(OrderedStrategy):
    name = "random"

    def order(self, n: int, warm_start: Sequence[int], seed: int) -> list[int]:
        rest = list(range(n))
        random.Random(seed).shuffle(rest)
        return ordered(warm_start, rest)

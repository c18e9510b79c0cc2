"""Random search without replacement: warm-start candidates first, then a seeded permutation."""

from __future__ import annotations

import random
from collections.abc import Sequence

from .base import SearchRun, Strategy
from .exhaustive import ordered


class RandomSearch(Strategy):
    name = "random"

    def search(self, run: SearchRun, warm_start: Sequence[int], seed: int) -> None:
        rest = list(range(len(run.space)))
        random.Random(seed).shuffle(rest)
        for index in ordered(warm_start, rest):
            run.evaluate(index)

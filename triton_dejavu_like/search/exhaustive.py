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


class Exhaustive(Strategy):
    name = "exhaustive"

    def search(self, run: SearchRun, warm_start: Sequence[int], seed: int) -> None:
        for index in ordered(warm_start, range(len(run.space))):
            run.evaluate(index)

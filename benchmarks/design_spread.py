"""How good is the Bayesian optimisation's initial design on its own, against random draws? (CPU)

For every measured space and ``--seeds`` seeds: the initial design of a search under a 5% budget
(the replay's setting; 8 candidates on a 648-config space), as the shipped strategy makes it (the
best-spread of 50 random draws, spread measured as the smallest scaled Euclidean distance between
two of its points), as the same selection would make it with the number of differing parameters
as the distance (ties broken by the summed distance), and as one random draw of the same size.
Printed per space: the share of failed (invalid) configs among the design's points and the mean
fraction of the optimum of the design's best point. A maximin design in scaled coordinates favours
the ends of each parameter's range (the largest and smallest tiles, most and fewest stages), which
is where configs fail or are slow on the matmul spaces; the count of differing parameters does not
depend on how a parameter's values are ordered, so it cannot favour the ends.

    PYTHONPATH=. python benchmarks/design_spread.py [--seeds 300]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import search_replay  # noqa: E402

from triton_dejavu_like.search.bayesian import BayesianOptimization  # noqa: E402


def shipped_design(space: search_replay.ReplaySpace, seed: int) -> list[int]:
    strategy = BayesianOptimization()
    limit = search_replay.budget_evaluations(max(search_replay.BUDGETS), len(space.space))
    strategy.start(space.space, [], seed, limit)
    return strategy._order[: strategy.n_initial]


def count_spread_design(space: search_replay.ReplaySpace, n: int, seed: int, tries: int = 50) -> list[int]:
    """The draw whose closest two points differ in the most parameters (then: most in all)."""
    points = np.asarray(space.space.points)
    rng = np.random.default_rng(seed)
    best: tuple[tuple[int, int], list[int]] | None = None
    for _ in range(tries):
        pick = rng.choice(len(points), n, replace=False)
        differ = (points[pick][:, None, :] != points[pick][None, :, :]).sum(axis=-1)
        closest = int(np.where(np.eye(n, dtype=bool), points.shape[1] + 1, differ).min())
        key = (closest, int(differ.sum()))
        if best is None or key > best[0]:
            best = (key, pick.tolist())
    assert best is not None
    return best[1]


def score(space: search_replay.ReplaySpace, designs: list[list[int]]) -> tuple[float, float]:
    """(share of failed points, mean fraction of the optimum of each design's best point)."""
    failed = statistics.fmean(sum(not math.isfinite(space.mean_ms[i]) for i in d) / len(d) for d in designs)
    found = statistics.fmean(space.best_ms / min(space.mean_ms[i] for i in d) for d in designs)
    return failed, found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=300)
    parser.add_argument("--data", type=Path, default=search_replay.DATA_DIR)
    args = parser.parse_args(argv)
    print(
        "| space | design size | failed: random / shipped / by count "
        "| best point (fraction of optimum): random / shipped / by count |"
    )
    print("| --- | ---: | --- | --- |")
    for path in sorted(args.data.glob("*.json.gz")):
        space = search_replay.load(path)
        shipped = [shipped_design(space, seed) for seed in range(args.seeds)]
        n = len(shipped[0])
        rng = np.random.default_rng(0)
        drawn = [rng.choice(len(space.space), n, replace=False).tolist() for _ in range(args.seeds)]
        by_count = [count_spread_design(space, n, seed) for seed in range(args.seeds)]
        scores = [score(space, d) for d in (drawn, shipped, by_count)]
        print(
            f"| {space.name} | {n} | "
            + " / ".join(f"{s[0]:.3f}" for s in scores)
            + " | "
            + " / ".join(f"{s[1]:.3f}" for s in scores)
            + " |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

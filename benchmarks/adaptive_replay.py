"""Replay the default (adaptive) budget on measured tuning spaces: where does the search stop, and
how good is what it found?

``search_replay.py`` scores strategies under fixed budgets (2% and 5% of a space). This script runs
them as the tuner does by default, ``Budget()`` with no share: the adaptive stop and the polish of
``search/base.py`` decide when to end. Per space it prints the mean number of evaluations at the
stop and the mean (and worst) fraction of the optimum of the best of the five best measured
candidates, which is what the careful stage chooses among on a GPU (``fraction`` = space's best mean
time / that config's mean time). Results are drawn from the measured repeats (noise on), the
candidates of a batch complete in a seeded random order (``drive_batched``).

``--set NAME=VALUE`` overrides a constant of ``triton_dejavu_like.search.base`` for the run
(``PATIENCE_MIN``, ``POLISH_TOP``, ``NEGLIGIBLE_GAIN``, ...), and ``--bo NAME=VALUE`` a field of
Bayesian optimisation's ``BOSettings`` (``refit_batch_share``, ``n_trees``, ...), so that a setting
can be compared with the shipped one on the same seeds. The last column is the strategy's own time
(fits and proposals) per evaluation, on this machine:

    python benchmarks/adaptive_replay.py --seeds 10
    python benchmarks/adaptive_replay.py --spaces matmul_NVIDIA_H100_80GB_HBM3 --set PATIENCE_MIN=24
    python benchmarks/adaptive_replay.py --bo refit_batch_share=0.25
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import search_replay  # noqa: E402

from triton_dejavu_like.search import Budget, base, drive_batched, make_strategy  # noqa: E402

#: The finalists of the careful stage: the quality is that of the best of these (by mean time).
FINALISTS = 5
DEFAULT_SPACES = (
    "matmul_NVIDIA_H100_80GB_HBM3",
    "matmul_skinny_NVIDIA_H100_80GB_HBM3",
    "attention_NVIDIA_H100_80GB_HBM3",
    "rmsnorm_NVIDIA_H100_80GB_HBM3",
    "pnpoly_RTX_3090",
    "convolution_RTX_2080_Ti",
    "convolution_milo_A6000",
    "dedispersion_milo_MI250X",
    "synthetic:stencil:2",
    "synthetic:tiled:1",
)


Job = tuple[str, int, dict[str, Any], dict[str, Any], int, str]


def one_run(job: Job) -> tuple[str, int, int, float, float]:
    """One search under ``Budget()``: (space, seed, evaluations, fraction of the optimum, the
    strategy's own seconds)."""
    path, seed, overrides, bo, batch, name = job
    for constant, value in overrides.items():
        setattr(base, constant, value)
    space = search_replay._loaded(path)
    rng = random.Random(seed)

    def objective(index: int) -> float:
        return space.measured(index, rng)

    strategy = search_replay.with_settings(make_strategy(name), list(bo.items()))
    search = drive_batched(strategy, space.space, Budget(seed=seed), objective, batch, (), seed)
    measured = sorted((v, i) for i, v in search.results.items() if math.isfinite(v))
    finalists = [i for _, i in measured[:FINALISTS]]
    fraction = space.best_ms / min(space.mean_ms[i] for i in finalists) if finalists else 0.0
    return path, seed, len(search.order), fraction, search.strategy_time_s


def parse_override(text: str) -> tuple[str, Any]:
    return search_replay.assignment(text, dir(base), "search/base.py has no constant")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--spaces", nargs="+", default=list(DEFAULT_SPACES), help="file names or synthetic:kind:seed"
    )
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--strategy", default="bayesian", choices=("bayesian", "random"))
    parser.add_argument("--set", dest="overrides", type=parse_override, action="append", default=[])
    parser.add_argument("--bo", type=search_replay.parse_bo, action="append", default=[])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    overrides, bo = dict(args.overrides), dict(args.bo)
    if bo and args.strategy != "bayesian":
        parser.error("--bo sets Bayesian optimisation's settings; random search has none")
    paths = [
        s if s.startswith("synthetic:") else str(search_replay.DATA_DIR / f"{s}.json.gz") for s in args.spaces
    ]
    jobs = [(p, seed, overrides, bo, args.batch, args.strategy) for p in paths for seed in range(args.seeds)]
    with ProcessPoolExecutor(args.workers) as pool:
        outcomes = list(pool.map(one_run, jobs))
    print(
        f"{args.strategy}, batch {args.batch}, {args.seeds} seeds, Budget() (adaptive stop)"
        + (f", overrides {overrides}" if overrides else "")
        + (f", BOSettings {bo}" if bo else "")
    )
    print("| space | evaluations (mean) | fraction of optimum (mean) | worst seed | strategy ms/evaluation |")
    print("| --- | ---: | ---: | ---: | ---: |")
    evaluations, fractions, costs = [], [], []
    for name, path in zip(args.spaces, paths):
        rows = [o for o in outcomes if o[0] == path]
        e, f = statistics.fmean(r[2] for r in rows), statistics.fmean(r[3] for r in rows)
        cost = 1000 * sum(r[4] for r in rows) / sum(r[2] for r in rows)
        evaluations.append(e)
        fractions.append(f)
        costs.append(cost)
        print(f"| {name} | {e:.1f} | {f:.4f} | {min(r[3] for r in rows):.3f} | {cost:.1f} |")
    print(
        f"| mean | {statistics.fmean(evaluations):.1f} | {statistics.fmean(fractions):.4f} | "
        f"| {statistics.fmean(costs):.1f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Bayesian optimisation under a small explicit budget with as many warm starts as the budget.

A kernel with many stored keys has many winners, and every one of them is a warm start of its next
miss. Replayed on the measured spaces of ``search_replay.py``: a budget of ``--share`` of each space,
and as many warm starts as that budget's evaluations, drawn from the space's best 10% ("near": good
configs, as other keys' winners are) or from all of it ("far"). Compared: the warm starts measured
first capped at half of the budget (``BOSettings.warm_start_max_share = 0.5``, the default) and
uncapped (1.0). Prints the mean and worst fraction of the optimum found over the seeds.

    python benchmarks/warm_start_budget.py [--share 0.05] [--seeds 10] [--spaces NAME ...]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_replay import DATA_DIR, budget_evaluations, load, markdown_table, with_settings

from triton_dejavu_like.search import Budget, drive_batched, make_strategy

SPACES = (
    "matmul_NVIDIA_H100_80GB_HBM3",
    "matmul_skinny_NVIDIA_H100_80GB_HBM3",
    "attention_NVIDIA_H100_80GB_HBM3",
    "rmsnorm_NVIDIA_H100_80GB_HBM3",
    "gemm_RTX_3090",
    "convolution_milo_A6000",
)
CAPS = (1.0, 0.5)


def fraction(space, share: float, warm_kind: str, cap: float, seed: int) -> float:  # type: ignore[no-untyped-def]
    n = len(space.space)
    count = budget_evaluations(share, n)
    rng = random.Random(seed)
    ranked = sorted((i for i in range(n) if space.mean_ms[i] < float("inf")), key=space.mean_ms.__getitem__)
    pool = ranked[: max(count + 1, len(ranked) // 10)] if warm_kind == "near" else list(range(n))
    pool = [i for i in pool if space.mean_ms[i] > space.best_ms]  # the best itself is not given
    warm = rng.sample(pool, min(count, len(pool)))
    strategy = with_settings(make_strategy("bayesian"), [("warm_start_max_share", cap)])
    search = drive_batched(
        strategy, space.space, Budget(max_share=share, seed=seed), lambda i: space.mean_ms[i], 1, warm, seed
    )
    found = min(space.mean_ms[i] for i in search.order)
    return space.best_ms / found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--share", type=float, default=0.05)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--spaces", nargs="+", default=list(SPACES))
    args = parser.parse_args()
    rows = []
    for name in args.spaces:
        space = load(DATA_DIR / f"{name}.json.gz")
        for kind in ("near", "far"):
            cells = [name, kind, str(budget_evaluations(args.share, len(space.space)))]
            for cap in CAPS:
                got = [fraction(space, args.share, kind, cap, seed) for seed in range(args.seeds)]
                cells.append(f"{statistics.fmean(got):.3f} ({min(got):.3f})")
            rows.append(cells)
            print(" | ".join(cells), file=sys.stderr, flush=True)
    header = ["space", "warm starts", "budget = warm starts"]
    header += [f"share {cap:g}: mean (worst)" for cap in CAPS]
    print(markdown_table(header, rows, 2))


if __name__ == "__main__":
    main()

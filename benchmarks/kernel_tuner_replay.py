"""Kernel Tuner's search strategies replayed on the same measured spaces as ``search_replay.py``.

The published comparison this package measures itself against (Kernel Tuner's genetic algorithm at
0.95 of the optimum at a 5% budget, its Bayesian optimisation at 0.86) was made on other spaces
with other scoring. This script runs Kernel Tuner's strategies in its simulation mode on the files
of ``benchmarks/data/search-spaces/`` and scores them as ``search_replay.py`` scores ours, so that
the two can be put side by side.

Kernel Tuner is not a dependency of this package. Install it in a separate environment
(``python -m venv ktvenv && ktvenv/bin/pip install kernel_tuner scikit-learn``; measured with
Kernel Tuner 1.5.0) and run the replay step with that interpreter; this module imports nothing
from the package, and Kernel Tuner only inside the replay step, so ``--render`` runs in either
environment::

    PYTHONPATH=. python benchmarks/search_replay.py --full --no-synthetic --no-noise \\
        --strategies bayesian random --seeds 20 --batches 1 16 --save ours.json
    ktvenv/bin/python benchmarks/kernel_tuner_replay.py --seeds 20 --save kt.json
    ktvenv/bin/python benchmarks/kernel_tuner_replay.py --seeds 20 --failed-excluded \\
        --strategies bayes_opt genetic_algorithm --save kt_failed_excluded.json
    python benchmarks/kernel_tuner_replay.py --render kt.json kt_failed_excluded.json --ours ours.json

(``--data DIR ...`` for other folders of spaces, ``--workers`` processes, 2 by default.)

How a run is set up (read from Kernel Tuner 1.5.0's sources):

* Simulation mode reads an uncompressed cachefile whose name ends in ``.json``, checks that its
  kernel name, problem size and ``tune_params_keys`` match the call, and answers every config from
  it. Each space is written once to a temporary copy (:func:`simulation_cache`) with a fixed
  problem size (some files store a dict there) and the ``cache`` entry last (the reader treats a
  file not ending in ``}}}`` as unclosed).
* Candidates: the configs the file holds, failed ones included, as in ``search_replay.py``. Grid
  points absent from the file are excluded by a restriction over the parameter values (membership
  in the file's configs). Kernel Tuner's own ``tune_cache`` drops the failed configs from the
  space as well, which would spare Kernel Tuner the failures our strategies meet (``--failed-excluded``
  does that, below).
* A failed config (``"InvalidConfig"``, ``"CompilationFailedConfig"``, ``"RuntimeFailedConfig"``)
  is answered as an error, whose cost is the largest float (``util.get_result_cost``). Kernel
  Tuner's Bayesian optimisation recognises a failure only by its own invalid value, 1e20
  (``BayesianOptimization.is_valid``), so it fits its Gaussian process to failed configs at
  1.8e308, which can stall it (on the two convolution spaces and pnpoly its 5% runs end where its
  2% runs do). ``--failed-excluded`` runs Kernel Tuner on the file's configs less the failed ones,
  with the same K and scoring: it never spends an evaluation on a failure, which ours do.
* Budget: ``strategy_options={"max_fevals": K}`` with K = ceil(share * N), N the configs in the
  file, the same K as ``Budget(max_share=share)`` gives our strategies. The simulation runner
  counts a config towards ``max_fevals`` the first time it is evaluated, failed or not; a repeated
  config costs nothing. Our strategies never repeat a config and count failed ones too, so both
  sides get K distinct configs, failures included.
* Unlike ``search_replay.py``, whose 2% figure is the prefix of a run given 5%, each budget is a
  run of its own here (simulated annealing scales its schedule and Bayesian optimisation its loop
  to ``max_fevals``), as Kernel Tuner is meant to be used. Kernel Tuner's Bayesian
  optimisation first collects 20 valid samples (Latin hypercube, then random draws): where K <= 20
  (2% of a space of about 600 configs is 13), its run is that initial sample only.
* Seeds: the strategies draw from ``random``'s and NumPy's global generators, both seeded with the
  run's seed; the Latin hypercube sampler of Bayesian optimisation otherwise draws fresh OS entropy,
  so it is given a generator seeded the same way. Seed k of a Kernel Tuner strategy and seed k of
  ours share nothing but the number. Runs repeat exactly, except Bayesian optimisation's: its
  default method (``multi-ultrafast``) decides when to refit its model from measured wall-clock
  times, so a run can differ under another load (on the spaces without failures, the
  ``--failed-excluded`` runs are repeats: at 5%, 4, 2 and 2 of 20 seeds differed on the three
  RMSNorm spaces, moving their means by up to 0.016; the other runs repeated exactly).
* Scoring, as ``search_replay.py``: the space's best mean time divided by the best mean time among
  the first K distinct configs evaluated (a failed config counts as not found), averaged over seeds.
  Both sides see mean times (run ``search_replay.py`` with ``--no-noise``); the simulation replays
  each record's mean ``time``.

Strategies run with Kernel Tuner's default options (``NAME:OPTION=VALUE,...`` in ``--strategies``
changes one). Two of them stop before spending ``max_fevals`` with those defaults, and the table of
distinct configs evaluated / K says by how much: simulated annealing's schedule ends after about
3/4 of K (its iteration count is computed from ``T_min`` alone, its temperature from ``T_min / T``),
and the genetic algorithm after 90 generations of 26 (2,340 evaluations, repeats included, fewer
distinct configs than K on the spaces of several thousand). ``genetic_algorithm:maxiter=1000``
lifts the generation cap; it may still stop short, where its count of evaluations with repeats
reaches the size of the space.
"""

from __future__ import annotations

import argparse
import ast
import functools
import gzip
import json
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent / "data" / "search-spaces"
STRATEGIES = (
    "genetic_algorithm",
    "genetic_algorithm:maxiter=1000",
    "bayes_opt",
    "random_sample",
    "simulated_annealing",
)
BUDGETS = (0.02, 0.05)  # shares of the space, as in search_replay.py
HELD_IN = ("pnpoly_RTX_3090", "convolution_RTX_2080_Ti")  # search_replay.HELD_IN: settings chosen there
PROBLEM_SIZE = (1,)  # written into each temporary cachefile and passed to tune_kernel
OURS = (("bayesian", 1), ("bayesian", 16), ("random", 1))  # (strategy, batch) columns of ours


@dataclass(frozen=True)
class Space:
    """A measured space as both sides see it: its configs (cache keys) and their mean times."""

    name: str
    doc: dict[str, Any]
    mean_ms: dict[str, float]  # cache key -> mean time, inf for a failed config

    @property
    def best_ms(self) -> float:
        return min(self.mean_ms.values())

    def budget(self, share: float) -> int:
        """K = ceil(share * N), at least 1: ``Budget(max_share=share).max_evaluations(N)``."""
        n = len(self.mean_ms)
        return max(1, min(n, math.ceil(share * n - 1e-9)))

    def fraction(self, evaluated: Sequence[str], share: float) -> float:
        """Best mean time of the space / best mean time among the first K distinct configs."""
        first = list(dict.fromkeys(evaluated))[: self.budget(share)]
        return self.best_ms / min((self.mean_ms[k] for k in first), default=math.inf)


def read_space(path: Path) -> Space:
    with gzip.open(path, "rt") as handle:
        doc = json.load(handle)
    mean = {
        key: math.inf if isinstance(rec["time"], str) else float(rec["time"])
        for key, rec in doc["cache"].items()
    }
    return Space(path.name.removesuffix(".json.gz"), doc, mean)


def config_key(values: Iterable[Any]) -> str:
    """Kernel Tuner's cache key of a config: its values in ``tune_params_keys`` order."""
    return ",".join(str(v) for v in values)


def simulation_cache(doc: dict[str, Any]) -> dict[str, Any]:
    """The cachefile simulation mode accepts for ``doc``: the fields it checks, ``cache`` last."""
    return {
        "device_name": doc.get("device_name") or "",
        "kernel_name": doc["kernel_name"],
        "problem_size": list(PROBLEM_SIZE),
        "tune_params_keys": doc["tune_params_keys"],
        "tune_params": doc["tune_params"],
        "objective": "time",
        "cache": doc["cache"],
    }


def write_simulation_cache(space: Space, folder: Path) -> Path:
    path = folder / f"{space.name}.json"
    path.write_text(json.dumps(simulation_cache(space.doc)))
    return path


@dataclass(frozen=True)
class Job:
    space: str
    cachefile: str
    strategy: str
    seed: int
    share: float
    failed_excluded: bool = False  # candidates: the file's configs less the failed ones

    @property
    def column(self) -> str:
        return f"KT {self.strategy}" + (" (failed configs excluded)" if self.failed_excluded else "")


@dataclass
class Result:
    job: Job
    budget: int
    evaluated: int  # distinct configs evaluated
    fraction: float
    seconds: float


def strategy_options(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME`` or ``NAME:OPTION=VALUE,...`` (a Python literal each) as (name, options)."""
    name, _, rest = text.partition(":")
    pairs = (item.partition("=") for item in rest.split(",") if item)
    return name, {key: ast.literal_eval(value) for key, _, value in pairs}


def evaluation_order(job: Job, space: Space) -> list[str]:
    """Cache keys of the configs Kernel Tuner evaluated, in order (repeats included)."""
    import random

    import numpy as np
    from constraint import FunctionConstraint
    from kernel_tuner import tune_kernel
    from kernel_tuner.strategies import bayes_opt
    from scipy.stats import qmc

    name, options = strategy_options(job.strategy)
    keys = space.doc["tune_params_keys"]
    candidates = {k for k, t in space.mean_ms.items() if not (job.failed_excluded and math.isinf(t))}
    random.seed(job.seed)
    np.random.seed(job.seed)
    bayes_opt.LatinHypercube = functools.partial(qmc.LatinHypercube, rng=np.random.default_rng(job.seed))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _ = tune_kernel(
            space.doc["kernel_name"],
            "",
            PROBLEM_SIZE,
            [],
            space.doc["tune_params"],
            restrictions=[FunctionConstraint(lambda *values: config_key(values) in candidates)],
            cache=job.cachefile,
            simulation_mode=True,
            strategy=name,
            strategy_options={**options, "max_fevals": space.budget(job.share)},
            verbose=False,
            quiet=True,
        )
    return [config_key(r[k] for k in keys) for r in results]


def replay(job: Job, spaces: dict[str, Space]) -> Result:
    space = spaces[job.space]
    started = time.perf_counter()
    order = evaluation_order(job, space)
    return Result(
        job,
        space.budget(job.share),
        len(set(order)),
        space.fraction(order, job.share),
        time.perf_counter() - started,
    )


_SPACES: dict[str, Space] = {}


def _init_worker(paths: dict[str, str]) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _SPACES.update({name: read_space(Path(p)) for name, p in paths.items()})


def _replay_in_worker(job: Job) -> Result:
    return replay(job, _SPACES)


def run_all(jobs: list[Job], paths: dict[str, str], workers: int, save: Path | None) -> list[Result]:
    """Every job on ``workers`` processes; a progress line per run on stderr, saved as they come."""
    results: list[Result] = []
    started = time.perf_counter()
    with ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(paths,)) as pool:
        for result in pool.map(_replay_in_worker, jobs, chunksize=1):
            results.append(result)
            if save is not None:
                save_results(results, {"partial": True}, save)
            job = result.job
            elapsed = time.perf_counter() - started
            print(
                f"[{len(results)}/{len(jobs)} {elapsed:.0f}s] {job.space} {job.strategy} "
                f"{job.share:.0%} seed {job.seed}: {result.evaluated}/{result.budget} evaluated, "
                f"fraction {result.fraction:.3f} ({result.seconds:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
    return results


def save_results(results: list[Result], run: dict[str, Any], path: Path) -> None:
    data = [{**asdict(r), "job": asdict(r.job)} for r in results]
    path.write_text(json.dumps({"run": run, "results": data}, indent=1))


def load_results(path: Path) -> tuple[list[Result], dict[str, Any]]:
    saved = json.loads(path.read_text())
    return [Result(**{**r, "job": Job(**r["job"])}) for r in saved["results"]], saved["run"]


# (space, column) -> share -> fractions over seeds
Fractions = dict[tuple[str, str], dict[float, list[float]]]


def kt_fractions(results: Iterable[Result]) -> Fractions:
    out: Fractions = {}
    for r in results:
        out.setdefault((r.job.space, r.job.column), {}).setdefault(r.job.share, []).append(r.fraction)
    return out


def ours_column(strategy: str, batch: int) -> str:
    return f"ours {strategy} b{batch}"


def our_fractions(path: Path) -> Fractions:
    """Fractions from a ``search_replay.py --save`` file, for the (strategy, batch) pairs of OURS."""
    out: Fractions = {}
    for item in json.loads(path.read_text())["outcomes"]:
        job = item["job"]
        if (job["strategy"], job["batch"]) not in OURS:
            continue
        name = Path(job["path"]).name.removesuffix(".json.gz")
        cell = out.setdefault((name, ours_column(job["strategy"], job["batch"])), {})
        for share in BUDGETS:
            cell.setdefault(share, []).append(item["fraction"][str(share)])
    return out


def mean_cell(fractions: dict[float, list[float]] | None) -> str:
    if not fractions or any(s not in fractions for s in BUDGETS):
        return "-"
    seeds = min(len(fractions[s]) for s in BUDGETS)
    return " / ".join(f"{statistics.fmean(fractions[s]):.3f}" for s in BUDGETS) + f" ({seeds})"


def mean_with_error(samples: Sequence[Sequence[float]]) -> str:
    """Mean over spaces of each space's mean over seeds, ± its standard error (seeds independent):
    sqrt(sum of var_s / n_s) / number of spaces."""
    means = [statistics.fmean(x) for x in samples]
    var = sum(statistics.variance(x) / len(x) if len(x) > 1 else math.nan for x in samples)
    return f"{statistics.fmean(means):.3f} ± {math.sqrt(var) / len(samples):.3f}"


def group_mean(fractions: Fractions, spaces: Sequence[str], column: str) -> str:
    """Mean over ``spaces`` of the per-space mean fractions (only if every space has the column)."""
    cells = [fractions.get((s, column)) for s in spaces]
    if not spaces or any(c is None or any(b not in c for b in BUDGETS) for c in cells):
        return "-"
    return " / ".join(mean_with_error([c[b] for c in cells]) for b in BUDGETS)


def comparison_table(fractions: Fractions, sizes: dict[str, int]) -> str:
    """Per space and column: mean fraction of optimum at 2% / 5% (seeds); then means over spaces."""
    columns = sorted({c for _, c in fractions}, key=lambda c: (not c.startswith("KT"), c))
    spaces = sorted({s for s, _ in fractions}, key=lambda s: (s not in sizes, s))
    header = ["space", "N", *columns]
    rows = [
        [s, f"{sizes[s]:,}" if s in sizes else "?", *(mean_cell(fractions.get((s, c))) for c in columns)]
        for s in spaces
    ]
    held_out = [s for s in spaces if s not in HELD_IN]
    for label, group in (
        (f"mean of {len(spaces)} spaces", spaces),
        (f"mean of {len(held_out)} held out", held_out),
    ):
        rows.append([f"**{label}**", "", *(group_mean(fractions, group, c) for c in columns)])
    align = ["---", "---:"] + ["---:"] * len(columns)
    return "\n".join("| " + " | ".join(cells) + " |" for cells in (header, align, *rows))


def usage_table(results: Sequence[Result]) -> str:
    """Per Kernel Tuner strategy: distinct configs evaluated / budget K, mean over spaces and seeds.

    Some strategies stop before spending ``max_fevals`` (a cap on generations, an annealing
    schedule that ends early); repeated configs are free and not counted."""
    used: dict[tuple[str, float], list[float]] = {}
    for r in results:
        used.setdefault((r.job.column, r.job.share), []).append(r.evaluated / r.budget)
    strategies = sorted({s for s, _ in used})
    header = ["strategy", *(f"distinct evaluated / K @{b:.0%}" for b in BUDGETS)]
    rows = [
        [s, *(f"{statistics.fmean(used[(s, b)]):.3f}" if (s, b) in used else "-" for b in BUDGETS)]
        for s in strategies
    ]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in (header, ["---", "---:", "---:"], *rows))


def render(kt: Sequence[Path], ours: Path | None, data: Sequence[Path]) -> str:
    loaded = [load_results(path) for path in kt]
    results = [r for runs, _ in loaded for r in runs]
    run = loaded[0][1]
    fractions = kt_fractions(results)
    if ours is not None:
        fractions.update(our_fractions(ours))
    sizes = {}
    for folder in data:
        for path in folder.glob("*.json.gz"):
            with gzip.open(path, "rt") as handle:
                sizes[path.name.removesuffix(".json.gz")] = len(json.load(handle)["cache"])
    note = (
        "Mean fraction of the optimum at a 2% / 5% budget (seeds in brackets); KT: Kernel Tuner "
        f"{run.get('kernel_tuner', '?')} in simulation mode, default options unless the column names some, "
        "a run per budget; ours: `search_replay.py --no-noise`, 2% the prefix of the 5% run, "
        "b = candidates in flight. "
        f"Held out: every space but {' and '.join(HELD_IN)}."
    )
    return "\n\n".join([note, comparison_table(fractions, sizes), usage_table(results)])


def jobs_for(spaces: Sequence[Space], cachefiles: dict[str, Path], args: argparse.Namespace) -> list[Job]:
    """Seed by seed (so that partial results cover every space), the largest spaces first."""
    jobs = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for space in sorted(spaces, key=lambda s: -len(s.mean_ms)):
            seeds = args.large_seeds if len(space.mean_ms) >= args.large else args.seeds
            if seed - args.first_seed >= seeds:
                continue
            for strategy in args.strategies:
                path = str(cachefiles[space.name])
                jobs += [Job(space.name, path, strategy, seed, b, args.failed_excluded) for b in BUDGETS]
    return jobs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", type=Path, nargs="+", default=[DATA_DIR], help="folders of *.json.gz spaces"
    )
    parser.add_argument("--only", nargs="*", help="spaces (file names without .json.gz)")
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--large", type=int, default=10**9, help="spaces of at least this many configs ...")
    parser.add_argument("--large-seeds", type=int, default=20, help="... get this many seeds")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--save", type=Path, help="write the runs (JSON) here")
    parser.add_argument(
        "--failed-excluded",
        action="store_true",
        help="leave the failed configs out of Kernel Tuner's space (as its tune_cache does); K unchanged",
    )
    parser.add_argument(
        "--render", type=Path, nargs="+", help="render saved runs (--save, one or more) instead of running"
    )
    parser.add_argument(
        "--ours", type=Path, help="with --render: search_replay.py --save results to put beside"
    )
    args = parser.parse_args(argv)
    if args.render:
        print(render(args.render, args.ours, args.data))
        return 0
    paths = {
        p.name.removesuffix(".json.gz"): p for folder in args.data for p in sorted(folder.glob("*.json.gz"))
    }
    if args.only:
        paths = {n: p for n, p in paths.items() if n in args.only}
    spaces = [read_space(p) for p in paths.values()]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cachefiles = {s.name: write_simulation_cache(s, Path(tmp)) for s in spaces}
        jobs = jobs_for(spaces, cachefiles, args)
        results = run_all(jobs, {n: str(p) for n, p in paths.items()}, args.workers, args.save)
    from kernel_tuner import __version__

    run = {
        "command": " ".join(
            ["python benchmarks/kernel_tuner_replay.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "kernel_tuner": __version__,
        "seeds": args.seeds,
        "elapsed_s": time.perf_counter() - started,
    }
    if args.save:
        save_results(results, run, args.save)
    print(render([args.save], None, args.data) if args.save else f"{len(results)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

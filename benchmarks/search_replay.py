"""Replay the package's search strategies on brute-force measurements of real GPU kernels.

Each file in ``benchmarks/data/search-spaces/`` (Kernel Tuner cachefile format, gzip JSON) holds the
measured time of every valid config of a tuning space. The replay hands the package's real
strategies (``make_strategy``: random search, Bayesian optimisation) a :class:`SearchSpace` of the
configs the file holds (grid points absent from the file were excluded by the kernel's
restrictions: they are not candidates, so proposing one costs nothing) and an objective that
answers with the measured time, drawn from the measured repeats (``--no-noise``: their mean).
Invalid configs answer ``inf`` (a failed candidate) and cost their compile time.

Scored per run: the number of evaluations, and the summed measured compile + benchmark time, until
a config whose mean time is within 5% (1%) of the space's best has been evaluated, next to the
random-search expectation (N+1)/(k+1) for the k configs within that margin among N. A run stops
once it has found a config within the tightest margin, or after ``cap`` evaluations (counted as not
reached).

Warm start: the two convolution files measure the same kernel on two GPUs. A run on one is seeded
with the five best configs of the other (the stored top-5 of an entry), mapped onto the shared
parameters: a source config maps to the target candidates that agree with it on every parameter
both spaces have; source configs with no counterpart are skipped.

    python benchmarks/search_replay.py            # CI-sized: 3 seeds, small caps, two spaces
    python benchmarks/search_replay.py --full     # every file, 20 seeds; writes benchmarks/README.md
    python benchmarks/search_replay.py --full --render after.json --compare before.json  # seed by seed
    python benchmarks/search_replay.py --full --strategies bayesian --bo random_share=0.0  # a setting
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import gzip
import itertools
import json
import math
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from triton_dejavu_like.search import Budget, SearchSpace, Strategy, drive_batched, make_strategy
from triton_dejavu_like.search.bayesian import BOSettings

DATA_DIR = Path(__file__).resolve().parent / "data" / "search-spaces"
README = Path(__file__).resolve().parent / "README.md"
SECTION = "## Search replay"
MARGINS = (0.05, 0.01)
WARM_SEEDS = 5
STRATEGIES = ("random", "bayesian")
BUDGETS = (0.02, 0.05)  # shares of the space
BATCHES = (1, 16)


@dataclass
class ReplaySpace:
    """A measured tuning space: its candidates, their measured times and what each one cost."""

    name: str
    kernel: str
    device: str
    params: dict[str, Any]  # every parameter of the file, with its values (fixed ones too)
    space: SearchSpace
    mean_ms: list[float]  # inf for an invalid config
    repeats_ms: list[list[float]]
    cost_ms: list[float]  # compile + benchmark time spent measuring it
    records: list[dict[str, Any]] = field(repr=False)

    @property
    def best_ms(self) -> float:
        return min(self.mean_ms)

    def measured(self, index: int, rng: random.Random, noise: bool = True) -> float:
        """What measuring candidate ``index`` answers: one of its measured repeats drawn with ``rng``
        (``noise=False``: their mean); ``inf`` for an invalid config."""
        mean = self.mean_ms[index]
        return rng.choice(self.repeats_ms[index]) if noise and math.isfinite(mean) else mean

    def within(self, margin: float) -> list[int]:
        limit = self.best_ms * (1 + margin)
        return [i for i, t in enumerate(self.mean_ms) if t <= limit]

    def random_expectation(self, margin: float) -> float:
        return (len(self.space) + 1) / (len(self.within(margin)) + 1)

    def random_fraction(self, share: float) -> float:
        """Random search's expected fraction of optimum after ``share`` of the space, exactly: the
        best of m candidates drawn without replacement has rank r with probability
        C(N-r, m-1) / C(N, m) (a failed config counts as 0)."""
        ranked = sorted(self.mean_ms)
        n, m = len(ranked), budget_evaluations(share, len(ranked))
        log_all = math.lgamma(n + 1) - math.lgamma(m + 1) - math.lgamma(n - m + 1)
        total = 0.0
        for r in range(1, n - m + 2):
            if not math.isfinite(ranked[r - 1]):
                break
            log_p = math.lgamma(n - r + 1) - math.lgamma(m) - math.lgamma(n - r - m + 2) - log_all
            total += math.exp(log_p) * self.best_ms / ranked[r - 1]
        return total


def load(path: Path) -> ReplaySpace:
    with gzip.open(path, "rt") as handle:
        doc = json.load(handle)
    tune = doc["tune_params"]
    names = [k for k in doc["tune_params_keys"] if len(tune[k]) > 1]
    records = list(doc["cache"].values())
    mean, repeats, cost = [], [], []
    for rec in records:
        valid = not isinstance(rec["time"], str)
        mean.append(float(rec["time"]) if valid else math.inf)
        repeats.append([float(t) for t in rec.get("times") or [rec["time"]]] if valid else [])
        cost.append(float(rec.get("compile_time") or 0) + float(rec.get("benchmark_time") or 0))
    space = SearchSpace.from_table(names, [tune[n] for n in names], [[r[n] for n in names] for r in records])
    return ReplaySpace(
        name=path.name.removesuffix(".json.gz"),
        kernel=doc["kernel_name"],
        device=doc.get("device_name") or path.name.split("_", 1)[1].removesuffix(".json.gz"),
        params={k: tune[k] for k in doc["tune_params_keys"]},
        space=space,
        mean_ms=mean,
        repeats_ms=repeats,
        cost_ms=cost,
        records=records,
    )


@cache
def _loaded(path: str) -> ReplaySpace:
    if path.startswith("synthetic:"):
        _, kind, seed = path.split(":")
        return synthetic(kind, int(seed))
    return load(Path(path))


def warm_seeds(source: ReplaySpace, target: ReplaySpace, count: int = WARM_SEEDS) -> list[int]:
    """Target candidates matching the ``count`` best source configs that have a counterpart."""
    shared = [p for p in source.params if p in target.params]
    by_shared: dict[tuple[Any, ...], list[int]] = {}
    for i, rec in enumerate(target.records):
        by_shared.setdefault(tuple(rec[p] for p in shared), []).append(i)
    seeds: list[int] = []
    used = 0
    for i in sorted(range(len(source.mean_ms)), key=source.mean_ms.__getitem__):
        if used == count or not math.isfinite(source.mean_ms[i]):
            break
        matches = by_shared.get(tuple(source.records[i][p] for p in shared))
        if matches:
            used += 1
            seeds.extend(m for m in matches if m not in seeds)
    return seeds


def synthetic(kind: str, seed: int) -> ReplaySpace:
    """A generated GPU-like tuning space (``kind`` ``tiled`` or ``stencil``), different for each seed.

    ``tiled``: a matmul-like kernel; ordinal tile sizes, warps, stages, group and split factors; time
    from wave quantisation, a per-seed preferred tile shape, warps-per-tile and stage interactions,
    a register-spill cliff (x2.5) and failures where shared memory or registers run out (plus a few
    random ones). ``stencil``: two thread-block dimensions, per-thread tiles, a categorical memory
    strategy whose two usable variants have different optima (two basins), unrolling; block sizes
    outside 32-1024 threads are not candidates; failures where registers or shared memory run out.
    Repeats carry 3% multiplicative noise.
    """
    rng = random.Random(f"{kind}:{seed}")
    jitter = {}

    def noise(key: Any) -> float:  # fixed per config: a space's fine structure the model cannot see
        if key not in jitter:
            jitter[key] = math.exp(rng.gauss(0, 0.08))
        return jitter[key]

    if kind == "tiled":
        params = {
            "BLOCK_M": [16, 32, 64, 128, 256],
            "BLOCK_N": [16, 32, 64, 128, 256],
            "BLOCK_K": [16, 32, 64, 128],
            "num_warps": [1, 2, 4, 8, 16],
            "num_stages": [1, 2, 3, 4, 5],
            "GROUP_M": [1, 4, 8],
            "SPLIT_K": [1, 2, 4],
        }
        sms, smem = rng.choice([80, 108, 132]), rng.choice([100_000, 164_000, 228_000])
        m, n, k = (rng.choice([1024, 2048, 4096, 8192]) for _ in range(3))
        pref_m, pref_n = rng.choice([64, 128, 256]), rng.choice([64, 128, 256])
        pref_stages = rng.choice([2, 3, 4])

        def time_of(c: dict[str, Any]) -> float | None:
            bm, bn, bk, w, st, g, sk = (c[p] for p in params)
            if bm * bn < 32 * 32 or (sk > 1 and k // sk < 4 * bk):
                return None  # restriction: not a candidate
            if (bm + bn) * bk * 2 * st > smem:
                return math.inf
            regs = bm * bn / (32 * w)
            if regs > 512 or rng.random() < 0.03:
                return math.inf
            tiles = math.ceil(m / bm) * math.ceil(n / bn) * sk
            waves = math.ceil(tiles / sms)
            t = waves * bm * bn * k / sk / 1e6
            t *= 1 + 0.3 * abs(math.log2(bm / pref_m)) + 0.3 * abs(math.log2(bn / pref_n))
            t *= 1 + 0.25 * abs(math.log2(max(1, bm * bn / 4096) / w))
            t *= 1 + 0.15 * abs(st - pref_stages) + (0.4 if bk == 16 else 0.0)
            t *= 1 + (0.05 if g == 1 else 0.0) + 0.1 * (sk > 1) * (tiles / sk > sms)
            if regs > 128:
                t *= 2.5  # spills
            return t * noise(tuple(c.values()))

    elif kind == "stencil":
        params = {
            "block_x": [1, 2, 4, 8, 16, 32, 64, 128],
            "block_y": [1, 2, 4, 8, 16, 32],
            "tile_x": [1, 2, 3, 4, 6, 8],
            "tile_y": [1, 2, 3, 4, 6, 8],
            "memory": ["global", "shared", "texture"],
            "unroll": [0, 1],
        }
        best_tile = {"global": rng.choice([2, 3, 4]), "shared": rng.choice([4, 6, 8]), "texture": 1}
        pref_x = rng.choice([16, 32, 64])
        reg_limit = rng.choice([48, 64, 96])

        def time_of(c: dict[str, Any]) -> float | None:
            bx, by, tx, ty, mem, un = (c[p] for p in params)
            threads = bx * by
            if not 32 <= threads <= 1024:
                return None
            if tx * ty * (2 + un) > reg_limit or (mem == "texture" and tx * ty > 4):
                return math.inf  # registers exhausted
            if mem == "shared" and (bx * tx + 4) * (by * ty + 4) * 4 > 48_000:
                return math.inf
            coalesce = 1 + 0.5 * abs(math.log2(bx / pref_x)) if bx < 32 or bx > pref_x else 1.0
            t = {"shared": 1.0, "global": 1.35, "texture": 1.6}[mem] * coalesce
            t *= 1 + 0.12 * (abs(tx - best_tile[mem]) + abs(ty - best_tile[mem]) / 2)
            t *= 0.9 if un and tx * ty >= 4 else 1.0
            t *= 1 + 0.3 * (threads < 128) + 0.2 * (threads > 512)
            return t * noise(tuple(c.values()))

    else:
        raise ValueError(f"unknown synthetic space {kind!r}")
    names = list(params)
    rows, mean, repeats = [], [], []
    for combo in itertools.product(*params.values()):
        config = dict(zip(names, combo))
        t = time_of(config)
        if t is None:
            continue
        rows.append(config)
        mean.append(t)
        repeats.append([t * math.exp(rng.gauss(0, 0.03)) for _ in range(5)] if math.isfinite(t) else [])
    space = SearchSpace.from_table(names, [params[p] for p in names], [[r[p] for p in names] for r in rows])
    cost = [0.5 + (0.0 if not math.isfinite(t) else 0.01 * t) for t in mean]
    return ReplaySpace(
        name=f"synthetic_{kind}_{seed}",
        kernel=f"synthetic {kind}",
        device=f"seed {seed}",
        params=params,
        space=space,
        mean_ms=mean,
        repeats_ms=repeats,
        cost_ms=cost,
        records=rows,
    )


SYNTHETIC = ("synthetic:tiled:1", "synthetic:stencil:2")


@dataclass(frozen=True)
class Job:
    path: str  # a file, or "synthetic:<kind>:<seed>"
    strategy: str
    seed: int
    batch: int
    noise: bool
    share: float = max(BUDGETS)
    warm_from: str | None = None
    bo: tuple[tuple[str, Any], ...] = ()  # BOSettings fields changed for this run (--bo)


def assignment(text: str, known: Sequence[str], owner: str) -> tuple[str, Any]:
    """``NAME=VALUE`` as (name, Python literal), where NAME is one of ``known``."""
    name, _, value = text.partition("=")
    if name not in known:
        raise argparse.ArgumentTypeError(f"{owner} {name!r}")
    return name, ast.literal_eval(value)


def parse_bo(text: str) -> tuple[str, Any]:
    """A ``--bo NAME=VALUE`` argument: a field of Bayesian optimisation's ``BOSettings``."""
    return assignment(text, [f.name for f in dataclasses.fields(BOSettings)], "BOSettings has no field")


def with_settings(strategy: Strategy, bo: Sequence[tuple[str, Any]]) -> Strategy:
    """``strategy`` with the ``BOSettings`` fields ``bo`` changed (strategies without settings as given)."""
    config = getattr(strategy, "config", None)
    if bo and isinstance(config, BOSettings):
        strategy.config = dataclasses.replace(config, **dict(bo))  # type: ignore[attr-defined]
    return strategy


@dataclass
class Outcome:
    job: Job
    fraction: dict[float, float]  # budget share -> best time in space / best mean time found
    evaluations: dict[float, int | None]  # margin -> evaluations until reached (None: not in budget)
    evaluated: int
    overhead_s: float  # strategy time per evaluation (its own time: fits, proposals)


def replay(job: Job) -> Outcome:
    """One search through the batch interface (``drive_batched``), with ``job.batch`` in flight."""
    replay_space = _loaded(job.path)
    warm = warm_seeds(_loaded(job.warm_from), replay_space) if job.warm_from else []
    rng = random.Random(job.seed)

    def objective(index: int) -> float:
        return replay_space.measured(index, rng, job.noise)

    strategy = with_settings(make_strategy(job.strategy), job.bo)  # imports SMAC once per process
    budget = Budget(max_share=job.share, seed=job.seed)
    search = drive_batched(strategy, replay_space.space, budget, objective, job.batch, warm, job.seed)
    n = len(replay_space.space)
    fraction = {}
    for share in BUDGETS:
        first = search.issued[: budget_evaluations(share, n)]
        found = min((replay_space.mean_ms[i] for i in first), default=math.inf)
        fraction[share] = replay_space.best_ms / found
    evaluations: dict[float, int | None] = {}
    for margin in MARGINS:
        targets = set(replay_space.within(margin))
        evaluations[margin] = next((k for k, i in enumerate(search.order, 1) if i in targets), None)
    told = max(1, len(search.order))
    return Outcome(job, fraction, evaluations, len(search.order), search.strategy_time_s / told)


def budget_evaluations(share: float, n: int) -> int:
    return Budget(max_share=share).max_evaluations(n)


@dataclass
class Row:
    space: ReplaySpace
    strategy: str
    batch: int
    outcomes: list[Outcome]

    def mean_fraction(self, share: float) -> float:
        return statistics.fmean(o.fraction[share] for o in self.outcomes)

    def evals(self, margin: float) -> list[float]:
        cap = budget_evaluations(max(BUDGETS), len(self.space.space)) + 1
        return [cap if o.evaluations[margin] is None else o.evaluations[margin] for o in self.outcomes]

    def median_evals(self, margin: float) -> float:
        return statistics.median(self.evals(margin))

    def missed(self, margin: float) -> int:
        return sum(o.evaluations[margin] is None for o in self.outcomes)

    def ratio(self, margin: float) -> float:
        return self.median_evals(margin) / self.space.random_expectation(margin)

    def overhead_ms(self) -> float:
        return 1e3 * statistics.median(o.overhead_s for o in self.outcomes)


def space_table(spaces: list[ReplaySpace]) -> str:
    header = ["space", "kernel, GPU", "N candidates", "invalid", "grid points", "best (ms)", "k 5%", "k 1%"]
    header += ["random exp. 5%", "random exp. 1%"]
    header += [f"random fraction @{b:.0%}" for b in BUDGETS]
    rows = []
    for s in spaces:
        invalid = sum(not math.isfinite(t) for t in s.mean_ms)
        rows.append(
            [s.name, f"{s.kernel}, {s.device}", f"{len(s.space):,}", f"{invalid:,}", f"{s.space.grid_size:,}"]
            + [f"{s.best_ms:.3f}", str(len(s.within(0.05))), str(len(s.within(0.01)))]
            + [f"{s.random_expectation(m):,.1f}" for m in MARGINS]
            + [f"{s.random_fraction(b):.3f}" for b in BUDGETS]
        )
    return markdown_table(header, rows, 2)


def results_table(rows: list[Row]) -> str:
    """Per space, strategy and batch size: fraction of optimum at each budget, evaluations to the
    margins (median, runs that missed within the budget count as budget + 1), overhead."""
    header = ["space", "strategy", "batch", "runs"]
    header += [f"fraction of optimum @{b:.0%}" for b in BUDGETS]
    for margin in MARGINS:
        header += [f"evals to {margin:.0%} (median)", "x random exp."]
    header += [f"missed in budget ({'/'.join(f'{m:.0%}' for m in MARGINS)})", "overhead/eval"]
    lines = []
    for r in rows:
        cells = [r.space.name, r.strategy, str(r.batch), str(len(r.outcomes))]
        for b in BUDGETS:
            mark = ""
            if r.strategy == "bayesian":
                mark = " ✓" if r.mean_fraction(b) >= r.space.random_fraction(b) else " ✗"
            cells.append(f"{r.mean_fraction(b):.3f}{mark}")
        for margin in MARGINS:
            ratio = r.ratio(margin)
            mark = ""
            if r.strategy == "bayesian" and margin == 0.05:
                mark = evals_mark(r, margin)
            cells += [f"{r.median_evals(margin):,.1f}", f"{ratio:.3f}{mark}"]
        cells += ["/".join(str(r.missed(m)) for m in MARGINS), f"{r.overhead_ms():.1f} ms"]
        lines.append(cells)
    return markdown_table(header, lines, 3)


def evals_mark(row: Row, margin: float) -> str:
    """✓ when the median run reached the margin within a third of random search's expected
    evaluations, ✗ when it did not, ? when the median run missed within the budget: its count is
    only the budget + 1, so the ratio is a lower bound and the target is undecided."""
    if row.median_evals(margin) > budget_evaluations(max(BUDGETS), len(row.space.space)):
        return " ?"
    return " ✓" if row.ratio(margin) <= 1 / 3 else " ✗"


def summary_table(rows: list[Row], held_in: Sequence[str]) -> str:
    """Mean fraction of optimum over spaces, per strategy and batch, and the targets."""
    header = ["spaces", "strategy", "batch"] + [f"mean fraction @{b:.0%}" for b in BUDGETS]
    groups = {
        "measured GPU spaces": [r for r in rows if not r.space.name.startswith("synthetic")],
        "held out (not used to choose settings)": [
            r for r in rows if r.space.name not in held_in and not r.space.name.startswith("synthetic")
        ],
        "synthetic spaces": [r for r in rows if r.space.name.startswith("synthetic")],
    }
    lines = []
    for label_, group in groups.items():
        keys = sorted({(r.strategy, r.batch) for r in group})
        for strategy, batch in keys:
            sel = [r for r in group if (r.strategy, r.batch) == (strategy, batch)]
            lines.append(
                [label_, strategy, str(batch)]
                + [f"{statistics.fmean(r.mean_fraction(b) for r in sel):.3f}" for b in BUDGETS]
            )
    return markdown_table(header, lines, 3)


def run_all(jobs: list[Job], workers: int, save: Path | None = None) -> list[Outcome]:
    """Every job; one progress line per finished run on stderr, results saved as they come."""
    outcomes: list[Outcome] = []
    started = time.perf_counter()

    def done(outcome: Outcome) -> Outcome:
        outcomes.append(outcome)
        if save is not None:
            save_outcomes(outcomes, {"partial": True}, save)
        job = outcome.job
        print(
            f"[{len(outcomes)}/{len(jobs)} {time.perf_counter() - started:.0f}s] {job.path} {job.strategy} "
            f"batch {job.batch} seed {job.seed}: {outcome.evaluated} evaluations, "
            f"fraction {outcome.fraction[max(BUDGETS)]:.3f}",
            file=sys.stderr,
            flush=True,
        )
        return outcome

    if workers <= 1:
        return [done(replay(job)) for job in jobs]
    with ProcessPoolExecutor(workers, initializer=_quiet_worker) as pool:
        return [done(o) for o in pool.map(replay, jobs, chunksize=1)]


def _quiet_worker() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def build_rows(spaces: list[ReplaySpace], outcomes: list[Outcome], paths: dict[str, str]) -> list[Row]:
    by_path = {paths[s.name]: s for s in spaces}
    groups: dict[tuple[str, str, int], list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault((o.job.path, o.job.strategy, o.job.batch), []).append(o)
    order = {p: k for k, p in enumerate(paths.values())}
    keys = sorted(groups, key=lambda g: (order[g[0]], g[2], g[1] != "random"))
    return [Row(by_path[p], strategy, batch, groups[(p, strategy, batch)]) for p, strategy, batch in keys]


def compare_table(spaces: list[ReplaySpace], base: list[Outcome], new: list[Outcome]) -> str:
    """Two saved runs, seed by seed (runs matched by space file name, strategy, batch and seed):
    mean fraction of the optimum at each budget, before -> after, with the mean paired difference
    and its standard error, and random search's expectation; median evaluations to 5%, before ->
    after (x random's expectation). Then per strategy and batch, the mean over the spaces (the
    standard error from each seed's difference averaged over the spaces)."""
    by_name = {s.name: s for s in spaces}

    def keyed(outcomes: list[Outcome]) -> dict[tuple[str, str, int], dict[int, Outcome]]:
        out: dict[tuple[str, str, int], dict[int, Outcome]] = {}
        for o in outcomes:
            name = Path(o.job.path).name.removesuffix(".json.gz")
            out.setdefault((name, o.job.strategy, o.job.batch), {})[o.job.seed] = o
        return out

    def cells(fractions: dict[float, list[tuple[float, ...]]], random: list[float], evals: str) -> list[str]:
        out = []
        for b, r in zip(BUDGETS, random):
            x, y = zip(*fractions[b])
            diff = [v - u for u, v in fractions[b]]
            error = statistics.stdev(diff) / math.sqrt(len(diff)) if len(diff) > 1 else math.nan
            out.append(
                f"{statistics.fmean(x):.3f} -> {statistics.fmean(y):.3f} "
                f"({statistics.fmean(diff):+.3f} ± {error:.3f}), {r:.3f}"
            )
        return [*out, evals]

    before, after = keyed(base), keyed(new)
    header = ["space", "strategy", "batch", "seeds"]
    header += [f"@{b:.0%}: before -> after (difference ± s.e.), random" for b in BUDGETS]
    header += ["evals to 5%: before -> after (x random exp.)"]
    lines = []
    # (strategy, batch) -> seed -> budget -> [(before, after) per space]; and the evaluation ratios
    pooled: dict[tuple[str, int], dict[int, dict[float, list[tuple[float, ...]]]]] = {}
    pooled_ratios: dict[tuple[str, int], list[list[float]]] = {}
    pooled_random: dict[tuple[str, int], list[list[float]]] = {}
    for key in sorted(k for k in after if k in before and k[0] in by_name):
        space, seeds = by_name[key[0]], sorted(set(before[key]) & set(after[key]))
        fractions = {
            b: [(before[key][k].fraction[b], after[key][k].fraction[b]) for k in seeds] for b in BUDGETS
        }
        cap = budget_evaluations(max(BUDGETS), len(space.space)) + 1
        medians = [
            statistics.median(
                cap if r[k].evaluations[0.05] is None else r[k].evaluations[0.05] for k in seeds
            )
            for r in (before[key], after[key])
        ]
        ratios = [m / space.random_expectation(0.05) for m in medians]
        random = [space.random_fraction(b) for b in BUDGETS]
        evals = f"{medians[0]:.1f} -> {medians[1]:.1f} ({ratios[0]:.3f} -> {ratios[1]:.3f})"
        lines.append([*map(str, key), str(len(seeds)), *cells(fractions, random, evals)])
        group = (key[1], key[2])
        for k, seed in enumerate(seeds):
            for b in BUDGETS:
                pooled.setdefault(group, {}).setdefault(seed, {}).setdefault(b, []).append(fractions[b][k])
        pooled_ratios.setdefault(group, []).append(ratios)
        pooled_random.setdefault(group, []).append(random)
    for (strategy, batch), per_seed in sorted(pooled.items()):
        n = len(pooled_ratios[(strategy, batch)])
        complete = [v for v in per_seed.values() if len(v[BUDGETS[0]]) == n]  # seeds run on every space
        fractions = {b: [tuple(statistics.fmean(c) for c in zip(*v[b])) for v in complete] for b in BUDGETS}
        random = [statistics.fmean(c) for c in zip(*pooled_random[(strategy, batch)])]
        ratios = [statistics.fmean(c) for c in zip(*pooled_ratios[(strategy, batch)])]
        evals = f"mean x random exp. {ratios[0]:.3f} -> {ratios[1]:.3f}"
        lines.append(
            [
                f"mean of {n} spaces",
                strategy,
                str(batch),
                str(len(complete)),
                *cells(fractions, random, evals),
            ]
        )
    return markdown_table(header, lines, 3)


def warm_pairs(spaces: list[ReplaySpace]) -> list[tuple[ReplaySpace, ReplaySpace]]:
    """(source, target) pairs: the same kernel measured on another GPU, sharing some parameters."""
    pairs = []
    for target in spaces:
        for source in spaces:
            same_kernel = source.kernel == target.kernel and source.device != target.device
            if source is not target and same_kernel and warm_seeds(source, target):
                pairs.append((source, target))
    return pairs


def save_outcomes(outcomes: list[Outcome], run: dict[str, Any], path: Path) -> None:
    data = [
        {
            "job": asdict(o.job),
            "fraction": {str(b): o.fraction[b] for b in BUDGETS},
            "evaluations": {str(m): o.evaluations[m] for m in MARGINS},
            "evaluated": o.evaluated,
            "overhead_s": o.overhead_s,
        }
        for o in outcomes
    ]
    path.write_text(json.dumps({"run": run, "outcomes": data}, indent=1))


def load_outcomes(path: Path) -> tuple[list[Outcome], dict[str, Any]]:
    saved = json.loads(path.read_text())
    outcomes = [
        Outcome(
            Job(**{**item["job"], "bo": tuple(tuple(pair) for pair in item["job"].get("bo", ()))}),
            {b: item["fraction"][str(b)] for b in BUDGETS},
            {m: item["evaluations"][str(m)] for m in MARGINS},
            item["evaluated"],
            item["overhead_s"],
        )
        for item in saved["outcomes"]
    ]
    return outcomes, saved["run"]


HELD_IN = ("pnpoly_RTX_3090", "convolution_RTX_2080_Ti")


def render(spaces: list[ReplaySpace], rows: list[Row], run: dict[str, Any]) -> str:
    seeds = max(len(r.outcomes) for r in rows)
    if run.get("partial"):
        produced = f"Partial results of a run (up to {seeds} seeds per row; see the 'runs' column). "
    else:
        produced = (
            f"Produced by `{run['command']}` ({run['seeds']} seeds per row, noise "
            f"{'on' if run['noise'] else 'off'}, {run['elapsed_s'] / 60:.1f} min on {run['cores']} cores). "
        )
    how = (
        produced
        + "Every strategy runs through the batch interface (`drive_batched`) with 1 or 16 candidates in "
        "flight, results told in random order. 'Fraction of optimum @b' is the space's best mean time "
        "divided by the best mean time among the first b of the space's candidates handed out (a "
        "failed config counts as not found), averaged over seeds; the 2% figure is the prefix of the "
        "5% run (a run given 2% would keep fewer model proposals in flight: 10% of its budget). "
        "'Evals to' counts results until a config within the margin of the best was measured "
        "(median; a run that missed within the 5% budget counts as the budget + 1); 'x random exp.' "
        "divides it by random search's expectation (N+1)/(k+1). 'Random fraction' is random "
        "search's exact expected fraction, from the space's sorted times. ✓/✗: Bayesian "
        "optimisation at least as good as that expectation (the simulated random runs scatter "
        "around it by about 0.01 at 20 seeds), and at most 1/3 of the expectation (evals to 5%; ?: "
        "undecided, the median run missed within the budget). "
        "Settings were chosen on "
        f"{' and '.join(HELD_IN)} only; the other spaces are held out. Overhead/eval: the strategy's "
        "own time per evaluation (model fits and proposals) on this machine."
    )
    parts = [SECTION, how, space_table(spaces), summary_table(rows, HELD_IN), results_table(rows)]
    return "\n\n".join(parts)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int) -> str:
    """A Markdown table; columns after the first ``text_columns`` are right-aligned numbers."""
    align = ["---"] * text_columns + ["---:"] * (len(header) - text_columns)
    return "\n".join("| " + " | ".join(cells) + " |" for cells in (header, align, *rows))


def write_section(text: str, path: Path = README) -> None:
    """Replace this benchmark's section of ``benchmarks/README.md`` (other sections are kept)."""
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    new = text.rstrip() + "\n\n"
    updated = pattern.sub(lambda _: new, old) if pattern.search(old) else old.rstrip() + "\n\n" + new
    path.write_text(updated.rstrip() + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--full", action="store_true", help="every space, 20 seeds")
    parser.add_argument("--seeds", type=int, help="runs per space, strategy and batch (default 3, --full 20)")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds start here (default 0)")
    parser.add_argument("--data", type=Path, default=DATA_DIR)
    parser.add_argument(
        "--only", nargs="*", help="spaces (file names without .json.gz, or synthetic:kind:seed)"
    )
    parser.add_argument("--no-synthetic", dest="synthetic", action="store_false")
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-noise", dest="noise", action="store_false", help="answer the mean time")
    parser.add_argument("--write", action="store_true", help="write the tables into benchmarks/README.md")
    parser.add_argument("--save", type=Path, help="write the raw results (JSON) here")
    parser.add_argument("--render", type=Path, help="render saved results (--save) instead of running")
    parser.add_argument(
        "--compare", type=Path, help="with --render: compare with these saved results, seed by seed"
    )
    parser.add_argument(
        "--bo",
        type=parse_bo,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="change a BOSettings field for this run (repeatable; not with --write)",
    )
    args = parser.parse_args(argv)
    if args.bo and args.write:
        parser.error("--write keeps the README's tables to the shipped settings: drop --bo or --write")
    args.seeds = args.seeds or (20 if args.full else 3)
    files = sorted(args.data.glob("*.json.gz"))
    names = [str(f) for f in files] + (list(SYNTHETIC) if args.synthetic else [])
    if args.only:
        extra = [o for o in args.only if o.startswith("synthetic:") and o not in names]  # any seed
        names = [p for p in names if Path(p).name.removesuffix(".json.gz") in args.only or p in args.only]
        names += extra
    elif not args.full:
        names = [p for p in names if Path(p).name.startswith(("pnpoly", "convolution_RTX"))]
    if not names:
        print(f"no tuning spaces under {args.data}", file=sys.stderr)
        return 1
    spaces = [_loaded(p) for p in names]
    paths = {s.name: p for s, p in zip(spaces, names)}
    if args.compare:
        if not args.render:
            parser.error("--compare needs --render")
        print(compare_table(spaces, load_outcomes(args.compare)[0], load_outcomes(args.render)[0]))
        return 0
    if args.render:
        outcomes, run = load_outcomes(args.render)
    else:
        started = time.perf_counter()
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        jobs = [
            Job(paths[s.name], strategy, seed, batch, args.noise, bo=tuple(args.bo))
            for seed in seeds  # seed by seed, so that partial results cover every space
            for s in sorted(spaces, key=lambda s: -len(s.space))  # the longest first
            for strategy in args.strategies
            for batch in args.batches
        ]
        outcomes = run_all(jobs, args.workers, args.save)
        given = [a for a in (sys.argv[1:] if argv is None else argv) if a]
        given = [a for k, a in enumerate(given) if not (a == "--save" or (k and given[k - 1] == "--save"))]
        run = {
            "command": " ".join(["python benchmarks/search_replay.py", *given]),
            "seeds": args.seeds,
            "noise": args.noise,
            "cores": os.cpu_count(),
            "elapsed_s": time.perf_counter() - started,
        }
        if args.save:
            save_outcomes(outcomes, run, args.save)
    text = render(spaces, build_rows(spaces, outcomes, paths), run)
    print(text)
    if args.write:
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from triton_dejavu_like.search import Budget, BudgetExhausted, SearchRun, SearchSpace, drive, make_strategy

DATA_DIR = Path(__file__).resolve().parent / "data" / "search-spaces"
README = Path(__file__).resolve().parent / "README.md"
SECTION = "## Search replay"
MARGINS = (0.05, 0.01)
WARM_SEEDS = 5
STRATEGIES = ("random", "bayesian")


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

    def within(self, margin: float) -> list[int]:
        limit = self.best_ms * (1 + margin)
        return [i for i, t in enumerate(self.mean_ms) if t <= limit]

    def random_expectation(self, margin: float) -> float:
        return (len(self.space) + 1) / (len(self.within(margin)) + 1)


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


@dataclass(frozen=True)
class Job:
    path: str
    strategy: str
    seed: int
    cap: int
    noise: bool
    warm_from: str | None = None


@dataclass
class Outcome:
    job: Job
    evaluations: dict[float, int | None]  # margin -> evaluations to reach it (None: not within cap)
    cost_s: dict[float, float | None]  # margin -> summed compile + benchmark seconds to reach it
    evaluated: int
    overhead_s: float  # strategy time per evaluation, excluding the replayed measurements


def replay(job: Job) -> Outcome:
    replay_space = _loaded(job.path)
    warm = warm_seeds(_loaded(job.warm_from), replay_space) if job.warm_from else []
    rng = random.Random(job.seed)
    targets = {m: set(replay_space.within(m)) for m in MARGINS}
    tightest = min(MARGINS)
    order: list[int] = []
    measuring = 0.0

    def objective(index: int) -> float:
        nonlocal measuring
        started = time.perf_counter()
        order.append(index)
        mean = replay_space.mean_ms[index]
        value = rng.choice(replay_space.repeats_ms[index]) if job.noise and math.isfinite(mean) else mean
        measuring += time.perf_counter() - started
        if index in targets[tightest] or len(order) >= job.cap:
            raise BudgetExhausted  # the score is known: stop this run
        return value

    budget = Budget(max_share=1.0, seed=job.seed)
    strategy = make_strategy(job.strategy)  # imports SMAC once per process, outside the timing
    started = time.perf_counter()
    drive(strategy, SearchRun(replay_space.space, objective, budget), warm)
    wall = time.perf_counter() - started
    evaluations: dict[float, int | None] = {}
    cost: dict[float, float | None] = {}
    for margin in MARGINS:
        hit = next((n for n, i in enumerate(order, 1) if i in targets[margin]), None)
        evaluations[margin] = hit
        cost[margin] = None if hit is None else sum(replay_space.cost_ms[i] for i in order[:hit]) / 1e3
    return Outcome(job, evaluations, cost, len(order), (wall - measuring) / max(1, len(order)))


def _median(values: Sequence[float | None]) -> float | None:
    """Median with runs that never reached the margin counted as worse than every other run."""
    ranked = sorted(values, key=lambda v: math.inf if v is None else v)
    mid = ranked[(len(ranked) - 1) // 2 : len(ranked) // 2 + 1]
    if any(v is None for v in mid):
        return None
    return statistics.fmean(mid)  # type: ignore[arg-type]


@dataclass
class Row:
    space: str
    label: str
    outcomes: list[Outcome]
    expectation: dict[float, float]
    cap: int

    def median_evals(self, margin: float) -> float | None:
        return _median([o.evaluations[margin] for o in self.outcomes])

    def median_cost(self, margin: float) -> float | None:
        return _median([o.cost_s[margin] for o in self.outcomes])

    def missed(self, margin: float) -> int:
        return sum(o.evaluations[margin] is None for o in self.outcomes)

    def ratio(self, margin: float) -> float | None:
        median = self.median_evals(margin)
        return None if median is None else median / self.expectation[margin]


TARGET_RATIO = {0.05: 1 / 3, 0.01: 1 / 2}


def _evals(value: float | None, cap: int) -> str:
    return f"> {cap:,}" if value is None else f"{value:,.1f}"


def _seconds(value: float | None) -> str:
    return "not reached" if value is None else f"{value:,.1f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int) -> str:
    """A Markdown table; columns after the first ``text_columns`` are right-aligned numbers."""
    align = ["---"] * text_columns + ["---:"] * (len(header) - text_columns)
    return "\n".join("| " + " | ".join(cells) + " |" for cells in (header, align, *rows))


def space_table(spaces: list[ReplaySpace]) -> str:
    header = ["space", "kernel, GPU", "N candidates", "invalid", "grid points", "best (ms)", "k 5%", "k 1%"]
    header += ["random exp. 5%", "random exp. 1%"]
    rows = []
    for s in spaces:
        invalid = sum(not math.isfinite(t) for t in s.mean_ms)
        rows.append(
            [s.name, f"{s.kernel}, {s.device}", f"{len(s.space):,}", f"{invalid:,}", f"{s.space.grid_size:,}"]
            + [f"{s.best_ms:.3f}", str(len(s.within(0.05))), str(len(s.within(0.01)))]
            + [f"{s.random_expectation(m):,.1f}" for m in MARGINS]
        )
    return markdown_table(header, rows, 2)


def results_table(rows: list[Row]) -> str:
    header = ["space", "strategy", "runs"]
    for margin in MARGINS:
        pct = f"{margin:.0%}"
        header += [f"evals to {pct}", "x random exp.", f"compile+bench s to {pct}"]
    header += ["not reached (5%/1%)", "overhead/eval"]
    lines = []
    for r in rows:
        cells = [r.space, r.label, str(len(r.outcomes))]
        for margin in MARGINS:
            ratio = r.ratio(margin)
            if ratio is None:
                shown = f"> {r.cap / r.expectation[margin]:.2f}"
            else:
                shown = f"{ratio:.3f}"
            if r.label != "random":
                shown += " ✓" if ratio is not None and ratio <= TARGET_RATIO[margin] else " ✗"
            cells += [_evals(r.median_evals(margin), r.cap), shown, _seconds(r.median_cost(margin))]
        cells.append("/".join(str(r.missed(m)) for m in MARGINS))
        overhead = statistics.median(o.overhead_s for o in r.outcomes)
        cells.append(f"{overhead * 1e3:.1f} ms")
        lines.append(cells)
    return markdown_table(header, lines, 2)


def warm_pairs(spaces: list[ReplaySpace]) -> list[tuple[ReplaySpace, ReplaySpace]]:
    """(source, target) pairs: the same kernel measured on another GPU, sharing some parameters."""
    pairs = []
    for target in spaces:
        for source in spaces:
            same_kernel = source.kernel == target.kernel and source.device != target.device
            if source is not target and same_kernel and warm_seeds(source, target):
                pairs.append((source, target))
    return pairs


def plan(spaces: list[ReplaySpace], paths: dict[str, str], seeds: range, cap_of, noise: bool) -> list[Job]:
    jobs = []
    for s in spaces:
        for strategy in STRATEGIES:
            jobs += [Job(paths[s.name], strategy, seed, cap_of(s, strategy), noise) for seed in seeds]
    for source, target in warm_pairs(spaces):
        jobs += [
            Job(paths[target.name], "bayesian", seed, cap_of(target, "bayesian"), noise, paths[source.name])
            for seed in seeds
        ]
    return jobs


def label(job: Job) -> str:
    if job.warm_from:
        return f"bayesian, warm from {Path(job.warm_from).name.removesuffix('.json.gz')}"
    return job.strategy


def run_all(jobs: list[Job], workers: int, on_done: Callable[[list[Outcome]], None]) -> list[Outcome]:
    """Every job, in order; one progress line per finished run goes to stderr."""
    outcomes: list[Outcome] = []

    def done(outcome: Outcome) -> Outcome:
        outcomes.append(outcome)
        on_done(outcomes)
        job = outcome.job
        print(
            f"[{len(outcomes)}/{len(jobs)}] {Path(job.path).name} {label(job)} seed {job.seed}: "
            f"{outcome.evaluated} evaluations",
            file=sys.stderr,
            flush=True,
        )
        return outcome

    if workers <= 1:
        return [done(replay(job)) for job in jobs]
    with ProcessPoolExecutor(workers, initializer=_quiet_worker) as pool:
        return [done(o) for o in pool.map(replay, jobs, chunksize=1)]


def save_outcomes(outcomes: list[Outcome], run: dict[str, Any], path: Path) -> None:
    """The raw results and how they were made, so that the tables can be rendered again."""
    data = [
        {
            "job": asdict(o.job),
            "evaluations": {str(m): o.evaluations[m] for m in MARGINS},
            "cost_s": {str(m): o.cost_s[m] for m in MARGINS},
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
            Job(**item["job"]),
            {m: item["evaluations"][str(m)] for m in MARGINS},
            {m: item["cost_s"][str(m)] for m in MARGINS},
            item["evaluated"],
            item["overhead_s"],
        )
        for item in saved["outcomes"]
    ]
    return outcomes, saved["run"]


def _quiet_worker() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def build_rows(spaces: list[ReplaySpace], outcomes: list[Outcome]) -> list[Row]:
    by_name = {s.name: s for s in spaces}
    groups: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault((Path(o.job.path).name.removesuffix(".json.gz"), label(o.job)), []).append(o)
    rows = []
    for (space, lab), outs in groups.items():
        s = by_name[space]
        expectation = {m: s.random_expectation(m) for m in MARGINS}
        rows.append(Row(space, lab, outs, expectation, outs[0].job.cap))
    return rows


def warm_start_notes(spaces: list[ReplaySpace]) -> str:
    notes = []
    for source, target in warm_pairs(spaces):
        shared = [p for p in source.params if p in target.params and len(target.params[p]) > 1]
        seeds = warm_seeds(source, target)
        best = min(target.mean_ms[i] for i in seeds)
        notes.append(
            f"- {target.name} seeded from {source.name}: shared tuned parameters {', '.join(shared)}; "
            f"the {WARM_SEEDS} best mappable source configs give {len(seeds)} target candidates, the best "
            f"of which is {100 * (best / target.best_ms - 1):.1f}% slower than the target's best."
        )
    return "\n".join(notes)


def describe(run: dict[str, Any]) -> str:
    command = run.get("command") or "python benchmarks/search_replay.py" + (" --full" if run["full"] else "")
    command = re.sub(r" --save \S+", "", command)  # where the raw results went is beside the point
    first = f", from seed {run['first_seed']}" if run.get("first_seed") else ""
    return (
        f"Produced by `{command}` ({run['seeds']} seeds per row{first}, noise "
        f"{'on' if run['noise'] else 'off'}, {run['elapsed_s'] / 60:.1f} min on {run['cores']} cores)."
    )


def render(spaces: list[ReplaySpace], results: list[tuple[list[Row], dict[str, Any]]]) -> str:
    """The README section: the first result set in full, further ones (other seeds) as tables."""
    (rows, run), *further = results
    how = (
        describe(run) + " Every row runs the package's own strategy (`make_strategy`) on the file's "
        "configs; grid points absent from the file are not candidates. With noise on, each "
        "measurement is one of the config's measured repeats; a config counts as reached when its "
        "mean time is within the margin of the space's best mean. Medians over seeds; 'x random "
        "exp.' divides the median by the random-search expectation (N+1)/(k+1). Targets for "
        "Bayesian optimisation: at most 1/3 of it for 5% and 1/2 for 1% (✓/✗). Compile+bench s sums "
        "the measured compile and benchmark time of every config evaluated until the margin was "
        "reached. A run stops at the 1% margin or at its cap (random: N; Bayesian: the random "
        "expectation for 1%; CI-sized runs: 200); '> cap' means more than half the runs did not "
        "reach the margin. Overhead/eval is the strategy's own time per evaluation on this machine "
        "(replayed measurements cost nothing)."
    )
    notes = warm_start_notes(spaces) or "- no pair of spaces measures one kernel on two GPUs"
    parts = [SECTION, how, space_table(spaces), results_table(rows), "Warm start:\n\n" + notes]
    for more_rows, more_run in further:
        parts += ["Further seeds, same settings. " + describe(more_run), results_table(more_rows)]
    return "\n\n".join(parts)


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
    parser.add_argument("--full", action="store_true", help="every file, 20 seeds, full caps; writes README")
    parser.add_argument("--seeds", type=int, help="runs per space and strategy (default 3, --full 20)")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds start here (default 0)")
    parser.add_argument("--data", type=Path, default=DATA_DIR)
    parser.add_argument("--only", nargs="*", help="file names (without .json.gz) to replay")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-noise", dest="noise", action="store_false", help="answer the mean time")
    parser.add_argument(
        "--write", action="store_true", help="write the tables into benchmarks/README.md (--full does)"
    )
    parser.add_argument("--save", type=Path, help="write the raw results (JSON) here as runs finish")
    parser.add_argument(
        "--render",
        type=Path,
        nargs="+",
        help="render saved results (--save); the first file is the main one",
    )
    parser.add_argument("--full-caps", action="store_true", help="the caps of --full (implied by --full)")
    args = parser.parse_args(argv)
    args.seeds = args.seeds or (20 if args.full else 3)
    files = sorted(args.data.glob("*.json.gz"))
    if args.only:
        files = [f for f in files if f.name.removesuffix(".json.gz") in args.only]
    elif not args.full:
        files = [f for f in files if f.name.startswith(("pnpoly", "convolution"))]
    if not files:
        print(f"no tuning spaces under {args.data}", file=sys.stderr)
        return 1
    spaces = [_loaded(str(f)) for f in files]
    paths = {s.name: str(f) for s, f in zip(spaces, files)}

    def cap_of(space: ReplaySpace, strategy: str) -> int:
        if strategy == "random":
            return len(space.space)
        full_cap = math.ceil(space.random_expectation(min(MARGINS)))
        return min(len(space.space), full_cap if args.full or args.full_caps else 200)

    if args.render:
        loaded = [load_outcomes(path) for path in args.render]
        results = [(build_rows(spaces, outcomes), run) for outcomes, run in loaded]
    else:
        started = time.perf_counter()
        run = {"full": args.full, "seeds": args.seeds, "first_seed": args.first_seed, "noise": args.noise}
        run["cores"] = os.cpu_count()
        given = [a for a in (sys.argv[1:] if argv is None else argv) if a]
        run["command"] = " ".join(["python benchmarks/search_replay.py", *given])

        def checkpoint(done: list[Outcome]) -> None:
            run["elapsed_s"] = time.perf_counter() - started
            if args.save:
                save_outcomes(done, run, args.save)

        outcomes = run_all(
            plan(spaces, paths, range(args.first_seed, args.first_seed + args.seeds), cap_of, args.noise),
            args.workers,
            checkpoint,
        )
        results = [(build_rows(spaces, outcomes), run)]
    text = render(spaces, results)
    print(text)
    if args.write or (args.full and not args.render):
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

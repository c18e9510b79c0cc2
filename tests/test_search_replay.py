"""The replay benchmark on measured GPU tuning spaces, in CI-sized form."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("smac", reason="needs the bo extra")

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "search_replay.py"
if not BENCHMARK.is_file():  # the GPU test image copies tests/ and examples/, not benchmarks/
    pytest.skip(f"no {BENCHMARK} in this tree", allow_module_level=True)


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("search_replay", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


replay = _load_benchmark()
DATA = replay.DATA_DIR
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"no measured spaces at {DATA}")


@pytest.fixture(scope="module")
def pnpoly():
    return replay.load(DATA / "pnpoly_RTX_3090.json.gz")


@pytest.fixture(scope="module")
def convolutions():
    return [replay.load(DATA / f"convolution_{gpu}.json.gz") for gpu in ("RTX_2080_Ti", "milo_A6000")]


@needs_data
def test_a_measured_file_becomes_candidates_times_and_costs(convolutions):
    conv = convolutions[0]
    assert len(conv.space) == len(conv.records) < conv.space.grid_size  # restrictions: not candidates
    invalid = [i for i, t in enumerate(conv.mean_ms) if math.isinf(t)]
    assert len(invalid) == 1512
    assert all(conv.cost_ms[i] > 0 for i in invalid[:50])  # a failed config still cost its compile time
    best = min(range(len(conv.mean_ms)), key=conv.mean_ms.__getitem__)
    assert conv.space.value_of(best) == {n: conv.records[best][n] for n in conv.space.names}
    assert conv.random_expectation(0.05) == pytest.approx((len(conv.space) + 1) / (12 + 1))


def test_random_searchs_expected_fraction_is_the_mean_over_every_possible_draw():
    import dataclasses
    import itertools
    import statistics

    times = [2.0, 1.0, math.inf, 4.0, 1.5, 3.0, math.inf, 8.0, 2.5, 5.0]  # a failed config counts as 0
    space = dataclasses.replace(
        replay.synthetic("tiled", 1),
        mean_ms=times,
        space=replay.SearchSpace.from_table(["i"], [list(range(10))], [[i] for i in range(10)]),
    )
    for share in (0.1, 0.2, 0.5):
        m = replay.budget_evaluations(share, len(times))
        draws = [min(times[i] for i in pick) for pick in itertools.combinations(range(len(times)), m)]
        assert space.random_fraction(share) == pytest.approx(statistics.fmean(1.0 / t for t in draws))


@needs_data
def test_warm_seeds_are_the_other_gpus_best_configs_mapped_on_shared_parameters(convolutions):
    a, b = convolutions
    shared = [p for p in b.params if p in a.params]

    def key(record):
        return tuple(record[p] for p in shared)

    seeds = replay.warm_seeds(b, a)
    in_target = {key(r) for r in a.records}
    ranked = sorted(range(len(b.records)), key=b.mean_ms.__getitem__)
    best_mappable = [key(b.records[i]) for i in ranked if key(b.records[i]) in in_target][: replay.WARM_SEEDS]
    assert {key(a.records[j]) for j in seeds} == set(best_mappable)
    assert sorted(seeds) == sorted(j for j, r in enumerate(a.records) if key(r) in set(best_mappable))
    assert replay.warm_pairs(convolutions) == [(b, a), (a, b)]


@needs_data
def test_ci_sized_replay_runs_the_real_strategies_through_the_batch_interface(pnpoly):
    path = str(DATA / "pnpoly_RTX_3090.json.gz")
    outcomes = [
        replay.replay(replay.Job(path, strategy, seed, batch, noise=True, share=0.02))
        for strategy in ("random", "bayesian")
        for batch in (1, 16)
        for seed in range(2)
    ]
    again = replay.replay(replay.Job(path, "bayesian", 0, 16, noise=True, share=0.02))
    assert again.fraction == outcomes[6].fraction  # seeded: the replay is reproducible
    limit = replay.budget_evaluations(0.02, len(pnpoly.space))
    assert all(o.evaluated == limit for o in outcomes)
    assert all(0 < o.fraction[0.02] <= 1 for o in outcomes)
    rows = replay.build_rows([pnpoly], outcomes, {pnpoly.name: path})
    assert [(r.strategy, r.batch) for r in rows] == [
        ("random", 1),
        ("bayesian", 1),
        ("random", 16),
        ("bayesian", 16),
    ]
    table = replay.results_table(rows)
    assert "| pnpoly_RTX_3090 | bayesian | 16 | 2 |" in table


def test_a_median_run_that_missed_the_budget_leaves_the_evaluations_target_undecided(pnpoly):
    budget = replay.budget_evaluations(max(replay.BUDGETS), len(pnpoly.space))
    job = replay.Job("p", "bayesian", 0, 16, noise=False)

    def row(*evals):
        outcomes = [replay.Outcome(job, {}, {0.05: e, 0.01: e}, budget, 0.0) for e in evals]
        return replay.Row(pnpoly, "bayesian", 16, outcomes)

    expected = pnpoly.random_expectation(0.05)  # 120 evaluations; the budget is 205
    assert replay.evals_mark(row(10, 20, 30), 0.05) == " ✓"
    assert replay.evals_mark(row(100, 110, 120), 0.05) == " ✗"  # reached, but later than a third
    # the median run missed: its count (budget + 1) is only a bound, neither met nor failed
    assert replay.evals_mark(row(10, None, None), 0.05) == " ?"
    assert row(10, None, None).median_evals(0.05) == budget + 1 > expected / 3


def test_synthetic_spaces_are_gpu_like_and_seeded():
    tiled = replay.synthetic("stencil", 2)
    assert tiled.space.names == ("block_x", "block_y", "tile_x", "tile_y", "memory", "unroll")
    assert len(tiled.space) < tiled.space.grid_size  # restrictions
    invalid = sum(math.isinf(t) for t in tiled.mean_ms) / len(tiled.mean_ms)
    assert 0.05 < invalid < 0.5
    assert replay.synthetic("stencil", 2).mean_ms == tiled.mean_ms
    assert replay.synthetic("stencil", 3).mean_ms != tiled.mean_ms


def test_readme_section_is_replaced_and_other_sections_are_kept(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Benchmarks\n\n## Hot path\n\nkeep me\n\n## Search replay\n\nold\n\n## Later\n\nme too\n"
    )
    replay.write_section("## Search replay\n\nnew table", readme)
    text = readme.read_text()
    assert "old" not in text and "new table" in text
    assert text.index("## Hot path") < text.index("new table") < text.index("## Later")
    assert "keep me" in text and "me too" in text
    fresh = tmp_path / "fresh.md"
    replay.write_section("## Search replay\n\nfirst", fresh)
    assert fresh.read_text().startswith("# Benchmarks\n\n## Search replay\n\nfirst")


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARK.with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_adaptive_replay_stops_by_the_rule_it_is_given():
    adaptive = _load_script("adaptive_replay")
    from triton_dejavu_like.search import base

    shipped = {name: getattr(base, name) for name in ("PATIENCE_MIN", "PATIENCE_BATCHES", "POLISH")}
    try:
        space = "synthetic:stencil:2"
        # without the polish (the neighbours it measures at a stall change what comes after it), a
        # random search makes the same proposals whatever its patience: a longer one stops later
        unpolished = {"POLISH": False}
        _, _, evaluations, fraction, seconds = adaptive.one_run((space, 0, unpolished, {}, 1, "random"))
        assert base.MIN_EVALUATIONS <= evaluations < 4096 and 0 < fraction <= 1 and seconds >= 0
        longer = {**unpolished, "PATIENCE_MIN": 4 * base.PATIENCE_MIN}
        _, _, patient, _, _ = adaptive.one_run((space, 0, longer, {}, 1, "random"))
        assert patient > evaluations
    finally:
        for name, value in shipped.items():  # one_run sets them in this process
            setattr(base, name, value)
    with pytest.raises(Exception, match="no constant"):
        adaptive.parse_override("NO_SUCH_SETTING=3")
    assert replay.parse_bo("refit_batch_share=0.5") == ("refit_batch_share", 0.5)  # adaptive's --bo too
    with pytest.raises(Exception, match="no field"):
        replay.parse_bo("PATIENCE_MIN=3")  # a stop-rule constant, not a setting of the model


@needs_data
def test_training_sub_spaces_fix_their_parameters_and_partition_the_space(tmp_path, pnpoly):
    sub_spaces = _load_script("sub_spaces")
    assert sub_spaces.main(["--out", str(tmp_path)]) == 0
    files = sorted(tmp_path.glob("pnpoly_between_method*.json.gz"))
    assert [f.name for f in files] == [f"pnpoly_between_method{v}.json.gz" for v in range(4)]
    parts = [replay.load(f) for f in files]
    # one parameter fewer to search; together the four hold every measured config, each once
    assert all(p.space.names == tuple(n for n in pnpoly.space.names if n != "between_method") for p in parts)
    assert sum(len(p.space) for p in parts) == len(pnpoly.space)
    assert sorted(t for p in parts for t in p.mean_ms) == sorted(pnpoly.mean_ms)
    assert all(all(rec["between_method"] == v for rec in p.records) for v, p in enumerate(parts))
    assert len(list(tmp_path.glob("*.json.gz"))) == 15
    assert sub_spaces.main(["--out", str(tmp_path / "small"), "--small"]) == 0
    small = [replay.load(f) for f in sorted((tmp_path / "small").glob("*.json.gz"))]
    assert len(small) == 16 and all(len(s.space.names) == 4 and 400 < len(s.space) < 800 for s in small)


@needs_data
def test_two_saved_runs_are_compared_seed_by_seed(tmp_path, pnpoly):
    def outcomes(fractions: list[float], evals: list[int | None]) -> list:
        job = replay.Job(str(DATA / "pnpoly_RTX_3090.json.gz"), "bayesian", 0, 16, True)
        return [
            replay.Outcome(
                replay.Job(job.path, job.strategy, seed, job.batch, job.noise),
                {b: f for b in replay.BUDGETS},
                {m: e for m in replay.MARGINS},
                100,
                0.0,
            )
            for seed, (f, e) in enumerate(zip(fractions, evals))
        ]

    before = outcomes([0.8, 0.9, 0.7], [40, 60, None])
    after = outcomes([0.9, 0.95, 0.85], [20, 30, 10])
    for name, run in (("before", before), ("after", after)):
        replay.save_outcomes(run, {}, tmp_path / f"{name}.json")
    table = replay.compare_table(
        [pnpoly],
        replay.load_outcomes(tmp_path / "before.json")[0],
        replay.load_outcomes(tmp_path / "after.json")[0],
    )
    row = next(line for line in table.splitlines() if line.startswith("| pnpoly_RTX_3090"))
    # the mean paired gain is 0.1 with a standard error of 0.05/sqrt(3); random's exact expectation
    assert f"0.800 -> 0.900 (+0.100 ± {0.05 / math.sqrt(3):.3f}), {pnpoly.random_fraction(0.02):.3f}" in row
    # a run that missed within the budget counts as the budget + 1 (the median here is 60)
    expected = pnpoly.random_expectation(0.05)
    assert f"60.0 -> 20.0 ({60 / expected:.3f} -> {20 / expected:.3f})" in row
    pooled = next(line for line in table.splitlines() if line.startswith("| mean of 1 spaces"))
    assert pooled.split("|")[5] == row.split("|")[5]  # one space: its mean is the space's


@needs_data
def test_bo_settings_of_a_replay_reach_its_strategy_and_survive_a_save(tmp_path, monkeypatch, capsys):
    # a setting compared with --bo must be the one the search ran with, and saved runs must say so
    made, make = [], replay.make_strategy
    monkeypatch.setattr(replay, "make_strategy", lambda name: made.append(make(name)) or made[-1])
    path = str(DATA / "pnpoly_RTX_3090.json.gz")
    job = replay.Job(path, "bayesian", 0, 16, True, 0.01, bo=(("random_share", 0.5),))
    outcome = replay.replay(job)
    assert made[-1].config.random_share == 0.5
    replay.save_outcomes([outcome], {}, tmp_path / "run.json")
    [loaded], _ = replay.load_outcomes(tmp_path / "run.json")
    assert loaded.job == job
    with pytest.raises(SystemExit) as exit_:  # an unknown field is refused before anything runs
        replay.main(["--only", "pnpoly_RTX_3090", "--bo", "random_shar=0.5"])
    assert exit_.value.code == 2 and "random_shar" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # the README's tables are the shipped settings'
        replay.main(["--only", "pnpoly_RTX_3090", "--bo", "random_share=0.5", "--write"])
    assert exit_.value.code == 2 and "--write" in capsys.readouterr().err

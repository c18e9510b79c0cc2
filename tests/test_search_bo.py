"""Bayesian optimisation (SMAC) and random search on CPU, against deterministic objectives."""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
import serving_helpers
import torch
import triton
from kernels import (
    FakeBench,
    accumulate_kernel,
    add_kernel,
    block_configs,
    grid,
    observe_block,
    run_add,
    tuned_add,
)

import triton_dejavu_like as tdl
from triton_dejavu_like.search import (
    BO_EXTRA_HINT,
    Budget,
    MissingExtraError,
    SearchRun,
    SearchSpace,
    drive,
    drive_batched,
    make_strategy,
    require_smac,
)

pytest.importorskip("smac", reason="needs the bo extra")

from triton_dejavu_like.search import _surrogates
from triton_dejavu_like.search.bayesian import BOSettings


def grid_space(shape: tuple[int, ...], keep=lambda point: True) -> SearchSpace:
    """Integer dimensions ``d0..``; grid points failing ``keep`` are not candidates."""
    values = [list(range(n)) for n in shape]
    rows = [p for p in itertools.product(*values) if keep(p)]
    return SearchSpace.from_table([f"d{i}" for i in range(len(shape))], values, rows)


def bowl(centre: tuple[int, ...]):
    """A smooth objective with one minimum (1.0 at ``centre``)."""

    def time_of(row: tuple[int, ...]) -> float:
        return 1.0 + sum((a - b) ** 2 for a, b in zip(row, centre))

    return time_of


class Counting:
    """An objective over a space's rows that records every index it is asked for."""

    def __init__(self, space: SearchSpace, time_of) -> None:
        self.space = space
        self.time_of = time_of
        self.calls: list[int] = []

    def __call__(self, index: int) -> float:
        self.calls.append(index)
        return self.time_of(self.space.candidates[index])


def bo_run(space, objective, budget, warm=()):
    return drive(make_strategy("bayesian"), SearchRun(space, objective, budget), warm)


def test_share_budget_is_spent_on_candidates_only():
    space = grid_space((10, 10, 10), keep=lambda p: sum(p) % 2 == 0)  # half the grid is excluded
    objective = Counting(space, bowl((6, 2, 4)))
    run = bo_run(space, objective, Budget(max_share=0.08, seed=1))
    assert len(space) == 500
    assert len(objective.calls) == len(set(objective.calls)) == 40 == len(run.results)
    assert all(0 <= i < len(space) for i in objective.calls)


def record_fits(monkeypatch, model_class) -> list[tuple[object, list[int], list[float]]]:
    """Every ``fit`` of ``model_class`` from now on: (model, indices, y)."""
    fits = []
    real_fit = model_class.fit

    def recording_fit(self, indices, y):
        fits.append((self, list(indices), list(y)))
        return real_fit(self, indices, y)

    monkeypatch.setattr(model_class, "fit", recording_fit)
    return fits


@pytest.mark.parametrize("gp_until", [0, 128])  # the forest alone; the process from 6 results
def test_failures_are_left_out_of_the_regression_and_feed_the_failure_model(monkeypatch, gp_until):
    gp_fits = record_fits(monkeypatch, _surrogates.GaussianProcessModel)
    forest_fits = record_fits(monkeypatch, _surrogates.ForestModel)
    space = grid_space((10, 10, 10))
    inner = bowl((2, 8, 5))
    strategy = make_strategy("bayesian")
    strategy.config = dataclasses.replace(strategy.config, gp_until=gp_until)
    run = drive(
        strategy,
        SearchRun(
            space,
            lambda i: math.inf if space.candidates[i][0] >= 5 else inner(space.candidates[i]),
            Budget(max_share=0.04, seed=2),
        ),
    )
    failed = {i for i, v in run.results.items() if math.isinf(v)}
    failure = [f for f in forest_fits if failed & set(f[1])]
    regression = gp_fits + [f for f in forest_fits if not failed & set(f[1])]
    assert failure and regression and bool(gp_fits) == bool(gp_until)
    assert len({id(f[0]) for f in failure}) == 1  # one forest predicts failures
    for _, indices, y in regression:
        assert all(math.isfinite(run.results[i]) for i in indices)
        assert y == [math.log(run.results[i]) for i in indices]  # log times
    for _, indices, y in failure:
        assert y == [float(math.isinf(run.results[i])) for i in indices]


def test_the_gaussian_process_models_the_middle_of_the_search_and_the_forest_its_ends(monkeypatch):
    gp_fits = record_fits(monkeypatch, _surrogates.GaussianProcessModel)
    forest_fits = record_fits(monkeypatch, _surrogates.ForestModel)
    space = grid_space((10, 10, 10))
    strategy = make_strategy("bayesian")
    # 3 parameters: the process from 4 x 3 = 12 successful results until 30
    strategy.config = dataclasses.replace(strategy.config, gp_from_per_dim=4, gp_until=30)
    run = drive(strategy, SearchRun(space, Counting(space, bowl((3, 6, 2))), Budget(max_share=0.06, seed=0)))
    assert len(run.results) == 60
    gp_sizes = {len(indices) for _, indices, _ in gp_fits}
    forest_sizes = {len(indices) for _, indices, _ in forest_fits}  # no failures: regression only
    assert gp_sizes and all(12 <= n < 30 for n in gp_sizes)
    assert any(n < 12 for n in forest_sizes) and any(n >= 30 for n in forest_sizes)
    assert not forest_sizes & set(range(12, 30))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # bounds reached: fine here
def test_the_gaussian_process_keeps_its_hyperparameters_until_the_results_grew():
    space = grid_space((6, 6, 6))
    model = _surrogates.GaussianProcessModel(space, seed=0, isotropic_per_dim=3, reoptimise_growth=0.25)
    time_of = bowl((4, 1, 2))
    y = [math.log(time_of(row)) for row in space.candidates]

    def fit(n: int):
        indices = list(range(0, 7 * n, 7))
        model.fit(indices, [y[i] for i in indices])
        return model._gp.kernel_

    few = fit(8)  # fewer than 3 results per parameter: one length scale for all
    assert np.ndim(few.k1.k2.length_scale) == 0
    first = fit(20)  # enough: one per parameter, fit to the data
    assert np.shape(first.k1.k2.length_scale) == (3,)
    assert fit(24).theta.tolist() == first.theta.tolist()  # 20% more: conditioned, kernel kept
    assert fit(25).theta.tolist() != first.theta.tolist()  # 25% more: fit again
    mean, var = model.predict(np.arange(len(space)))
    assert mean.shape == var.shape == (len(space),) and (var >= 0).all()
    assert time_of(space.candidates[int(np.argmin(mean))]) <= 3.0  # one step from the bowl's minimum
    assert np.corrcoef(mean, y)[0, 1] > 0.9  # 25 of 216 points: the shape of the bowl is learnt


def test_one_fit_serves_a_quarter_of_a_batch_of_results(monkeypatch):
    # on a GPU the fit runs where candidates are timed: with 16 in flight the model is refit once
    # four more results are in, not at every proposal
    fits = record_fits(monkeypatch, _surrogates.GaussianProcessModel)
    space = grid_space((10, 10, 10))
    objective = Counting(space, bowl((7, 2, 5)))
    search = drive_batched(make_strategy("bayesian"), space, Budget(max_share=0.1, seed=3), objective, 16)
    assert len(search.results) == 100
    sizes = [len(indices) for _, indices, _ in fits]
    assert len(sizes) >= 10  # the model steered most of the search
    assert all(later - earlier >= 4 for earlier, later in itertools.pairwise(sizes))
    assert sizes[-1] >= 90  # and kept learning until near the end


def test_time_budget_stops_the_search(clock):
    space = grid_space((8, 8, 8))
    time_of = bowl((1, 2, 3))

    def objective(index: int) -> float:
        clock.advance(1.0)  # each measurement takes one (fake) second
        return time_of(space.candidates[index])

    run = bo_run(space, objective, Budget(max_time_s=10.0, seed=0))
    assert len(run.results) == 10


def test_restarts_when_nothing_valid_was_found():
    space = grid_space((10, 10, 5))
    objective = Counting(space, lambda row: math.inf)
    run = bo_run(space, objective, Budget(max_share=0.02, max_repeat=3, seed=0))
    assert len(objective.calls) == len(set(objective.calls)) == 30  # 10 per attempt, none repeated
    assert not run.found_valid and run.best() is None


def test_same_seed_same_search_other_seed_other_search():
    space = grid_space((9, 9, 9), keep=lambda p: p[0] + p[1] < 14)
    orders = []
    for seed in (3, 3, 4):
        run = bo_run(space, Counting(space, bowl((7, 4, 2))), Budget(max_share=0.05, seed=seed))
        orders.append(run.order)
    assert orders[0] == orders[1]
    assert orders[0] != orders[2]


def test_warm_start_candidates_are_measured_first():
    space = grid_space((9, 9, 9))
    warm = [100, 7, 300]
    run = bo_run(space, Counting(space, bowl((1, 1, 1))), Budget(max_share=0.03, seed=0), warm)
    assert run.order[:3] == warm


def test_warm_starts_as_many_as_a_small_budget_leave_the_model_half_of_it():
    """A kernel with many stored keys has many winners: under an explicit budget of 30, 30 warm
    starts far from the best would use it all up, and the model would never run."""
    space = grid_space((12, 12, 12))
    rng = np.random.default_rng(0)
    warm = [int(i) for i in rng.choice(len(space), 30, replace=False)]
    for seed in range(3):
        objective = Counting(space, bowl((8, 3, 5)))
        run = bo_run(space, objective, Budget(max_share=30 / len(space), seed=seed), warm)
        assert run.order[:15] == warm[:15]  # the strongest first, up to half of the budget
        assert len(run.order) == 30 and sum(i in warm for i in run.order) < 20
        time_of = objective.time_of
        assert time_of(space.candidates[run.best()]) < min(time_of(space.candidates[i]) for i in warm)


def test_model_finds_the_minimum_that_random_search_rarely_hits():
    """1728 candidates, 60 evaluations: random search hits the single best one 3.5% of the time."""
    space = grid_space((12, 12, 12))
    for seed in range(3):
        objective = Counting(space, bowl((8, 3, 5)))
        run = bo_run(space, objective, Budget(max_share=60 / 1728, seed=seed))
        assert space.candidates[run.best()] == (8, 3, 5), f"seed {seed}"


def test_failed_candidates_are_avoided_without_trouble(caplog):
    space = grid_space((10, 10, 10))
    inner = bowl((2, 8, 5))
    objective = Counting(space, lambda row: math.inf if row[0] >= 5 else inner(row))
    with caplog.at_level(logging.WARNING, logger="triton_dejavu_like"):
        run = bo_run(space, objective, Budget(max_share=0.06, seed=2))
    assert len(run.results) == 60
    assert math.isfinite(run.results[run.best()])
    failed = sum(math.isinf(v) for v in run.results.values())
    assert failed < 30  # the model learns where candidates fail (random: half of them)
    assert not caplog.records


def test_a_time_of_zero_keeps_the_model(caplog):
    """A do_bench that rounds may answer 0 ms for a fast candidate: the log-time model goes on (a
    zero's log would make the fit fail and the search go on at random)."""
    space = grid_space((10, 10, 10))
    inner = bowl((2, 8, 5))
    objective = Counting(space, lambda row: 0.0 if inner(row) <= 3 else inner(row))
    with caplog.at_level(logging.WARNING, logger="triton_dejavu_like"):
        run = bo_run(space, objective, Budget(max_share=0.06, seed=2))
    assert len(run.results) == 60 and run.results[run.best()] == 0.0
    assert not caplog.records


@pytest.mark.parametrize("batch", [1, 16])
def test_smac_failure_falls_back_to_random_proposals_with_one_warning(monkeypatch, caplog, batch):
    calls = [0]
    real_fit = _surrogates.GaussianProcessModel.fit

    def flaky_fit(self, indices, y):
        calls[0] += 1
        if calls[0] > 3:
            raise RuntimeError("model exploded")
        return real_fit(self, indices, y)

    monkeypatch.setattr(_surrogates.GaussianProcessModel, "fit", flaky_fit)
    space = grid_space((10, 10, 10))
    objective = Counting(space, bowl((3, 3, 3)))
    with (
        caplog.at_level(logging.WARNING, logger="triton_dejavu_like"),
        pytest.warns(tdl.DejavuTuningWarning, match="model exploded"),
    ):
        search = drive_batched(
            make_strategy("bayesian"), space, Budget(max_share=0.05, seed=0), objective, batch
        )
    assert len(search.results) == 50 == len(set(objective.calls))
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "model exploded" in warnings[0].getMessage()


def test_a_model_that_cannot_be_imported_falls_back_to_random_proposals(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton_dejavu_like.search._surrogates", None)  # import fails
    monkeypatch.delattr("triton_dejavu_like.search._surrogates")  # and the package attribute
    space = grid_space((10, 10, 10))
    objective = Counting(space, bowl((3, 3, 3)))
    with pytest.warns(tdl.DejavuTuningWarning, match="Bayesian optimisation stopped"):
        search = drive_batched(
            make_strategy("bayesian"), space, Budget(max_share=0.05, seed=0), objective, 16
        )
    assert len(search.results) == 50 == len(set(objective.calls))


def test_a_model_that_fails_is_reported_for_each_kernel_by_its_name(monkeypatch):
    """The fallback is said once per kernel (its keys would all fail alike), naming the kernel: two
    kernels whose models fail alike give two warnings, a second key of one kernel none."""
    monkeypatch.setitem(sys.modules, "triton_dejavu_like.search._surrogates", None)  # import fails
    monkeypatch.delattr("triton_dejavu_like.search._surrogates")  # and the package attribute
    configs = [
        triton.Config({"BLOCK": b}, num_warps=w, num_stages=st)
        for b in (16, 32, 64, 128)
        for w in (1, 2, 4, 8)
        for st in (1, 2, 3, 4, 5)
    ]  # more than an exhaustive search would measure anyway: the model is used
    bench = FakeBench()
    options = dict(key=["n"], configs=configs, use_bo=True, search_max_share=0.25, do_bench=bench)
    add = tdl.autotune(pre_hook=observe_block(bench), **options)(add_kernel)
    accumulate = tdl.autotune(pre_hook=observe_block(bench), **options)(accumulate_kernel)
    with pytest.warns(tdl.DejavuTuningWarning) as shown:
        for n in (40, 50):
            run_add(add, n)
            accumulate[grid(n)](torch.zeros(n), torch.ones(n), n)
    said = [str(w.message) for w in shown if "Bayesian optimisation stopped" in str(w.message)]
    assert sorted(text.split(":")[0] for text in said) == [
        "kernels.accumulate_kernel",
        "kernels.add_kernel",
    ], said


def test_tiny_spaces_are_measured_without_a_model(monkeypatch):
    monkeypatch.setattr(_surrogates, "ForestModel", None)  # would fail if used
    monkeypatch.setattr(_surrogates, "GaussianProcessModel", None)
    space = grid_space((2, 3))
    run = bo_run(space, Counting(space, bowl((1, 1))), Budget(seed=0))
    assert len(run.results) == 6
    space = grid_space((8, 8))  # exhaustive is cheaper than a model
    run = bo_run(space, Counting(space, bowl((1, 1))), Budget(seed=0))
    assert len(run.results) == 64


@pytest.mark.parametrize("share", [0.01, 0.02])
def test_a_budget_of_one_or_two_evaluations_does_not_import_the_model(share):
    """search_max_share of one or two evaluations can never reach a model proposal (two valid
    results come first), yet SMAC's import (seconds) started, and close() waited for it."""
    space = grid_space((10, 10))
    strategy = make_strategy("bayesian")
    run = drive(strategy, SearchRun(space, Counting(space, bowl((3, 4))), Budget(max_share=share, seed=0)))
    assert len(run.results) == round(share * 100) and strategy._model_module is None


def test_a_small_space_under_a_smaller_explicit_budget_keeps_the_model(monkeypatch):
    """use_bo with search_max_share on a space of 64 candidates or fewer measured a random draw (no
    model, SMAC not even imported), yet stored strategy "bayesian"; only a space measured in full
    anyway (an adaptive budget) is measured without one."""
    forest_fits = record_fits(monkeypatch, _surrogates.ForestModel)
    gp_fits = record_fits(monkeypatch, _surrogates.GaussianProcessModel)
    space = grid_space((8, 8))
    run = bo_run(space, Counting(space, bowl((5, 2))), Budget(max_share=0.25, seed=0))
    assert len(run.results) == 16 and (forest_fits or gp_fits)  # a model proposed after the design


def test_initial_design_size_rule():
    settings = BOSettings()
    assert settings.initial_size(dimensions=2, max_evaluations=1000) == 5
    assert settings.initial_size(dimensions=10, max_evaluations=1000) == 20
    assert settings.initial_size(dimensions=10, max_evaluations=40) == 10  # a quarter of the budget
    # the whole space allowed (adaptive budget): 5% of it, up to 32, while SMAC is imported
    assert settings.initial_size(dimensions=6, max_evaluations=648, space_size=648) == 32
    assert settings.initial_size(dimensions=6, max_evaluations=300, space_size=300) == 15
    assert settings.initial_size(dimensions=6, max_evaluations=32, space_size=648) == 8  # a 5% budget


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_initial_design_ignores_the_order_of_categorical_values(seed):
    """A categorical parameter (strings) has no order: listing its values otherwise must not change
    which candidates the spread-out initial design picks (its distance is the local penalty's)."""
    layouts = [f"layout{i}" for i in range(12)]
    rows = list(itertools.product(layouts, [1, 2, 4], [32, 64]))
    names = ["layout", "warps", "block"]
    designs = []
    for listed in (layouts, layouts[::-1], layouts[1::2] + layouts[::2]):
        space = SearchSpace.from_table(names, [listed, [1, 2, 4], [32, 64]], rows)
        assert not space.is_numeric(0) and space.is_numeric(1)
        strategy = make_strategy("bayesian")
        strategy.start(space, [], seed, limit=len(space))
        designs.append(strategy._order[: strategy.n_initial])
    assert len(designs[0]) == 6
    assert designs[0] == designs[1] == designs[2]


def test_smac_writes_nothing_outside_a_removed_temp_dir(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    tmp = tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    space = grid_space((8, 8, 8))
    for _ in range(2):  # a second run in the same place never finds (or asks about) an old one
        bo_run(space, Counting(space, bowl((5, 5, 5))), Budget(max_share=0.04, seed=0))
    assert list(cwd.iterdir()) == []
    assert list(tmp.iterdir()) == []


CHECK_GLOBALS = """
import json, logging, sys, warnings
import triton_dejavu_like.search as search

def state():
    root = logging.getLogger()
    return {
        "root": [root.level, [repr(h) for h in root.handlers]],
        "app": [logging.getLogger("app").level, logging.getLogger("app").propagate],
        "disable": logging.root.manager.disable,
        "filters": [repr(f) for f in warnings.filters],
        "tornado": [logging.getLogger("tornado").level, len(logging.getLogger("tornado").handlers)],
    }

logging.getLogger("app").setLevel(logging.ERROR)
before = state()
search.require_smac()
space = search.SearchSpace.from_table(["a", "b"], [list(range(9)), list(range(9))],
                                       [(a, b) for a in range(9) for b in range(9)])
objective = lambda i: 1.0 + sum(space.candidates[i])
run = search.drive(search.make_strategy("bayesian"),
                   search.SearchRun(space, objective, search.Budget(max_share=0.3)))
after = state()
print(json.dumps({"same": before == after, "before": before, "after": after, "n": len(run.results)}))
"""


def test_logging_and_warnings_configuration_is_left_alone(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", CHECK_GLOBALS], capture_output=True, text=True, timeout=240, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout  # SMAC printed nothing
    report = json.loads(lines[0])
    assert report["n"] == 25
    assert report["same"], (report["before"], report["after"])
    assert list(tmp_path.iterdir()) == []


def test_a_search_over_before_smacs_import_leaves_the_callers_warnings_filters_alone(monkeypatch):
    """A BO search that ended before its model was needed (a small budget) returned while SMAC's
    import still ran in its thread; the import's end then put back the warnings filters it found,
    those of the caller's ``catch_warnings`` block, which so stayed in force after the block."""
    import importlib
    import threading
    import types
    import warnings

    from triton_dejavu_like.search import _global_state

    released = threading.Event()

    def slow_import(name: str) -> types.ModuleType:
        released.wait(2)  # set once the kernel call returned: the import outlives the search
        return importlib.import_module(name)

    monkeypatch.setattr(_global_state, "importlib", types.SimpleNamespace(import_module=slow_import))
    bench = FakeBench()
    # 2 of 16 candidates: the model is imported for the search, which ends before it is needed
    tuner = tuned_add(bench, configs=block_configs(warps=(1, 2, 4, 8)), use_bo=True, search_max_share=0.1)
    filters = list(warnings.filters)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what the caller silences while tuning
        run_add(tuner)
    released.set()
    for thread in threading.enumerate():
        if thread.name.startswith("import-"):
            thread.join(10)
    assert bench.calls == 2
    assert list(warnings.filters) == filters
    with pytest.warns(UserWarning, match="still shown"):
        warnings.warn("still shown", UserWarning, stacklevel=1)


def test_missing_smac_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "smac", None)  # as if not installed
    with pytest.raises(MissingExtraError, match=r"triton_dejavu_like\[bo\]"):
        require_smac()
    with pytest.raises(MissingExtraError) as caught:
        make_strategy("bayesian")
    assert BO_EXTRA_HINT in str(caught.value)
    with pytest.raises(MissingExtraError, match="bo"):
        tdl.autotune(key=["n"], configs=block_configs(), use_bo=True)(add_kernel)


E2E_SCRIPT = """
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
import triton
import triton.language as tl
import triton_dejavu_like as tdl

measured = []
seen = {}


def remember(nargs, reset_only=False):
    if not reset_only:
        seen["config"] = (nargs["BLOCK"], nargs["SPLIT"])


def fake_bench(kernel_call, quantiles=(0.5, 0.2, 0.8)):
    kernel_call()
    block, split = seen["config"]
    measured.append([block, split])
    t = 1.0 + abs(block - 64) / 16 + abs(split - 3)
    return [t, t, t]


@tdl.autotune(
    key=["n"],
    configs=[triton.Config({"BLOCK": b, "SPLIT": s}) for b in (16, 32, 48, 64, 80, 96, 112, 128)
             for s in (1, 2, 3, 4, 5, 6)],
    use_bo=True,
    search_max_share=0.5,
    search_seed=7,
    do_bench=fake_bench,
    pre_hook=remember,
)
@triton.jit
def add(x_ptr, out_ptr, n, BLOCK: tl.constexpr, SPLIT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + SPLIT, mask=mask)


n = 40
x = torch.arange(n, dtype=torch.float32)
out = torch.empty_like(x)
add[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
assert torch.equal(out, x + add.best_config.kwargs["SPLIT"]), "wrong result"
doc = json.loads(add.cache_path().read_text())
(entry,) = doc["entries"].values()
print(json.dumps({"decision": add.last_decision, "measured": measured, "best": add.best_config.kwargs,
                  "smac_imported": "smac" in sys.modules,
                  "entry": {k: entry.get(k) for k in ("strategy", "budget", "evaluated", "space_size",
                                                       "tuning_time_s", "ruled_out", "ended_by")}}))
"""


def test_use_bo_tunes_stores_its_budget_and_restores_in_a_new_process(tmp_path):
    script = tmp_path / "kernel.py"
    script.write_text(textwrap.dedent(E2E_SCRIPT))
    env = {**os.environ, "TRITON_DEJAVU_STORAGE": str(tmp_path / "store")}

    def run() -> dict:
        result = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])

    first = run()
    # half of 48 candidates: the model proposes after the initial design (a space measured in full
    # would go without it)
    assert first["decision"] == "tuned" and first["smac_imported"]
    assert first["best"] == {"BLOCK": 64, "SPLIT": 3}
    entry = first["entry"]
    assert entry["strategy"] == "bayesian"
    assert entry["budget"]["max_share"] == 0.5 and entry["budget"]["seed"] == 7
    assert entry["evaluated"] == 24 and entry["space_size"] == 48  # half of the configs
    assert entry["ended_by"] == "evaluation limit"
    # blocks that are not powers of two fail to compile: evaluated, ruled out, never benchmarked
    distinct = {tuple(c) for c in first["measured"]}
    assert all(block in (16, 32, 64, 128) for block, _ in distinct)
    assert len(distinct) + len(entry["ruled_out"]) == 24
    assert entry["tuning_time_s"] > 0
    second = run()
    assert second["decision"] == "restored"
    assert second["measured"] == []
    assert second["best"] == first["best"]
    assert not second["smac_imported"]  # a process that only restores never pays SMAC's import
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernel.py", "store"]


# --- warm start from the same kernel stored for other GPUs ----------------------------------------


def store_as_other_gpu(tuner: tdl.Autotuner, gpu: str) -> Path:
    """Move the tuner's cache file to where a machine with another GPU would have written it."""
    from triton_dejavu_like.store.layout import relative_dir as identity_relative_dir

    own = tuner.cache_path()
    doc = json.loads(own.read_text())
    doc["identity"]["gpu"] = gpu
    root = Path(os.environ["TRITON_DEJAVU_STORAGE"])
    foreign = root / identity_relative_dir(doc["identity"]) / own.name
    foreign.parent.mkdir(parents=True)
    foreign.write_text(json.dumps(doc))
    own.unlink()
    return foreign


def first_measured_block(with_foreign_store: bool) -> int:
    if with_foreign_store:
        elsewhere = FakeBench({16: 1.0, 32: 5.0, 64: 5.0, 128: 5.0})  # BLOCK=16 wins on the other GPU
        run_add(tuned_add(elsewhere, use_random_search=True, search_seed=0))
        store_as_other_gpu(tuned_add(elsewhere, use_random_search=True, search_seed=0), "NVIDIA_H100")
    here = FakeBench()
    run_add(tuned_add(here, use_random_search=True, search_seed=2, search_max_share=0.5), n=300)
    return here.blocks[0]


def test_a_new_gpu_measures_the_winner_stored_for_another_gpu_first(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", str(tmp_path / "without"))
    assert first_measured_block(with_foreign_store=False) != 16  # this seed would not start there
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", str(tmp_path / "with"))
    assert first_measured_block(with_foreign_store=True) == 16


def test_the_config_that_won_most_stored_keys_is_measured_first(tmp_path):
    """A new key's search starts from the winner of most stored keys (under BO's cap on warm starts
    only the first few are measured), not from the winner of the first key id."""
    bench = FakeBench()
    tuner = tuned_add(bench, use_random_search=True, search_seed=1, search_max_share=0.5)
    winners = {serving_helpers.add_key(n): block for n, block in ((10, 32), (20, 64), (30, 64))}
    serving_helpers.seed(tuner, Path(os.environ["TRITON_DEJAVU_STORAGE"]), winners)
    run_add(tuner, n=300)
    assert bench.blocks[:2] == [64, 32]


def test_foreign_winners_come_from_sibling_files_read_as_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from triton_dejavu_like.codec import config_id
    from triton_dejavu_like.store.layout import relative_dir as identity_relative_dir
    from triton_dejavu_like.store.warm_start import foreign_winners, sibling_cache_files

    root = Path(os.environ["TRITON_DEJAVU_STORAGE"])
    bench = FakeBench({16: 1.0, 32: 2.0, 64: 3.0, 128: 4.0})
    tuner = tuned_add(bench, use_random_search=True)
    for n in (10, 20, 30):
        run_add(tuner, n=n)
    identity = json.loads(tuner.cache_path().read_text())["identity"]
    store_as_other_gpu(tuner, "gpu_a")
    other = dict(identity, gpu="gpu_b", tag="nightly")
    garbage = root / identity_relative_dir(other) / "cache.json"
    garbage.parent.mkdir(parents=True)
    garbage.write_text("__import__('os').system('touch pwned')")  # data, never executed
    unrelated = dict(identity, gpu="gpu_c", code_version="0" * 16)
    (root / identity_relative_dir(unrelated)).mkdir(parents=True)
    (root / identity_relative_dir(unrelated) / "cache.json").write_text("{}")
    own = root / identity_relative_dir(identity) / "cache.json"
    found = sibling_cache_files(root, identity, own)
    assert {p.parent for p in found} == {
        root / identity_relative_dir(dict(identity, gpu="gpu_a")),
        garbage.parent,
    }
    winners = foreign_winners([root], identity, own)
    assert winners == [config_id(tdl.Config({"BLOCK": 16}, num_warps=1))]
    assert not Path("pwned").exists()


def test_a_sibling_cache_file_that_is_a_symlink_loop_is_passed_over(tmp_path, monkeypatch):
    """A botched ``ln -sf`` left another tag's cache.json pointing at itself: a search that looks for
    the winners of other platforms and tags still tunes, from the other files."""
    from triton_dejavu_like.store.layout import relative_dir as identity_relative_dir

    root = Path(os.environ["TRITON_DEJAVU_STORAGE"])
    bench = FakeBench({16: 1.0, 32: 2.0, 64: 3.0, 128: 4.0})
    tuner = tuned_add(bench, use_random_search=True)
    run_add(tuner, n=10)
    identity = json.loads(tuner.cache_path().read_text())["identity"]
    loop = root / identity_relative_dir(dict(identity, tag="other")) / "cache.json"
    loop.parent.mkdir(parents=True)
    loop.symlink_to("cache.json")
    fresh = tuned_add(FakeBench(), use_random_search=True)
    run_add(fresh, n=20)
    assert fresh.last_decision == "tuned"


# --- on a GPU (run there with: python -m pytest -m gpu tests/test_search_bo.py) -------------------

GPU_SCRIPT = """
import json, sys, time
import torch
import triton
import triton.language as tl
import triton_dejavu_like as tdl

STRATEGY = sys.argv[1]
configs = [
    triton.Config({"BM": m, "BN": n, "BK": k}, num_warps=w, num_stages=s)
    for m in (32, 64, 128) for n in (32, 64, 128) for k in (32, 64) for w in (4, 8) for s in (2, 3, 4)
]


@tdl.autotune(key=["M", "N", "K"], configs=configs, use_bo=STRATEGY == "bayesian",
              search_max_share=0.25 if STRATEGY == "bayesian" else None, search_seed=0)
@triton.jit
def matmul(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        x = tl.load(a + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    inside = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=inside)


def main():  # under the main guard: compile worker processes may re-import this script
    from triton_dejavu_like.measure.compile_pool import CompilePool

    M = N = K = 2048
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))
    launch = lambda: matmul[grid](a, b, c, M, N, K)
    started = time.perf_counter()
    launch()
    tuning_s = time.perf_counter() - started
    torch.testing.assert_close(c, (a.float() @ b.float()).half(), atol=1e-1, rtol=1e-2)
    best = triton.testing.do_bench(launch, warmup=25, rep=200)
    entry = next(iter(json.loads(matmul.cache_path().read_text())["entries"].values()))
    print(json.dumps({"decision": matmul.last_decision, "best_ms": best, "tuning_s": tuning_s,
                      "compile_processes": CompilePool._instance is not None,
                      "evaluated": entry["evaluated"], "strategy": entry["strategy"],
                      "space": entry["space_size"]}))


if __name__ == "__main__":
    main()
"""


@pytest.mark.gpu
def test_bo_on_a_gpu_tunes_a_quarter_of_a_matmul_space_and_restores(tmp_path):
    script = tmp_path / "matmul.py"
    script.write_text(GPU_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEJAVU_STORAGE"] = str(tmp_path / "store")

    def run(strategy: str, processes: str = "auto", start: str = "fork") -> dict:
        out = subprocess.run(
            [sys.executable, str(script), strategy],
            capture_output=True,
            text=True,
            env={**env, "TRITON_DEJAVU_COMPILE_PROCESSES": processes, "TRITON_DEJAVU_COMPILE_START": start},
            timeout=900,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    bo = run("bayesian")  # the streamed pipeline, compile workers forked from the tuning process
    assert bo["decision"] == "tuned" and bo["strategy"] == "bayesian" and bo["compile_processes"]
    assert bo["space"] == 108 and bo["evaluated"] == 27
    again = run("bayesian")
    assert again["decision"] == "restored"
    full = run("exhaustive", processes="on", start="forkserver")  # workers that start CUDA themselves
    assert full["evaluated"] == 108 and full["compile_processes"]
    print(
        f"\nBO (27 of 108 configs): {bo['best_ms']:.4f} ms after {bo['tuning_s']:.1f} s; exhaustive: "
        f"{full['best_ms']:.4f} ms after {full['tuning_s']:.1f} s; BO/exhaustive time of the pick: "
        f"{bo['best_ms'] / full['best_ms']:.3f}"
    )


def test_third_party_warnings_are_logged_but_ours_raised_meanwhile_still_show(caplog):
    """A warning that guarded code raises goes to the debug log (naming where it was raised); one of
    this package's still reaches the user."""
    import warnings

    from triton_dejavu_like import DejavuTuningWarning
    from triton_dejavu_like.search._global_state import quiet_third_party

    caplog.set_level(logging.DEBUG, logger="triton_dejavu_like")
    with pytest.warns(DejavuTuningWarning, match="ours") as shown, quiet_third_party():
        warnings.warn("theirs", DeprecationWarning, stacklevel=1)
        warnings.warn("ours", DejavuTuningWarning, stacklevel=1)
    assert [str(w.message) for w in shown] == ["ours"]
    assert f"suppressed a DeprecationWarning raised at {__file__}" in caplog.text


def test_overlapping_quiet_blocks_of_two_threads_restore_the_filters_in_force_before():
    """Two BO runs in two threads each entered and left their own catch_warnings: one's exit put back
    the other's recording hook and its "always" filter, so the process showed no warning again."""
    import threading
    import warnings

    from triton_dejavu_like.search._global_state import quiet_third_party

    filters, show = list(warnings.filters), warnings.showwarning
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with quiet_third_party():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with quiet_third_party():
            second_in.set()
            first_out.wait(10)  # the first block ends while this one is still inside

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert list(warnings.filters) == filters and warnings.showwarning is show
    with pytest.warns(UserWarning, match="still shown"):
        warnings.warn("still shown", UserWarning, stacklevel=1)

"""The pure parts of benchmarks/kernel_tuner_replay.py (Kernel Tuner itself is not installed here)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_tuner_replay.py"
if not BENCHMARK.is_file():  # the GPU test image copies tests/ and examples/, not benchmarks/
    pytest.skip(f"no {BENCHMARK} in this tree", allow_module_level=True)


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


kt = _load("kernel_tuner_replay", BENCHMARK)


def _write_space(folder: Path, times: dict[tuple[int, int], float | str]) -> Path:
    doc = {
        "device_name": "GPU",
        "kernel_name": "k",
        "problem_size": {"M": 4},
        "tune_params_keys": ["a", "b"],
        "tune_params": {"a": [1, 2], "b": [1, 2, 3]},
        "cache": {f"{a},{b}": {"a": a, "b": b, "time": t} for (a, b), t in times.items()},
        "objective": "time",
    }
    path = folder / "tiny_GPU.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump(doc, handle)
    return path


@pytest.fixture
def tiny(tmp_path):
    times = {(1, 1): 4.0, (1, 2): 2.0, (1, 3): "CompilationFailedConfig", (2, 1): 1.0, (2, 2): 8.0}
    return kt.read_space(_write_space(tmp_path, times))  # (2, 3): excluded by a restriction


def test_a_space_keeps_failed_configs_as_candidates_that_are_never_found(tiny):
    assert tiny.name == "tiny_GPU"
    assert len(tiny.mean_ms) == 5 and math.isinf(tiny.mean_ms["1,3"])
    assert tiny.best_ms == 1.0
    assert kt.config_key([2, 1]) == "2,1" and "2,3" not in tiny.mean_ms


def test_the_budget_is_the_one_our_strategies_get():
    budget = pytest.importorskip("triton_dejavu_like.search").Budget
    for n in (5, 605, 648, 4092, 17956):
        space = kt.Space("s", {}, {str(i): 1.0 for i in range(n)})
        for share in (0.02, 0.05, 0.5, 1.0):
            assert space.budget(share) == budget(max_share=share).max_evaluations(n)


def test_fraction_counts_the_first_k_distinct_configs_and_failures_as_not_found(tiny):
    assert tiny.budget(0.5) == 3
    assert tiny.fraction(["1,3", "1,1", "1,1", "1,2", "2,1"], 0.5) == pytest.approx(1.0 / 2.0)  # repeat free
    assert tiny.fraction(["1,3"], 0.5) == 0.0  # a run that stopped early on a failed config
    assert tiny.fraction(["2,2", "2,1"], 0.2) == pytest.approx(1.0 / 8.0)


def test_the_simulation_cachefile_has_what_simulation_mode_checks(tiny, tmp_path):
    path = kt.write_simulation_cache(tiny, tmp_path)
    text = path.read_text()
    assert path.suffix == ".json" and text.endswith("}}}")  # read as a closed cachefile
    doc = json.loads(text)
    assert list(doc)[-1] == "cache" and doc["problem_size"] == list(kt.PROBLEM_SIZE)
    assert doc["cache"] == tiny.doc["cache"] and doc["tune_params_keys"] == ["a", "b"]
    assert doc["kernel_name"] == "k" and doc["device_name"] == "GPU"


def test_strategy_options_parse():
    assert kt.strategy_options("bayes_opt") == ("bayes_opt", {})
    assert kt.strategy_options("genetic_algorithm:maxiter=1000,method='uniform'") == (
        "genetic_algorithm",
        {"maxiter": 1000, "method": "uniform"},
    )


def test_the_held_out_split_is_search_replays():
    pytest.importorskip("smac", reason="search_replay.py needs the bo extra")
    replay = _load("search_replay", BENCHMARK.with_name("search_replay.py"))
    assert kt.HELD_IN == replay.HELD_IN
    assert kt.BUDGETS == replay.BUDGETS


def test_a_table_puts_saved_runs_of_both_sides_side_by_side(tiny, tmp_path):
    job = kt.Job("tiny_GPU", "unused", "genetic_algorithm", 0, 0.02)
    results = [
        kt.Result(job, 1, 1, 0.5, 0.0),
        kt.Result(kt.Job("tiny_GPU", "unused", "genetic_algorithm", 0, 0.05), 1, 1, 1.0, 0.0),
    ]
    kt.save_results(results, {"kernel_tuner": "x"}, tmp_path / "kt.json")
    ours = {
        "run": {},
        "outcomes": [
            {
                "job": {"path": "/any/tiny_GPU.json.gz", "strategy": "bayesian", "batch": b, "seed": s},
                "fraction": {"0.02": 0.25 * (s + 1), "0.05": 1.0},
            }
            for s in (0, 1)
            for b in (1, 16)
        ],
    }
    (tmp_path / "ours.json").write_text(json.dumps(ours))
    text = kt.render([tmp_path / "kt.json"], tmp_path / "ours.json", [tmp_path])
    row = next(line for line in text.splitlines() if line.startswith("| tiny_GPU"))
    header = next(line for line in text.splitlines() if line.startswith("| space"))
    assert header == "| space | N | KT genetic_algorithm | ours bayesian b1 | ours bayesian b16 |"
    assert row == "| tiny_GPU | 5 | 0.500 / 1.000 (1) | 0.375 / 1.000 (2) | 0.375 / 1.000 (2) |"
    assert "| KT genetic_algorithm | 1.000 | 1.000 |" in text
    assert "| **mean of 1 spaces** |  | 0.500 ± nan / 1.000 ± nan | 0.375 ± 0.125 / 1.000 ± 0.000 |" in text


def test_kernel_tuner_replays_a_tiny_space(tiny, tmp_path):
    pytest.importorskip("kernel_tuner")
    path = kt.write_simulation_cache(tiny, tmp_path)
    order = kt.evaluation_order(kt.Job("tiny_GPU", str(path), "random_sample", 0, 1.0), tiny)
    assert sorted(set(order)) == sorted(tiny.mean_ms)
    job = kt.Job("tiny_GPU", str(path), "random_sample", 0, 1.0, failed_excluded=True)
    assert sorted(set(kt.evaluation_order(job, tiny))) == ["1,1", "1,2", "2,1", "2,2"]

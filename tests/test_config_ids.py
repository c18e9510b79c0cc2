"""What a miss derives from its candidate list (config ids, the set's hash, the search grid) is
computed once per list: later keys over the same configs reuse it, and a config changed in place
(by an ``early_config_prune``) is seen."""

from __future__ import annotations

import pytest
import triton
from kernels import FakeBench, block_configs, run_add, tuned_add
from storage_helpers import stored_entries

import triton_dejavu_like as tdl
import triton_dejavu_like.tuner.config_ids as config_ids_module
from triton_dejavu_like.codec import config_id
from triton_dejavu_like.search import SearchSpace
from triton_dejavu_like.store.identity import stable_hash


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts config ids computed by the tuner and search grids built."""
    counts = {"ids": 0, "grids": 0}
    real_id, real_grid = config_ids_module.config_id, SearchSpace.from_configs.__func__

    def counted_id(config: triton.Config) -> str:
        counts["ids"] += 1
        return real_id(config)

    def counted_grid(cls: type[SearchSpace], configs: list[triton.Config]) -> SearchSpace:
        counts["grids"] += 1
        return real_grid(cls, configs)

    monkeypatch.setattr(config_ids_module, "config_id", counted_id)
    monkeypatch.setattr(SearchSpace, "from_configs", classmethod(counted_grid))
    return counts


def test_a_new_key_over_the_same_space_computes_no_config_id_and_no_grid_again(monkeypatch):
    counts = _counting(monkeypatch)
    space = tdl.ConfigSpace({"BLOCK": [16, 32, 64, 128]}, num_warps=[1, 2, 4, 8], num_stages=[1, 2, 3, 4, 5])
    bench = FakeBench()
    tuner = tuned_add(bench, config_space=space, use_random_search=True, search_max_share=0.02)
    run_add(tuner, 100)
    assert counts["ids"] >= 80 and counts["grids"] == 1  # the first key: every point once
    first = dict(counts)
    for n in (99, 98):
        run_add(tuner, n)
        assert tuner.last_decision == "tuned"
    assert counts == first
    entries = stored_entries(tuner.cache_path())
    assert len(entries) == 3
    expected = stable_hash(sorted(config_id(c) for c in tuner.configs))
    assert {entry["candidates"] for entry in entries.values()} == {expected}


def test_a_prune_that_changes_configs_in_place_per_key_stores_and_restores_what_it_tuned():
    """The configs are the same objects at every key; their fields are not."""

    def warps_by_size(configs, nargs, **kwargs):
        for config in configs:
            config.num_warps = 2 if nargs["n"] > 99 else 4
        return configs

    prune = {"early_config_prune": warps_by_size}
    tuner = tuned_add(FakeBench(), configs=block_configs(), prune_configs_by=prune)
    path = tuner.cache_path()  # of the configs as listed (num_warps=1): the prune runs at each miss
    run_add(tuner, 100)
    run_add(tuner, 99)
    entries = list(stored_entries(path).values())
    hashes = {
        warps: stable_hash(
            sorted(config_id(triton.Config({"BLOCK": b}, num_warps=warps)) for b in (16, 32, 64, 128))
        )
        for warps in (2, 4)
    }
    assert sorted(entry["candidates"] for entry in entries) == sorted(hashes.values())
    assert sorted(entry["config"]["num_warps"] for entry in entries) == [2, 4]
    for n in (100, 99):  # another process's tuner: both restored, none measured
        bench = FakeBench()
        later = tuned_add(bench, configs=block_configs(), prune_configs_by=prune)
        run_add(later, n)
        assert later.last_decision == "restored" and bench.calls == 0
        assert later.best_config.num_warps == (2 if n > 99 else 4)


def test_a_config_changed_in_place_after_a_key_is_tuned_with_its_new_fields():
    configs = block_configs()
    bench = FakeBench()
    tuner = tuned_add(bench, configs=configs)
    path = tuner.cache_path()  # the file opened at the first miss, which the second key is stored in
    run_add(tuner, 100)
    configs[0].num_warps = 2  # the list's objects, changed between two keys
    run_add(tuner, 99)
    assert tuner.last_decision == "tuned"
    entries = stored_entries(path)
    changed = stable_hash(sorted(config_id(c) for c in configs))
    assert changed in {entry["candidates"] for entry in entries.values()}

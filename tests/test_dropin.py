"""The decorator's argument binding and the triton-dejavu extras, beyond what tests/compat checks."""

from __future__ import annotations

import pytest
import triton
from kernels import FakeBench, add_kernel, block_configs, run_add

import triton_dejavu_like as tdl
from triton_dejavu_like._compat import INTERPRETER_OPTIONS
from triton_dejavu_like.measure.launch import launch_kwargs


def test_too_many_positionals_name_the_order():
    configs = block_configs()
    with pytest.raises(TypeError, match=r"at most 12 positional arguments in triton.autotune's order"):
        tdl.autotune(configs, ["n"], *([None] * 11))
    with pytest.raises(TypeError, match=r"at most 23 positional arguments in triton-dejavu's order"):
        tdl.autotune(["n"], configs, *([None] * 22))


def test_a_value_given_twice_is_a_type_error():
    with pytest.raises(TypeError, match="got two values for 'key'"):
        tdl.autotune(block_configs(), ["n"], key=["n"])


def test_an_unknown_keyword_without_a_close_match():
    with pytest.raises(TypeError) as info:
        tdl.autotune(key=["n"], zzzzzz=1)
    assert str(info.value) == (
        "autotune() got an unexpected keyword argument 'zzzzzz' (docs/compat.md lists every argument)"
    )


def test_key_is_required():
    with pytest.raises(TypeError, match="missing required argument: 'key'"):
        tdl.autotune(configs=block_configs())


def test_an_empty_config_list_first_is_upstreams_order():
    tuner = tdl.autotune([], ["n"])(add_kernel)
    assert tuner.keys == ["n"] and len(tuner.configs) == 1  # upstream's single default config


def test_config_space_parameters_are_checked_at_decoration():
    with pytest.raises(ValueError, match=r"sets 'BLOK'"):
        tdl.autotune(key=["n"], config_space=tdl.ConfigSpace({"BLOK": [16, 32]}))(add_kernel)


def test_informed_fallback_that_raises_falls_back_to_the_heuristic(monkeypatch):
    bench = FakeBench()
    run_add(tdl.autotune(key=["n"], configs=block_configs(), do_bench=bench)(add_kernel))
    monkeypatch.setenv("TRITON_DEJAVU_FORCE_FALLBACK", "1")

    def informed(key, cache):
        raise RuntimeError("no idea")

    tuner = tdl.autotune(
        key=["n"],
        configs=block_configs(),
        do_bench=bench,
        informed_fallback=informed,
        fallback_heuristic=lambda key: triton.Config({"BLOCK": 128}, num_warps=1),
    )(add_kernel)
    with pytest.warns(tdl.DejavuTuningWarning, match=r"informed_fallback .*informed raised RuntimeError"):
        run_add(tuner, 60)
    assert tuner.best_config.kwargs == {"BLOCK": 128}


def test_prepare_informed_fallback_returning_none_is_an_error(monkeypatch):
    bench = FakeBench()
    run_add(tdl.autotune(key=["n"], configs=block_configs(), do_bench=bench)(add_kernel))
    monkeypatch.setenv("TRITON_DEJAVU_FORCE_FALLBACK", "1")
    tuner = tdl.autotune(
        key=["n"],
        configs=block_configs(),
        do_bench=bench,
        informed_fallback=lambda key, cache: pytest.fail("not reached"),
        prepare_informed_fallback=lambda cache: None,
    )(add_kernel)
    with pytest.raises(tdl.AutotuningError, match="prepare_informed_fallback returned None"):
        run_add(tuner, 60)


def test_metadata_is_recorded_on_every_hit():
    bench = FakeBench()
    tuner = tdl.autotune(key=["n"], configs=block_configs(), do_bench=bench, metadata_key="k")(add_kernel)
    run_add(tuner)
    expected = tdl.global_metadata_store["k"]
    tdl.global_metadata_store["k"] = "another kernel"
    run_add(tuner)  # an in-memory hit through the fast launcher
    assert tdl.global_metadata_store["k"] == expected
    del tdl.global_metadata_store["k"]


def test_jitcache_checks_assume_const_and_keeps_the_kernel():
    with pytest.raises(ValueError, match=r"assume_const names 'nope'"):
        tdl.jitcache(["BLOCK"], ["n"], assume_const=["nope"])(add_kernel)
    assert tdl.jitcache(["BLOCK"], ["n"], assume_const=["n"])(add_kernel) is add_kernel
    tdl.global_cache_lock.lock()
    assert tdl.global_cache_lock.is_locked
    tdl.global_cache_lock.unlock()
    assert not tdl.global_cache_lock.is_locked


def test_an_interpreted_launch_passes_only_the_options_the_interpreter_takes():
    config = triton.Config({"BLOCK": 64}, num_warps=8)
    kwargs = launch_kwargs(config, interpreted=True)
    assert kwargs["BLOCK"] == 64 and kwargs["num_warps"] == 8
    assert set(kwargs) - {"BLOCK"} <= INTERPRETER_OPTIONS


def test_quantiles_given_as_the_default_keep_the_identity():
    a = tdl.autotune(key=["n"], configs=block_configs())(add_kernel)
    b = tdl.autotune(key=["n"], configs=block_configs(), quantiles=[0.5, 0.2, 0.8])(add_kernel)
    assert a.cache_path() == b.cache_path()

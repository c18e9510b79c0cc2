"""The decorator as a user meets it: tuning, keys, hooks, pruning, passthrough, miss policies."""

from __future__ import annotations

import gc
import json
import math
import pickle
import weakref
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from kernels import (
    FakeBench,
    accumulate_kernel,
    add_kernel,
    block_configs,
    grid,
    noop_kernel,
    observe_block,
    refused,
    run_add,
    scale_kernel,
    tuned_add,
)
from triton.compiler.errors import CompilationError
from triton.runtime.autotuner import Autotuner as UpstreamAutotuner
from triton.runtime.errors import OutOfResources
from triton_release import needs_upstream_run, since_triton

import triton_dejavu_like as tdl
from triton_dejavu_like import DejavuConfigWarning, _compat
from triton_dejavu_like.measure import one_line_reason
from triton_dejavu_like.measure.bench import Benchmarker
from triton_dejavu_like.tuner.trial import Trial


def test_is_an_upstream_autotuner_and_picks_the_fastest():
    bench = FakeBench({16: 5.0, 32: 2.0, 64: 3.0, 128: 4.0})
    tuner = tuned_add(bench)
    assert isinstance(tuner, UpstreamAutotuner)
    run_add(tuner)
    assert tuner.best_config.kwargs == {"BLOCK": 32}
    assert tuner.last_decision == "tuned"
    assert bench.calls == 4
    assert sorted(c.kwargs["BLOCK"] for c in tuner.configs_timings) == [16, 32, 64, 128]
    assert tuner.configs_timings[tuner.best_config][0] == 2.0
    assert tuner.bench_time > 0
    assert list(tuner.cache.values()) == [tuner.best_config]


class TwoStageBench(Benchmarker):
    """A two-stage timer, as on a GPU: ``screen`` times every candidate, then the ``finalists`` best
    are timed again carefully at ``careful[BLOCK]`` (which may disagree with the screen)."""

    finalists = 2

    def __init__(self, screen: FakeBench, careful: dict[int, float]) -> None:
        self.screen, self.careful = screen, careful
        self.refined: list[int] = []

    def __call__(self, kernel_call, quantiles=(0.5, 0.2, 0.8)):
        return self.screen(kernel_call, quantiles)

    def refine(self, kernel_calls):
        times = []
        for call in kernel_calls:
            self.screen(call)  # runs the launch, which tells the block being timed
            self.refined.append(self.screen.blocks[-1])
            times.append([self.careful[self.refined[-1]]] * 3)
        return times


def test_the_careful_stage_decides_between_the_best_screened_candidates(monkeypatch):
    import triton_dejavu_like.measure.recipe as recipe

    screen = FakeBench({16: 1.0, 32: 2.0, 64: 3.0, 128: 4.0})
    two_stage = TwoStageBench(screen, careful={16: 5.0, 32: 1.5})
    monkeypatch.setattr(recipe, "make_benchmarker", lambda **timing: two_stage)
    tuner = tuned_add(screen, do_bench=None)  # the tuner's own timer, not a user's do_bench
    run_add(tuner)
    assert sorted(two_stage.refined) == [16, 32]  # the two best of the screen, timed again
    assert tuner.best_config.kwargs == {"BLOCK": 32}
    (entry,) = json.loads(tuner.cache_path().read_text())["entries"].values()
    assert entry["timings_ms"][0] == 1.5 and entry["refined"] == 2


def test_in_memory_hit_does_not_benchmark_again():
    bench = FakeBench()
    tuner = tuned_add(bench)
    run_add(tuner)
    calls = bench.calls
    for _ in range(3):
        run_add(tuner)
    assert bench.calls == calls


def test_new_key_value_tunes_again_and_each_key_is_stored():
    bench = FakeBench()
    tuner = tuned_add(bench)
    run_add(tuner, n=100)
    run_add(tuner, n=200)
    assert bench.calls == 8
    doc = json.loads(tuner.cache_path().read_text())
    assert {tuple(e["key"]) for e in doc["entries"].values()} == {
        (100, "torch.float32", "torch.float32", "torch.float32"),
        (200, "torch.float32", "torch.float32", "torch.float32"),
    }


def _record_keys(tuner_factory, calls):
    keys = []
    for args, kwargs in calls:
        tuner = tuner_factory()
        tuner[lambda meta: (1,)](*args, **kwargs)
        keys.append(next(iter(tuner.cache)))
    return keys


@needs_upstream_run
@pytest.mark.parametrize("ignore_dtypes", [False, True])
def test_tuning_key_matches_upstream(ignore_dtypes):
    """Key argument values (in key order, skipped when left at their default), then str(dtype) of
    every argument that has a dtype, positional or keyword."""
    configs = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})]
    a16 = torch.zeros(4, dtype=torch.float16)
    b32 = torch.zeros(4, dtype=torch.int32)
    calls = [
        ((a16, b32, 8, 3, 1.5), {}),
        ((a16,), {"b_ptr": b32, "n": 9, "m": 2, "alpha": 0.5}),
        ((a16, b32), {"m": 7, "n": 5, "alpha": 1.0, "flag": 1}),
    ]
    fake = FakeBench()
    key = ["m", "n", "flag"]

    def ours():
        return tdl.autotune(key=key, configs=configs, do_bench=fake, ignore_dtypes=ignore_dtypes)(noop_kernel)

    def upstream():
        return triton.autotune(configs=configs, key=key, do_bench=fake)(noop_kernel)

    got = _record_keys(ours, calls)
    expected = _record_keys(upstream, calls)
    assert expected[0] == (3, 8, "torch.float16", "torch.int32")
    assert expected[2] == (7, 5, 1, "torch.float16", "torch.int32")
    if ignore_dtypes:
        expected = [tuple(v for v in k if not str(v).startswith("torch.")) for k in expected]
    assert got == expected


def test_upstream_positional_order_is_accepted():
    bench = FakeBench({16: 1.0, 32: 9.0, 64: 9.0, 128: 9.0})
    tuner = tdl.autotune(block_configs(), ["n"], do_bench=bench, pre_hook=observe_block(bench))(add_kernel)
    run_add(tuner)
    assert tuner.keys == ["n"]
    assert tuner.best_config.kwargs == {"BLOCK": 16}


def test_bad_key_names_and_argument_combinations_fail_at_decoration():
    with pytest.raises(ValueError, match="not kernel arguments"):
        tdl.autotune(key=["size"], configs=block_configs())(add_kernel)
    with pytest.raises(ValueError, match="not kernel arguments"):
        tdl.autotune(key=["n"], configs=block_configs(), reset_to_zero=["acc"])(add_kernel)
    with pytest.raises(ValueError, match="either configs or config_space"):
        tdl.autotune(key=["n"], configs=block_configs(), config_space=tdl.ConfigSpace({"BLOCK": [16]}))(
            add_kernel
        )
    with pytest.raises(ValueError, match="exclude each other"):
        tdl.autotune(key=["n"], configs=block_configs(), use_bo=True, use_random_search=True)(add_kernel)
    with pytest.raises(ValueError, match="search_max_share"):
        tdl.autotune(key=["n"], configs=block_configs(), use_random_search=True, search_max_share=0)(
            add_kernel
        )
    # True is no share nor time (it read as 1.0: the whole space, or a 1 s budget), nor is a string
    slips = [("search_max_share", True), ("search_max_search_t", True), ("search_max_share", "0.5")]
    for name, value in slips:
        with pytest.raises(TypeError, match=f"{name} must be a number"):
            tdl.autotune(key=["n"], configs=block_configs(), use_random_search=True, **{name: value})(
                add_kernel
            )


def test_configs_from_a_generator_are_all_candidates():
    """A generator of configs was read by the decoration's checks, leaving the kernel none: it
    launched upstream's single default config without tuning."""
    tuner = tuned_add(FakeBench(), configs=(c for c in block_configs()))
    run_add(tuner)
    assert [c.kwargs for c in tuner.configs] == [c.kwargs for c in block_configs()]
    assert tuner.best_config.kwargs == {"BLOCK": 128}


def test_configs_or_key_that_is_no_list_is_a_type_error_saying_what_to_write():
    with pytest.raises(
        TypeError, match=r"configs must be a list of triton.Config, got a Config; write configs=\[config\]"
    ):
        tdl.autotune(configs=block_configs()[0], key=["n"])(add_kernel)
    with pytest.raises(TypeError, match="key must be a list of argument names, got 3"):
        tdl.autotune(configs=block_configs(), key=3)(add_kernel)


@pytest.mark.parametrize(
    ("options", "error", "expected"),
    [
        ({"prune_configs_by": lambda c, a, **k: c}, TypeError, "prune_configs_by must be a dict"),
        (
            {"prune_configs_by": {"perf_model": 3}},
            TypeError,
            r"prune_configs_by\['perf_model'\] must be callable",
        ),
        ({"pre_hook": "reset"}, TypeError, "pre_hook must be callable"),
        ({"post_hook": 3}, TypeError, "post_hook must be callable"),
    ],
)
def test_hooks_and_pruning_of_the_wrong_kind_fail_at_decoration(options, error, expected):
    with pytest.raises(error, match=expected):
        tdl.autotune(configs=block_configs(), key=["n"], **options)(add_kernel)


def test_an_unknown_prune_configs_by_key_warns_at_decoration_and_is_ignored_as_upstream_does():
    """A typo prunes nothing: upstream ignores the key silently; it is accepted here too (code written
    for upstream keeps working), with a warning naming the closest key."""
    with pytest.warns(
        DejavuConfigWarning, match=r"unknown key 'early_prune' \(did you mean 'early_config_prune'\?\)"
    ):
        tuner = tdl.autotune(configs=block_configs(), key=["n"], prune_configs_by={"early_prune": print})(
            add_kernel
        )
    assert tuner.early_config_prune is None


def test_decorating_a_plain_function_says_to_put_triton_jit_under_autotune():
    def plain(x_ptr, n):
        pass

    with pytest.raises(TypeError, match=r"decorates a @triton.jit kernel.*put @triton.jit under @autotune"):
        tdl.autotune(configs=block_configs(), key=["n"])(plain)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("use_bo", "no", "use_bo must be True or False"),  # a string is always true: BO turned on
        ("ignore_dtypes", "False", "ignore_dtypes must be True or False"),
        ("warmup", "25", "warmup must be a number"),
        ("isolation_timeout_s", "5", "isolation_timeout_s must be a number"),
        ("check_rtol", "1e-3", "check_rtol must be a number"),
        ("do_bench", 3, "do_bench must be callable"),
        ("timing", {"finalists": 2}, "timing must be a TimingPolicy"),
        ("tag", 3, "tag must be a string"),
        ("custom_data_storage", 3, "custom_data_storage must be a path"),
    ],
)
def test_an_argument_of_the_wrong_type_is_a_type_error_naming_it_at_decoration(name, value, expected):
    with pytest.raises(TypeError, match=expected):
        tdl.autotune(key=["n"], configs=block_configs(), **{name: value})


@pytest.mark.parametrize("answer", [None, "fast", [1.0, "slow"]])
def test_a_do_bench_answering_no_time_stops_tuning_saying_what_it_must_return(answer):
    """None failed as "'NoneType' object is not iterable", a string as "could not convert string to
    float: 'f'" (its characters were read as times)."""

    def do_bench(kernel_call, quantiles):
        kernel_call()
        return answer

    tuner = tdl.autotune(configs=block_configs(), key=["n"], do_bench=do_bench)(add_kernel)
    with pytest.raises(tdl.AutotuningError, match="must return a time in ms or a list of times") as info:
        run_add(tuner)
    assert info.value.stopped_by == "do_bench"
    assert isinstance(info.value, TypeError)


def test_a_key_naming_a_tuned_meta_parameter_warns_at_decoration():
    """BLOCK, set by every config, is never passed at launch: it was silently left out of the key,
    and every size shared one tuning."""

    @triton.jit
    def keyed_by_block(x_ptr, n, BLOCK: tl.constexpr):
        pass

    with pytest.warns(tdl.DejavuConfigWarning, match="key names BLOCK, which the configs set"):
        tdl.autotune(configs=block_configs(), key=["n", "BLOCK"])(keyed_by_block)


def test_no_configs_uses_the_single_default_config_without_benchmarking():
    bench = FakeBench()

    @triton.jit
    def copy(x_ptr, out_ptr, n):
        offs = triton.language.arange(0, 128)
        mask = offs < n
        triton.language.store(out_ptr + offs, triton.language.load(x_ptr + offs, mask=mask), mask=mask)

    tuner = tdl.autotune(key=["n"], do_bench=bench)(copy)
    x = torch.arange(100, dtype=torch.float32)
    out = torch.empty_like(x)
    tuner[(1,)](x, out, 100)
    assert torch.equal(out, x)
    assert bench.calls == 0
    assert len(tuner.configs) == 1


def test_config_space_is_tuned_over_its_valid_points():
    bench = FakeBench({16: 4.0, 32: 3.0, 64: 1.0, 128: 2.0})
    space = tdl.ConfigSpace(
        {"BLOCK": [16, 32, 64, 128]},
        num_warps=[1, 2],
        kwarg_conditions=[lambda kw: kw["BLOCK"] != 64],
    )
    tuner = tuned_add(bench, config_space=space)
    run_add(tuner)
    assert len(tuner.configs) == 6
    assert bench.calls == 6
    assert tuner.best_config.kwargs == {"BLOCK": 128}


def test_do_bench_is_honoured_and_warmup_rep_reach_the_cpu_timer(monkeypatch):
    import triton_dejavu_like.measure.bench as bench_mod

    seen = {}
    real = bench_mod.cpu_do_bench

    def spy(call, quantiles, *, warmup=None, rep=None, **kw):
        seen["warmup"], seen["rep"] = warmup, rep
        return real(call, quantiles, warmup=warmup, rep=rep, **kw)

    monkeypatch.setattr(bench_mod, "cpu_do_bench", spy)
    tuner = tdl.autotune(key=["n"], configs=block_configs((32, 64)), warmup=3, rep=7)(add_kernel)
    run_add(tuner)
    assert seen == {"warmup": 3, "rep": 7}
    assert tuner.last_decision == "tuned"


@pytest.mark.parametrize("kind", ["numpy-float32", "0-d-tensor", "1-d-tensor"])
def test_a_do_bench_answering_numpy_or_torch_scalars_is_honoured(kind):
    """Upstream's autotuner compares whatever a user's do_bench returns: a NumPy scalar or a tensor is
    a time like a float, not a failure of every candidate."""
    bench = FakeBench({16: 5.0, 32: 2.0, 64: 3.0, 128: 4.0})

    def do_bench(kernel_call, quantiles):
        t = bench(kernel_call, quantiles)[0]
        if kind == "numpy-float32":
            return pytest.importorskip("numpy").float32(t)
        return torch.tensor(t) if kind == "0-d-tensor" else torch.tensor([t, t, t])

    tuner = tuned_add(bench, do_bench=do_bench)
    run_add(tuner)
    assert tuner.best_config.kwargs == {"BLOCK": 32}
    timing = tuner.configs_timings[tuner.best_config]  # as answered: one number, or a list
    assert (timing[0] if kind == "1-d-tensor" else timing) == 2.0


def test_reset_to_zero_and_restore_value_protect_in_place_kernels():
    acc = torch.full((64,), 5.0)
    x = torch.ones(64)
    bench = FakeBench()
    tuner = tdl.autotune(
        key=["n"], configs=block_configs((16, 32, 64)), restore_value=["acc_ptr"], do_bench=bench
    )(accumulate_kernel)
    tuner[grid(64)](acc, x, 64)
    assert bench.calls == 3
    assert torch.equal(acc, torch.full((64,), 6.0)), "tuning runs must not leak into the result"

    zeroed = torch.full((64,), 5.0)
    tuner2 = tdl.autotune(
        key=["n"], configs=block_configs((16, 32)), reset_to_zero=["acc_ptr"], do_bench=FakeBench()
    )(accumulate_kernel)
    tuner2[grid(64)](zeroed, x, 64)
    assert torch.equal(zeroed, torch.ones(64)), "reset before the real launch"


def test_a_shallow_copy_restores_its_own_tensors_while_the_original_launches():
    """copy.copy kept restore_value's hooks bound to the original, so the copy's launches kept their
    copies in the original's restore_copies: the original's launch in between (another thread) made
    the copy restore the other call's tensor into its own."""
    import copy

    tuner = tdl.autotune(
        key=["n"], configs=block_configs((16, 32)), restore_value=["acc_ptr"], do_bench=FakeBench()
    )(accumulate_kernel)
    clone = copy.copy(tuner)
    others = torch.full((64,), 1000.0)

    def grid_meanwhile(meta):  # runs inside each launch, between its pre_hook and post_hook
        tuner.pre_hook({"acc_ptr": others})  # the original's launch in another thread
        return (triton.cdiv(64, meta["BLOCK"]),)

    acc, x = torch.full((64,), 5.0), torch.ones(64)
    clone[grid_meanwhile](acc, x, 64)
    assert torch.equal(acc, torch.full((64,), 6.0)), "restored from its own copy"


def test_a_copy_takes_a_snapshot_of_the_launch_table():
    """deepcopy walked the live launch table, which another thread deciding a key adds to: "dictionary
    changed size during iteration" (9-14 times in 40,000 copies beside a launching thread)."""
    tuner = tuned_add(FakeBench())
    run_add(tuner)
    state = tuner.__getstate__()
    assert state["_launch"] == tuner._launch and state["_launch"] is not tuner._launch


def test_copies_made_and_dropped_leave_nothing_behind_in_the_original():
    """Each copy.copy listens to the .cache and .configs it shares with the original; the listener
    of a copy that is gone was dropped only when those changed from outside, which serving never
    does: a process copying a kernel per request kept one entry per copy ever made."""
    import copy

    tuner = tuned_add(FakeBench())
    run_add(tuner, 64)
    for _ in range(100):
        clone = copy.copy(tuner)  # (the one before it is alive while this one is made)
        run_add(clone, 64)
    gc.collect()
    assert len(tuner.cache._listeners) <= 3 and len(tuner.configs._listeners) <= 3
    tuner.cache.clear()  # a change from outside still reaches the tuner and the live copy
    assert not tuner._launch and not clone._launch


def test_user_hooks_see_every_benchmark_and_the_exception_argument():
    events = []

    def pre_hook(nargs, reset_only=False):
        events.append(("pre", nargs["BLOCK"], reset_only))

    def post_hook(nargs, exception):
        events.append(("post", nargs["BLOCK"], exception))

    tuner = tdl.autotune(
        key=["n"],
        configs=block_configs((16, 32)),
        pre_hook=pre_hook,
        post_hook=post_hook,
        do_bench=lambda call, quantiles: (call(), [1.0, 1.0, 1.0])[1],
    )(add_kernel)
    run_add(tuner)
    assert ("pre", 16, False) in events and ("post", 16, None) in events
    assert ("pre", 32, False) in events and ("post", 32, None) in events
    assert events[-1][0] == "pre" and events[-1][2] is True, "reset_only call after tuning"


def test_a_pre_hook_without_reset_only_fails_once_and_its_winner_is_kept():
    """Upstream caches the winner, then calls ``pre_hook(nargs, reset_only=True)``: a hook without that
    parameter fails once, and later calls launch the winner. Here the failing call after tuning threw
    the result away, so every call tuned again and failed again."""
    bench = FakeBench()

    def pre_hook(nargs):  # resets what it must before every launch, but takes no reset_only
        bench.current_block = nargs.get("BLOCK")

    tuner = tdl.autotune(key=["n"], configs=block_configs((16, 32)), pre_hook=pre_hook, do_bench=bench)(
        add_kernel
    )
    with pytest.raises(TypeError, match="give it a reset_only=False parameter") as info:
        run_add(tuner)
    assert isinstance(info.value, tdl.AutotuningError) and info.value.stopped_by == "pre_hook"
    assert bench.calls == 2
    run_add(tuner)  # the winner, without tuning
    assert bench.calls == 2 and tuner.best_config.kwargs == {"BLOCK": 32}
    again = tdl.autotune(key=["n"], configs=block_configs((16, 32)), pre_hook=pre_hook, do_bench=FakeBench())(
        add_kernel
    )
    run_add(again)  # stored: restored without tuning, so without the reset_only call
    assert again.last_decision == "restored" and again.best_config.kwargs == {"BLOCK": 32}


def test_per_config_pre_hook_runs_for_benchmarks_and_launches():
    calls = []
    configs = [
        triton.Config({"BLOCK": 16}, pre_hook=lambda nargs: calls.append(16)),
        triton.Config({"BLOCK": 64}, pre_hook=lambda nargs: calls.append(64)),
    ]
    bench = FakeBench({16: 2.0, 64: 1.0})
    tuner = tuned_add(bench, configs=configs)
    run_add(tuner)
    assert calls.count(16) == 1 and calls.count(64) == 2, "one benchmark each, then the launch of the winner"
    run_add(tuner)
    assert calls.count(64) == 3


def test_prune_configs_by_early_prune_and_perf_model():
    bench = FakeBench({16: 1.0, 32: 2.0, 64: 3.0, 128: 4.0})

    def early(configs, named_args, **kwargs):
        assert named_args["n"] == 100
        return [c for c in configs if c.kwargs["BLOCK"] >= 32]

    def perf_model(**kwargs):
        return -kwargs["BLOCK"]  # predicts larger blocks are faster

    tuner = tuned_add(
        bench, prune_configs_by={"early_config_prune": early, "perf_model": perf_model, "top_k": 2}
    )
    run_add(tuner)
    assert sorted(bench.blocks) == [64, 128]
    assert tuner.best_config.kwargs == {"BLOCK": 64}


def test_pruning_to_one_config_skips_benchmarking():
    bench = FakeBench()
    tuner = tuned_add(bench, prune_configs_by={"early_config_prune": lambda cs, a, **k: cs[:1]})
    run_add(tuner)
    assert bench.calls == 0
    assert tuner.best_config.kwargs == {"BLOCK": 16}
    assert tuner.last_decision == "single"


def test_passthrough_launches_given_meta_parameters_without_tuning():
    bench = FakeBench()
    tuner = tuned_add(bench)
    x, y, out = torch.arange(50.0), torch.ones(50), torch.empty(50)
    tuner[(4,)](x, y, out, 50, BLOCK=16)
    assert torch.equal(out, x + y)
    assert bench.calls == 0
    assert tuner.last_decision == "passthrough"
    assert not tuner.cache
    run_add(tuner, n=50)  # tuned: BLOCK 128
    tuner[(2,)](x, y, out, 50, BLOCK=32, num_warps=2)
    # best_config is what was launched (wrappers read it after a launch to size their grids)
    assert (tuner.best_config.kwargs, tuner.best_config.num_warps) == ({"BLOCK": 32}, 2)


def _heuristics_warmup(tuner, *args, grid):
    triton.heuristics({})(tuner).warmup(*args, grid=grid)


def _run_warmup(tuner, *args, grid):
    tuner.run(*args, grid=grid, warmup=True)


@pytest.mark.parametrize(
    "warm_up",
    [
        pytest.param(
            _heuristics_warmup,
            id="heuristics.warmup",
            marks=since_triton((3, 6), "@triton.heuristics has .warmup()"),
        ),
        pytest.param(_run_warmup, id="run(warmup=True)"),
    ],
)
def test_a_warmup_launch_of_a_new_key_compiles_the_candidates_and_decides_nothing(warm_up):
    """A warmup launch runs no kernel: it was timed as a tuning, and its random winner was stored and
    restored by every later process. ``.warmup()`` of @triton.heuristics above the autotuner and
    ``kernel.run(..., warmup=True)`` both come here."""
    compiled: list[int] = []

    class CountingCompiles:
        def __init__(self, fn):
            self.fn, self.arg_names = fn, fn.arg_names

        def run(self, *args, warmup, **kwargs):
            if warmup:
                compiled.append(kwargs["BLOCK"])
            return self.fn.run(*args, warmup=warmup, **kwargs)

    bench = FakeBench()
    tuner = tdl.autotune(key=["n"], configs=block_configs(), do_bench=bench, pre_hook=observe_block(bench))(
        CountingCompiles(add_kernel)
    )
    x, y, out = torch.arange(100.0), torch.ones(100), torch.empty(100)
    warm_up(tuner, x, y, out, 100, grid=grid(100))
    warm_up(tuner, x, y, out, 100, grid=grid(100))
    assert compiled == [16, 32, 64, 128] * 2
    assert bench.calls == 0 and not tuner.cache and tuner.last_decision is None
    assert not tuner.cache_path().exists()
    run_add(tuner)  # the first real launch tunes
    assert tuner.last_decision == "tuned" and bench.calls == 4
    tuner.run(x, y, out, 100, grid=grid(100), warmup=True)  # a decided key compiles its config only
    assert compiled[8:] == [128] and bench.calls == 4


def test_partial_passthrough_is_a_clear_error():
    configs = [triton.Config({"BLOCK": 16, "flag": 1})]
    tuner = tdl.autotune(key=["n"], configs=configs)(noop_kernel)
    with pytest.raises(ValueError, match="but not \\['flag'\\]"):
        tuner[(1,)](torch.zeros(4), torch.zeros(4), 4, 4, 1.0, BLOCK=16)


def test_a_config_parameter_that_is_no_argument_nor_option_is_rejected_at_decoration():
    with pytest.raises(ValueError, match=r"configs\[0\] sets 'OTHER'.*nor a compile option"):
        tdl.autotune(key=["n"], configs=[triton.Config({"BLOCK": 16, "OTHER": 1})])(add_kernel)


def test_failing_candidates_are_ruled_out_and_recorded():
    bench = FakeBench({16: 1.0, 32: 2.0, 64: 3.0, 128: 4.0})

    def broken_for_small_blocks(nargs):
        raise triton.runtime.errors.OutOfResources(999999, 1000, "shared memory")

    configs = [triton.Config({"BLOCK": 16}, pre_hook=broken_for_small_blocks), *block_configs((32, 64))]
    tuner = tuned_add(bench, configs=configs)
    run_add(tuner)
    assert tuner.best_config.kwargs == {"BLOCK": 32}
    assert math.isinf(tuner.configs_timings[configs[0]][0])
    entry = next(iter(json.loads(tuner.cache_path().read_text())["entries"].values()))
    assert len(entry["ruled_out"]) == 1
    assert "OutOfResources" in entry["ruled_out"][0]["reason"]
    assert entry["ruled_out"][0]["config"]["kwargs"] == {"BLOCK": 16}


class QuantileBench(FakeBench):
    """FakeBench whose answer for BLOCK=16 is ``answer`` (a fast median with bad other quantiles)."""

    def __init__(self, answer: list[float]) -> None:
        super().__init__({16: 1.0, 32: 2.0, 64: 3.0, 128: 4.0})
        self.answer = answer

    def __call__(self, kernel_call, quantiles=(0.5, 0.2, 0.8)):
        times = super().__call__(kernel_call, quantiles)
        return list(self.answer) if self.current_block == 16 else times


@pytest.mark.parametrize(
    "bench",
    [
        FakeBench({16: -1.0, 32: 2.0, 64: 3.0, 128: 4.0}),
        FakeBench({16: math.nan, 32: 2.0, 64: 3.0, 128: 4.0}),
        FakeBench({16: math.inf, 32: 2.0, 64: 3.0, 128: 4.0}),  # was no time, but not said why
        # a fast median with NaN, inf or a negative time at another quantile won, and was not stored
        QuantileBench([0.5, math.nan, math.nan]),
        QuantileBench([0.5, math.inf, math.inf]),
        QuantileBench([0.5, -1.0, 0.6]),
    ],
    ids=["negative", "nan", "inf", "nan p20", "inf p20", "negative p20"],
)
def test_a_negative_or_nan_time_from_do_bench_rules_the_candidate_out(bench, recwarn):
    """A time below zero, NaN or infinite, at any quantile, is no time: the fastest real time wins,
    and its entry is stored, naming the candidate ruled out and why."""
    tuner = tuned_add(bench)
    run_add(tuner)
    assert tuner.best_config.kwargs == {"BLOCK": 32}
    assert not [w for w in recwarn if issubclass(w.category, tdl.DejavuWarning)]
    entry = next(iter(json.loads(tuner.cache_path().read_text())["entries"].values()))
    assert entry["config"]["kwargs"] == {"BLOCK": 32}
    assert [r["config"]["kwargs"] for r in entry["ruled_out"]] == [{"BLOCK": 16}]
    assert entry["ruled_out"][0]["reason"].startswith("the benchmark returned")


def test_all_candidates_failing_names_the_kernel():
    def boom(nargs):
        raise RuntimeError("does not compile")

    configs = [triton.Config({"BLOCK": b}, pre_hook=boom) for b in (16, 32)]
    tuner = tuned_add(FakeBench(), configs=configs)
    with pytest.raises(
        tdl.AutotuningError, match=r"add_kernel: all 2 candidate configs failed.*does not compile"
    ):
        run_add(tuner)


def out_of_resources(nargs):
    raise OutOfResources(nargs["BLOCK"] * 1000, 1000, "shared memory")


def test_every_candidate_failing_raises_the_first_candidates_error_as_an_autotuning_error():
    """The error an except clause written for upstream's autotuner expects (upstream launches the
    first config after all were skipped, which raises its error again), and ours."""
    configs = [triton.Config({"BLOCK": b}, pre_hook=out_of_resources) for b in (16, 32)]
    tuner = tuned_add(FakeBench(), configs=configs)
    with pytest.raises(OutOfResources) as info:
        run_add(tuner)
    error = info.value
    assert isinstance(error, tdl.AutotuningError)
    assert error.error_message.startswith("kernels.add_kernel: all 2 candidate configs failed")
    assert "Required: 16000" in str(error) and "Required: 32000" in str(error)
    assert isinstance(error.__cause__, OutOfResources) and error.__cause__.required == 16000
    assert (error.required, error.limit, error.name) == (16000, 1000, "shared memory")
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, OutOfResources) and isinstance(copy, tdl.AutotuningError)
    assert (str(copy), copy.required) == (str(error), 16000)


def test_the_first_error_upstream_does_not_skip_is_the_one_raised():
    """Upstream skips OutOfResources and goes on, but a KeyError ends its tuning: ours raises that."""

    def missing_argument(nargs):
        raise KeyError("acc_ptr")

    configs = [
        triton.Config({"BLOCK": 16}, pre_hook=out_of_resources),
        triton.Config({"BLOCK": 32}, pre_hook=missing_argument),
        triton.Config({"BLOCK": 64}, pre_hook=lambda nargs: 1 / 0),
    ]
    with pytest.raises(KeyError) as info:
        run_add(tuned_add(FakeBench(), configs=configs))
    assert not isinstance(info.value, (OutOfResources, ZeroDivisionError))
    assert "'torch.float32'): [BLOCK=32" in str(info.value)  # its reason comes first


def test_a_ruled_out_candidates_exception_is_let_go_when_tuning_ends():
    """Kept in case no candidate runs, it would hold the run's frames (its tensors) in a reference
    cycle until the garbage collector ran."""
    raised = []

    def tracked(error):
        raised.append(weakref.ref(error))
        return error

    def fails(nargs):  # no local holds the error: its own frame is in its traceback
        raise tracked(OutOfResources(1, 0, "shared memory"))

    configs = [triton.Config({"BLOCK": 16}, pre_hook=fails), *block_configs((32,))]
    gc.disable()
    try:
        run_add(tuned_add(FakeBench(), configs=configs))
        assert raised and raised[0]() is None
    finally:
        gc.enable()


def test_the_reasons_worker_processes_give_name_the_class_of_the_error():
    """A candidate whose error a worker process could not send back as itself comes back as a
    reason: its ``Type`` names the class (the worker's shared-memory verdict too); a reason naming
    no class makes a plain AutotuningError."""
    configs = block_configs((16, 32, 64))
    kernel = SimpleNamespace(metadata=SimpleNamespace(shared=70000))
    answers = _compat.DriverAnswers(0, None, {"max_shared_mem": 65536})
    trial = Trial("k", configs)
    trial.rule_out(configs[1], one_line_reason(_compat.shared_memory_shortfall(kernel, answers)))
    trial.rule_out(configs[0], "a compile worker died compiling it, with nothing else in flight")
    assert isinstance(trial.all_failed("k: all 2 candidate configs failed"), OutOfResources)
    trial.rule_out(configs[2], "CompilationError: at 3:4: BLOCK must be a power of 2")
    error = trial.all_failed("k: all 3 candidate configs failed")
    assert isinstance(error, CompilationError) and isinstance(error, tdl.AutotuningError)
    assert error.error_message.startswith("k: all 3 candidate configs failed: [BLOCK=64")
    assert type(Trial("k", configs).all_failed("none")) is tdl.AutotuningError
    only = Trial("k", configs)
    only.rule_out(configs[0], "the benchmark returned nan ms")
    assert type(only.all_failed("k: all 1 candidate configs failed")) is tdl.AutotuningError


def test_the_time_spent_timing_candidates_is_summed_as_the_measure_phase(monkeypatch):
    """``phases_s["measure"]`` sums the time candidates were timed in this process (what
    benchmarks/large_space.py compares exhaustive search's wall time against), and nothing else."""
    from triton_dejavu_like.tuner import tuning

    now = [0.0]
    monkeypatch.setattr(tuning.time, "perf_counter", lambda: now[0])
    configs = block_configs((16, 32, 64))

    class Evaluator:
        def measure(self, config):
            now[0] += config.kwargs["BLOCK"] / 16  # 1, 2 and 4 "seconds"
            if config.kwargs["BLOCK"] == 32:
                raise RuntimeError("a launch that fails is timed too")
            return [1.0, 1.0, 1.0]

    trial = Trial("k", configs)
    with trial.phase("search"):
        for index in range(len(configs)):
            trial.measure(Evaluator(), index)
            now[0] += 10.0  # the rest of the search (waiting for compiles, the strategy)
    assert trial.phases == {"measure": 7.0, "search": 37.0}


def test_fallback_heuristic_answers_a_miss_without_tuning(monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_FORCE_FALLBACK", "1")
    bench = FakeBench()
    seen_keys = []

    def heuristic(key):
        seen_keys.append(key)
        return triton.Config({"BLOCK": 64}, num_warps=1)

    tuner = tuned_add(bench, fallback_heuristic=heuristic)
    run_add(tuner)
    assert bench.calls == 0
    assert tuner.best_config.kwargs == {"BLOCK": 64}
    assert tuner.last_decision == "heuristic"
    assert seen_keys == [(100, "torch.float32", "torch.float32", "torch.float32")]
    assert not tuner.cache_path().exists(), "heuristic answers are not stored as tuned results"


def test_force_fallback_without_heuristic_tunes_and_says_so(monkeypatch, caplog):
    monkeypatch.setenv("TRITON_DEJAVU_FORCE_FALLBACK", "1")
    bench = FakeBench()
    tuner = tuned_add(bench)
    with caplog.at_level("WARNING", logger="triton_dejavu_like"):
        run_add(tuner)
    assert bench.calls == 4
    assert "no fallback_heuristic" in caplog.text


def test_bad_heuristic_result_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_FORCE_FALLBACK", "1")
    tuner = tuned_add(FakeBench(), fallback_heuristic=lambda key: {"BLOCK": 64})
    with pytest.raises(tdl.AutotuningError, match=r"not a triton\.Config"):
        run_add(tuner)


def test_use_only_restored_limits_tuning_to_restored_winners(monkeypatch):
    first = FakeBench({16: 9.0, 32: 9.0, 64: 1.0, 128: 9.0})
    run_add(tuned_add(first), n=100)
    monkeypatch.setenv("TRITON_DEJAVU_USE_ONLY_RESTORED", "1")
    second = FakeBench({16: 1.0, 32: 9.0, 64: 2.0, 128: 9.0})
    tuner = tuned_add(second)
    run_add(tuner, n=300)  # a new key: only the winner of n=100 is a candidate
    assert tuner.best_config.kwargs == {"BLOCK": 64}
    assert tuner.last_decision == "single"
    assert second.calls == 0


def test_use_only_restored_with_nothing_restored_tunes_everything(monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_USE_ONLY_RESTORED", "1")
    bench = FakeBench()
    run_add(tuned_add(bench))
    assert bench.calls == 4


def test_random_search_respects_share_and_is_reproducible(tmp_path):
    def tune(seed, root):
        bench = FakeBench()
        tuner = tuned_add(
            bench,
            configs=block_configs((16, 32, 64, 128), warps=(1, 2, 4, 8)),
            use_random_search=True,
            search_max_share=0.25,
            search_seed=seed,
            custom_data_storage=tmp_path / root,
        )
        run_add(tuner)
        return bench.calls, [c for c in tuner.configs_timings]

    calls_a, order_a = tune(1, "a")
    calls_b, order_b = tune(1, "b")
    _, order_c = tune(2, "c")
    assert calls_a == calls_b == 4  # 25 % of 16 candidates
    assert [str(c) for c in order_a] == [str(c) for c in order_b]
    assert [str(c) for c in order_a] != [str(c) for c in order_c]


def test_random_search_respects_time_budget(clock):
    def slow_bench(call, quantiles):
        call()
        clock.advance(1.0)  # each benchmark takes one (fake) second
        return [1.0, 1.0, 1.0]

    tuner = tdl.autotune(
        key=["n"],
        configs=block_configs((16, 32, 64, 128), warps=(1, 2, 4, 8)),
        do_bench=slow_bench,
        use_random_search=True,
        search_max_search_t=3.5,
    )(add_kernel)
    run_add(tuner)
    assert len(tuner.configs_timings) == 4  # started at 0, 1, 2 and 3 s; none once 3.5 s had passed


def test_a_time_budget_alone_is_a_fixed_budget_without_the_adaptive_stop():
    """search_max_search_t given alone kept the adaptive stop (with the time as its cap), so a search
    with time to spare stopped after a few dozen results; a given budget keeps its meaning, as
    triton-dejavu's time budget with its default share of 1.0: the whole space, within the time."""
    configs = [
        triton.Config({"BLOCK": b}, num_warps=w, num_stages=s)
        for b in (16, 32)
        for w in (1, 2, 4, 8)
        for s in range(1, 11)
    ]
    bench = FakeBench({16: 1.0, 32: 1.0})  # flat: the adaptive stop ends such a search early
    tuner = tuned_add(bench, configs=configs, use_random_search=True, search_max_search_t=600)
    run_add(tuner)
    assert bench.calls == len(configs) == 80
    assert not tuner.settings.budget.adaptive


def test_no_time_limit_and_the_default_time_cap_are_stored_apart():
    """``search_max_search_t=inf`` searches without a time limit, ``search_max_share=1.0`` alone under
    the default cap: a result one of them stored (the other perhaps cut short by the cap) is not the
    other's."""
    paths = {
        tuned_add(FakeBench(), use_random_search=True, **budget).cache_path()
        for budget in ({"search_max_search_t": math.inf}, {"search_max_share": 1.0}, {})
    }
    assert len(paths) == 3


def test_random_search_repeats_when_nothing_valid_was_found(tmp_path):
    def fail_small(nargs):
        if nargs["BLOCK"] < 128:
            raise RuntimeError("nope")

    configs = [triton.Config({"BLOCK": b}, pre_hook=fail_small) for b in (16, 32, 64, 128)]

    def tune(seed, repeat):
        tuner = tuned_add(
            FakeBench(),
            configs=configs,
            use_random_search=True,
            search_max_share=0.25,  # one candidate per attempt
            search_max_repeat=repeat,
            search_seed=seed,
            custom_data_storage=tmp_path / f"{seed}-{repeat}",
        )
        try:
            run_add(tuner)
        except tdl.AutotuningError:
            return None
        return tuner

    single_attempts = [tune(seed, 1) for seed in range(6)]
    assert any(t is None for t in single_attempts), "one draw of four often hits a failing candidate"
    for seed in range(6):  # four attempts evaluate four distinct candidates: the valid one is found
        tuner = tune(seed, 4)
        assert tuner is not None and tuner.best_config.kwargs == {"BLOCK": 128}


def test_ignore_dtypes_shares_one_result_across_dtypes():
    bench = FakeBench()
    tuner = tuned_add(bench, ignore_dtypes=True)
    run_add(tuner, dtype=torch.float32)
    run_add(tuner, dtype=torch.float64)
    assert bench.calls == 4
    assert list(tuner.cache) == [(100,)]


def test_dtype_changes_the_key_by_default():
    bench = FakeBench()
    tuner = tuned_add(bench)
    run_add(tuner, dtype=torch.float32)
    run_add(tuner, dtype=torch.float64)
    assert bench.calls == 8


def test_scalar_kernel_argument_with_key_on_float():
    bench = FakeBench()
    tuner = tdl.autotune(key=["alpha"], configs=block_configs((16, 32)), do_bench=bench)(scale_kernel)
    x = torch.arange(40.0)
    out = torch.empty(40)
    tuner[grid(40)](x, out, 40, 2.5)
    assert torch.equal(out, x * 2.5)
    assert list(tuner.cache) == [(2.5, "torch.float32", "torch.float32")]


@pytest.mark.parametrize("nan", [float, np.float64], ids=["float", "float64"])
def test_a_nan_key_value_is_decided_once_and_its_tables_stay_small(nan):
    """A NaN equals no other NaN: each call's fresh NaN missed the launch table, was decided again
    (restored, reported) and added an entry to ``.cache`` and the launch table, every call."""
    bench = FakeBench()
    tuner = tdl.autotune(key=["alpha"], configs=block_configs((16, 32)), do_bench=bench)(scale_kernel)
    x = torch.arange(40.0)
    out = torch.empty(40)
    decisions = []
    for _ in range(4):
        tuner.last_decision = None
        tuner[grid(40)](x, out, 40, nan("nan"))
        decisions.append(tuner.last_decision)
    assert decisions == ["tuned", None, None, None]
    assert bench.calls == 2 and len(tuner.cache) == 1 and len(tuner._launch) == 1


def test_print_autotuning_summary(monkeypatch, capsys):
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    run_add(tuned_add(FakeBench()))
    out = capsys.readouterr().out
    assert "Triton autotuning for function add_kernel" in out
    assert "tuned (exhaustive, 4 configs benchmarked)" in out
    run_add(tuned_add(FakeBench()))
    assert "restored from" in capsys.readouterr().out


def test_print_autotuning_summary_counts_the_candidates_ruled_out_apart(monkeypatch, capsys):
    """Candidates that could not run were counted as benchmarked: 3 of 4 failing read '4 configs
    benchmarked'."""
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    bench = FakeBench()
    configs = [*block_configs((16, 32, 64), warps=(1,)), triton.Config({"BLOCK": 128})]
    for config in configs[:3]:
        config.pre_hook = refused  # the config's own error: it is ruled out, never benchmarked
    run_add(tuned_add(bench, configs=configs))
    assert bench.blocks == [128]  # the only launch that ran
    assert "tuned (exhaustive, 1 config benchmarked, 3 ruled out)" in capsys.readouterr().out


def test_listener_is_called_where_triton_has_one(monkeypatch):
    knobs = pytest.importorskip("triton.knobs")
    if not hasattr(knobs.autotuning, "listener"):
        pytest.skip("this Triton has no autotuning listener")
    seen = []
    monkeypatch.setattr(knobs.autotuning, "listener", lambda **kw: seen.append(kw))
    run_add(tuned_add(FakeBench()))
    assert seen and seen[0]["cache_hit"] is False and seen[0]["best_config"].kwargs == {"BLOCK": 128}


def test_the_listener_gets_the_timings_as_do_bench_answered_them(monkeypatch):
    """Upstream passes its ``configs_timings`` (what do_bench answered) to the listener: numbers for a
    do_bench that answers numbers."""
    knobs = pytest.importorskip("triton.knobs")
    if not hasattr(knobs.autotuning, "listener"):
        pytest.skip("this Triton has no autotuning listener")
    seen = []
    monkeypatch.setattr(knobs.autotuning, "listener", lambda **kw: seen.append(kw))
    bench = FakeBench()
    tuner = tuned_add(bench, do_bench=lambda call, quantiles: bench(call, quantiles)[0])
    run_add(tuner)
    assert [kw["configs_timings"] for kw in seen] == [tuner.configs_timings]
    assert tuner.configs_timings[tuner.best_config] == 1000.0 / 128


def test_config_pre_hook_gets_every_argument_and_config_value_at_launch():
    seen = []
    configs = [
        triton.Config({"BLOCK": 16}, num_warps=2, pre_hook=lambda nargs: seen.append(dict(nargs))),
        triton.Config({"BLOCK": 32}, num_warps=2),
    ]
    bench = FakeBench({16: 1.0, 32: 2.0})
    tuner = tuned_add(bench, configs=configs)
    run_add(tuner)  # tunes (one benchmark of BLOCK=16), then launches the winner through the hook
    x, y, out = torch.arange(100.0), torch.ones(100), torch.empty(100)
    seen.clear()
    tuner[grid(100)](x, y, out, 100)  # an in-memory hit: the fast launcher
    tuner.run(x, y, out, n=100, grid=grid(100), warmup=False)  # the general path
    assert bench.calls == 2
    assert len(seen) == 2
    for nargs in seen:
        assert nargs["x_ptr"] is x and nargs["out_ptr"] is out and nargs["n"] == 100
        assert nargs["BLOCK"] == 16 and nargs["num_warps"] == 2 and "num_stages" in nargs
        assert "grid" in nargs
    assert torch.equal(out, x + y)


def test_a_launch_leaves_out_options_equal_to_the_backend_defaults():
    from triton_dejavu_like._compat import launch_option_defaults
    from triton_dejavu_like.measure.launch import launch_kwargs

    cuda = launch_option_defaults("cuda")
    assert cuda["num_warps"] == 4 and cuda["num_ctas"] == 1 and "num_stages" in cuda
    config = triton.Config({"BLOCK": 64}, num_warps=8, num_stages=cuda["num_stages"], num_ctas=1)
    assert launch_kwargs(config, cuda) == {"BLOCK": 64, "num_warps": 8}
    hip = launch_option_defaults("hip")
    if hip.get("num_stages") != cuda["num_stages"]:  # e.g. 2 on ROCm, 3 on CUDA
        assert launch_kwargs(config, hip)["num_stages"] == cuda["num_stages"]
    assert launch_kwargs(config, {}) == config.all_kwargs()
    assert launch_option_defaults("interpreter") == {}


@pytest.mark.parametrize("warps", [4, 8])
def test_num_warps_in_the_call_is_upstreams_type_error_whatever_the_winner(monkeypatch, warps):
    """Upstream launches with ``**config.all_kwargs()``, so a call's own ``num_warps=`` is a TypeError.
    On a GPU ours leaves out options equal to the backend's defaults: a winner with the default
    num_warps then launched with the call's value (not the one tuned), another winner raised."""
    from triton_dejavu_like._compat import launch_option_defaults
    from triton_dejavu_like.measure.launch import launch_kwargs

    tuner = tuned_add(FakeBench(), configs=[triton.Config({"BLOCK": 64}, num_warps=warps)])
    cuda = launch_option_defaults("cuda")  # what a launch on a CUDA GPU leaves out
    monkeypatch.setattr(
        tuner,
        "_launch_kwargs",
        lambda config, every_option=False: launch_kwargs(config, None if every_option else cuda),
    )
    x, y, out = torch.arange(100.0), torch.ones(100), torch.empty(100)
    with pytest.raises(TypeError, match="multiple values for keyword argument 'num_warps'"):
        tuner[grid(100)](x, y, out, 100, num_warps=2)


@triton.jit
def _scaled_by_warps(x_ptr, out_ptr, n, BLOCK: tl.constexpr, WARPS: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * WARPS, mask=mask)


@since_triton((3, 3), "an interpreter that drops a GPU launch's options (3.2's passes them to the kernel)")
def test_a_heuristic_under_the_tuner_sees_every_option_of_the_winner(monkeypatch):
    """A ``@triton.heuristics`` under the tuner reading ``num_warps`` (AMD's gluon kernels do): on a
    GPU the winner launched without the options equal to the backend's defaults, and the heuristic
    raised KeyError('num_warps') at the first launch after tuning (upstream passes every option)."""
    import types

    from triton_dejavu_like import _compat
    from triton_dejavu_like.tuner import launching

    cuda = _compat.launch_option_defaults("cuda")
    as_on_a_gpu = types.SimpleNamespace(**vars(_compat))  # launching's view: the GPU branch
    as_on_a_gpu.is_interpreted = lambda fn: False
    as_on_a_gpu.launch_option_defaults = lambda backend: cuda
    monkeypatch.setattr(launching, "_compat", as_on_a_gpu)
    seen = []

    def warps(nargs):
        seen.append(nargs["num_warps"])
        return nargs["num_warps"]

    kernel = triton.heuristics({"WARPS": warps})(_scaled_by_warps)
    configs = [triton.Config({"BLOCK": 64}, num_warps=cuda["num_warps"], num_stages=cuda["num_stages"])]
    tuner = tdl.autotune(key=["n"], configs=configs, do_bench=FakeBench())(kernel)
    x, out = torch.arange(100.0), torch.empty(100)
    tuner[grid(100)](x, out, 100)
    assert torch.equal(out, x * cuda["num_warps"]) and seen[-1] == cuda["num_warps"]

"""The same scenarios against ``triton.autotune`` and ``triton_dejavu_like.autotune``.

Written from upstream's documented behaviour (``python/triton/runtime/autotuner.py``, Triton 3.2-3.9):
where upstream can run under the interpreter (3.3+), both decorators must show the same observable
behaviour; where upstream's behaviour appeared in a later release, the upstream parameter is skipped
on older ones and ours must already behave like the newest release.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from compat_helpers import (
    BLOCKS,
    TRITON,
    Bench,
    accumulate_kernel,
    add_inputs,
    add_kernel,
    blocks_of,
    both,
    grid,
    is_ours,
    key_for,
    run_add,
    scaled_add_kernel,
)
from triton.runtime.autotuner import Autotuner as UpstreamAutotuner
from triton.runtime.errors import InterpreterError, OutOfResources

try:  # 3.3+
    from triton.runtime.errors import PTXASError
except ImportError:  # 3.2 has no such class
    PTXASError = None

import triton_dejavu_like as tdl

TOP_K_MESSAGE = "Error while pruning configs, top_k must be either 1) a float <= 1.0 or 2) an int"
PRUNE_MESSAGE = (
    "No valid autotuner configs after pruning. `early_config_prune` should return at least one config."
)


# --- choice, .cache, .best_config, .configs_timings, .bench_time -----------------------------------------


@pytest.mark.parametrize("autotune", both())
def test_picks_the_fastest_and_exposes_its_state(autotune):
    bench = Bench()
    configs = bench.configs()
    tuner = autotune(configs=configs, key=["n"], do_bench=bench)(add_kernel)
    assert isinstance(tuner, UpstreamAutotuner)
    run_add(tuner)
    assert sorted(bench.timed) == list(BLOCKS)
    assert tuner.best_config is configs[1]
    assert tuner.cache == {key_for(100): configs[1]}
    assert set(tuner.configs_timings) == set(configs)
    assert tuner.configs_timings[configs[1]][0] == pytest.approx(2.0)
    assert isinstance(tuner.bench_time, float) and tuner.bench_time > 0.0  # the tuning took some time


@pytest.mark.parametrize("autotune", both())
def test_do_bench_gets_upstreams_quantiles_and_a_scalar_answer_works(autotune):
    bench = Bench(scalar=True)
    configs = bench.configs()
    tuner = autotune(configs=configs, key=["n"], do_bench=bench)(add_kernel)
    run_add(tuner)
    assert all(tuple(q) == (0.5, 0.2, 0.8) for q in bench.quantiles)
    assert tuner.best_config is configs[1]
    # configs_timings holds what do_bench answered: numbers here, as user code may read them
    assert tuner.configs_timings[configs[1]] == 2.0
    assert all(isinstance(t, float) for t in tuner.configs_timings.values())


class _TiedBench(Bench):
    """Answers lists whose medians tie for BLOCK 16 and 32; 32's 20th percentile is lower."""

    LISTS = {16: [1.0, 0.9, 1.2], 32: [1.0, 0.5, 1.2], 64: [2.0, 1.9, 2.2], 128: [3.0, 2.9, 3.2]}

    def __call__(self, kernel_call: Callable[[], Any], quantiles: Any = None, **_: Any) -> Any:
        super().__call__(kernel_call, quantiles)
        return self.LISTS[self.timed[-1]]


@pytest.mark.parametrize("autotune", both())
def test_equal_medians_are_ordered_by_the_next_quantiles(autotune):
    """Upstream picks ``min(timings, key=timings.get)``: lists compared in order, so a tie on the
    median goes to the lower 20th percentile, not to the config measured first."""
    bench = _TiedBench()
    configs = bench.configs()
    tuner = autotune(configs=configs, key=["n"], do_bench=bench)(add_kernel)
    run_add(tuner)
    assert tuner.best_config is configs[1]


@pytest.mark.parametrize("autotune", both())
def test_do_bench_attribute_is_the_users_function(autotune):
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench)(add_kernel)
    assert tuner.do_bench is bench


@pytest.mark.parametrize("given", [False, True], ids=["ours", "users"])
@pytest.mark.parametrize("autotune", both())
def test_a_do_bench_assigned_after_decoration_times_the_candidates(autotune, given):
    """Upstream's ``_bench`` times with whatever ``.do_bench`` holds, so code written for it assigns
    a timing function to a decorated kernel (``kernel.do_bench = my_bench``); it times every later
    tuning, also in place of one given to the decorator."""
    if not (given or is_ours(autotune)) and TRITON < (3, 4):
        pytest.skip("upstream's decorator asks the driver for a benchmarker without do_bench before 3.4")
    first, assigned = Bench(), Bench()
    configs = assigned.configs()
    tuner = autotune(configs=configs, key=["n"], **({"do_bench": first} if given else {}))(add_kernel)
    tuner.do_bench = assigned
    assert tuner.do_bench is assigned
    run_add(tuner)
    assert sorted(assigned.timed) == list(BLOCKS) and first.timed == []
    assert tuner.best_config is configs[1]


def test_our_do_bench_attribute_answers_one_number_without_quantiles():
    """Without a user's function, ``.do_bench`` is our benchmarker: the times at the quantiles
    given, or one time for ``quantiles=None``, the default, as Triton's ``do_bench`` answers then
    (upstream's ``.do_bench`` is ``triton.testing.do_bench``: code calling ``tuner.do_bench(fn)``
    expects one number)."""
    tuner = tdl.autotune(configs=Bench().configs(), key=["n"])(add_kernel)
    calls = []
    assert isinstance(tuner.do_bench(lambda: calls.append(1), quantiles=None), float)
    assert isinstance(tuner.do_bench(lambda: calls.append(1)), float)
    assert len(tuner.do_bench(lambda: calls.append(1), quantiles=(0.5, 0.2))) == 2
    assert calls


@pytest.mark.parametrize("autotune", both())
def test_in_memory_hit_and_new_key(autotune):
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench)(add_kernel)
    run_add(tuner, 100)
    run_add(tuner, 100)
    assert len(bench.timed) == 4
    run_add(tuner, 60)
    assert len(bench.timed) == 8
    assert set(tuner.cache) == {key_for(100), key_for(60)}


@pytest.mark.parametrize("autotune", both())
def test_key_passed_by_keyword(autotune):
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench)(add_kernel)
    x, y, out = add_inputs(40)
    tuner[grid(40)](x, y, out, n=40)
    assert torch.equal(out, x + y)
    assert set(tuner.cache) == {(40, "torch.float32", "torch.float32", "torch.float32")}


@pytest.mark.parametrize("autotune", both())
def test_config_pre_hook_runs_at_launch_with_all_arguments(autotune):
    bench = Bench()
    configs = bench.configs()
    tuner = autotune(configs=configs, key=["n"], do_bench=bench)(add_kernel)
    run_add(tuner)
    assert len(bench.launched) == len(BLOCKS) + 1  # one per benchmark, one for the real launch
    assert bench.launched[-1] == 32
    bench.launched.clear()
    run_add(tuner)  # a hit still runs the chosen config's pre_hook
    assert bench.launched == [32]


# --- hooks ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("autotune", both())
def test_pre_and_post_hook_order_and_arguments(autotune):
    bench = Bench()
    events = []

    def pre_hook(nargs, reset_only=False):
        has_args = {"x_ptr", "y_ptr", "out_ptr", "n"} <= set(nargs)
        events.append(("pre", nargs.get("BLOCK"), reset_only, has_args))

    def post_hook(nargs, exception):
        events.append(("post", nargs.get("BLOCK"), exception))

    tuner = autotune(
        configs=bench.configs((16, 32)), key=["n"], do_bench=bench, pre_hook=pre_hook, post_hook=post_hook
    )(add_kernel)
    run_add(tuner)
    names = True  # every kernel argument by name
    assert events == [
        ("pre", 16, False, names),
        ("post", 16, None),
        ("pre", 32, False, names),
        ("post", 32, None),
        ("pre", 32, True, names),  # reset_only, with the winner's values, before the real launch
    ]
    events.clear()
    run_add(tuner)
    assert events == []  # hooks are for benchmarking only


@pytest.mark.parametrize("autotune", both())
def test_restore_value_restores_in_place_outputs(autotune):
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench, restore_value=["acc_ptr"])(
        accumulate_kernel
    )
    acc = torch.full((50,), 10.0)
    x = torch.arange(50, dtype=torch.float32)
    tuner[grid(50)](acc, x, 50)
    assert len(bench.timed) == 4
    assert torch.equal(acc, 10.0 + x)  # benchmark launches left no trace: exactly one accumulation


@pytest.mark.parametrize("autotune", both())
def test_reset_to_zero_zeroes_before_each_benchmark_and_the_launch(autotune):
    bench = Bench()
    seen = []

    def record(nargs):
        bench.config_hook(nargs)
        seen.append(float(nargs["acc_ptr"].sum()))

    configs = [triton.Config({"BLOCK": b}, num_warps=1, pre_hook=record) for b in BLOCKS]
    tuner = autotune(configs=configs, key=["n"], do_bench=bench, reset_to_zero=["acc_ptr"])(accumulate_kernel)
    acc = torch.full((50,), 10.0)
    x = torch.ones(50)
    tuner[grid(50)](acc, x, 50)
    assert torch.equal(acc, x)  # zeroed after tuning (reset_only), then one accumulation
    assert seen[0] == 500.0 and seen[1:4] == [50.0, 50.0, 50.0]


@pytest.mark.parametrize("autotune", both())
def test_user_pre_hook_replaces_reset_to_zero(autotune):
    bench = Bench()
    calls = []
    tuner = autotune(
        configs=bench.configs(),
        key=["n"],
        do_bench=bench,
        reset_to_zero=["acc_ptr"],
        pre_hook=lambda nargs, reset_only=False: calls.append(reset_only),
    )(accumulate_kernel)
    acc = torch.zeros(50)
    x = torch.ones(50)
    tuner[grid(50)](acc, x, 50)
    assert calls == [False] * 4 + [True]
    assert torch.equal(acc, 5 * x)  # nothing was reset: four benchmark runs and the real launch


# --- pruning ----------------------------------------------------------------------------------------------


def _perf_model(seen):
    def perf_model(**kwargs):
        seen.append(kwargs)
        return {16: 1.0, 32: 4.0, 64: 2.0, 128: 3.0}[kwargs["BLOCK"]]  # predicts 16 < 64 < 128 < 32

    return perf_model


@pytest.mark.parametrize("top_k", [2, 0.5])
@pytest.mark.parametrize("autotune", both())
def test_perf_model_top_k(autotune, top_k):
    bench = Bench()
    seen = []
    prune = {"perf_model": _perf_model(seen), "top_k": top_k}
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench, prune_configs_by=prune)(add_kernel)
    run_add(tuner)
    assert sorted(bench.timed) == [16, 64]
    assert blocks_of(tuner.configs_timings) == [16, 64]
    assert tuner.best_config.kwargs == {"BLOCK": 64}
    assert len(seen) == 4
    assert {"x_ptr", "y_ptr", "out_ptr", "n", "BLOCK", "num_warps"} <= set(seen[0])


@pytest.mark.parametrize("autotune", both(since=(3, 9), why="3.9 keeps at least one config"))
def test_fractional_top_k_keeps_at_least_one_config(autotune):
    bench = Bench()
    prune = {"perf_model": _perf_model([]), "top_k": 0.1}
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench, prune_configs_by=prune)(add_kernel)
    run_add(tuner)
    assert tuner.best_config.kwargs == {"BLOCK": 16}


@pytest.mark.parametrize("autotune", both())
def test_top_k_of_a_bad_type_is_a_type_error(autotune):
    bench = Bench()
    prune = {"perf_model": _perf_model([]), "top_k": 1.5}
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench, prune_configs_by=prune)(add_kernel)
    with pytest.raises(TypeError) as info:
        run_add(tuner)
    assert str(info.value) == TOP_K_MESSAGE


@pytest.mark.parametrize("autotune", both())
def test_top_k_of_zero_is_a_value_error(autotune):
    """Upstream fails on ``min()`` of no timings; ours says that ``top_k`` left nothing, as an error
    that is also a ``ValueError``."""
    bench = Bench()
    prune = {"perf_model": _perf_model([]), "top_k": 0}
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench, prune_configs_by=prune)(add_kernel)
    with pytest.raises(ValueError) as info:
        run_add(tuner)
    assert bench.timed == []
    if is_ours(autotune):
        assert isinstance(info.value, tdl.AutotuningError)
        assert "top_k=0 left no config to benchmark" in str(info.value)


@pytest.mark.parametrize("autotune", both())
def test_early_config_prune_gets_configs_named_args_and_kwargs(autotune):
    bench = Bench()
    seen = []

    def early(configs, named_args, **kwargs):
        seen.append((len(configs), sorted(named_args), kwargs))
        return [c for c in configs if c.kwargs["BLOCK"] >= 64]

    tuner = autotune(
        configs=bench.configs(), key=["n"], do_bench=bench, prune_configs_by={"early_config_prune": early}
    )(add_kernel)
    run_add(tuner)
    assert sorted(bench.timed) == [64, 128]
    assert tuner.best_config.kwargs == {"BLOCK": 64}
    assert seen[0][0] == 4 and seen[0][1] == ["n", "out_ptr", "x_ptr", "y_ptr"]


@pytest.mark.parametrize("autotune", both(since=(3, 6), why="AutotunerError since 3.6"))
def test_everything_pruned_raises_upstreams_error(autotune):
    if TRITON < (3, 6):  # the class is not there to be an instance of; the next test covers ours
        pytest.skip("triton.runtime.errors.AutotunerError exists from Triton 3.6 on")
    bench = Bench()
    prune = {"early_config_prune": lambda configs, nargs, **kw: []}
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench, prune_configs_by=prune)(add_kernel)
    with pytest.raises(Exception) as info:
        run_add(tuner)
    from triton.runtime.errors import AutotunerError

    assert isinstance(info.value, AutotunerError)
    assert info.value.error_message == PRUNE_MESSAGE
    assert str(info.value) == "Autotuner error: " + PRUNE_MESSAGE
    assert bench.timed == []


def test_everything_pruned_message_on_every_release():
    """Ours on every release: upstream's text and formatting, an ``AutotuningError`` (a subclass of
    upstream's ``AutotunerError`` where it exists, of RuntimeError before 3.6)."""
    bench = Bench()
    prune = {"early_config_prune": lambda configs, nargs, **kw: []}
    tuner = tdl.autotune(configs=bench.configs(), key=["n"], do_bench=bench, prune_configs_by=prune)(
        add_kernel
    )
    with pytest.raises(tdl.AutotuningError) as info:
        run_add(tuner)
    assert info.value.error_message == PRUNE_MESSAGE
    assert str(info.value) == "Autotuner error: " + PRUNE_MESSAGE
    assert isinstance(info.value, RuntimeError) or TRITON >= (3, 6)


def test_early_config_prune_returning_none_is_upstreams_error():
    """An ``early_config_prune`` that returns None (a branch without ``return``) is upstream 3.6+'s
    "no valid configs" error, not a ``TypeError`` from iterating None."""
    bench = Bench()
    prune = {"early_config_prune": lambda configs, nargs, **kw: None}
    tuner = tdl.autotune(configs=bench.configs(), key=["n"], do_bench=bench, prune_configs_by=prune)(
        add_kernel
    )
    with pytest.raises(tdl.AutotuningError) as info:
        run_add(tuner)
    assert info.value.error_message == PRUNE_MESSAGE
    assert bench.timed == []


@pytest.mark.parametrize("autotune", both(since=(3, 8), why="a single pruned config is not benchmarked"))
def test_single_remaining_config_is_not_benchmarked(autotune):
    bench = Bench()
    configs = bench.configs()
    prune = {"early_config_prune": lambda cs, nargs, **kw: [cs[2]]}
    tuner = autotune(configs=configs, key=["n"], do_bench=bench, prune_configs_by=prune)(add_kernel)
    run_add(tuner)
    assert bench.timed == []
    assert tuner.best_config is configs[2]
    assert tuner.cache == {key_for(100): configs[2]}


@pytest.mark.parametrize("autotune", both())
def test_a_single_config_list_is_not_benchmarked(autotune):
    bench = Bench()
    configs = bench.configs((64,))
    tuner = autotune(configs=configs, key=["n"], do_bench=bench)(add_kernel)
    run_add(tuner)
    assert bench.timed == []
    assert tuner.best_config is configs[0]


@pytest.mark.parametrize("autotune", both())
def test_a_single_config_list_is_not_pruned(autotune):
    """With one config there is nothing to choose: upstream launches it without calling
    ``early_config_prune`` (which may well reject it, e.g. by a resource limit, and return [])."""
    bench = Bench()
    configs = bench.configs((64,))
    calls = []

    def early(cs, nargs, **kw):
        calls.append(len(cs))
        return []

    prune = {"early_config_prune": early}
    tuner = autotune(configs=configs, key=["n"], do_bench=bench, prune_configs_by=prune)(add_kernel)
    run_add(tuner)
    assert calls == [] and bench.timed == []
    assert tuner.best_config is configs[0]


# --- candidates that fail --------------------------------------------------------------------------------


@triton.jit
def asserting_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Fails for every BLOCK of ``BLOCKS``: under the interpreter, as an ``InterpreterError``."""
    tl.static_assert(BLOCK >= 256, "BLOCK must be at least 256")


def failing(error: Exception) -> Callable[[dict[str, Any]], None]:
    """A config pre_hook raising ``error`` at every launch of its config, benchmark or not, as a
    config that cannot run does (upstream launches its choice once more after benchmarking)."""

    def hook(nargs: dict[str, Any]) -> None:
        raise error

    return hook


def failing_configs(*errors: Exception) -> list[triton.Config]:
    return [triton.Config({"BLOCK": b}, num_warps=1, pre_hook=failing(e)) for b, e in zip(BLOCKS, errors)]


def out_of_resources() -> Exception:
    return OutOfResources(99999, 1000, "shared memory")


#: name -> (kernel, configs, decorator options, the error upstream raises), made per test
EVERY_CANDIDATE_FAILS: dict[str, Callable[[], tuple[Any, list[triton.Config], dict[str, Any], type]]] = {
    "static-assert": lambda: (asserting_kernel, Bench().configs(), {}, InterpreterError),
    "out-of-resources": lambda: (add_kernel, failing_configs(*[out_of_resources()] * 4), {}, OutOfResources),
    "skipped-then-raised": lambda: (
        add_kernel,
        failing_configs(out_of_resources(), ValueError("BLOCK"), out_of_resources(), KeyError("BLOCK")),
        {},
        ValueError,
    ),
}
if PTXASError is not None:  # 3.3+: a PTXASError is skipped as OutOfResources is
    EVERY_CANDIDATE_FAILS["ptxas-skipped"] = lambda: (
        add_kernel,
        failing_configs(PTXASError("ptxas"), PTXASError("ptxas"), KeyError("BLOCK"), out_of_resources()),
        {},
        KeyError,
    )


@pytest.mark.parametrize("scenario", list(EVERY_CANDIDATE_FAILS))
@pytest.mark.parametrize("autotune", both())
def test_every_candidate_failing_raises_what_upstream_raises(autotune, scenario):
    """Upstream skips a config whose benchmark raises ``OutOfResources``, ``CompileTimeAssertionFailure``
    or (3.3+) ``PTXASError``, and launches the first config when every one was skipped, which raises
    its error again; any other error ends its tuning at once. Ours raises an ``AutotuningError`` that
    is an instance of that same class, so an ``except`` clause written for upstream catches it."""
    kernel, configs, options, expected = EVERY_CANDIDATE_FAILS[scenario]()
    tuner = autotune(configs=configs, key=["n"], do_bench=Bench(), **options)(kernel)
    x, y, out = add_inputs()
    with pytest.raises(expected) as info:
        tuner[grid(100)](x, y, out, 100)
    if is_ours(autotune):
        assert isinstance(info.value, tdl.AutotuningError)
        assert isinstance(info.value, RuntimeError)  # what triton-dejavu raises then
        assert "all 4 candidate configs failed" in str(info.value)
        assert isinstance(info.value.__cause__, expected)  # the candidate's own error, with its traceback


@pytest.mark.parametrize("autotune", both())
def test_a_config_failing_with_an_error_upstream_does_not_skip(autotune):
    """Upstream's tuning ends at the first error it does not skip; ours rules that config out and
    tunes the others (docs/compat.md: a failing config is only ruled out)."""
    bench = Bench()
    configs = [*failing_configs(KeyError("BLOCK")), *bench.configs(BLOCKS[1:])]
    tuner = autotune(configs=configs, key=["n"], do_bench=bench)(add_kernel)
    if is_ours(autotune):
        run_add(tuner)
        assert tuner.best_config is configs[1]
    else:
        with pytest.raises(KeyError):
            run_add(tuner)


class _LimitedBench(Bench):
    """Raises ``OutOfResources`` itself for BLOCK 32, after a launch that ran (a benchmark that checks
    a config's resources), as ``OutOfResources`` is the class of a config that cannot run."""

    def __call__(self, kernel_call: Callable[[], Any], quantiles: Any = None, **_: Any) -> Any:
        timing = super().__call__(kernel_call, quantiles)
        if self.timed[-1] == 32:
            raise out_of_resources()
        return timing


@pytest.mark.parametrize("autotune", both())
def test_a_do_bench_raising_an_error_upstream_skips_rules_only_that_config_out(autotune):
    """Upstream's ``_bench`` skips a config whose ``do_bench`` raises ``OutOfResources`` (or
    ``CompileTimeAssertionFailure``, ``PTXASError``), wherever it came from: an infinite time, and
    tuning goes on."""
    bench = _LimitedBench()
    configs = bench.configs()
    tuner = autotune(configs=configs, key=["n"], do_bench=bench)(add_kernel)
    run_add(tuner)
    assert tuner.best_config is configs[2]  # 64: 32, the fastest, could not run
    assert tuner.configs_timings[configs[1]][0] == float("inf")
    assert sorted(bench.timed) == list(BLOCKS)


def raising_pre_hook(nargs: dict[str, Any], reset_only: bool = False) -> None:
    raise KeyError("acc_ptr")


def raising_post_hook(nargs: dict[str, Any], exception: BaseException | None) -> None:
    raise ValueError("cannot restore")


def raising_bench(kernel_call: Callable[[], Any], quantiles: Any = None) -> Any:
    kernel_call()
    raise TypeError("bad quantiles")


#: name -> (decorator options, the error both raise)
ENDS_TUNING: dict[str, tuple[dict[str, Any], type]] = {
    "pre_hook": ({"pre_hook": raising_pre_hook}, KeyError),
    "post_hook": ({"post_hook": raising_post_hook}, ValueError),
    "reset_to_zero": ({"reset_to_zero": ["n"]}, AttributeError),  # n is an int: n.zero_()
    "do_bench": ({"do_bench": raising_bench}, TypeError),
}


@pytest.mark.parametrize("scenario", list(ENDS_TUNING))
@pytest.mark.parametrize("autotune", both())
def test_an_error_of_the_tuners_hooks_or_do_bench_ends_tuning_at_the_first_config(autotune, scenario):
    """Upstream's ``kernel_call`` re-raises a hook's error and ``_bench`` skips only a candidate's
    resource and compile errors, so the first config's benchmark ends its tuning. Ours: the same,
    with an ``AutotuningError`` of the error's class (a config's own ``pre_hook`` only rules it out)."""
    options, expected = ENDS_TUNING[scenario]
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key=["n"], **{"do_bench": bench, **options})(add_kernel)
    with pytest.raises(expected) as info:
        run_add(tuner)
    assert bench.launched == [BLOCKS[0]]  # the first config's benchmark launch, no other
    assert tuner.cache == {}
    if is_ours(autotune):
        assert isinstance(info.value, tdl.AutotuningError)
        assert "tuning stopped at the first candidate" in str(info.value)
        assert isinstance(info.value.__cause__, expected)


@pytest.mark.parametrize("broken", [None, 64], ids=["every_config", "some_configs"])
@pytest.mark.parametrize("autotune", both())
def test_a_grid_function_that_raises_ends_tuning_at_that_config(autotune, broken):
    """Upstream calls the grid function inside the benchmark launch, whose error ``_bench`` does not
    skip: tuning ends at the first config whose grid raises (the ``post_hook`` gets the grid's
    error), nothing is cached. Ours: the same, with an ``AutotuningError`` of the grid's error's
    class, ``stopped_by == "grid"``."""
    bench = Bench()
    seen: list[type] = []

    def post_hook(nargs: dict[str, Any], exception: BaseException | None) -> None:
        seen.append(type(exception))

    def typo(meta: dict[str, Any]) -> tuple[int]:  # META["BLOCK_SIZE"] where the configs set BLOCK
        name = "BLOCK_SIZE" if broken in (None, meta["BLOCK"]) else "BLOCK"
        return (triton.cdiv(100, meta[name]),)

    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench, post_hook=post_hook)(add_kernel)
    x, y, out = add_inputs()
    with pytest.raises(KeyError) as info:
        tuner[typo](x, y, out, 100)
    tried = list(BLOCKS[: 1 if broken is None else BLOCKS.index(broken) + 1])
    assert bench.launched == tried  # the configs before the broken one, then that one
    assert seen == [type(None)] * (len(tried) - 1) + [KeyError]
    assert tuner.cache == {}
    if is_ours(autotune):
        assert isinstance(info.value, tdl.AutotuningError) and info.value.stopped_by == "grid"
        assert type(info.value.__cause__) is KeyError and info.value.__cause__.args == ("BLOCK_SIZE",)


# --- benchmark arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize("options", [{"warmup": 5, "rep": 20}, {"use_cuda_graph": True}])
@pytest.mark.parametrize("autotune", both())
def test_warmup_rep_use_cuda_graph_are_accepted(autotune, options):
    bench = Bench()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # upstream deprecates them
        tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench, **options)(add_kernel)
    assert isinstance(tuner, UpstreamAutotuner)
    if is_ours(autotune):  # upstream then replaces do_bench with triton.testing's (a GPU timer)
        run_add(tuner)
        assert tuner.best_config.kwargs == {"BLOCK": 32}
        assert len(bench.timed) == 4


@pytest.mark.parametrize("cache_results", [True, False])
@pytest.mark.parametrize(
    "autotune", both(since=(3, 6), why="cache_results since 3.4, off under the interpreter since 3.6")
)
def test_cache_results_is_accepted(autotune, cache_results):
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench, cache_results=cache_results)(
        add_kernel
    )
    run_add(tuner)
    assert tuner.best_config.kwargs == {"BLOCK": 32}


@pytest.mark.skipif(TRITON < (3, 4), reason="upstream's Autotuner takes cache_results from Triton 3.4 on")
@pytest.mark.parametrize("autotuner", [UpstreamAutotuner, tdl.Autotuner], ids=["upstream", "ours"])
def test_autotuner_constructed_with_upstreams_arguments(autotuner):
    """Code that builds the Autotuner itself (a library's own decorator, or a subclass) passes
    upstream's constructor arguments, ``cache_results`` included (keyword, or 14th positional)."""
    for n, cache_results in ((100, {"cache_results": False}), (200, {})):  # a new key: tuned again
        bench = Bench()
        args = [add_kernel, add_kernel.arg_names, bench.configs(), ["n"], None, None, None, None, None]
        args += [None, None, False, bench] + ([] if cache_results else [False])
        tuner = autotuner(*args, **cache_results)
        run_add(tuner, n)
        assert tuner.best_config.kwargs == {"BLOCK": 32}
        assert sorted(bench.timed) == list(BLOCKS)


# --- positional order -------------------------------------------------------------------------------------


@pytest.mark.parametrize("autotune", both())
def test_positional_order_up_to_do_bench(autotune):
    bench = Bench()
    configs = bench.configs()
    pruned = []

    def early(cs, nargs, **kw):
        pruned.append(len(cs))
        return cs[1:]

    events = []
    tuner = autotune(
        configs,
        ["n"],
        {"early_config_prune": early},
        None,  # reset_to_zero
        None,  # restore_value
        lambda nargs, reset_only=False: events.append("pre"),
        lambda nargs, exception: events.append("post"),
        None,  # warmup
        None,  # rep
        False,  # use_cuda_graph
        bench,  # do_bench
    )(add_kernel)
    run_add(tuner)
    assert pruned == [4]
    assert sorted(bench.timed) == [32, 64, 128]
    assert events.count("post") == 3
    assert tuner.best_config is configs[1]


@pytest.mark.parametrize("autotune", both(since=(3, 6), why="cache_results (12th) since 3.4"))
def test_positional_cache_results(autotune):
    bench = Bench()
    tuner = autotune(bench.configs(), ["n"], None, None, None, None, None, None, None, False, bench, True)(
        add_kernel
    )
    run_add(tuner)
    assert tuner.best_config.kwargs == {"BLOCK": 32}


@pytest.mark.parametrize("autotune", both())
def test_positional_reset_to_zero_is_fourth(autotune):
    bench = Bench()
    tuner = autotune(bench.configs(), ["n"], None, ["acc_ptr"], None, None, None, None, None, False, bench)(
        accumulate_kernel
    )
    acc = torch.full((50,), 10.0)
    tuner[grid(50)](acc, torch.ones(50), 50)
    assert torch.equal(acc, torch.ones(50))


# --- names ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("autotune", both())
def test_key_given_as_one_string_keys_on_that_argument(autotune):
    """``key="n"``: upstream iterates the string, which for a one-letter name is that argument."""
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key="n", do_bench=bench)(add_kernel)
    run_add(tuner, 100)
    run_add(tuner, 60)
    assert len(bench.timed) == 8
    assert set(tuner.cache) == {key_for(100), key_for(60)}


def test_key_string_that_is_not_an_argument_is_a_clear_error():
    with pytest.raises(TypeError, match=r"key must be a list of argument names.*'xn'"):
        tdl.autotune(configs=Bench().configs(), key="xn")(add_kernel)


def test_key_string_naming_a_longer_argument_is_that_argument():
    bench = Bench()
    tuner = tdl.autotune(configs=bench.configs(), key="out_ptr", do_bench=bench)(add_kernel)
    run_add(tuner)
    assert tuner.keys == ["out_ptr"]


@pytest.mark.parametrize("what", ["key", "reset_to_zero", "restore_value"])
@pytest.mark.parametrize("autotune", both(since=(3, 9), why="3.9 checks the names"))
def test_unknown_argument_names_are_upstreams_value_error(autotune, what):
    options = {"key": ["n"], what: ["n", "nope"]}
    message = (
        f"{what} contains names that are not kernel arguments: nope. "
        "Valid argument names are: x_ptr, y_ptr, out_ptr, n, BLOCK."
    )
    with pytest.raises(ValueError) as info:
        autotune(configs=Bench().configs(), **options)(add_kernel)
    assert str(info.value) == message


def test_config_parameter_that_is_not_a_kernel_argument_is_an_error():
    configs = [triton.Config({"BLOK": 16}), triton.Config({"BLOCK": 32})]
    with pytest.raises(ValueError) as info:
        tdl.autotune(configs=configs, key=["n"])(add_kernel)
    text = str(info.value)
    assert "'BLOK'" in text and "add_kernel" in text and "BLOCK" in text


def test_backend_options_in_config_kwargs_are_tuned_stored_and_restored():
    """AMD kernels put compile options in Config kwargs (waves_per_eu, matrix_instr_nonkdim, kpack):
    they are neither unknown names at decoration nor, once stored, an invalid entry that a later
    process sets aside and tunes again."""

    def tuner(bench: Bench) -> tdl.Autotuner:
        options = {16: {"waves_per_eu": 2, "matrix_instr_nonkdim": 16, "kpack": 2}, 32: {"waves_per_eu": 0}}
        configs = [
            triton.Config({"BLOCK": block, **extra}, num_warps=1, pre_hook=bench.config_hook)
            for block, extra in options.items()
        ]
        return tdl.autotune(configs=configs, key=["n"], do_bench=bench)(add_kernel)

    first = tuner(Bench())
    run_add(first)
    assert first.last_decision == "tuned" and first.best_config.kwargs == {"BLOCK": 32, "waves_per_eu": 0}
    later_bench = Bench()
    later = tuner(later_bench)  # a later process, in effect: it reads the store at its first miss
    run_add(later)
    assert later.last_decision == "restored" and later_bench.timed == []
    assert later.best_config.kwargs == {"BLOCK": 32, "waves_per_eu": 0}


# --- stacking with @triton.heuristics ---------------------------------------------------------------------


def _alpha(nargs):
    return 3 if nargs["n"] > 50 else 2


@pytest.mark.parametrize("autotune", both())
def test_autotune_over_heuristics(autotune):
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench)(
        triton.heuristics({"ALPHA": _alpha})(scaled_add_kernel)
    )
    for n, alpha in ((100, 3), (40, 2)):
        x, y, out = add_inputs(n)
        tuner[grid(n)](x, y, out, n)
        assert torch.equal(out, (x + y) * alpha)
    assert tuner.best_config.kwargs == {"BLOCK": 32}
    assert len(bench.timed) == 8


@pytest.mark.parametrize("autotune", both())
def test_heuristics_over_autotune(autotune):
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench)(scaled_add_kernel)
    kernel = triton.heuristics({"ALPHA": _alpha})(tuner)
    x, y, out = add_inputs(100)
    kernel[grid(100)](x, y, out, 100)
    assert torch.equal(out, (x + y) * 3)
    assert tuner.best_config.kwargs == {"BLOCK": 32}
    assert len(bench.timed) == 4


# --- .cache and .configs changed after tuning --------------------------------------------------------------


@pytest.mark.parametrize("autotune", both())
def test_configs_and_cache_assigned_after_tuning_take_effect_at_the_next_launch(autotune):
    """Code written for upstream pins a config with ``kernel.configs, kernel.cache = [config], {}``
    (to sweep configs, compare outputs bit for bit), writes a config into ``.cache``, or clears
    ``.cache`` to decide again: each takes effect at the next launch of a key already decided."""
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench)(add_kernel)
    stock = list(tuner.configs)
    run_add(tuner)
    assert bench.launched[-1] == 32
    for config in stock:  # pinned, one config after the other
        tuner.configs, tuner.cache = [config], {}
        run_add(tuner)
        assert bench.launched[-1] == config.kwargs["BLOCK"] == tuner.best_config.kwargs["BLOCK"]
    tuner.configs = [stock[0]]  # one config: launched whatever .cache holds
    run_add(tuner)
    assert bench.launched[-1] == 16
    tuner.configs, tuner.cache = stock, {}  # the stock list again: decided again, the same pick
    run_add(tuner)
    assert bench.launched[-1] == 32
    tuner.cache[key_for(100)] = stock[3]  # a config written into .cache
    run_add(tuner)
    assert bench.launched[-1] == 128
    tuner.cache.clear()
    run_add(tuner)
    assert bench.launched[-1] == 32 and list(tuner.cache) == [key_for(100)]


@pytest.mark.parametrize("autotune", both())
def test_configs_changed_in_place_after_tuning_take_effect_at_the_next_launch(autotune):
    """``kernel.configs[:] = [config]`` and the list's other in-place changes: a single config left is
    launched for every key, a new key chooses among the list as it is, a decided key keeps its config
    while there is a choice (upstream reads the list at every launch)."""
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench)(add_kernel)
    stock = list(tuner.configs)
    run_add(tuner)
    assert bench.launched[-1] == 32
    tuner.configs[:] = [stock[0]]
    run_add(tuner)
    assert bench.launched[-1] == 16 == tuner.best_config.kwargs["BLOCK"]
    tuner.configs.extend(stock[1:])
    run_add(tuner)
    assert bench.launched[-1] == 32
    del tuner.configs[:]
    tuner.configs.append(stock[3])
    run_add(tuner, 40)
    assert bench.launched[-1] == 128


# --- copies -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
@pytest.mark.parametrize("autotune", both())
def test_a_copied_tuner_launches_its_tuned_config_without_tuning_again(autotune, copier):
    """``copy.deepcopy`` of a model or an object that holds a kernel copies the autotuner: the copy
    keeps what was tuned (``.cache``, ``.best_config``) and launches it without benchmarking."""
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench)(add_kernel)
    run_add(tuner)
    copied = copier(tuner)
    assert isinstance(copied, UpstreamAutotuner) and copied is not tuner
    assert list(copied.cache) == [key_for(100)]
    assert copied.cache[key_for(100)].kwargs == {"BLOCK": 32}
    copied_bench = copied.configs[0].pre_hook.__self__  # deepcopy copies the configs and their hooks
    timed = len(copied_bench.timed)
    run_add(copied)
    assert copied.best_config.kwargs == {"BLOCK": 32}
    assert len(copied_bench.timed) == timed  # no tuning
    run_add(copied, 40)  # a new key tunes in the copy
    assert key_for(40) in copied.cache and len(copied_bench.timed) == timed + len(BLOCKS)


@pytest.mark.parametrize("autotune", both())
def test_a_shallow_copy_launches_from_its_own_config_list_and_shares_cache(autotune):
    """``copy.copy`` of a tuner: assigning the copy's ``.configs``/``.cache`` (pinning a config in
    it) leaves the original launching what it decided, and a config written into the ``.cache`` the
    two share (a shallow copy shares the dict, as upstream's copies do) is launched by both."""
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench)(add_kernel)
    stock = list(tuner.configs)
    run_add(tuner)
    copied = copy.copy(tuner)
    copied.configs, copied.cache = [stock[0]], {}
    run_add(copied)
    assert bench.launched[-1] == 16
    run_add(tuner)
    assert bench.launched[-1] == 32 and tuner.best_config.kwargs == {"BLOCK": 32}
    shared = copy.copy(tuner)
    assert shared.cache is tuner.cache
    run_add(shared)  # decided keys are launched from the copy's own table
    shared.cache[key_for(100)] = stock[3]
    run_add(shared)
    assert bench.launched[-1] == 128
    run_add(tuner)
    assert bench.launched[-1] == 128


# --- the default config and meta-parameter conflicts -------------------------------------------------------


@pytest.mark.parametrize("autotune", both())
def test_conflicting_meta_parameter_in_a_benchmark_is_upstreams_value_error(autotune):
    """Passing a tuned meta-parameter in the call: upstream raises "Conflicting meta-parameters";
    ours launches with the caller's values (configuration passthrough) when all are given."""
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench)(add_kernel)
    x, y, out = add_inputs(40)
    if is_ours(autotune):
        tuner[grid(40)](x, y, out, 40, BLOCK=16)
        assert torch.equal(out, x + y) and bench.timed == []
    else:
        with pytest.raises(ValueError, match="Conflicting meta-parameters: BLOCK"):
            tuner[grid(40)](x, y, out, 40, BLOCK=16)


# --- TRITON_PRINT_AUTOTUNING --------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1", "true", "on", " 1", "0"])
@pytest.mark.parametrize("autotune", both())
def test_print_autotuning_is_read_as_the_installed_triton_reads_it(monkeypatch, capsys, autotune, value):
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", value)
    # 3.2 and 3.3 print when os.environ["TRITON_PRINT_AUTOTUNING"] == "1"; 3.4+ ask triton.knobs,
    # which also take true, yes, on and y, in any case
    prints = value == "1" if TRITON < (3, 4) else triton.knobs.autotuning.print
    bench = Bench()
    run_add(autotune(configs=bench.configs(), key=["n"], do_bench=bench)(add_kernel))
    assert ("Triton autotuning for function add_kernel" in capsys.readouterr().out) == prints
    assert prints or value != "1"

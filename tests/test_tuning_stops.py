"""Errors that do not depend on the candidate end tuning at the first one, as upstream's do.

The tuner's ``pre_hook`` and ``post_hook`` (the user's, or the ones ``reset_to_zero`` and
``restore_value`` make), the user's ``do_bench`` and the numerical check's ``reference_fn`` run the
same way for every candidate: when one of them raises, ours raises at once (an ``AutotuningError``
that is also of the error's class, its cause the error itself) instead of trying every candidate.
A candidate's own failure (its config's ``pre_hook``, its launch), even passed on by ``do_bench``,
only rules it out.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import triton
import triton.language as tl
from kernels import add_kernel, block_configs, run_add
from triton.runtime.errors import InterpreterError, OutOfResources

import triton_dejavu_like as tdl
from triton_dejavu_like.measure.bench import Benchmarker

CONFIGS = 4


class CountingBench:
    """A ``do_bench`` that counts its calls and launches the call once; ``fails`` makes it raise an
    error of its own (after the launch), ``result`` is what it answers."""

    def __init__(self, fails: Exception | None = None, result: Any = (1.0, 1.0, 1.0)) -> None:
        self.calls = 0
        self.fails = fails
        self.result = result

    def __call__(self, kernel_call: Callable[[], Any], quantiles: Any = None) -> Any:
        self.calls += 1
        kernel_call()
        if self.fails is not None:
            raise self.fails
        return list(self.result) if isinstance(self.result, tuple) else self.result


def raising_pre_hook(nargs: dict[str, Any], reset_only: bool = False) -> None:
    raise KeyError("acc_ptr")


def raising_post_hook(nargs: dict[str, Any], exception: BaseException | None) -> None:
    raise ValueError("cannot restore")


#: name -> (decorator options, CountingBench's arguments, the error's class, ``stopped_by``, what the
#: message says raised)
STOPS: dict[str, tuple[dict[str, Any], dict[str, Any], type, str, str]] = {
    "pre_hook": ({"pre_hook": raising_pre_hook}, {}, KeyError, "pre_hook", "pre_hook"),
    "post_hook": ({"post_hook": raising_post_hook}, {}, ValueError, "post_hook", "post_hook"),
    # n is an int: the hook these make calls n.zero_() / n.clone(), for every config (as upstream's)
    "reset_to_zero": ({"reset_to_zero": ["n"]}, {}, AttributeError, "pre_hook", "the hook of reset_to_zero"),
    "restore_value": ({"restore_value": ["n"]}, {}, AttributeError, "pre_hook", "the hook of restore_value"),
    "do_bench": ({}, {"fails": TypeError("bad quantiles")}, TypeError, "do_bench", "do_bench"),
    "do_bench-answer": ({}, {"result": None}, TypeError, "do_bench", "do_bench"),  # None is no timing
}


@pytest.mark.parametrize("scenario", list(STOPS))
def test_an_error_of_the_hooks_or_do_bench_ends_tuning_at_the_first_candidate(scenario):
    options, bench_arguments, expected, stopped_by, named = STOPS[scenario]
    bench = CountingBench(**bench_arguments)
    tuner = tdl.autotune(key=["n"], configs=block_configs(), do_bench=bench, **options)(add_kernel)
    with pytest.raises(expected) as info:
        run_add(tuner)
    assert bench.calls == 1  # not one per candidate
    error = info.value
    assert isinstance(error, tdl.AutotuningError) and error.stopped_by == stopped_by
    assert error.error_message.startswith("add_kernel: tuning stopped at the first candidate [BLOCK=16")
    assert f": {named} raised {expected.__name__}" in str(error)
    assert type(error.__cause__) is expected  # the error itself, with its traceback
    assert pickle.loads(pickle.dumps(error)).stopped_by == stopped_by
    assert tuner.cache == {} and not tuner.cache_path().exists()  # nothing decided, nothing stored


def test_the_first_candidates_error_passed_on_by_do_bench_only_rules_it_out():
    """A ``do_bench`` that raises because the launch raised (here wrapping the candidate's error)
    fails with the candidate: that one is ruled out, and tuning goes on."""
    calls: list[int] = []

    def out_of_resources(nargs: dict[str, Any]) -> None:
        raise OutOfResources(nargs["BLOCK"] * 1000, 1000, "shared memory")

    def wrapping_bench(kernel_call: Callable[[], Any], quantiles: Any = None) -> list[float]:
        calls.append(1)
        try:
            kernel_call()
        except Exception as exc:
            raise RuntimeError("the benchmark failed") from exc
        return [1.0, 1.0, 1.0]

    configs = [triton.Config({"BLOCK": 16}, pre_hook=out_of_resources), *block_configs((32, 64))]
    tuner = tdl.autotune(key=["n"], configs=configs, do_bench=wrapping_bench)(add_kernel)
    run_add(tuner)
    assert len(calls) == 3 and tuner.best_config.kwargs == {"BLOCK": 32}


@triton.jit
def small_blocks_fail(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """add_kernel's arguments; a BLOCK below 32 fails its static assertion (under the interpreter,
    at launch: an ``InterpreterError``)."""
    tl.static_assert(BLOCK >= 32)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def test_a_launch_error_that_the_post_hook_sees_is_the_candidates():
    """The post_hook gets a failed launch's exception and returns; ``do_bench`` passes the launch's
    error on: the candidate is ruled out, and tuning goes on."""
    seen: list[type] = []

    def post_hook(nargs: dict[str, Any], exception: BaseException | None) -> None:
        seen.append(type(exception))

    bench = CountingBench()
    tuner = tdl.autotune(key=["n"], configs=block_configs(), do_bench=bench, post_hook=post_hook)(
        small_blocks_fail
    )
    run_add(tuner)
    assert bench.calls == 4 and tuner.best_config.kwargs == {"BLOCK": 32}
    assert seen[0] is InterpreterError and seen[1:] == [type(None)] * 3


def test_a_hook_that_fails_later_stops_tuning_after_the_candidates_that_ran():
    """A hook that works for two candidates, then raises: tuning ends there, nothing is picked."""
    launched: list[int] = []

    def pre_hook(nargs: dict[str, Any], reset_only: bool = False) -> None:
        if len(launched) == 2:
            raise RuntimeError("out of scratch buffers")
        launched.append(nargs["BLOCK"])

    bench = CountingBench()
    tuner = tdl.autotune(key=["n"], configs=block_configs(), do_bench=bench, pre_hook=pre_hook)(add_kernel)
    with pytest.raises(RuntimeError, match=r"stopped at candidate 3 \[BLOCK=64.*out of scratch buffers"):
        run_add(tuner)
    assert bench.calls == 3 and launched == [16, 32]


class TwoStages(Benchmarker):
    """A timer of ours in two stages, as on a GPU: a screen of every candidate, then the finalists."""

    finalists = 2

    def __call__(self, kernel_call: Callable[[], Any], quantiles: Any = None) -> list[float]:
        kernel_call()
        return [1.0, 1.0, 1.0]

    def refine(self, kernel_calls: Any) -> list[list[float]]:
        return [self(call) for call in kernel_calls]


def test_a_hook_failing_while_the_finalists_are_re_measured_stops_tuning(monkeypatch):
    from triton_dejavu_like.measure import recipe

    monkeypatch.setattr(recipe, "make_benchmarker", lambda **timing: TwoStages())
    launched: list[int] = []

    def pre_hook(nargs: dict[str, Any], reset_only: bool = False) -> None:
        if len(launched) == CONFIGS:  # the screen went well
            raise RuntimeError("out of scratch buffers")
        launched.append(nargs["BLOCK"])

    tuner = tdl.autotune(key=["n"], configs=block_configs(), pre_hook=pre_hook)(add_kernel)
    with pytest.raises(RuntimeError, match="stopped after 4 candidates were measured") as info:
        run_add(tuner)
    assert info.value.stopped_by == "pre_hook" and tuner.cache == {}


def test_with_the_numerical_check_a_broken_hook_stops_tuning_before_any_timing():
    """The check runs each candidate once with the hooks before timing it: the hook's error ends
    tuning there."""
    bench = CountingBench()
    tuner = tdl.autotune(
        key=["n"],
        configs=block_configs(),
        do_bench=bench,
        pre_hook=raising_pre_hook,
        numerical_check=True,
    )(add_kernel)
    with pytest.raises(KeyError) as info:
        run_add(tuner)
    assert bench.calls == 0 and info.value.stopped_by == "pre_hook"
    assert "at the first candidate" in str(info.value)


LOG = "TDL_TEST_STOP_LOG"  # the file the hooks below append to (the forked workers' too)


def logging_pre_hook(nargs: dict[str, Any], reset_only: bool = False) -> None:
    with open(os.environ[LOG], "a") as f:
        f.write(f"{os.getpid()}\n")
    raise KeyError("acc_ptr")


def logging_reference(**arguments: Any) -> None:
    with open(os.environ[LOG], "a") as f:
        f.write(f"{os.getpid()}\n")
    raise ValueError("no reference")


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.mark.parametrize("isolated", [False, True], ids=["in_process", "isolated"])
@pytest.mark.parametrize(
    "options, expected, stopped_by",
    [
        ({"pre_hook": logging_pre_hook}, KeyError, "pre_hook"),
        ({"reference_fn": logging_reference}, ValueError, "reference_fn"),
    ],
    ids=["pre_hook", "reference_fn"],
)
def test_the_error_ends_tuning_where_candidates_run(
    tmp_path, monkeypatch, isolated, options, expected, stopped_by
):
    """In process or in an isolated worker (forked under the interpreter): the function runs once,
    the error comes back as the typed error, and the worker is gone."""
    log = tmp_path / "calls"
    monkeypatch.setenv(LOG, str(log))
    bench = CountingBench()
    tuner = tdl.autotune(
        key=["n"], configs=block_configs(), do_bench=bench, use_isolated_process=isolated, **options
    )(add_kernel)
    with pytest.raises(expected) as info:
        run_add(tuner)
    assert len(lines(log)) == 1
    assert (str(os.getpid()) in lines(log)) is not isolated
    assert isinstance(info.value, tdl.AutotuningError) and info.value.stopped_by == stopped_by
    assert multiprocessing.active_children() == []

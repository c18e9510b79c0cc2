"""Errors that do not depend on the candidate end tuning at the first one, as upstream's do.

The tuner's ``pre_hook`` and ``post_hook`` (the user's, or the ones ``reset_to_zero`` and
``restore_value`` make), the user's ``do_bench`` and the numerical check's ``reference_fn`` run the
same way for every candidate: when one of them raises, ours raises at once (an ``AutotuningError``
that is also of the error's class, its cause the error itself) instead of trying every candidate.
So does the launch's grid function, at the first candidate it fails for (upstream lets its error
through too). A candidate's own failure (its config's ``pre_hook``, its launch), even passed on by
``do_bench``, only rules it out.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
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
    assert error.error_message.startswith(
        "kernels.add_kernel: tuning stopped at the first candidate [BLOCK=16"
    )
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


# --- the launch's grid function ---------------------------------------------------------------------


class CountingGrid:
    """A grid function that notes the ``BLOCK`` of each call, and reads ``BLOCK_SIZE`` (a typo for
    ``BLOCK``: a ``KeyError``) for the blocks in ``broken`` (every one by default)."""

    def __init__(self, n: int = 100, broken: Callable[[int], bool] = lambda block: True) -> None:
        self.n, self.broken = n, broken
        self.blocks: list[int] = []

    def __call__(self, meta: dict[str, Any]) -> tuple[int]:
        self.blocks.append(meta["BLOCK"])
        name = "BLOCK_SIZE" if self.broken(meta["BLOCK"]) else "BLOCK"
        return (triton.cdiv(self.n, meta[name]),)


def launch_add(tuner: tdl.Autotuner, grid: Any, n: int = 100) -> None:
    x, y, out = torch.arange(n, dtype=torch.float32), torch.ones(n), torch.empty(n)
    tuner[grid](x, y, out, n)


def assert_stopped_by_the_grid(error: BaseException, where: str = "the first candidate [BLOCK=16") -> None:
    """Raised as an error of the tuner's hooks or of ``do_bench`` is: the grid's ``KeyError``."""
    assert isinstance(error, KeyError) and isinstance(error, tdl.AutotuningError)
    assert error.stopped_by == "grid"
    assert error.error_message.startswith(f"kernels.add_kernel: tuning stopped at {where}")
    assert ": the grid function raised KeyError: 'BLOCK_SIZE'" in str(error)
    assert type(error.__cause__) is KeyError and error.__cause__.args == ("BLOCK_SIZE",)
    assert pickle.loads(pickle.dumps(error)).stopped_by == "grid"


@pytest.mark.parametrize("timer", ["do_bench", "ours"])
def test_a_grid_function_that_raises_ends_tuning_at_the_first_candidate(timer):
    """A typo in the grid function (``META["BLOCK_SIZE"]`` for a config's ``BLOCK``) fails in every
    candidate's launch: as upstream's, tuning ends at the first one, with the user's error."""
    bench = CountingBench()
    space = tdl.ConfigSpace({"BLOCK": [16, 32, 64, 128]}, num_warps=[1, 2])
    options = {"do_bench": bench} if timer == "do_bench" else {}
    tuner = tdl.autotune(key=["n"], config_space=space, **options)(add_kernel)
    grid = CountingGrid()
    with pytest.raises(KeyError) as info:
        launch_add(tuner, grid)
    assert_stopped_by_the_grid(info.value)
    assert grid.blocks == [16]  # one launch of the first candidate, not one per candidate
    assert bench.calls == (1 if timer == "do_bench" else 0)
    assert tuner.cache == {} and not tuner.cache_path().exists()  # nothing decided, nothing stored
    good = CountingGrid(broken=lambda block: False)
    launch_add(tuner, good)  # a later call tunes again
    assert tuner.last_decision == "tuned" and len(tuner.cache) == 1


def test_a_grid_function_that_raises_for_some_configs_stops_tuning_there():
    """Upstream's ``_bench`` lets the grid's error through whichever config it comes with: the
    candidates before it are timed, then tuning ends."""
    bench = CountingBench()
    tuner = tdl.autotune(key=["n"], configs=block_configs(), do_bench=bench)(add_kernel)
    grid = CountingGrid(broken=lambda block: block == 64)
    with pytest.raises(KeyError) as info:
        launch_add(tuner, grid)
    assert_stopped_by_the_grid(info.value, where="candidate 3 [BLOCK=64")
    assert grid.blocks == [16, 32, 64] and bench.calls == 3
    assert tuner.cache == {} and not tuner.cache_path().exists()


def test_the_hooks_and_do_bench_see_the_grids_error_as_upstreams_do():
    """The ``post_hook`` gets the grid's own error and a ``do_bench`` sees it raised by the launch
    (here wrapping it, as it would a candidate's): tuning still ends with the grid's error. A
    ``post_hook`` that raises then is the error raised, as upstream's."""
    seen: list[BaseException | None] = []

    def post_hook(nargs: dict[str, Any], exception: BaseException | None) -> None:
        seen.append(exception)

    def wrapping_bench(kernel_call: Callable[[], Any], quantiles: Any = None) -> list[float]:
        try:
            kernel_call()
        except Exception as exc:
            raise RuntimeError("the benchmark failed") from exc
        return [1.0, 1.0, 1.0]

    tuner = tdl.autotune(key=["n"], configs=block_configs(), do_bench=wrapping_bench, post_hook=post_hook)(
        add_kernel
    )
    with pytest.raises(KeyError) as info:
        launch_add(tuner, CountingGrid())
    assert_stopped_by_the_grid(info.value)
    assert len(seen) == 1 and seen[0] is info.value.__cause__

    tuner = tdl.autotune(key=["n"], configs=block_configs(), post_hook=raising_post_hook)(add_kernel)
    with pytest.raises(ValueError, match=r"stopped at the first candidate.*post_hook raised") as info:
        launch_add(tuner, CountingGrid())
    assert info.value.stopped_by == "post_hook"
    assert type(info.value.__cause__.__context__) is KeyError  # raised while the grid's error was handled


def test_with_the_numerical_check_a_broken_grid_stops_tuning_at_the_first_candidate():
    tuner = tdl.autotune(key=["n"], configs=block_configs(), numerical_check=True)(add_kernel)
    grid = CountingGrid()
    with pytest.raises(KeyError) as info:
        launch_add(tuner, grid)
    assert_stopped_by_the_grid(info.value)
    assert grid.blocks == [16]


def test_a_launch_error_is_still_the_candidates_and_a_grid_tuple_is_unchanged():
    """Only the grid function's own error ends tuning: a kernel that fails for small blocks is ruled
    out for those, with a grid function as with a tuple."""
    for n, grid in ((100, lambda meta: (triton.cdiv(100, meta["BLOCK"]),)), (101, (7,))):
        bench = CountingBench()
        tuner = tdl.autotune(key=["n"], configs=block_configs(), do_bench=bench)(small_blocks_fail)
        launch_add(tuner, grid, n)  # a key of its own each time: tuned, not restored
        assert bench.calls == 4 and tuner.best_config.kwargs == {"BLOCK": 32}  # 16 ruled out, equal times


def test_a_grid_error_after_tuning_is_the_plain_launch_error():
    """Once the key is decided (in memory, or restored from storage by another tuner), a launch with
    a broken grid raises the grid's own error, as a Triton launch does: no tuning error."""
    tuned = tdl.autotune(key=["n"], configs=block_configs(), do_bench=CountingBench())(add_kernel)
    launch_add(tuned, CountingGrid(broken=lambda block: False))
    assert tuned.last_decision == "tuned"
    restored = tdl.autotune(key=["n"], configs=block_configs(), do_bench=CountingBench())(add_kernel)
    for tuner in (tuned, restored):
        grid = CountingGrid()
        with pytest.raises(KeyError) as info:
            launch_add(tuner, grid)
        assert type(info.value) is KeyError and info.value.args == ("BLOCK_SIZE",)
        assert grid.blocks == [tuned.best_config.kwargs["BLOCK"]]  # the chosen config's launch only
    assert restored.last_decision == "restored"


def test_an_error_of_a_grid_that_is_not_the_users_is_the_candidates():
    """An isolated worker started by forkserver/spawn launches with a table of the grids its parent
    computed (the parent stops on the grid function's errors); a grid missing from the table is
    that candidate's failure."""
    from triton_dejavu_like.measure.launch import LaunchContext, LaunchRecord, make_kernel_call

    class Kernel:
        arg_names = ["n", "BLOCK"]

        def run(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
            grid(kwargs)

    def missing(meta: dict[str, Any]) -> tuple[int]:
        raise KeyError("no launch grid was sent for this candidate")

    for users_grid, stops in ((True, True), (False, False)):
        ctx = LaunchContext(
            fn=Kernel(),
            args=(100,),
            kwargs={"grid": missing, "warmup": False},
            nargs={"n": 100},
            pre_hook=lambda nargs, reset_only=False: None,
            post_hook=lambda nargs, exception=None: None,
            benchmarker=Benchmarker(),
            kernel_name="k",
            users_grid=users_grid,
        )
        record = LaunchRecord()
        with pytest.raises(KeyError):
            make_kernel_call(ctx, triton.Config({"BLOCK": 16}), record)()
        assert (record.hook_error is not None) is stops and record.candidate_failed is not stops


GRID_LOG = "TDL_TEST_GRID_LOG"  # the file LoggingGrid appends to (a forked worker's calls too)


class LoggingGrid(CountingGrid):
    """A :class:`CountingGrid` that appends ``pid BLOCK`` to $TDL_TEST_GRID_LOG at each call."""

    def __call__(self, meta: dict[str, Any]) -> tuple[int]:
        with open(os.environ[GRID_LOG], "a") as f:
            f.write(f"{os.getpid()} {meta['BLOCK']}\n")
        return super().__call__(meta)


def grid_calls(path: Path) -> list[tuple[int, int]]:
    """(pid, BLOCK) of each call :class:`LoggingGrid` logged."""
    return [(int(pid), int(block)) for pid, block in zip(*[iter(lines(path))] * 2)]


def log_launch(nargs: dict[str, Any], reset_only: bool = False) -> None:
    """fs_add's pre_hook: appends the pid of each benchmark launch to $TDL_TEST_STOP_LOG, if set."""
    if not reset_only and os.environ.get(LOG):
        with open(os.environ[LOG], "a") as f:
            f.write(f"{os.getpid()}\n")


@tdl.autotune(
    key=["n"],
    configs=block_configs(),
    pre_hook=log_launch,
    use_isolated_process=True,
    isolation_start_method="forkserver",
    isolation_timeout_s=60,
)
@triton.jit
def fs_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """add_kernel, tuned in workers that a fork server starts (they import this module to find it)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@pytest.mark.parametrize("broken", [64, None], ids=["some_configs", "every_config"])
@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_broken_grid_ends_isolated_tuning(tmp_path, monkeypatch, method, broken):
    """Isolated: a forked worker calls the grid function in its launches and sends its error back as
    one that ends tuning; for a forkserver worker this process computes each candidate's grid, and
    the grid function's error ends tuning at that candidate. Either way the error is the typed one,
    raised where the candidate comes, after those before it were timed, and the worker is gone."""
    log, launches = tmp_path / "grid", tmp_path / "launches"
    monkeypatch.setenv(GRID_LOG, str(log))
    monkeypatch.setenv(LOG, str(launches))
    if method == "fork":
        bench = CountingBench()  # one launch per candidate (the worker inherits it)
        tuner = tdl.autotune(key=["n"], configs=block_configs(), do_bench=bench, use_isolated_process=True)(
            add_kernel
        )
    else:  # the grid is computed here, once per candidate
        tuner = fs_add
    n = 100 + (broken or 0)  # a key of its own for each case, as fs_add outlives the test
    grid = LoggingGrid(n, broken=lambda block: broken is None or block == broken)
    with pytest.raises(KeyError) as info:
        launch_add(tuner, grid, n)
    where = "the first candidate [BLOCK=16" if broken is None else "candidate 3 [BLOCK=64"
    error = info.value
    assert isinstance(error, tdl.AutotuningError) and error.stopped_by == "grid"
    fn = tuner.fn.fn if hasattr(tuner.fn, "fn") else tuner.fn  # the Python function under the jit
    assert error.error_message.startswith(f"{fn.__module__}.{fn.__qualname__}: tuning stopped at {where}")
    assert type(error.__cause__) is KeyError and error.__cause__.args == ("BLOCK_SIZE",)
    calls = grid_calls(log)
    blocks = [16] if broken is None else [16, 32, 64]
    assert [block for _, block in calls] == blocks  # each candidate's grid once, up to the broken one
    assert all((pid == os.getpid()) is (method == "forkserver") for pid, _ in calls)
    if method == "forkserver":  # the candidates before the broken one were launched in a worker
        pids = {int(pid) for pid in lines(launches)}
        assert len(pids) == (0 if broken is None else 1) and os.getpid() not in pids
    assert tuner.cache.get((n, "torch.float32", "torch.float32", "torch.float32")) is None
    assert multiprocessing.active_children() == []

"""The compile-and-time pipeline: streamed compiling ahead of timing, batches, failures, budget."""

from __future__ import annotations

import concurrent.futures as cf
import math
import threading
import time

import pytest
import triton

from triton_dejavu_like.measure.isolation.transfer import PackedFailure
from triton_dejavu_like.measure.pipeline import Pipeline
from triton_dejavu_like.search import BatchSearch, Budget, SearchSpace, make_strategy


class FakePool:
    """Compiles in threads; ``release(i)`` lets candidate ``i``'s compile finish (so the test decides
    the order), ``reasons`` makes some fail (as a worker's reason, with no exception to rebuild)."""

    def __init__(self, workers: int, reasons: dict[int, str] | None = None, order: list[int] | None = None):
        self.workers = workers
        self.device = 0
        self.reasons = reasons or {}
        self.submitted: list[int] = []
        self._executor = cf.ThreadPoolExecutor(max_workers=64)
        self._gates: dict[int, threading.Event] = {}
        self.order = order

    def submit(self, call, config):
        index = config.kwargs["I"]
        self.submitted.append(index)
        gate = self._gates.setdefault(index, threading.Event())
        if self.order is None:
            gate.set()

        def compile_it():
            assert gate.wait(10), f"candidate {index} was never released"
            reason = self.reasons.get(index)
            return None if reason is None else PackedFailure(None, reason)

        return self._executor.submit(compile_it)

    def release(self, index: int) -> None:
        self._gates.setdefault(index, threading.Event()).set()

    def compile_started(self, future):  # no worker records starts here: never overdue
        return None

    def restart(self) -> None:
        pass


def candidates(n: int) -> list[triton.Config]:
    return [triton.Config({"I": i, "X": i % 4}) for i in range(n)]


def make_pipeline(n, times, strategy="exhaustive", budget=None, batch_size=4):
    configs = candidates(n)
    space = SearchSpace.from_configs(configs)
    search = BatchSearch(make_strategy(strategy), space, budget or Budget())
    log: list[tuple[str, int]] = []

    def measure(i):
        log.append(("time", i))
        return times[i]

    def rule_out(i, reason):
        log.append(("out", i))
        return math.inf

    def prepare(batch):
        log.append(("compile", tuple(batch)))
        return {}

    pipeline = Pipeline(search, configs, measure, rule_out, prepare, batch_size=batch_size)
    return pipeline, search, log


def test_streamed_times_each_candidate_as_soon_as_it_is_compiled():
    times = [5.0, 1.0, 3.0, 2.0, 4.0, 6.0]
    pipeline, search, log = make_pipeline(6, times, batch_size=3)
    # compiles finish in this order, each once the one before was timed; the pipeline must time
    # them in the same order (one that waited for a batch, or timed in the order handed out, would
    # never see the next compile finish)
    finish = [2, 0, 1, 4, 3, 5]
    pool = FakePool(workers=2, order=finish)

    def release_in_order() -> None:
        for i in finish:
            pool.release(i)
            deadline = time.monotonic() + 10
            while ("time", i) not in log and time.monotonic() < deadline:
                time.sleep(0.005)

    releaser = threading.Thread(target=release_in_order)
    releaser.start()
    pipeline.run_streamed(pool, call=None)
    releaser.join()
    assert [i for kind, i in log if kind == "time"] == finish
    assert search.best() == 1 and len(search.results) == 6 and not search.pending
    assert pipeline.counters.compiled == 6 and pipeline.counters.timed == 6


def test_streamed_keeps_a_batch_compiling_while_it_times_with_a_bounded_backlog():
    pipeline, search, _ = make_pipeline(12, [1.0] * 12, batch_size=3)
    pool = FakePool(workers=1)
    handed_out = []
    submitted_when_timed = []
    original_submit, original_measure = pool.submit, pipeline.measure

    def tracking(call, config):
        handed_out.append(len(search.pending))
        return original_submit(call, config)

    def measure(i):
        submitted_when_timed.append(len(pool.submitted))
        return original_measure(i)

    pool.submit, pipeline.measure = tracking, measure
    pipeline.run_streamed(pool, call=None)
    # the first batch compiled: the next one compiles while the first is timed (a slow first launch
    # must not leave the workers idle), and no more than a batch waits to be timed
    assert submitted_when_timed[0] == 6
    assert max(handed_out) <= 6 and len(search.results) == 12 and not search.pending


def test_streamed_compile_failures_are_ruled_out_without_gpu_time():
    times = [1.0, 2.0, 3.0, 4.0, 5.0]
    pipeline, search, log = make_pipeline(5, times)
    pool = FakePool(
        workers=2, reasons={0: "OutOfResources: out of resource: shared memory", 3: "CompilationError"}
    )
    pipeline.run_streamed(pool, call=None)
    assert sorted(i for kind, i in log if kind == "out") == [0, 3]
    assert sorted(i for kind, i in log if kind == "time") == [1, 2, 4]
    assert search.results[0] == math.inf and search.best() == 1
    assert pipeline.counters.ruled_out == 2


def test_a_candidate_whose_launch_fails_counts_as_ruled_out_not_timed():
    """Candidates compiled, then ruled out when timed (a failing launch, a static assertion under the
    interpreter, a bad time from a do_bench): the progress bar counted them as timed."""
    times = [1.0, math.inf, 3.0, math.inf, 5.0]
    pipeline, _, _ = make_pipeline(5, times)
    pipeline.run_streamed(FakePool(workers=2), call=None)
    assert (pipeline.counters.timed, pipeline.counters.ruled_out) == (3, 2)
    pipeline, _, _ = make_pipeline(5, times)
    pipeline.run_batched()
    assert (pipeline.counters.timed, pipeline.counters.ruled_out) == (3, 2)


def test_streamed_replaces_a_broken_pool_with_started_workers(monkeypatch):
    """A worker that dies breaks its pool: the replacement is started as the tuner starts a pool
    (forked workers after the compiler is warmed, with no thread of ours running), before any
    candidate is submitted to it; the candidates of the broken pool are compiled when timed."""
    from concurrent.futures.process import BrokenProcessPool

    from triton_dejavu_like.measure import pipeline as pipeline_module

    class Broken(FakePool):
        method = "fork"

        def submit(self, call, config):
            future = cf.Future()
            future.set_exception(BrokenProcessPool("a worker died"))
            return future

    class Replacement(FakePool):
        method = "fork"
        started = False

        def start(self):
            self.started = True

        def submit(self, call, config):
            assert self.started, "a candidate was submitted to a pool that was never started"
            return super().submit(call, config)

    replacement = Replacement(workers=2)
    monkeypatch.setattr(pipeline_module.CompilePool, "shared", classmethod(lambda cls, d, m: replacement))
    pipeline, search, log = make_pipeline(8, [float(8 - i) for i in range(8)], batch_size=3)
    pipeline.run_streamed(Broken(workers=2), call=None)
    assert replacement.started and replacement.submitted
    assert sorted(i for kind, i in log if kind == "time") == list(range(8))  # each timed once
    assert search.best() == 7 and not search.pending


def test_streamed_an_error_that_ends_tuning_cancels_the_compiles_still_queued():
    """The pool is the process's and serves later runs: the compiles of a run that ends with an
    error (one that does not depend on the candidate) must not stay queued in it."""

    class Queued(FakePool):
        """Candidate 0 is compiled at once; the others wait in the queue (never started)."""

        def __init__(self) -> None:
            super().__init__(workers=2)
            self.futures: list[cf.Future] = []

        def submit(self, call, config):
            future: cf.Future = cf.Future()
            if config.kwargs["I"] == 0:
                future.set_result(None)
            self.futures.append(future)
            return future

    class Stopped(Exception):
        pass

    pipeline, _, _ = make_pipeline(8, [1.0] * 8, batch_size=3)

    def measure(i):
        raise Stopped("the tuner's pre_hook raised")

    pipeline.measure = measure
    pool = Queued()
    with pytest.raises(Stopped):
        pipeline.run_streamed(pool, call=None)
    queued = pool.futures[1:]
    assert queued and all(future.cancelled() for future in queued)


class CrashingPool:
    """A process pool whose worker dies on the candidates in ``crashers``: every candidate in the
    pool then fails with BrokenProcessPool (those compiling and those queued), as in
    ProcessPoolExecutor. The others compile after ``delay_s``."""

    method = "fork"

    def __init__(self, crashers: set[int], pools: list[CrashingPool], delay_s: float = 0.01):
        self.crashers = crashers
        self.device = 0
        self.delay_s = delay_s
        self.broken = False
        self.submitted: list[int] = []
        self.compiled: list[int] = []
        self._futures: list[cf.Future] = []
        self._lock = threading.Lock()
        pools.append(self)

    def start(self) -> None:
        pass

    def restart(self) -> None:
        pass

    def compile_started(self, future):  # no worker records starts here: never overdue
        return None

    def submit(self, call, config):
        from concurrent.futures.process import BrokenProcessPool

        index = config.kwargs["I"]
        with self._lock:
            if self.broken:
                raise BrokenProcessPool("the pool is broken")
            self.submitted.append(index)
            future: cf.Future = cf.Future()
            self._futures.append(future)
        if index in self.crashers:
            threading.Timer(self.delay_s, self._crash).start()
        else:
            threading.Timer(self.delay_s * 3, self._finish, (future, index)).start()
        return future

    def _finish(self, future: cf.Future, index: int) -> None:
        with self._lock:
            if not future.done():
                self.compiled.append(index)
                future.set_result(None)

    def _crash(self) -> None:
        from concurrent.futures.process import BrokenProcessPool

        with self._lock:
            self.broken = True
            for future in self._futures:
                if not future.done():
                    future.set_exception(BrokenProcessPool("a process in the pool was terminated abruptly"))


def run_through_pools(monkeypatch, make_pool, n):
    """An exhaustive streamed search over ``n`` candidates (candidate ``i`` takes ``n - i`` ms,
    batch 4) compiled by ``make_pool()``, which also makes each pool that replaces a broken one: the
    search, the log, why candidates were ruled out, and the first pool."""
    from triton_dejavu_like.measure import pipeline as pipeline_module

    monkeypatch.setattr(pipeline_module.CompilePool, "shared", classmethod(lambda cls, d, m: make_pool()))
    reasons: dict[int, str] = {}
    pipeline, search, log = make_pipeline(n, [float(n - i) for i in range(n)], batch_size=4)
    pipeline.rule_out = lambda i, reason: reasons.setdefault(i, reason) and math.inf
    first = make_pool()
    pipeline.run_streamed(first, call=None)
    return search, log, reasons, first


@pytest.mark.parametrize("crashers", [{5}, {2, 9}, set()], ids=["one", "two", "none"])
def test_a_candidate_that_crashes_compile_workers_is_ruled_out_never_compiled_here(monkeypatch, crashers):
    """A config that crashes the compiler ends a worker every time: it is ruled out with its reason
    and never timed (timing would compile it in the tuning process, and the crash would end the
    program); the candidates that were in the broken pools with it, however the breaks coincide,
    are compiled again in workers and timed, each once."""
    pools: list[CrashingPool] = []
    search, log, reasons, _ = run_through_pools(monkeypatch, lambda: CrashingPool(crashers, pools), 16)

    timed = [i for kind, i in log if kind == "time"]
    assert sorted(timed) == sorted(set(range(16)) - crashers)  # every other candidate, once
    assert set(timed) <= {i for pool in pools for i in pool.compiled}  # compiled by workers
    assert set(reasons) == crashers and all("compile worker died" in r for r in reasons.values())
    assert all(search.results[i] == math.inf for i in crashers)
    assert not search.pending and search.best() == max(set(range(16)) - crashers)
    assert len(pools) <= 1 + 3 * len(crashers)  # a crasher breaks three pools at most


def test_a_pool_broken_once_rules_nothing_out(monkeypatch):
    """A worker that dies once (killed from outside, say) costs nothing: every candidate of its pool
    is compiled again in the new pool and timed."""
    from triton_dejavu_like.measure import pipeline as pipeline_module

    pools: list[CrashingPool] = []
    monkeypatch.setattr(
        pipeline_module.CompilePool, "shared", classmethod(lambda cls, d, m: CrashingPool(set(), pools))
    )
    pipeline, search, log = make_pipeline(12, [1.0] * 12, batch_size=4)
    first = CrashingPool({3}, pools)  # only the first pool dies, on candidate 3
    pipeline.run_streamed(first, call=None)
    assert sorted(i for kind, i in log if kind == "time") == list(range(12))
    assert not [i for kind, i in log if kind == "out"] and len(pools) == 2
    assert not search.pending and len(search.results) == 12
    assert 3 in pools[1].compiled  # compiled again in a worker, not in this process


class HangingPool(CrashingPool):
    """A process pool whose compiles of the candidates in ``hangers`` take ``hang_s`` (a compiler in
    a loop) unless :meth:`kill` stops its workers; each compile starts when submitted."""

    def __init__(self, hangers: set[int], pools: list[CrashingPool], workers: int = 4, hang_s: float = 5.0):
        super().__init__(set(), pools)
        self.hang_s = hang_s
        self.hangers = hangers
        self.workers = workers
        self.killed = False
        self.started: dict[cf.Future, float] = {}

    def submit(self, call, config):
        index = config.kwargs["I"]
        if index not in self.hangers:
            future = super().submit(call, config)
        else:
            with self._lock:
                self.submitted.append(index)
                future = cf.Future()
                self._futures.append(future)
            threading.Timer(self.hang_s, self._finish, (future, index)).start()
        self.started[future] = time.monotonic()
        return future

    def compile_started(self, future):
        return self.started.get(future)

    def kill(self) -> None:
        self.killed = True
        self._crash()


@pytest.mark.parametrize("hangers", [{6}, {1, 2}], ids=["one", "two-at-once"])
def test_a_compile_that_overruns_its_time_is_ruled_out_and_the_others_compile_again(monkeypatch, hangers):
    """A compiler that hangs must not hang tuning: once a compile has run for
    TRITON_DEJAVU_COMPILE_TIMEOUT, the pool's workers are stopped, that candidate is ruled out with a
    reason naming the variable, and the candidates that were compiling beside it go to fresh workers
    without counting against them (nothing else is ruled out)."""
    monkeypatch.setenv("TRITON_DEJAVU_COMPILE_TIMEOUT", "0.3")
    pools: list[CrashingPool] = []
    search, log, reasons, first = run_through_pools(monkeypatch, lambda: HangingPool(hangers, pools), 12)

    timed = [i for kind, i in log if kind == "time"]
    assert sorted(timed) == sorted(set(range(12)) - hangers)  # every other candidate, once
    assert set(reasons) == hangers
    assert all("TRITON_DEJAVU_COMPILE_TIMEOUT" in reason for reason in reasons.values()), reasons
    assert first.killed and not pools[-1].killed
    assert len(pools) == 2  # hangers compiling at once are blamed together: one pool stopped
    assert not search.pending and search.best() == 11


def test_streamed_bayesian_search_proposes_in_batches_and_learns_as_results_arrive():
    pytest.importorskip("smac")
    n = 300
    values = [abs(i % 37 - 18) + (i % 11) * 0.1 + 1 for i in range(n)]
    configs = [triton.Config({"A": i % 20, "B": i // 20}) for i in range(n)]
    space = SearchSpace.from_configs(configs)
    search = BatchSearch(make_strategy("bayesian"), space, Budget(max_share=0.2, seed=3))
    timed = []

    def measure(i):
        timed.append(i)
        return values[i]

    class Pool(FakePool):
        def submit(self, call, config):
            return self._executor.submit(lambda: None)

    pipeline = Pipeline(search, configs, measure, lambda i, r: math.inf, lambda b: {}, batch_size=8)
    pipeline.run_streamed(Pool(workers=8), call=None)
    assert len(timed) == len(set(timed)) == search.limit == 60
    assert not search.pending


def test_batched_compiles_each_batch_before_timing_it():
    pipeline, search, log = make_pipeline(7, [float(i) for i in range(7)], batch_size=3)
    pipeline.run_batched()
    kinds = [kind for kind, _ in log]
    assert kinds == ["compile", "time", "time", "time"] * 2 + ["compile", "time"]
    assert search.best() == 0


def test_batched_stops_timing_when_the_time_budget_is_spent(clock):
    def slow(i):
        clock.advance(1.0)  # each timing takes one (fake) second
        return 1.0

    configs = candidates(20)
    search = BatchSearch(make_strategy("random"), SearchSpace.from_configs(configs), Budget(max_time_s=3.5))
    pipeline = Pipeline(search, configs, slow, lambda i, r: math.inf, lambda b: {}, batch_size=20)
    pipeline.run_batched()  # the whole batch was handed out at once: the rest is given back untimed
    assert len(search.results) == 4
    assert not search.pending and search.done


@pytest.mark.parametrize(
    ("source", "harmless"),
    [
        (
            '"""doc"""\nimport os\nX = 3\ndef main():\n    pass\nif __name__ == "__main__":\n    main()\n',
            True,
        ),
        ("import torch\nSIZE = torch.Size([2])\nclass A:\n    pass\n", True),
        ("import os\nprint('work at import time')\n", False),
        ("for i in range(3):\n    pass\n", False),
        ("import sys\nif len(sys.argv) > 1:\n    print(sys.argv)\n", False),
        ("import sys\nif sys.platform == 'linux':\n    X = 1\nelse:\n    X = 2\n", True),
        ("try:\n    import numpy\nexcept ImportError:\n    numpy = None\n", True),
    ],
)
def test_compile_workers_are_used_only_when_rerunning_the_main_script_is_harmless(
    tmp_path, monkeypatch, source, harmless
):
    """Multiprocessing re-imports the main script in every worker it starts: top-level work would run
    again there, so the tuner then compiles in threads."""
    import sys
    import types

    from triton_dejavu_like.measure.main_script import main_reimport_is_harmless

    script = tmp_path / "script.py"
    script.write_text(source)
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    main.__spec__ = None
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert main_reimport_is_harmless() is harmless
    main.__spec__ = object()  # python -m: multiprocessing does not re-run the main module
    assert main_reimport_is_harmless()


@pytest.mark.parametrize(("options", "total"), [({}, None), ({"search_max_share": 0.5}, 40)])
def test_the_progress_bar_of_an_adaptive_search_counts_without_a_total(monkeypatch, options, total):
    """An adaptive search stops when more candidates are unlikely to pay: its bar showed a share of the
    whole space (``183/720``, 26%) and an end time, then vanished well before either."""
    from kernels import FakeBench, run_add, tuned_add

    from triton_dejavu_like.tuner import tuning

    totals = []
    real = tuning.progress_bar
    monkeypatch.setattr(tuning, "progress_bar", lambda t, d: (totals.append(t), real(t, d))[1])
    configs = [
        triton.Config({"BLOCK": b}, num_warps=w, num_stages=s)
        for b in (16, 32)
        for w in (1, 2, 4, 8)
        for s in range(1, 11)
    ]
    run_add(tuned_add(FakeBench(), configs=configs, use_random_search=True, **options))
    assert totals == [total]

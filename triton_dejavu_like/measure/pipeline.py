"""The compile-and-time pipeline: candidates are compiled ahead of the GPU and each is timed as soon
as it is compiled, so neither the GPU nor the compiler waits while there is work.

The search (:class:`~triton_dejavu_like.search.BatchSearch`) hands out candidate indices in batches
(``ask``) and learns each result as it arrives (``tell``). Two ways to compile:

- **streamed** (a :class:`~.compile_pool.CompilePool` of worker processes): the pipeline keeps the
  workers busy with the next candidates while this process times the ones already compiled; a
  candidate that does not compile, or cannot run on the device, is ruled out with its error (as
  the worker raised it, rebuilt here) and no GPU time;
- **batched** (threads, the interpreter, isolated workers): each batch the search hands out is
  compiled together (``Evaluator.prepare``), then timed one by one.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from .. import _env
from .._compat import Config
from .._log import log
from .compile_call import CallSpec, Unsupported
from .compile_pool import CompilePool, replaced
from .isolation.transfer import PackedFailure
from .launch import Failure
from .precompile import cancelled_on_error


@dataclass
class Counters:
    """What the progress bar shows: compiled, timed, ruled out, and the best time so far."""

    compiled: int = 0
    timed: int = 0
    ruled_out: int = 0
    best_ms: float = float("inf")

    def postfix(self) -> dict[str, Any]:
        best = f"{self.best_ms:.4g} ms" if self.best_ms < float("inf") else "-"
        return {"compiled": self.compiled, "timed": self.timed, "ruled out": self.ruled_out, "best": best}


@dataclass
class Pipeline:
    """Runs one search to its end. ``measure(i)`` times candidate ``i`` (compiling it in this process
    if needed) and returns its median in ms (``inf`` if it failed); ``rule_out(i, failure)`` records a
    candidate that cannot run (its error, or a worker's reason); ``prepare(indices)`` compiles a batch
    in this process (threads) and returns the ones that failed with their errors."""

    search: Any  # BatchSearch
    candidates: Sequence[Config]
    measure: Callable[[int], float]
    rule_out: Callable[[int, Failure], float]
    prepare: Callable[[list[int]], dict[int, Failure]]
    batch_size: int
    on_progress: Callable[[Counters], None] = lambda counters: None
    counters: Counters = field(default_factory=Counters)

    def _tell(self, index: int, value: float, *, timed: bool) -> None:
        if timed and value < math.inf:  # a launch that failed was ruled out when it was timed
            self.counters.timed += 1
        else:
            self.counters.ruled_out += 1
        self.counters.best_ms = min(self.counters.best_ms, value)
        self.search.tell(index, value)
        self.on_progress(self.counters)

    def run_batched(self, first_batch: int | None = None) -> None:
        """Ask a batch, compile it together, time it; until the search is over."""
        size = first_batch or self.batch_size
        while True:
            batch = self.search.ask(size)
            size = self.batch_size
            if not batch:
                if self.search.pending:  # cannot happen here (every batch is told), but be safe
                    raise RuntimeError("the search waits for results that were never measured")
                return
            failures = self.prepare(batch)
            self.counters.compiled += len(batch) - len(failures)
            for position, index in enumerate(batch):
                if position and self.search.out_of_time:  # the time budget is checked per measurement
                    for unmeasured in batch[position:]:
                        self.search.cancel(unmeasured)
                    break
                failure = failures.get(index)
                if failure is not None:
                    self._tell(index, self.rule_out(index, failure), timed=False)
                else:
                    self._tell(index, self.measure(index), timed=True)

    def run_streamed(self, pool: CompilePool, call: CallSpec) -> None:
        """Keep ``batch_size`` candidates compiling in ``pool`` while this process times the
        compiled ones, in the order they finish compiling. A worker that dies breaks the pool, which
        is replaced; its candidates are tried again as :class:`_Retries` says, never compiled in
        this process, since the crash would end the program. A compile that takes longer than
        ``TRITON_DEJAVU_COMPILE_TIMEOUT`` stops the pool's workers (a compiler that hangs): that
        candidate is ruled out, the others that were compiling go again to fresh workers. An
        exception that ends the run (one that ends tuning, Ctrl-C) cancels the compiles not started
        yet: the pool serves later runs."""
        _Stream(self, pool, call).run()


#: How often a streamed run waiting for compiles looks for one that overran the compile timeout
#: (at most; a quarter of a shorter timeout).
OVERDUE_CHECK_S = 1.0


class _Stream:
    """One streamed run of a :class:`Pipeline`: the compiles in flight (future -> (candidate, the
    pool it went to)), the compiled candidates waiting to be timed, the retries after crashes, and
    the compiles that overran their time."""

    def __init__(self, pipeline: Pipeline, pool: CompilePool, call: CallSpec) -> None:
        self.pipeline = pipeline
        self.pool = pool
        self.call = call
        self.flight: dict[cf.Future[PackedFailure | None], tuple[int, CompilePool]] = {}
        self.ready: collections.deque[int] = collections.deque()
        self.retries = _Retries()
        self.overdue = _Overdue(_env.compile_timeout_s())

    def run(self) -> None:
        p, flight, ready, retries = self.pipeline, self.flight, self.ready, self.retries
        with cancelled_on_error(flight):  # an error that ends tuning leaves no compile queued
            while True:
                # compiles continue while this process times (its first launch may take most of a
                # second); a backlog of compiled candidates beyond a batch holds new ones back
                free = min(p.batch_size - len(flight), 2 * p.batch_size - len(flight) - len(ready))
                retry, free = retries.next([i for i, _ in flight.values()], free)
                if retry is not None:
                    self.submit(retry)
                if free > 0:
                    for index in p.search.ask(free):
                        self.submit(index)
                if ready:
                    index = ready.popleft()
                    p._tell(index, p.measure(index), timed=True)
                    continue
                if not flight:
                    if retries:
                        continue
                    return  # nothing compiling, nothing to time, and the search hands out nothing more
                self.wait()

    def wait(self) -> None:
        """Wait for a compile to finish, and collect the finished ones; meanwhile, stop the workers
        of a pool whose compile overran the timeout (its compiles then finish, broken)."""
        while True:
            stuck = self.overdue.find(self.flight)
            if stuck is not None:
                stuck.kill()
                self.replace(stuck)
            done, _ = cf.wait(self.flight, timeout=self.overdue.check_s, return_when=cf.FIRST_COMPLETED)
            for future in done:
                self.collect(future)
            if done:
                return

    def replace(self, broken: CompilePool) -> None:
        if broken is self.pool:  # the first sign of a break replaces the pool
            self.pool = replaced(self.pool)

    def submit(self, index: int) -> None:
        p = self.pipeline
        for _ in range(2):
            try:
                self.flight[self.pool.submit(self.call, p.candidates[index])] = (index, self.pool)
                return
            except BrokenProcessPool as exc:  # it broke before one of its futures said so
                self.replace(self.pool)
                problem: Exception = exc
            except (Unsupported, RuntimeError) as exc:  # RuntimeError: the pool was shut down
                problem = exc
                break
        if self.retries.struck(index):  # a worker died with it: it is not compiled here
            reason = f"no compile worker took it again after one died with it ({problem})"
            p._tell(index, p.rule_out(index, reason), timed=False)
        else:
            log.debug("compiling candidate %d in this process (%s)", index, problem)
            self.ready.append(index)

    def collect(self, future: cf.Future[PackedFailure | None]) -> None:
        """A finished compile: its candidate waits to be timed, is ruled out, or goes again."""
        p = self.pipeline
        index, owner = self.flight.pop(future)
        failure: Failure | None
        try:
            packed = future.result()
            failure = None if packed is None else packed.failure()
        except BrokenProcessPool:  # a worker died, with this candidate in its pool
            self.replace(owner)
            if not self.overdue.stopped(owner):
                failure = self.retries.broke(index)
            elif (failure := self.overdue.verdict(index)) is None:  # stopped for another's compile
                self.submit(index)
            if failure is None:
                return
        except Exception as exc:  # the worker could not even try (e.g. the kernel's module)
            log.debug("compile worker failed on candidate %d: %s", index, exc)
            failure = None
        if failure is None:
            p.counters.compiled += 1
            self.ready.append(index)
        else:
            p._tell(index, p.rule_out(index, failure), timed=False)


@dataclass
class _Retries:
    """The candidates that were in a compile pool when one of its workers died (a crash in the
    compiler). Which of them ended the worker is unknown, so each is compiled again in a worker: one
    at a time beside the others after one break; after a second, with nothing else in flight; a
    third break rules it out."""

    strikes: collections.Counter[int] = field(default_factory=collections.Counter)
    suspects: collections.deque[int] = field(default_factory=collections.deque)  # one break
    alone: collections.deque[int] = field(default_factory=collections.deque)  # two breaks

    def __bool__(self) -> bool:
        return bool(self.suspects or self.alone)

    def struck(self, index: int) -> bool:
        """Whether a worker died with ``index`` in its pool."""
        return self.strikes[index] > 0

    def broke(self, index: int) -> str | None:
        """A pool broke with ``index`` in it: None while it gets another try, else why it is ruled out."""
        self.strikes[index] += 1
        if self.strikes[index] == 1:
            self.suspects.append(index)
        elif self.strikes[index] == 2:
            self.alone.append(index)
        else:
            return "a compile worker died compiling it, with nothing else in flight"
        return None

    def next(self, flying: list[int], free: int) -> tuple[int | None, int]:
        """The candidate to compile again now (None: none yet), and how many of the ``free`` places
        in flight are left for new ones, with ``flying`` the candidates compiling."""
        worst = max((self.strikes[i] for i in flying), default=0)
        if self.alone or worst > 1:  # the flight drains, then one goes alone
            return (self.alone.popleft() if self.alone and not flying else None), 0
        if free > 0 and self.suspects and worst == 0:
            return self.suspects.popleft(), free - 1
        return None, free


@dataclass
class _Overdue:
    """Compiles that overran ``timeout_s`` in a worker, timed from when the worker started each
    (:meth:`CompilePool.compile_started`), and the pools stopped for them."""

    timeout_s: float
    blamed: dict[int, float] = field(default_factory=dict)  # candidate -> seconds it had compiled
    pools: list[CompilePool] = field(default_factory=list)

    @property
    def check_s(self) -> float:
        return min(OVERDUE_CHECK_S, self.timeout_s / 4)

    def find(self, flight: dict[cf.Future[Any], tuple[int, CompilePool]]) -> CompilePool | None:
        """The pool to stop (its overdue candidates are blamed), or None while no compile is overdue."""
        now = time.monotonic()
        late: dict[CompilePool, list[tuple[int, float]]] = {}
        for future, (index, pool) in flight.items():
            began = pool.compile_started(future)
            if began is not None and now - began > self.timeout_s and not self.stopped(pool):
                late.setdefault(pool, []).append((index, now - began))
        if not late:
            return None
        pool, overran = next(iter(late.items()))
        self.blamed.update(overran)
        log.debug("%d compiles overran %g s: their workers are stopped", len(overran), self.timeout_s)
        self.pools.append(pool)
        return pool

    def stopped(self, pool: CompilePool) -> bool:
        """Whether ``pool`` was stopped here (its other candidates are not to blame)."""
        return any(pool is stopped for stopped in self.pools)

    def verdict(self, index: int) -> str | None:
        """Why ``index`` is ruled out, if its compile overran the timeout (None: it did not)."""
        if index not in self.blamed:
            return None
        return (
            f"its compile took over {self.timeout_s:g} s ({_env.COMPILE_TIMEOUT}); the compile "
            f"worker was stopped after {self.blamed[index]:.0f} s"
        )

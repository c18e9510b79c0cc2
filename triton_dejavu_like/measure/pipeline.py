"""The compile-and-time pipeline: candidates are compiled ahead of the GPU and each is timed as soon
as it is compiled, so neither the GPU nor the compiler waits while there is work.

The search (:class:`~triton_dejavu_like.search.BatchSearch`) hands out candidate indices in batches
(``ask``) and learns each result as it arrives (``tell``). Two ways to compile:

- **streamed** (a :class:`~.compile_pool.CompilePool` of worker processes): the pipeline keeps the
  workers busy with the next candidates while this process times the ones already compiled; a
  candidate that does not compile, or cannot run on the device, is ruled out with its reason and no
  GPU time;
- **batched** (threads, the interpreter, isolated workers): each batch the search hands out is
  compiled together (``Evaluator.prepare``), then timed one by one.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from .._compat import Config
from .._log import log
from .compile_pool import CallSpec, CompilePool, Unsupported


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
    if needed) and returns its median in ms (``inf`` if it failed); ``rule_out(i, reason)`` records a
    candidate that cannot run; ``prepare(indices)`` compiles a batch in this process (threads) and
    returns the ones that failed with their reasons."""

    search: Any  # BatchSearch
    candidates: Sequence[Config]
    measure: Callable[[int], float]
    rule_out: Callable[[int, str], float]
    prepare: Callable[[list[int]], dict[int, str]]
    batch_size: int
    on_progress: Callable[[Counters], None] = lambda counters: None
    counters: Counters = field(default_factory=Counters)

    def _tell(self, index: int, value: float, *, timed: bool) -> None:
        if timed:
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
                reason = failures.get(index)
                if reason is not None:
                    self._tell(index, self.rule_out(index, reason), timed=False)
                else:
                    self._tell(index, self.measure(index), timed=True)

    def run_streamed(self, pool: CompilePool, call: CallSpec) -> None:
        """Keep ``batch_size`` candidates compiling in ``pool`` while this process times the
        compiled ones, in the order they finish compiling.

        A worker that dies (a crash in the compiler) breaks the pool, which is replaced. Which of
        the candidates in it ended the worker is unknown, so each is compiled again in a worker: one
        at a time beside the others; one that is in a pool that breaks again is compiled once more
        with nothing else in flight, and ruled out if that pool breaks too. A candidate is never
        compiled in this process after a worker died with it, since the crash would end the program.
        """
        flight: dict[cf.Future[str | None], tuple[int, CompilePool]] = {}
        ready: collections.deque[int] = collections.deque()
        strikes: collections.Counter[int] = collections.Counter()  # breaks a candidate was in
        suspects: collections.deque[int] = collections.deque()  # one break: beside the others
        alone: collections.deque[int] = collections.deque()  # two breaks: with nothing else

        def replace(broken: CompilePool) -> None:
            nonlocal pool
            if broken is pool:  # the first sign of a break replaces the pool
                pool.restart()
                pool = CompilePool.shared(pool.device, pool.method) or pool
                pool.start()  # as the tuner starts one: forked workers after warming

        def submit(index: int) -> None:
            for _ in range(2):
                try:
                    flight[pool.submit(call, self.candidates[index])] = (index, pool)
                    return
                except BrokenProcessPool as exc:  # it broke before one of its futures said so
                    replace(pool)
                    problem: Exception = exc
                except (Unsupported, RuntimeError) as exc:  # RuntimeError: the pool was shut down
                    problem = exc
                    break
            if strikes[index]:  # a worker died with it: it is not compiled here
                reason = f"no compile worker took it again after one died with it ({problem})"
                self._tell(index, self.rule_out(index, reason), timed=False)
            else:
                log.debug("compiling candidate %d in this process (%s)", index, problem)
                ready.append(index)

        while True:
            # compiles continue while this process times (its first launch may take most of a
            # second); a backlog of compiled candidates beyond a batch holds new ones back
            free = min(self.batch_size - len(flight), 2 * self.batch_size - len(flight) - len(ready))
            flying = [strikes[i] for i, _ in flight.values()]
            if alone or max(flying, default=0) > 1:  # the flight drains, then one goes alone
                if alone and not flight:
                    submit(alone.popleft())
                free = 0
            elif free > 0 and suspects and max(flying, default=0) == 0:
                submit(suspects.popleft())
                free -= 1
            if free > 0:
                for index in self.search.ask(free):
                    submit(index)
            if ready:
                index = ready.popleft()
                self._tell(index, self.measure(index), timed=True)
                continue
            if not flight:
                if suspects or alone:
                    continue
                return  # nothing compiling, nothing to time, and the search hands out nothing more
            done, _ = cf.wait(flight, return_when=cf.FIRST_COMPLETED)
            for future in done:
                index, owner = flight.pop(future)
                try:
                    reason = future.result()
                except BrokenProcessPool:  # a worker died, with this candidate in its pool
                    replace(owner)
                    strikes[index] += 1
                    if strikes[index] < 3:
                        (suspects if strikes[index] == 1 else alone).append(index)
                        continue
                    reason = "a compile worker died compiling it, with nothing else in flight"
                except Exception as exc:  # the worker could not even try (e.g. the kernel's module)
                    log.debug("compile worker failed on candidate %d: %s", index, exc)
                    reason = None
                if reason is None:
                    self.counters.compiled += 1
                    ready.append(index)
                else:
                    self._tell(index, self.rule_out(index, reason), timed=False)

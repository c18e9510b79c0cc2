"""One tuning run: search the candidates for one key, measure them, pick, and make the stored entry.

The run builds the search (a strategy over candidate indices, with its budget), opens an evaluator
for the call through :func:`~triton_dejavu_like.measure.open_evaluator` (in process or isolated),
runs the compile-and-time :class:`~triton_dejavu_like.measure.pipeline.Pipeline` until the search is
over, re-measures the finalists, and returns an :class:`Outcome` with the winner and its
:class:`~triton_dejavu_like.store.StoredEntry`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import _env
from .._compat import Config
from .._log import DejavuConfigWarning, DejavuStorageWarning, log, warn_once
from ..codec import EncodingError, config_id, describe_config
from ..measure import (
    Benchmarker,
    Evaluator,
    Failure,
    KernelRecipe,
    LaunchContext,
    TuningStopped,
    one_line_reason,
    open_evaluator,
)
from ..measure.compile_pool import CompilePool, Streamed, compile_in_processes, compiled_safely
from ..measure.pipeline import Counters, Pipeline
from ..measure.progress import progress_bar
from ..search import BatchSearch, Budget, SearchSpace, make_strategy
from ..store import InvalidEntry, StoredEntry
from .config_ids import CandidateSet
from .errors import AutotuningError, candidates_failed
from .key import TuningKey
from .trial import Outcome, Trial

#: How many of the best candidates an entry keeps with their timings.
TOP_K = 5
#: How many ruled-out candidates an entry lists with their reasons.
MAX_RULED_OUT = 64
#: With the numerical check (and no ``reference_fn``), the first candidates of the list are run
#: untimed, at most this many, until one writes the outputs: that one is the reference, whatever
#: order the search measures candidates in, and on every rank of a group (one launch when the first
#: config runs and writes, as it should).
REFERENCE_TRIES = 3


@dataclass
class TuningRun:
    """Tunes one key of one kernel: ``recipe`` says how to measure, ``strategy``/``budget`` how to search."""

    recipe: KernelRecipe
    strategy: str
    budget: Budget
    benchmarker: Benchmarker
    interpreted: bool

    def run(
        self,
        key: TuningKey,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        candidates: CandidateSet,
        *,
        warm_start: Sequence[int] = (),
        candidates_hash: str,
        reference: Sequence[Config] | None = None,
    ) -> Outcome:
        """Tune ``key`` over ``candidates``; ``candidates_hash`` is stored with the result (the hash
        of the list before the miss policy, or a rank's share, left what is tuned). ``reference``:
        configs that the numerical check tries, in order and untimed, as its reference before any
        candidate is measured (see :meth:`_adopt_reference`); None: the first
        :data:`REFERENCE_TRIES` candidates."""
        name = self.recipe.kernel_name
        if _env.split_cache():
            warn_once(
                DejavuConfigWarning,
                "process",
                "%s is not supported: triton_dejavu_like keeps Triton's cache manager; set "
                "TRITON_CACHE_DIR per process for separate compile caches",
                _env.SPLIT_CACHE,
            )
        space = candidates.space
        trial = Trial(name, candidates.configs, candidates.order)
        start = time.perf_counter()
        ctx = self.recipe.context(args, kwargs, interpreted=self.interpreted, benchmarker=self.benchmarker)
        for argument in self.recipe.isolation.ignored():
            warn_once(
                DejavuConfigWarning,
                f"{name}:{argument}",
                "%s: %s has no effect: candidates are not measured in an isolated process "
                "(use_isolated_process=True or %s=1)",
                name,
                argument,
                _env.USE_ISOLATED_PROCESS,
            )
        with CompilePool.in_use():  # a pool that no run uses for a while is shut down
            search = self._measure(key, ctx, trial, space, reference, warm_start)
        duration = time.perf_counter() - start
        best = trial.best()
        try:
            if best is None:
                raise trial.all_failed(_all_failed_message(name, key, search))
        finally:
            trial.drop_error()
        entry = self._entry(key, best, trial, search, duration, candidates_hash)
        outcome = Outcome(best, "tuned", trial.timings, duration, entry, failures=dict(trial.failures))
        try:  # resets what the benchmark launches changed, before the launch that follows
            self.recipe.pre_hook(ctx.hook_args(best.all_kwargs()), reset_only=True)
        except Exception as exc:
            outcome.after_error = _reset_failed(name, self.recipe.called("pre_hook"), key, exc)
        return outcome

    def _measure(
        self,
        key: TuningKey,
        ctx: LaunchContext,
        trial: Trial,
        space: SearchSpace,
        reference: Sequence[Config] | None,
        warm_start: Sequence[int],
    ) -> BatchSearch:
        """Compile and measure ``trial``'s candidates (in compile workers where they can be used):
        the numerical check's reference first, then the search; the finished search."""
        candidates = trial.candidates
        streamed = compile_in_processes(self.recipe, ctx, candidates)
        if streamed is not None:
            streamed[0].start()  # the workers start while the strategy (SMAC's import) is set up
            self.benchmarker.compile_ahead(streamed[0].submit_job)
        try:
            with open_evaluator(self.recipe, ctx) as evaluator:
                tries = candidates[:REFERENCE_TRIES] if reference is None else reference
                adopted, streamed = self._adopt_reference(evaluator, trial, tries, streamed)
                if reference is not None and not adopted:
                    self._warn_ranks_may_disagree(len(reference))
                return self._search(evaluator, trial, space, streamed, warm_start)
        except TuningStopped as stop:  # the evaluator (its workers, its buffers) is closed
            trial.drop_error()
            error = trial.stopped(stop, self.recipe.called(stop.what), key)
            raise error from error.__cause__  # the hook's (or do_bench's) own exception

    def search_fields(self) -> dict[str, Any]:
        """The entry's fields that say how the candidates were searched: the strategy, its budget."""
        return {
            "strategy": self.strategy,
            "budget": self.budget.as_dict() if self.strategy != "exhaustive" else None,
        }

    def _adopt_reference(
        self, evaluator: Evaluator, trial: Trial, configs: Sequence[Config], streamed: Streamed | None
    ) -> tuple[bool, Streamed | None]:
        """Make the first of ``configs`` that runs and writes one of the outputs the numerical check's
        reference, so that the verdicts do not depend on the order the search measures candidates in
        (nor, for ranks tuning together, on each rank's share). Whether one did, and the compile pool
        to go on with; nothing runs without the check, or with ``reference_fn``. If none writes, the
        first candidate measured that writes becomes the reference, as without ``configs``. With
        compile workers, each is compiled by a worker first: one that crashes the compiler ends a
        worker (the pool is replaced), never this process."""
        check = self.recipe.check
        if not configs or check is None or check.reference_fn is not None:
            return True, streamed
        name = self.recipe.kernel_name
        for config in configs:
            if streamed is not None:
                compiled, streamed = compiled_safely(streamed, config)
                if not compiled:
                    log.debug("%s: [%s] does not compile: not the reference", name, describe_config(config))
                    continue
            try:
                if evaluator.adopt_reference(config):
                    log.debug("%s: the numerical check's reference is [%s]", name, describe_config(config))
                    return True, streamed
            except TuningStopped:  # an error no candidate escapes (a hook's): tuning ends
                trial.stopped_at = config
                raise
            except Exception as exc:  # it cannot run: the next is tried
                reason = one_line_reason(exc)
                log.debug("%s: [%s] cannot be the reference: %s", name, describe_config(config), reason[:300])
        log.debug("%s: none of the first %d configs wrote the outputs: no reference yet", name, len(configs))
        return False, streamed

    def _warn_ranks_may_disagree(self, tried: int) -> None:
        name = self.recipe.kernel_name
        warn_once(
            DejavuConfigWarning,
            f"{name}:reference",
            "%s: the numerical check: none of the first %d configs ran and wrote the outputs, so each "
            "rank compares its candidates with the first of its own share that writes them, and ranks "
            "may judge configs differently; put a config that runs and writes first, or give reference_fn",
            name,
            tried,
        )

    def _search(
        self,
        evaluator: Evaluator,
        trial: Trial,
        space: SearchSpace,
        streamed: Streamed | None,
        warm_start: Sequence[int],
    ) -> BatchSearch:
        """Search the candidates with ``evaluator`` (compiled by ``streamed``'s workers, if given),
        then re-measure the finalists; the finished search."""
        candidates = trial.candidates
        name = self.recipe.kernel_name
        search = BatchSearch(make_strategy(self.strategy, name), space, self.budget, warm_start)
        # an adaptive search's end is not known ahead: a count, not a share of the space
        bar = progress_bar(None if search.adaptive else search.limit, f"tuning {name}")
        pipeline = Pipeline(
            search,
            candidates,
            measure=lambda i: trial.measure(evaluator, i),
            rule_out=lambda i, failure: trial.rule_out(candidates[i], failure),
            prepare=lambda batch: _prepare(evaluator, candidates, batch),
            batch_size=max(16, _env.compile_threads()),
            on_progress=lambda counters: _show(bar, counters),
        )
        try:
            with trial.phase("search"):
                if streamed is not None:
                    pipeline.batch_size = streamed[0].workers + 2
                    pipeline.run_streamed(*streamed)
                elif self.interpreted:  # nothing to compile ahead: one candidate at a time
                    pipeline.batch_size = 1
                    pipeline.run_batched()
                else:  # exhaustive: compile everything at once; else a batch of proposals at a time
                    pipeline.run_batched(len(space) if self.strategy == "exhaustive" else None)
        finally:
            bar.close()
            search.close()
        trial.rule_out_late(evaluator)  # before finalists are chosen
        with trial.phase("refine"):
            trial.refine(evaluator, self.benchmarker.finalists)
        return search

    def _entry(
        self,
        key: TuningKey,
        best: Config,
        trial: Trial,
        search: BatchSearch,
        duration: float,
        candidates_hash: str,
    ) -> StoredEntry | None:
        if key.id is None:
            return None
        try:
            chosen = config_id(best)
            # fields alike, hooks not (equal kwargs first: an id per candidate costs 10 us, 10 s a million)
            twins = [c for c in trial.candidates if c.kwargs == best.kwargs and config_id(c) == chosen]
            twin = {"twin": next(i for i, c in enumerate(twins) if c is best)} if len(twins) > 1 else {}
            return StoredEntry.new(
                key.values,
                best,
                trial.timings[best],
                evaluated=len(search.results),
                space_size=len(search.space),
                tuning_time_s=duration,
                **self.search_fields(),
                ended_by=search.ended_by,
                refined=len(trial.refined),
                phases_s=trial.phases,
                strategy_s=round(search.strategy_time_s, 6),
                candidates=candidates_hash,
                quantiles=list(self.benchmarker.quantiles),
                top=trial.ranking()[:TOP_K],
                ruled_out=list(trial.failures.items())[:MAX_RULED_OUT],
                **twin,
            )
        except (EncodingError, InvalidEntry) as exc:
            name = self.recipe.kernel_name
            warn_once(
                DejavuStorageWarning,
                name,
                "%s: the result for key %s cannot be stored (%s); it stays in memory",
                name,
                key.id[:200],
                exc,
            )
            return None


def _all_failed_message(name: str, key: TuningKey, search: BatchSearch) -> str:
    """The error of a tuning where no candidate measured ran: how many were measured, and, when the
    search's budget left some out, that the others were not tried."""
    measured, size = len(search.results), len(search.space)
    message = f"{name}: all {measured} candidate configs failed for key {key.values!r}"
    if measured < size:
        message += (
            f" ({measured} of {size} candidates measured, the search's budget (search_max_share, "
            "search_max_search_t) left the others untried: raise it to try more)"
        )
    return message


def _prepare(evaluator: Evaluator, candidates: list[Config], batch: list[int]) -> dict[int, Failure]:
    """Compile a batch in this process (threads); the indices that failed, with their errors."""
    configs = [candidates[i] for i in batch]
    failures = evaluator.prepare(configs)
    return {i: failures[c] for i, c in zip(batch, configs) if c in failures}


def _show(bar: Any, counters: Counters) -> None:
    bar.update(counters.timed + counters.ruled_out - bar.n)
    bar.set_postfix(counters.postfix(), refresh=False)


def _reset_failed(name: str, culprit: str, key: TuningKey, exc: Exception) -> AutotuningError:
    """The error of the ``pre_hook`` called with ``reset_only=True`` after tuning (a hook without that
    parameter, say): the winner is kept, so the next call launches it without tuning."""
    hint = (
        " (the tuner calls pre_hook(nargs, reset_only=True) after tuning, as triton.autotune does: give "
        "it a reset_only=False parameter)"
        if isinstance(exc, TypeError) and "reset_only" in str(exc)
        else ""
    )
    error = candidates_failed(
        f"{name}: key {key.values!r} is tuned and its winner kept, but {culprit} raised "
        f"{one_line_reason(exc)} when called with reset_only=True before the launch{hint}",
        exc,
    )
    error.stopped_by = "pre_hook"
    return error

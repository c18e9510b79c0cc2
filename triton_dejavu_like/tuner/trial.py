"""What one tuning run measured and decided: :class:`Trial` keeps each candidate's timings or the
reason it was ruled out, the careful finalists and the run's phases, and ranks them; :class:`Outcome`
is what a miss decided (a tuning's, a restore's or a heuristic's)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from .._compat import Config
from .._log import log
from ..codec import describe_config
from ..measure import QUANTILES, Evaluator, Failure, TuningStopped, one_line_reason
from ..measure.isolation import WorkerError
from ..store import StoredEntry
from .config_ids import first_positions
from .errors import AutotuningError, candidates_failed, upstream_precedence
from .key import TuningKey


@dataclass
class Outcome:
    """What a miss decided: the config, how (tuned, restored, heuristic, single, or with tuning off:
    nearest, default), and for a tuning the timings of every measured candidate and the entry to
    store."""

    config: Config
    source: str  # "tuned" | "restored" | "heuristic" | "single" | "nearest" | "default"
    configs_timings: dict[Config, list[float]] = field(default_factory=dict)
    duration_s: float = 0.0
    entry: StoredEntry | None = None
    #: An error of the ``pre_hook`` called with ``reset_only=True`` after tuning: raised once the
    #: winner is stored and cached, as upstream's autotuner caches its winner before that call
    after_error: AutotuningError | None = None
    #: The candidates of a tuning that were ruled out, with their reasons
    failures: dict[Config, str] = field(default_factory=dict)


class Trial:
    """The measurements of one tuning run: screened timings, failures, and refined finalists."""

    def __init__(
        self, kernel_name: str, candidates: list[Config], order: Mapping[Config, int] | None = None
    ) -> None:
        """``order``: each candidate's first position in ``candidates``, if known."""
        self.kernel_name = kernel_name
        self.candidates = candidates
        self.timings: dict[Config, list[float]] = {}
        self.failures: dict[Config, str] = {}
        self.refined: dict[Config, list[float]] = {}
        self.phases: dict[str, float] = {}
        self._order = first_positions(candidates) if order is None else order
        # the failure upstream's autotuner would raise if none ran: (rank, config, failure), see rule_out
        self._first: tuple[tuple[int, int], Config, Failure] | None = None
        #: The candidate whose measurement ended tuning (:class:`TuningStopped`), if one did.
        self.stopped_at: Config | None = None

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase of the run (``search``, ``refine``; ``measure`` sums the timing of candidates in
        this process, within ``search``): stored with the entry."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = round(self.phases.get(name, 0.0) + time.perf_counter() - start, 6)

    def rule_out(self, config: Config, failure: Failure) -> float:
        """Record a candidate that cannot run, with its exception (raised here, or rebuilt from a
        worker process's; kept only while it is the one :meth:`all_failed` would raise) or the
        reason a worker gave where its exception could not be rebuilt."""
        reason = one_line_reason(failure)
        self.failures[config] = reason
        self.timings[config] = [math.inf] * len(QUANTILES)
        log.debug("%s: ruled out %s: %s", self.kernel_name, describe_config(config), reason[:300])
        # upstream raises the first config's error that it does not skip, else (launching the first
        # config after all were skipped) the first config's
        rank = (upstream_precedence(failure), self._order.get(config, len(self.candidates)))
        if self._first is None or rank < self._first[0]:
            self._first = (rank, config, failure)
        return math.inf

    def stopped(self, stop: TuningStopped, culprit: str, key: TuningKey) -> AutotuningError:
        """The error that ends tuning at once: ``culprit`` (what ``stop.what`` is called for the
        user) raised an error that does not depend on the candidate; an :class:`AutotuningError` of
        its class, as :func:`candidates_failed` makes it, whose ``stopped_by`` is ``stop.what``."""
        if self.stopped_at is not None:
            ordinal = "the first candidate" if not self.timings else f"candidate {len(self.timings) + 1}"
            where = f"at {ordinal} [{describe_config(self.stopped_at)}]"
        elif self.timings:  # re-measuring the finalists
            where = f"after {len(self.timings)} candidates were measured"
        else:  # the numerical check's reference, computed first
            where = "before any candidate was measured"
        why = (
            "the caller's function, not the config's: upstream's autotuner stops on it too"
            if stop.what == "grid"  # it may fail for some configs only, as upstream's stops at the first
            else "an error that does not depend on the config: every candidate would fail alike"
        )
        message = (
            f"{self.kernel_name}: tuning stopped {where} for key {key.values!r}: {culprit} raised "
            f"{one_line_reason(stop.error)} ({why})"
        )
        error = candidates_failed(message, stop.error)
        error.stopped_by = stop.what
        return error

    def all_failed(self, message: str) -> AutotuningError:
        """The error when no candidate ran: ``message`` and the first reasons (the one raised as
        itself first), as :func:`candidates_failed` makes it from the failure upstream would raise."""
        if self._first is None:
            return AutotuningError(message)
        _, first, failure = self._first
        shown = [first, *(c for c in self.failures if c != first)][:5]
        details = "; ".join(f"[{describe_config(c)}] {self.failures[c]}" for c in shown)
        return candidates_failed(f"{message}: {details}", failure)

    def drop_error(self) -> None:
        """Let go of the exception kept for :meth:`all_failed`: its traceback holds the frames of
        this run (this trial's among them), which would wait for the garbage collector otherwise."""
        self._first = None

    def measure(self, evaluator: Evaluator, index: int) -> float:
        config = self.candidates[index]
        if config in self.failures:
            return math.inf
        try:
            with self.phase("measure"):
                result = evaluator.measure(config)
        except TuningStopped:  # no candidate would run: tuning ends
            self.stopped_at = config
            raise
        except WorkerError as exc:  # a worker's exception that could not be rebuilt here
            return self.rule_out(config, exc.reason)
        except Exception as exc:  # the candidate is ruled out, tuning goes on
            return self.rule_out(config, exc)
        if not all(0 <= t < math.inf for t in result):  # NaN, inf or negative (a user's do_bench) at
            # any quantile: no time to compare, and none a store keeps
            shown = result[0] if len(result) == 1 else list(result)
            return self.rule_out(config, f"the benchmark returned {shown} ms")
        self.timings[config] = result
        return result[0]

    def ranking(self) -> list[tuple[Config, list[float]]]:
        """Valid candidates, best first: refined finalists (if any) by their careful median. Equal
        medians are ordered by the next quantiles, then by the order they were measured in, as
        upstream's ``min`` over the timing lists picks."""
        source = self.refined or self.timings
        valid = [(c, t) for c, t in source.items() if math.isfinite(t[0])]
        return sorted(valid, key=lambda item: tuple(item[1]))

    def rule_out_late(self, evaluator: Evaluator) -> None:
        """Rule out the candidates the evaluator found invalid after timing them."""
        for config, reason in evaluator.late_rule_outs().items():
            self.rule_out(config, reason)

    def refine(self, evaluator: Evaluator, finalists: int) -> None:
        """Re-measure the ``finalists`` best screened candidates carefully, if timing has two stages."""
        if finalists <= 0:
            return
        best = [config for config, _ in self.ranking()[:finalists]]
        refined = evaluator.refine(best) if len(best) > 1 else None
        if refined:
            self.refined = refined
            self.timings.update(refined)

    def best(self) -> Config | None:
        ranked = self.ranking()
        return ranked[0][0] if ranked else None

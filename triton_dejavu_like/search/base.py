"""The search interface: a space of candidates, a budget, and strategies that spend it.

A :class:`BatchSearch` hands out candidate indices (``ask(n)``) and takes back their measured times
(``tell(index, value)``), in any order and any number at a time, so an executor can keep a pool of
compile workers busy. It is the one place where the budget is enforced: the share of the space, the
wall time (checked before new work is handed out), the adaptive stop, and the restarts while nothing
valid was found. Strategies only propose indices and learn from results (:class:`Strategy`); they
never see configs, timers or storage. The candidates and their grid are a
:class:`~.space.SearchSpace`; :mod:`.drivers` runs a search against an objective function (the
synchronous adapter, replays and tests).
"""

from __future__ import annotations

import heapq
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .space import SearchSpace

#: Default wall-time cap (s) of an adaptive search (``Budget(max_time_s=None)`` with a search strategy).
DEFAULT_TIME_CAP_S = 180.0
#: Adaptive stop: an improvement counts when it makes the best time at least this much faster.
IMPROVEMENT = 0.01
#: Adaptive stop: at least this many evaluations without improvement before stopping ...
PATIENCE_MIN = 48
#: ... and at least this many batches (the largest ``ask(n)`` seen) ...
PATIENCE_BATCHES = 3
#: ... and at least this share of the evaluations made until the last improvement ...
PATIENCE_SHARE = 0.5
#: ... and at least this share of the space (a large space is given more room to find its needle).
PATIENCE_SPACE_SHARE = 0.02
#: Adaptive stop: the strategy's expected relative improvement below which the search may stop.
NEGLIGIBLE_GAIN = 1e-3
#: Adaptive stop: never before this many evaluations.
MIN_EVALUATIONS = 32
#: Adaptive stop: before a stall ends the search, the untried neighbours (one parameter one step
#: away) of the best ``POLISH_TOP`` results within ``POLISH_WITHIN`` of the best are measured, so that
#: a search does not stop next to an untried better neighbour of one of its best few candidates.
POLISH = True
POLISH_TOP = 3
POLISH_WITHIN = 0.05
#: ... for at most this many patiences since the last improvement (polishing follows the best few
#: as they change, which on a plateau of equal times could otherwise walk on for long).
POLISH_MAX_PATIENCES = 2
#: Spaces this small are measured in full under an adaptive budget (see :func:`exhaustive_is_cheaper`).
EXHAUSTIVE_MAX = 64


def as_result(value: float) -> float:
    """A measured time as a search keeps it: a time in ms (0 or more) as it is, anything else (NaN, a
    negative time, minus infinity) ``math.inf``, a failure, as the tuner rules such a time out."""
    value = float(value)
    return value if value >= 0 else math.inf


def exhaustive_is_cheaper(space_size: int) -> bool:
    """True when measuring every candidate costs about what a model-guided search would spend.

    An adaptive search cannot stop before ``MIN_EVALUATIONS`` and waits ``PATIENCE_MIN`` evaluations
    without improvement, so on ``EXHAUSTIVE_MAX`` candidates or fewer it would measure most of the
    space anyway; measuring all of it is then exact and needs no model."""
    return space_size <= EXHAUSTIVE_MAX


@dataclass(frozen=True)
class Budget:
    """How much a search may spend: wall time, a share of the space, restarts, and the seed.

    ``max_time_s`` is checked before new work is handed out (one evaluation always runs); None: no
    limit for exhaustive search, ``DEFAULT_TIME_CAP_S`` for search strategies. ``max_share`` caps the
    number of distinct candidates evaluated at ``ceil(max_share * len(space))``; None: the adaptive
    stop for search strategies (see :meth:`BatchSearch.stalled`), the whole space for exhaustive
    search. ``max_repeat`` restarts a search (with the next seed) that found nothing valid, up to
    that many runs in all.
    """

    max_time_s: float | None = None
    max_share: float | None = None
    max_repeat: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_time_s is not None and not self.max_time_s > 0:
            raise ValueError(f"search_max_search_t must be > 0, got {self.max_time_s}")
        if self.max_share is not None and not 0 < self.max_share <= 1:
            raise ValueError(f"search_max_share must be in (0, 1], got {self.max_share}")
        if self.max_repeat < 1:
            raise ValueError(f"search_max_repeat must be >= 1, got {self.max_repeat}")
        if self.seed < 0:  # numpy's generators refuse negative seeds
            raise ValueError(f"search_seed must be >= 0, got {self.seed}")

    @property
    def adaptive(self) -> bool:
        """No share given: a search strategy stops when further batches are unlikely to pay."""
        return self.max_share is None

    def max_evaluations(self, space_size: int) -> int:
        share = 1.0 if self.max_share is None else self.max_share
        return max(1, min(space_size, math.ceil(share * space_size - 1e-9)))

    def time_limit(self, adaptive_strategy: bool) -> float:
        if self.max_time_s is not None:
            return self.max_time_s
        return DEFAULT_TIME_CAP_S if adaptive_strategy else math.inf

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "max_time_s": None if self.max_time_s is None else _stored_seconds(self.max_time_s),
            "max_share": self.max_share,
            "max_repeat": self.max_repeat,
            "seed": self.seed,
        }
        if self.adaptive:
            out["adaptive"] = {
                "time_cap_s": DEFAULT_TIME_CAP_S
                if self.max_time_s is None
                else _stored_seconds(self.max_time_s),
                "improvement": IMPROVEMENT,
                "patience": [PATIENCE_MIN, PATIENCE_BATCHES, PATIENCE_SHARE, PATIENCE_SPACE_SHARE],
                "negligible_gain": NEGLIGIBLE_GAIN,
                "min_evaluations": MIN_EVALUATIONS,
                "exhaustive_max": EXHAUSTIVE_MAX,
                "polish": [POLISH_TOP, POLISH_WITHIN, POLISH_MAX_PATIENCES] if POLISH else False,
            }
        return out


def _stored_seconds(seconds: float) -> float | str:
    """A time as stored (JSON has no infinity): ``"inf"`` for no limit, which is not None, the
    default's cap (``search_max_search_t=inf`` and ``search_max_share=1.0`` alone, searched without
    and with a time cap, are not one identity)."""
    return "inf" if math.isinf(seconds) else seconds


class Strategy(ABC):
    """Decides which candidates to evaluate: proposes indices and learns from their results.

    The search calls :meth:`start` at the beginning of each attempt, :meth:`propose` whenever it
    needs new work and :meth:`observe` for every result (in the order results arrive). A strategy
    never sees configs, timers or storage, and never enforces the budget.
    """

    name: ClassVar[str]
    #: Whether an adaptive budget (``max_share=None``) may stop this strategy early.
    adaptive_stop: ClassVar[bool] = True

    @abstractmethod
    def start(self, space: SearchSpace, warm_start: Sequence[int], seed: int, limit: int) -> None:
        """A new attempt with this seed; ``limit`` candidates at most will be evaluated in it."""

    @abstractmethod
    def propose(self, n: int, state: BatchSearch) -> list[int]:
        """Up to ``n`` candidates, none measured (``state.results``) or pending (``state.pending``).
        Fewer (even none) when it cannot propose more before results arrive."""

    def observe(self, index: int, value: float) -> None:  # noqa: B027 (optional hook)
        """A result: the time in ms, ``math.inf`` for a failed candidate."""

    def expected_gain(self) -> float | None:
        """The expected relative improvement of the next proposal (adaptive stop), if known."""
        return None

    def close(self) -> None:  # noqa: B027 (optional hook)
        """The search is over: end what the strategy started in the background."""


class BatchSearch:
    """One search: hands out candidates (``ask``), takes back results (``tell``), enforces the budget.

    ``ask(n)`` returns up to ``n`` new candidate indices, none measured or pending; ``[]`` means
    nothing more now: either the search is over (``done``) or the strategy waits for results of
    pending candidates. ``tell(index, value)`` gives a pending candidate's time in ms (``math.inf``:
    it failed; NaN or a negative time counts as a failure); results may arrive in any order.
    ``results``, ``order`` (the order results arrived), ``pending`` and ``best()`` describe the state
    at any time.

    Budget (all of it here): at most ``budget.max_evaluations`` candidates are handed out per
    attempt; no new work once the time limit has passed (the first candidate is always handed out);
    under an adaptive budget the stop rule of :meth:`stalled`; when an attempt ends with nothing
    valid found and no result pending, a new attempt starts with the next seed and a fresh budget,
    up to ``budget.max_repeat`` attempts (results measured before stay known and are not measured
    again).
    """

    def __init__(
        self,
        strategy: Strategy,
        space: SearchSpace,
        budget: Budget | None = None,
        warm_start: Iterable[int] = (),
        seed: int | None = None,
        known: dict[int, float] | None = None,
    ) -> None:
        self.strategy = strategy
        self.space = space
        self.budget = budget or Budget()
        self.seed = self.budget.seed if seed is None else seed
        self.warm_start = [i for i in dict.fromkeys(warm_start) if 0 <= i < len(space)]
        self.results = {index: as_result(value) for index, value in (known or {}).items()}
        outside = sorted(i for i in self.results if not 0 <= i < len(space))
        if outside:  # best() would pick it, and the open candidates would be miscounted
            raise IndexError(f"known results for candidates {outside} outside the space of {len(space)}")
        self.order: list[int] = []  # results, in the order they arrived
        self.issued: list[int] = []  # candidates, in the order they were handed out
        self.pending: set[int] = set()
        self.limit = self.budget.max_evaluations(len(space))
        adaptive = strategy.adaptive_stop
        self.time_limit_s = self.budget.time_limit(adaptive)
        self.adaptive = adaptive and self.budget.adaptive and not exhaustive_is_cheaper(len(space))
        self.attempt = 0
        self.batch_size = 1
        self.strategy_time_s = 0.0  # time spent inside the strategy (its overhead)
        self._best_value = math.inf
        self._last_improvement = 0
        self._finished = False
        self._attempt_over = False
        self._polishing: list[int] = []
        self._returned: list[int] = []  # cancelled candidates, handed out again first
        self._ended_by: str | None = None
        self._start_attempt()
        for index, value in self.results.items():
            self._observe(index, value)

    # -- state ------------------------------------------------------------------------------
    def _start_attempt(self) -> None:
        self.started = time.monotonic()
        self.counted = 0  # candidates handed out in this attempt
        self._measured_in_attempt = 0
        self._best_value_attempt = math.inf
        self._last_improvement = 0
        # with POLISH, once stalled: the neighbours of the best few results
        self._polish_around: list[int] = []
        self._attempt_over = False
        self._ended_by = None
        t = time.perf_counter()
        self.strategy.start(self.space, self.warm_start, self.seed + self.attempt, self.limit)
        self.strategy_time_s += time.perf_counter() - t

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    @property
    def found_valid(self) -> bool:
        return math.isfinite(self._best_value)

    def best(self) -> int | None:
        finite = [(v, i) for i, v in self.results.items() if math.isfinite(v)]
        return min(finite)[1] if finite else None

    @property
    def open_count(self) -> int:
        return len(self.space) - len(self.results) - len(self.pending)

    def stalled(self) -> bool:
        """The adaptive stop: no improvement by ``IMPROVEMENT`` over the last ``patience``
        evaluations (``max(PATIENCE_MIN, PATIENCE_BATCHES * batch, PATIENCE_SHARE * evaluations
        until the last improvement, PATIENCE_SPACE_SHARE * space size)``), or the strategy expects
        less than ``NEGLIGIBLE_GAIN`` from its next proposal and nothing improved over the last
        ``max(16, batch)`` evaluations; never before ``MIN_EVALUATIONS`` evaluations in the attempt.
        With ``POLISH``, a stalled search still measures the best few candidates' neighbours first
        (:meth:`_polish_candidates`)."""
        return self._stall() is not None

    def _stall(self) -> str | None:
        """Which adaptive stop holds (:meth:`stalled`), as :attr:`ended_by` names it; None: neither."""
        measured = self._measured_in_attempt
        if measured < MIN_EVALUATIONS or not math.isfinite(self._best_value_attempt):
            return None
        since = measured - self._last_improvement
        gain = self.strategy.expected_gain()
        if gain is not None and gain < NEGLIGIBLE_GAIN and since >= max(16, self.batch_size):
            return "negligible expected gain"
        return "no improvement" if since >= self._patience() else None

    @property
    def ended_by(self) -> str | None:
        """What ended the search's last attempt, once it is :attr:`done`: ``"every candidate"`` (none
        left to measure), ``"evaluation limit"`` (the budget's share or count), ``"time limit"``,
        ``"no improvement"`` or ``"negligible expected gain"`` (the adaptive stop, after its polish),
        ``"strategy"`` (it proposed nothing more); None while it goes on."""
        return self._ended_by if self.done else None

    def _patience(self) -> int:
        return max(
            PATIENCE_MIN,
            PATIENCE_BATCHES * self.batch_size,
            math.ceil(PATIENCE_SHARE * self._last_improvement),
            math.ceil(PATIENCE_SPACE_SHARE * len(self.space)),
        )

    def _polish_candidates(self) -> list[int]:
        """The untried neighbours of the ``POLISH_TOP`` best results within ``POLISH_WITHIN`` of the
        best (ties: the earlier result), none once ``POLISH_MAX_PATIENCES`` patiences passed since the
        last improvement. Recomputed at every stall, so a neighbour that joins the best few is
        polished in turn (a local search among the best few, until their neighbourhoods are measured)."""
        since = self._measured_in_attempt - self._last_improvement
        if not POLISH or since >= POLISH_MAX_PATIENCES * self._patience():
            return []
        finite = [(v, i) for i, v in self.results.items() if math.isfinite(v)]
        top = heapq.nsmallest(POLISH_TOP, finite, key=lambda item: item[0])
        around = [
            n for v, i in top if v <= self._best_value * (1 + POLISH_WITHIN) for n in self.space.neighbours(i)
        ]
        self._polish_around = list(dict.fromkeys(around))
        return [i for i in self._polish_around if i not in self.results and i not in self.pending]

    def _limit_reached(self) -> bool:
        return self._limit() is not None

    def _limit(self) -> str | None:
        """The limit that ends this attempt (:attr:`ended_by`'s words), or None while none does."""
        if self._attempt_over:  # kept: the stop that ended it (waiting for pending results takes time)
            return self._ended_by or "strategy"
        if self.open_count <= 0:
            return "every candidate"
        if self.counted >= self.limit:
            return "evaluation limit"
        return "time limit" if self.counted > 0 and self.elapsed_s >= self.time_limit_s else None

    def _attempt_spent(self) -> bool:
        self._polishing = []
        limit = self._limit()
        if limit is not None:
            self._ended_by = limit
            return True
        stall = self._stall() if self.adaptive else None
        if stall is None:
            return False
        self._polishing = self._polish_candidates()  # the best few's untried neighbours first
        if self._polishing:
            return False
        self._ended_by = stall
        return True

    def _polish_pending(self) -> bool:
        """A stalled search waits for the best few's neighbours still being measured: one may improve."""
        if not self.adaptive or self._limit_reached():
            return False
        return any(i in self.pending for i in self._polish_around)

    def _advance(self) -> bool:
        """Whether new work may be handed out now (restarting an attempt if the budget says so)."""
        while not self._finished:
            if not self._attempt_spent():
                return True
            if self._polish_pending():
                return False
            self._attempt_over = True
            if self.pending:
                return False  # their results decide whether to restart
            more = self.attempt + 1 < self.budget.max_repeat
            if not self.found_valid and more and len(self.results) < len(self.space):
                self.attempt += 1
                self._start_attempt()
                continue
            self._finished = True
        return False

    @property
    def done(self) -> bool:
        """No candidate will be handed out any more (results of pending ones may still be told)."""
        self._advance()
        return self._finished

    # -- ask / tell -------------------------------------------------------------------------
    def ask(self, n: int = 1) -> list[int]:
        if n < 1:
            return []
        self.batch_size = max(self.batch_size, n)
        out: list[int] = []
        while len(out) < n and self._advance():
            room = min(n - len(out), self.limit - self.counted, self.open_count)
            if self.counted == 0 and self.elapsed_s >= self.time_limit_s:
                room = 1  # the time is up already: only the one candidate that always runs
            proposed = self._proposals(room)
            fresh = []
            for index in proposed[:room]:
                index = int(index)
                if not 0 <= index < len(self.space):
                    raise IndexError(f"strategy {self.strategy.name} proposed candidate {index} out of range")
                if index not in self.results and index not in self.pending:
                    self.pending.add(index)
                    self.issued.append(index)
                    fresh.append(index)
            self.counted += len(fresh)
            out += fresh
            if not fresh:
                if not self.pending:
                    self._attempt_over = True  # the strategy has nothing more to offer
                    continue
                break
        return out

    def _proposals(self, room: int) -> list[int]:
        """The polish's candidates, else those given back (:meth:`cancel`), else the strategy's."""
        if self._polishing:
            proposed, self._polishing = self._polishing, []
            return proposed
        self._returned = [i for i in self._returned if i not in self.results and i not in self.pending]
        if self._returned:
            proposed, self._returned = self._returned[:room], self._returned[room:]
            return proposed
        t = time.perf_counter()
        proposed = self.strategy.propose(room, self)
        self.strategy_time_s += time.perf_counter() - t
        return proposed

    def close(self) -> None:
        """End the search (whether or not it is ``done``): the strategy ends what it started in the
        background. Bayesian optimisation waits for SMAC's import if it is still running: the filter
        that keeps the import's warnings quiet is in the list in force when it starts, and a caller's
        ``warnings.catch_warnings()`` block that ended first would put back a list without it."""
        t = time.perf_counter()
        self.strategy.close()
        self.strategy_time_s += time.perf_counter() - t

    @property
    def out_of_time(self) -> bool:
        """The attempt's wall-time budget is spent (new work is no longer handed out)."""
        return self.counted > 0 and self.elapsed_s >= self.time_limit_s

    def cancel(self, index: int) -> None:
        """Give back a pending candidate without a result (it was never measured): it is handed out
        again first, while the budget allows, and does not count towards the share of the space."""
        if index not in self.pending:
            raise KeyError(f"candidate {index} is not pending")
        self.pending.discard(index)
        self.issued.remove(index)
        self.counted -= 1
        self._returned.append(index)  # the strategy has moved past it
        # an ask while the whole budget was pending ended the attempt: the budget is judged again
        self._attempt_over = False
        self._ended_by = None

    def tell(self, index: int, value: float) -> None:
        if index not in self.pending:
            raise KeyError(f"candidate {index} is not pending")
        self.pending.discard(index)
        value = as_result(value)
        self.results[index] = value
        self.order.append(index)
        self._measured_in_attempt += 1
        self._observe(index, value)
        t = time.perf_counter()
        self.strategy.observe(index, value)
        self.strategy_time_s += time.perf_counter() - t

    def _observe(self, index: int, value: float) -> None:
        if value < self._best_value:
            self._best_value = value
        if value < self._best_value_attempt * (1 - IMPROVEMENT):
            self._last_improvement = self._measured_in_attempt
        self._best_value_attempt = min(self._best_value_attempt, value)

"""Batched Bayesian optimisation (extra ``bo``): a Gaussian process and SMAC's random forest propose
batches of candidates.

One model fit serves a whole batch. The regression (a Gaussian process from a design's worth of
results until it would cost too much, SMAC's forest before and after) sees only successful
candidates (log times); a forest estimates where candidates fail, and expected improvement is
weighted by the chance of success (failed candidates are never told to the regression as large
times). Candidates near the ones pending (handed out, result not yet known) are penalised, so a
batch spreads out instead of piling up around one optimum (local penalisation). A share of
proposals are random candidates or neighbours of the best one so far, so the search keeps
exploring where the model is wrong. If a model fails, the search goes on with random proposals
after one warning. docs/search.md explains every setting and how it was chosen.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from .._log import DejavuTuningWarning, warn_once
from ._global_state import import_in_background, quiet_third_party
from .base import BatchSearch, Strategy, exhaustive_is_cheaper
from .exhaustive import ordered
from .space import SearchSpace

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BOSettings:
    """Defaults shared by every tuning space (docs/search.md explains each choice).

    ``initial_per_dim``/``initial_min``: random candidates measured before the model proposes
    (``max(initial_min, initial_per_dim * dimensions)``, at most ``initial_max_share`` of the
    evaluation budget; warm-start candidates count towards it). Under a budget that allows the whole
    space (the default, adaptive one), also ``initial_space_share`` of the space, up to
    ``initial_space_max``: on a GPU that design is compiled and timed while SMAC is imported (seconds),
    so it costs no wall time, and the first fit sees a broader sample. ``random_share`` and
    ``local_share``: the chance that a proposal is a random candidate, or a random neighbour (one
    parameter changed) of the best candidate so far. ``penalty_length``: the distance (parameters
    scaled to [0, 1]) at which a pending candidate halves a neighbour's score about. The model is
    refit when the data grew by ``1/refit_growth`` and by ``refit_batch_share`` of the candidates in
    flight (at least one result): with 16 in flight, every 4th result, so that a fit costs little
    next to the compiles it steers (on a GPU it runs where candidates are timed). The regression is
    a Gaussian process from ``gp_from_per_dim`` successful results per parameter (an initial
    design's worth) until ``gp_until`` (0: never), the forest before and after; the process has one
    length scale while it has fewer than ``gp_isotropic_per_dim`` results per parameter, and its
    hyperparameters are fit again when the results grew by ``gp_reoptimise_growth``. Warm-start
    candidates are measured first up to ``warm_start_max_share`` of the budget's evaluations (at least
    the initial design's size): a kernel with many stored keys can have as many winners as a small
    explicit budget, which they would use up before the model ran.
    """

    initial_per_dim: int = 2
    initial_min: int = 5
    initial_max_share: float = 0.25
    initial_space_share: float = 0.05
    initial_space_max: int = 32
    n_trees: int = 10
    random_share: float = 0.1
    local_share: float = 0.15
    penalty_length: float = 0.25
    refit_growth: int = 100
    refit_batch_share: float = 0.25
    xi: float = 0.0
    max_in_flight_share: float = 0.1
    design_tries: int = 50
    gp_from_per_dim: float = 2.0
    gp_until: int = 128
    gp_isotropic_per_dim: float = 3.0
    gp_reoptimise_growth: float = 0.5
    warm_start_max_share: float = 0.5

    def initial_size(self, dimensions: int, max_evaluations: int, space_size: int = 0) -> int:
        wanted = max(self.initial_min, self.initial_per_dim * dimensions)
        if space_size and max_evaluations >= space_size:
            wanted = max(
                wanted, min(self.initial_space_max, math.floor(self.initial_space_share * space_size))
            )
        return max(1, min(wanted, math.floor(self.initial_max_share * max_evaluations)))


def _expected_improvement(best: float, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr

    sigma = np.sqrt(var)
    gap = best - mean
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sigma > 0, gap / np.where(sigma > 0, sigma, 1.0), 0.0)
    ei = gap * ndtr(z) + sigma * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return np.where(sigma > 0, np.maximum(ei, 0.0), np.maximum(gap, 0.0))


def _positive(times: np.ndarray) -> np.ndarray:
    """``times`` with a time of 0 (or below) as half the fastest positive one (1 if none is), so that
    its log is finite: a do_bench that rounds may answer 0 ms for a fast candidate."""
    positive = times[times > 0]
    return np.maximum(times, positive.min() / 2 if len(positive) else 1.0)


def _squared_distance(a: np.ndarray, b: np.ndarray, numeric: np.ndarray) -> np.ndarray:
    """The squared distance between points ``a`` and ``b`` (broadcast over leading axes): the scaled
    difference of each numeric parameter, 1 for each categorical parameter that differs."""
    diff = np.abs(a - b)
    diff = np.where(numeric, diff, diff > 0)
    return np.einsum("...j,...j->...", diff, diff)


@dataclass
class BayesianOptimization(Strategy):
    """SMAC's random forest, expected improvement and local penalisation over the candidates."""

    name = "bayesian"
    config: BOSettings = field(default_factory=BOSettings)
    #: What is searched (the kernel's name), for the warning when the model fails.
    label: str = ""
    #: The models' module, imported in the background (a future) once a search needs them.
    _model_module: cf.Future[ModuleType] | None = field(default=None, init=False, repr=False)

    # -- set-up -----------------------------------------------------------------------------
    def _without_model(self, space: SearchSpace, limit: int, known: int = 0) -> bool:
        """No model: nothing to model, a small space measured in full anyway (an adaptive budget,
        or a share of 1.0), no more candidates left than the initial design takes, or a budget of
        two evaluations or fewer (the model proposes once two results are valid, so it would never
        propose, and SMAC's import, seconds, would be for nothing). A small space under a smaller
        budget keeps the model."""
        n_initial = self.config.initial_size(len(space.names), limit, len(space))
        measured_in_full = exhaustive_is_cheaper(len(space)) and limit >= len(space)
        too_few = limit <= 2 or len(space) - known <= n_initial
        return not space.names or measured_in_full or too_few

    def _design(self, warm_start: Sequence[int], seed: int) -> list[int]:
        """Warm-start candidates, then a random order whose head is the initial design: with
        ``design_tries`` > 1, the best spread (largest smallest distance, the local penalty's metric)
        of that many random draws."""
        rng = np.random.default_rng(seed)
        rest = rng.permutation(len(self.space)).tolist()
        if self.config.design_tries > 1 and self._scaled is not None and len(self.space) > self.n_initial:
            best, spread = rest[: self.n_initial], -1.0
            for _ in range(self.config.design_tries):
                pick = rng.choice(len(self.space), self.n_initial, replace=False)
                x = self._scaled[pick]
                d = _squared_distance(x[:, None, :], x[None, :, :], self._numeric)
                d[np.diag_indices(len(pick))] = np.inf
                if d.min() > spread:
                    best, spread = pick.tolist(), float(d.min())
            rest = ordered(best, rest)
        return ordered(warm_start, rest)

    def start(self, space: SearchSpace, warm_start: Sequence[int], seed: int, limit: int) -> None:
        self.space = space
        self.rng = np.random.default_rng([seed, 1])
        self.n_initial = self.config.initial_size(len(space.names), limit, len(space))
        self._failed = self._without_model(space, limit)
        self._scaled: np.ndarray | None = None
        if space.names:
            points = np.asarray(space.points, dtype=float).reshape(len(space), len(space.names))
            self._points = points
            self._scaled = points / np.array([space.steps(d) for d in range(len(space.names))], dtype=float)
            self._numeric = np.array([space.is_numeric(d) for d in range(len(space.names))])
        warm_start = list(warm_start)[
            : max(self.n_initial, math.floor(self.config.warm_start_max_share * limit))
        ]
        self._order = self._design(warm_start, seed)
        self._initial_len = max(len(warm_start), self.n_initial)
        share = self.config.max_in_flight_share
        self._max_in_flight = max(1, math.ceil(share * limit)) if share > 0 else None
        self._next = 0
        self._forest: Any = None  # the regression forest, made with the other models at the first fit
        self._fitted_on = (-1, -1)
        self._gain: float | None = None
        self._penalties: dict[int, np.ndarray] = {}
        if not self._failed and self._model_module is None:
            # SMAC's import (seconds) runs while the initial design is compiled and timed; the first
            # fit waits for it, and fails inside propose()'s fallback if it failed (a restarted
            # attempt goes on with the same import)
            self._model_module = import_in_background(f"{__package__}._surrogates")

    # -- proposals --------------------------------------------------------------------------
    def _next_in_order(self, state: BatchSearch) -> int | None:
        while self._next < len(self._order):
            index = self._order[self._next]
            self._next += 1
            if index not in state.results and index not in state.pending:
                return index
        return None

    def propose(self, n: int, state: BatchSearch) -> list[int]:
        # what the model steers (random fill while it cannot run yet, then its own proposals) is
        # capped in flight, so that each proposal learns from most of the results before it
        cap = n if self._max_in_flight is None else min(n, self._max_in_flight - len(state.pending))
        out: list[int] = []
        # warm start and initial design first; random candidates while the model cannot run yet
        while len(out) < n and (
            self._failed or self._next < self._initial_len or (len(out) < cap and not self._ready(state))
        ):
            index = self._next_in_order(state)
            if index is None:
                return out
            out.append(index)
        n = min(n, cap)
        if len(out) < n:
            try:
                with quiet_third_party():
                    out += self._propose_from_model(n - len(out), state, out)
            except Exception as exc:
                self._failed = True
                self._gain = None
                log.debug("Bayesian optimisation of %s stopped", self.label or "a search", exc_info=True)
                warn_once(  # once per kernel and cause: each of its keys would fail alike
                    DejavuTuningWarning,
                    f"bayesian:{self.label}:{type(exc).__name__}",
                    "%sBayesian optimisation stopped (%s); continuing with random proposals",
                    f"{self.label}: " if self.label else "",
                    exc,
                )
                while len(out) < n and (index := self._next_in_order(state)) is not None:
                    out.append(index)
        return out

    def _ready(self, state: BatchSearch) -> bool:
        finite = sum(1 for v in state.results.values() if math.isfinite(v))
        return len(state.results) >= self.n_initial and finite >= 2

    def _fit(self, state: BatchSearch) -> None:
        measured = sorted(state.results)  # the model depends on the results, not on their order
        values = np.array([state.results[i] for i in measured])
        ok = np.isfinite(values)
        size = (len(measured), int(ok.sum()))
        last = self._fitted_on
        grown = size[0] - max(last[0], 0)
        in_flight_share = int(self.config.refit_batch_share * state.batch_size)
        if last[0] >= 0 and grown < max(1, last[0] // self.config.refit_growth, in_flight_share):
            return
        idx = np.array(measured)
        y = np.log(_positive(values[ok]))
        model = self._regression(size[1])
        model.fit(idx[ok], y)
        everything = np.arange(len(self.space))
        mean, var = model.predict(everything)
        ei = _expected_improvement(float(y.min()) - self.config.xi, mean, var)
        if not ok.all():
            self._failure_model.fit(idx, (~ok).astype(float))
            p_fail, _ = self._failure_model.predict(everything)
            ei = ei * (1.0 - np.clip(p_fail, 0.0, 1.0))
        self._score = ei
        self._ties = self.rng.random(len(self.space))
        self._fitted_on = size

    def _regression(self, successes: int) -> Any:
        """The model of log time for ``successes`` results: the Gaussian process from a design's worth
        of them while it is cheap, the forest before and after (all made at the first fit, with the
        forest that predicts failures)."""
        if self._forest is None:
            models = self._model_module.result()
            seed = int(self.rng.integers(2**31))
            self._forest = models.ForestModel(self.space, n_trees=self.config.n_trees, seed=seed)
            self._failure_model = models.ForestModel(self.space, n_trees=self.config.n_trees, seed=seed + 1)
            self._gp = models.GaussianProcessModel(
                self.space,
                seed=seed + 2,
                isotropic_per_dim=self.config.gp_isotropic_per_dim,
                reoptimise_growth=self.config.gp_reoptimise_growth,
            )
        gp_from = self.config.gp_from_per_dim * len(self.space.names)
        return self._gp if gp_from <= successes < self.config.gp_until else self._forest

    def _penalty_of(self, index: int) -> np.ndarray:
        """``1 - exp(-(d / length)^2)`` for every candidate, d its distance to ``index`` in scaled
        parameters (categorical ones differ by 1 or 0); kept while ``index`` is pending."""
        cached = self._penalties.get(index)
        if cached is None:
            d2 = _squared_distance(self._scaled, self._scaled[index], self._numeric)
            cached = 1.0 - np.exp(-d2 / self.config.penalty_length**2)
            self._penalties[index] = cached
        return cached

    def _distance_penalty(self, around: Sequence[int], mask: np.ndarray) -> np.ndarray:
        """The product of the penalties of ``around`` at the candidates in ``mask``."""
        penalty = np.ones(int(mask.sum()))
        for p in around:
            penalty *= self._penalty_of(p)[mask]
        return penalty

    def observe(self, index: int, value: float) -> None:
        self._penalties.pop(index, None)  # no longer pending

    def _propose_from_model(self, n: int, state: BatchSearch, chosen: list[int]) -> list[int]:
        self._fit(state)
        open_mask = np.ones(len(self.space), dtype=bool)
        taken = [*state.results, *state.pending, *chosen]
        open_mask[taken] = False
        candidates = np.flatnonzero(open_mask)
        if not len(candidates):
            return []
        score = self._score[candidates]
        self._gain = float(score.max())
        score = score * self._distance_penalty([*state.pending, *chosen], open_mask)
        available = np.ones(len(candidates), dtype=bool)
        out: list[int] = []
        best = state.best()
        for _ in range(min(n, len(candidates))):
            u = self.rng.random()
            pick: int | None = None
            if u < self.config.random_share:
                pick = int(self.rng.choice(np.flatnonzero(available)))
            elif u < self.config.random_share + self.config.local_share and best is not None:
                hamming = (self._points[candidates] != self._points[best]).sum(axis=1)
                near = np.flatnonzero(available & (hamming == 1))
                if len(near):
                    pick = int(self.rng.choice(near))
            if pick is None:
                masked = np.where(available, score, -np.inf)
                top = np.flatnonzero(masked == masked.max())
                pick = int(top[np.argmax(self._ties[candidates[top]])])
            available[pick] = False
            index = int(candidates[pick])
            out.append(index)
            if len(out) < n:
                score = score * self._penalty_of(index)[candidates]
        return out

    def expected_gain(self) -> float | None:
        return self._gain

    def close(self) -> None:
        """Wait for SMAC's import if it still runs (a search that ended before its model was needed):
        its warnings stay quiet while the filters in force are those it started with, which a caller's
        ``catch_warnings`` block that the tuning run returns to would replace on leaving. A failed
        import was reported where the model was needed, if it was."""
        if self._model_module is not None:
            self._model_module.exception()

"""SMAC 2.x set up for a finite list of candidates, driven through ask and tell.

Imported only once :func:`triton_dejavu_like.search.require_smac` has found SMAC (extra ``bo``).
Every dimension of a :class:`SearchSpace` becomes a hyperparameter whose values are the indices of
that dimension's values: an ordinal one when the values are numbers (sorted, so their order carries
information for the model), a categorical one otherwise.

What differs from SMAC's hyperparameter-optimisation facade, each for a stated reason:

- the acquisition function is maximised over the candidates not yet evaluated (scored all at
  once), and random interleaved proposals are drawn among them too: a tuning space is a finite
  list, often with most of its grid excluded by conditions or pruning, and a search over the grid
  would spend most proposals on points that cannot run;
- the random forest runs single-threaded and without ``log_y`` leaf rewriting (a Python loop over
  every leaf); it models the log-scaled times directly, and expected improvement is taken on that
  scale, i.e. on relative speed-ups;
- the best predicted observation is found with one batched prediction instead of one call per
  observation, and past 100 observations the model is refit after every 1% growth of the data
  rather than after every one;
- configurations compare by their vectors (SMAC tests list membership of configurations many
  times per proposal).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from ConfigSpace import (
    CategoricalHyperparameter,
    Configuration,
    ConfigurationSpace,
    OrdinalHyperparameter,
)
from smac import HyperparameterOptimizationFacade, Scenario
from smac.acquisition.function import EI
from smac.acquisition.maximizer.abstract_acquisition_maximizer import AbstractAcquisitionMaximizer
from smac.acquisition.maximizer.helpers import ChallengerList
from smac.initial_design import RandomInitialDesign
from smac.intensifier import Intensifier
from smac.main.config_selector import ConfigSelector
from smac.model.random_forest import RandomForest
from smac.random_design import ProbabilityRandomDesign
from smac.random_design.abstract_random_design import AbstractRandomDesign
from smac.runhistory import StatusType, TrialInfo, TrialValue
from smac.runhistory.encoder import RunHistoryLogScaledEncoder

from .base import SearchSpace
from .bayesian import BOSettings

__all__ = ["Proposal", "SmacSession"]


#: How many ranked candidates one acquisition maximisation hands to SMAC's selector.
CHALLENGERS = 64


class Candidate(Configuration):
    """A configuration that compares by its vector: SMAC tests list membership of configurations
    many times per proposal, and the base class compares two dictionaries built value by value.

    Equal to a plain :class:`Configuration` exactly when the base class says so (every
    hyperparameter is active in these spaces); the hash is the base class's.
    """

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Configuration) and other.config_space is self.config_space:
            return self.get_array().tobytes() == other.get_array().tobytes()
        return super().__eq__(other)

    __hash__ = Configuration.__hash__


class _CandidateSampler:
    """The one thing SMAC's challenger list asks of a space: a random configuration (a candidate here)."""

    def __init__(self, draw: Callable[[], Configuration]) -> None:
        self.sample_configuration = draw


class CandidatePoolMaximizer(AbstractAcquisitionMaximizer):
    """Scores the acquisition function on every candidate not yet evaluated and ranks them.

    ``pool()`` gives the open candidates' indices and their vectors (precomputed once, so a
    proposal costs one batched prediction, not one conversion per configuration).
    """

    def __init__(
        self,
        configspace: ConfigurationSpace,
        pool: Callable[[], tuple[np.ndarray, np.ndarray]],
        configs: Sequence[Configuration],
        draw: Callable[[], Configuration],
        challengers: int,
        seed: int,
    ) -> None:
        super().__init__(configspace, challengers=challengers, seed=seed)
        self._pool = pool
        self._configs = configs
        self._sampler = _CandidateSampler(draw)

    def maximize(
        self,
        previous_configs: list[Configuration],
        n_points: int | None = None,
        random_design: AbstractRandomDesign | None = None,
    ) -> ChallengerList:
        wanted = n_points or self._challengers

        def ranked() -> list[Configuration]:
            return [config for _, config in self._maximize(previous_configs, wanted)]

        challengers = ChallengerList(self._sampler, ranked, random_design)  # type: ignore[arg-type]
        if random_design is not None:
            random_design.next_iteration()
        return challengers

    def _maximize(self, previous_configs: list[Configuration], n_points: int) -> list[tuple[float, Any]]:
        indices, vectors = self._pool()
        if not len(indices):
            return []
        assert self._acquisition_function is not None
        values = np.nan_to_num(self._acquisition_function._compute(vectors)[:, 0], nan=-np.inf)
        n = min(n_points, len(values))
        top = np.argpartition(-values, n - 1)[:n]
        ties = self._rng.rand(n)
        ranked = top[np.lexsort((ties, -values[top]))]
        return [(float(values[i]), self._configs[indices[i]]) for i in ranked]


class _ConfigSelector(ConfigSelector):
    """SMAC's selector with a batched best-prediction and a refit schedule that follows the data.

    The model is refit after every new measurement while fewer than ``refit_growth`` are known;
    past that, after every ``1/refit_growth`` growth of the data (one measurement in 100 changes a
    forest little), so a proposal's cost stays flat instead of growing with the history.
    """

    def __init__(self, scenario: Scenario, *, refit_growth: int, max_batch: int) -> None:
        super().__init__(scenario, retrain_after=1)
        self._refit_growth = refit_growth
        self._max_batch = max_batch

    @property  # type: ignore[override]
    def _retrain_after(self) -> int:
        trained_on = max(0, self._previous_entries)
        return max(1, min(self._max_batch, trained_on // self._refit_growth))

    @_retrain_after.setter
    def _retrain_after(self, value: int) -> None:
        pass  # set by the base class; the schedule above replaces it

    def _get_x_best(self, X: np.ndarray) -> tuple[np.ndarray, float]:
        assert self._model is not None
        mean, _ = self._model.predict_marginalized(X)
        best = int(np.argmin(mean[:, 0]))
        return X[best], float(mean[best, 0])


@dataclass
class Proposal:
    """One configuration SMAC asked for, and the candidate it is (None: not a candidate)."""

    info: TrialInfo
    index: int | None


class SmacSession:
    """One SMAC optimiser over a space's candidates, proposing indices and learning their costs.

    Costs that SMAC cannot model (a failed candidate, a point that is not a candidate) are told as
    ``penalty_factor`` times the worst time seen so far; until a first time is known they wait.
    """

    def __init__(
        self,
        space: SearchSpace,
        *,
        initial: Sequence[int],
        seed: int,
        settings: BOSettings,
        workdir: Path,
    ) -> None:
        self.space = space
        self._penalty_factor = settings.penalty_factor
        self._worst: float | None = None
        self._pending: list[TrialInfo] = []
        self._rng = np.random.default_rng(seed)
        self.configspace = ConfigurationSpace(seed=seed)
        self.configspace.add([self._hyperparameter(d) for d in range(len(space.names))])
        self._column = [self.configspace.index_of[f"x{d}"] for d in range(len(space.names))]
        self._configs = [self._config_of(point) for point in space.points]
        self._vectors = np.array([config.get_array() for config in self._configs])
        self._open = np.ones(len(space), dtype=bool)

        scenario = Scenario(
            self.configspace,
            name="search",
            output_directory=workdir / "smac",
            deterministic=True,
            n_trials=max(len(space), len(initial) + 1),
            seed=seed,
        )
        self._scenario = scenario
        acquisition = EI(xi=0.0, log=False)
        self._facade = HyperparameterOptimizationFacade(
            scenario,
            None,
            model=RandomForest(
                self.configspace,
                n_trees=settings.n_trees,
                ratio_features=1.0,
                min_samples_split=2,
                min_samples_leaf=1,
                bootstrapping=True,
                log_y=False,
                max_leaf_nodes=None,  # an int makes scikit-learn pre-allocate that many nodes per tree
                n_jobs=1,
                seed=seed,
            ),
            acquisition_function=acquisition,
            acquisition_maximizer=CandidatePoolMaximizer(
                self.configspace, self._open_pool, self._configs, self._draw, CHALLENGERS, seed
            ),
            initial_design=RandomInitialDesign(
                scenario, n_configs=0, additional_configs=[self._configs[i] for i in initial]
            ),
            random_design=ProbabilityRandomDesign(settings.random_probability, seed=seed),
            intensifier=Intensifier(scenario, max_config_calls=1, seed=seed),
            runhistory_encoder=RunHistoryLogScaledEncoder(scenario),
            config_selector=_ConfigSelector(
                scenario, refit_growth=settings.refit_growth, max_batch=CHALLENGERS // 2
            ),
            logging_level=False,
            overwrite=True,
        )

    @property
    def runhistory(self) -> Any:
        """What SMAC has been told so far (its ``RunHistory``)."""
        return self._facade.runhistory

    def _hyperparameter(self, dim: int) -> OrdinalHyperparameter | CategoricalHyperparameter:
        indices = list(range(len(self.space.values[dim])))
        if self.space.is_numeric(dim):
            return OrdinalHyperparameter(f"x{dim}", indices)
        return CategoricalHyperparameter(f"x{dim}", indices)

    def _config_of(self, point: Sequence[int]) -> Configuration:
        vector = np.zeros(len(point))
        for dim, value in enumerate(point):
            vector[self._column[dim]] = value
        return Candidate(self.configspace, vector=vector)

    def index_of(self, config: Configuration) -> int | None:
        vector = config.get_array()
        if np.isnan(vector).any():
            return None
        return self.space.index_of(tuple(int(vector[c]) for c in self._column))

    def _open_pool(self) -> tuple[np.ndarray, np.ndarray]:
        indices = np.flatnonzero(self._open)
        return indices, self._vectors[indices]

    def _draw(self) -> Configuration:
        indices = np.flatnonzero(self._open)
        if not len(indices):
            return self.configspace.sample_configuration()
        config = self._configs[int(self._rng.choice(indices))]
        config.origin = "Random candidate"
        return config

    def ask(self) -> Proposal:
        info = self._facade.ask()
        index = self.index_of(info.config)
        if index is not None:
            self._open[index] = False
        return Proposal(info, index)

    def tell(self, proposal: Proposal, value: float | None) -> None:
        """Tell SMAC a measured time; ``math.inf`` (failed) and ``None`` (not a candidate) get the penalty."""
        if value is not None and math.isfinite(value):
            self._worst = value if self._worst is None else max(self._worst, value)
            self._facade.tell(proposal.info, TrialValue(cost=value), save=False)
            pending, self._pending = self._pending, []
            for info in pending:
                self._tell_penalty(info)
        elif self._worst is None:
            self._pending.append(proposal.info)
        else:
            self._tell_penalty(proposal.info)

    def _tell_penalty(self, info: TrialInfo) -> None:
        assert self._worst is not None
        cost = self._penalty_factor * self._worst
        self._facade.tell(info, TrialValue(cost=cost, status=StatusType.CRASHED), save=False)

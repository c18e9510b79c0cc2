"""Bayesian optimisation with SMAC 2.x (extra ``bo``): a random-forest model proposes candidates.

The search evaluates the warm-start candidates and a small random initial design first, then asks
SMAC for one candidate at a time and tells it the measured time. SMAC works in a temporary
directory that is removed afterwards, never prompts, and leaves logging and warnings configuration
as it found them. If SMAC fails, the search goes on with random proposals after one warning.
"""

from __future__ import annotations

import logging
import math
import random
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._log import DejavuTuningWarning, warn_once
from ._global_state import isolated, quiet_third_party
from .base import SearchRun, Strategy
from .exhaustive import ordered
from .random_search import RandomSearch

log = logging.getLogger(__name__)


class SmacFailure(RuntimeError):
    """SMAC could not start or could not propose; the search continues without it."""


@dataclass(frozen=True)
class BOSettings:
    """Defaults shared by every tuning space (docs/search.md explains each choice).

    ``initial_per_dim``/``initial_min``: random candidates measured before the model proposes
    (``max(initial_min, initial_per_dim * dimensions)``, at most ``initial_max_share`` of the
    evaluation budget; warm-start candidates count towards it). ``penalty_factor``: the cost told to
    SMAC for a failed candidate or a non-candidate, as a multiple of the worst time seen.
    ``max_free_proposals``: consecutive proposals that cost nothing (already measured, or not a
    candidate) before the search stops trusting the model and continues at random.
    """

    initial_per_dim: int = 2
    initial_min: int = 5
    initial_max_share: float = 0.25
    penalty_factor: float = 2.0
    max_free_proposals: int = 64
    n_trees: int = 10
    random_probability: float = 0.2
    refit_growth: int = 100

    def initial_size(self, dimensions: int, max_evaluations: int) -> int:
        wanted = max(self.initial_min, self.initial_per_dim * dimensions)
        return max(1, min(wanted, math.floor(self.initial_max_share * max_evaluations)))


@dataclass
class BayesianOptimization(Strategy):
    """SMAC's random forest and expected improvement over the candidates (``use_bo=True``)."""

    name = "bayesian"
    config: BOSettings = field(default_factory=BOSettings)

    def settings(self) -> dict[str, Any]:
        return {"strategy": self.name, **asdict(self.config)}

    def search(self, run: SearchRun, warm_start: Sequence[int], seed: int) -> None:
        space = run.space
        n_initial = self.config.initial_size(len(space.names), run.limit)
        if len(space) - len(run.results) <= n_initial or not space.names:
            RandomSearch().search(run, warm_start, seed)  # too small for a model to pay
            return
        initial = self._initial_design(run, warm_start, seed, n_initial)
        try:
            with tempfile.TemporaryDirectory(prefix="triton-dejavu-like-smac-") as workdir:
                session = self._open(run, initial, seed, Path(workdir))
                self._loop(run, session)
        except SmacFailure as exc:
            cause = exc.__cause__ or exc
            warn_once(
                DejavuTuningWarning,
                f"bayesian:{type(cause).__name__}",
                "Bayesian optimisation stopped (%s); continuing with random proposals",
                cause,
            )
            RandomSearch().search(run, initial, seed)

    def planned(self, run: SearchRun, warm_start: Sequence[int], seed: int) -> list[int] | None:
        """The initial design is fixed before any result (so it is compiled together); what the
        model proposes after it is not known in advance."""
        n_initial = self.config.initial_size(len(run.space.names), run.limit)
        if len(run.space) - len(run.results) <= n_initial or not run.space.names:
            return RandomSearch().planned(run, warm_start, seed)
        return self._initial_design(run, warm_start, seed, n_initial)

    def _initial_design(self, run: SearchRun, warm_start: Sequence[int], seed: int, size: int) -> list[int]:
        """Warm-start candidates, those already measured (a restart), then random candidates."""
        first = ordered(warm_start, sorted(run.results))
        taken = set(first)
        rest = [i for i in range(len(run.space)) if i not in taken]
        fill = random.Random(seed).sample(rest, min(len(rest), max(0, size - len(warm_start))))
        return first + fill

    def _open(self, run: SearchRun, initial: list[int], seed: int, workdir: Path) -> Any:
        try:
            with isolated():
                from ._smac_session import SmacSession

                return SmacSession(
                    run.space, initial=initial, seed=seed % (2**31 - 1), settings=self.config, workdir=workdir
                )
        except Exception as exc:
            raise SmacFailure("SMAC could not be set up") from exc

    def _loop(self, run: SearchRun, session: Any) -> None:
        free = 0
        while True:
            try:
                with quiet_third_party():
                    proposal = session.ask()
            except Exception as exc:
                raise SmacFailure("SMAC could not propose a candidate") from exc
            index = proposal.index
            known = index is None or index in run.results
            free = free + 1 if known else 0
            if free > self.config.max_free_proposals:
                raise SmacFailure(f"{free} proposals in a row were not new candidates")
            value = None if index is None else run.evaluate(index)
            try:
                with quiet_third_party():
                    session.tell(proposal, value)
            except Exception as exc:
                raise SmacFailure("SMAC could not learn from a measurement") from exc

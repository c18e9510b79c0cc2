"""Deciding a key the fast path missed: the miss policy's answer, or a tuning run (alone, under a
single-flight lease, or split among ranks) whose result is kept in the store.

:class:`KeyDecision` is what :class:`~triton_dejavu_like.tuner.autotuner.Autotuner` hands a miss to.
It is given what it needs (the policy, the settings, the kernel recipe, the tuner's config ids)
and never reaches back into the tuner, except through ``expose_nargs``: upstream's hooks and
``prune_configs`` read the arguments of the call being tuned from ``tuner.nargs``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .. import _compat
from .._compat import Config
from ..measure import Benchmarker, KernelRecipe
from ..search import Budget
from ..store import Platform, Store, StoredEntry
from ..store.warm_start import MAX_FOREIGN_SEEDS
from . import ranks
from .config_ids import CandidateSet
from .key import TuningKey
from .nearest import RestoredEntries
from .policy import MissPolicy
from .settings import TunerSettings
from .single_flight import lease_held, stored_meanwhile, tune_once, wait_timeout_s
from .trial import Outcome
from .tuning import TuningRun


@dataclass
class ProcessState:
    """What a tuner learns once per process, at its first miss."""

    platform: Platform
    benchmarker: Benchmarker
    store: Store
    restored: RestoredEntries  # by key id
    identity: dict[str, Any] | None  # the storage identity (None: not computable)
    #: ``add_store`` registrations the store has read (``store.layered.registrations()``)
    registrations: int = 0
    #: the roots holding this kernel's results under another identity (looked for once, when
    #: nothing is stored for its own and tuning is off: :meth:`KeyDecision.stored_elsewhere`)
    elsewhere: list[str] | None = None


@dataclass(kw_only=True)
class KeyDecision:
    """One missed key with more than one candidate, and how its tuner measures candidates."""

    name: str  # the kernel's
    state: ProcessState
    key: TuningKey
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    nargs: dict[str, Any]  # the arguments by name
    candidates: list[Config]  # after upstream's pruning
    candidates_hash: str
    pruning: bool  # early_config_prune or perf_model: the stored candidates may differ from the list
    policy: MissPolicy
    settings: TunerSettings
    recipe: Callable[[], KernelRecipe]
    config_id: Callable[[Config], str]
    #: a candidate list's set (its config ids, its search grid), shared by the keys that tune it
    candidate_set: Callable[[Sequence[Config]], CandidateSet]
    expose_nargs: Callable[[dict[str, Any] | None], None]
    #: the roots holding this kernel's results under another identity (``"ROOT: WHAT"``)
    find_elsewhere: Callable[[], list[str]] = list
    _tuned: list[Config] = field(init=False, default_factory=list)  # the candidates the policy left
    _run: TuningRun | None = field(init=False, default=None)

    def outcome(self) -> Outcome:
        """The policy's answer (restored, fallback, ...), else the result of tuning: with ranks the
        ranks that miss this key split its candidates; otherwise one process tunes it under a lease
        and the others adopt what it stores."""
        answer = self.policy.answer(
            self.key,
            self.candidates,
            self.candidates_hash,
            self.state.restored,
            pruning=self.pruning,
            elsewhere=self.stored_elsewhere,
        )
        if isinstance(answer, Outcome):
            return answer
        self._tuned = answer
        recipe = self.recipe()
        self._run = TuningRun(
            recipe,
            self.settings.strategy,
            self.settings.budget,
            self.state.benchmarker,
            _compat.is_interpreted(recipe.fn),
        )
        meeting_place = ranks.active_store()
        if meeting_place is not None:
            kernel = self.state.identity or {"kernel": self.name, "gpu": self.state.platform.gpu}
            scope = [kernel, self.key.id or repr(self.key.values), self.candidates_hash]
            timeout = wait_timeout_s(len(answer), self.state.restored)
            return ranks.tune_together(
                meeting_place,
                scope,
                self.key,
                self.name,
                answer,
                self._measure_share,
                self._keep,
                timeout,
                lead=lambda: lease_held(self.state.store, self.key),
                config_id=self.config_id,
                # recorded since this rank loaded the store (another job, a process outside the
                # group): the leader makes it the group's decision, so that every member launches it
                stored=lambda: stored_meanwhile(self.state.store, self.key, self._adopt),
            )
        return tune_once(
            self.state.store,
            self.key,
            self.name,
            len(answer),
            self.state.restored,
            lambda: self._measure(self._tuned),
            self._adopt,
            self._keep,
        )

    def stored_elsewhere(self) -> list[str]:
        """The roots holding this kernel's results under another identity, looked for once per
        process state (a directory walk; only asked when nothing is stored for the kernel itself)."""
        if self.state.elsewhere is None:
            self.state.elsewhere = self.find_elsewhere()
        return self.state.elsewhere

    def _measure(
        self, subset: list[Config], reference: Sequence[Config] | None = None, run: TuningRun | None = None
    ) -> Outcome:
        run = run or self._run
        assert run is not None
        chosen = self.candidate_set(subset)
        self.expose_nargs(self.nargs)
        try:
            return run.run(
                self.key,
                self.args,
                self.kwargs,
                chosen,
                warm_start=self._warm_start(chosen),
                candidates_hash=self.candidates_hash,
                reference=reference,
            )
        finally:
            self.expose_nargs(None)

    def _measure_share(
        self, subset: list[Config], reference: Sequence[Config] | None = None, *, careful: bool = False
    ) -> Outcome:
        """A rank's measurement: an error of the ``pre_hook``'s reset after it ends this rank's share
        (the ranks' decision is made from the others' timings). ``careful``: the leader's finalists,
        each measured (exhaustively, without the kernel's budget); the entry still names the kernel's
        search, which chose them."""
        assert self._run is not None
        if careful:
            outcome = self._measure(
                subset, reference, replace(self._run, strategy="exhaustive", budget=Budget())
            )
            if outcome.entry is not None:
                data = {**outcome.entry.to_json(), **self._run.search_fields()}
                data.pop("ended_by", None)  # the finalists' measurement ended, not the search
                outcome.entry = StoredEntry.from_json(outcome.entry.key_id, data)
        else:
            outcome = self._measure(subset, reference)
        if outcome.after_error is not None:
            raise outcome.after_error
        return outcome

    def _keep(self, outcome: Outcome) -> None:
        if self.key.id is not None and outcome.entry is not None:
            # written first: a result known here first and never written (a KeyboardInterrupt in
            # the write) was answered from memory at the next call and never written again
            self.state.store.record({self.key.id: outcome.entry})
            self.state.restored[self.key.id] = outcome.entry

    def _adopt(self, entry: StoredEntry) -> Outcome | None:
        """A result another process (or rank) stored for this key, if it fits these candidates."""
        found = self.policy.restored(entry, self._tuned, self.candidates_hash, pruning=self.pruning)
        if found is not None:
            self.state.restored[self.key.id or ""] = entry
        return found

    def _warm_start(self, candidates: CandidateSet) -> list[int]:
        """Indices of candidates that won other stored keys, then of the winners of this kernel
        stored for other GPUs and platforms (a few): good first guesses for a new key, those that
        won more keys first (a search may measure only the first few: BO's warm-start cap)."""
        if self.settings.strategy == "exhaustive":
            return []
        index = candidates.index
        won = Counter(entry.config_id for entry in self.state.restored.values())
        winners = [cid for cid, _ in won.most_common()]
        foreign = [cid for cid in self.state.store.foreign_winners() if cid in index]
        seeds: list[int] = []
        for cid in winners + foreign[:MAX_FOREIGN_SEEDS]:
            i = index.get(cid)
            if i is not None and i not in seeds:
                seeds.append(i)
        return seeds

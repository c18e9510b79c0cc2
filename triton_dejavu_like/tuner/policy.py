"""The miss policy: how a key missing from memory is answered before (or instead of) tuning.

In order: a stored entry for the key (when pruning cannot have changed the candidates), then
``TRITON_DEJAVU_FORCE_FALLBACK=1`` (``informed_fallback`` when results were restored, else the
``fallback_heuristic``; no tuning). When tuning is off (:func:`~triton_dejavu_like.tuning`,
``TRITON_DEJAVU_READ_ONLY=1`` or ``TRITON_DEJAVU_DETERMINISTIC=1``) the miss is then answered without
benchmarking by the nearest tuned key (:mod:`.nearest`), else the ``fallback_heuristic``, else the
first candidate; with tuning off, a miss is counted (:mod:`.misses`) whichever of these (the forced
fallback included) answered it. Otherwise ``TRITON_DEJAVU_USE_ONLY_RESTORED=1``
restricts tuning to configs that won a restored key (all candidates, with a warning, when none of
them won one), and what is left is tuned over the remaining candidates.

A fallback function that raises, or answers something other than a ``triton.Config`` setting every
tuned meta-parameter (and only kernel arguments and compile options), is an :class:`AutotuningError`
naming the kernel, the function and the key while tuning is allowed; with tuning off it is said once
per kernel (``DejavuTuningWarning``) and the miss is answered as if the function were not given (a
serving call never fails for it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _env
from .._compat import Config
from .._log import DejavuConfigWarning, DejavuTuningWarning, log, warn_once
from ..codec import short_repr
from ..store import StoredEntry
from ..store.identity import callable_name
from .arguments import unknown_parameters
from .errors import AutotuningError
from .key import TuningKey
from .misses import Miss, record_miss
from .mode import graph_capturing, tuning_enabled
from .nearest import RestoredEntries, alike, nearest
from .trial import Outcome

_UNPREPARED = object()


@dataclass
class MissPolicy:
    """Answers a miss for one kernel; ``config_id`` maps a candidate to its typed id (memoised).
    ``label`` is the ``module.qualname`` that warnings name the kernel by and its misses are counted
    under, ``kernel_name`` its short name (as the store names it; also in the misses file)."""

    kernel_name: str
    label: str
    fallback_heuristic: Callable[[tuple[Any, ...]], Config] | None
    config_id: Callable[[Config], str]
    informed_fallback: Callable[[tuple[Any, ...], Any], Config] | None = None
    prepare_informed_fallback: Callable[[dict[tuple[Any, ...], Config]], Any] | None = None
    store_root: Path | None = None  # custom_data_storage: the misses file is never written inside it
    arg_names: Sequence[str] = ()  # the kernel's arguments: what a fallback's config may set, with options
    _prepared: Any = field(default=_UNPREPARED, init=False, repr=False)

    def answer(
        self,
        key: TuningKey,
        candidates: list[Config],
        candidates_hash: str,
        restored: Mapping[str, StoredEntry],
        *,
        pruning: bool,
        elsewhere: Callable[[], list[str]] = list,
    ) -> Outcome | list[Config]:
        """An :class:`Outcome` that needs no tuning, or the candidates to tune among. ``elsewhere``:
        the roots holding the kernel's results under another identity (asked with tuning off when
        nothing is stored for it, for the warning)."""
        entry = restored.get(key.id) if key.id is not None else None
        if entry is not None:
            found = self.restored(entry, candidates, candidates_hash, pruning=pruning)
            if found is not None:
                return found
        tuning = tuning_enabled()
        forced = _env.force_fallback()
        outcome = self._fallback(key, candidates, restored, tuning) if forced else None
        if outcome is None and not tuning:  # a heuristic the forced fallback asked is not asked again
            outcome = self.without_tuning(
                key, candidates, restored, heuristic=not forced, elsewhere=elsewhere
            )
        if outcome is not None:
            if not tuning:  # a key answered without tuning while tuning is off is a miss, however answered
                record_miss(
                    Miss(
                        self.label,
                        self.kernel_name,
                        key.values,
                        outcome.source,
                        outcome.config,
                        self.store_root,
                    )
                )
            return outcome
        if _env.use_only_restored():
            winners = {e.config_id for e in restored.values()}
            restricted = [c for c in candidates if self.config_id(c) in winners]
            if len(restricted) == 1:
                return Outcome(restricted[0], "single")
            if restricted:
                return restricted
            warn_once(
                DejavuConfigWarning,
                self.label,
                "%s: %s=1 but no stored winner is among the candidates; tuning all %d of them "
                "(is this kernel's store where it should be?)",
                self.label,
                _env.USE_ONLY_RESTORED,
                len(candidates),
            )
        return candidates

    def without_tuning(
        self,
        key: TuningKey,
        candidates: list[Config],
        restored: Mapping[str, StoredEntry],
        *,
        heuristic: bool = True,
        elsewhere: Callable[[], list[str]] = list,
    ) -> Outcome:
        """The nearest tuned key's config, else the ``fallback_heuristic`` (unless ``heuristic`` is
        False: it was asked already), else the first candidate (upstream's choice when it does not
        benchmark). ``elsewhere``: see :meth:`answer`."""
        deterministic = _env.deterministic()
        if graph_capturing() and not deterministic:
            warn_once(
                DejavuTuningWarning,
                self.label,
                "%s: key %r is not in the store and a CUDA graph is being captured, where candidates "
                "cannot be timed (timing synchronises): it, and any other key missed during capture, is "
                "answered by the nearest tuned key, the fallback_heuristic or the first config, for the "
                "life of this process. Launch each shape once before capturing, or tune ahead of time "
                "with 'python -m triton_dejavu_like tune SPEC'",
                self.label,
                key.values,
            )
        else:
            warn_once(
                DejavuTuningWarning,
                self.label,
                "%s: tuning is off (%s) and %s; they are answered by the "
                "nearest tuned key, the fallback_heuristic or the first config. Tune them ahead of time "
                "with 'python -m triton_dejavu_like tune SPEC' (%s; 'python -m triton_dejavu_like "
                "misses FILE' lists them)",
                self.label,
                f"{_env.DETERMINISTIC}=1" if deterministic else f"{_env.READ_ONLY} or tuning(False)",
                _what_is_missing(restored, elsewhere),
                f"{_env.MISSES_FILE} records them"
                if _env.misses_file()
                else f"set {_env.MISSES_FILE}=FILE to record them",
            )
        outcome = self._untuned(key, candidates, restored, heuristic)
        if deterministic:  # the warning above is once per kernel: each key is a log record
            log.info(
                "%s: %s=1 and key %r is not in the store; answered by %s",
                self.label,
                _env.DETERMINISTIC,
                key.values,
                outcome.source,
            )
        return outcome

    def _untuned(
        self, key: TuningKey, candidates: list[Config], restored: Mapping[str, StoredEntry], heuristic: bool
    ) -> Outcome:
        """The answer with tuning off: the nearest tuned key, the heuristic, the first candidate."""
        index = restored.key_index() if isinstance(restored, RestoredEntries) else restored.values()
        found = nearest(key.values, index, candidates, self.config_id)
        if found is not None:
            entry, config = found
            log.debug("%s: key %r answered by the nearest key %r", self.label, key.values, entry.key)
            return Outcome(config, "nearest")
        config = self._heuristic(key, candidates, raising=False) if heuristic else None
        return Outcome(config, "heuristic") if config is not None else Outcome(candidates[0], "default")

    def _fallback(
        self, key: TuningKey, candidates: list[Config], restored: Mapping[str, StoredEntry], tuning: bool
    ) -> Outcome | None:
        """``TRITON_DEJAVU_FORCE_FALLBACK=1``: the informed fallback when results were restored, else
        the fallback heuristic, else None (with a warning: tune, or with ``tuning`` off answer as
        any miss is then). A fallback that fails (see :meth:`_ask`) is passed over to the next."""
        informed = self.informed_fallback is not None and bool(restored)
        if informed:
            cache = self._informed_cache(candidates, restored)
            function = self.informed_fallback
            assert function is not None
            config = self._ask(
                "informed_fallback",
                lambda: function(key.values, cache),
                key,
                candidates,
                raising=tuning and self.fallback_heuristic is None,
            )
            if config is not None:
                return Outcome(config, "heuristic")
        if self.fallback_heuristic is not None:
            config = self._heuristic(key, candidates, raising=tuning)
            return Outcome(config, "heuristic") if config is not None else None
        if not informed:
            warn_once(
                DejavuConfigWarning,
                self.label,
                "%s: %s=1 but no fallback_heuristic was given%s; %s",
                self.label,
                _env.FORCE_FALLBACK,
                " (and nothing was restored for informed_fallback)" if self.informed_fallback else "",
                "tuning instead" if tuning else "answering misses as with tuning off",
            )
        return None

    def _informed_cache(self, candidates: list[Config], restored: Mapping[str, StoredEntry]) -> Any:
        """``{key tuple: Config}`` of the restored results (the candidate objects where they match), or
        what ``prepare_informed_fallback`` made of it at the first fallback."""
        if self._prepared is not _UNPREPARED:
            return self._prepared
        by_id = alike(candidates, self.config_id)
        cache = {
            entry.key: entry.chosen_among(by_id[entry.config_id])
            if entry.config_id in by_id
            else entry.config
            for entry in restored.values()
        }
        if self.prepare_informed_fallback is None:
            return cache
        prepared = self.prepare_informed_fallback(cache)
        if prepared is None:
            raise AutotuningError(f"{self.label}: prepare_informed_fallback returned None")
        self._prepared = prepared
        return prepared

    def restored(
        self, entry: StoredEntry, candidates: list[Config], candidates_hash: str, *, pruning: bool
    ) -> Outcome | None:
        """The outcome of a stored ``entry`` for the key, if it fits these candidates (also for an
        entry another process or rank stored meanwhile)."""
        if pruning and entry.candidates != candidates_hash:
            log.debug("%s: pruning gives another candidate set than the stored one; re-tuning", self.label)
            return None
        matches = [c for c in candidates if self.config_id(c) == entry.config_id]
        if matches:
            return Outcome(entry.chosen_among(matches), "restored", entry=entry)
        warn_once(
            DejavuTuningWarning,
            self.label + entry.config_id,
            "%s: stored config %s is not among the current candidates; ignoring it",
            self.label,
            entry.config_id[:200],
        )
        return None

    def _heuristic(self, key: TuningKey, candidates: list[Config], *, raising: bool) -> Config | None:
        """``fallback_heuristic(key)`` checked (:meth:`_ask`); None without one."""
        function = self.fallback_heuristic
        if function is None:
            return None
        return self._ask("fallback_heuristic", lambda: function(key.values), key, candidates, raising=raising)

    def _ask(
        self, name: str, ask: Callable[[], Any], key: TuningKey, candidates: list[Config], *, raising: bool
    ) -> Config | None:
        """What the user's function ``name`` (``fallback_heuristic``, ``informed_fallback``) answers
        for ``key``: a ``triton.Config`` that sets every tuned meta-parameter of the candidates (and
        only kernel arguments and compile options). If it raises or answers anything else: with
        ``raising`` (tuning is allowed) an :class:`AutotuningError` naming the kernel, the function and
        the key; otherwise None, said once per kernel and function (later keys are logged), and the
        miss is answered as without it."""
        try:
            config = ask()
        except Exception as exc:
            problem, cause = f"raised {type(exc).__name__}: {str(exc)[:200]}", exc
        else:
            problem, cause = _problem(config, candidates, self.arg_names), None
            if problem is None:
                return config
        function = callable_name(getattr(self, name))
        text = f"{self.label}: {name} {function} {problem} for key {short_repr(key.values)}"
        if raising:
            raise AutotuningError(text) from cause
        instead = (
            "using fallback_heuristic"
            if name == "informed_fallback" and self.fallback_heuristic is not None
            else f"answering as if there were no {name}"
        )
        if not warn_once(DejavuTuningWarning, f"{self.label}:{name}", "%s; %s", text, instead):
            log.info("%s; %s", text, instead)
        return None


def _what_is_missing(restored: Mapping[str, StoredEntry], elsewhere: Callable[[], list[str]]) -> str:
    """Which keys the tuning-off warning is about: some, or (nothing stored for the kernel as it is)
    every one, with the roots that hold its results for another code version, config list, Triton..."""
    if restored:
        return "some keys are not in the store"
    found = elsewhere()
    if not found:
        return "none of its keys is in the store"
    return (
        f"none of its keys is stored for the kernel as it is now, only for what differs from it "
        f"({' / '.join(found)}), which is never launched for it: every key is a miss until its shapes "
        "are tuned again for this version and the new results shipped"
    )


def _problem(config: Any, candidates: list[Config], arg_names: Sequence[str]) -> str | None:
    """Why ``config`` cannot be launched in place of the candidates, or None."""
    if not isinstance(config, Config):
        return f"returned {type(config).__name__}, not a triton.Config"
    # what every candidate sets (a parameter only some set has a default in the kernel)
    tuned = set.intersection(*(set(candidate.kwargs) for candidate in candidates)) if candidates else set()
    missing = sorted(tuned.difference(config.kwargs))
    if missing:
        return (
            f"returned a config without {', '.join(missing)} (tuned meta-parameters of the kernel; it "
            f"sets {', '.join(sorted(config.kwargs)) or 'none'})"
        )
    unknown = unknown_parameters(arg_names, config.kwargs) if arg_names else []
    if unknown:
        return (
            f"returned a config that sets {', '.join(map(repr, unknown))}, neither an argument of the "
            "kernel nor a compile option (a launch with it fails)"
        )
    return None

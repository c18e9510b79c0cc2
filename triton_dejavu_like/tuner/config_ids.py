"""The ids of a tuner's configs, and what a miss derives from its candidate list, computed once.

A config's id (:func:`~triton_dejavu_like.codec.config_id`, canonical JSON of its fields) names it in
the storage identity, in the hash of a candidate set and in a stored winner. :class:`ConfigIds`
remembers it per Config object while the object's fields stay what they were (an
``early_config_prune`` may change the configs it returns in place).

Every missed key also needs the hash of its candidates' ids (stored with the entry), the position
of a config id (the warm start), the order of the candidates (which failure upstream would raise)
and, to tune, the search grid. Each walks the whole list: over a ConfigSpace of 10^5 points they
took about 2-5 s per new key, at 10^6 about 50 s, whatever the search's budget. A
:class:`CandidateSet` computes them once (the grid and the indices when first asked), and
:meth:`ConfigIds.candidates` hands the same set to the next key whose list holds the same Config
objects with the fields their ids were computed from: a check of every config at C speed (about
0.05 s per 10^5 configs), no id computed again.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import weakref
from collections.abc import Iterable, Iterator, Sequence
from functools import cached_property
from typing import Any, TypeVar

from .._compat import Config
from ..codec import EncodingError, config_fields, config_id, configs_fields
from ..search.space import SearchSpace
from ..store.identity import stable_hash

T = TypeVar("T")

#: The start of the id of a config that cannot be stored (of this process only).
UNSTORABLE = "unstorable:"
#: Numbers the ids of configs that cannot be stored (never reused, unlike an object's address).
_unstorable = itertools.count()
#: How many recent candidate lists a tuner keeps the sets of: the full list, a rank's share of it,
#: the list a pruning gives for another kind of key.
KEEP_SETS = 3

#: ``id(config)`` -> (the config, held weakly; a copy of its kwargs and its other fields when its id
#: was computed; its id).
Memo = dict[int, tuple["weakref.ref[Config]", dict[str, Any], tuple[Any, ...], str]]

_kwargs = operator.attrgetter("kwargs")
_known_kwargs, _known_fields, _known_id = (operator.itemgetter(i) for i in (1, 2, 3))


def _forget(memo: Memo, key: int, ref: weakref.ref[Config]) -> None:
    """A config of ``memo`` is gone: its entry goes too (unless a later one replaced it)."""
    entry = memo.get(key)
    if entry is not None and entry[0] is ref:
        memo.pop(key, None)


def first_positions(items: Iterable[T]) -> dict[T, int]:
    """Each distinct item -> the position of its first occurrence."""
    positions: dict[T, int] = {}
    for i, item in enumerate(items):
        positions.setdefault(item, i)
    return positions


class CandidateSet:
    """A candidate list with its config ids, and what is derived from them when first asked."""

    def __init__(self, configs: Sequence[Config], ids: list[str]) -> None:
        self.configs = list(configs)
        self.ids = ids
        self.members = tuple(map(id, self.configs))

    @cached_property
    def hash(self) -> str:
        """The stored ``candidates`` hash: of the ids, independent of their order."""
        return stable_hash(sorted(self.ids))

    @cached_property
    def index(self) -> dict[str, int]:
        """A config id -> the position of its first candidate."""
        return first_positions(self.ids)

    @cached_property
    def by_member(self) -> dict[int, str]:
        """``id(config)`` -> its config id, for the configs of this set."""
        return dict(zip(self.members, self.ids))

    @cached_property
    def order(self) -> dict[Config, int]:
        """A candidate -> its first position (configs equal as Triton compares them share one)."""
        return first_positions(self.configs)

    @cached_property
    def space(self) -> SearchSpace:
        return SearchSpace.from_configs(self.configs)


class ConfigIds:
    """A tuner's config ids (remembered per Config object while it lives) and the sets of its recent
    candidate lists. While a miss is decided (:meth:`deciding`), the ids of its candidates, found
    unchanged when it began, are read from its set; no user code that changes a config in place runs
    until the decision (prunes run before it)."""

    def __init__(self) -> None:
        self._memo: Memo = {}
        self._recent: list[CandidateSet] = []
        self._current: CandidateSet | None = None
        #: ``id()`` of the tuner's listed configs (made at the first set, dropped with the sets)
        self._listed: frozenset[int] | None = None

    def __call__(self, config: Config) -> str:
        """``config_id(config)``, remembered while the config's fields stay the same. A config with a
        value that cannot be stored (a JIT function as a constexpr) gets an id of this process only:
        its results stay in memory. A config is remembered while it lives: the configs that an
        ``early_config_prune`` makes anew at each miss were all kept for the life of the kernel."""
        current = self._current
        if current is not None:
            known_id = current.by_member.get(id(config))
            if known_id is not None:
                return known_id
        kwargs, fields = config.kwargs, config_fields(config)
        memo, key = self._memo, id(config)
        known = memo.get(key)
        if known is None or known[0]() is not config or known[2] != fields or known[1] != kwargs:
            try:
                ident = config_id(config)
            except EncodingError:
                ident = f"{UNSTORABLE}{next(_unstorable)}"
            ref = weakref.ref(config, lambda ref: _forget(memo, key, ref))
            known = memo[key] = (ref, dict(kwargs), fields, ident)
        return known[3]

    def stored(self, config: Config) -> str:
        """The id, raising :class:`EncodingError` for a config that cannot be stored."""
        ident = self(config)
        return config_id(config) if ident.startswith(UNSTORABLE) else ident

    def hash(self, configs: Sequence[Config], *, stored: bool = False) -> str:
        """Hash of a set of configs, independent of their order (``stored``: raises EncodingError
        where one cannot be stored)."""
        ids = self.stored if stored else self
        return stable_hash(sorted(ids(c) for c in configs))

    def candidates(self, configs: Sequence[Config], listed: Sequence[Config] = ()) -> CandidateSet:
        """The set of ``configs``: a recent one that holds them unchanged, else a new one, kept for
        later keys if its configs are all among ``listed`` (the tuner's own list, alive anyway):
        configs that a prune makes anew at every miss are not kept alive by a set no key reuses."""
        members = tuple(map(id, configs))
        current = self._current
        if current is not None and members == current.members:  # checked when the miss began
            return current
        for i, known in enumerate(self._recent):
            if members == known.members and self._unchanged(known):
                self._recent.insert(0, self._recent.pop(i))
                return known
        made = CandidateSet(configs, [self(config) for config in configs])
        if self._listed is None:
            self._listed = frozenset(map(id, listed))
        if self._listed.issuperset(made.members):
            self._recent = [made, *self._recent[: KEEP_SETS - 1]]
        return made

    def _unchanged(self, known: CandidateSet) -> bool:
        """Whether each config of ``known`` still has the kwargs and fields its id was computed
        from, and that id is the set's (compared list to list: no Python-level loop)."""
        entries = list(map(self._memo.get, known.members))
        if None in entries or list(map(_known_id, entries)) != known.ids:
            return False
        configs = known.configs
        return list(map(_known_fields, entries)) == configs_fields(configs) and list(
            map(_known_kwargs, entries)
        ) == list(map(_kwargs, configs))

    def forget_sets(self) -> None:
        """Drop the candidate sets (the config list was changed: they are not asked for again)."""
        self._recent = []
        self._listed = None

    @contextlib.contextmanager
    def deciding(self, chosen: CandidateSet) -> Iterator[None]:
        """While a miss over ``chosen`` is decided, its configs' ids are read from it."""
        before, self._current = self._current, chosen
        try:
            yield
        finally:
            self._current = before

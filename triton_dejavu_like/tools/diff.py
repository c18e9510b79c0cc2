"""Compare the winners that several machines or ranks stored for the same kernels and keys.

``python -m triton_dejavu_like diff ROOT_A ROOT_B [ROOT_C ...]``: every source is a storage tree, a
``cache.json`` or a ``.tar.gz`` archive. Results are matched by the kernel part of their identity
(kernel, autotune_config, code_version, tune_features, kernel_configs) and the key; the platform
(dejavu, triton, toolchain, gpu) and the tag are ignored unless named with ``--match`` (compare
only like GPUs with ``--match gpu``). Only results of distinct sources are compared: a key one
source stores for several values of an ignored field (two GPUs, two tags) is a row per value, each
compared with the other sources' results for that value, never a difference within the source. A
key whose sources stored different configs is a difference. Nothing here prints or writes;
:mod:`triton_dejavu_like.tools.cli` formats the result.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..store import StoredEntry, inventory
from ..store.layout import IDENTITY_FIELDS, PLATFORM_FIELDS

#: Identity fields ignored when matching, unless ``--match`` names them.
MATCHABLE = (*PLATFORM_FIELDS, "tag")


@dataclass(frozen=True)
class Winner:
    """One source's stored result for a key."""

    source: str  # the root (as given) the result came from
    file: str  # the cache file
    identity: dict[str, str]
    entry: StoredEntry


@dataclass
class KeyComparison:
    kernel: str
    match: dict[str, str]
    key_id: str
    winners: list[Winner]
    #: ignored fields this row is told apart by: a source stores the key for several of their values
    apart: dict[str, str] = field(default_factory=dict)

    @property
    def sources(self) -> set[str]:
        return {w.source for w in self.winners}

    @property
    def differs(self) -> bool:
        """Two sources stored different configs (one source's own results are never compared)."""
        return any(
            a.source != b.source and a.entry.config_id != b.entry.config_id
            for a, b in itertools.combinations(self.winners, 2)
        )


@dataclass
class DiffReport:
    sources: list[str]
    compared: list[KeyComparison] = field(default_factory=list)
    #: key comparisons present in some sources only: (comparison, sources lacking it)
    missing: list[tuple[KeyComparison, list[str]]] = field(default_factory=list)
    problems: list[inventory.Problem] = field(default_factory=list)

    @property
    def differences(self) -> list[KeyComparison]:
        return [c for c in self.compared if c.differs]


def _match_fields(match: Iterable[str]) -> tuple[str, ...]:
    wanted = set(match)
    unknown = wanted.difference(MATCHABLE)
    if unknown:
        raise ValueError(f"--match accepts {', '.join(MATCHABLE)}, not {', '.join(sorted(unknown))}")
    return tuple(f for f in IDENTITY_FIELDS if f not in MATCHABLE or f in wanted)


def compare(sources: Sequence[Path], *, match: Iterable[str] = ()) -> DiffReport:
    """Compare the winners stored under ``sources`` (at least two)."""
    if len(sources) < 2:
        raise ValueError("diff needs at least two sources")
    fields = _match_fields(match)
    report = DiffReport([str(s) for s in sources])
    found: dict[tuple[tuple[str, ...], str], list[Winner]] = {}
    for source in sources:
        files, problems = inventory.read_sources([source])
        report.problems.extend(problems)
        for stored in files:
            identity = {name: stored.identity[name] for name in fields}
            for kid, entry in stored.entries.items():
                slot = found.setdefault((tuple(identity.values()), kid), [])
                slot.append(Winner(str(source), stored.source, stored.identity, entry))
    for (values, kid), winners in sorted(found.items()):
        match_values = dict(zip(fields, values))
        for apart, row in _rows(winners, fields):
            comparison = KeyComparison(match_values["kernel"], match_values, kid, row, apart)
            lacking = [s for s in report.sources if s not in comparison.sources]
            if lacking:
                report.missing.append((comparison, lacking))
            if len(comparison.sources) > 1:
                report.compared.append(comparison)
    return report


def _rows(winners: list[Winner], fields: Sequence[str]) -> list[tuple[dict[str, str], list[Winner]]]:
    """One key's results as the rows compared: split by each ignored field in which one source's own
    results differ (a root holding the kernel for two GPUs gives a row per GPU), with those values."""
    sources = {w.source for w in winners}
    apart = [
        name
        for name in IDENTITY_FIELDS
        if name not in fields
        and any(len({w.identity[name] for w in winners if w.source == s}) > 1 for s in sources)
    ]
    rows: dict[tuple[str, ...], list[Winner]] = {}
    for w in winners:
        rows.setdefault(tuple(w.identity[name] for name in apart), []).append(w)
    return [(dict(zip(apart, values)), row) for values, row in rows.items()]

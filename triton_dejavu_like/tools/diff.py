"""Compare the winners that several machines or ranks stored for the same kernels and keys.

``python -m triton_dejavu_like diff ROOT_A ROOT_B [ROOT_C ...]``: every source is a storage tree, a
``cache.json`` or a ``.tar.gz`` archive. Results are matched by the kernel part of their identity
(kernel, autotune_config, code_version, tune_features, kernel_configs) and the key; the platform
(dejavu, triton, toolchain, gpu) and the tag are ignored unless named with ``--match`` (compare
only like GPUs with ``--match gpu``). A key whose stored configs are not all the same is a
difference. Nothing here prints or writes; :mod:`triton_dejavu_like.tools.cli` formats the result.
"""

from __future__ import annotations

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

    @property
    def differs(self) -> bool:
        return len({w.entry.config_id for w in self.winners}) > 1


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
        comparison = KeyComparison(
            dict(zip(fields, values))["kernel"], dict(zip(fields, values)), kid, winners
        )
        present = {w.source for w in winners}
        lacking = [s for s in report.sources if s not in present]
        if lacking:
            report.missing.append((comparison, lacking))
        if len(winners) > 1:
            report.compared.append(comparison)
    return report

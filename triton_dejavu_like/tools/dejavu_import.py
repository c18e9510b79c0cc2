"""Convert triton-dejavu (0.5 to 0.7) ``cache.json`` files into this package's storage.

A triton-dejavu file looks like::

    {"signature": "JITFunction(my.module:matmul_kernel)", "total_bench_time_s": 12.3,
     "total_configs": 24, "keys": ["M", "N", "K"],
     "cache": {"('1024', '1024', '512', 'torch.float16')":
               "BLOCK_M: 64, BLOCK_N: 64, num_warps: 4, num_ctas: 1, num_stages: 3, maxnreg: None"},
     "timings": {"('1024', '1024', '512', 'torch.float16')": [0.041, 0.040, 0.043]}}

Keys are ``str()`` of a tuple and configs ``str()`` of a ``triton.Config``. They are read with a
small strict parser: Python's own tokenizer/AST (``ast.parse``) and a whitelist of literal nodes
(numbers, strings, ``True``/``False``/``None``, tuples); nothing is evaluated. Assumptions, taken
from triton-dejavu's source, are documented in ``docs/storage.md``:

- triton-dejavu stores every key element as a string (``str(value)``): an element that reads as an
  int, a float, ``True``/``False`` or ``None`` is converted back to that type; anything else (such
  as ``'torch.float16'``) stays a string, as this package's keys have it.
- in a config string, names Triton knows as ``Config`` fields (``num_warps``, ``maxnreg``, ...) are
  fields, ``pre_hook`` is ignored, every other name is a kernel parameter; a value that is a bare word
  (``str(Config)`` prints strings unquoted) is taken as a string.
- ``timings`` hold ``[median, p20, p80]`` in milliseconds (older files: ``{"values": [...]}``).
- ``keys`` (since 0.5.4) names the key arguments in the order of the values: another order of the
  kernel's names is put in the kernel's order; other names skip the file.

An imported entry must name one of the kernel's current configs; any other is skipped and reported.

Where the results go: the platform and tag come from the file's path, read through triton-dejavu's
layouts (:data:`~triton_dejavu_like.store.layout.DEJAVU_LAYOUTS`) from its last ``dejavu_<version>``
folder on; results of this machine's Triton and GPU go under this machine's toolchain (triton-dejavu
names CUDA after Triton's ptxas, this package after torch's CUDA). A key found in several files for
one identity comes from the file whose signature names the kernel's module, else the newest one.
This package's own cache files among the sources are left out and counted.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _compat
from .._compat import Config
from ..codec import canonical_json, config_id
from ..store import CacheFile, StoredEntry, inventory, read_bounded, tree_merge
from ..store import identity as identity
from ..store.layout import CACHE_FILE_NAME
from ..tuner.key import KeyPlan
from .dejavu_format import FormatError, parse_config, parse_key, parse_timings
from .dejavu_origin import DejavuOrigin, given_platform, origin_of

STRATEGY = "imported:triton-dejavu"
#: The prefix of the module name of a kernel loaded from ``FILE.py``.
_FILE_MODULE = "_tdl_import_"


# --- finding the user's kernel ------------------------------------------------------------------------


def load_tuner(spec: str) -> Any:
    """The autotuner named ``module.path:name`` or ``path/to/file.py:name`` (imports that module)."""
    from ..tuner import Autotuner

    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--kernel takes MODULE:NAME or FILE.py:NAME, not {spec!r}")
    if module_name.endswith(".py"):
        file = Path(module_name)
        if not file.is_file():
            raise ValueError(f"no such file: {file}")
        name = f"{_FILE_MODULE}{file.stem}"
        loader_spec = importlib.util.spec_from_file_location(name, file)
        if loader_spec is None or loader_spec.loader is None:
            raise ValueError(f"cannot import {file}")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        loader_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ValueError(f"{module_name} has no attribute {attr!r}")
    current = target
    while current is not None and not isinstance(current, Autotuner):
        current = getattr(current, "fn", None)
    if current is None:
        raise ValueError(f"{spec} is not a kernel decorated with triton_dejavu_like.autotune")
    return current


def kernel_module(tuner: Any) -> str:
    """The module of the kernel's function, as triton-dejavu's signature names it (a kernel loaded
    from ``FILE.py`` by :func:`load_tuner`: the file's name)."""
    return str(getattr(tuner.base_fn, "__module__", "")).removeprefix(_FILE_MODULE)


# --- the conversion ------------------------------------------------------------------------------------


@dataclass
class Conflict:
    """Keys found in several files for one storage identity: the file kept, the others, and why."""

    keys: int
    kept: str
    others: list[str]
    why: str


@dataclass
class ImportReport:
    files: list[str] = field(default_factory=list)
    imported: int = 0
    kept_existing: int = 0
    #: stored entries that ``overwrite`` replaces: (cache file, entries replaced)
    replaced_in: list[tuple[str, int]] = field(default_factory=list)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)  # (file, key, reason)
    #: files made for other kernels, left out: (file, kernel)
    other_kernels: list[tuple[str, str]] = field(default_factory=list)
    #: keys found in several files, and which file's entries were kept
    conflicts: list[Conflict] = field(default_factory=list)
    #: files of this kernel that cannot be used as a whole: (file, reason)
    skipped_files: list[tuple[str, str]] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    problems: list[inventory.Problem] = field(default_factory=list)
    #: this package's own cache files met among the sources (a root holding both): left out
    own_files: int = 0
    #: toolchains of the paths replaced by this machine's (same Triton and GPU): {path's: this machine's}
    toolchains: dict[str, str] = field(default_factory=dict)
    #: the platforms written that are not this machine's (the tuner here does not read them)
    not_this_machine: dict[str, dict[str, str]] = field(default_factory=dict)
    #: this machine's platform, as the tuner names it
    here: dict[str, str] = field(default_factory=dict)


def _candidate_ids(tuner: Any) -> dict[str, Config]:
    return {config_id(c): c for c in tuner.configs}


class KeyNamesDiffer(FormatError):
    """A file tuned with a key of other arguments than the kernel's."""


def key_positions(doc: dict[str, Any], names: Sequence[str]) -> tuple[int, ...] | None:
    """Where each of the kernel's key arguments is among the values of the file's keys: the file's
    ``keys`` (written since triton-dejavu 0.5.4) name their order. None when it names none (older
    files, an empty file's ``null``) or the kernel's order. :class:`KeyNamesDiffer` when it names
    other arguments: its values cannot be this kernel's keys."""
    stored = doc.get("keys")
    if not isinstance(stored, list) or not all(isinstance(name, str) for name in stored):
        return None
    if stored == list(names):
        return None
    if sorted(stored) != sorted(names):
        raise KeyNamesDiffer(f"tuned with key {stored}, not the kernel's {list(names)}")
    return tuple(stored.index(name) for name in names)


def kernel_key(text: str, positions: tuple[int, ...] | None, plan: KeyPlan) -> tuple[Any, ...]:
    """The kernel's key from a triton-dejavu key: its values in the kernel's order (``positions``,
    the dtypes after them as they are, or left out for a kernel with ``ignore_dtypes``);
    :class:`FormatError` when it cannot be one of the kernel's."""
    key = parse_key(text)
    if positions is not None:
        if len(key) < len(positions):
            raise FormatError("fewer values than the file's 'keys' name: their order is unknown")
        key = tuple(key[i] for i in positions) + key[len(positions) :]
    if not plan.with_dtypes:  # as triton-dejavu reads its files for a kernel with ignore_dtypes
        n = len(plan.names)
        key = key[:n] + tuple(v for v in key[n:] if not (isinstance(v, str) and "torch." in v))
    misfit = plan.misfit(key)
    if misfit is not None:
        raise FormatError(misfit)
    return key


def convert(
    path: Path, doc: dict[str, Any], tuner: Any, candidates: dict[str, Config], report: ImportReport
) -> dict[str, StoredEntry]:
    """Our entries for one triton-dejavu document (keys it cannot convert go to ``report.skipped``);
    :class:`KeyNamesDiffer` when the file was tuned with another key."""
    positions = key_positions(doc, tuner.keys)
    missing = (
        "no timing stored for this key"
        if "timings" in doc
        else "the file has no 'timings': every stored result holds its measured time (tune this key again)"
    )
    cache, timings = doc.get("cache"), doc.get("timings", {})
    if not isinstance(cache, dict) or not isinstance(timings, dict):
        raise FormatError("'cache' and 'timings' are not objects")
    evaluated = doc.get("total_configs", doc.get("evaluated_configs"))
    if not isinstance(evaluated, int) or isinstance(evaluated, bool) or evaluated < 0:
        evaluated = len(candidates)
    mtime = _dt.datetime.fromtimestamp(path.stat().st_mtime, _dt.timezone.utc)
    candidates_hash = identity.stable_hash(sorted(candidates))
    entries: dict[str, StoredEntry] = {}
    plan = KeyPlan(tuner.arg_names, tuner.keys, ignore_dtypes=tuner.settings.ignore_dtypes)
    for key_text, config_text in cache.items():
        try:
            key = kernel_key(key_text, positions, plan)
            if not isinstance(config_text, str):
                raise FormatError("the config is not a string")
            config, _ = parse_config(config_text)
            chosen = candidates.get(config_id(config))
            if chosen is None:
                raise FormatError(f"config {config_text[:120]!r} is not among the kernel's configs")
            if key_text not in timings:
                raise FormatError(missing)
            entry = StoredEntry.new(
                key,
                chosen,
                parse_timings(timings[key_text]),
                evaluated=evaluated,
                space_size=len(candidates),
                strategy=STRATEGY,
                tuning_time_s=0.0,
                tuned_at=mtime,
                budget=None,
                candidates=candidates_hash,
                imported_from=str(path),
            )
        except Exception as exc:  # data read from a file: any failure skips this key, never a crash
            report.skipped.append((str(path), str(key_text)[:200], str(exc)[:300] or type(exc).__name__))
            continue
        entries[entry.key_id] = entry
    return entries


def is_own_document(doc: dict[str, Any]) -> bool:
    """A cache file of this package (``schema``, ``identity`` and ``entries``), not triton-dejavu's."""
    return (
        "schema" in doc and isinstance(doc.get("identity"), dict) and "entries" in doc and "cache" not in doc
    )


def dejavu_files(sources: Iterable[Path]) -> list[Path]:
    """The files of ``sources`` (folders walked for ``cache.json``), each once however often named."""
    found: dict[Path, Path] = {}
    for source in sources:
        source = Path(source)
        files = (
            inventory.walk_files(source, lambda name: name == CACHE_FILE_NAME)
            if source.is_dir()
            else [source]
        )
        for path in files:  # os.path.realpath never raises (Path.resolve does on a symlink loop)
            found.setdefault(Path(os.path.realpath(path)), path)
    return list(found.values())


def import_dejavu(
    sources: Iterable[Path],
    tuner: Any,
    root: Path,
    *,
    tag: str | None = None,
    platform: dict[str, str] | None = None,
    overwrite: bool = False,
    dry_run: bool = False,
    name: str | None = None,
) -> ImportReport:
    """Import the triton-dejavu files in ``sources`` that belong to ``tuner``'s kernel under ``root``.

    The platform (Triton version, CUDA/ROCm version, GPU) comes from ``platform`` (named as a path's
    values are, :func:`~.dejavu_origin.given_platform`; ValueError for one that names nothing), else
    from the triton-dejavu path, else from this machine. Existing entries win unless ``overwrite``.
    ``name``: the kernel's name in the triton-dejavu files (a kernel renamed since), instead of its own.
    """
    report = ImportReport()
    platform = given_platform(platform or {})
    by_identity = _collect(sources, tuner, report, tag=tag, platform=platform, name=name)
    _write(by_identity, tuner, root, report, overwrite=overwrite, dry_run=dry_run)
    return report


@dataclass
class _Slot:
    """The converted entries going to one storage identity, every file's, by key id: (rank, file, entry)."""

    identity: dict[str, Any]
    found: dict[str, list[tuple[tuple[bool, _dt.datetime], str, StoredEntry]]] = field(default_factory=dict)

    def add(self, path: Path, entries: dict[str, StoredEntry], preferred: bool) -> None:
        """A file's entries; ``preferred``: its signature names the kernel's module."""
        for kid, entry in entries.items():
            self.found.setdefault(kid, []).append(((preferred, entry.tuned_at), str(path), entry))

    def chosen(self, report: ImportReport) -> dict[str, StoredEntry]:
        """One entry per key: the file whose signature names the kernel's module, else the newest
        (modification time). Keys found in several files are reported (``report.conflicts``)."""
        entries: dict[str, StoredEntry] = {}
        conflicts: dict[tuple[str, tuple[str, ...], str], int] = {}
        for kid, found in self.found.items():
            (preferred, _), kept, entries[kid] = max(found, key=lambda item: item[0])
            others = tuple(sorted({file for _, file, _ in found} - {kept}))
            if others:
                by_module = preferred and not all(rank[0] for rank, _, _ in found)
                why = "its signature names the kernel's module" if by_module else "the newest"
                conflicts[kept, others, why] = conflicts.get((kept, others, why), 0) + 1
        report.conflicts += [
            Conflict(n, kept, list(others), why) for (kept, others, why), n in conflicts.items()
        ]
        return entries


#: Converted entries by the storage identity they go to: ``{canonical identity: slot}``.
_ByIdentity = dict[str, _Slot]


def _read(path: Path, report: ImportReport) -> dict[str, Any] | None:
    """A triton-dejavu document; None (a problem, or a file of this package's own, counted)."""
    try:
        doc = json.loads(read_bounded(path).decode("utf-8"))
        if not isinstance(doc, dict):
            raise FormatError("the document is not an object")
    except (OSError, ValueError, RecursionError) as exc:  # InvalidCacheFile is a ValueError
        report.problems.append(inventory.Problem(str(path), str(exc)[:300]))
        return None
    if is_own_document(doc):
        report.own_files += 1
        return None
    return doc


def _collect(
    sources: Iterable[Path],
    tuner: Any,
    report: ImportReport,
    *,
    tag: str | None,
    platform: dict[str, str] | None,
    name: str | None,
) -> _ByIdentity:
    """Read and convert the triton-dejavu files, grouped by the identity (platform, tag) they go to."""
    here = identity.detect_platform(_compat.is_interpreted(tuner.fn))
    report.here = {"triton": here.triton, "toolchain": here.toolchain, "gpu": here.gpu}
    candidates = _candidate_ids(tuner)
    module = kernel_module(tuner)
    by_identity: _ByIdentity = {}
    for path in dejavu_files(sources):
        doc = _read(path, report)
        if doc is None:
            continue
        origin = origin_of(path, doc)
        if origin.kernel is not None and origin.kernel != (name or tuner.base_fn.__name__):
            report.other_kernels.append((str(path), origin.kernel))
            continue
        try:
            entries = convert(path, doc, tuner, candidates, report)
        except KeyNamesDiffer as exc:
            report.skipped_files.append((str(path), str(exc)))
            continue
        except FormatError as exc:
            report.problems.append(inventory.Problem(str(path), str(exc)))
            continue
        report.files.append(str(path))
        if not entries:
            continue
        target = _target_platform(origin, here, platform or {}, report)
        ident = tuner.kernel_identity(target).as_dict()
        ident["tag"] = tag or origin.tag or ident["tag"]
        slot = by_identity.setdefault(canonical_json(ident), _Slot(ident))
        slot.add(path, entries, preferred=origin.module is not None and origin.module == module)
    return by_identity


_TOOLCHAIN_KIND = {"cuda": "cuda_", "hip": "rocm_"}


def _target_platform(
    origin: DejavuOrigin, here: identity.Platform, explicit: dict[str, str], report: ImportReport
) -> identity.Platform:
    """The platform a file's results are stored for: ``explicit`` (``--triton/--toolchain/--gpu``),
    else the path's, else this machine's. triton-dejavu names the CUDA toolchain after the ptxas
    bundled with Triton (``cuda_12.8``), this package after torch's CUDA (``cuda_13.0``): results of
    this machine's Triton and GPU, on a toolchain of its kind, go under this machine's toolchain, which
    the tuner looks up (and the report says so)."""
    fields = {
        "triton": origin.triton or here.triton,
        "toolchain": origin.toolchain or here.toolchain,
        "gpu": origin.gpu or here.gpu,
        **explicit,
    }
    if "toolchain" not in explicit and _other_toolchain_here(fields, here):
        report.toolchains[fields["toolchain"]] = here.toolchain
        fields["toolchain"] = here.toolchain
    if (fields["triton"], fields["toolchain"], fields["gpu"]) != (here.triton, here.toolchain, here.gpu):
        report.not_this_machine.setdefault(canonical_json(fields), fields)
    return identity.Platform(fields["triton"], fields["toolchain"], fields["gpu"], here.backend, None)


def _other_toolchain_here(fields: dict[str, str], here: identity.Platform) -> bool:
    """This machine's Triton and GPU, and a toolchain of its kind (CUDA, ROCm) by another name."""
    kind = _TOOLCHAIN_KIND.get(here.backend)
    return (
        kind is not None
        and (fields["triton"], fields["gpu"]) == (here.triton, here.gpu)
        and fields["toolchain"].startswith(kind)
        and fields["toolchain"] != here.toolchain
    )


def _write(
    by_identity: _ByIdentity, tuner: Any, root: Path, report: ImportReport, *, overwrite: bool, dry_run: bool
) -> None:
    """Write each identity's entries into its cache file under ``root`` (or count what would be)."""
    for slot in by_identity.values():
        ident, entries = slot.identity, slot.chosen(report)
        cf = CacheFile.for_identity(root, ident, parameters=tuner.arg_names, tool_rewrite=True)
        existing = tree_merge.destination_entries(cf, "an import", dry_run=dry_run)
        if isinstance(existing, str):  # update() would refuse it: say so, count nothing
            report.problems.append(inventory.Problem(str(cf.path), existing))
            continue
        if not dry_run and not cf.update(
            lambda current, new=entries: {**current, **new} if overwrite else {**new, **current}
        ):  # nothing imported into it: counted nowhere
            report.problems.append(inventory.Problem(str(cf.path), cf.refused or "could not be written"))
            continue
        kept = set(existing) & set(entries) if not overwrite else set()
        replaced = sum(existing[kid] != entry for kid, entry in entries.items() if kid in existing)
        if overwrite and replaced:
            report.replaced_in.append((str(cf.path), replaced))
        report.kept_existing += len(kept)
        report.imported += len(entries) - len(kept)
        report.written.append(str(cf.path))  # or, with dry_run, would be

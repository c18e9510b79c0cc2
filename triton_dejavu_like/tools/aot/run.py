"""Running one case in this process, and what it did (:class:`CaseResult`)."""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ... import _env
from ..._log import DejavuStorageWarning, warn_once
from ...store import inventory
from ...tuner.key import TuningKey
from ...tuner.mode import tuning
from ...tuner.report import Decision, observe_decisions
from .case import TuneCase

#: A case's status: it tuned some key / caused no tuning (all stored) / raised / its worker was lost.
STATUSES = ("tuned", "stored", "failed", "lost")


def key_text(kernel: str, key: Any) -> str:
    """How a case names a key it tuned ("kernel key", in :attr:`CaseResult.tuned`)."""
    return f"{kernel} {key!r}"


@dataclass
class CaseResult:
    """The outcome of one case; travels between processes as JSON (:meth:`to_json` / :meth:`from_json`)."""

    name: str
    status: str
    seconds: float = 0.0
    tuned: list[str] = field(default_factory=list)  # "kernel key" of each key tuned
    files: list[str] = field(default_factory=list)  # cache files it used, relative to the root
    error: str | None = None
    worker: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> CaseResult:
        """Validated: raises ValueError for anything but the fields of a result with their types."""
        if not isinstance(data, dict) or set(data) != {f for f in cls.__dataclass_fields__}:
            raise ValueError(f"not a case result: {str(data)[:200]}")
        ok = (
            isinstance(data["name"], str)
            and data["status"] in STATUSES
            and isinstance(data["seconds"], (int, float))
            and all(isinstance(x, str) for x in (*data["tuned"], *data["files"]))
            and all(data[k] is None or isinstance(data[k], str) for k in ("error", "worker"))
        )
        if not ok:
            raise ValueError(f"not a case result: {str(data)[:200]}")
        return cls(**data)


def _synchronize() -> None:
    """Wait for the case's GPU work, so that its time is right and its errors surface here."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _relative_files(decisions: list[Decision], root: Path) -> list[str]:
    """The cache files under ``root`` that the decisions used; a key tuned into a file elsewhere (a
    kernel's ``custom_data_storage``) is reported: ``tune`` neither merges nor exports it."""
    files = set()
    for d in decisions:
        if d.source in ("tuned", "restored") and d.where != "memory":
            try:
                files.add(Path(d.where).resolve().relative_to(root.resolve()).as_posix())
            except ValueError:  # restored from a read-only layer, or stored under custom_data_storage
                if d.source == "tuned":
                    warn_once(
                        DejavuStorageWarning,
                        d.where,
                        "%s: results stored in %s (its custom_data_storage), outside %s: "
                        "'tune' neither merges nor exports them",
                        d.kernel,
                        d.where,
                        root,
                    )
    return sorted(files)


def _unstored(decisions: list[Decision]) -> list[str]:
    """The keys tuned whose results are not in the cache file the decision names: storage that could
    not be written (its warning said so), or a key that cannot be stored."""
    tuned = [d for d in decisions if d.source == "tuned"]
    stored: dict[str, set[str]] = {}
    for where in {d.where for d in tuned if d.where != "memory"}:
        files, _ = inventory.read_sources([Path(where)])  # a file never written is not there
        stored[where] = {kid for f in files for kid in f.entries}
    return [
        key_text(d.kernel, d.key) for d in tuned if TuningKey.of(d.key).id not in stored.get(d.where, set())
    ]


@contextlib.contextmanager
def tuning_into(root: Path, layers: Sequence[Path] | None = None) -> Iterator[None]:
    """Tuning on, into the storage root ``root`` (the layers of ``TRITON_DEJAVU_STORAGE`` kept, or
    ``layers`` instead): where the cases run, and where the SPEC is loaded, since a kernel launched
    while it loads (a check at import) opens its store there and keeps it for every later case."""
    with _env.storage_root_set_to(root, layers), tuning(True):
        yield


def run_case(case: TuneCase, root: Path, *, worker: str | None = None) -> CaseResult:
    """Run ``case`` with ``root`` as the storage root and tuning on (``TRITON_DEJAVU_READ_ONLY=1`` in
    a serving environment must not turn ``tune`` into a no-op); never raises for the case's own
    errors (``sys.exit()`` included: it fails the case, not the run)."""
    start = time.perf_counter()
    error = None
    with tuning_into(root), observe_decisions() as decisions:
        try:
            case.run()
            _synchronize()
        except (Exception, SystemExit) as exc:  # sys.exit() in a case (a script's main) fails it
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            error = detail[:2000]
    seconds = time.perf_counter() - start
    unstored = _unstored(decisions)
    if unstored and error is None:  # tuning that is not kept is lost for every later process
        error = f"tuned but not stored (see the storage warning): {', '.join(unstored)}"[:2000]
    tuned = [key_text(d.kernel, d.key) for d in decisions if d.source == "tuned"]
    status = "failed" if error else ("tuned" if tuned else "stored")
    return CaseResult(case.name, status, seconds, tuned, _relative_files(decisions, root), error, worker)

"""``tune SPEC``: run every case once (here, on local workers or on Ray), report and export.

What the CLI calls; it prints progress (one line per case, and a tqdm bar on a terminal) and
returns a :class:`TuneReport` that the CLI turns into the summary table or JSON.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import _env
from ...store import inventory, tree_merge
from ...store.export import write_archive
from ..text import printable
from . import pool
from .case import TuneCase, load_cases
from .ray_backend import START_TIMEOUT_S
from .run import CaseResult, run_case, tuning_into


@dataclass
class TuneRequest:
    spec: str
    root: Path
    gpus: list[str] | None = None  # one worker process per GPU
    workers: int | None = None  # N worker processes without choosing GPUs (CPU, tests)
    ray: bool = False
    ray_address: str | None = None
    batch_size: int = 1  # cases handed to a Ray worker at a time
    ray_start_timeout_s: float = START_TIMEOUT_S  # a Ray worker not started by then is dropped
    export: Path | None = None
    #: The read-only layers (``--root RW:LAYER...``); None: those of ``TRITON_DEJAVU_STORAGE``
    layers: list[Path] | None = None


@dataclass
class TuneReport:
    results: list[CaseResult]
    seconds: float
    problems: list[inventory.Problem] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    exported: list[str] = field(default_factory=list)
    #: Why ``--export`` wrote nothing (no case used a cache file under the root), or None
    not_exported: str | None = None
    #: What ``--export`` left out: the keys the read-only layers hold (None: there are no layers)
    export_note: str | None = None

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def ok(self) -> bool:
        return (
            not self.problems
            and not self.errors
            and all(r.status in ("tuned", "stored") for r in self.results)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "seconds": self.seconds,
            "cases": [r.to_json() for r in self.results],
            "counts": {s: self.count(s) for s in ("tuned", "stored", "failed", "lost")},
            "problems": [{"path": p.source, "reason": p.reason} for p in self.problems],
            "errors": self.errors,
            "exported": self.exported,
            "not_exported": self.not_exported,
            "export_note": self.export_note,
        }


def parse_gpus(text: str) -> list[str]:
    """``all`` (the visible GPUs) or a comma-separated list of GPU indices, numbered as this process
    numbers them (within ``CUDA_VISIBLE_DEVICES`` when it is set), as the values each worker's
    ``CUDA_VISIBLE_DEVICES`` gets. An index of no visible GPU is a ``ValueError``."""
    every = text.strip() == "all"
    indices = [part.strip() for part in text.split(",")]
    if not every and (not all(i.isdecimal() for i in indices) or len(set(map(int, indices))) != len(indices)):
        raise ValueError(f"--gpus takes 'all' or distinct indices such as 0,1 (not {text!r})")
    visible = _visible_gpus()
    if not visible:
        raise ValueError(f"--gpus {text}: no GPU is visible (on a CPU, use --workers N)")
    if every:
        return visible
    unseen = [i for i in indices if int(i) >= len(visible)]
    if unseen:
        raise ValueError(
            f"--gpus {text}: no GPU {', '.join(unseen)} among the {len(visible)} this process sees"
            + (f" (CUDA_VISIBLE_DEVICES={','.join(visible)})" if _env.visible_gpus() is not None else "")
        )
    return [visible[int(i)] for i in indices]


def _visible_gpus() -> list[str]:
    """The GPUs this process sees, as ``CUDA_VISIBLE_DEVICES`` names them (all of the host's without it)."""
    visible = _env.visible_gpus()
    if visible is None:
        import torch

        visible = [str(i) for i in range(torch.cuda.device_count())]
    return visible


class Progress:
    """One line per finished case (stdout) and a tqdm bar on a terminal (stderr)."""

    def __init__(self, total: int, quiet: bool) -> None:
        from tqdm import tqdm

        self.total, self.done, self.quiet = total, 0, quiet
        self.bar = tqdm(total=total, unit="case", file=sys.stderr, disable=None if _env.progress() else True)

    def __call__(self, result: CaseResult) -> None:
        self.done += 1
        self.bar.update(1)
        if self.quiet:
            return
        where = f" [{result.worker}]" if result.worker else ""
        detail = f"{len(result.tuned)} key(s) tuned" if result.status == "tuned" else (result.error or "")
        line = f"[{self.done}/{self.total}] {result.name}: {result.status} in {result.seconds:.2f} s{where}"
        # a case's name and error come from the user's code: escaped, as in the summary's table
        line = f"{line}  {detail.splitlines()[0] if detail else ''}".rstrip()
        self.bar.write(printable(line), file=sys.stdout)

    def close(self) -> None:
        self.bar.close()


def tune(request: TuneRequest, *, quiet: bool = False) -> TuneReport:
    """Load the SPEC, run its cases as asked, merge into ``request.root``, export if asked.

    Raises :class:`~.case.SpecError` (the SPEC), :class:`~.ray_backend.RayUnavailable`, ValueError.
    """
    layers = _env.storage_roots()[1:] if request.layers is None else request.layers
    # the layers are layers here, in the workers (they inherit the variable) and for Ray's driver
    with tuning_into(request.root, request.layers):
        cases = load_cases(request.spec)
        names = [c.name for c in cases]
        request.root.mkdir(parents=True, exist_ok=True)
        progress = Progress(len(cases), quiet)
        start = time.perf_counter()
        try:
            results, problems, errors = _run(request, cases, names, progress)
        finally:
            progress.close()
    order = {name: i for i, name in enumerate(names)}
    results.sort(key=lambda r: order.get(r.name, len(order)))
    report = TuneReport(results, time.perf_counter() - start, problems, errors)
    if request.export is not None:
        export(report, request.root, request.export)
        if report.exported and layers:
            report.export_note = _left_in_layers(request.root, layers, request.export)
    return report


def _run(
    request: TuneRequest, cases: list[TuneCase], names: list[str], progress: Progress
) -> tuple[list[CaseResult], list[inventory.Problem], list[str]]:
    """Run the cases (named ``names``) where the request says: the results, the problems met
    merging, the errors."""
    if request.ray:
        from .ray_backend import run_on_ray

        return run_on_ray(
            request.spec,
            names,
            request.root,
            progress,
            address=request.ray_address,
            batch_size=request.batch_size,
            start_timeout_s=request.ray_start_timeout_s,
        )
    if request.gpus or request.workers:
        slots = pool.gpu_slots(request.gpus) if request.gpus else pool.cpu_slots(request.workers or 1)
        workers = pool.WorkerPool(request.spec, slots, request.root, progress)
        return workers.run(names), workers.problems, workers.errors
    results = []
    for case in cases:
        results.append(run_case(case, request.root))
        progress(results[-1])
    return results, [], []


def _left_in_layers(root: Path, layers: list[Path], out: Path) -> str:
    """What an export beside read-only layers does not hold, and how to ship everything served."""
    roots = os.pathsep.join(str(r) for r in (root, *layers))
    return (
        f"{out} holds what is stored under {root} only: the keys the read-only layer(s) "
        f"{', '.join(map(str, layers))} hold are not in it (they were restored, not tuned). Serve it "
        f"in front of them, or write everything the cases' kernels are served with: "
        f"python -m triton_dejavu_like export OUT --root {roots}"
    )


def export(report: TuneReport, root: Path, out: Path) -> None:
    """Write the cache files the SPEC's cases used (tuned or restored) into the storage root ``out``,
    or into a new ``.tar.gz`` archive of that tree when ``out`` is named so (as ``export`` does)."""
    used = sorted({f for r in report.results for f in r.files})
    files, problems = inventory.read_sources(root / f for f in used if (root / f).exists())
    report.problems += problems
    if not files:  # an empty archive would be shipped by mistake, and refuse the next run's export
        report.not_exported = (
            f"nothing exported: no case tuned or restored a result under {root}; {out} not written"
        )
        return
    if inventory.is_archive(out):
        report.exported = write_archive(out, files)
        return
    merged = tree_merge.merge_into(out, files, replace=True)  # the folder ships what was tuned or restored
    report.exported = merged.written
    report.problems += merged.problems

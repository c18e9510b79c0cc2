"""``import-dejavu``, ``misses``, ``tune`` and ``heuristic``: getting results into a store (converted,
or tuned ahead of time) and out of it as code."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import keyword
import math
import re
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ... import _env
from ..._log import DejavuConfigWarning, warn_once
from ...store import InvalidCacheFile, inventory
from ...store.files import atomic_write
from ...tuner import misses as miss_log
from .. import dejavu_import, dejavu_origin, heuristic
from ..aot import command as aot
from ..aot.case import SpecError, SpecNotFound
from ..aot.ray_backend import START_TIMEOUT_S
from .output import (
    PROG,
    CliError,
    UsageError,
    emit,
    outliving_closed_stdout,
    path_text,
    positive_int,
    printable,
    problems_payload,
    replaced_lines,
    report_problems,
    table,
)
from .roots import (
    SELECTION_FIELDS,
    given_layers,
    note_layers,
    refuse_file,
    refuse_inside,
    refuse_other_archive,
    refuse_several,
    selected,
    served_files,
    writable_root,
)


def cmd_import_dejavu(args: argparse.Namespace) -> int:
    root = writable_root(args)
    note_layers(args, "import-dejavu")
    missing = [s for s in args.sources if not Path(s).expanduser().exists()]
    if missing:
        raise UsageError(f"no such file or directory: {', '.join(missing)}")
    given = {
        name: getattr(args, name)
        for name in ("triton", "toolchain", "gpu")
        if getattr(args, name) is not None
    }
    try:
        platform = dejavu_origin.given_platform(given)  # as the tuner names them: its files, not another's
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if args.name is not None and len(args.kernel) > 1:
        raise UsageError("--name names the triton-dejavu kernel of one --kernel: import one kernel at a time")
    tuners = []
    for spec in args.kernel:  # all loaded before anything is written: a typo in the last one writes nothing
        try:
            tuners.append((spec, dejavu_import.load_tuner(spec)))
        except Exception as exc:  # importing the user's module may raise anything
            raise UsageError(f"cannot load --kernel {spec}: {type(exc).__name__}: {exc}") from exc
    results = []
    failures = []
    for spec, tuner in tuners:
        try:
            report = dejavu_import.import_dejavu(
                [Path(s).expanduser() for s in args.sources],
                tuner,
                root,
                tag=args.tag,
                platform=platform,
                overwrite=args.overwrite,
                dry_run=args.dry_run,
                name=args.name,
            )
        except (ValueError, TypeError) as exc:  # e.g. the kernel's identity cannot be computed
            failures.append(f"cannot import for {spec}: {exc}")  # the others' imports are still reported
            continue
        results.append((spec, report))
    lines = [line for spec, r in results for line in _import_lines(spec, r, root, args.dry_run)]
    payload = {spec: _import_payload(r) for spec, r in results}
    emit(args, payload, lines)
    for _, r in results:
        report_problems(r.problems)
    for failure in failures:
        print(f"{PROG} import-dejavu: error: {printable(failure, newlines=True)}", file=sys.stderr)
    return 1 if failures or any(r.problems for _, r in results) else 0


def _import_lines(spec: str, r: dejavu_import.ImportReport, root: Path, dry_run: bool) -> list[str]:
    """What ``import-dejavu`` prints for one ``--kernel``."""
    verb = "would import" if dry_run else "imported"
    lines = [
        f"{spec}: {verb} {r.imported} keys from {len(r.files)} triton-dejavu file(s) into "
        f"{len(r.written)} cache file(s) under {root}; {r.kept_existing} already stored were kept, "
        f"{len(r.skipped)} skipped"
        + (f"; {len(r.skipped_files)} file(s) skipped" if r.skipped_files else "")
        + (f"; {len(r.other_kernels)} file(s) of other kernels left out" if r.other_kernels else "")
        + (f"; {r.own_files} cache file(s) of this package's own left out" if r.own_files else "")
    ]
    lines += replaced_lines(r.replaced_in, dry_run)
    lines += [f"  skipped {key} in {file}: {reason}" for file, key, reason in r.skipped]
    lines += [f"  skipped {file}: {reason}" for file, reason in r.skipped_files]
    lines += [f"  left out {file}: made for kernel {kernel!r}" for file, kernel in r.other_kernels]
    lines += [
        f"  {c.keys} key(s) found in several files: kept those of {c.kept} ({c.why}), "
        f"not of {', '.join(c.others)}"
        for c in r.conflicts
    ]
    lines += [
        f"  tuned with {old} (triton-dejavu names CUDA after the ptxas bundled with Triton) on this "
        f"machine's Triton and GPU: stored under {new}, this machine's toolchain, where the tuner looks"
        for old, new in r.toolchains.items()
    ]
    here = _platform_text(r.here)
    lines += [
        f"  stored for {_platform_text(p)}, which is not this machine's ({here}): the tuner here does not "
        "read them; if they hold for this machine, choose its platform with --triton/--toolchain/--gpu"
        for p in r.not_this_machine.values()
    ]
    lines += [f"  {'would write' if dry_run else 'wrote'} {path}" for path in r.written]
    return lines


def _platform_text(platform: dict[str, str]) -> str:
    return f"triton {platform['triton']}, {platform['toolchain']}, gpu {platform['gpu']}"


def _import_payload(r: dejavu_import.ImportReport) -> dict[str, Any]:
    """What ``import-dejavu --json`` prints for one ``--kernel``."""
    return {
        "files": r.files,
        "imported": r.imported,
        "kept_existing": r.kept_existing,
        "replaced_in": dict(r.replaced_in),
        "written": r.written,
        "skipped": [{"file": f, "key": k, "reason": why} for f, k, why in r.skipped],
        "skipped_files": [{"file": f, "reason": why} for f, why in r.skipped_files],
        "other_kernels": [{"file": f, "kernel": kernel} for f, kernel in r.other_kernels],
        "conflicts": [dataclasses.asdict(c) for c in r.conflicts],
        "problems": problems_payload(r.problems),
        "own_files": r.own_files,
        "toolchains_replaced": [{"path": old, "stored": new} for old, new in r.toolchains.items()],
        "this_machine": r.here,
        "not_this_machine": list(r.not_this_machine.values()),
    }


def cmd_misses(args: argparse.Namespace) -> int:
    named = [Path(file).expanduser() for file in args.files]
    sources = named or [source for source in [_env.misses_file()] if source is not None]
    if not sources:
        raise UsageError(f"name the misses file (or set {_env.MISSES_FILE})")
    readable = []
    for source in sources:
        if source.exists() or source.is_symlink():
            readable.append(source)
        elif not source.parent.is_dir():  # no serving process could write it there either
            raise CliError(f"{source} does not exist, nor does its folder {source.parent}")
        else:  # a serving process creates the file at its first miss: none yet is no miss, not an error
            said = f"{printable(str(source))} does not exist: no miss recorded"
            print(f"{PROG} misses: {said}", file=sys.stderr)
    where = ", ".join(str(source) for source in sources)
    try:
        rows, bad = miss_log.read_misses_files(readable)
    except InvalidCacheFile as exc:
        raise CliError(f"cannot read {where}: {exc}") from exc
    table_rows = [[r.label, r.key, r.answer, str(r.count), ", ".join(r.configs)] for r in rows]
    text = (
        table(["KERNEL", "KEY", "ANSWER", "COUNT", "CONFIG"], table_rows)
        if rows
        else f"no misses recorded in {where}"
    )
    if rows:
        text += "\n\ntune them ahead of time: python -m triton_dejavu_like tune SPEC"
    payload = {
        "file": str(sources[0]) if len(sources) == 1 else None,
        "files": [str(source) for source in sources],
        "misses": [dataclasses.asdict(r) for r in rows],
        "invalid_lines": bad,
    }
    emit(args, payload, text)
    if bad and not args.json:
        print(f"{PROG}: skipped {bad} line(s) of {where} that are not miss records", file=sys.stderr)
    return 0


@contextlib.contextmanager
def _terminated_as_interrupted() -> Iterator[None]:
    """SIGTERM (``kill``, ``timeout``, a batch scheduler, Kubernetes) stops ``tune`` as Ctrl-C does:
    what the workers stored is merged, their folders removed, and the exit status is 130. Without it
    the process died at once, leaving both behind. Only the main thread can install the handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


#: What a Ray address looks like: ``auto``, ``local``, ``ray://...``, ``HOST:PORT`` (a SPEC is a
#: file, a module, or either with ``:FUNCTION``, never ending in a port number).
_RAY_ADDRESS = re.compile(r"(auto|local|ray://.*|.*:\d+)")


def _spec_and_ray(args: argparse.Namespace) -> tuple[str, str | None]:
    """The SPEC and the ``--ray`` value (None: not given). ``tune --ray SPEC`` reads SPEC as the
    optional ADDRESS of ``--ray``; a value that is no Ray address is the SPEC, with Ray's default
    address."""
    if args.spec is not None:
        return args.spec, args.ray
    if args.ray and not _RAY_ADDRESS.fullmatch(args.ray):
        return args.ray, ""
    raise UsageError("name the SPEC to tune (FILE.py, MODULE, FILE.py:FUNCTION or MODULE:FUNCTION)")


def cmd_tune(args: argparse.Namespace) -> int:
    request = _tune_request(args)
    with outliving_closed_stdout("tune"):  # a reader gone (tune | head) stops no tuning, no merge
        try:
            with _terminated_as_interrupted():
                report = aot.tune(request, quiet=args.json)
        except SpecNotFound as exc:  # a typo in the command line
            raise UsageError(str(exc)) from exc
        except SpecError as exc:  # the SPEC's code raised, or its cases are not valid
            raise CliError(str(exc)) from exc
        except RuntimeError as exc:  # Ray missing or unreachable
            raise CliError(str(exc)) from exc
        emit(args, report.to_json(), tune_summary(report))
    for message in report.errors:
        print(f"{PROG} tune: {message}", file=sys.stderr)
    report_problems(report.problems)
    return 0 if report.ok else 1


def _tune_request(args: argparse.Namespace) -> aot.TuneRequest:
    """What ``tune`` is asked, checked before anything is tuned."""
    args.spec, args.ray = _spec_and_ray(args)
    if _env.deterministic():  # it turns tuning off whatever tuning() says: every case would tune nothing
        raise UsageError(f"{_env.DETERMINISTIC}=1 turns tuning off; unset it to tune")
    if _env.force_fallback():  # kernels with a heuristic would answer it, and the case say "stored"
        raise UsageError(f"{_env.FORCE_FALLBACK}=1 answers misses with heuristics; unset it to tune")
    if sum(x is not None for x in (args.gpus, args.workers, args.ray)) > 1:
        raise UsageError("choose one of --gpus, --workers and --ray")
    if args.ray is None:
        ray_only = {
            "--batch-size": args.batch_size != 1,
            "--ray-start-timeout": args.ray_start_timeout != START_TIMEOUT_S,
        }
        for option in (name for name, given in ray_only.items() if given):
            warn_once(DejavuConfigWarning, option, "tune: %s has no effect without --ray", option)
    try:
        gpus = aot.parse_gpus(args.gpus) if args.gpus is not None else None  # "": a mistake
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    request = aot.TuneRequest(
        spec=args.spec,
        root=writable_root(args),
        layers=given_layers(args),
        gpus=gpus,
        workers=args.workers,
        ray=args.ray is not None,
        ray_address=args.ray or None,
        batch_size=args.batch_size,
        ray_start_timeout_s=args.ray_start_timeout,
        export=Path(args.export).expanduser() if args.export else None,
    )
    export = request.export
    if export is not None:
        refuse_other_archive(export, f"--export {export}")
        refuse_file(export, f"--export {export}")  # found after the tuning, it failed the export
        for root in (request.root, *(request.layers or ())):  # a layer is read too
            refuse_inside(export, root, f"--export {export}")
        if inventory.is_archive(export) and export.exists():
            raise UsageError(f"--export {export} already exists; nothing was tuned (remove it first)")
    return request


def tune_summary(report: aot.TuneReport) -> str:
    """What ``tune`` prints: one row per case, then the counts by status."""
    rows = [
        [r.name, r.status, f"{r.seconds:.2f} s", _tuned_text(r.tuned) if r.status == "tuned" else "-"]
        for r in report.results
    ]
    counts = ", ".join(
        f"{report.count(s)} {s}" for s in ("tuned", "stored", "failed", "lost") if report.count(s)
    )
    lines = [table(["CASE", "STATUS", "TIME", "TUNED (KERNEL: KEYS)"], rows), ""]
    lines.append(f"{len(report.results)} case(s) in {report.seconds:.1f} s: {counts}")
    lines += [f"  {r.name}: {r.status}: {r.error}" for r in report.results if r.error]
    if report.exported:
        lines.append(f"exported {len(report.exported)} cache file(s)")
    if report.not_exported:
        lines.append(report.not_exported)
    if report.export_note:
        lines.append(report.export_note)
    return "\n".join(lines)


def _tuned_text(tuned: Sequence[str]) -> str:
    per_kernel: dict[str, int] = {}
    for item in tuned:
        kernel = item.split(" ", 1)[0]
        per_kernel[kernel] = per_kernel.get(kernel, 0) + 1
    return ", ".join(f"{k}: {n}" for k, n in per_kernel.items())


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:  # also NaN
        raise argparse.ArgumentTypeError(f"not a number > 0: {text!r}")
    return value


def function_name(text: str) -> str:
    """A name the generated module can define: a Python identifier that is not a keyword."""
    if not text.isidentifier() or keyword.iskeyword(text):
        raise argparse.ArgumentTypeError(f"not a Python function name: {text!r}")
    return text


def cmd_heuristic(args: argparse.Namespace) -> int:
    out = Path(args.out).expanduser() if args.out else None
    if out is not None and (out.is_dir() or (out.exists() and not args.force)):
        raise UsageError(f"{out} already exists; nothing was written (--force replaces a file)")
    if args.kernel not in (None, args.kernel_name):  # it selects another kernel: nothing would be found
        raise UsageError(f"--kernel {args.kernel} names another kernel than KERNEL {args.kernel_name}")
    _, files, problems = served_files(args)  # every layer: what serving with these roots restores
    files = [f for f in selected(args, files) if f.identity["kernel"] == args.kernel_name]
    if not files:
        raise CliError(f"nothing stored for kernel {args.kernel_name!r} (see '{PROG} list')")
    # one identity: another tag's, code version's or config list's winners are not this kernel's answers
    refuse_several(files, SELECTION_FIELDS, f"{args.kernel_name}'s stored results span", "identities")
    try:
        learnt = heuristic.learn(
            heuristic.stored_entries(files), args.kernel_name, method=args.method, name=args.name
        )
    except heuristic.HeuristicError as exc:
        raise CliError(str(exc)) from exc
    if out is not None:
        try:
            atomic_write(out, learnt.source.encode("utf-8"))
        except OSError as exc:
            raise CliError(f"cannot write {out}: {exc.strerror or exc}") from exc
    elif not args.json:
        print(learnt.source)
    accuracy = f"{learnt.correct}/{learnt.tested} ({learnt.validation})" if learnt.tested else "not measured"
    text = (
        f"{args.kernel_name}: {learnt.method} over {learnt.keys} stored keys and {learnt.configs} configs; "
        f"held-out accuracy {accuracy}" + (f"; written to {args.out}" if args.out else "")
    )
    payload = {
        "kernel": args.kernel_name,
        "method": learnt.method,
        "keys": learnt.keys,
        "configs": learnt.configs,
        "correct": learnt.correct,
        "tested": learnt.tested,
        "validation": learnt.validation,
        "out": args.out,
        "source": None if args.out else learnt.source,
        "problems": problems_payload(problems),
    }
    if args.json:
        emit(args, payload, text)
    else:
        print(text, file=sys.stderr if not args.out else sys.stdout)
    report_problems(problems)
    return 0


def add_commands(sub: Any, common: argparse.ArgumentParser, selection: argparse.ArgumentParser) -> None:
    """import-dejavu, misses, tune, heuristic: getting results into a store and out as code."""
    _add_import_dejavu(sub, common)
    _add_misses(sub)
    _add_tune(sub, common)
    _add_heuristic(sub, common, selection)


def _add_import_dejavu(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("import-dejavu", parents=[common], help="convert triton-dejavu cache.json files")
    p.add_argument(
        "sources", nargs="+", type=path_text, help="triton-dejavu storage trees or cache.json files"
    )
    p.add_argument(
        "--kernel",
        action="append",
        required=True,
        metavar="MODULE:NAME",
        help="the kernel (decorated with triton_dejavu_like.autotune) the results are for: "
        "MODULE:NAME or FILE.py:NAME; repeatable",
    )
    p.add_argument("--tag", help="store under this tag (default: the triton-dejavu tag, else the kernel's)")
    p.add_argument(
        "--name",
        metavar="OLD",
        help="the kernel's name in the triton-dejavu files, if it was renamed since (default: its own name)",
    )
    for name in ("triton", "toolchain", "gpu"):
        p.add_argument(
            f"--{name}",
            help=f"the {name} the results were tuned with (default: from the path, else this machine)",
        )
    p.add_argument("--overwrite", action="store_true", help="replace entries already stored for the same key")
    p.add_argument("--dry-run", action="store_true", help="report, write nothing")
    p.set_defaults(func=cmd_import_dejavu)


def _add_misses(sub: Any) -> None:
    p = sub.add_parser("misses", help="aggregate the keys serving processes answered without tuning")
    p.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help=f"misses files, aggregated as one (default: ${_env.MISSES_FILE})",
    )
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=cmd_misses)


def _add_tune(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("tune", parents=[common], help="tune a SPEC's kernel calls ahead of time")
    p.add_argument(
        "spec",
        nargs="?",  # `tune --ray SPEC`: argparse gives SPEC to --ray (see _spec_and_ray)
        help="FILE.py, MODULE, FILE.py:FUNCTION or MODULE:FUNCTION yielding TuneCase objects",
    )
    where = p.add_argument_group("where the cases run (default: in this process)")
    where.add_argument("--gpus", metavar="all|0,1,...", help="one worker process per GPU this process sees")
    where.add_argument("--workers", type=positive_int, metavar="N", help="N worker processes (no GPU chosen)")
    where.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="a Ray cluster (default: the running or a local one)",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=1,
        help="cases handed to a Ray worker at a time (default 1)",
    )
    p.add_argument(
        "--ray-start-timeout",
        type=positive_float,
        default=START_TIMEOUT_S,
        metavar="SECONDS",
        help=f"drop a Ray worker not started by then: no free GPU for it, or the SPEC fails there "
        f"(default {START_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--export",
        metavar="DIR",
        help="also write this SPEC's kernels' results to a storage root DIR, or to DIR.tar.gz / .tgz",
    )
    p.set_defaults(func=cmd_tune)


def _add_heuristic(sub: Any, common: argparse.ArgumentParser, selection: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "heuristic", parents=[common, selection], help="write a fallback_heuristic learnt from stored results"
    )
    p.add_argument("kernel_name", metavar="KERNEL", help="the kernel's name (as 'list' shows it)")
    p.add_argument("--out", metavar="FILE", help="write the Python module here (default: stdout)")
    p.add_argument("--force", action="store_true", help="replace the --out file if it exists")
    p.add_argument(
        "--method", choices=heuristic.METHODS, default="auto", help="tree (scikit-learn), nearest, auto"
    )
    p.add_argument(
        "--name", type=function_name, default="heuristic", help="the function's name (default: heuristic)"
    )
    p.set_defaults(func=cmd_heuristic)

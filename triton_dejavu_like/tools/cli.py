"""``python -m triton_dejavu_like`` (also ``triton-dejavu-like``): inspect and manage stored results.

Commands: ``list``, ``show``, ``merge``, ``prune``, ``export``, ``import-dejavu``, ``misses``, ``tune``
(ahead-of-time tuning, :mod:`.aot`), ``heuristic`` (:mod:`.heuristic`), ``diff`` (:mod:`.diff`). Every
store command takes ``--root`` (default: the package's storage roots, ``$TRITON_DEJAVU_STORAGE`` or
the user cache directory) and ``--json`` for scripts. ``list`` and ``show`` read every root given
(``--root`` repeated or an ``os.pathsep`` list: the first is the written one, the others are layers)
and say which layer each file came from; the other commands use the first root. Exit status: 0 on
success, 1 when an input cannot be read or nothing matches, 2 for bad arguments; ``diff`` exits 0
when the winners agree, 1 when they differ and 2 when a source cannot be read; every command
that removes or replaces stored data (``prune``, ``merge``, ``export``, ``import-dejavu --overwrite``)
lists what it removes or replaces and takes ``--dry-run``. Every value read from a file is printed
through :func:`printable`, so a stored name cannot send terminal control sequences. Output cut short
by a closed pipe (``list | head -1``) ends quietly.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import logging
import math
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import __version__, _compat, _env
from ..codec import describe_config
from ..store import InvalidCacheFile, StoredEntry, default_root, inventory, parse_timestamp
from ..store.entry import InvalidEntry
from ..tuner import misses as miss_log
from . import dejavu_import, diff, heuristic
from .aot import command as aot
from .aot.case import SpecError
from .aot.ray_backend import START_TIMEOUT_S

PROG = "triton-dejavu-like"


class CliError(Exception):
    """A problem with the inputs: reported on stderr, exit status 1."""


class UsageError(CliError):
    """A mistake in the command line (a --root or an import source that is not there, a --kernel that
    cannot be loaded, a selection to narrow, an output that exists): nothing was done; exit status 2."""


class _Parser(argparse.ArgumentParser):
    """Argument errors in one line (exit status 2), with a pointer to ``--help``."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {printable(message)} (see '{self.prog} --help')\n")


# --- formatting ------------------------------------------------------------------------------------------


def _escaped(char: str) -> str:
    return repr(char)[1:-1]  # \x1b, \x00, \n, \u200b: a non-printable character as Python writes it


def printable(value: object, *, newlines: bool = False) -> str:
    """``str(value)`` with every non-printable character escaped (ESC, NUL, CR, other controls).

    Used for every value printed from a stored file, so that a crafted name cannot drive the
    terminal; ``newlines`` keeps line breaks (messages of several lines).
    """
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or (newlines and c == "\n") else _escaped(c) for c in text)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    rows = [[printable(c) for c in row] for row in rows]
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows)]
    lines = [headers, ["-" * w for w in widths], *rows]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines)


def when(moment: _dt.datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "-"


def key_text(entry: StoredEntry) -> str:
    return repr(entry.key)


def times_text(timings: Sequence[float]) -> str:
    median, *rest = timings
    spread = f" (p20 {rest[0]:.4g}, p80 {rest[1]:.4g})" if len(rest) >= 2 else ""
    return f"{median:.4g} ms{spread}"


def emit(args: argparse.Namespace, payload: dict[str, Any], lines: str | Sequence[str]) -> None:
    """The payload as JSON (``--json``), else the lines (a text or a list), each made :func:`printable`."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    if args.json:
        print(json.dumps(payload, indent=1, sort_keys=True, default=str))
    else:
        print("\n".join(printable(line) for line in lines))


def problems_payload(problems: Sequence[inventory.Problem]) -> list[dict[str, str]]:
    return [{"path": p.source, "reason": p.reason} for p in problems]


def replaced_lines(replaced_in: Sequence[tuple[str, int]], dry_run: bool) -> list[str]:
    """One line per stored file whose entries a command replaces (or would replace)."""
    verb = "would replace" if dry_run else "replaced"
    return [f"  {verb} {count} stored entries in {path}" for path, count in replaced_in]


def left_out(files: Sequence[inventory.StoredFile], problems: Sequence[inventory.Problem]) -> dict[str, int]:
    """How many input files could not be read and how many invalid entries valid files held."""
    return {"files": len(problems), "entries": sum(len(f.rejected) for f in files)}


def left_out_text(counts: dict[str, int]) -> str:
    return f"left out {counts['files']} unreadable file(s) and {counts['entries']} invalid entries"


def report_problems(problems: Sequence[inventory.Problem]) -> None:
    for p in problems:
        print(f"{PROG}: cannot use {printable(p.source)}: {printable(p.reason)}", file=sys.stderr)


# --- reading ---------------------------------------------------------------------------------------------


def _roots(args: argparse.Namespace) -> list[Path]:
    """Every root given with ``--root`` (repeated, or an ``os.pathsep`` list), in order; without
    ``--root``: the roots of ``$TRITON_DEJAVU_STORAGE``, else the default root."""
    given = [part for value in args.root or () for part in value.split(os.pathsep) if part.strip()]
    if given:
        return [Path(part).expanduser() for part in given]
    return _env.storage_roots() or [default_root()]


def _root(args: argparse.Namespace) -> Path:
    """The written root: the first one."""
    return _roots(args)[0]


def layer_name(index: int) -> str:
    return f"{index} (written)" if index == 0 else str(index)


def _layered_files(args: argparse.Namespace) -> tuple[list[Path], list[tuple[int, inventory.StoredFile]]]:
    """The cache files of every existing root, each with the index of its root (0: the written one)."""
    roots = _roots(args)
    existing = [(i, root) for i, root in enumerate(roots) if root.is_dir()]
    if not existing:
        error = UsageError if args.root else CliError  # a --root that is not there is a typo
        raise error(f"no storage at {os.pathsep.join(map(str, roots))} (set --root or {_env.STORAGE})")
    found: list[tuple[int, inventory.StoredFile]] = []
    problems: list[inventory.Problem] = []
    for i, root in existing:
        files, bad = inventory.read_sources([root])
        found += [(i, f) for f in files]
        problems += bad
    if not args.json:
        report_problems(problems)
    args.problems, args.roots = problems, roots
    return roots, found


def _existing_root(args: argparse.Namespace) -> Path:
    root = _root(args)
    if not root.is_dir():
        error = UsageError if args.root else CliError  # a --root that is not there is a typo
        raise error(f"no storage at {root} (set --root or {_env.STORAGE})")
    return root


def _selected(args: argparse.Namespace, files: list[inventory.StoredFile]) -> list[inventory.StoredFile]:
    wanted = {name: getattr(args, name, None) for name in ("kernel", "tag", "triton", "toolchain", "gpu")}
    return [f for f in files if f.matches(**wanted)]


def file_summary(f: inventory.StoredFile) -> dict[str, Any]:
    return {
        "id": f.identity_id,
        "path": f.source,
        "identity": f.identity,
        "keys": len(f.entries),
        "rejected": len(f.rejected),
        "last_tuned": f.last_tuned().isoformat() if f.entries else None,
    }


# --- list -------------------------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    roots, layered = _layered_files(args)
    wanted = set(map(id, _selected(args, [f for _, f in layered])))
    layered = [(i, f) for i, f in layered if id(f) in wanted]
    layers = len(roots) > 1  # a LAYER column and a legend only when there are layers
    rows = [
        [
            *([str(i)] if layers else []),
            f.identity_id,
            f.identity["kernel"],
            f.identity["tag"],
            f.identity["triton"],
            f.identity["toolchain"],
            f.identity["gpu"],
            str(len(f.entries)),
            when(f.last_tuned()),
        ]
        for i, f in sorted(layered, key=lambda p: (p[1].identity["kernel"], p[1].identity["tag"], p[0]))
    ]
    headers = [*(["LAYER"] if layers else []), "ID", "KERNEL", "TAG", "TRITON", "TOOLCHAIN", "GPU", "KEYS"]
    headers.append("LAST TUNED")
    legend = [f"layer {layer_name(i)}: {root}" for i, root in enumerate(roots)] if layers else []
    text = table(headers, rows)
    if not rows:
        text = f"no stored results under {os.pathsep.join(map(str, roots))}"
    elif legend:
        text = "\n".join([*legend, "", text])
    payload = {
        "root": str(roots[0]),
        "roots": [str(r) for r in roots],
        "files": [{**file_summary(f), "layer": i, "layer_root": str(roots[i])} for i, f in layered],
        "problems": problems_payload(args.problems),
    }
    emit(args, payload, text.splitlines())
    if not args.json:
        report_problems(args.problems)
    return 0


# --- show -------------------------------------------------------------------------------------------------


def entry_payload(entry: StoredEntry) -> dict[str, Any]:
    return {
        "key": list(entry.key),
        "key_text": key_text(entry),
        "config": entry.data["config"],
        "config_text": describe_config(entry.config),
        "timings_ms": list(entry.timings_ms),
        "strategy": entry.strategy,
        "evaluated": entry.evaluated,
        "space_size": entry.space_size,
        "tuning_time_s": entry.tuning_time_s,
        "tuned_at": entry.data["tuned_at"],
        "top": [{"config_text": describe_config(c), "timings_ms": t} for c, t in entry.top()],
        "ruled_out": [{"config_text": describe_config(c), "reason": r} for c, r in entry.ruled_out()],
    }


def entry_lines(entry: StoredEntry, *, top: bool) -> list[str]:
    lines = [
        f"  key {key_text(entry)}",
        f"    config     {describe_config(entry.config)}",
        f"    time       {times_text(entry.timings_ms)}",
        f"    found by   {entry.strategy}: {entry.evaluated} of {entry.space_size} configs "
        f"evaluated in {entry.tuning_time_s:.3g} s, {entry.data['tuned_at']}",
    ]
    if top:
        for config, timings in entry.top():
            lines.append(f"    top        {times_text(timings)}: {describe_config(config)}")
    ruled_out = entry.ruled_out()
    if ruled_out:
        lines.append(f"    ruled out  {len(ruled_out)}:")
        lines.extend(f"      [{describe_config(c)}] {r[:200]}" for c, r in ruled_out)
    return lines


def _files_for(
    selector: str, args: argparse.Namespace
) -> list[tuple[tuple[int, Path] | None, inventory.StoredFile]]:
    """The files ``selector`` names, each with its layer (index and root; None for a path given)."""
    path = Path(selector).expanduser()
    if path.exists():
        files, problems = inventory.read_sources([path])
        if problems:
            report_problems(problems)
            raise CliError(f"{len(problems)} unreadable file(s) in {path}")
        return [(None, f) for f in files]
    roots, layered = _layered_files(args)
    return [
        ((i, roots[i]), f)
        for i, f in layered
        if f.identity_id.startswith(selector) or f.identity["kernel"] == selector
    ]


def cmd_show(args: argparse.Namespace) -> int:
    found = _files_for(args.selector, args)
    wanted = set(map(id, _selected(args, [f for _, f in found])))
    found = [(layer, f) for layer, f in found if id(f) in wanted]
    if not found:
        raise CliError(f"nothing stored matches {args.selector!r} (see '{PROG} list')")
    out: list[str] = []
    payload: dict[str, Any] = {"files": []}
    for layer, f in sorted(found, key=lambda p: (p[0] or (0, Path()), p[1].source)):
        ident = f.identity
        keys = f"{len(f.entries)} key" + ("" if len(f.entries) == 1 else "s")
        out.append(
            f"{ident['kernel']}  id {f.identity_id}  tag {ident['tag']}  triton {ident['triton']}  "
            f"{ident['toolchain']}  gpu {ident['gpu']}  ({keys})"
        )
        out.append(f"  {f.source}")
        layered = layer is not None and len(args.roots) > 1  # said only when there are layers
        if layered:
            out.append(f"  layer {layer_name(layer[0])}: {layer[1]}")
        entries = sorted(f.entries.values(), key=key_text)
        for entry in entries:
            out.extend(entry_lines(entry, top=args.top))
        for kid, (_, reason) in f.rejected.items():
            out.append(f"  invalid entry {kid[:120]}: {reason}")
        out.append("")
        payload["files"].append(
            {
                **file_summary(f),
                **({"layer": layer[0], "layer_root": str(layer[1])} if layered else {}),
                "entries": [entry_payload(e) for e in entries],
                "invalid": list(f.rejected),
            }
        )
    emit(args, payload, out[:-1])
    return 0


# --- merge ------------------------------------------------------------------------------------------------


def side_text(entry: StoredEntry, origin: str) -> str:
    times = times_text(entry.timings_ms)
    return f"{describe_config(entry.config)}  {times}  {entry.data['tuned_at']}  from {origin}"


def side_payload(entry: StoredEntry, origin: str) -> dict[str, Any]:
    return {
        "config": describe_config(entry.config),
        "timings_ms": list(entry.timings_ms),
        "tuned_at": entry.data["tuned_at"],
        "from": origin,
    }


def conflict_payload(c: inventory.Conflict) -> dict[str, Any]:
    return {
        "id": c.identity_id,
        "kernel": c.kernel,
        "key": c.key,
        "kept": side_payload(c.kept, c.kept_from),
        "dropped": side_payload(c.dropped, c.dropped_from),
    }


def cmd_merge(args: argparse.Namespace) -> int:
    root = _root(args)
    files, problems = inventory.read_sources(Path(s).expanduser() for s in args.sources)
    if problems and not args.skip_invalid:
        report_problems(problems)
        raise CliError(
            f"{len(problems)} input(s) cannot be read; nothing was merged (--skip-invalid merges the rest)"
        )
    if not files:
        raise CliError("the sources hold no cache files")
    report = inventory.merge_into(root, files, prefer=args.prefer, dry_run=args.dry_run)
    verb = "would merge" if args.dry_run else "merged"
    skipped = left_out(files, problems)
    lines = [
        f"{verb} {len(files)} file(s) into {len(report.written)} cache file(s) under {root}: "
        f"{report.added} added, {report.replaced} replaced, {report.unchanged} unchanged, "
        f"{len(report.conflicts)} conflict(s) (prefer {args.prefer}); {left_out_text(skipped)}",
        *replaced_lines(report.replaced_in, args.dry_run),
    ]
    for c in report.conflicts:
        lines.append(f"  conflict {c.kernel} key {c.key}:")
        lines.append(f"    kept     {side_text(c.kept, c.kept_from)}")
        lines.append(f"    dropped  {side_text(c.dropped, c.dropped_from)}")
    payload = {
        "root": str(root),
        "dry_run": args.dry_run,
        "written": report.written,
        "added": report.added,
        "replaced": report.replaced,
        "unchanged": report.unchanged,
        "replaced_in": dict(report.replaced_in),
        "left_out": skipped,
        "conflicts": [conflict_payload(c) for c in report.conflicts],
        "problems": problems_payload([*problems, *report.problems]),
    }
    emit(args, payload, lines)
    report_problems([*problems, *report.problems])
    return 1 if report.problems else 0


# --- prune ------------------------------------------------------------------------------------------------


def parse_moment(text: str) -> _dt.datetime:
    """An ISO date or time (naive = UTC), or ``<N>d`` for N days ago."""
    days = re.fullmatch(r"(\d+)d", text.strip())
    try:
        if days:
            return _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(days=int(days.group(1)))
        return parse_timestamp(text)
    except (InvalidEntry, OverflowError, ValueError) as exc:
        raise argparse.ArgumentTypeError(
            f"not a date: {text!r} (use 2025-01-31, an ISO time, or 30d)"
        ) from exc


def cmd_prune(args: argparse.Namespace) -> int:
    keep = {name: getattr(args, f"keep_{name}") for name in ("triton", "toolchain", "gpu")}
    keep = {name: value for name, value in keep.items() if value is not None}
    if not keep and args.older_than is None and not args.quarantined:
        raise UsageError(
            "say what to prune: --keep-triton, --keep-toolchain, --keep-gpu, --older-than or --quarantined"
        )
    root = _existing_root(args)
    if keep and not args.force:
        _check_keep_values(root, keep)
    report = inventory.prune(
        root,
        keep=keep,
        older_than=args.older_than,
        kernel=args.kernel,
        aside=args.quarantined,
        dry_run=args.dry_run,
    )
    verb = "would remove" if args.dry_run else "removed"
    lines = [
        f"{verb} {report.removed_entries} entries and {len(report.removed_files)} cache file(s) under {root} "
        f"({report.kept_entries} entries kept); {len(report.removed_aside)} file(s) moved aside earlier"
    ]
    lines += [f"  {p}" for p in [*report.removed_files, *report.removed_aside]]
    lines += [f"  {count} entries from {path}" for path, count in report.rewritten]
    payload = {
        "root": str(root),
        "dry_run": args.dry_run,
        "removed_entries": report.removed_entries,
        "kept_entries": report.kept_entries,
        "removed_files": report.removed_files,
        "rewritten": dict(report.rewritten),
        "removed_aside": report.removed_aside,
        "problems": problems_payload(report.problems),
    }
    emit(args, payload, lines)
    report_problems(report.problems)
    return 1 if report.problems else 0


def _check_keep_values(root: Path, keep: dict[str, str]) -> None:
    """Refuse a ``--keep-*`` value that no stored file has: it would remove everything (a typo)."""
    files, _ = inventory.read_sources([root])
    for name, value in keep.items():
        stored = sorted({f.identity[name] for f in files})
        if stored and value not in stored:
            listed = ", ".join(stored)
            raise UsageError(
                f"--keep-{name} {value!r} matches no stored result, so every result would be removed; "
                f"stored values: {listed} (use --force to remove them all anyway)"
            )


# --- export -----------------------------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    files, problems = inventory.read_sources([_existing_root(args)])
    files = _selected(args, files)
    if not files:
        raise CliError("nothing stored matches the selection (see 'list')")
    found = inventory.platforms(files)
    if len(found) > 1:
        listed = "; ".join(
            f"triton {p['triton']} {p['toolchain']} gpu {p['gpu']} (dejavu {p['dejavu']})" for p in found
        )
        raise UsageError(
            f"the selection spans {len(found)} platforms ({listed}); pick one with --triton/--toolchain/--gpu"
        )
    out = Path(args.out).expanduser()
    replaced: list[tuple[str, int]] = []
    notes: list[str] = []
    if inventory.is_archive(out):
        if out.is_dir() or (out.exists() and not args.force):
            raise UsageError(f"{out} already exists; nothing was written (--force replaces it)")
        if out.exists():
            held, _ = inventory.read_sources([out])
            verb = "would replace" if args.dry_run else "replaced"
            notes.append(f"  {verb} the existing {out} ({keys_in(held)} stored entries in it)")
        written = inventory.write_archive(out, files, dry_run=args.dry_run)
    else:
        if out.exists() and not out.is_dir():
            raise UsageError(f"{out} is a file; export to a storage directory or a .tar.gz archive")
        report = inventory.merge_into(out, files, dry_run=args.dry_run)
        if report.problems:
            report_problems(report.problems)
            raise CliError(f"could not export into {out}")
        written, replaced = report.written, report.replaced_in
    platform = found[0]
    skipped = left_out(files, problems)
    verb = "would export" if args.dry_run else "exported"
    lines = [
        f"{verb} {len(written)} cache file(s), {keys_in(files)} keys, for triton {platform['triton']} "
        f"{platform['toolchain']} gpu {platform['gpu']} to {out}; {left_out_text(skipped)}",
        *notes,
        *replaced_lines(replaced, args.dry_run),
    ]
    payload = {
        "out": str(out),
        "dry_run": args.dry_run,
        "platform": platform,
        "files": written,
        "keys": keys_in(files),
        "replaced_in": dict(replaced),
        "left_out": skipped,
    }
    emit(args, payload, lines)
    report_problems(problems)
    return 0


def keys_in(files: Sequence[inventory.StoredFile]) -> int:
    return sum(len(f.entries) for f in files)


# --- import-dejavu ----------------------------------------------------------------------------------------


def cmd_import_dejavu(args: argparse.Namespace) -> int:
    root = _root(args)
    missing = [s for s in args.sources if not Path(s).expanduser().exists()]
    if missing:
        raise UsageError(f"no such file or directory: {', '.join(missing)}")
    platform = {name: getattr(args, name) for name in ("triton", "toolchain", "gpu") if getattr(args, name)}
    results = []
    failed = False
    for spec in args.kernel:
        try:
            tuner = dejavu_import.load_tuner(spec)
        except Exception as exc:  # importing the user's module may raise anything
            raise UsageError(f"cannot load --kernel {spec}: {type(exc).__name__}: {exc}") from exc
        try:
            report = dejavu_import.import_dejavu(
                [Path(s).expanduser() for s in args.sources],
                tuner,
                root,
                tag=args.tag,
                platform=platform,
                overwrite=args.overwrite,
                dry_run=args.dry_run,
            )
        except (ValueError, TypeError) as exc:  # e.g. the kernel's identity cannot be computed
            raise CliError(f"cannot import for {spec}: {exc}") from exc
        failed = failed or bool(report.problems)
        results.append((spec, report))
    lines = []
    for spec, r in results:
        verb = "would import" if args.dry_run else "imported"
        lines.append(
            f"{spec}: {verb} {r.imported} keys from {len(r.files)} triton-dejavu file(s) into "
            f"{len(r.written)} cache file(s) under {root}; {r.kept_existing} already stored were kept, "
            f"{len(r.skipped)} skipped"
        )
        lines += replaced_lines(r.replaced_in, args.dry_run)
        lines += [f"  skipped {key} in {file}: {reason}" for file, key, reason in r.skipped]
        lines += [f"  wrote {path}" for path in r.written]
    payload = {
        spec: {
            "files": r.files,
            "imported": r.imported,
            "kept_existing": r.kept_existing,
            "replaced_in": dict(r.replaced_in),
            "written": r.written,
            "skipped": [{"file": f, "key": k, "reason": why} for f, k, why in r.skipped],
            "problems": problems_payload(r.problems),
        }
        for spec, r in results
    }
    emit(args, payload, lines)
    for _, r in results:
        report_problems(r.problems)
    return 1 if failed else 0


# --- misses -----------------------------------------------------------------------------------------------


def cmd_misses(args: argparse.Namespace) -> int:
    source = Path(args.file).expanduser() if args.file else _env.misses_file()
    if source is None:
        raise UsageError(f"name the misses file (or set {_env.MISSES_FILE})")
    try:
        rows, bad = miss_log.read_misses_file(source)
    except InvalidCacheFile as exc:
        raise CliError(f"cannot read {source}: {exc}") from exc
    table_rows = [[r.kernel, r.key, r.answer, str(r.count), ", ".join(r.configs)] for r in rows]
    text = (
        table(["KERNEL", "KEY", "ANSWER", "COUNT", "CONFIG"], table_rows)
        if rows
        else f"no misses recorded in {source}"
    )
    if rows:
        text += "\n\ntune them ahead of time: python -m triton_dejavu_like tune SPEC"
    payload = {
        "file": str(source),
        "misses": [dataclasses.asdict(r) for r in rows],
        "invalid_lines": bad,
    }
    emit(args, payload, text)
    if bad and not args.json:
        print(f"{PROG}: skipped {bad} line(s) of {source} that are not miss records", file=sys.stderr)
    return 0


# --- tune -------------------------------------------------------------------------------------------------


def cmd_tune(args: argparse.Namespace) -> int:
    if sum(bool(x) for x in (args.gpus, args.workers, args.ray is not None)) > 1:
        raise UsageError("choose one of --gpus, --workers and --ray")
    try:
        gpus = aot.parse_gpus(args.gpus) if args.gpus else None
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    request = aot.TuneRequest(
        spec=args.spec,
        root=_root(args),
        gpus=gpus,
        workers=args.workers,
        ray=args.ray is not None,
        ray_address=args.ray or None,
        batch_size=args.batch_size,
        ray_start_timeout_s=args.ray_start_timeout,
        export=Path(args.export).expanduser() if args.export else None,
    )
    try:
        report = aot.tune(request, quiet=args.json)
    except SpecError as exc:
        raise CliError(str(exc)) from exc
    except RuntimeError as exc:  # Ray missing or unreachable
        raise CliError(str(exc)) from exc
    emit(args, report.to_json(), aot.summary(report))
    for message in report.errors:
        print(f"{PROG} tune: {message}", file=sys.stderr)
    report_problems(report.problems)
    return 0 if report.ok else 1


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a whole number >= 1: {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:  # also NaN
        raise argparse.ArgumentTypeError(f"not a number > 0: {text!r}")
    return value


# --- heuristic --------------------------------------------------------------------------------------------


def cmd_heuristic(args: argparse.Namespace) -> int:
    files, problems = inventory.read_sources([_existing_root(args)])
    files = [f for f in _selected(args, files) if f.identity["kernel"] == args.kernel_name]
    if not files:
        raise CliError(f"nothing stored for kernel {args.kernel_name!r} (see '{PROG} list')")
    found = inventory.platforms(files)
    if len(found) > 1:
        raise CliError(
            f"{args.kernel_name} is stored for {len(found)} platforms; "
            "pick one with --triton/--toolchain/--gpu"
        )
    try:
        learnt = heuristic.learn(
            heuristic.stored_entries(files), args.kernel_name, method=args.method, name=args.name
        )
    except heuristic.HeuristicError as exc:
        raise CliError(str(exc)) from exc
    if args.out:
        Path(args.out).expanduser().write_text(learnt.source)
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
    }
    if args.json:
        emit(args, payload, text)
    else:
        print(text, file=sys.stderr if not args.out else sys.stdout)
    report_problems(problems)
    return 0


# --- diff -------------------------------------------------------------------------------------------------


def cmd_diff(args: argparse.Namespace) -> int:
    """Exit 0 when every key stored by several sources has one winner, 1 when winners differ, 2 when a
    source cannot be read (as diff(1) does)."""
    sources = [Path(s).expanduser() for s in args.sources]
    absent = [str(s) for s in sources if not s.exists()]
    if absent:
        raise UsageError(f"no such source: {', '.join(absent)}")
    try:
        result = diff.compare(sources, match=args.match or ())
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    report_problems(result.problems)
    differences = result.differences
    lines = [
        f"{len(result.compared)} key(s) stored by several sources, {len(differences)} with different "
        f"winners; {len(result.missing)} key(s) stored by some sources only"
    ]
    for comparison in differences:
        lines.append(f"  {comparison.kernel} key {key_text(comparison.winners[0].entry)}:")
        for w in comparison.winners:
            where = " ".join(f"{f}={w.identity[f]}" for f in diff.MATCHABLE if f != "dejavu")
            lines.append(
                f"    {w.source}: {describe_config(w.entry.config)}  {times_text(w.entry.timings_ms)}"
            )
            lines.append(f"      {where}  tuned {w.entry.tuned_at.isoformat()}  ({w.file})")
    payload = {
        "sources": result.sources,
        "compared": len(result.compared),
        "differences": [
            {
                "kernel": c.kernel,
                "key": c.key_id,
                "winners": [
                    {
                        "source": w.source,
                        "file": w.file,
                        "identity": w.identity,
                        "config": w.entry.data["config"],
                        "timings_ms": list(w.entry.timings_ms),
                        "tuned_at": w.entry.tuned_at.isoformat(),
                    }
                    for w in c.winners
                ],
            }
            for c in differences
        ],
        "missing": [
            {"kernel": c.kernel, "key": c.key_id, "lacking": lacking} for c, lacking in result.missing
        ],
        "problems": problems_payload(result.problems),
    }
    emit(args, payload, "\n".join(lines))
    if result.problems:
        return 2
    return 1 if differences else 0


# --- the parser -------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument(
        "--root",
        action="append",
        help=f"storage root (default: ${_env.STORAGE} or the user cache directory); list and show take "
        f"several (repeated or '{os.pathsep}'-separated: the first is written, the others are layers)",
    )
    common.add_argument("--json", action="store_true", help="print JSON for scripts")
    selection = _Parser(add_help=False)
    for name in ("kernel", "tag", "triton", "toolchain", "gpu"):
        selection.add_argument(f"--{name}", help=f"only results whose {name} is this")

    parser = _Parser(prog=PROG, description="Inspect and manage tuning results stored by triton_dejavu_like.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_store_commands(sub, common, selection)
    _add_tuning_commands(sub, common, selection)
    return parser


def _add_store_commands(
    sub: Any, common: argparse.ArgumentParser, selection: argparse.ArgumentParser
) -> None:
    """list, show, merge, prune, export, diff: reading and managing stored results."""
    p = sub.add_parser("list", parents=[common, selection], help="list the stored kernels (a table)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", parents=[common, selection], help="show one kernel's entries")
    p.add_argument("selector", help="an ID from 'list', a kernel name, or a cache.json path")
    p.add_argument("--top", action="store_true", help="also show the best candidates of each key")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser(
        "merge", parents=[common], help="merge storage trees, cache files or archives into --root"
    )
    p.add_argument("sources", nargs="+", help="storage trees, cache.json files or .tar.gz archives")
    p.add_argument(
        "--prefer",
        choices=inventory.PREFERENCES,
        default="newest",
        help="which result wins for a key stored more than once (default: newest)",
    )
    p.add_argument("--dry-run", action="store_true", help="report, write nothing")
    p.add_argument("--skip-invalid", action="store_true", help="merge the readable sources when some are not")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser(
        "prune", parents=[common], help="remove results for other versions, or older than a date"
    )
    p.add_argument(
        "--keep-triton",
        nargs="?",
        const=_compat.TRITON_VERSION_STR,
        metavar="VERSION",
        help=f"remove files made with any other Triton (without VERSION: {_compat.TRITON_VERSION_STR})",
    )
    p.add_argument(
        "--keep-toolchain", metavar="NAME", help="remove files for any other toolchain (e.g. cuda_12.8)"
    )
    p.add_argument("--keep-gpu", metavar="NAME", help="remove files for any other GPU (as 'list' shows it)")
    p.add_argument(
        "--older-than",
        type=parse_moment,
        metavar="DATE",
        help="remove entries tuned before DATE (2025-01-31, an ISO time, or 30d)",
    )
    p.add_argument("--kernel", help="only this kernel's files")
    p.add_argument(
        "--quarantined", action="store_true", help="delete files moved aside as corrupt or rejected"
    )
    p.add_argument("--dry-run", action="store_true", help="report, remove nothing")
    p.add_argument(
        "--force", action="store_true", help="remove even when a --keep-* value matches no stored result"
    )
    p.set_defaults(func=cmd_prune)

    p = sub.add_parser(
        "export", parents=[common, selection], help="copy one platform's results for a deployment"
    )
    p.add_argument("out", help="a directory (a storage root) or a .tar.gz archive")
    p.add_argument("--dry-run", action="store_true", help="report, write nothing")
    p.add_argument("--force", action="store_true", help="replace an existing archive")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "diff", parents=[common], help="compare the winners stored by several machines or ranks"
    )
    p.add_argument(
        "sources", nargs="+", help="two or more storage trees, cache.json files or .tar.gz archives"
    )
    p.add_argument(
        "--match",
        action="append",
        choices=diff.MATCHABLE,
        help="also match results on this identity field (default: platform and tag are ignored); repeatable",
    )
    p.set_defaults(func=cmd_diff)


def _add_tuning_commands(
    sub: Any, common: argparse.ArgumentParser, selection: argparse.ArgumentParser
) -> None:
    """import-dejavu, misses, tune, heuristic: getting results into a store and out as code."""
    p = sub.add_parser("import-dejavu", parents=[common], help="convert triton-dejavu cache.json files")
    p.add_argument("sources", nargs="+", help="triton-dejavu storage trees or cache.json files")
    p.add_argument(
        "--kernel",
        action="append",
        required=True,
        metavar="MODULE:NAME",
        help="the kernel (decorated with triton_dejavu_like.autotune) the results are for: "
        "MODULE:NAME or FILE.py:NAME; repeatable",
    )
    p.add_argument("--tag", help="store under this tag (default: the triton-dejavu tag, else the kernel's)")
    for name in ("triton", "toolchain", "gpu"):
        p.add_argument(
            f"--{name}",
            help=f"the {name} the results were tuned with (default: from the path, else this machine)",
        )
    p.add_argument("--overwrite", action="store_true", help="replace entries already stored for the same key")
    p.add_argument("--dry-run", action="store_true", help="report, write nothing")
    p.set_defaults(func=cmd_import_dejavu)

    p = sub.add_parser("misses", help="aggregate the keys serving processes answered without tuning")
    p.add_argument("file", nargs="?", help=f"a misses file (default: ${_env.MISSES_FILE})")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=cmd_misses)

    p = sub.add_parser("tune", parents=[common], help="tune a SPEC's kernel calls ahead of time")
    p.add_argument(
        "spec", help="FILE.py, MODULE, FILE.py:FUNCTION or MODULE:FUNCTION yielding TuneCase objects"
    )
    where = p.add_argument_group("where the cases run (default: in this process)")
    where.add_argument("--gpus", metavar="all|0,1,...", help="one worker process per GPU of this host")
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
        "--export", metavar="DIR", help="also write this SPEC's kernels' results to a storage root DIR"
    )
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser(
        "heuristic", parents=[common, selection], help="write a fallback_heuristic learnt from stored results"
    )
    p.add_argument("kernel_name", metavar="KERNEL", help="the kernel's name (as 'list' shows it)")
    p.add_argument("--out", metavar="FILE", help="write the Python module here (default: stdout)")
    p.add_argument(
        "--method", choices=heuristic.METHODS, default="auto", help="tree (scikit-learn), nearest, auto"
    )
    p.add_argument("--name", default="heuristic", help="the function's name (default: heuristic)")
    p.set_defaults(func=cmd_heuristic)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
    logger = logging.getLogger("triton_dejavu_like")
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)
    try:
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except BrokenPipeError:
        # The recipe of Python's signal docs (note on SIGPIPE): whoever read our output is gone
        # (``list | head -1``); point stdout at devnull so that the interpreter's final flush is
        # quiet, and exit 1 as Python does on EPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
    except UsageError as exc:
        print(f"{PROG} {args.command}: error: {printable(exc, newlines=True)}", file=sys.stderr)
        return 2
    except (CliError, OSError) as exc:
        print(f"{PROG} {args.command}: error: {printable(exc, newlines=True)}", file=sys.stderr)
        return 1
    finally:
        logger.removeHandler(handler)

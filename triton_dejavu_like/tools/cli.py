"""``python -m triton_dejavu_like`` (also ``triton-dejavu-like``): inspect and manage stored results.

Commands: ``list``, ``show``, ``merge``, ``prune``, ``export``, ``import-dejavu``. Every command takes
``--root`` (default: the package's storage root, ``$TRITON_DEJAVU_STORAGE`` or the user cache
directory) and ``--json`` for scripts. Exit status: 0 on success, 1 when an input cannot be read or
nothing matches, 2 for a mistake in the command line (one line on stderr, nothing done).

Every command that removes or replaces stored data (``prune``, ``merge``, ``export``,
``import-dejavu --overwrite``) lists what it removes or replaces and takes ``--dry-run``. Every value
read from a file is printed through :func:`printable`, so a stored name cannot send terminal control
sequences. Output cut short by a closed pipe (``list | head -1``) ends quietly.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import __version__, _compat, _env
from ..codec import describe_config
from ..store import StoredEntry, default_root, inventory, parse_timestamp
from ..store.entry import InvalidEntry
from . import dejavu_import

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


def emit(args: argparse.Namespace, payload: dict[str, Any], lines: Sequence[str]) -> None:
    """The payload as JSON (``--json``), else the lines, each made :func:`printable`."""
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


def _root(args: argparse.Namespace) -> Path:
    return Path(args.root).expanduser() if args.root else default_root()


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
    root = _existing_root(args)
    files, problems = inventory.read_sources([root])
    files = _selected(args, files)
    rows = [
        [
            f.identity_id,
            f.identity["kernel"],
            f.identity["tag"],
            f.identity["triton"],
            f.identity["toolchain"],
            f.identity["gpu"],
            str(len(f.entries)),
            when(f.last_tuned()),
        ]
        for f in sorted(files, key=lambda f: (f.identity["kernel"], f.identity["tag"], f.source))
    ]
    headers = ["ID", "KERNEL", "TAG", "TRITON", "TOOLCHAIN", "GPU", "KEYS", "LAST TUNED"]
    text = table(headers, rows) if rows else f"no stored results under {root}"
    payload = {
        "root": str(root),
        "files": [file_summary(f) for f in files],
        "problems": problems_payload(problems),
    }
    emit(args, payload, text.splitlines())
    if not args.json:
        report_problems(problems)
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


def _files_for(selector: str, args: argparse.Namespace) -> list[inventory.StoredFile]:
    path = Path(selector).expanduser()
    if path.exists():
        files, problems = inventory.read_sources([path])
        if problems:
            report_problems(problems)
            raise CliError(f"{len(problems)} unreadable file(s) in {path}")
        return files
    files, _ = inventory.read_sources([_existing_root(args)])
    return [f for f in files if f.identity_id.startswith(selector) or f.identity["kernel"] == selector]


def cmd_show(args: argparse.Namespace) -> int:
    files = _selected(args, _files_for(args.selector, args))
    if not files:
        raise CliError(f"nothing stored matches {args.selector!r} (see '{PROG} list')")
    out: list[str] = []
    payload: dict[str, Any] = {"files": []}
    for f in sorted(files, key=lambda f: f.source):
        ident = f.identity
        keys = f"{len(f.entries)} key" + ("" if len(f.entries) == 1 else "s")
        out.append(
            f"{ident['kernel']}  id {f.identity_id}  tag {ident['tag']}  triton {ident['triton']}  "
            f"{ident['toolchain']}  gpu {ident['gpu']}  ({keys})"
        )
        out.append(f"  {f.source}")
        entries = sorted(f.entries.values(), key=key_text)
        for entry in entries:
            out.extend(entry_lines(entry, top=args.top))
        for kid, (_, reason) in f.rejected.items():
            out.append(f"  invalid entry {kid[:120]}: {reason}")
        out.append("")
        payload["files"].append(
            {**file_summary(f), "entries": [entry_payload(e) for e in entries], "invalid": list(f.rejected)}
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


# --- the parser -------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--root", help=f"storage root (default: ${_env.STORAGE} or the user cache directory)")
    common.add_argument("--json", action="store_true", help="print JSON for scripts")
    selection = _Parser(add_help=False)
    for name in ("kernel", "tag", "triton", "toolchain", "gpu"):
        selection.add_argument(f"--{name}", help=f"only results whose {name} is this")

    parser = _Parser(prog=PROG, description="Inspect and manage tuning results stored by triton_dejavu_like.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
    return parser


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

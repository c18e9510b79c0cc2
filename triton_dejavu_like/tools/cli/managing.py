"""``merge``, ``prune`` and ``export``: commands that write, replace or remove stored results (each
lists what it replaces or removes, and takes ``--dry-run``)."""

from __future__ import annotations

import argparse
import datetime as _dt
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ... import _compat
from ..._log import DejavuConfigWarning, warn_once
from ...codec import describe_config
from ...store import StoredEntry, export, inventory, parse_timestamp, tree_merge, tree_prune
from ...store.entry import InvalidEntry
from ...store.identity import package_major_minor
from ...store.layout import PLATFORM_FIELDS
from .output import (
    CliError,
    UsageError,
    emit,
    key_text,
    left_out,
    left_out_text,
    path_text,
    positive_int,
    problems_payload,
    replaced_lines,
    report_problems,
    times_text,
)
from .roots import (
    existing_root,
    named_values,
    note_layers,
    nothing_selected,
    refuse_file,
    refuse_inside,
    refuse_other_archive,
    refuse_root_inside,
    refuse_several,
    selected,
    served_files,
    writable_root,
)


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


def conflict_payload(c: tree_merge.Conflict) -> dict[str, Any]:
    return {
        "id": c.identity_id,
        "kernel": c.kernel,
        "key": c.key,
        "kept": side_payload(c.kept, c.kept_from),
        "dropped": side_payload(c.dropped, c.dropped_from),
    }


def cmd_merge(args: argparse.Namespace) -> int:
    root = writable_root(args)
    note_layers(args, "merge")
    sources = [Path(s).expanduser() for s in args.sources]
    refuse_root_inside(root, sources)
    files, problems = inventory.read_sources(sources)
    if problems and not args.skip_invalid:
        report_problems(problems)
        raise CliError(
            f"{len(problems)} input(s) cannot be read; nothing was merged (--skip-invalid merges the rest)"
        )
    if not files:
        raise CliError("the sources hold no cache files")
    report = tree_merge.merge_into(root, files, prefer=args.prefer, dry_run=args.dry_run)
    verb = "would merge" if args.dry_run else "merged"
    skipped = left_out(files, problems)
    lines = [
        f"{verb} {len(files)} file(s) into {len(report.written)} cache file(s) under {root}: "
        f"{report.added} added, {report.replaced} replaced, {report.unchanged} unchanged, "
        f"{len(report.conflicts)} conflict(s) (prefer {args.prefer}); {left_out_text(skipped)}",
        *replaced_lines(report.replaced_in, args.dry_run),
    ]
    lines += _conflict_lines(report.conflicts)
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


def _conflict_lines(conflicts: Sequence[tree_merge.Conflict]) -> list[str]:
    """The conflicts of each destination file, the first :data:`LISTED_KEYS` of each (``--json``
    lists every one)."""
    by_file: dict[str, list[tree_merge.Conflict]] = {}
    for c in conflicts:
        by_file.setdefault(c.identity_id, []).append(c)
    lines = []
    for listed in by_file.values():
        for c in listed[:LISTED_KEYS]:
            lines.append(f"  conflict {c.kernel} key {c.key}:")
            lines.append(f"    kept     {side_text(c.kept, c.kept_from)}")
            lines.append(f"    dropped  {side_text(c.dropped, c.dropped_from)}")
        if len(listed) > LISTED_KEYS:
            more = len(listed) - LISTED_KEYS
            lines.append(f"  ... and {more} more conflict(s) of {listed[0].kernel} (--json lists every one)")
    return lines


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
    keep = {name: getattr(args, f"keep_{name}") for name in PLATFORM_FIELDS}
    keep = {name: value for name, value in keep.items() if value is not None}
    if not keep and args.older_than is None and args.keep_newest is None and not args.quarantined:
        raise UsageError(
            "say what to prune: --keep-dejavu, --keep-triton, --keep-toolchain, --keep-gpu, --older-than, "
            "--keep-newest or --quarantined"
        )
    root = existing_root(args)
    note_layers(args, "prune")
    if args.kernel is not None or (keep and not args.force):
        stored, _ = inventory.read_sources([root])  # read once for both checks (a file may be large)
        if args.kernel is not None:
            _check_kernel(root, stored, args.kernel)
        if keep and not args.force:
            _check_keep_values([f for f in stored if args.kernel in (None, f.identity["kernel"])], keep)
    report = tree_prune.prune(
        root,
        keep=keep,
        older_than=args.older_than,
        kernel=args.kernel,
        aside=args.quarantined,
        keep_newest=args.keep_newest,
        dry_run=args.dry_run,
    )
    verb = "would remove" if args.dry_run else "removed"
    lines = [
        f"{verb} {report.removed_entries} entries and {len(report.removed_files)} cache file(s) under {root} "
        f"({report.kept_entries} entries kept); {len(report.removed_aside)} file(s) moved aside earlier"
    ]
    lines += [f"  {p}" for p in [*report.removed_files, *report.removed_aside]]
    for path, count in report.rewritten:
        lines.append(f"  {count} entries from {path}")
        lines += _removed_key_lines(report.removed_keys.get(path, []))
    for path, count in report.unreadable.items():
        lines.append(f"  kept as they are: {count} entries this release cannot read, in {path}")
    payload = {
        "root": str(root),
        "dry_run": args.dry_run,
        "removed_entries": report.removed_entries,
        "kept_entries": report.kept_entries,
        "removed_files": report.removed_files,
        "rewritten": dict(report.rewritten),
        "removed_keys": {
            path: [
                {"key": list(e.key), "key_text": key_text(e), "tuned_at": e.tuned_at.isoformat()}
                for e in gone
            ]
            for path, gone in report.removed_keys.items()
        },
        "removed_aside": report.removed_aside,
        "unreadable_kept": report.unreadable,
        "problems": problems_payload(report.problems),
    }
    emit(args, payload, lines)
    report_problems(report.problems)
    return 1 if report.problems else 0


#: The keys a text report lists per file that keeps entries (``--json`` lists every one).
LISTED_KEYS = 10


def _removed_key_lines(gone: Sequence[StoredEntry]) -> list[str]:
    """The keys removed from a file that stays, oldest first: what ``--older-than`` and
    ``--keep-newest`` choose, for a ``--dry-run`` to show before anything goes."""
    lines = [
        f"    key {key_text(e)}, tuned {e.tuned_at.isoformat(timespec='seconds')}" for e in gone[:LISTED_KEYS]
    ]
    if len(gone) > LISTED_KEYS:
        lines.append(f"    ... and {len(gone) - LISTED_KEYS} more (--json lists every key)")
    return lines


def _check_kernel(root: Path, files: Sequence[inventory.StoredFile], kernel: str) -> None:
    """Refuse a ``--kernel`` that names nothing stored (a typo would prune nothing and say so quietly)."""
    stored = sorted({f.identity["kernel"] for f in files})
    if kernel not in stored and not tree_prune.aside_files(root, kernel):
        listed = ", ".join(stored) or "none"
        raise CliError(f"nothing stored for kernel {kernel!r} under {root} (stored kernels: {listed})")


def _check_keep_values(files: Sequence[inventory.StoredFile], keep: dict[str, str]) -> None:
    """Refuse ``--keep-*`` values that no file of ``files`` (those pruned) has together: they would
    remove everything (a typo, or values each stored, but never in one file)."""
    if not files or any(all(f.identity[n] == v for n, v in keep.items()) for f in files):
        return
    force = "use --force to remove them all anyway"
    for name, value in keep.items():
        stored = sorted({f.identity[name] for f in files})
        if value not in stored:
            raise UsageError(
                f"--keep-{name} {value!r} matches no stored result, so every result would be removed; "
                f"stored values: {', '.join(stored)} ({force})"
            )
    given = " ".join(f"--keep-{n} {v!r}" for n, v in keep.items())
    together = sorted({", ".join(f"{n} {f.identity[n]}" for n in keep) for f in files})
    raise UsageError(
        f"{given}: no stored result has these values together, so every result would be removed; "
        f"stored together: {named_values(together, '; ')} ({force})"
    )


def cmd_export(args: argparse.Namespace) -> int:
    out = Path(args.out).expanduser()
    refuse_other_archive(out, str(out))
    roots, stored, problems = served_files(args)  # every layer: what serving with these roots restores
    for root in roots:
        refuse_inside(out, root, str(out))
    files = selected(args, stored)
    if not files:
        raise nothing_selected(args, stored)
    refuse_several(files, PLATFORM_FIELDS, "the selection spans", "platforms")
    if inventory.is_archive(out):
        written, notes = _export_archive(out, files, args)
        replaced: list[tuple[str, int]] = []
    else:
        written, replaced = _export_folder(out, files, args)
        notes = []
    [platform] = export.platforms(files)
    skipped = left_out(files, problems)
    keys = inventory.distinct_keys(files)  # a key stored in two files of one identity is written once
    verb = "would export" if args.dry_run else "exported"
    lines = [
        f"{verb} {len(written)} cache file(s), {keys} keys, for triton {platform['triton']} "
        f"{platform['toolchain']} gpu {platform['gpu']} to {out}; {left_out_text(skipped)}",
        *notes,
        *replaced_lines(replaced, args.dry_run),
    ]
    payload = {
        "out": str(out),
        "roots": [str(root) for root in roots],
        "dry_run": args.dry_run,
        "platform": platform,
        "files": written,
        "keys": keys,
        "replaced_in": dict(replaced),
        "left_out": skipped,
        "problems": problems_payload(problems),
    }
    emit(args, payload, lines)
    report_problems(problems)
    return 0


def _export_archive(
    out: Path, files: Sequence[inventory.StoredFile], args: argparse.Namespace
) -> tuple[list[str], list[str]]:
    """Export into a new archive (an existing one only with --force): its members, and what it replaced."""
    if out.is_dir() or (out.exists() and not args.force):
        raise UsageError(f"{out} already exists; nothing was written (--force replaces it)")
    notes = []
    if out.exists():
        held, _ = inventory.read_sources([out])
        verb = "would replace" if args.dry_run else "replaced"
        notes.append(f"  {verb} the existing {out} ({inventory.distinct_keys(held)} stored entries in it)")
    return export.write_archive(out, files, dry_run=args.dry_run), notes


def _export_folder(
    out: Path, files: Sequence[inventory.StoredFile], args: argparse.Namespace
) -> tuple[list[str], list[tuple[str, int]]]:
    """Export into a storage root (merged into what it holds, the selection's entry winning for each
    of its keys: the folder ships what was exported): the files written, and those whose entries were
    replaced."""
    refuse_file(out, str(out))
    if args.force:
        warn_once(
            DejavuConfigWarning,
            "--force",
            "export: --force has no effect when exporting into a directory: the selection is merged "
            "into what it holds (it replaces only an existing .tar.gz archive)",
        )
    report = tree_merge.merge_into(out, files, dry_run=args.dry_run, replace=True)  # what is shipped
    if report.problems:
        report_problems(report.problems)
        raise CliError(f"could not export into {out}")
    return report.written, report.replaced_in


def add_commands(sub: Any, common: argparse.ArgumentParser, selection: argparse.ArgumentParser) -> None:
    """merge, prune, export: managing stored results."""
    p = sub.add_parser(
        "merge", parents=[common], help="merge storage trees, cache files or archives into --root"
    )
    p.add_argument(
        "sources", nargs="+", type=path_text, help="storage trees, cache.json files or .tar.gz archives"
    )
    p.add_argument(
        "--prefer",
        choices=tree_merge.PREFERENCES,
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
        "--keep-dejavu",
        nargs="?",
        const=package_major_minor(),
        metavar="VERSION",
        help="remove files of any other storage version, written by another release "
        f"(without VERSION: {package_major_minor()}, this release's)",
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
    p.add_argument(
        "--keep-newest",
        type=positive_int,
        metavar="N",
        help="keep at most N entries in each cache file, the most recently tuned",
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
    p.add_argument("out", type=path_text, help="a directory (a storage root) or a .tar.gz (.tgz) archive")
    p.add_argument("--dry-run", action="store_true", help="report, write nothing")
    p.add_argument("--force", action="store_true", help="replace an existing archive")
    p.set_defaults(func=cmd_export)

"""``list``, ``show`` and ``diff``: commands that read stored results and change nothing."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...codec import describe_config
from ...store import StoredEntry, inventory
from .. import diff
from .output import (
    PROG,
    CliError,
    UsageError,
    emit,
    key_order,
    key_text,
    path_text,
    printable,
    problems_payload,
    report_problems,
    table,
    times_text,
    when,
)
from .roots import HASH_FIELDS, layered_files, nothing_selected, selected


def layer_name(index: int) -> str:
    return f"{index} (written)" if index == 0 else str(index)


def file_summary(f: inventory.StoredFile) -> dict[str, Any]:
    return {
        "id": f.identity_id,
        "path": f.source,
        "identity": f.identity,
        "keys": len(f.entries),
        "rejected": len(f.rejected),
        "last_tuned": f.last_tuned().isoformat() if f.entries else None,
    }


def cmd_list(args: argparse.Namespace) -> int:
    roots, layered = layered_files(args)
    wanted = set(map(id, selected(args, [f for _, f in layered])))
    if layered and not wanted:
        raise nothing_selected(args, [f for _, f in layered])
    layered = [(i, f) for i, f in layered if id(f) in wanted]
    fields = listed_fields([f for _, f in layered])
    layers = len(roots) > 1  # a LAYER column and a legend only when there are layers
    invalid = sum(len(f.rejected) for _, f in layered)  # an INVALID column only when some file has them
    rows = [
        [
            *([str(i)] if layers else []),
            f.identity_id,
            *(f.identity[name] for name in fields),
            str(len(f.entries)),
            *([str(len(f.rejected))] if invalid else []),
            when(f.last_tuned()),
        ]
        for i, f in sorted(layered, key=lambda p: (p[1].identity["kernel"], p[1].identity["tag"], p[0]))
    ]
    headers = [*(["LAYER"] if layers else []), "ID", *(n.upper().replace("_", " ") for n in fields), "KEYS"]
    headers += [*(["INVALID"] if invalid else []), "LAST TUNED"]
    legend = [f"layer {layer_name(i)}: {root}" for i, root in enumerate(roots)] if layers else []
    text = table(headers, rows)
    if not rows:
        text = f"no stored results under {os.pathsep.join(map(str, roots))}"
    elif legend:
        text = "\n".join([*legend, "", text])
    if invalid:
        text += (
            f"\n\n{invalid} invalid entries (INVALID) are never restored: `{PROG} show` gives their "
            "reasons; a process that tunes with such a file moves them into cache.json.rejected-*, "
            "except values of a kind this release does not read (a later release's), which stay"
        )
    payload = {
        "root": str(roots[0]),
        "roots": [str(r) for r in roots],
        "files": [{**file_summary(f), "layer": i, "layer_root": str(roots[i])} for i, f in layered],
        "problems": problems_payload(args.problems),
    }
    emit(args, payload, text.splitlines())  # layered_files reported the problems
    return 0


#: The identity fields every row of ``list`` shows.
LISTED_FIELDS = ("kernel", "tag", "triton", "toolchain", "gpu")


def listed_fields(files: Sequence[inventory.StoredFile]) -> list[str]:
    """The identity fields ``list`` shows (and ``show`` names): :data:`LISTED_FIELDS`, dejavu (the
    storage version) when ``files`` hold several, and each hash that tells apart files that look the
    same otherwise (one kernel stored with two code versions)."""
    dejavu = ["dejavu"] if len({f.identity["dejavu"] for f in files}) > 1 else []
    hashes = [name for name in HASH_FIELDS if _tells_apart(files, name)]
    return ["kernel", "tag", *dejavu, "triton", "toolchain", "gpu", *hashes]


def _tells_apart(files: Sequence[inventory.StoredFile], name: str) -> bool:
    """Two of ``files`` that differ in ``name`` only, among the fields ``list`` always shows."""
    seen: dict[tuple[str, ...], str] = {}
    for f in files:
        looks = tuple(f.identity[n] for n in (*LISTED_FIELDS, "dejavu"))
        if seen.setdefault(looks, f.identity[name]) != f.identity[name]:
            return True
    return False


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
        "ended_by": entry.ended_by,
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
        f"evaluated in {entry.tuning_time_s:.3g} s{_ended(entry)}, {entry.data['tuned_at']}",
    ]
    if top:
        for config, timings in entry.top():
            lines.append(f"    top        {times_text(timings)}: {describe_config(config)}")
    ruled_out = entry.ruled_out()
    if ruled_out:
        lines.append(f"    ruled out  {len(ruled_out)}:")
        lines.extend(f"      [{describe_config(c)}] {r[:200]}" for c, r in ruled_out)
    return lines


def _ended(entry: StoredEntry) -> str:
    ended_by = entry.ended_by
    return f" (ended by: {printable(ended_by[:60])})" if ended_by and ended_by != "every candidate" else ""


#: The shortest ID prefix ``show`` takes (IDs are hex: a kernel named ``add`` or ``f`` is no ID).
MIN_ID_PREFIX = 6


def _is_path(selector: str) -> bool:
    """A selector that names a path: one with a path separator, or a file name (``cache.json``, an
    archive); never a bare word, which a folder of the working directory would shadow."""
    separators = [sep for sep in (os.sep, os.altsep) if sep]
    named = selector.lower().endswith(".json") or inventory.is_archive(Path(selector))
    return named or any(sep in selector for sep in separators)


def _files_for(
    selector: str, args: argparse.Namespace
) -> list[tuple[tuple[int, Path] | None, inventory.StoredFile]]:
    """The files ``selector`` names, each with its layer (index and root; None for a path given): a
    path's, else the files of the kernel of that name, else those whose ID starts with it."""
    if _is_path(selector):
        path = Path(selector).expanduser()
        if not path.exists():
            raise UsageError(f"no such file or directory: {selector}")
        files, problems = inventory.read_sources([path])
        if problems:
            report_problems(problems)
            raise CliError(f"{len(problems)} unreadable file(s) in {path}")
        return [(None, f) for f in files]
    roots, layered = layered_files(args)
    named = [((i, roots[i]), f) for i, f in layered if f.identity["kernel"] == selector]
    if named or len(selector) < MIN_ID_PREFIX:
        return named
    return [((i, roots[i]), f) for i, f in layered if f.identity_id.startswith(selector)]


def cmd_show(args: argparse.Namespace) -> int:
    found = _files_for(args.selector, args)
    wanted = set(map(id, selected(args, [f for _, f in found])))
    found = [(layer, f) for layer, f in found if id(f) in wanted]
    if not found:
        short = (
            f"; an ID prefix has {MIN_ID_PREFIX} characters or more"
            if len(args.selector) < MIN_ID_PREFIX
            else ""
        )
        raise CliError(f"nothing stored matches {args.selector!r} (see '{PROG} list'{short})")
    named = [n for n in listed_fields([f for _, f in found]) if n not in LISTED_FIELDS]
    out: list[str] = []
    # the files of the roots that could not be read (layered_files said them on stderr without --json)
    payload: dict[str, Any] = {"files": [], "problems": problems_payload(getattr(args, "problems", []))}
    for layer, f in sorted(found, key=lambda p: (p[0] or (0, Path()), p[1].source)):
        said = layer if layer is not None and len(args.roots) > 1 else None  # said only with layers
        entries = sorted(f.entries.values(), key=key_order)
        out += _file_lines(f, named, said)
        for entry in entries:
            out.extend(entry_lines(entry, top=args.top))
        out += [f"  invalid entry {kid[:120]}: {reason}" for kid, (_, reason) in f.rejected.items()]
        out.append("")
        payload["files"].append(
            {
                **file_summary(f),
                **({"layer": said[0], "layer_root": str(said[1])} if said else {}),
                "entries": [entry_payload(e) for e in entries],
                "invalid": list(f.rejected),
            }
        )
    emit(args, payload, out[:-1])
    return 0


def _file_lines(f: inventory.StoredFile, named: Sequence[str], layer: tuple[int, Path] | None) -> list[str]:
    """What ``show`` says of a file before its entries: its identity (and the fields ``named``), its
    path, and its layer (None: not said)."""
    ident = f.identity
    keys = f"{len(f.entries)} key" + ("" if len(f.entries) == 1 else "s")
    more = "".join(f"  {name} {ident[name]}" for name in named)
    lines = [
        f"{ident['kernel']}  id {f.identity_id}  tag {ident['tag']}  triton {ident['triton']}  "
        f"{ident['toolchain']}  gpu {ident['gpu']}{more}  ({keys})",
        f"  {f.source}",
    ]
    if layer is not None:
        lines.append(f"  layer {layer_name(layer[0])}: {layer[1]}")
    return lines


def cmd_diff(args: argparse.Namespace) -> int:
    """Exit 0 when every key stored by several sources has one winner, 1 when winners differ, 2 when a
    source cannot be read (as diff(1) does)."""
    sources = [Path(s).expanduser() for s in args.sources]
    absent = [str(s) for s in sources if not s.exists()]
    if absent:
        raise UsageError(f"no such source: {', '.join(absent)}")
    first: dict[Path, Path] = {}
    for s in sources:  # one source given twice was never compared with itself: nothing to say, exit 0
        if (seen := first.setdefault(s.resolve(), s)) is not s:
            same = str(s) if str(s) == str(seen) else f"{seen} and {s}"
            raise UsageError(f"{same}: one source given twice; name each source once")
    try:
        result = diff.compare(sources, match=args.match or ())
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    report_problems(result.problems)
    emit(args, _diff_payload(result), _diff_lines(result))
    if result.problems:
        return 2
    return 1 if result.differences else 0


def _diff_lines(result: diff.DiffReport) -> list[str]:
    differences = result.differences
    lines = [
        f"{len(result.compared)} key(s) stored by several sources, {len(differences)} with different "
        f"winners; {len(result.missing)} key(s) stored by some sources only"
    ]
    for comparison in differences:
        apart = "".join(f" {name}={value}" for name, value in comparison.apart.items())
        lines.append(f"  {comparison.kernel} key {key_text(comparison.winners[0].entry)}{apart}:")
        for w in comparison.winners:
            where = " ".join(f"{f}={w.identity[f]}" for f in diff.MATCHABLE if f != "dejavu")
            lines.append(
                f"    {w.source}: {describe_config(w.entry.config)}  {times_text(w.entry.timings_ms)}"
            )
            lines.append(f"      {where}  tuned {w.entry.tuned_at.isoformat()}  ({w.file})")
    return lines


def _diff_payload(result: diff.DiffReport) -> dict[str, Any]:
    return {
        "sources": result.sources,
        "compared": len(result.compared),
        "differences": [
            {
                "kernel": c.kernel,
                "key": c.key_id,
                "apart": c.apart,
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
            for c in result.differences
        ],
        "missing": [
            {"kernel": c.kernel, "key": c.key_id, "apart": c.apart, "lacking": lacking}
            for c, lacking in result.missing
        ],
        "problems": problems_payload(result.problems),
    }


def add_commands(sub: Any, common: argparse.ArgumentParser, selection: argparse.ArgumentParser) -> None:
    """list, show, diff: reading stored results."""
    p = sub.add_parser("list", parents=[common, selection], help="list the stored kernels (a table)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", parents=[common, selection], help="show one kernel's entries")
    p.add_argument(
        "selector",
        type=path_text,
        help=f"a kernel name, else an ID from 'list' (its first {MIN_ID_PREFIX} characters or more), or a "
        "path (with a '/', or a .json or .tar.gz name)",
    )
    p.add_argument("--top", action="store_true", help="also show the best candidates of each key")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("diff", help="compare the winners stored by several machines or ranks")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")  # no --root: SOURCES say it
    p.add_argument(
        "sources",
        nargs="+",
        type=path_text,
        help="two or more storage trees, cache.json files or .tar.gz archives",
    )
    p.add_argument(
        "--match",
        action="append",
        choices=diff.MATCHABLE,
        help="also match results on this identity field (default: platform and tag are ignored); repeatable",
    )
    p.set_defaults(func=cmd_diff)

"""What every command shares: its errors, and how values read from stored files are printed
(:func:`~..text.printable`, shared with ``tune``'s progress lines)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from ...store import StoredEntry, inventory
from ..text import printable

PROG = "triton-dejavu-like"


class CliError(Exception):
    """A problem with the inputs: reported on stderr, exit status 1."""


class UsageError(CliError):
    """A mistake in the command line (a --root or an import source that is not there, a --kernel that
    cannot be loaded, a SPEC that is not there, a selection to narrow, an output that exists): nothing
    was done; exit status 2."""


class CommandParser(argparse.ArgumentParser):
    """Argument errors in one line (exit status 2), with a pointer to ``--help``."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {printable(message)} (see '{self.prog} --help')\n")


def path_text(value: str) -> str:
    """An argparse ``type`` for a path argument: an empty one (``"$DIR"`` with ``DIR`` unset) is an
    error, never the current directory, which ``Path("")`` would be."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty path names no file or directory")
    return value


def positive_int(text: str) -> int:
    """An argparse ``type`` for a count of one or more."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a whole number >= 1: {text!r}")
    return value


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    rows = [[printable(c) for c in row] for row in rows]
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows)]
    lines = [headers, ["-" * w for w in widths], *rows]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines)


def when(moment: _dt.datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "-"


def key_text(entry: StoredEntry) -> str:
    return repr(entry.key)


def key_order(entry: StoredEntry) -> tuple[tuple[int, float, str], ...]:
    """Keys in the order of their values: numbers by value, before any other value, which goes by its
    text (``(16, ...)`` before ``(112, ...)``, where text puts ``(112,`` first)."""
    return tuple(
        (0, value, "") if isinstance(value, (int, float)) and value == value else (1, 0.0, repr(value))
        for value in entry.key
    )


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


def stdout_to_devnull() -> None:
    """Point stdout at /dev/null: its reader is gone (``list | head -1``), so that what is still written
    or buffered goes nowhere, quietly (the recipe of Python's signal docs, note on SIGPIPE)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class _OutlivingStdout:
    """``sys.stdout`` for a command whose work must not stop when its reader goes (``tune | head``):
    the first write or flush that meets the closed pipe points stdout at /dev/null and says so once
    on stderr; the command goes on."""

    def __init__(self, stream: TextIO, command: str) -> None:
        self._stream, self._command, self.closed_pipe = stream, command, False

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _gone(self) -> None:
        stdout_to_devnull()
        if not self.closed_pipe:
            self.closed_pipe = True
            print(f"{PROG} {self._command}: the output was closed; going on without it", file=sys.stderr)


@contextlib.contextmanager
def outliving_closed_stdout(command: str) -> Iterator[None]:
    """Within the block, a closed stdout stops nothing (:class:`_OutlivingStdout`); what is buffered is
    flushed before the block ends, so that a closed pipe is met here, not at exit."""
    original = sys.stdout
    sys.stdout = _OutlivingStdout(original, command)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stdout = original

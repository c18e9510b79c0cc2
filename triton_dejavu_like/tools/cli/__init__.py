"""``python -m triton_dejavu_like`` (also ``triton-dejavu-like``): inspect and manage stored results.

Commands: ``list``, ``show``, ``merge``, ``prune``, ``export``, ``import-dejavu``, ``misses``, ``tune``
(ahead-of-time tuning, :mod:`..aot`), ``heuristic`` (:mod:`..heuristic`), ``diff`` (:mod:`..diff`). Every
store command takes ``--json`` for scripts and, but ``diff`` (its sources say what it reads), ``--root``
(default: the package's storage roots, ``$TRITON_DEJAVU_STORAGE`` or the user cache directory). A
``--root`` repeated or an ``os.pathsep`` list names the written root first and read-only layers after
it, as ``$TRITON_DEJAVU_STORAGE`` does: ``list`` and ``show`` read every root and say which layer each
file came from; ``export`` and ``heuristic`` read every root as a serving process restores from them (a
key from the first root that holds it); ``tune`` keeps them as layers (what they hold is restored, not
tuned); ``merge``, ``prune`` and ``import-dejavu`` write or remove in the written root only, never in a
layer, and say so on stderr when there are layers. Exit status: 0
on success, 1 when an input cannot be read or nothing matches, 2 for bad arguments; ``diff`` exits 0
when the winners agree, 1 when they differ and 2 when a source cannot be read; every command that
removes or replaces stored data (``prune``, ``merge``, ``export``, ``import-dejavu --overwrite``) lists
what it removes or replaces and takes ``--dry-run``. Every value
read from a file is printed through :func:`printable`, so a stored name cannot send terminal control
sequences. Output cut short by a closed pipe (``list | head -1``) ends quietly; ``tune`` goes on
without it (the tuning is what it is for). The package's warnings are printed once, as
``triton-dejavu-like: WARNING: ...`` lines of the package logger (``-W error::UserWarning`` still
makes them errors).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Sequence

from ... import __version__, _env
from ..._log import DejavuWarning
from . import managing, reading, roots, tuning
from .output import PROG, CliError, CommandParser, UsageError, printable, stdout_to_devnull

__all__ = ["build_parser", "main", "printable"]


def build_parser() -> argparse.ArgumentParser:
    common = CommandParser(add_help=False)
    common.add_argument(
        "--root",
        action="append",
        help=f"storage root (default: ${_env.STORAGE} or the user cache directory); several (repeated or "
        f"'{os.pathsep}'-separated): the first is written, the others are read-only layers, read as serving "
        "reads them; merge, prune and import-dejavu change the first only",
    )
    common.add_argument("--json", action="store_true", help="print JSON for scripts")
    selection = CommandParser(add_help=False)
    roots.add_selection(selection)

    description = "Inspect and manage tuning results stored by triton_dejavu_like."
    parser = CommandParser(prog=PROG, description=description)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for commands in (reading, managing, tuning):
        commands.add_commands(sub, common, selection)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
    logger = logging.getLogger("triton_dejavu_like")
    logger.addHandler(handler)
    level = logger.level  # put back after the command: main() may run in a user's process
    if level == logging.NOTSET:
        logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            # the logger's handler prints each of the package's warnings: not a second time through
            # warnings (appended, so that the interpreter's -W options still apply first)
            warnings.filterwarnings("ignore", category=DejavuWarning, append=True)
            status = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except BrokenPipeError:
        # whoever read our output is gone (``list | head -1``): the interpreter's final flush is made
        # quiet, and the exit status is 1, as Python's on EPIPE
        stdout_to_devnull()
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
        logger.setLevel(level)

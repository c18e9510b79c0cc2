"""Which storage roots a command reads or writes (``--root``, ``$TRITON_DEJAVU_STORAGE``), where an
export goes, and the files a selection (``--kernel``, ``--tag``, ``--triton``, ``--toolchain``,
``--gpu``) keeps."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ... import _env
from ...store import default_root, inventory
from .output import CliError, UsageError, report_problems


def _storage_roots(args: argparse.Namespace) -> list[Path]:
    """Every root given with ``--root`` (repeated, or an ``os.pathsep`` list), in order; without
    ``--root``: the roots of ``$TRITON_DEJAVU_STORAGE``, else the default root. A ``--root`` that names
    no directory (``--root "$STORE"`` with ``STORE`` unset) is a mistake, never the default root."""
    for i, value in enumerate(args.root or ()):
        if not any(part.strip() for part in value.split(os.pathsep)):
            raise UsageError(f"--root {value!r} names no directory")
        if i == 0 and not value.split(os.pathsep)[0].strip():  # never promote a layer to the written root
            raise UsageError(f"--root {value!r}: its first part, the written root, is empty")
    given = [part for value in args.root or () for part in value.split(os.pathsep) if part.strip()]
    if given:
        return [Path(part).expanduser() for part in given]
    return _env.storage_roots() or [default_root()]


def written_root(args: argparse.Namespace) -> Path:
    """The written root: the first one."""
    return _storage_roots(args)[0]


def writable_root(args: argparse.Namespace) -> Path:
    """The written root of a command that writes into it (``tune``): a path that exists and is not a
    folder is refused before any work (a --root given so is a usage error)."""
    root = written_root(args)
    if root.exists() and not root.is_dir():
        error = UsageError if args.root else CliError
        where = "--root" if args.root else f"the storage root (from {_env.STORAGE} or the default)"
        raise error(f"{where} {root} is not a folder")
    return root


def layered_files(args: argparse.Namespace) -> tuple[list[Path], list[tuple[int, inventory.StoredFile]]]:
    """The cache files of every existing root, each with the index of its root (0: the written one)."""
    roots = _storage_roots(args)
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


def refuse_other_archive(out: Path, named: str) -> None:
    """An export to ``out`` (``named`` so in the message) that names an archive of another kind than a
    gzipped tar (``.tar``, ``.zip``, ...) is a usage error: it would become a directory of that name."""
    if inventory.is_other_archive(out):
        endings = " or ".join(inventory.ARCHIVE_SUFFIXES)
        raise UsageError(f"{named}: a storage directory or a gzipped tar archive ({endings})")


def existing_root(args: argparse.Namespace) -> Path:
    root = written_root(args)
    if not root.is_dir():
        error = UsageError if args.root else CliError  # a --root that is not there is a typo
        raise error(f"no storage at {root} (set --root or {_env.STORAGE})")
    return root


def selected(args: argparse.Namespace, files: list[inventory.StoredFile]) -> list[inventory.StoredFile]:
    wanted = {name: getattr(args, name, None) for name in ("kernel", "tag", "triton", "toolchain", "gpu")}
    return [f for f in files if f.matches(**wanted)]

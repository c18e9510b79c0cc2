"""Which storage roots a command reads or writes (``--root``, ``$TRITON_DEJAVU_STORAGE``), where an
export goes, and the files a selection (``--kernel``, ``--tag``, ``--dejavu``, ``--triton``,
``--toolchain``, ``--gpu``, ``--code-version``, ...: one option per identity field) keeps."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ... import _env
from ...store import default_root, inventory
from ...store.layout import PLATFORM_FIELDS
from .output import PROG, CliError, UsageError, printable, report_problems


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
    """The written root of a command that writes into it (``merge``, ``import-dejavu``, ``tune``): a
    path that exists and is not a folder is refused before any work (a --root given so is a usage
    error)."""
    root = written_root(args)
    if root.exists() and not root.is_dir():
        error = UsageError if args.root else CliError
        where = "--root" if args.root else f"the storage root (from {_env.STORAGE} or the default)"
        raise error(f"{where} {root} is not a folder")
    return root


def given_layers(args: argparse.Namespace) -> list[Path] | None:
    """The read-only layers a ``--root`` names after the written root (``--root RW:LAYER`` or
    repeated; each must be a folder: a typo is exit 2), or None without ``--root``. A command that
    tunes (``tune``) restores what they hold, as ``$TRITON_DEJAVU_STORAGE``'s layers."""
    if not args.root:
        return None
    layers = _storage_roots(args)[1:]
    for layer in layers:
        if not layer.is_dir():
            why = "is not a folder" if layer.exists() else "does not exist"
            raise UsageError(f"no storage at {layer}: that --root {why}")
    return [layer.absolute() for layer in layers]


def _read_roots(args: argparse.Namespace, *, layers: bool) -> list[Path]:
    """The roots of a command that reads them: a ``--root`` part that is no folder is a typo (exit 2,
    named), even beside one that is; with ``layers`` (the command reads them), a layer of
    ``$TRITON_DEJAVU_STORAGE`` that is no folder is said on stderr (the written root may not exist yet)."""
    roots = _storage_roots(args)
    for i, root in enumerate(roots):
        if root.is_dir():
            continue
        why = "is not a folder" if root.exists() else "does not exist"
        if args.root:
            raise UsageError(f"no storage at {root}: that --root {why}")
        if layers and i > 0:
            print(f"{PROG}: {_env.STORAGE} names {printable(root)}, which {why}: left out", file=sys.stderr)
    return roots


def _read_layered(
    args: argparse.Namespace,
) -> tuple[list[Path], list[tuple[int, inventory.StoredFile]], list[inventory.Problem]]:
    """The roots, the cache files of every existing one, each with the index of its root (0: the
    written one), and the files that could not be read."""
    roots = _read_roots(args, layers=True)
    existing = [(i, root) for i, root in enumerate(roots) if root.is_dir()]
    if not existing:
        raise CliError(f"no storage at {os.pathsep.join(map(str, roots))} (set --root or {_env.STORAGE})")
    found: list[tuple[int, inventory.StoredFile]] = []
    problems: list[inventory.Problem] = []
    for i, root in existing:
        files, bad = inventory.read_sources([root])
        found += [(i, f) for f in files]
        problems += bad
    return roots, found, problems


def layered_files(args: argparse.Namespace) -> tuple[list[Path], list[tuple[int, inventory.StoredFile]]]:
    """The cache files of every existing root, each with the index of its root (0: the written one);
    the files that could not be read are said on stderr (without --json) and kept in ``args.problems``."""
    roots, found, problems = _read_layered(args)
    if not args.json:
        report_problems(problems)
    args.problems, args.roots = problems, roots
    return roots, found


def served_files(
    args: argparse.Namespace,
) -> tuple[list[Path], list[inventory.StoredFile], list[inventory.Problem]]:
    """The existing roots, the cache files of every root holding what a serving process with these
    roots restores (a key from the first root that has it: :func:`inventory.as_served`), and the
    files that could not be read (said by the command)."""
    roots, found, problems = _read_layered(args)
    return [r for r in roots if r.is_dir()], inventory.as_served(found), problems


def note_layers(args: argparse.Namespace, command: str) -> None:
    """Say on stderr that a command that writes or removes (``merge``, ``prune``, ``import-dejavu``)
    acts on the written root only, when the roots name layers: they are read-only. A ``--root``
    layer that is no folder is a typo (exit 2), as for the commands that read them."""
    roots = _storage_roots(args)
    given_layers(args)
    if len(roots) > 1:
        layers = ", ".join(printable(str(layer)) for layer in roots[1:])
        print(
            f"{PROG} {command}: acts on the written root {printable(str(roots[0]))} only; the layers "
            f"after it are read-only and left as they are: {layers}",
            file=sys.stderr,
        )


def refuse_other_archive(out: Path, named: str) -> None:
    """An export to ``out`` (``named`` so in the message) that names an archive of another kind than a
    gzipped tar (``.tar``, ``.zip``, ...) is a usage error: it would become a directory of that name."""
    if inventory.is_other_archive(out):
        endings = " or ".join(inventory.ARCHIVE_SUFFIXES)
        raise UsageError(f"{named}: a storage directory or a gzipped tar archive ({endings})")


def refuse_file(out: Path, named: str) -> None:
    """An export folder ``out`` (``named`` so in the message) that exists and is no folder is a usage
    error, said before any work: results cannot be merged into it."""
    if not inventory.is_archive(out) and out.exists() and not out.is_dir():
        raise UsageError(f"{named} is a file; export to a storage directory or a .tar.gz archive")


def refuse_inside(out: Path, root: Path, named: str) -> None:
    """An output folder (``named`` so in the message) inside a root a command reads, or that root, is
    a usage error: its files would be read as the root's (twice, by the next list or export)."""
    if inventory.is_archive(out):
        return  # an archive in a tree is never read as its files
    if out.resolve().is_relative_to(root.resolve()):
        raise UsageError(f"{named} is inside {root}, the root read; export to a folder outside it")


def refuse_root_inside(root: Path, sources: Sequence[Path]) -> None:
    """A written root inside a source folder (``merge SRC --root SRC/merged``) is a usage error: the
    files written there would be read as that source's (twice, by the next list, export or merge of
    it). The source itself is no mistake: merging a root into itself changes nothing."""
    written = root.resolve()
    for source in sources:
        read = source.resolve()
        if source.is_dir() and written != read and written.is_relative_to(read):
            raise UsageError(f"{root}, the root written, is inside {source}, a source read; write outside it")


def existing_root(args: argparse.Namespace) -> Path:
    """The written root of a command that reads it only (the others a --root names must exist too)."""
    root = _read_roots(args, layers=False)[0]
    if not root.is_dir():
        raise CliError(f"no storage at {root} (set --root or {_env.STORAGE})")
    return root


#: The hashes of an identity (path levels below the kernel): they tell apart results of one kernel,
#: platform and tag tuned with other settings, code, keys or configs.
HASH_FIELDS = ("autotune_config", "code_version", "tune_features", "kernel_configs")
#: Every identity field, each a selection option (``--code-version`` for code_version), in --help's order.
SELECTION_FIELDS = ("kernel", "tag", *PLATFORM_FIELDS, *HASH_FIELDS)
_SELECTION_HELP = {
    "kernel": "only results of this kernel",
    "tag": "only results stored under this tag",
    "dejavu": "only results of this storage version (the release that wrote them, e.g. 0.1)",
    "triton": "only results tuned with this Triton version",
    "toolchain": "only results tuned with this toolchain (e.g. cuda_12.8)",
    "gpu": "only results tuned on this GPU (as 'list' shows it)",
}
#: At most this many stored values are named per field in a message.
NAMED_VALUES = 10


def option(name: str) -> str:
    """The selection option of an identity field: ``--code-version`` for ``code_version``."""
    return "--" + name.replace("_", "-")


def add_selection(parser: argparse.ArgumentParser) -> None:
    for name in SELECTION_FIELDS:
        default = f"only results whose {name} hash is this (as a message that asks to narrow names it)"
        parser.add_argument(option(name), metavar=name.upper(), help=_SELECTION_HELP.get(name, default))


def selected(args: argparse.Namespace, files: list[inventory.StoredFile]) -> list[inventory.StoredFile]:
    wanted = {name: getattr(args, name, None) for name in SELECTION_FIELDS}
    return [f for f in files if f.matches(**wanted)]


def stored_values(files: Sequence[inventory.StoredFile], name: str) -> str:
    """The values of one identity field in ``files``, for a message (the first few)."""
    return named_values(sorted({f.identity[name] for f in files}))


def named_values(values: Sequence[str], separator: str = ", ") -> str:
    """The first :data:`NAMED_VALUES` of ``values``, and how many more, for a message."""
    more = f"{separator}... ({len(values) - NAMED_VALUES} more)" if len(values) > NAMED_VALUES else ""
    return separator.join(values[:NAMED_VALUES]) + more


def nothing_selected(args: argparse.Namespace, files: Sequence[inventory.StoredFile]) -> CliError:
    """The error of a selection that keeps none of ``files``: the options whose value no file has, with
    the stored values (``--gpu "NVIDIA H100 80GB HBM3"`` where the files say NVIDIA_H100_80GB_HBM3)."""
    wrong = [
        f"{option(name)} {value!r} matches no file (stored: {stored_values(files, name)})"
        for name in SELECTION_FIELDS
        if (value := getattr(args, name, None)) is not None and all(f.identity[name] != value for f in files)
    ]
    detail = "; ".join(wrong) or f"no file of {len(files)} has all its values together"
    if not files:
        detail = "no readable cache file is stored"
    return CliError(f"nothing stored matches the selection: {detail}; see '{PROG} list'")


def refuse_several(
    files: Sequence[inventory.StoredFile], fields: Sequence[str], what: str, kind: str
) -> None:
    """A usage error when ``files`` hold more than one value of a field of ``fields``: it names the
    stored values of each field that differs and the option that picks one (``what`` N ``kind``:
    "the selection spans", "platforms")."""
    differing = [name for name in fields if len({f.identity[name] for f in files}) > 1]
    if differing:
        count = len({tuple(f.identity[name] for name in fields) for f in files})
        narrow = "; ".join(f"{option(name)} (stored: {stored_values(files, name)})" for name in differing)
        raise UsageError(f"{what} {count} {kind}; pick one with {narrow}")

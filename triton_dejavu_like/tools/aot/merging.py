"""Moving results from a worker's store into the target store, validated on the way."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from ...store import inventory, tree_merge
from ...store.document import InvalidCacheFile, parse_document
from ...store.files import atomic_write, read_bounded
from ...store.layout import CACHE_FILE_NAME
from .run import key_text


def merge_paths(target: Path, root: Path, files: Iterable[str] | None = None) -> list[inventory.Problem]:
    """Merge the cache files ``files`` (relative to ``root``; None: all of them) into ``target``."""
    sources = [root] if files is None else [root / f for f in files]
    found, problems = inventory.read_sources(s for s in sources if s.exists())
    if found:
        problems += tree_merge.merge_into(target, found).problems
    return problems


#: Key ids by identity (:attr:`~...store.inventory.StoredFile.identity_id`).
HeldKeys = Mapping[str, set[str]]


def held_keys(layers: Iterable[Mapping[str, bytes]]) -> dict[str, set[str]]:
    """The keys the read-only ``layers`` hold (each as :func:`read_tree` read it), by identity
    (files that cannot be parsed hold none)."""
    held: dict[str, set[str]] = {}
    for files in layers:
        for data in files.values():
            try:
                doc = parse_document(data)
            except InvalidCacheFile:
                continue
            held.setdefault(inventory.identity_id(doc.identity), set()).update(doc.entries)
    return held


def merge_bytes(
    target: Path, files: Mapping[str, bytes], origin: str, held: HeldKeys | None = None
) -> tuple[list[inventory.Problem], set[str]]:
    """Merge cache files received as bytes (from a remote worker): each is parsed and validated like
    a file on disk (never unpickled, never executed) before it is merged. An entry whose key a
    read-only layer holds (``held``, from :func:`held_keys`) is left out: in the target it would hide
    the layer's winner. Returns the problems and the keys left out, as "kernel key" (the way a case
    reports the keys it tuned)."""
    found: list[inventory.StoredFile] = []
    problems: list[inventory.Problem] = []
    in_layer: set[str] = set()
    for relative, data in files.items():
        label = f"{origin}:{relative}"
        try:
            doc = parse_document(data)
        except InvalidCacheFile as exc:
            problems.append(inventory.Problem(label, str(exc)))
            continue
        stored = inventory.StoredFile(label, doc.identity, doc.entries, doc.rejected)
        layer = (held or {}).get(stored.identity_id, set())
        in_layer.update(
            key_text(doc.identity.get("kernel", "?"), e.key) for k, e in doc.entries.items() if k in layer
        )
        stored.entries = {k: e for k, e in doc.entries.items() if k not in layer}
        found.append(stored)
    if found:
        problems += tree_merge.merge_into(target, found).problems
    return problems, in_layer


def read_tree(root: Path) -> dict[str, bytes]:
    """Every cache file under ``root`` as bytes, by its path relative to ``root`` (to seed a worker)."""
    if not root.is_dir():
        return {}
    out = {}
    # through directory links, as the tuner reads and writes (Path.rglob does not follow them)
    for path in inventory.walk_files(root, lambda name: name == CACHE_FILE_NAME):
        if path.is_file():
            try:
                out[path.relative_to(root).as_posix()] = read_bounded(path)
            except (OSError, InvalidCacheFile):
                continue  # an unreadable file seeds nothing; the tuner warns about it where it is used
    return out


def seed(root: Path, files: Mapping[str, bytes]) -> None:
    """Write ``files`` (from :func:`read_tree`) under a worker's fresh ``root``: what the target
    already stores is restored there, not tuned again. The tuner validates them when it reads them."""
    for relative, data in files.items():
        path = (root / relative).resolve()
        if not path.is_relative_to(root.resolve()) or path.name != CACHE_FILE_NAME:
            continue  # never write outside the worker's root
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)

"""Seeds for a search from the same kernel's results stored for other GPUs and platforms.

A kernel tuned on one GPU is often tuned again on another: the winners there are better first
guesses than random candidates. This module finds the cache files of the same kernel (same name,
code version and tuning key features) for every other platform, tuner setting, config list and tag,
under the written root and in every read-only layer (the other roots of ``TRITON_DEJAVU_STORAGE``,
the stores of ``add_store``), and lists their winning configs, the most frequent first (the caller
keeps those among its candidates). A key of one identity stored in several roots counts once, from
the first root that holds it (as serving reads the layers). The files are read with the cache file
reader (size-bounded, validated); nothing in them is executed, and a file or folder that cannot be
read is skipped.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._log import log
from .document import Document, parse_document
from .inventory import StoredFile, as_served
from .layout import CACHE_FILE_NAME, PLATFORM_FIELDS, relative_dir, sibling_levels
from .resource import READ_ERRORS, Traversable, is_file, read_file, subfolders

#: At most this many configs seed a search from other platforms (an entry's stored top-k is 5 too).
MAX_FOREIGN_SEEDS = 5
#: At most this many other cache files are read for one search (the written root's first, then
#: each layer's in order).
MAX_FOREIGN_FILES = 64
#: What may differ between this kernel's file and a sibling's: the platform, the tuner settings
#: (another strategy or budget still found good configs), the config list (a ConfigSpace lists
#: other configs on another GPU, a library picks its list per GPU, a list grew: a winner that is
#: among this list's candidates is a good first guess; the others are dropped) and the tag.
VARYING = (*PLATFORM_FIELDS, "autotune_config", "kernel_configs", "tag")


def sibling_folders(
    root: Traversable, identity: Mapping[str, Any], varying: tuple[str, ...] = VARYING
) -> list[tuple[tuple[str, ...], Any]]:
    """The folders under ``root`` (a folder or a package resource) that hold a cache file of the
    kernel of ``identity`` whose identity differs from it at most in the fields ``varying`` (by
    default: the same code and key on any platform, settings, config list or tag), as (their path
    under ``root`` by level, the folder), sorted by that path; the folder of ``identity`` itself is
    left out."""
    found: list[tuple[tuple[str, ...], Any]] = [((), root)]
    for level in sibling_levels(identity, varying):
        if level is None:
            found = [((*parts, name), sub) for parts, node in found for name, sub in subfolders(node)]
        else:
            found = [((*parts, level), node / level) for parts, node in found]
    mine = relative_dir(identity).parts
    return [(parts, node) for parts, node in found if parts != mine and is_file(node / CACHE_FILE_NAME)]


def sibling_cache_files(root: Traversable, identity: Mapping[str, Any], own: Path | None = None) -> list[Any]:
    """Cache files under ``root`` (a folder or a package resource) for the same kernel, code, configs
    and key on any platform, sorted by their path under ``root``; the file of ``identity`` itself
    and ``own`` (this process's file, which a sibling's path may link to) are left out."""
    # os.path.realpath never raises (Path.resolve raises on a symlink loop before Python 3.13)
    own_resolved = os.path.realpath(own) if own is not None else None
    files = [node / CACHE_FILE_NAME for _, node in sibling_folders(root, identity)]
    return [
        f for f in files if not (isinstance(f, Path) and own_resolved and os.path.realpath(f) == own_resolved)
    ]


def _document(node: Any, parameters: Collection[str] | None) -> Document | None:
    try:
        data = read_file(node)
        return None if data is None else parse_document(data, parameters=parameters)
    except READ_ERRORS as exc:
        log.debug("warm start: skipping %s (%s)", node, exc)
        return None


def _sibling_documents(
    roots: Sequence[Traversable],
    identity: Mapping[str, Any],
    own: Path | None,
    parameters: Collection[str] | None,
) -> list[tuple[int, StoredFile]]:
    """The valid sibling files of every root, with the root's index, at most MAX_FOREIGN_FILES read."""
    read: list[tuple[int, StoredFile]] = []
    left = MAX_FOREIGN_FILES
    for index, root in enumerate(roots):
        try:
            files = sibling_cache_files(root, identity, own)
        except (OSError, ValueError, KeyError) as exc:
            log.debug("warm start: nothing read from %s (%s)", root, exc)
            continue
        for node in files[:left]:
            doc = _document(node, parameters)
            if doc is not None:
                read.append((index, StoredFile(str(node), doc.identity, doc.entries)))
        left -= min(left, len(files))
    return read


def foreign_winners(
    roots: Sequence[Traversable],
    identity: Mapping[str, Any],
    own: Path | None = None,
    parameters: Collection[str] | None = None,
) -> list[str]:
    """Config ids that won keys of this kernel on other platforms under ``roots`` (the written root,
    then the read-only layers, in the order serving reads them), the most frequent winners first."""
    served = as_served(_sibling_documents(roots, identity, own, parameters))
    counts = Counter(entry.config_id for f in served for entry in f.entries.values())
    return [cid for cid, _ in counts.most_common()]

"""Seeds for a search from the same kernel's results stored for other GPUs and platforms.

A kernel tuned on one GPU is often tuned again on another: the winners there are better first
guesses than random candidates. This module finds the cache files of the same kernel (same name,
code version, config list and tuning key features) under the storage root for every other
platform, tuner setting and tag, and lists their winning configs, the most frequent first. The
files are read with the cache file reader (size-bounded, validated); nothing in them is executed.
"""

from __future__ import annotations

import glob
import os
from collections import Counter
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from .._log import log
from .document import InvalidCacheFile
from .files import read_document
from .layout import PLATFORM_FIELDS, sibling_pattern

#: At most this many configs seed a search from other platforms (an entry's stored top-k is 5 too).
MAX_FOREIGN_SEEDS = 5
#: At most this many other cache files are read for one search.
MAX_FOREIGN_FILES = 64
#: What may differ between this kernel's file and a sibling's: the platform, the tuner settings
#: (another strategy or budget still found good configs) and the tag.
VARYING = (*PLATFORM_FIELDS, "autotune_config", "tag")


def sibling_cache_files(root: Path, identity: Mapping[str, Any], own: Path | None = None) -> list[Path]:
    """Cache files under ``root`` for the same kernel, code, configs and key on any platform; ``own``
    (this process's file) is left out."""
    # os.path.realpath never raises (Path.resolve raises on a symlink loop before Python 3.13)
    own_resolved = os.path.realpath(own) if own is not None else None
    found = sorted(Path(p) for p in glob.glob(sibling_pattern(root, identity, VARYING)))
    return [p for p in found if own_resolved is None or os.path.realpath(p) != own_resolved][
        :MAX_FOREIGN_FILES
    ]


def _winners(path: Path, parameters: Collection[str] | None) -> Iterator[str]:
    try:
        document = read_document(path, parameters=parameters)
    except (OSError, InvalidCacheFile) as exc:
        log.debug("warm start: skipping %s (%s)", path, exc)
        return
    for entry in document.entries.values():
        yield entry.config_id


def foreign_winners(
    root: Path,
    identity: Mapping[str, Any],
    own: Path | None = None,
    parameters: Collection[str] | None = None,
) -> list[str]:
    """Config ids that won keys of this kernel on other platforms, the most frequent winners first."""
    counts: Counter[str] = Counter()
    for path in sibling_cache_files(root, identity, own):
        counts.update(_winners(path, parameters))
    return [cid for cid, _ in counts.most_common()]

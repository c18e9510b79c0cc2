"""Seeds for a search from the same kernel's results stored for other GPUs and platforms.

A kernel tuned on one GPU is often tuned again on another: the winners there are better first
guesses than random candidates. This module finds the cache files of the same kernel (same name,
code version, config list and tuning key features) under the storage root for every other
platform, tuner setting and tag, and lists their winning configs, the most frequent first. The
files are read through :mod:`triton_dejavu_like.storage` (size-bounded reads, validated documents);
nothing in them is executed.
"""

from __future__ import annotations

import glob
import logging
from collections import Counter
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from .codec import DecodingError, config_id, decode_config
from .identity import sanitize
from .storage import CACHE_FILE_NAME, InvalidCacheFile, read_document

log = logging.getLogger(__name__)

#: At most this many configs seed a search from other platforms (an entry's stored top-k is 5 too).
MAX_FOREIGN_SEEDS = 5
#: At most this many other cache files are read for one search.
MAX_FOREIGN_FILES = 64


def sibling_cache_files(root: Path, identity: Mapping[str, Any], own: Path | None = None) -> list[Path]:
    """Cache files under ``root`` for the same kernel, code, configs and key on any platform.

    The platform levels (package version, Triton, toolchain, GPU), the tuner settings and the tag
    may differ; ``own`` (this process's file) is left out.
    """
    fixed = [
        sanitize(str(identity["kernel"])),
        "*",  # autotune_config: another strategy or budget still found good configs
        sanitize(f"code_version-{identity['code_version']}"),
        sanitize(f"tune_features-{identity['tune_features']}"),
        sanitize(f"kernel_configs-{identity['kernel_configs']}"),
        "*",  # tag
        CACHE_FILE_NAME,
    ]
    pattern = Path(
        glob.escape(str(root)), "*", "*", "*", "*", *(p if p == "*" else glob.escape(p) for p in fixed)
    )
    own_resolved = own.resolve() if own is not None else None
    found = sorted(Path(p) for p in glob.glob(str(pattern)))
    return [p for p in found if own_resolved is None or p.resolve() != own_resolved][:MAX_FOREIGN_FILES]


def _winners(path: Path, parameters: Collection[str] | None) -> Iterator[str]:
    try:
        document = read_document(path, parameters=parameters)
    except (OSError, InvalidCacheFile) as exc:
        log.debug("warm start: skipping %s (%s)", path, exc)
        return
    for entry in document.entries.values():
        try:
            config, _ = decode_config(entry["config"])
        except (DecodingError, KeyError, TypeError, ValueError) as exc:
            log.debug("warm start: skipping an entry of %s (%s)", path, exc)
            continue
        yield config_id(config)


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

"""The on-disk layout of a store: where a cache file lives and what lies beside it.

::

    <root>/dejavu_<maj.min>/triton_<ver>/<cuda_X.Y | rocm_X.Y.Z | cpu>/gpu_<name>/<kernel>/
        autotune_config-<h>/code_version-<h>/tune_features-<h>/kernel_configs-<h>/<tag>/cache.json

Every component goes through :func:`~triton_dejavu_like.store.identity.sanitize`, so no identity
value can leave the root. This module is the only one that knows the levels and their prefixes.
"""

from __future__ import annotations

import glob
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import _env
from .._log import log
from .identity import package_major_minor, sanitize

CACHE_FILE_NAME = "cache.json"
DEFAULT_TAG = "default"
#: Suffixes of the files kept next to a cache file: bad files moved aside, rejected entries, the lock.
CORRUPT_SUFFIX = ".corrupt-"
REJECTED_SUFFIX = ".rejected-"
LOCK_SUFFIX = ".lock"
#: A tuning lease of one key (``cache.json.lease-<hash of the key id>``) and a stale one set aside.
LEASE_SUFFIX = ".lease-"
STALE_LEASE_SUFFIX = ".stale-"
#: The identity fields of a document, in path order, and the prefix of each directory level.
IDENTITY_FIELDS = (
    "dejavu",
    "triton",
    "toolchain",
    "gpu",
    "kernel",
    "autotune_config",
    "code_version",
    "tune_features",
    "kernel_configs",
    "tag",
)
_PREFIX = {
    "dejavu": "dejavu_",
    "triton": "triton_",
    "gpu": "gpu_",
    "autotune_config": "autotune_config-",
    "code_version": "code_version-",
    "tune_features": "tune_features-",
    "kernel_configs": "kernel_configs-",
}
#: The fields that name the platform (the levels above the kernel).
PLATFORM_FIELDS = ("dejavu", "triton", "toolchain", "gpu")

_announced: set[str] = set()


def component(field: str, value: Any) -> str:
    """The directory name of one identity level."""
    return sanitize(f"{_PREFIX.get(field, '')}{value}")


def relative_dir(identity: Mapping[str, Any]) -> Path:
    """The directory (relative to a root) of the cache file made for ``identity``."""
    return Path(*(component(name, identity[name]) for name in IDENTITY_FIELDS))


def cache_path(root: Path, identity: Mapping[str, Any]) -> Path:
    return Path(root) / relative_dir(identity) / CACHE_FILE_NAME


def kernel_of(path: Path, root: Path) -> str | None:
    """The kernel directory a file under ``root`` belongs to (None above the kernel level)."""
    parts = path.relative_to(root).parts
    level = IDENTITY_FIELDS.index("kernel")
    return parts[level] if len(parts) > len(IDENTITY_FIELDS) else None


def sibling_pattern(root: Path, identity: Mapping[str, Any], varying: tuple[str, ...]) -> str:
    """A glob for the cache files of ``identity`` where the fields in ``varying`` may differ."""
    parts = [
        "*" if name in varying else glob.escape(component(name, identity[name])) for name in IDENTITY_FIELDS
    ]
    return str(Path(glob.escape(str(root)), *parts, CACHE_FILE_NAME))


def dejavu_level_pattern(root: Path, kernel: str) -> tuple[str, str]:
    """A glob for every cache file of ``kernel`` under ``root`` at this layout's depth, whatever its
    version level (triton-dejavu writes the same levels under ``dejavu_<its version>``), and the
    version level of this package's own files."""
    varying = tuple(name for name in IDENTITY_FIELDS if name != "kernel")
    return sibling_pattern(root, {"kernel": kernel}, varying), component("dejavu", package_major_minor())


def is_aside_file(path: Path) -> bool:
    """A file moved aside next to a cache file (corrupt or rejected entries)."""
    return path.name.startswith(tuple(CACHE_FILE_NAME + s for s in (CORRUPT_SUFFIX, REJECTED_SUFFIX)))


def default_root() -> Path:
    """The first root of ``$TRITON_DEJAVU_STORAGE``, else the user cache directory (platformdirs)."""
    roots = _env.storage_roots()
    if roots:
        return roots[0]
    root = _env.user_cache_root()
    if str(root) not in _announced:
        _announced.add(str(root))
        log.info("storing tuning results under %s (set %s to change)", root, _env.STORAGE)
    return root


def default_tag() -> str:
    return _env.tag() or DEFAULT_TAG

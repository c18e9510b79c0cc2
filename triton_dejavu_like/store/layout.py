"""The on-disk layout of a store: where a cache file lives and what lies beside it.

::

    <root>/dejavu_<maj.min>/triton_<ver>/<cuda_X.Y | rocm_X.Y.Z | cpu>/gpu_<name>/<kernel>/
        autotune_config-<h>/code_version-<h>/tune_features-<h>/kernel_configs-<h>/<tag>/cache.json

Every component goes through :func:`~triton_dejavu_like.store.identity.sanitize`, so no identity
value can leave the root. This module is the only one that knows the levels and their prefixes.
"""

from __future__ import annotations

import glob
import re
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


def level_value(field: str, folder: str) -> str:
    """The value a folder of the level of ``field`` names (``triton_3.6.0`` -> ``3.6.0``; sanitised)."""
    prefix = _PREFIX.get(field, "")
    return folder[len(prefix) :] if folder.startswith(prefix) else folder


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


def sibling_levels(identity: Mapping[str, Any], varying: tuple[str, ...]) -> list[str | None]:
    """The folder names from a root to the cache file of ``identity``, None for the levels of the
    fields in ``varying`` (any folder there: the files of ``identity`` where those fields differ)."""
    return [None if name in varying else component(name, identity[name]) for name in IDENTITY_FIELDS]


#: triton-dejavu's folder layouts (its ``get_storage_identifier`` and ``_get_folder_name``), by the
#: releases that wrote them: the levels from ``dejavu_<version>`` to the folder of ``cache.json``.
#: 0.7.0 put the toolchain before the Triton version; 0.5.0-0.5.1 named the kernel's folder
#: ``<kernel>-<sha256>``; up to 0.6 a ``torch_<version>`` level followed the toolchain.
_DEJAVU_HASHES = ("autotune_config", "code_version", "tune_features", "kernel_configs")
_DEJAVU_HASHES_0_5 = ("autotune_config", "kernel_configs", "code_version")
DEJAVU_LAYOUTS: dict[str, tuple[str, ...]] = {
    "0.7": ("dejavu", "triton", "toolchain", "gpu", "kernel", *_DEJAVU_HASHES, "tag"),
    "0.7.0": ("dejavu", "toolchain", "triton", "gpu", "kernel", *_DEJAVU_HASHES, "tag"),
    "0.6": ("dejavu", "toolchain", "torch", "triton", "gpu", "kernel", *_DEJAVU_HASHES, "tag"),
    "0.5.2": ("dejavu", "toolchain", "torch", "triton", "gpu", "kernel", *_DEJAVU_HASHES_0_5, "tag"),
    "0.5.0": ("dejavu", "toolchain", "torch", "triton", "gpu", "hashed_kernel", "tag"),
}
#: Each level's name as a regular expression, and as a glob (``{kernel}``: the kernel's name).
_DEJAVU_LEVELS: dict[str, tuple[re.Pattern[str], str]] = {
    name: (re.compile(rx, re.DOTALL), pattern)
    for name, rx, pattern in (
        ("dejavu", r"dejavu_\d+\.\d+(\.\d+)?", "dejavu_*"),
        ("triton", r"triton_\d+\.\d+[\w.+-]*", "triton_*"),
        ("toolchain", r"(cuda|rocm)_.+", "[cr][uo][dc][am]_*"),
        ("torch", r"torch_.+", "torch_*"),
        ("gpu", r"gpu_.+", "gpu_*"),
        ("kernel", r".+", "*{kernel}"),  # a kernel made in a function: make.<locals>.kernel
        ("hashed_kernel", r".+-[0-9a-f]{64}", "*{kernel}-*"),
        *((name, rf"{name}-.+", f"{name}-*") for name in _DEJAVU_HASHES),
        ("tag", r".+", "*"),
    )
}


def dejavu_levels(path: Path) -> dict[str, str] | None:
    """The folders of a triton-dejavu cache file's path by level (``{"triton": "triton_3.2.0", ...}``),
    from its last ``dejavu_<version>`` component that starts a known layout; None if none does."""
    folders = Path(path).parts[:-1]
    for start in reversed(range(len(folders))):
        below = folders[start:]
        for levels in DEJAVU_LAYOUTS.values():
            if len(levels) == len(below) and all(
                _DEJAVU_LEVELS[level][0].fullmatch(part) for level, part in zip(levels, below)
            ):
                return dict(zip(levels, below))
    return None


def dejavu_kernel(levels: Mapping[str, str]) -> str:
    """The kernel's name in :func:`dejavu_levels`: the last part of a qualified name, no hash."""
    folder = levels.get("kernel") or levels["hashed_kernel"][:-65]
    return folder.rpartition(".")[2]


def dejavu_globs(version_dir: Path, kernel: str) -> list[str]:
    """Globs for the cache files of ``kernel`` under one triton-dejavu version level (``dejavu_0.7``),
    one per layout; what they find still has to pass :func:`dejavu_levels` and :func:`dejavu_kernel`."""
    name = glob.escape(kernel)
    return [
        str(
            Path(
                glob.escape(str(version_dir)),
                *(_DEJAVU_LEVELS[level][1].replace("{kernel}", name) for level in levels[1:]),
                CACHE_FILE_NAME,
            )
        )
        for levels in DEJAVU_LAYOUTS.values()
    ]


def own_version_level() -> str:
    """The version level (first folder under a root) of this package's own files."""
    return component("dejavu", package_major_minor())


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

"""Helpers of the serving tests: seed a kernel's store with chosen winners, count what a run touches."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from storage_helpers import make_entry

import triton_dejavu_like as tdl
from triton_dejavu_like.codec import key_id
from triton_dejavu_like.store import CacheFile

F32 = ("torch.float32",) * 3  # the dtypes part of add_kernel's key (x, y, out)


def add_key(n: int) -> tuple[Any, ...]:
    return (n, *F32)


def seed(tuner: tdl.Autotuner, root: Path, winners: Mapping[tuple[Any, ...], int], **elsewhere: str) -> Path:
    """Store ``{key: BLOCK}`` for ``tuner``'s identity under ``root`` (as if tuned earlier);
    ``elsewhere``: identity fields that differ (``gpu="..."``: as tuned on another GPU)."""
    identity = {**tuner.kernel_identity(tuner._platform()).as_dict(), **elsewhere}
    cache = CacheFile.for_identity(root, identity, parameters=tuner.arg_names)
    assert cache.record({key_id(k): make_entry(k, block, num_warps=1) for k, block in winners.items()})
    (cache.path.parent / (cache.path.name + ".lock")).unlink(missing_ok=True)
    return cache.path


def tree(root: Path) -> dict[str, bytes]:
    """Every file and directory under ``root`` (directories map to b"")."""
    if not root.exists():
        return {}
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), root)] = b""
        for name in filenames:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = Path(path).read_bytes()
    return out

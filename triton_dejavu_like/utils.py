"""The helpers triton-dejavu keeps in ``triton_dejavu.utils``, for code that imports them from there.

triton-dejavu's recipe for proton (a ``launch_metadata`` function that names the tuned config) reads
``global_metadata_store`` with a key made by ``get_random_key`` and splits the grid with
``unpack_grid``; ``from triton_dejavu_like.utils import ...`` gives the same three names.
``global_metadata_store`` is the dict the tuners write (``metadata_key=``), the one
``triton_dejavu_like.global_metadata_store`` names.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Sequence

from .tuner.dejavu_extras import global_metadata_store

_KEY_ALPHABET = string.ascii_letters + string.digits
_KEY_LENGTH = 8


def unpack_grid(grid: Sequence[int]) -> tuple[int, int, int]:
    """A launch grid of one to three dimensions as ``(x, y, z)``, the missing ones 1."""
    dims = tuple(grid)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"a launch grid has one to three dimensions, got {grid!r}")
    x, y, z = dims + (1,) * (3 - len(dims))
    return x, y, z


def get_random_key(prefix: str = "") -> str:
    """Eight random letters and digits, after ``prefix-`` when a prefix is given (a ``metadata_key``
    that no other kernel uses)."""
    suffix = "".join(secrets.choice(_KEY_ALPHABET) for _ in range(_KEY_LENGTH))
    return f"{prefix}-{suffix}" if prefix else suffix


__all__ = ["get_random_key", "global_metadata_store", "unpack_grid"]

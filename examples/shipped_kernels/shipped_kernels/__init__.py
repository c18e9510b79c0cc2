"""A kernel library that ships its tuning results inside the package.

``tuned/`` is a store (the usual ``dejavu_*/triton_*/...`` layout) written by ``make_store.py``;
registering it with :func:`triton_dejavu_like.add_store` makes every user of this package start
with those results, also when the package is imported from a zipped wheel. Nothing is ever written
into the package: keys it does not hold are tuned into the user's own store (or, with tuning off,
answered by the nearest shipped key).
"""

from __future__ import annotations

from importlib.resources import files

import torch
import triton
import triton.language as tl

import triton_dejavu_like as tdl

tdl.add_store(files(__name__) / "tuned")

#: The sizes ``make_store.py`` tunes ahead of time.
SHIPPED_SIZES = (256, 4096)


@tdl.autotune(key=["n"], configs=[triton.Config({"BLOCK": b}, num_warps=1) for b in (16, 32, 64, 128)])
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha, mask=mask)


def scale(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """``x * alpha`` with the tuned kernel."""
    out = torch.empty_like(x)
    n = x.numel()
    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, alpha)
    return out

"""A kernel the GPU scenario scripts share (they run without the interpreter, in fresh processes that
``process_helpers.script_env`` gives this folder on their path)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

"""A kernel's storage identity does not depend on the Python that computes it: results stored under
one Python are restored under another (3.10 and later), so upgrading Python never retunes."""

from __future__ import annotations

import pytest
from test_persistence import load_module

from triton_dejavu_like.store.identity import code_version

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def helper(x, y):
    return x + y if y > 0 else x - y


@triton.jit
def kern(x_ptr, out_ptr, n, *, scale=1.0, BLOCK: tl.constexpr, MODE: tl.constexpr = 0):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs < n) & (offs >= 0)
    x = tl.load(x_ptr + offs[:, None], mask=mask[:, None], other=0.0)
    for i in tl.static_range(2):
        x = helper(x, i) * scale
    tl.static_assert(BLOCK % 16 == 0, {message})
    tl.store(out_ptr + offs, -x if MODE == 1 else x, mask=mask)
"""

#: The identities computed under Python 3.10, 3.11 and 3.13 (3.12 parses an f-string whose
#: format spec ends with a replacement field with one more, empty, part).
PINNED = {
    '"BLOCK must be a multiple of 16"': "02f705fac1d81e3a",
    'f"BLOCK={BLOCK} of {n!r:>8}"': "fcc9bbb9e4723fba",
    'f"BLOCK={BLOCK:>{n}} of {n:{n}}"': "f0dde9c83bc938bd",
}


@pytest.mark.parametrize("message", sorted(PINNED))
def test_a_kernel_has_the_same_identity_under_every_python(tmp_path, message):
    module = load_module(tmp_path / "python_kernel.py", KERNEL.format(message=message))
    assert code_version(module.kern) == PINNED[message], (
        "this Python computes another identity for the same kernel: results stored under other "
        "Python versions would not be restored"
    )

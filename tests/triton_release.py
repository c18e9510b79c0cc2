"""The installed Triton release, for tests of behaviour that older releases do not have.

The full suite runs under the newest Triton; tests that need a newer Triton than the installed one
are skipped with the reason, so that the suite also runs under the oldest supported release (3.2).
"""

from __future__ import annotations

import pytest
import triton


def parse_version(text: str) -> tuple[int, int]:
    """``major.minor`` of a version string such as ``3.4.0`` or ``3.6.0+git1234``."""
    parts = []
    for piece in text.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    while len(parts) < 2:
        parts.append(0)
    return parts[0], parts[1]


#: The installed Triton release, read as the package reads it (``triton.__version__``).
TRITON = parse_version(triton.__version__)

#: Upstream's decorator drops ``do_bench`` on 3.2, so its Autotuner asks the driver for a benchmarker,
#: which needs a GPU: under the interpreter on a CPU, upstream can only run from 3.3 on.
UPSTREAM_RUNS = TRITON >= (3, 3)

#: Upstream's autotuner cannot run under the interpreter on this release (see :data:`UPSTREAM_RUNS`).
needs_upstream_run = pytest.mark.skipif(
    not UPSTREAM_RUNS, reason="Triton 3.2's Autotuner asks a GPU driver for a benchmarker"
)


def since_triton(version: tuple[int, int], why: str) -> pytest.MarkDecorator:
    """Skip a test on Triton releases older than ``version``: ``why`` names what it needs."""
    return pytest.mark.skipif(
        version > TRITON, reason=f"{why} (Triton {version[0]}.{version[1]}+, installed {triton.__version__})"
    )

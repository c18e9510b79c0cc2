"""A progress bar for tuning runs that take longer than a couple of seconds.

It appears only after :data:`DELAY_S` seconds, only on a terminal (tqdm's ``disable=None``), and
never when ``TRITON_DEJAVU_PROGRESS=0``.
"""

from __future__ import annotations

import sys
from typing import Any

from .. import _env

DELAY_S = 2.0


class _Silent:
    n = 0

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, values: dict[str, Any], refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int | None, description: str) -> Any:
    """A tqdm bar (or a silent stand-in) with ``update()`` and ``close()``; ``total`` None: a count
    without a share or an end time (a search that stops when further candidates are unlikely to pay)."""
    if not _env.progress():
        return _Silent()
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=description,
        unit="config",
        delay=DELAY_S,
        disable=None,  # off when stderr is not a terminal
        leave=False,
        file=sys.stderr,
        dynamic_ncols=True,
    )

"""Whether a miss may be tuned now: the process-wide :func:`tuning` switch.

A serving process warms up with tuning on and then serves with it off::

    with triton_dejavu_like.tuning(True):
        warm_up(model)            # misses are tuned and stored
    with triton_dejavu_like.tuning(False):
        serve(model)              # misses are answered without benchmarking or writing

Semantics:

- The switch is **process-wide**: a block entered in one thread applies to the kernels of every
  thread while it is active (the kernels and their stored results are shared by the process).
- Blocks **nest**: the most recently entered block that is still active decides. Leaving a block
  removes only its own setting, in whatever order threads leave their blocks, so an outer block
  takes over again when the inner one ends.
- Outside every block, ``TRITON_DEJAVU_READ_ONLY=1`` decides (read at each miss); unset: tuning on.
- ``TRITON_DEJAVU_DETERMINISTIC=1`` turns tuning off whatever the switch says, and so does a CUDA
  (HIP) graph being captured on the calling thread's current stream (:func:`graph_capturing`):
  timing a candidate synchronises, which would end the capture with an error.
- The switch is consulted at a miss: a key answered while tuning is off stays answered that way
  for the life of the process (it is never stored, so a later process with tuning on tunes it).
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
from collections.abc import Iterator

from .. import _env

_lock = threading.Lock()
_active: dict[int, bool] = {}  # token -> enabled, in the order the blocks were entered
_tokens = itertools.count()


@contextlib.contextmanager
def tuning(enabled: bool) -> Iterator[None]:
    """Turn tuning on (``True``) or off (``False``) for the whole process while the block runs.

    With tuning off nothing is benchmarked or written: a key missing from the store is answered by
    the nearest tuned key, the ``fallback_heuristic`` or the first config (see the README's
    "Serving" section). Nestable and thread-safe; see the module documentation for the semantics.
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"tuning() takes True or False, not {type(enabled).__name__}")
    with _lock:
        token = next(_tokens)
        _active[token] = enabled
    try:
        yield
    finally:
        with _lock:
            del _active[token]


def graph_capturing() -> bool:
    """Whether the calling thread's current CUDA (HIP) stream is capturing a graph (``torch.cuda.graph``,
    a serving engine capturing its decode steps). Never initialises CUDA: False until torch has."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        return bool(cuda is not None and cuda.is_initialized() and cuda.is_current_stream_capturing())
    except Exception:  # a torch without the query, or a device that cannot answer: not capturing
        return False


def tuning_enabled() -> bool:
    """True when a miss may be benchmarked and its result stored now."""
    if _env.deterministic() or graph_capturing():
        return False
    with _lock:
        if _active:
            return _active[next(reversed(_active))]
    return not _env.read_only()

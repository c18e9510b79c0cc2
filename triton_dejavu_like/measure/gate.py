"""Gates on the GPU stream, so that a stalled host thread is never timed as kernel time.

CUDA events time what the GPU does between them. When the GPU has run out of queued work and the
thread that launches stalls between recording the start event and launching the kernel (another
Python thread holds the GIL, the CPUs are oversubscribed), the GPU idles inside the timed interval
and the stall is measured as kernel time. On an H100 a second Python thread spinning in the tuning
process made the six best configs of a 13 us matmul measure the same (every ratio 1.000 +- 0.006,
against 0.98-1.05 without it; ``benchmarks/careful_agreement.py``).

A :class:`StreamGate` closes the stream with a one-thread kernel that spins on a flag in pinned
host memory; the timed launches are enqueued behind it and the flag is set once they are all in, so
the GPU runs them back to back whatever the host did meanwhile. :meth:`StreamGate.chunks` pipelines
this: while the GPU runs one chunk, the host enqueues the next behind the next gate, so nothing waits
when the host keeps up. A gate opens by itself after ``max_spins`` reads of its flag (each a read
of host memory across the bus), so an exception, a host that never sets the flag, a launch that
synchronises or a launch queue that fills up cannot hang the GPU; the gate records that it timed
out, and a process whose gate timed out times without gates from then on (:func:`give_up`), as it
did before they existed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import triton
import triton.language as tl

from .._compat import Config

log = logging.getLogger(__name__)

#: Flags per gate buffer: one per chunk of a timing call (a call uses at most a few hundred).
CAPACITY = 4096
#: Reads of a flag before a gate opens by itself (each a read of host memory across the bus).
MAX_SPINS = 1 << 20
#: The gate kernel's launch options (one warp), the same wherever it is compiled.
CONFIG = Config({}, num_warps=1)


@triton.jit(do_not_specialize=["index"])  # one binary for every flag
def _hold(flags, spins_out, index, max_spins):
    """Spin until ``flags[index]`` is set, or for ``max_spins`` reads of it; the reads go to
    ``spins_out[index]``."""
    spins = 0
    while (tl.load(flags + index, volatile=True) == 0) & (spins < max_spins):
        spins += 1
    tl.store(spins_out + index, spins)


class StreamGate:
    """Flags in pinned host memory and the kernel that waits on one of them (current device)."""

    def __init__(self, capacity: int = CAPACITY, max_spins: int = MAX_SPINS) -> None:
        import torch

        self._flags = torch.zeros(capacity, dtype=torch.int32, pin_memory=True)
        self._spins = torch.zeros(capacity, dtype=torch.int32, pin_memory=True)
        self._view = self._flags.numpy()
        self._spins_view = self._spins.numpy()
        self._max_spins = max_spins
        self._used = 0

    def _close(self) -> int:
        if self._used >= len(self._view):
            raise RuntimeError("StreamGate: out of flags")
        index = self._used
        self._used += 1
        self._launch(index)
        return index

    def _launch(self, index: int) -> None:
        _hold[(1,)](self._flags, self._spins, index, self._max_spins, **CONFIG.all_kwargs())

    def _open(self, index: int) -> None:
        self._view[index] = 1

    def chunks(self, enqueue: Callable[[int], None], n_chunks: int) -> None:
        """``enqueue(i)`` for every chunk ``i``, each behind a gate opened once the chunk is in.

        Returns once everything is enqueued (not run: synchronise before reading the events); every
        gate is open when it returns or raises. The flags are reused by the next call, so the caller
        synchronises between calls."""
        self._view[: self._used] = 0
        self._spins_view[: self._used] = 0
        self._used = 0
        previous: int | None = None
        try:
            for i in range(n_chunks):
                gate = self._close()
                if previous is not None:
                    self._open(previous)  # its chunk and the gate behind it are in: let it run
                previous = gate
                enqueue(i)
        finally:
            self._view[: self._used] = 1

    def timed_out(self) -> bool:
        """Whether a gate of the last :meth:`chunks` opened by itself (read after synchronising): the
        host took longer than the gate waits to enqueue a chunk (a launch that synchronises, e.g. a
        hook reading a tensor, waits for the gate in front of it), or the GPU does not see the flag."""
        return bool((self._spins_view[: self._used] >= self._max_spins).any())


#: Why gates are not used in this process (None: they are): set when one could not be made or timed out.
_unavailable: str | None = None
#: Whether a gate was made in this process (its kernel is then loaded: nothing left to compile).
_made = False


def compile_kernel() -> Any:
    """Compile the gate kernel without launching it, into Triton's caches (in this process's memory,
    and on disk), as :class:`StreamGate` launches it: argument stand-ins of the same type and
    alignment. Run beside the candidates' compiles (a compile worker, or the compile threads' async
    mode) so that the first timing finds it compiled: with an empty Triton cache, compiling it there
    took about a second of the tuning run on an H100. Returns the compiled kernel (in async mode,
    what Triton returns for a compile handed over)."""
    import torch

    stand_in = torch.zeros(4, dtype=torch.int32)
    return _hold.run(stand_in, stand_in, 0, MAX_SPINS, grid=(1,), warmup=True, **CONFIG.all_kwargs())


def needs_compile() -> bool:
    """Whether a tuning run should compile the gate kernel ahead: gates are usable and none was made."""
    return _unavailable is None and not _made


def give_up(reason: str) -> None:
    """No more gates in this process: a gate that opens by itself costs its whole wait per chunk."""
    global _unavailable
    if _unavailable is None:
        _unavailable = reason
        log.debug("timing without stream gates from now on: %s", reason)


def make_gate() -> StreamGate | None:
    """A working gate for the current device, or None where gates cannot be used (then timing goes
    ungated, as it did before gates existed)."""
    global _made
    if _unavailable is not None:
        return None
    try:
        import torch

        gate = StreamGate()
        gate.chunks(lambda i: None, 1)  # compiles and loads the kernel now, not inside a timing
        torch.cuda.synchronize()
        if gate.timed_out():
            raise RuntimeError("the gate kernel did not see its flag being set")
        _made = True
        return gate
    except Exception as exc:  # no pinned memory, a backend that cannot read it: timing still works
        give_up(f"{type(exc).__name__}: {exc}")
        return None


def chunked(total: int, size: int) -> Iterator[range]:
    """``range(total)`` in consecutive pieces of at most ``size``."""
    for start in range(0, total, size):
        yield range(start, min(total, start + size))

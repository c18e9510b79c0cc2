"""The compile worker's side: how a worker process starts (forked, or from a fork server), and how it
compiles a candidate for a call (:class:`~.compile_call.CallSpec`) and makes it ready to launch."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from .. import _compat
from .._log import log
from ..codec import decode_config
from .compile_call import CallSpec, forked_kernels, stand_in
from .isolation.transfer import KernelRef, PackedFailure, exit_with_process, pack_failure
from .launch import one_line_reason, prepare_launcher

_imported: dict[KernelRef, Any] = {}
#: In a forked worker: the parent's answers to Triton's driver questions (None in a fork-server worker).
_answers: _compat.DriverAnswers | None = None
#: Where this worker records when it starts each compile (a shared array of (ticket, start) pairs,
#: :meth:`~.compile_pool.CompilePool.compile_started` reads it); None: not recorded.
_starts: Any = None
#: Compiles whose start the workers record at once (a ring: ticket modulo this); far more than ever
#: fly at once, so a compile in flight keeps its slot. Tickets start at 1: a slot never written
#: holds 0, which is no ticket.
START_SLOTS = 1024


def start_slot(ticket: int) -> int:
    """Where ``ticket``'s (ticket, start) pair lies in the shared array of :data:`START_SLOTS` pairs."""
    return 2 * (ticket % START_SLOTS)


class CannotCompileHere(Exception):
    """A worker cannot try this candidate (not a verdict on the candidate): the parent compiles it."""


#: Compile workers run at a lower priority than the tuning process: while they keep every core
#: busy, the process that times candidates must not wait for a core between a launch's events.
WORKER_NICENESS = 10


def _lower_priority() -> None:
    try:
        os.nice(WORKER_NICENESS)
    except OSError as exc:  # not permitted here: compile at the same priority
        log.debug("compile worker: could not lower its priority: %s", exc)


def init_worker(env: dict[str, str], device: int, owner: int, starts: Any = None) -> None:
    global _starts
    exit_with_process(owner)  # the tuning process (the worker's parent is the fork server)
    _starts = starts
    os.environ.clear()  # the fork server keeps the environment it was started with
    os.environ.update(env)
    _lower_priority()
    import torch

    torch.cuda.set_device(device)
    try:
        answers = _compat.DriverAnswers.of_current_device()
    except Exception as exc:  # no early check then: loading each binary still rules it out
        log.debug("compile worker: device properties unknown: %s", exc)
    else:
        _compat.stop_compiles_over_shared_memory(answers)


def init_forked(answers: _compat.DriverAnswers, owner: int, starts: Any = None) -> None:
    global _answers, _starts
    exit_with_process(owner)
    _answers, _starts = answers, starts
    _compat.detach_driver(answers)
    _compat.stop_compiles_over_shared_memory(answers)
    _lower_priority()


def _kernel_fn(kernel: int | KernelRef) -> Any:
    if isinstance(kernel, int):
        fn = forked_kernels.get(kernel)
        if fn is None:  # registered after this worker was forked (the parent then forks new ones)
            raise CannotCompileHere(f"kernel {kernel} was registered after this worker started")
        return fn
    try:
        fn = _imported.get(kernel)
        if fn is None:
            fn = _imported[kernel] = kernel.resolve().fn
    except Exception as exc:
        raise CannotCompileHere(f"the kernel cannot be found here: {one_line_reason(exc)}") from None
    return fn


def compile_candidate(
    call: CallSpec, encoded: dict[str, Any], device: int, ticket: int | None = None
) -> PackedFailure | None:
    """Compile (and, with a GPU, load) one candidate; None on success, else why it cannot run (its
    error, packed to be rebuilt in the parent). Raises :class:`CannotCompileHere` when the worker
    cannot try it. ``ticket``: the submission's number, under which the worker records when it
    started (the parent's compile timeout counts from then)."""
    if _starts is not None and ticket is not None:
        slot = start_slot(ticket)
        _starts[slot + 1] = time.monotonic()  # the time first: a reader that sees the ticket sees it
        _starts[slot] = ticket
    fn = _kernel_fn(call.kernel)
    config, _ = decode_config(encoded)
    where = None if _answers is not None else device
    args = [stand_in(spec, where) for spec in call.args]
    meta = {k: stand_in(spec, where) for k, spec in call.meta}
    try:
        kernel = fn.run(*args, grid=(1,), warmup=True, **meta, **config.all_kwargs())
        error = _make_ready(kernel)
    except Exception as exc:
        error = exc
    if error is None:
        return None
    packed = pack_failure(error)
    if _answers is not None and "forked subprocess" in packed.reason:  # something asked CUDA after all
        raise CannotCompileHere(packed.reason) from None
    return packed


def _make_ready(kernel: Any) -> Exception | None:
    """Make a compiled kernel as ready to launch as this worker can; the error that it cannot run on
    the device (shared memory), or None. A fork-server worker loads it (raising what loading
    raises); a forked worker checks its shared memory and builds its launcher."""
    if _answers is None:
        _compat.load_compiled(kernel)
        return None
    shortfall = _compat.shared_memory_shortfall(kernel, _answers)
    if shortfall is None:
        prepare_launcher(kernel)  # (a fork-server worker builds it by loading the kernel)
    return shortfall


def run_ahead(job: Callable[[], Any]) -> None:
    """A compile job of the tuning process's own (:meth:`~.compile_pool.CompilePool.submit_job`):
    compile, and make the kernel ready to launch as far as a worker can."""
    kernel = job()
    if kernel is not None:
        _make_ready(kernel)

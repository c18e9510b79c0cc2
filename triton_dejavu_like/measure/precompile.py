"""Compile tuning candidates in parallel before any of them is timed.

Compiling, not timing, dominates a cold tuning run (a Triton matmul config takes a fraction of a
second to several seconds to compile). Triton 3.5+ can hand the compilation that a
``warmup=True`` launch triggers to an executor (``triton.AsyncCompileMode``); the front end
(Python AST to TTIR) still runs in the calling thread, while the MLIR pipeline and ``ptxas``
(a subprocess) run in worker threads, where the C++ passes and the subprocess wait leave Python
free. Each JITFunction's kernel cache is only written back in the calling thread when the
context exits. Older Triton releases compile the candidates one by one here (still before
timing, so compile errors rule candidates out early).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from .. import _compat, _env
from .._compat import Config
from .bench import SubmitCompile
from .launch import LaunchContext, prepare_launcher

log = logging.getLogger(__name__)


def precompile(
    ctx: LaunchContext,
    configs: Sequence[Config],
    threads: int | None = None,
    ahead: Callable[[SubmitCompile], None] | None = None,
) -> dict[Config, BaseException]:
    """Compile ``configs`` for the call in ``ctx``; return the candidates that failed, with their errors.

    Nothing is launched and no hook runs. A failure here is final for the candidate (the same
    compilation would fail again when it is timed). ``ahead`` (the benchmarker's
    :meth:`~.bench.Benchmarker.compile_ahead`) adds compiles of its own, started first.
    """
    if not configs:
        return {}
    warmer = _Warmer(ctx)
    workers = _env.compile_threads() if threads is None else threads
    if workers <= 1 or not _compat.HAS_ASYNC_COMPILE:
        if ahead is not None:
            ahead(warmer.run_here)
        for config in configs:
            warmer.warm(config)
        return warmer.failures
    for config, future in _hand_over(warmer, configs, workers, ahead).items():
        exc = future.exception()
        if exc is not None:
            warmer.failures[config] = exc
    log.debug(
        "%s: compiled %d candidates on %d threads (%d failed)",
        ctx.kernel_name,
        len(configs),
        workers,
        len(warmer.failures),
    )
    return warmer.failures


class _Warmer:
    """Compiles candidates of one call with ``warmup=True`` launches, noting those that fail."""

    def __init__(self, ctx: LaunchContext) -> None:
        self.ctx = ctx
        self.grid = ctx.kwargs.get("grid")
        self.meta = {k: v for k, v in ctx.kwargs.items() if k not in ("grid", "warmup")}
        self.failures: dict[Config, BaseException] = {}

    def warm(self, config: Config) -> bool:
        """Compile (or, in async mode, hand over) one candidate; False if it failed already."""
        try:
            self.ctx.fn.run(*self.ctx.args, grid=self.grid, warmup=True, **self.meta, **config.all_kwargs())
        except Exception as exc:  # in async mode: raised before the hand-over (binding, front end)
            self.failures[config] = exc
            return False
        return True

    def run_here(self, job: Callable[[], object]) -> None:
        """A compile of ``ahead``'s, handed over like a candidate's in async mode."""
        try:
            job()
        except Exception as exc:  # the code that needs it compiles it again and reports
            log.debug("%s: compiling %s ahead failed: %s", self.ctx.kernel_name, job.__qualname__, exc)


def _hand_over(
    warmer: _Warmer, configs: Sequence[Config], workers: int, ahead: Callable[[SubmitCompile], None] | None
) -> dict[Config, Future]:
    """Compile ``configs`` on ``workers`` threads in Triton's async compile mode; the future of each
    candidate handed over, once every compile ended."""
    submitted: dict[Config, Future] = {}
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tdl-compile")
    mode = _compat.async_compile_mode(pool)
    futures = _compat.async_compile_futures(mode)
    # an exception (Ctrl-C) while candidates are handed over, or while leaving the mode waits for
    # their compiles, cancels the compiles still queued: only those running are waited for
    with pool, cancelled_on_error(futures), mode, cancelled_on_error(futures):
        if ahead is not None:
            ahead(warmer.run_here)
        # a kernel's launcher is built by the thread that compiled it, beside the other compiles,
        # not at its first launch in the timing loop: for the kernels compiled ahead, and for the
        # first candidate compiled (the others have its signature: their first launch finds it)
        for future in futures:
            future.add_done_callback(_launcher_ready)
        first = _FirstLauncher()
        for config in configs:
            before = len(futures)
            if warmer.warm(config) and len(futures) > before:
                futures[-1].add_done_callback(first)
                submitted[config] = futures[-1]
    return submitted


@contextlib.contextmanager
def cancelled_on_error(futures: Collection[Future]) -> Iterator[None]:
    """On an exception inside, cancel ``futures`` (a list or the keys of a dict, which may grow
    meanwhile): those not yet started never start, those running finish."""
    try:
        yield
    except BaseException:
        for future in futures:
            future.cancel()
        raise


def _compiled(future: Future) -> bool:
    """Whether a compile's future holds a compiled kernel (it was neither cancelled nor failed)."""
    return not future.cancelled() and future.exception() is None


def _launcher_ready(future: Future) -> None:
    """The launcher of a compile that succeeded, built in the thread that compiled it."""
    if _compiled(future):
        prepare_launcher(future.result())


class _FirstLauncher:
    """A done-callback that builds the launcher of the first of its compiles to succeed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken = False

    def __call__(self, future: Future) -> None:
        if not _compiled(future):
            return
        with self._lock:
            if self._taken:
                return
            self._taken = True
        prepare_launcher(future.result())

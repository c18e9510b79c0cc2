"""Compile candidates in worker processes, ahead of the GPU.

Triton's Python front end holds the GIL, so compile threads scale about 5x on 16 cores; processes
scale with the cores. A worker compiles a candidate for the call being tuned (with stand-ins for the
arguments: tensors of the same dtype and alignment, every other value as it is) into Triton's
on-disk cache and rules out a candidate that cannot run (too much shared memory) with its error
(rebuilt in the tuning process: :func:`~.isolation.transfer.pack_failure`) and no GPU time; such a
compile stops once its shared memory is known, before machine code is generated
(:func:`~triton_dejavu_like._compat.stop_compiles_over_shared_memory`). When the tuner then
launches the candidate, Triton finds the binary on disk: a compile in the parent costs a cache
read, and loading it there rules out the rare candidate that needs more registers or threads than
the device has, still before any launch.

Workers are started once per process, the first time a tuning run can use them, and reused by every
later tuning run of every kernel; they exit with the process. A child forked from the process (a
data loader's worker, say) does not inherit them: it starts its own if it tunes. Two ways to start them
(``TRITON_DEJAVU_COMPILE_START``):

- ``fork`` (the default on Linux): forked from the tuning process, all at once, in milliseconds.
  They have the kernel and everything else the parent had imported, and never use CUDA (a forked
  child of a process that initialised CUDA cannot): Triton's questions to its driver (device,
  stream, target, shared memory) are answered with the parent's answers
  (:func:`~triton_dejavu_like._compat.detach_driver`), argument stand-ins are CPU tensors, and the
  shared-memory check is made on the compiled metadata.
- ``forkserver``: a server with torch, triton and this package imported forks each worker, which
  starts CUDA, imports the kernel's module (and re-imports the main script) and loads each binary
  it compiles; seconds to start, in the background while the tuner sets up its search.

A forked worker finds the kernel in its copy of the parent's memory (any kernel; one registered
after the fork makes the pool fork new workers); a fork-server worker imports it as an isolated
worker does (:class:`~triton_dejavu_like.measure.isolation.KernelRef`: the decorated kernel must be
a module-level global). Where that, or an argument, cannot be carried, the tuner compiles in
threads. A worker that dies (a crash in the compiler) breaks the pool: it is restarted, the
candidates that were in it are compiled again in workers, and one that ends a worker even with
nothing else in flight is ruled out (:meth:`~.pipeline.Pipeline.run_streamed`); none is compiled in
the tuning process, which the crash would end. A worker that cannot even try (it does not know the kernel,
or cannot import its module) hands the candidate back to be compiled in the parent: it is never
ruled out for that.

This module is the tuning process's side: the pool and when a tuning run uses it. What a worker is
sent is :mod:`.compile_call`'s, what it runs :mod:`.compile_worker`'s, and whether a fork-server
worker may re-import the main script :mod:`.main_script`'s.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import contextlib
import itertools
import multiprocessing
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .. import _compat, _env
from .._compat import Config
from .._log import DejavuConfigWarning, log, warn_once
from ..codec import EncodingError, encode_config
from .compile_call import CallSpec, Unsupported, forked_kernels
from .compile_worker import START_SLOTS, compile_candidate, init_forked, init_worker, run_ahead, start_slot
from .forking import forking, kill_descendants
from .isolation.settings import FORKSERVER_PRELOAD
from .isolation.transfer import PackedFailure
from .launch import LaunchContext
from .main_script import main_reimport_is_harmless
from .recipe import KernelRecipe

#: A pool that no tuning run has used for this long is shut down (a serving process that tuned at
#: its start holds no idle workers for the rest of its life); the next tuning run starts new ones.
IDLE_RELEASE_S = 30.0


class CompilePool:
    """A pool of compile worker processes for this process, started at first use, shut down once
    idle for :data:`IDLE_RELEASE_S` (no tuning run in :meth:`in_use`, no task in flight)."""

    _instance: CompilePool | None = None
    _lock = threading.Lock()
    #: Tuning runs in :meth:`in_use` and tasks in flight, of any pool; guarded by ``_idle_lock``
    #: (never taken while waiting for ``_lock``: a task cancelled by a shutdown under ``_lock``
    #: releases its count)
    _busy = 0
    _idle_lock = threading.Lock()
    _idle_timer: threading.Timer | None = None

    def __init__(
        self, workers: int, device: int, method: str, answers: _compat.DriverAnswers | None = None
    ) -> None:
        """``answers``: what forked workers answer Triton's driver (default: this process's current
        device's)."""
        self.workers = workers
        self.device = device
        self.method = method
        self._owner = os.getpid()
        self.known = frozenset(forked_kernels) if method == "fork" else frozenset()
        self._tickets = itertools.count(1)
        self._ticket_of: weakref.WeakKeyDictionary[cf.Future[Any], int] = weakref.WeakKeyDictionary()
        context = multiprocessing.get_context(method)
        self._starts = context.Array("d", 2 * START_SLOTS, lock=False)  # zeros: no ticket
        if method == "fork":
            # Triton's own hash (inherited by every worker forked in start()) is computed while
            # this process asks the device, which may first build Triton's driver module in C
            self._warming = threading.Thread(
                target=_compat.warm_compiler, name="compile-pool-warm", daemon=True
            )
            self._warming.start()
            self._answers = answers or _compat.DriverAnswers.of_current_device()
            initializer, initargs = init_forked, (self._answers, os.getpid(), self._starts)
        else:
            context.set_forkserver_preload(FORKSERVER_PRELOAD)
            initializer, initargs = init_worker, (dict(os.environ), device, os.getpid(), self._starts)  # type: ignore[assignment]
        self._executor = cf.ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=initializer, initargs=initargs
        )
        self._started = False

    def start(self) -> None:
        """Start the workers (once). Forked workers start here, all at once, before the tuner starts
        any thread of its own; a fork server starts in a background thread, so that the tuner's own
        set-up (the search strategy, SMAC's import) overlaps with it."""
        with CompilePool._lock:
            if self._started:
                return
            self._started = True
            if self.method != "fork":
                threading.Thread(target=self._spawn, name="compile-pool-start", daemon=True).start()
                return
        self._warming.join()  # no thread of ours runs while the workers are forked
        _compat.warm_compiler(self._answers.target)
        with forking():  # in a process with threads (CUDA's own)
            self._spawn()  # the executor forks every worker at the first task

    def _spawn(self) -> None:
        try:  # the executor starts a worker per submitted task while none is idle
            for _ in range(self.workers):
                self._executor.submit(os.getpid)
        except (RuntimeError, OSError) as exc:  # shut down meanwhile, or the server could not start
            log.debug("compile pool: start in the background stopped: %s", exc)

    @classmethod
    def shared(cls, device: int, method: str) -> CompilePool | None:
        """The process's pool for ``device`` with workers started by ``method`` (None when there
        would be at most one worker)."""
        workers = _env.compile_threads()
        if workers <= 1:
            return None
        with cls._lock:
            pool = cls._instance
            if pool is not None and (pool.device, pool.method) != (device, method):
                pool.shutdown()
                pool = None
            if pool is None:
                pool = cls._instance = CompilePool(workers, device, method)
            return pool

    @classmethod
    @contextlib.contextmanager
    def in_use(cls) -> Iterator[None]:
        """A tuning run that may use the pool: no pool is shut down for idleness meanwhile."""
        cls._hold()
        try:
            yield
        finally:
            cls._release()

    @classmethod
    def _hold(cls) -> None:
        with cls._idle_lock:
            cls._busy += 1
            timer, cls._idle_timer = cls._idle_timer, None
        if timer is not None:  # joined: no thread of ours runs when workers are forked
            timer.cancel()
            timer.join()

    @classmethod
    def _release(cls, _done: object = None) -> None:
        with cls._idle_lock:
            cls._busy -= 1
            if cls._busy or cls._instance is None:
                return
            timer = cls._idle_timer = threading.Timer(IDLE_RELEASE_S, cls._shut_down_idle)
            timer.name, timer.daemon = "compile-pool-idle", True
            timer.start()

    @classmethod
    def _shut_down_idle(cls) -> None:
        """The idle timer's end: shut the process's pool down unless something used it meanwhile."""
        with cls._lock:
            with cls._idle_lock:
                if cls._busy or cls._idle_timer is not threading.current_thread():
                    return
                cls._idle_timer = None
            pool, cls._instance = cls._instance, None
        if pool is not None:
            log.debug("compile pool: idle for %g s, shut down", IDLE_RELEASE_S)
            pool.shutdown()

    def _counted(self, submit: Callable[[], cf.Future[Any]]) -> cf.Future[Any]:
        """``submit()``'s future, counted as in flight until it is done."""
        CompilePool._hold()
        try:
            future = submit()
        except BaseException:
            CompilePool._release()
            raise
        future.add_done_callback(CompilePool._release)
        return future

    def submit(self, call: CallSpec, config: Config) -> cf.Future[PackedFailure | None]:
        """Compile ``config`` for ``call`` in a worker; the future's result is None or the candidate's
        failure (:meth:`PackedFailure.failure` rebuilds its exception here)."""
        try:
            encoded = encode_config(config)
        except EncodingError as exc:
            raise Unsupported(str(exc)) from exc
        ticket = next(self._tickets)
        future = self._counted(
            lambda: self._executor.submit(compile_candidate, call, encoded, self.device, ticket)
        )
        self._ticket_of[future] = ticket
        return future

    def compile_started(self, future: cf.Future[Any]) -> float | None:
        """When a worker started the compile of :meth:`submit`'s ``future`` (``time.monotonic``, the
        same clock in every process of the host), or None while none has."""
        ticket = self._ticket_of.get(future)
        if ticket is None:
            return None
        slot = start_slot(ticket)
        return self._starts[slot + 1] if self._starts[slot] == ticket else None

    def submit_job(self, job: Callable[[], Any]) -> cf.Future[None] | None:
        """Run ``job`` (a module-level function, which a fork-server worker imports; it may return
        the kernel it compiled, whose launcher the worker then builds) in a worker; None where the
        pool was shut down meanwhile."""
        try:
            return self._counted(lambda: self._executor.submit(run_ahead, job))
        except RuntimeError as exc:
            log.debug("compile pool: %s not started: %s", job.__qualname__, exc)
            return None

    def restart(self) -> None:
        """Retire this pool (a worker died, or forked workers do not know a kernel): the next
        :meth:`shared` call starts fresh workers."""
        with CompilePool._lock:
            self.shutdown()
            if CompilePool._instance is self:
                CompilePool._instance = None

    def kill(self) -> None:
        """Stop every worker now, with what it started (a compile that overran its time, in ptxas
        say): the pool breaks, so each of its compiles fails with BrokenProcessPool; :func:`replaced`
        gives the pool to go on with."""
        if os.getpid() != self._owner:
            return
        workers = getattr(self._executor, "_processes", None) or {}  # pid -> process, 3.10-3.14
        for worker in list(workers.values()):
            kill_descendants(worker.pid)
            with contextlib.suppress(OSError, ValueError, AttributeError):  # gone, or closed
                worker.kill()

    def shutdown(self, wait: bool = False) -> None:
        if os.getpid() != self._owner:
            return  # inherited through a fork: the workers, queues and pipes are the parent's
        self._executor.shutdown(wait=wait, cancel_futures=True)


def _forget_inherited_pool() -> None:
    """In a child forked from a process with a pool: the workers are its parent's (their tasks and
    results travel through pipes that the parent reads), so the child starts its own pool if it
    tunes, and a lock held by another of the parent's threads at the fork is not inherited held."""
    CompilePool._instance = None
    CompilePool._lock = threading.Lock()
    CompilePool._busy, CompilePool._idle_lock, CompilePool._idle_timer = 0, threading.Lock(), None


os.register_at_fork(after_in_child=_forget_inherited_pool)


def _shut_down_at_exit() -> None:
    """The process's pool, shut down at its exit (the pools retired before are shut down already;
    one handler for the process: one per pool kept every pool ever started alive, a serving process
    that tunes now and then starting one after each idle shutdown)."""
    pool = CompilePool._instance
    if pool is not None:
        pool.shutdown()


atexit.register(_shut_down_at_exit)


#: A compile pool of worker processes and the call its workers compile candidates for.
Streamed = tuple[CompilePool, CallSpec]


def compile_in_processes(
    recipe: KernelRecipe, ctx: LaunchContext, configs: Sequence[Config]
) -> Streamed | None:
    """The pool and call to compile ``configs`` with, or None where processes cannot be used
    (isolation, interpreter, an argument that cannot travel, a kernel a worker cannot import, few
    candidates)."""
    mode = _env.compile_processes()
    method = _env.compile_start()
    if ctx.interpreted:
        _in_threads(
            recipe, mode, method, "the interpreter runs kernels without compiling them", "nothing is compiled"
        )
        return None
    if recipe.isolation.active():
        _in_threads(recipe, mode, method, "each isolated worker compiles the candidates it times")
        return None
    few = mode == "auto" and len(configs) < _env.PROCESS_COMPILE_MIN[method]
    if mode == "off" or few:
        return None
    if method == "forkserver" and not main_reimport_is_harmless():
        _in_threads(
            recipe,
            mode,
            method,
            "the main script has top-level code that each compile worker would run again "
            '(put it under `if __name__ == "__main__":`)',
        )
        return None
    try:
        call = CallSpec.of(recipe, ctx, forked=method == "fork")
    except Unsupported as exc:
        _in_threads(recipe, mode, method, str(exc))
        return None
    import torch

    device = torch.cuda.current_device()
    pool = CompilePool.shared(device, method)
    if pool is not None and isinstance(call.kernel, int) and call.kernel not in pool.known:
        pool.restart()  # forked before this kernel was registered: fork workers that know it
        pool = CompilePool.shared(device, method)
    return (pool, call) if pool is not None else None


def replaced(pool: CompilePool) -> CompilePool:
    """A started pool of fresh workers in place of ``pool``, which a worker's death broke."""
    pool.restart()
    fresh = CompilePool.shared(pool.device, pool.method) or pool
    fresh.start()  # as the tuner starts one: forked workers after warming
    return fresh


def compiled_safely(streamed: Streamed, config: Config) -> tuple[bool, Streamed]:
    """Compile ``config`` in a worker and wait for it, before this process launches it (the
    numerical check's reference, run before the search): whether it may be launched here (it
    compiled into Triton's disk cache, or no worker could try it and this process compiles it as it
    would without workers), and the pool and call to go on with. A config that crashes the compiler
    ends a worker, never this process: False, and the broken pool is replaced; so is a pool whose
    compile of it overran ``TRITON_DEJAVU_COMPILE_TIMEOUT``, once its workers are stopped."""
    pool, call = streamed
    timeout_s = _env.compile_timeout_s()
    try:
        failure = pool.submit(call, config).result(timeout=timeout_s)
    except BrokenProcessPool:
        return False, (replaced(pool), call)
    except cf.TimeoutError:
        log.debug("compiling %s took over %g s: its compile workers are stopped", config, timeout_s)
        pool.kill()
        return False, (replaced(pool), call)
    except Exception as exc:  # the config cannot travel, the pool was shut down, the worker could not try
        log.debug("compile worker did not compile %s: %s", config, exc)
        return True, streamed
    return failure is None, streamed


def _in_threads(
    recipe: KernelRecipe, mode: str, method: str, reason: str, instead: str = "compiling in threads"
) -> None:
    """Say why this run compiles in threads (or, under the interpreter, compiles nothing: ``instead``):
    a warning where the environment asked for worker processes (``TRITON_DEJAVU_COMPILE_PROCESSES=1``,
    or ``TRITON_DEJAVU_COMPILE_START=forkserver``: a fork server is the default only where the
    platform cannot fork), a debug record where ``auto`` chose forked workers."""
    asked = (
        f"{_env.COMPILE_PROCESSES}=1"
        if mode == "on"
        else f"{_env.COMPILE_START}=forkserver"
        if method == "forkserver"
        else None
    )
    if asked is None:
        log.debug("%s: %s (%s)", recipe.kernel_name, instead, reason)
        return
    warn_once(
        DejavuConfigWarning,
        recipe.kernel_name,
        "%s: %s despite %s: %s",
        recipe.kernel_name,
        instead,
        asked,
        reason,
    )

"""Compile candidates in worker processes, ahead of the GPU.

Triton's Python front end holds the GIL, so compile threads scale about 5x on 16 cores; processes
scale with the cores. A worker compiles a candidate for the call being tuned (with stand-ins for the
arguments: tensors of the same dtype and alignment, every other value as it is) into Triton's
on-disk cache, then loads it once, which rules out a candidate that cannot run (too much shared
memory, too many threads or registers) with its reason and no GPU time. When the tuner then
launches the candidate, Triton finds the binary on disk: a compile in the parent costs a cache read.

Workers are started once per process, the first time a tuning run can use them (``forkserver``:
a server with torch, triton and this package imported forks each worker; in the background, while
the tuner sets up its search), and reused by every
later tuning run of every kernel; they exit with the process. A worker finds the kernel the way an
isolated worker does (:class:`~triton_dejavu_like.measure.isolation.KernelRef`: the decorated kernel
must be a module-level global); where that, or an argument, cannot be carried, the tuner compiles in
threads as before. A worker that dies takes only its own candidate: the pool is restarted and the
candidate is compiled again when it is launched.
"""

from __future__ import annotations

import ast
import atexit
import concurrent.futures as cf
import multiprocessing
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import _compat, _env
from .._compat import Config
from .._log import log
from ..codec import EncodingError, decode_config, encode_config
from .isolation.settings import FORKSERVER_PRELOAD, IsolationError
from .isolation.transfer import KernelRef
from .launch import LaunchContext, one_line_reason
from .recipe import KernelRecipe

#: How one argument travels to a compile worker: a tensor stand-in (dtype name, 16-byte aligned?)
#: or a plain value.
ArgSpec = tuple[str, Any]


class Unsupported(Exception):
    """This call cannot be compiled in a worker process (the tuner compiles in threads instead)."""


def _arg_spec(value: Any) -> ArgSpec:
    import torch

    if isinstance(value, torch.Tensor):
        return ("tensor", (str(value.dtype).removeprefix("torch."), value.data_ptr() % 16 == 0))
    if value is None or isinstance(value, (bool, int, float, str)):
        return ("value", value)
    if _compat.is_constexpr(value):
        return ("value", _compat.constexpr_value(value))
    raise Unsupported(f"an argument of type {type(value).__name__} cannot be sent to a compile worker")


def _stand_in(spec: ArgSpec, device: int) -> Any:
    import torch

    kind, payload = spec
    if kind == "value":
        return payload
    dtype_name, aligned = payload
    dtype = getattr(torch, dtype_name)
    base = torch.empty(2, dtype=dtype, device=f"cuda:{device}")
    return base if aligned else base[1:]


@dataclass(frozen=True)
class CallSpec:
    """What a worker needs to compile candidates for one call: the kernel and argument stand-ins."""

    ref: KernelRef
    args: tuple[ArgSpec, ...]
    meta: tuple[tuple[str, ArgSpec], ...]  # the call's keywords other than grid and warmup

    @classmethod
    def of(cls, recipe: KernelRecipe, ctx: LaunchContext) -> CallSpec:
        try:
            ref = KernelRef.of(recipe)
        except IsolationError as exc:
            raise Unsupported(str(exc)) from exc
        meta = tuple((k, _arg_spec(v)) for k, v in sorted(ctx.kwargs.items()) if k not in ("grid", "warmup"))
        return cls(ref, tuple(_arg_spec(a) for a in ctx.args), meta)


# --- the worker's side --------------------------------------------------------------------------------

_recipes: dict[KernelRef, KernelRecipe] = {}


def _init_worker(env: dict[str, str], device: int) -> None:
    os.environ.clear()  # the fork server keeps the environment it was started with
    os.environ.update(env)
    import torch

    torch.cuda.set_device(device)


def _compile(call: CallSpec, encoded: dict[str, Any], device: int) -> str | None:
    """Compile and load one candidate; None on success, else why it cannot run (one line)."""
    recipe = _recipes.get(call.ref)
    if recipe is None:
        recipe = _recipes[call.ref] = call.ref.resolve()
    config, _ = decode_config(encoded)
    args = [_stand_in(spec, device) for spec in call.args]
    meta = {k: _stand_in(spec, device) for k, spec in call.meta}
    try:
        kernel = recipe.fn.run(*args, grid=(1,), warmup=True, **meta, **config.all_kwargs())
        _compat.load_compiled(kernel)
    except Exception as exc:
        return one_line_reason(exc)
    return None


# --- the parent's side ---------------------------------------------------------------------------------


class CompilePool:
    """A pool of compile worker processes for this process, started at first use."""

    _instance: CompilePool | None = None
    _lock = threading.Lock()

    def __init__(self, workers: int, device: int) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(FORKSERVER_PRELOAD)
        self.workers = workers
        self.device = device
        self._executor = cf.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(dict(os.environ), device),
        )
        self._starter: threading.Thread | None = None

    def start(self) -> None:
        """Start the workers in a background thread (once), so that the tuner's own set-up (the
        search strategy, SMAC's import) overlaps with the fork server's start."""
        with CompilePool._lock:
            if self._starter is None:
                self._starter = threading.Thread(target=self._spawn, name="compile-pool-start", daemon=True)
                self._starter.start()

    def _spawn(self) -> None:
        try:  # the executor starts a worker per submitted task while none is idle
            for _ in range(self.workers):
                self._executor.submit(os.getpid)
        except (RuntimeError, OSError) as exc:  # shut down meanwhile, or the server could not start
            log.debug("compile pool: start in the background stopped: %s", exc)

    @classmethod
    def shared(cls, device: int) -> CompilePool | None:
        """The process's pool (None when compiling in processes is off or cannot work here)."""
        workers = _env.compile_threads()
        if workers <= 1 or "forkserver" not in multiprocessing.get_all_start_methods():
            return None
        with cls._lock:
            pool = cls._instance
            if pool is not None and pool.device != device:
                pool.shutdown()
                pool = None
            if pool is None:
                pool = cls._instance = CompilePool(workers, device)
                atexit.register(pool.shutdown)
            return pool

    def submit(self, call: CallSpec, config: Config) -> cf.Future[str | None]:
        """Compile ``config`` for ``call`` in a worker; the future's result is None or a reason."""
        try:
            encoded = encode_config(config)
        except EncodingError as exc:
            raise Unsupported(str(exc)) from exc
        return self._executor.submit(_compile, call, encoded, self.device)

    def restart(self) -> None:
        """Replace a broken pool (a worker died): later candidates get fresh workers."""
        with CompilePool._lock:
            self.shutdown()
            if CompilePool._instance is self:
                CompilePool._instance = None

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _is_main_guard(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def main_reimport_is_harmless() -> bool:
    """Whether a worker may import the program's main script (multiprocessing re-imports it in each
    worker it starts): true for ``python -m`` and interactive sessions, and for a script whose top
    level only imports, defines and assigns, with its work under ``if __name__ == "__main__":``."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if getattr(main, "__spec__", None) is not None or not path:
        return True
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return False
    return _harmless(tree.body)


_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _harmless(statements: list[ast.stmt]) -> bool:
    """Imports, definitions, assignments, docstrings, the main guard, and ``if``/``try`` blocks made
    of those: what can run at import without doing the program's work."""
    for node in statements:
        if isinstance(node, (*_DEFINITIONS, ast.Assign, ast.AnnAssign, ast.Pass)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        if isinstance(node, ast.If) and (_is_main_guard(node.test) or _harmless(node.body + node.orelse)):
            continue
        if isinstance(node, ast.Try) and _harmless(
            [*node.body, *node.orelse, *node.finalbody, *(s for h in node.handlers for s in h.body)]
        ):
            continue
        return False
    return True


def compile_in_processes(
    recipe: KernelRecipe, ctx: LaunchContext, configs: Sequence[Config]
) -> tuple[CompilePool, CallSpec] | None:
    """The pool and call to compile ``configs`` with, or None where processes cannot be used
    (interpreter, an argument that cannot travel, a kernel a worker cannot import, few candidates)."""
    mode = _env.compile_processes()
    if ctx.interpreted or mode == "off" or (mode == "auto" and len(configs) < _env.PROCESS_COMPILE_MIN):
        return None
    if not main_reimport_is_harmless():
        log.debug(
            "%s: compiling in threads: the main script has top-level code that each compile worker "
            'would run again (put it under `if __name__ == "__main__":`)',
            recipe.kernel_name,
        )
        return None
    try:
        call = CallSpec.of(recipe, ctx)
    except Unsupported as exc:
        log.debug("%s: compiling in threads (%s)", recipe.kernel_name, exc)
        return None
    import torch

    pool = CompilePool.shared(torch.cuda.current_device())
    return (pool, call) if pool is not None else None

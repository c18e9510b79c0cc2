"""What crosses between the parent and a worker: argument copies, launch grids, exceptions, the
kernel's address, the CUDA state helpers both sides use, and how a worker ends with its parent
(isolation and compile workers)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import os
import pickle
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from ... import _compat
from ..._compat import Config
from ..launch import Failure, LaunchContext, one_line_reason, user_call
from .settings import IsolationError, WorkerError


@dataclass(frozen=True)
class KernelRef:
    """Where a fresh process finds a kernel's recipe: the module of the kernel's object (an autotuner
    with a ``kernel_recipe()`` method) and its qualified name there."""

    module: str
    qualname: str

    @classmethod
    def of(cls, recipe: Any) -> KernelRef:
        """The reference to the kernel of ``recipe``; :class:`IsolationError` if a fresh process could not
        follow it."""
        fn = _compat.python_function(recipe.fn)
        ref = cls(fn.__module__, fn.__qualname__)
        where = f"{ref.module}.{ref.qualname}"
        if "<locals>" in ref.qualname:
            raise IsolationError(
                f"{where} is defined inside a function: a {REMOTE} worker imports the kernel's module "
                "and can only find kernels defined at module level (move it there, or tune in process)"
            )
        module = sys.modules.get(ref.module)
        if module is None or (ref.module == "__main__" and not getattr(module, "__file__", None)):
            raise IsolationError(
                f"{where} is not defined in an importable file (an interactive session or `python -c`?): "
                f"a {REMOTE} worker cannot import it"
            )
        try:
            found = ref.find(module)
        except LookupError:
            found = None
        if getattr(found, "fn", None) is not recipe.fn:
            raise IsolationError(
                f"the module-level name {where} is not this autotuner, so a {REMOTE} worker cannot find "
                "it: decorate the module-level kernel with autotune and launch it under that name"
            )
        return ref

    def find(self, module: Any) -> Any:
        """The object with a recipe under the name in ``module`` (through ``triton.heuristics`` wrappers)."""
        obj = module
        for part in self.qualname.split("."):
            obj = getattr(obj, part, None)
        while obj is not None and not callable(getattr(obj, "kernel_recipe", None)):
            obj = getattr(obj, "fn", None)
        if obj is None:
            raise LookupError(f"no autotuner at {self.module}.{self.qualname}")
        return obj

    def resolve(self) -> Any:
        """The kernel's recipe, importing its module in this process (a worker)."""
        return self.find(importlib.import_module(self.module)).kernel_recipe()


REMOTE = "forkserver/spawn"


# --- helpers ---------------------------------------------------------------------------------------


def launch_grid(ctx: LaunchContext, config: Config) -> tuple[int, ...]:
    """The grid ``config`` launches with: the grid function called on the arguments as Triton binds
    them. :class:`IsolationError` when it cannot be computed (the arguments, a heuristic, an answer
    that is no grid: the candidate's), :class:`~..launch.TuningStopped` when the grid function
    itself raised (it ends tuning, as in a launch in process)."""
    grid = ctx.kwargs["grid"]
    try:
        _, named = ctx.full_args(config)
        parameters = inspect.signature(_compat.python_function(ctx.fn)).parameters
        meta = {n: p.default for n, p in parameters.items() if p.default is not inspect.Parameter.empty}
        meta.update(named)
        apply_heuristics(ctx.fn, meta)
    except Exception as exc:
        raise _no_grid(exc) from exc
    dims = user_call("grid", grid, meta)
    try:
        return tuple(int(d) for d in dims)
    except Exception as exc:
        raise _no_grid(exc) from exc


def _no_grid(exc: Exception) -> IsolationError:
    return IsolationError(f"its launch grid cannot be computed ({type(exc).__name__}: {exc})")


def apply_heuristics(fn: Any, meta: dict[str, Any]) -> None:
    """Add the values ``triton.heuristics`` layers under the autotuner compute at launch."""
    from triton.runtime.autotuner import Heuristics

    layer = fn
    while isinstance(layer, Heuristics):
        for name, heuristic in layer.values.items():
            meta[name] = heuristic(meta)
        layer = layer.fn


def private_copies(value: Any, select: Callable[[Any], bool] | None = None) -> Any:
    """``value`` with each tensor in it (or each ``select`` accepts) moved onto a copy of its storage.

    Tensors that share a storage share the copy, with their offsets, sizes and strides, so views
    and aliasing are kept. Tuples, lists, dicts and dataclasses (e.g. tensor descriptors) are
    rebuilt around their copied tensors.
    """
    import torch

    copies: dict[tuple[Any, int], Any] = {}

    def copy(tensor: Any) -> Any:
        if select is not None and not select(tensor):
            return tensor
        storage = tensor.untyped_storage()
        key = (tensor.device, storage.data_ptr())
        clone = copies.get(key)
        if clone is None:
            clone = copies[key] = storage.clone()
        moved = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
        return moved.set_(clone, tensor.storage_offset(), tensor.size(), tensor.stride())

    return map_tensors(value, copy)


def map_tensors(value: Any, fn: Callable[[Any], Any]) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(map_tensors(v, fn) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            f.name: map_tensors(getattr(value, f.name), fn) for f in dataclasses.fields(value) if f.init
        }
        return dataclasses.replace(value, **fields)
    return value


def die_with_parent() -> None:
    """On Linux, have the kernel SIGKILL this worker when the thread that started it ends
    (``PR_SET_PDEATHSIG`` follows the forking thread): for an isolation worker, the tuning run's
    thread, which outlives it, or the single-threaded fork server, which ends with its process."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


#: Where the kernel cannot say when a process ends (no pidfd), :func:`exit_with_process`'s worker
#: checks this often whether the tuning process is still there.
PARENT_CHECK_S = 0.25


def exit_with_process(pid: int) -> None:
    """Exit this worker soon after the tuning process ``pid`` ends, however it ends. A process that
    is killed, or leaves with ``os._exit``, shuts nothing down: its workers would live on, holding
    what they inherited (its stdout pipe among them, so that whoever reads it never sees the end),
    and a task queue cannot tell (every worker holds its writing end too). A worker's parent is not
    always that process: a fork server's children hold the server's own pipe, so the server outlives
    the tuning process while one of them is busy (a candidate that hangs), and ``PR_SET_PDEATHSIG``
    never fires. So a thread waits for the tuning process itself to end: on a pidfd (Linux 5.3+;
    readable once it has ended, also before it is reaped), else by polling."""

    def watch() -> None:
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # no pidfd here, or the process is gone already
            fd = None
        if fd is not None:
            select.select([fd], [], [])
        else:
            while _running(pid):
                time.sleep(PARENT_CHECK_S)
        os._exit(0)

    threading.Thread(target=watch, name="worker-owner-watch", daemon=True).start()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or another user's process has its pid now
        return False
    return True


#: The most bytes a worker sends to rebuild one exception (a compile error carries the kernel's
#: source): one that would take more, an attribute holding a tensor say, comes back as its reason.
MAX_PACKED_BYTES = 256 * 1024


class PackedFailure(NamedTuple):
    """A candidate's failure in a worker process, as it travels to the parent: ``payload`` rebuilds
    the exception there (see :func:`pack_failure`; None when it cannot travel), ``reason`` is its
    one-line reason (``Type: message``), for logs and for when it cannot be rebuilt."""

    payload: bytes | None
    reason: str

    def failure(self) -> Failure:
        """The exception rebuilt in this process, or the reason where it cannot be."""
        rebuilt = None if self.payload is None else _rebuilt(self.payload)
        return self.reason if rebuilt is None else rebuilt


def pack_failure(failure: Failure) -> PackedFailure:
    """``failure`` (an exception raised in this worker, or a reason) made ready to send to the parent.

    The exception travels pickled where it comes back as itself (its class, and a text); else as
    its class (by module and qualified name), its arguments and those of its attributes that
    pickle, put together in the parent without calling its constructor, where that says the same
    (its one-line reason); each within :data:`MAX_PACKED_BYTES`. With neither, the reason alone.
    Storage never holds these: they are live objects passed between two processes of one program."""
    reason = one_line_reason(failure)
    if isinstance(failure, BaseException):
        whole = _pickled(failure)
        if _rebuilds(whole, type(failure)):
            return PackedFailure(whole, reason)
        parts = _pickled(_parts(failure))
        if _rebuilds(parts, type(failure), reason):
            return PackedFailure(parts, reason)
    return PackedFailure(None, reason)


def _pickled(value: Any) -> bytes | None:
    try:
        return pickle.dumps(value)
    except Exception:  # an unpicklable part (a lock, a local class), or a __reduce__ that fails
        return None


def _parts(exc: BaseException) -> tuple[type[BaseException], tuple[Any, ...], dict[str, Any]]:
    """The exception's class, its arguments (none if they do not pickle) and its picklable attributes."""
    args = exc.args if _pickled(exc.args) is not None else ()
    state = {name: value for name, value in vars(exc).items() if _pickled(value) is not None}
    return type(exc), args, state


def _rebuilt(payload: bytes) -> Exception | None:
    """The exception :func:`pack_failure` packed (None where it cannot be made here)."""
    try:
        found = pickle.loads(payload)
        if isinstance(found, tuple):  # its parts: put together without its constructor
            cls, args, state = found
            found = cls.__new__(cls, *args)
            found.args = args
            vars(found).update(state)
    except Exception:  # a class this process cannot import, a constructor pickle cannot call
        return None
    return found if isinstance(found, Exception) else None


def _rebuilds(payload: bytes | None, cls: type, reason: str | None = None) -> bool:
    """Whether ``payload``, within :data:`MAX_PACKED_BYTES`, rebuilds an exception of class ``cls``
    that can say what it is (``reason`` exactly, when given)."""
    if payload is None or len(payload) > MAX_PACKED_BYTES:
        return False
    rebuilt = _rebuilt(payload)
    try:
        said = one_line_reason(rebuilt) if type(rebuilt) is cls else None
    except Exception:  # a __str__ that needs an attribute left behind
        return False
    return said is not None and (reason is None or said == reason)


def unpack_exception(packed: PackedFailure) -> Exception:
    """The exception a worker raised, rebuilt here; :class:`WorkerError` with its reason where it
    cannot be."""
    found = packed.failure()
    return found if isinstance(found, Exception) else WorkerError(found)

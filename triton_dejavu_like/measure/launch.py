"""A kernel call being tuned, and one launch of a candidate wrapped in the hooks as upstream does it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .. import _compat
from .._compat import Config
from .bench import Benchmarker

log = logging.getLogger(__name__)


class HookArguments(dict):  # type: ignore[type-arg]
    """What the tuner's hooks receive: every argument by name with the config's values, as upstream
    passes them (``nargs["x_ptr"]``), and the call's positional arguments by position too
    (``args[0]``), as triton-dejavu passed its hooks the tuple of them. A name is never an ``int``,
    so the two never meet."""

    __slots__ = ("_positional",)

    def __init__(self, named: dict[str, Any], positional: Sequence[str]) -> None:
        super().__init__(named)
        self._positional = positional

    def __getitem__(self, key: Any) -> Any:
        if type(key) is int:
            return super().__getitem__(self._positional[key])
        return super().__getitem__(key)


@dataclass
class LaunchContext:
    """A kernel call being tuned: the kernel, its arguments, and the tuner's hooks and timer."""

    fn: Any  # the JITFunction / InterpretedFunction / Heuristics under the autotuner
    args: tuple[Any, ...]
    kwargs: dict[str, Any]  # includes grid and warmup, as upstream passes them
    nargs: dict[str, Any]  # positional arguments by name
    pre_hook: Callable[..., Any]
    post_hook: Callable[..., Any]
    benchmarker: Benchmarker
    kernel_name: str
    interpreted: bool = False
    #: Whether a callable ``grid`` in ``kwargs`` is the user's grid function, whose error ends tuning
    #: (see :func:`make_kernel_call`); False for a stand-in whose error is the candidate's (an isolated
    #: worker's table of the grids its parent computed).
    users_grid: bool = True

    def full_args(self, config: Config) -> tuple[dict[str, Any], dict[str, Any]]:
        """(launch kwargs, every argument by name with all of the config's values, for the hooks)."""
        conflicts = self.kwargs.keys() & config.kwargs.keys()
        if conflicts:
            raise ValueError(f"conflicting meta-parameters: {', '.join(sorted(conflicts))}")
        parameters = getattr(self.fn, "arg_names", None)
        launch = dict(
            self.kwargs, **launch_kwargs(config, interpreted=self.interpreted, parameters=parameters)
        )
        return launch, self.hook_args(config.all_kwargs())

    def hook_args(self, values: dict[str, Any]) -> HookArguments:
        """What the tuner's hooks (and a config's ``pre_hook``) receive for a launch with ``values``
        (a config's): the arguments by name and by position, the call's keywords, then ``values``."""
        return HookArguments({**self.nargs, **self.kwargs, **values}, tuple(self.nargs))


def launch_kwargs(
    config: Config,
    defaults: dict[str, Any] | None = None,
    *,
    interpreted: bool = False,
    parameters: Collection[str] | None = None,
) -> dict[str, Any]:
    """What a launch with ``config`` passes: its meta-parameters, and its options except those equal to
    ``defaults`` (the backend's: the same kernel, and a cheaper launch). Under the interpreter only the
    options it accepts (:data:`~triton_dejavu_like._compat.INTERPRETER_OPTIONS`; it ignores them), and
    of the kwargs only the kernel's ``parameters`` when given: a compile option carried in the kwargs
    (AMD's ``waves_per_eu``) is dropped, as the interpreter drops it from 3.3 on (3.2's passes it to the
    Python function, which fails)."""
    options = {k: v for k, v in config.all_kwargs().items() if k not in config.kwargs}
    meta = config.kwargs
    if interpreted:
        kept = {k: v for k, v in options.items() if k in _compat.INTERPRETER_OPTIONS}
        if parameters is not None:
            meta = {k: v for k, v in meta.items() if k in parameters}
    else:
        defaults = defaults or {}
        kept = {k: v for k, v in options.items() if k not in defaults or defaults[k] != v}
    return {**meta, **kept}


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (or its type's name)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


#: Why a candidate cannot run: the exception it raised (in this process, or in a worker process and
#: rebuilt here, see :func:`.isolation.transfer.pack_failure`), or the one-line reason
#: (``Type: message``) a worker process gave for one that could not be rebuilt.
Failure = BaseException | str


def one_line_reason(exc: BaseException | str) -> str:
    """``Type: first non-empty line of the message`` (compile errors span many lines), capped; a
    reason given as text is kept as it is, capped."""
    if isinstance(exc, str):
        return exc[:500]
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__)[:500]


def prepare_launcher(kernel: Any) -> None:
    """Build a compiled kernel's host-side launcher into Triton's cache before its first launch
    (up to Triton 3.6 a C module per kernel signature, made with the C compiler: a few tenths of a
    second with an empty cache), where the compiles run, so that the process timing candidates
    finds it there. Best effort: the first launch builds it where this could not."""
    try:
        _compat.build_launcher(kernel)
    except Exception as exc:
        log.debug("launcher not built ahead: %s", one_line_reason(exc))


class TuningStopped(Exception):
    """An error that does not depend on the candidate being measured: the tuner's ``pre_hook`` or
    ``post_hook`` (the user's, or the one ``reset_to_zero``/``restore_value`` make), the launch's grid
    function, the user's ``do_bench`` or the numerical check's ``reference_fn`` raised. Every
    candidate would fail alike (or, a grid failing for some configs only, upstream's tuning ends there
    too), so tuning ends at once, as upstream's does. ``what`` names the function (``pre_hook``,
    ``post_hook``, ``grid``, ``do_bench``, ``reference_fn``); ``error`` is its exception, or the
    one-line reason of a worker that could not send it back."""

    def __init__(self, what: str, error: Failure) -> None:
        super().__init__(what, error)
        self.what = what
        self.error = error

    def __str__(self) -> str:
        return f"{self.what} raised {one_line_reason(self.error)}"


@dataclass
class LaunchRecord:
    """What failed in the launches of one kernel call (:func:`make_kernel_call`): the candidate (its
    config's ``pre_hook``, or the launch), and the first of the functions that run alike for every
    candidate (the tuner's hooks, the grid function) that raised, with its exception."""

    candidate_failed: bool = False
    hook_error: tuple[str, BaseException] | None = None
    #: The exception the grid function raised in the launch under way (see :func:`make_kernel_call`).
    grid_error: BaseException | None = None

    def hook_failed(self, what: str, error: BaseException) -> None:
        if self.hook_error is None:
            self.hook_error = (what, error)


def make_kernel_call(
    ctx: LaunchContext, config: Config, record: LaunchRecord | None = None
) -> Callable[[], None]:
    """One launch of ``config`` wrapped in the hooks, exactly as upstream's ``_bench`` does; what
    fails in it is noted in ``record`` (see :func:`stops_tuning`).

    A grid function (the user's) is called by Triton inside the launch, with the arguments as the
    installed release binds them; it is wrapped so that its error, which passes through the launch
    as itself (the ``post_hook`` and a ``do_bench`` see it as upstream's do), is noted as the grid's:
    it ends tuning, where any other error of the launch is the candidate's."""
    current, full_nargs = ctx.full_args(config)
    fn, args, pre_hook, post_hook = ctx.fn, ctx.args, ctx.pre_hook, ctx.post_hook
    config_pre_hook = config.pre_hook
    record = LaunchRecord() if record is None else record
    grid = current.get("grid")
    if ctx.users_grid and callable(grid):
        current["grid"] = _watched_grid(grid, record)

    def kernel_call() -> None:
        if config_pre_hook:
            try:
                config_pre_hook(full_nargs)
            except Exception:
                record.candidate_failed = True
                raise
        try:
            pre_hook(full_nargs)
        except Exception as exc:
            record.hook_failed("pre_hook", exc)
            raise
        record.grid_error = None
        try:
            fn.run(*args, **current)
        except Exception as exc:
            grid_error = record.grid_error  # the launch failed because the grid function raised
            if grid_error is None:
                record.candidate_failed = True
            try:
                post_hook(full_nargs, exception=exc)
            except Exception as hook_error:  # raised with the launch's error as its context, as upstream
                record.hook_failed("post_hook", hook_error)
                raise
            if grid_error is not None:
                record.hook_failed("grid", grid_error)
            raise
        try:
            post_hook(full_nargs, exception=None)
        except Exception as exc:
            record.hook_failed("post_hook", exc)
            raise

    return kernel_call


def _watched_grid(grid: Callable[[Any], Any], record: LaunchRecord) -> Callable[[Any], Any]:
    """``grid``, noting in ``record`` the exception it raises (which passes on as it is)."""

    def watched(meta: Any) -> Any:
        try:
            return grid(meta)
        except Exception as exc:
            record.grid_error = exc
            raise

    return watched


@contextlib.contextmanager
def stops_tuning(records: Sequence[LaunchRecord], timer: str | None = None) -> Iterator[None]:
    """Raise :class:`TuningStopped` for an exception of the block that does not depend on the
    candidate: one of the tuner's hooks or the grid function raised in a launch of ``records``
    (whatever the timer made of it), or the user's timing function (``timer`` names it; None for a
    timer of ours) raised an error of its own, no launch having failed, other than those upstream's
    autotuner skips a config for (``OutOfResources``, ...: a config's limits). The candidate's errors
    (its config's ``pre_hook``, the launch), even passed on or wrapped by the timer, pass as they
    are: they rule it out."""
    try:
        yield
    except TuningStopped:
        raise
    except Exception as exc:
        for record in records:
            if record.hook_error is not None:
                what, error = record.hook_error
                raise TuningStopped(what, error) from error
        launch_failed = any(record.candidate_failed for record in records)
        if timer is not None and not launch_failed and not isinstance(exc, _compat.UPSTREAM_SKIPPED_ERRORS):
            raise TuningStopped(timer, exc) from exc
        raise


_Result = TypeVar("_Result")


def user_call(what: str, fn: Callable[..., _Result], /, *args: Any, **kwargs: Any) -> _Result:
    """``fn(*args, **kwargs)``, a user's function called the same way for every candidate: its
    exception ends tuning (:class:`TuningStopped` naming it ``what``)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        raise TuningStopped(what, exc) from exc

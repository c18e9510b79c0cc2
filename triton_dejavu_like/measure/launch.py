"""A kernel call being tuned, and one launch of a candidate wrapped in the hooks as upstream does it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from .. import _compat
from .._compat import Config
from .bench import Benchmarker

log = logging.getLogger(__name__)


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

    def full_args(self, config: Config) -> tuple[dict[str, Any], dict[str, Any]]:
        """(launch kwargs, every argument by name with all of the config's values, for the hooks)."""
        conflicts = self.kwargs.keys() & config.kwargs.keys()
        if conflicts:
            raise ValueError(f"conflicting meta-parameters: {', '.join(sorted(conflicts))}")
        parameters = getattr(self.fn, "arg_names", None)
        launch = dict(
            self.kwargs, **launch_kwargs(config, interpreted=self.interpreted, parameters=parameters)
        )
        return launch, {**self.nargs, **self.kwargs, **config.all_kwargs()}


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


#: Why a candidate cannot run: the exception it raised in this process, or the one-line reason
#: (``Type: message``) a worker process gave for it; what a worker raised stays in the worker.
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


def make_kernel_call(ctx: LaunchContext, config: Config) -> Callable[[], None]:
    """One launch of ``config`` wrapped in the hooks, exactly as upstream's ``_bench`` does."""
    current, full_nargs = ctx.full_args(config)
    fn, args, pre_hook, post_hook = ctx.fn, ctx.args, ctx.pre_hook, ctx.post_hook
    config_pre_hook = config.pre_hook

    def kernel_call() -> None:
        if config_pre_hook:
            config_pre_hook(full_nargs)
        pre_hook(full_nargs)
        try:
            fn.run(*args, **current)
        except Exception as exc:
            try:
                post_hook(full_nargs, exception=exc)
            finally:
                raise
        post_hook(full_nargs, exception=None)

    return kernel_call

"""Evaluators: run one candidate config of a kernel on the call's arguments and time it.

An evaluator is made per tuning run (one key, one set of arguments). The in-process evaluator does
what upstream's ``Autotuner._bench`` does: per-config ``pre_hook``, the tuner's ``pre_hook``, the
launch, the tuner's ``post_hook`` (with the exception, if any), all inside the benchmarker. Other
evaluators (isolated worker processes, numerical checks) implement the same interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ._compat import Config
from .bench import QUANTILES, Benchmarker


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
        """(launch kwargs, every argument by name) for a config, as upstream builds them."""
        conflicts = self.kwargs.keys() & config.kwargs.keys()
        if conflicts:
            raise ValueError(f"conflicting meta-parameters: {', '.join(sorted(conflicts))}")
        current = dict(self.kwargs, **config.all_kwargs())
        return current, {**self.nargs, **current}


class Evaluator(ABC):
    """Times candidates of one tuning run. ``measure`` raises when the candidate cannot run."""

    def __init__(self, ctx: LaunchContext) -> None:
        self.ctx = ctx

    def prepare(self, configs: Sequence[Config]) -> dict[Config, str]:
        """Work done once before timing (e.g. compiling); returns candidates already ruled out."""
        return {}

    @abstractmethod
    def measure(self, config: Config) -> list[float]:
        """Timings (ms) at :data:`QUANTILES` for one config (the screen, where timing has two stages)."""

    def refine(self, configs: Sequence[Config]) -> dict[Config, list[float]] | None:
        """Careful timings of the finalists, or None when timing has a single stage."""
        return None

    def close(self) -> None:  # noqa: B027 - optional for evaluators that hold nothing
        """Release what the evaluator holds (workers, buffers)."""

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def one_line_reason(exc: BaseException) -> str:
    """``Type: first non-empty line of the message`` (compile errors span many lines), capped."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__)[:500]


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


class InProcessEvaluator(Evaluator):
    """Compile candidates in parallel, then launch and time them in this process."""

    def prepare(self, configs: Sequence[Config]) -> dict[Config, str]:
        if self.ctx.interpreted:
            return {}
        from .precompile import precompile

        return precompile(self.ctx, configs)

    def measure(self, config: Config) -> list[float]:
        return self.ctx.benchmarker(make_kernel_call(self.ctx, config), QUANTILES)

    def refine(self, configs: Sequence[Config]) -> dict[Config, list[float]] | None:
        if not self.ctx.benchmarker.finalists or len(configs) < 2:
            return None
        calls = [make_kernel_call(self.ctx, config) for config in configs]
        return dict(zip(configs, self.ctx.benchmarker.refine(calls)))

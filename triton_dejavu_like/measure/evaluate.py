"""Evaluators: run one candidate config of a kernel on the call's arguments and time it.

An evaluator is made per tuning run (one key, one set of arguments). The in-process evaluator does
what upstream's ``Autotuner._bench`` does: per-config ``pre_hook``, the tuner's ``pre_hook``, the
launch, the tuner's ``post_hook`` (with the exception, if any), all inside the benchmarker. Other
evaluators (isolated worker processes, numerical checks) implement the same interface.

``measure`` raising rules the candidate out, except :class:`~.launch.TuningStopped`: an error of the
tuner's hooks, of the launch's grid function or of the user's ``do_bench``, which does not depend on
the candidate and ends tuning.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from .._compat import Config
from .launch import Failure, LaunchContext, LaunchRecord, make_kernel_call, stops_tuning
from .precompile import precompile


class Evaluator(ABC):
    """Times candidates of one tuning run. ``measure`` raises when the candidate cannot run."""

    def __init__(self, ctx: LaunchContext) -> None:
        self.ctx = ctx

    def prepare(self, configs: Sequence[Config]) -> dict[Config, Failure]:
        """Work done once before timing (e.g. compiling); returns candidates already ruled out."""
        return {}

    @abstractmethod
    def measure(self, config: Config) -> list[float]:
        """Timings (ms) at the benchmarker's quantiles for one config (the screen, in two-stage timing);
        raises the candidate's error, or :class:`~.launch.TuningStopped`."""

    def refine(self, configs: Sequence[Config]) -> dict[Config, list[float]] | None:
        """Careful timings of the finalists, or None when timing has a single stage."""
        return None

    def adopt_reference(self, config: Config) -> bool:
        """Run ``config`` once, untimed, so that the outputs it writes become the numerical check's
        reference, unless the check has one already; whether it has one now (False without the
        check, or when ``config`` wrote none of the outputs). Raises the candidate's error, or
        :class:`~.launch.TuningStopped`."""
        return False

    def late_rule_outs(self) -> dict[Config, str]:
        """Candidates already timed that are found invalid only now, with their reasons (the numerical
        check judges those it timed before it had a reference). Asked once, after the search."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional for evaluators that hold nothing
        """Release what the evaluator holds (workers, buffers)."""

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InProcessEvaluator(Evaluator):
    """Compile candidates in parallel, then launch and time them in this process."""

    def prepare(self, configs: Sequence[Config]) -> dict[Config, Failure]:
        if self.ctx.interpreted:
            return {}
        return precompile(self.ctx, configs, ahead=self.ctx.benchmarker.compile_ahead)

    def measure(self, config: Config) -> list[float]:
        benchmarker = self.ctx.benchmarker
        record = LaunchRecord()
        call = make_kernel_call(self.ctx, config, record)
        with stops_tuning([record], benchmarker.user_function):
            return benchmarker(call, benchmarker.quantiles)

    def refine(self, configs: Sequence[Config]) -> dict[Config, list[float]] | None:
        benchmarker = self.ctx.benchmarker
        if not benchmarker.finalists or len(configs) < 2:
            return None
        records = [LaunchRecord() for _ in configs]
        calls = [make_kernel_call(self.ctx, c, r) for c, r in zip(configs, records)]
        with stops_tuning(records, benchmarker.user_function):
            return dict(zip(configs, benchmarker.refine(calls)))

"""A kernel recipe: everything measuring a kernel's candidates needs, and nothing of the tuner.

The tuner hands a :class:`KernelRecipe` to measuring (in process or in an isolated worker); a
worker started fresh finds the kernel's module-level object and asks it for its recipe
(``kernel_recipe()``), so measuring never reaches back into the tuner.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._compat import Config
from .bench import Benchmarker, TimingPolicy, make_benchmarker
from .checked import CheckedEvaluator
from .evaluate import Evaluator
from .isolation.settings import IsolationSettings
from .launch import LaunchContext
from .numerics import NumericalCheck


@dataclass(frozen=True)
class TimingSettings:
    """How candidates are timed: a user's ``do_bench`` (always honoured), else upstream's ``warmup``,
    ``rep`` and ``use_cuda_graph`` for the careful stage and the two-stage :class:`TimingPolicy`;
    ``quantiles`` asked of every timing (the first is the one compared)."""

    do_bench: Callable[..., Any] | None = None
    warmup: float | None = None
    rep: float | None = None
    use_cuda_graph: bool = False
    policy: TimingPolicy = field(default_factory=TimingPolicy)
    quantiles: tuple[float, ...] | None = None  # None: QUANTILES

    def overridden(self) -> list[str]:
        """The timing arguments given that have no effect because a ``do_bench`` is given (it times
        every candidate; ``triton.autotune`` would ignore ``do_bench`` for them instead)."""
        if self.do_bench is None:
            return []
        given = {
            "warmup": self.warmup is not None,
            "rep": self.rep is not None,
            "use_cuda_graph": self.use_cuda_graph,
            "timing": self.policy != TimingPolicy(),
        }
        return [name for name, is_given in given.items() if is_given]

    def unused_policy_fields(self) -> list[str]:
        """The fields of ``timing=TimingPolicy(...)`` set to other than their defaults that change
        nothing with the other timing arguments: with ``finalists=0`` every candidate is timed in one
        stage by Triton's ``do_bench(warmup, rep)``, so the screen's and the careful stage's fields are
        unused; with ``warmup``, ``rep`` or ``use_cuda_graph`` given, the careful stage is Triton's
        ``do_bench`` (``do_bench_cudagraph``) too, so its fields are unused. (With a ``do_bench``,
        :meth:`overridden` names ``timing`` as a whole.)"""
        if self.do_bench is not None:
            return []
        default = TimingPolicy()
        if self.policy.finalists == 0:
            unused = [f.name for f in dataclasses.fields(TimingPolicy) if f.name != "finalists"]
        elif self.warmup is not None or self.rep is not None or self.use_cuda_graph:
            unused = [f.name for f in dataclasses.fields(TimingPolicy) if f.name.startswith("final_")]
        else:
            return []
        return [name for name in unused if getattr(self.policy, name) != getattr(default, name)]

    def ignored_by_interpreter(self) -> list[str]:
        """The timing arguments given that the interpreter's CPU timer does not use (it takes
        ``warmup`` and ``rep`` only). With a ``do_bench``, :meth:`overridden` names them."""
        if self.do_bench is not None:
            return []
        given = {"use_cuda_graph": self.use_cuda_graph, "timing": self.policy != TimingPolicy()}
        return [name for name, is_given in given.items() if is_given]

    def benchmarker(self, interpreted: bool) -> Benchmarker:
        return make_benchmarker(
            do_bench=self.do_bench,
            warmup=self.warmup,
            rep=self.rep,
            use_cuda_graph=self.use_cuda_graph,
            interpreted=interpreted,
            policy=self.policy,
            quantiles=self.quantiles,
        )


@dataclass(frozen=True)
class KernelRecipe:
    """A kernel and how to measure its candidates (hooks, timing, checks, isolation)."""

    fn: Any  # the JITFunction / InterpretedFunction / Heuristics under the autotuner
    kernel_name: str
    arg_names: tuple[str, ...]
    configs: Sequence[Config]  # the kernel's whole config list (a worker finds pre_hooks there)
    pre_hook: Callable[..., Any]
    post_hook: Callable[..., Any]
    timing: TimingSettings
    check: NumericalCheck | None  # None: no numerical check
    isolation: IsolationSettings
    #: What errors call the tuner's ``pre_hook`` and ``post_hook``: the arguments that made them.
    hook_names: tuple[str, str] = ("pre_hook", "post_hook")

    def called(self, what: str) -> str:
        """What an error calls ``what`` (``pre_hook``, ``post_hook``, ``grid``, ``do_bench``,
        ``reference_fn``)."""
        names = {**dict(zip(("pre_hook", "post_hook"), self.hook_names)), "grid": "the grid function"}
        return names.get(what, what)

    def context(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], *, interpreted: bool, benchmarker: Benchmarker
    ) -> LaunchContext:
        """The launch context of one call being tuned (``kwargs`` include ``grid`` and ``warmup``)."""
        return LaunchContext(
            fn=self.fn,
            args=args,
            kwargs=kwargs,
            nargs=dict(zip(self.arg_names, args)),
            pre_hook=self.pre_hook,
            post_hook=self.post_hook,
            benchmarker=benchmarker,
            kernel_name=self.kernel_name,
            interpreted=interpreted,
        )

    def checked(self, evaluator: Evaluator, reference_config: Config | None = None) -> Evaluator:
        """``evaluator`` behind the numerical check when it is on (see :class:`CheckedEvaluator`; the
        tuner's ``pre_hook`` resets the arguments for ``reference_fn`` with the first config's values)."""
        if self.check is None:
            return evaluator
        first = self.configs[0] if self.configs else None
        return CheckedEvaluator(evaluator, self.check, reference_config=reference_config, hook_config=first)

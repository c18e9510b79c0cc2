"""``autotune``: the decorator. Its signature is the one list of the arguments users pass."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._compat import Config
from ..measure.bench import TimingPolicy
from .autotuner import Autotuner
from .config_space import ConfigSpace
from .settings import TunerSettings


def autotune(
    key: Sequence[str],
    configs: Sequence[Config] | None = None,
    config_space: ConfigSpace | None = None,
    reset_to_zero: Sequence[str] | None = None,
    restore_value: Sequence[str] | None = None,
    pre_hook: Callable[..., Any] | None = None,
    post_hook: Callable[..., Any] | None = None,
    prune_configs_by: dict[str, Any] | None = None,
    warmup: float | None = None,
    rep: float | None = None,
    use_cuda_graph: bool = False,
    do_bench: Callable[..., Any] | None = None,
    fallback_heuristic: Callable[[tuple[Any, ...]], Config] | None = None,
    use_bo: bool = False,
    use_random_search: bool = False,
    search_max_search_t: float | None = None,
    search_max_share: float | None = None,
    search_max_repeat: int = 1,
    custom_data_storage: str | Path | None = None,
    ignore_dtypes: bool = False,
    *,
    search_seed: int = 0,
    timing: TimingPolicy | None = None,
    tag: str | None = None,
    use_isolated_process: bool | None = None,
    isolation_timeout_s: float | None = None,
    isolation_start_method: str | None = None,
    numerical_check: bool | None = None,
    reference_fn: Callable[..., Any] | None = None,
    check_outputs: Sequence[str] | None = None,
    check_rtol: float | None = None,
    check_atol: float | None = None,
) -> Callable[[Any], Autotuner]:
    """Tune a ``@triton.jit`` kernel once per identity and restore the result in every later process.

    A drop-in for ``triton.autotune`` (same arguments and hooks) and for triton-dejavu's ``autotune``.
    Give the candidates as ``configs`` (a list of ``triton.Config``) or as ``config_space`` (a
    :class:`ConfigSpace`); with neither, upstream's single default config is used.

    ``use_random_search=True`` or ``use_bo=True`` (extra ``bo``) search within ``search_max_search_t``
    seconds and ``search_max_share`` of the space (None: stop when further batches are unlikely to
    pay, under a 180 s cap; see docs/search.md), restarting up to ``search_max_repeat`` times when
    nothing valid was found, seeded by ``search_seed``. ``fallback_heuristic(key) -> triton.Config``
    answers a miss when ``TRITON_DEJAVU_FORCE_FALLBACK=1``. ``custom_data_storage`` stores this
    kernel's results under another root; ``tag`` (default ``$TRITON_DEJAVU_TAG`` or "default") names
    the deployment. ``ignore_dtypes=True`` leaves argument dtypes out of the tuning key.

    On a GPU, candidates are compiled in parallel first, then each is screened with a few
    L2-flushed launches and the best ``timing.finalists`` are re-measured carefully, interleaved
    (``timing=TimingPolicy(...)`` sets the budgets; ``TimingPolicy(finalists=0)`` times every
    candidate with ``triton.testing.do_bench(warmup, rep)`` as upstream does). ``warmup``, ``rep``
    and ``use_cuda_graph`` keep upstream's meaning for the careful stage.

    ``use_isolated_process=True`` (None: ``TRITON_DEJAVU_USE_ISOLATED_PROCESS``) compiles and times
    the candidates in a reusable worker process: a candidate that crashes it or takes longer than
    ``isolation_timeout_s`` (None: ``TRITON_DEJAVU_ISOLATION_TIMEOUT``, else 120 s) is ruled out and
    tuning goes on in a new worker. ``isolation_start_method`` ("fork", "forkserver", "spawn"; None:
    fork under the interpreter, forkserver on a GPU); with forkserver/spawn the decorated kernel must
    be a module-level global. ``numerical_check=True`` (None: on with ``TRITON_DEJAVU_NUMERICAL_CHECK=1``
    or any of the next arguments) rules out candidates whose outputs differ from the reference's:
    ``reference_fn(**kernel_args)`` (writes the expected outputs, or returns ``{name: tensor}``) or
    else the first candidate that runs. ``check_outputs`` names the output arguments (default: the
    tensor arguments the reference changes); ``check_rtol``/``check_atol`` replace the dtype-aware
    tolerances. See docs/isolation.md.
    """
    arguments = dict(locals())  # every argument by name, exactly as given (the list is the signature)
    if _looks_like_configs(key) and (configs is None or _looks_like_names(configs)):
        # upstream order: triton.autotune(configs, key)
        key, configs = (configs or []), key  # type: ignore[assignment]
    settings = TunerSettings.from_arguments(arguments)

    def decorator(fn: Any) -> Autotuner:
        return Autotuner(
            fn,
            fn.arg_names,
            configs,
            key,
            reset_to_zero,
            restore_value,
            pre_hook=pre_hook,
            post_hook=post_hook,
            prune_configs_by=prune_configs_by,
            config_space=config_space,
            settings=settings,
        )

    return decorator


def _looks_like_configs(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, Config) for v in value)


def _looks_like_names(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)

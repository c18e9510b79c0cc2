"""``autotune``: the decorator. Its signature is the one list of the arguments users pass.

Positional arguments follow ``triton.autotune``'s order when the first is the config list, and
triton-dejavu 0.7's order otherwise (:data:`UPSTREAM_ORDER`, :data:`DEJAVU_ORDER`); everything else
is keyword-only. An unknown keyword is a ``TypeError`` that names the closest known argument.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._compat import Config
from ..measure.bench import TimingPolicy
from .arguments import jit_arg_names
from .autotuner import Autotuner
from .config_space import ConfigSpace
from .settings import TunerSettings

#: ``triton.autotune``'s positional order (3.2-3.9; ``cache_results`` from 3.4).
UPSTREAM_ORDER = (
    "configs",
    "key",
    "prune_configs_by",
    "reset_to_zero",
    "restore_value",
    "pre_hook",
    "post_hook",
    "warmup",
    "rep",
    "use_cuda_graph",
    "do_bench",
    "cache_results",
)
#: triton-dejavu 0.7's positional order: key first, then upstream's up to use_cuda_graph, then its own.
DEJAVU_ORDER = (
    "key",
    "configs",
    *UPSTREAM_ORDER[2:10],
    "config_space",
    "fallback_heuristic",
    "informed_fallback",
    "prepare_informed_fallback",
    "use_bo",
    "use_random_search",
    "search_max_search_t",
    "search_max_share",
    "search_max_repeat",
    "quantiles",
    "metadata_key",
    "custom_data_storage",
    "ignore_dtypes",
)
_WHERE = "docs/compat.md lists every argument"


def autotune(
    *positional: Any,
    configs: Sequence[Config] | None = None,
    key: Sequence[str] | str | None = None,
    prune_configs_by: dict[str, Any] | None = None,
    reset_to_zero: Sequence[str] | str | None = None,
    restore_value: Sequence[str] | str | None = None,
    pre_hook: Callable[..., Any] | None = None,
    post_hook: Callable[..., Any] | None = None,
    warmup: float | None = None,
    rep: float | None = None,
    use_cuda_graph: bool = False,
    do_bench: Callable[..., Any] | None = None,
    cache_results: bool = False,
    config_space: ConfigSpace | None = None,
    fallback_heuristic: Callable[[tuple[Any, ...]], Config] | None = None,
    informed_fallback: Callable[[tuple[Any, ...], dict[Any, Any]], Config] | None = None,
    prepare_informed_fallback: Callable[[dict[tuple[Any, ...], Config]], dict[Any, Any]] | None = None,
    use_bo: bool = False,
    use_random_search: bool = False,
    search_max_search_t: float | None = None,
    search_max_share: float | None = None,
    search_max_repeat: int = 1,
    quantiles: Sequence[float] | None = None,
    metadata_key: str | None = None,
    custom_data_storage: str | Path | None = None,
    ignore_dtypes: bool = False,
    use_jitcache: bool | None = None,
    search_seed: int = 0,
    timing: TimingPolicy | None = None,
    tag: str | None = None,
    use_isolated_process: bool | None = None,
    isolation_timeout_s: float | None = None,
    isolation_start_method: str | None = None,
    numerical_check: bool | None = None,
    reference_fn: Callable[..., Any] | None = None,
    check_outputs: Sequence[str] | str | None = None,
    check_rtol: float | None = None,
    check_atol: float | None = None,
    **unknown: Any,
) -> Callable[[Any], Autotuner]:
    """Tune a ``@triton.jit`` kernel once per identity and restore the result in every later process.

    A drop-in for ``triton.autotune`` (same arguments and hooks) and for triton-dejavu's ``autotune``.
    Give the candidates as ``configs`` (a list of ``triton.Config``) or as ``config_space`` (a
    :class:`ConfigSpace`); with neither, upstream's single default config is used.

    ``use_random_search=True`` or ``use_bo=True`` (extra ``bo``) search within ``search_max_search_t``
    seconds and ``search_max_share`` of the space (both None: stop when further batches are unlikely
    to pay, under a 180 s cap; a time alone: the whole space within it; see docs/search.md),
    starting again while nothing valid was found, up to ``search_max_repeat`` attempts in all, seeded
    by ``search_seed``. ``fallback_heuristic(key) -> triton.Config``
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
    be a module-level global. ``numerical_check=True`` (None: on with any of the next arguments, or
    with ``TRITON_DEJAVU_NUMERICAL_CHECK=1``, which leaves the storage identity as it is) rules out
    candidates whose outputs differ from the reference's:
    ``reference_fn(**kernel_args)`` (writes the expected outputs, or returns ``{name: tensor}``) or
    else the first config listed that runs and writes an output (of the first three, run untimed before
    the search; put a trusted config first). ``check_outputs`` names the output
    arguments (default: the tensor arguments the reference changes); ``check_rtol``/``check_atol``
    replace the dtype-aware tolerances. See docs/isolation.md.

    Positional arguments: ``autotune(configs, key, prune_configs_by, reset_to_zero, restore_value,
    pre_hook, post_hook, warmup, rep, use_cuda_graph, do_bench, cache_results)`` as upstream when the
    first is a list of ``triton.Config``, else triton-dejavu's order (:data:`DEJAVU_ORDER`, from
    ``key``). ``cache_results`` (upstream's own disk cache) and ``use_jitcache`` are accepted and
    change nothing: results are always stored. ``quantiles`` (default ``(0.5, 0.2, 0.8)``) are asked
    of every timing, the first is compared. Under ``TRITON_DEJAVU_FORCE_FALLBACK=1``,
    ``informed_fallback(key, cache) -> triton.Config`` answers a miss when results were restored
    (``cache``: ``{key: Config}`` of them, or what ``prepare_informed_fallback(cache)`` returned at
    the first fallback), before ``fallback_heuristic``. ``metadata_key`` records the chosen config in
    ``triton_dejavu_like.global_metadata_store[metadata_key]`` at each launch (for proton).
    """
    if unknown:
        raise TypeError(_unknown_keyword(next(iter(unknown))))
    arguments = dict(locals())
    del arguments["positional"], arguments["unknown"]
    arguments.update(_by_name(positional, arguments))
    _refuse_a_misplaced_space(arguments)
    if arguments["key"] is None:
        raise TypeError("autotune() missing required argument: 'key'")
    settings = TunerSettings.from_arguments(arguments)
    a = arguments  # what the Autotuner takes itself (upstream's arguments)

    def decorator(fn: Any) -> Autotuner:
        return Autotuner(
            fn,
            jit_arg_names(fn),
            a["configs"],
            a["key"],
            a["reset_to_zero"],
            a["restore_value"],
            pre_hook=a["pre_hook"],
            post_hook=a["post_hook"],
            prune_configs_by=a["prune_configs_by"],
            config_space=a["config_space"],
            settings=settings,
        )

    return decorator


_DEFAULTS = {
    name: p.default for name, p in inspect.signature(autotune).parameters.items() if p.kind is p.KEYWORD_ONLY
}


def _by_name(positional: tuple[Any, ...], given: dict[str, Any]) -> dict[str, Any]:
    """The positional arguments by name, in upstream's order or in triton-dejavu's."""
    if not positional:
        return {}
    upstream = _is_config_list(positional[0]) and (
        bool(positional[0])
        or (len(positional) > 1 and _is_names(positional[1]))
        or (len(positional) == 1 and given["key"] is not None)
    )
    order, dialect = (UPSTREAM_ORDER, "triton.autotune's") if upstream else (DEJAVU_ORDER, "triton-dejavu's")
    if len(positional) > len(order):
        raise TypeError(
            f"autotune() takes at most {len(order)} positional arguments in {dialect} order "
            f"({order[0]}, {order[1]}, ...), got {len(positional)}; pass the others by keyword"
        )
    named = dict(zip(order, positional))
    for name in named:
        if given[name] is not _DEFAULTS[name]:
            raise TypeError(f"autotune() got two values for {name!r}")
    return named


def _refuse_a_misplaced_space(arguments: dict[str, Any]) -> None:
    """A ``ConfigSpace`` given as ``key`` or ``configs`` (``autotune(space, ["M"])`` reads as
    triton-dejavu's order, key first) is a TypeError that says where it goes."""
    for name in ("key", "configs"):
        if isinstance(arguments[name], ConfigSpace):
            raise TypeError(
                f"autotune() got a ConfigSpace as {name!r}: pass it as config_space= "
                "(autotune(config_space=space, key=[...]))"
            )


#: Names other tuners (or ConfigSpace) use, and the argument of ours that does the job.
_ALIASES = {
    "search_max_evals": "search_max_share (a fraction of the candidates)",
    "max_evals": "search_max_share (a fraction of the candidates)",
    "kwarg_conditions": "ConfigSpace(..., kwarg_conditions=[...]) given as config_space=",
    "conditions": "ConfigSpace(..., conditions=[...]) given as config_space=",
}


def _unknown_keyword(name: str) -> str:
    if name in _ALIASES:
        hint = f"; use {_ALIASES[name]}"
    else:
        close = difflib.get_close_matches(name, list(_DEFAULTS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"autotune() got an unexpected keyword argument {name!r}{hint} ({_WHERE})"


def _is_config_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, Config) for v in value)


def _is_names(value: Any) -> bool:
    return isinstance(value, str) or (
        isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
    )

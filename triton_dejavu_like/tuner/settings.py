"""The decorator's own arguments, validated once, and the part of them that decides results.

:class:`TunerSettings` holds everything ``autotune`` accepts beyond upstream's ``Autotuner``
arguments; :meth:`TunerSettings.from_arguments` builds it from the decorator's arguments by name
(the list is written once, in the decorator's signature), and :meth:`TunerSettings.identity` is what
is hashed into the storage path (``autotune_config``): the settings that change which config wins.
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

from .. import _env
from .._compat import Config
from ..measure.bench import QUANTILES, TimingPolicy
from ..measure.isolation.settings import IsolationSettings
from ..measure.numerics import NumericalCheck
from ..measure.recipe import TimingSettings
from ..search import Budget, require_smac
from ..store.identity import callable_name

STRATEGIES = ("exhaustive", "random", "bayesian")
#: The search budget's arguments and their defaults: used by random search and BO only.
BUDGET_ARGUMENTS = {
    "search_max_search_t": None,
    "search_max_share": None,
    "search_max_repeat": 1,
    "search_seed": 0,
}
#: Arguments that are numbers when given (None: the default).
NUMBER_ARGUMENTS = ("warmup", "rep", "isolation_timeout_s", "check_rtol", "check_atol")
#: Arguments that are True or False when given (None: the default, or the environment's value).
FLAG_ARGUMENTS = (
    "use_bo",
    "use_random_search",
    "use_cuda_graph",
    "ignore_dtypes",
    "use_isolated_process",
    "numerical_check",
    "cache_results",
    "use_jitcache",
)


@dataclass(frozen=True)
class TunerSettings:
    """How a kernel is tuned and where its results go (the decorator's arguments, validated)."""

    timing: TimingSettings = field(default_factory=TimingSettings)
    strategy: str = "exhaustive"
    budget: Budget = field(default_factory=Budget)
    fallback_heuristic: Callable[[tuple[Any, ...]], Config] | None = None
    informed_fallback: Callable[[tuple[Any, ...], Any], Config] | None = None
    prepare_informed_fallback: Callable[[dict[tuple[Any, ...], Config]], Any] | None = None
    metadata_key: str | None = None
    custom_data_storage: Path | None = None
    ignore_dtypes: bool = False
    tag: str | None = None
    isolation: IsolationSettings = field(default_factory=IsolationSettings)
    numerical_check: NumericalCheck = field(default_factory=NumericalCheck)
    #: Budget arguments given to an exhaustive search, which measures every candidate (no effect).
    ignored_budget: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown search strategy {self.strategy!r}; use one of {', '.join(STRATEGIES)}")
        for name in ("fallback_heuristic", "informed_fallback", "prepare_informed_fallback"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise TypeError(f"{name} must be callable")
        if self.prepare_informed_fallback is not None and self.informed_fallback is None:
            raise ValueError("prepare_informed_fallback needs informed_fallback")
        for name in ("metadata_key", "tag"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a string, got {type(value).__name__}")

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> TunerSettings:
        """Settings from the decorator's arguments by name (those it does not know are ignored)."""
        a = dict(arguments)
        _check_types(a)
        use_bo, use_random = bool(a.get("use_bo")), bool(a.get("use_random_search"))
        if use_bo and use_random:
            raise ValueError("use_bo and use_random_search exclude each other")
        if use_bo:
            require_smac(load=False)  # imported when a tuning run starts, not here
        strategy = "bayesian" if use_bo else ("random" if use_random else "exhaustive")
        # None stands for the default (a placeholder in triton-dejavu's positional order)
        b = {name: default if a.get(name) is None else a[name] for name, default in BUDGET_ARGUMENTS.items()}
        given = [name for name, default in BUDGET_ARGUMENTS.items() if b[name] != default]
        share = _number(b["search_max_share"], "search_max_share")
        if share is None and b["search_max_search_t"] is not None:
            share = 1.0  # a time alone is a fixed budget (no adaptive stop): the whole space within it
        # checked whatever the strategy (exhaustive search uses none of it: a warning says so)
        asked = Budget(
            max_time_s=_number(b["search_max_search_t"], "search_max_search_t"),
            max_share=share,
            max_repeat=_whole(b["search_max_repeat"], "search_max_repeat"),
            seed=_whole(b["search_seed"], "search_seed"),
        )
        budget = Budget() if strategy == "exhaustive" else asked
        outputs = a.get("check_outputs")
        storage = a.get("custom_data_storage")
        return cls(
            timing=TimingSettings(
                do_bench=a.get("do_bench"),
                warmup=a.get("warmup"),
                rep=a.get("rep"),
                use_cuda_graph=bool(a.get("use_cuda_graph", False)),
                policy=a.get("timing") or TimingPolicy(),
                quantiles=_quantiles(a.get("quantiles")),
            ),
            strategy=strategy,
            budget=budget,
            fallback_heuristic=a.get("fallback_heuristic"),
            informed_fallback=a.get("informed_fallback"),
            prepare_informed_fallback=a.get("prepare_informed_fallback"),
            metadata_key=a.get("metadata_key"),
            # where the kernel is decorated, as triton-dejavu takes it: a later chdir moves nothing
            custom_data_storage=Path(storage).expanduser().absolute() if storage is not None else None,
            ignore_dtypes=bool(a.get("ignore_dtypes", False)),
            tag=a.get("tag"),
            isolation=IsolationSettings(
                a.get("use_isolated_process"), a.get("isolation_timeout_s"), a.get("isolation_start_method")
            ),
            numerical_check=NumericalCheck(
                a.get("numerical_check"),
                a.get("reference_fn"),
                _names(outputs),
                a.get("check_rtol"),
                a.get("check_atol"),
            ),
            ignored_budget=tuple(given) if strategy == "exhaustive" else (),
        )

    def identity(self) -> dict[str, Any]:
        """The settings that change which config wins (hashed into the storage path)."""
        timing = self.timing
        settings: dict[str, Any] = {
            "warmup": timing.warmup,
            "rep": timing.rep,
            "use_cuda_graph": bool(timing.use_cuda_graph),
            "quantiles": list(timing.quantiles or QUANTILES),
            "do_bench": callable_name(timing.do_bench),
        }
        search = _env.hash_search_params()  # TRITON_DEJAVU_HASH_SEARCH_PARAMS=0: results shared
        if search:
            settings["strategy"] = self.strategy
        if timing.do_bench is None:
            settings["timing"] = timing.policy.settings()
        if search and self.strategy != "exhaustive":
            settings["budget"] = self.budget.as_dict()
        # the check can rule out the config that would otherwise win; only the check the code asks
        # for counts (TRITON_DEJAVU_NUMERICAL_CHECK=1 turns it on for tuning without moving the results)
        if self.numerical_check.configured():
            settings["numerical_check"] = self.numerical_check.settings()
        return settings


def _check_types(a: Mapping[str, Any]) -> None:
    """A ``TypeError`` naming the argument for a value of the wrong type, at decoration (a string
    given for a flag is always true; one given for a number failed deep inside tuning)."""
    for name in NUMBER_ARGUMENTS:
        _number(a.get(name), name)
    for name in FLAG_ARGUMENTS:
        if isinstance(a.get(name), (str, bytes)):
            raise TypeError(f"{name} must be True or False, got the string {a[name]!r:.40}")
    if a.get("do_bench") is not None and not callable(a["do_bench"]):
        raise TypeError(
            f"do_bench must be callable (do_bench(kernel_call, quantiles=...)), got {a['do_bench']!r:.40}"
        )
    if a.get("timing") is not None and not isinstance(a["timing"], TimingPolicy):
        raise TypeError(f"timing must be a TimingPolicy, got {type(a['timing']).__name__}")
    storage = a.get("custom_data_storage")
    if storage is not None and not isinstance(storage, (str, PathLike)):
        raise TypeError(f"custom_data_storage must be a path (str or os.PathLike), got {storage!r:.40}")


def _quantiles(value: Any) -> tuple[float, ...] | None:
    """``quantiles`` validated: None, or a non-empty list/tuple of numbers in [0, 1]."""
    if value is None:
        return None
    valid = (
        isinstance(value, (list, tuple))
        and bool(value)
        and all(isinstance(q, (int, float)) and not isinstance(q, bool) and 0 <= q <= 1 for q in value)
    )
    if not valid:
        raise ValueError(f"quantiles must be a non-empty sequence of numbers in [0, 1], got {value!r}")
    return tuple(float(q) for q in value)


def _names(value: Sequence[str] | str | None) -> tuple[str, ...] | None:
    """Argument names as given: a list, or one name as a string (as ``key`` takes it); they are checked
    against the kernel's arguments at decoration (``arguments.argument_names``)."""
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _whole(value: Any, what: str) -> int:
    if isinstance(value, bool):  # an int to Python, a slip here
        raise TypeError(f"{what} must be a whole number, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise TypeError(f"{what} must be a whole number, got {value!r:.40}") from None


def _number(value: Any, what: str) -> float | None:
    """A number as given (None: the default); True (1 s, a share of 1.0) or a string is a slip."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a number, got {value!r:.40}")
    return float(value)

"""``ConfigSpace``: a cross product of parameter lists, filtered by conditions and by the platform."""

from __future__ import annotations

import functools
import itertools
import math
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .. import _compat
from .._compat import Config
from .._log import DejavuConfigWarning, warn_once

KwargCondition = Callable[[dict[str, Any]], bool]
ConfigCondition = Callable[[Config], bool]

#: A platform check: given a Config, the reason it cannot run here, or None.
PlatformCheck = Callable[[Config], "str | None"]


class ConfigSpace:
    """All combinations of the given lists that pass every condition and run on this platform.

    ``kwargs_with_lists`` maps each meta-parameter to its candidate values; the keyword lists
    (``num_warps=[4, 8]``, ``num_stages=[2, 3, 4]``, ``num_ctas=[1, 2]``, ``maxnreg=[None, 128]``, ...)
    give the candidates of ``triton.Config``'s own fields. A field the installed Triton does not have
    but another release does (``num_buffers_warp_spec``, ``enable_warp_specialization``, ...) is
    dropped with a warning, so one kernel file serves several Triton releases; a name no release
    knows is a ``TypeError``; a value no compile takes (``num_warps=[3]``, ``num_stages=[-1]``,
    ``num_ctas=["2"]``) a ``ValueError``.

    ``kwarg_conditions`` are functions of the kwargs dict, ``conditions`` functions of the whole
    Config; a point is kept when every one returns true (a space whose conditions keep no point is
    a ``ValueError`` at once). Options the platform cannot run (``num_ctas > 1`` before compute
    capability 9.0, ``maxnreg`` off CUDA) are filtered when the autotuner lists the space on the
    machine that runs it (``configs(platform_check)``); the space itself is never changed.

    The space knows its raw size (the product of the list lengths) without enumerating anything,
    and its exact size by counting; it lists and encodes points as tuples of indices.

    Points are listed as triton-dejavu lists them: the kwargs in the order given (the first varies
    slowest), then the Config fields in alphabetical order (``num_stages`` before ``num_warps``),
    whatever order they were passed in. triton-dejavu's attributes can be read: ``kwargs`` (each
    meta-parameter's list), ``kwarg_keys``, one list per Config field of the installed Triton
    (``space.num_warps``; ``[default]`` when not given) and ``get_global_pre_hook()``.
    """

    def __init__(
        self,
        kwargs_with_lists: Mapping[str, Sequence[Any]],
        kwarg_conditions: Sequence[KwargCondition] | None = None,
        conditions: Sequence[ConfigCondition] | None = None,
        pre_hook: Callable[..., Any] | None = None,
        **option_lists: Sequence[Any] | None,
    ) -> None:
        if not isinstance(kwargs_with_lists, Mapping):
            raise TypeError("kwargs_with_lists must be a dict of parameter name -> list of values")
        lists: dict[str, tuple[Any, ...]] = {}
        for name, values in kwargs_with_lists.items():
            if name in _compat.CONFIG_FIELDS_ANY_RELEASE:  # launched as the field's default otherwise
                raise ValueError(
                    f"ConfigSpace: {name!r} is a field of triton.Config (a launch option), not a kernel "
                    f"meta-parameter: give its values as ConfigSpace(..., {name}=[...]), not in "
                    "kwargs_with_lists"
                )
            lists[name] = self._as_values(name, values)
        # read-only, as the conditions (tuples): a space is fixed when made (its size and listing
        # are computed once)
        self.kwargs_with_lists: Mapping[str, tuple[Any, ...]] = types.MappingProxyType(lists)
        self.options: dict[str, tuple[Any, ...]] = {}
        self.dropped_options: list[str] = []
        for name, values in option_lists.items():
            if values is None:
                continue
            if name not in _compat.CONFIG_FIELDS:
                if name in _compat.CONFIG_FIELDS_ANY_RELEASE:
                    warn_once(
                        DejavuConfigWarning,
                        name,
                        "ConfigSpace: triton %s has no Config field %r; its list is ignored",
                        _compat.TRITON_VERSION_STR,
                        name,
                    )
                    self.dropped_options.append(name)
                    continue
                known = ", ".join(sorted(_compat.CONFIG_FIELDS_ANY_RELEASE))
                raise TypeError(
                    f"ConfigSpace got an unknown Config field {name!r}; Config fields are: {known}"
                )
            self.options[name] = self._as_values(name, values)
            _check_launch_option(name, self.options[name])
        # triton-dejavu crosses the Config fields in alphabetical order (of the names)
        self.options = dict(sorted(self.options.items()))
        if self.raw_size > 1:  # one config is launched untimed; several are keyed by config
            for name, values in self.parameters.items():
                if len(values) == 1:  # (longer lists were checked by _as_values)
                    _refuse_unhashable(name, values)
        self.kwarg_conditions: tuple[KwargCondition, ...] = _as_conditions(
            "kwarg_conditions", kwarg_conditions
        )
        self.conditions: tuple[ConfigCondition, ...] = _as_conditions("conditions", conditions)
        self.pre_hook = pre_hook
        self._size: int | None = None
        self._listed: dict[PlatformCheck | None, list[Config]] = {}
        if next(iter(self), None) is None:
            raise ValueError(
                f"the config space is empty after its conditions ({self.raw_size} points, none kept): "
                f"check kwarg_conditions and conditions{self._none_returned()}"
            )

    @staticmethod
    def _as_values(name: str, values: Any) -> tuple[Any, ...]:
        if hasattr(values, "tolist") and not isinstance(values, (str, bytes)):  # a numpy array
            values = values.tolist()
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise TypeError(f"ConfigSpace: {name} must be a list of values, got {values!r}")
        if len(values) == 0:
            raise ValueError(f"ConfigSpace: {name} has an empty list of values")
        if len(values) > 1:
            _refuse_unhashable(name, values)  # before comparing them (arrays compare elementwise)
        for i, value in enumerate(values):
            for other in values[:i]:
                if other == value:  # Config compares them equal: one config, timed twice, one timing kept
                    alike = "twice" if type(other) is type(value) else f"as {other!r} and {value!r}"
                    raise ValueError(
                        f"ConfigSpace: {name} lists the value {value!r} {alike}; triton.Config takes "
                        "equal values for one config: list each once"
                    )
        return tuple(values)

    def _none_returned(self) -> str:
        """A hint when a condition returns None for the first point (a missing ``return``)."""
        first = self.point_to_config([0] * len(self.parameters))
        asked = [(c, dict(first.kwargs)) for c in self.kwarg_conditions] + [
            (c, first) for c in self.conditions
        ]
        silent = [getattr(c, "__name__", repr(c)) for c, arg in asked if c(arg) is None]
        return f" ({', '.join(silent)} returned None: a missing return?)" if silent else ""

    # --- triton-dejavu's attributes -----------------------------------------------------------------

    @property
    def kwargs(self) -> dict[str, list[Any]]:
        """Each meta-parameter's list of values (triton-dejavu's name; a copy)."""
        return {name: list(values) for name, values in self.kwargs_with_lists.items()}

    @property
    def kwarg_keys(self) -> list[str]:
        return list(self.kwargs_with_lists)

    def get_global_pre_hook(self) -> Callable[..., Any] | None:
        return self.pre_hook

    def __getattr__(self, name: str) -> list[Any]:
        """A Config field's list (``space.num_warps``): the one given, else ``[its default]``."""
        options = self.__dict__.get("options")
        if options is None or name not in _compat.CONFIG_FIELDS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return list(options.get(name, (_compat.CONFIG_FIELDS[name],)))

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _compat.CONFIG_FIELDS or name in ("kwargs", "kwarg_keys"):
            raise AttributeError(
                f"ConfigSpace.{name} cannot be changed: a space is fixed when made; build a new ConfigSpace"
            )
        super().__setattr__(name, value)

    # --- structure ------------------------------------------------------------------------------

    @property
    def parameters(self) -> dict[str, tuple[Any, ...]]:
        """Every dimension in order: the kwargs first, then the Config fields."""
        return {**self.kwargs_with_lists, **self.options}

    @property
    def raw_size(self) -> int:
        """Size of the cross product, before any condition."""
        return math.prod(len(v) for v in self.parameters.values())

    def point_to_config(self, point: Sequence[int]) -> Config:
        """The Config at a tuple of indices (one per dimension), whether or not it is valid."""
        dims = self.parameters
        if len(point) != len(dims):
            raise ValueError(f"a point has {len(dims)} indices, got {len(point)}")
        values = [vals[i] for vals, i in zip(dims.values(), point)]
        n_kwargs = len(self.kwargs_with_lists)
        kwargs = dict(zip(self.kwargs_with_lists, values[:n_kwargs]))
        options = dict(zip(self.options, values[n_kwargs:]))
        return Config(kwargs, pre_hook=self.pre_hook, **options)

    def config_to_point(self, config: Config) -> tuple[int, ...] | None:
        """The indices of a Config's values, or None if some value is not in the lists."""
        point: list[int] = []
        for name, values in self.parameters.items():
            if name in self.kwargs_with_lists and name not in config.kwargs:
                return None  # not None, the value a list may hold
            value = config.kwargs[name] if name in self.kwargs_with_lists else getattr(config, name, None)
            equal = [i for i, v in enumerate(values) if v == value]
            if not equal:
                return None
            # 1, 1.0 and True are equal, yet different configs: among equal values, the same type
            point.append(next((i for i in equal if type(values[i]) is type(value)), equal[0]))
        return tuple(point)

    def rejection(self, config: Config, platform_check: PlatformCheck | None = None) -> str | None:
        """Why a Config is not part of the space (a condition, or the platform if a check is given)."""
        for cond in self.kwarg_conditions:
            if not _kwarg_condition(cond, dict(config.kwargs)):
                return f"kwarg condition {getattr(cond, '__name__', cond)!s}"
        for cond in self.conditions:
            if not cond(config):
                return f"condition {getattr(cond, '__name__', cond)!s}"
        if platform_check is not None:
            return platform_check(config)
        return None

    def is_valid(self, config: Config, platform_check: PlatformCheck | None = None) -> bool:
        return self.rejection(config, platform_check) is None

    def decode(self, point: Sequence[int], platform_check: PlatformCheck | None = None) -> Config | None:
        """The Config at a point, or None when conditions (or the platform) exclude it."""
        config = self.point_to_config(point)
        return config if self.is_valid(config, platform_check) else None

    # --- listing ------------------------------------------------------------------------------------

    def _iter(self, platform_check: PlatformCheck | None) -> Iterator[Config]:
        """The valid Configs in cross-product order; each kwarg condition is asked once per
        combination of the kwargs (as triton-dejavu asks them), not once per point."""
        names, fields = list(self.kwargs_with_lists), list(self.options)
        options = [dict(zip(fields, chosen)) for chosen in itertools.product(*self.options.values())]
        for combination in itertools.product(*self.kwargs_with_lists.values()):
            if not all(
                _kwarg_condition(cond, dict(zip(names, combination))) for cond in self.kwarg_conditions
            ):
                continue
            for chosen in options:
                config = Config(dict(zip(names, combination)), pre_hook=self.pre_hook, **chosen)
                if all(cond(config) for cond in self.conditions) and (
                    platform_check is None or platform_check(config) is None
                ):
                    yield config

    def __iter__(self) -> Iterator[Config]:
        return self._iter(None)

    def __len__(self) -> int:
        """The number of points the conditions keep (counted once, without keeping them)."""
        if self._size is None:
            self._size = sum(1 for _ in self)
        return self._size

    def __bool__(self) -> bool:
        """Always true (a space that keeps no point is refused when made), without counting it."""
        return True

    def configs(self, platform_check: PlatformCheck | None = None) -> list[Config]:
        """All valid Configs (for a platform, if a check is given), in cross-product order; listed
        once per platform check, then kept."""
        listed = self._listed.get(platform_check)
        if listed is None:
            listed = self._listed[platform_check] = list(self._iter(platform_check))
        return listed

    def generate_config_list(self) -> list[Config]:
        """:meth:`configs` under the name triton-dejavu uses, as a new list (changing it leaves the
        space alone)."""
        return list(self.configs())

    def __repr__(self) -> str:
        dims = ", ".join(f"{k}={list(v)}" for k, v in self.parameters.items())
        return f"ConfigSpace({dims}; {len(self.kwarg_conditions) + len(self.conditions)} conditions)"


#: Launch options whose values Triton's compilers take as whole numbers: the least value each
#: accepts, and whether it must be a power of 2 (``num_warps``: the NVIDIA and AMD backends assert
#: it). ``maxnreg`` may also be None (no limit).
_WHOLE_OPTIONS = {
    "num_warps": (1, True),
    "num_ctas": (1, False),
    "num_stages": (0, False),
    "maxnreg": (1, False),
}


def _check_launch_option(name: str, values: Sequence[Any]) -> None:
    """Refuse a value of a launch option that no compile could take (``num_warps=[0, 3, "8"]``),
    when the space is made: otherwise every point with it would compile, fail and be ruled out."""
    if name not in _WHOLE_OPTIONS:
        return
    least, power_of_two = _WHOLE_OPTIONS[name]
    for value in values:
        if value is None and name == "maxnreg":
            continue
        whole = isinstance(value, int) and not isinstance(value, bool)
        if not whole or value < least or (power_of_two and value & (value - 1)):
            wanted = "a power of 2" if power_of_two else f"a whole number >= {least}"
            raise ValueError(f"ConfigSpace: {name} lists {value!r}, which is not {wanted}")


def _refuse_unhashable(name: str, values: Sequence[Any]) -> None:
    """A ``TypeError`` for a value ``triton.Config`` cannot hash: a space of such configs failed at its
    first launch deep inside tuning (timings and decisions are kept by config, as upstream keeps them)."""
    for value in values:
        try:
            hash(value)
        except TypeError:
            raise TypeError(
                f"ConfigSpace: {name} lists {value!r:.60}, which cannot be hashed: the configs of a "
                "space are told apart by their values, which must be hashable (a tuple instead of a list)"
            ) from None


def _kwarg_condition(cond: KwargCondition, kwargs: dict[str, Any]) -> bool:
    """``cond(kwargs)``; a KeyError for a Config field (``num_warps``: a condition that belongs in
    ``conditions``) says so."""
    try:
        return bool(cond(kwargs))
    except KeyError as exc:
        if exc.args and exc.args[0] in _compat.CONFIG_FIELDS_ANY_RELEASE:
            raise ValueError(
                f"ConfigSpace: kwarg condition {getattr(cond, '__name__', cond)!s} reads {exc.args[0]!r}; "
                "kwarg_conditions get the meta-parameters only: use conditions=[lambda config: "
                f"config.{exc.args[0]} ...] for a Config field"
            ) from exc
        raise


def _as_conditions(name: str, conditions: Any) -> tuple[Any, ...]:
    """The condition callables, as a tuple (None: none)."""
    if conditions is None:
        return ()
    if callable(conditions) or isinstance(conditions, (str, bytes)) or not isinstance(conditions, Sequence):
        raise TypeError(
            f"ConfigSpace: {name} must be a list of callables, got {conditions!r} (triton-dejavu "
            "before 0.7.5 took pre_hook as the third positional argument: pass pre_hook= by keyword)"
        )
    for cond in conditions:
        if not callable(cond):
            raise TypeError(f"ConfigSpace: {name} must be callables, got {cond!r}")
    return tuple(conditions)


@functools.lru_cache(maxsize=8)
def platform_check_for(backend: str, capability: tuple[int, int] | None) -> PlatformCheck:
    """Reject Config options the platform cannot run (one check object per platform)."""

    def check(config: Config) -> str | None:
        if backend == "interpreter":
            return None  # the interpreter ignores launch options
        num_ctas = getattr(config, "num_ctas", 1) or 1
        if num_ctas > 1 and not (backend == "cuda" and capability is not None and capability >= (9, 0)):
            return "num_ctas > 1 needs an NVIDIA GPU of compute capability 9.0 or newer"
        if getattr(config, "maxnreg", None) is not None and backend != "cuda":
            return "maxnreg is only supported on NVIDIA GPUs"
        return None

    return check

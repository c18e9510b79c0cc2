"""The decorator's arguments checked against the kernel they decorate, at decoration: names of kernel
arguments (``key``, ``reset_to_zero``, ``restore_value``, ``check_outputs``), the parameters configs
set, and a warning for arguments that have no effect with the others."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .. import _compat
from .._compat import Config
from .._log import DejavuConfigWarning, warn_once
from ..store.identity import callable_name
from .config_space import ConfigSpace
from .settings import TunerSettings


def jit_arg_names(fn: Any) -> list[str]:
    """The argument names of the ``@triton.jit`` kernel ``fn`` (or of a ``@triton.heuristics`` over
    one); anything else (a plain function) is a ``TypeError`` saying where ``@triton.jit`` goes."""
    if not hasattr(fn, "arg_names"):
        raise TypeError(
            f"autotune() decorates a @triton.jit kernel, got {fn!r:.60}: put @triton.jit under @autotune(...)"
        )
    return fn.arg_names


def argument_names(arg_names: list[str], what: str, names: Sequence[str] | str | None) -> list[str] | None:
    """``names`` as a list of kernel argument names; a string that is one argument's name is that
    argument. Errors: any other string (``TypeError``), names that are not arguments (``ValueError``,
    upstream 3.9's text)."""
    if names is None:
        return None
    if isinstance(names, str):
        if names not in arg_names:
            raise TypeError(
                f"{what} must be a list of argument names, not the string {names!r}; write "
                f"{what}=[{names!r}] for one argument or {what}=['a', 'b'] for several "
                f"(the kernel's arguments are: {', '.join(arg_names)})"
            )
        return [names]
    if not isinstance(names, Iterable):
        raise TypeError(f"{what} must be a list of argument names, got {names!r:.40}")
    names = list(names)
    unknown = [n for n in names if n not in arg_names]
    if unknown:
        raise ValueError(
            f"{what} contains names that are not kernel arguments: {', '.join(map(str, unknown))}. "
            f"Valid argument names are: {', '.join(arg_names)}."
        )
    return names


#: The keys of ``prune_configs_by`` (upstream's; it ignores any other).
PRUNE_KEYS = ("early_config_prune", "perf_model", "top_k")


def check_callables(
    function: Any, pre_hook: Any, post_hook: Any, prune_configs_by: Mapping[str, Any] | None
) -> None:
    """The hooks and ``prune_configs_by`` checked at decoration: a value that is no function, or no
    dict, is a ``TypeError``; a key ``prune_configs_by`` does not know (a typo, which upstream ignores:
    nothing pruned) is a :class:`DejavuConfigWarning` naming the closest one (upstream accepts it, so
    it is no error), once per kernel (``function``) and key."""
    for name, hook in (("pre_hook", pre_hook), ("post_hook", post_hook)):
        if hook is not None and not callable(hook):
            raise TypeError(f"{name} must be callable, got {hook!r:.40}")
    if prune_configs_by is None:
        return
    if not isinstance(prune_configs_by, Mapping):
        raise TypeError(
            f"prune_configs_by must be a dict with any of {', '.join(PRUNE_KEYS)}, "
            f"got a {type(prune_configs_by).__name__}"
        )
    place = callable_name(function)
    for name, value in prune_configs_by.items():
        if name not in PRUNE_KEYS:
            close = difflib.get_close_matches(str(name), PRUNE_KEYS, n=1)
            warn_once(
                DejavuConfigWarning,
                f"{place}:prune_configs_by:{name}",
                "%s: prune_configs_by has an unknown key %r%s, which is ignored (its keys are %s)",
                place,
                name,
                f" (did you mean {close[0]!r}?)" if close else "",
                ", ".join(PRUNE_KEYS),
            )
        elif name != "top_k" and value is not None and not callable(value):
            raise TypeError(f"prune_configs_by[{name!r}] must be callable, got {value!r:.40}")


def warn_ignored(function: Any, settings: TunerSettings, interpreted: bool) -> None:
    """Arguments given that have no effect with the others (or under the interpreter): said once
    per kernel (its module and name) and set of arguments, at decoration."""
    place = callable_name(function)
    overridden = settings.timing.overridden()
    if overridden:
        warn_once(
            DejavuConfigWarning,
            f"{place}:{overridden}",
            "%s: do_bench is given, so %s no effect: your do_bench times every candidate "
            "(triton.autotune ignores do_bench when warmup, rep or use_cuda_graph is given)",
            place,
            _have(overridden),
        )
    unused = settings.timing.unused_policy_fields()
    cpu_ignores = settings.timing.ignored_by_interpreter() if interpreted else []
    if cpu_ignores:  # timing= as a whole, so not its fields again below
        warn_once(
            DejavuConfigWarning,
            f"{place}:{cpu_ignores}",
            "%s: %s no effect under the interpreter (TRITON_INTERPRET=1): candidates are timed on the "
            "CPU, with warmup and rep only",
            place,
            _have(cpu_ignores),
        )
    elif unused:
        warn_once(
            DejavuConfigWarning,
            f"{place}:{unused}",
            "%s: timing=TimingPolicy(%s) %s: %s",
            place,
            ", ".join(unused),
            "has no effect" if len(unused) == 1 else "have no effect",
            "finalists=0 times every candidate in one stage with triton.testing.do_bench(warmup, rep)"
            if settings.timing.policy.finalists == 0
            else "with warmup, rep or use_cuda_graph given, the finalists are timed by triton.testing's "
            "do_bench (do_bench_cudagraph) with those, as upstream times every candidate",
        )
    unchecked = settings.numerical_check.unused()
    if unchecked:
        warn_once(
            DejavuConfigWarning,
            f"{place}:{unchecked}",
            "%s: numerical_check=False, so %s no effect: no candidate's outputs are checked",
            place,
            _have(unchecked),
        )
    if settings.ignored_budget:
        warn_once(
            DejavuConfigWarning,
            f"{place}:{settings.ignored_budget}",
            "%s: %s no effect without use_random_search=True or use_bo=True: exhaustive search "
            "measures every candidate",
            place,
            _have(settings.ignored_budget),
        )


def warn_tuned_key(function: Any, key: Sequence[str], tuned: Iterable[str]) -> None:
    """Key names that configs set: never passed at launch (a call that passes them launches as given,
    untuned), so they separate no keys; said once per kernel, at decoration."""
    tuned = set(tuned)
    names = [name for name in key if name in tuned]
    if names:
        place = callable_name(function)
        warn_once(
            DejavuConfigWarning,
            f"{place}:key:{names}",
            "%s: key names %s, which the configs set: a tuned meta-parameter is not passed at launch, "
            "so it is left out of the tuning key and every call shares one tuning; key the arguments "
            "whose values change the best config (sizes, strides, flags)",
            place,
            ", ".join(names),
        )


def _have(names: Sequence[str]) -> str:
    return f"{', '.join(names)} {'has' if len(names) == 1 else 'have'}"


def config_list(configs: Iterable[Config] | None) -> list[Config] | None:
    """``configs`` as a list (an iterator is read once here); a single ``Config``, a string or a
    mapping is a ``TypeError``."""
    if configs is None:
        return None
    if isinstance(configs, (Config, str, bytes, Mapping)) or not isinstance(configs, Iterable):
        hint = "; write configs=[config]" if isinstance(configs, Config) else ""
        raise TypeError(f"configs must be a list of triton.Config, got a {type(configs).__name__}{hint}")
    return list(configs)


def check_configs(
    fn: Any, arg_names: list[str], configs: Sequence[Config] | None, config_space: ConfigSpace | None
) -> None:
    """A config list or a ``ConfigSpace`` (not both), whose parameters are not kernel arguments."""
    if configs and config_space is not None:
        raise ValueError("give either configs or config_space, not both")
    if config_space is not None and not isinstance(config_space, ConfigSpace):
        raise TypeError(f"config_space must be a ConfigSpace, got {type(config_space).__name__}")
    for i, config in enumerate(configs or ()):
        if not isinstance(config, Config):
            raise TypeError(f"configs[{i}] is a {type(config).__name__}, not a triton.Config")
        _refuse_unhashable(i, config, len(configs or ()))
    _check_config_parameters(
        _compat.python_function(fn).__name__,
        arg_names,
        [config_space.kwargs_with_lists] if config_space is not None else [c.kwargs for c in configs or ()],
    )


def unknown_parameters(arg_names: Sequence[str], names: Iterable[str]) -> list[str]:
    """The ``names`` (a config's parameters) that are neither a kernel argument nor a compile option
    of some backend: a launch with them fails (Triton: "Keyword argument ... was specified but
    unrecognised")."""
    unknown = [name for name in names if name not in arg_names]
    if not unknown:
        return []
    known = _compat.compile_option_names()
    return [name for name in unknown if name not in known]


def _refuse_unhashable(i: int, config: Config, n_configs: int) -> None:
    """Configs to tune are told apart by hashing them (as upstream keeps its timings): one holding a
    list failed deep inside the first tuning run; a single config is launched untimed."""
    if n_configs < 2:
        return
    try:
        hash(config)
    except TypeError as exc:
        raise TypeError(
            f"configs[{i}] holds a value that cannot be hashed ({exc}): the configs to tune are told "
            "apart by their values, which must be hashable (a tuple instead of a list)"
        ) from None


def _check_config_parameters(kernel: str, arg_names: list[str], parameters: list[Iterable[str]]) -> None:
    """Every name a config sets is a kernel argument or a compile option of some backend."""
    for i, names in enumerate(parameters):
        unknown = unknown_parameters(arg_names, names)
        if unknown:
            raise ValueError(
                f"configs[{i}] sets {unknown[0]!r}, which is not an argument of {kernel} "
                f"(its arguments are: {', '.join(arg_names)}) nor a compile option"
            )

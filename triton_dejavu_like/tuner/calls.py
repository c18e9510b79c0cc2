"""A launch's arguments checked against the kernel's parameters at the first call of a key (a miss),
before anything is looked up, tuned or stored.

A plain ``@triton.jit`` launch reports a call that binds wrongly at once (``TypeError: k() missing 1
required positional argument: 'n'``). Through an autotuner the same call would reach the tuning run,
where every candidate fails alike (or, for a call that leaves out a key argument, is tuned under a key
that lacks its value): such calls are refused here, naming the argument. A decided key's launch
(the hot path) is not checked again: its launch is the plain one, which reports the same mistakes.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .. import _compat


class CallCheck:
    """How a call must bind to the kernel's parameters: at most one value each, every parameter
    without a default given, except those the configs (or a ``@triton.heuristics`` under the tuner)
    set, which are not passed positionally."""

    def __init__(self, fn: Any, arg_names: Sequence[str]) -> None:
        function = _compat.python_function(fn)
        self.kernel = function.__name__
        self.arg_names = tuple(arg_names)
        self.positions = {name: i for i, name in enumerate(self.arg_names)}
        parameters = inspect.signature(function).parameters
        self.required = tuple(
            name
            for name in self.arg_names
            if name not in parameters or parameters[name].default is inspect.Parameter.empty
        )
        self.set_by_heuristics = frozenset(name for values in _compat.heuristics_under(fn) for name in values)

    def check(self, args: Sequence[Any], kwargs: Mapping[str, Any], tuned: Collection[str]) -> None:
        """A ``TypeError`` naming the argument when ``args`` and ``kwargs`` do not bind to the kernel
        with ``tuned`` (the meta-parameters the configs set) left to the autotuner."""
        given = len(args)
        if given > len(self.arg_names):
            raise TypeError(
                f"{self.kernel}() takes {len(self.arg_names)} arguments but {given} were given "
                f"(its arguments are: {', '.join(self.arg_names)})"
            )
        for position, name in enumerate(self.arg_names[:given]):
            if name in tuned:
                raise TypeError(
                    f"{self.kernel}() got the tuned meta-parameter {name!r} as positional argument "
                    f"{position + 1}: the configs set it, so leave it out of the call, or pass every "
                    f"tuned meta-parameter ({', '.join(sorted(tuned))}) by keyword to launch your own config"
                )
        for name in kwargs:
            if self.positions.get(name, given) < given:
                raise TypeError(f"{self.kernel}() got multiple values for argument {name!r}")
        missing = [
            name
            for name in self.required
            if self.positions[name] >= given
            and name not in kwargs
            and name not in tuned
            and name not in self.set_by_heuristics
        ]
        if missing:
            raise TypeError(
                f"{self.kernel}() missing {len(missing)} required argument{'s' if len(missing) > 1 else ''}: "
                f"{', '.join(map(repr, missing))}"
            )

    def check_options(self, conflicting: Collection[str], tuned: Collection[str]) -> None:
        """A ``TypeError`` (upstream's, at its launch after tuning) when the call passes options
        (``num_warps=``) that every config sets: ``conflicting``."""
        if not conflicting:
            return
        names = sorted(conflicting)
        hint = (
            f", or pass every tuned meta-parameter ({', '.join(sorted(tuned))}) too to launch your own config"
            if tuned
            else ""
        )
        raise TypeError(
            f"{self.kernel}() got multiple values for keyword argument {names[0]!r}: every config sets "
            f"{', '.join(names)}; leave {'it' if len(names) == 1 else 'them'} out of the call to launch "
            f"the tuned value{hint}"
        )

"""The tuning key: which call values select a tuning, in the forms the tuner needs.

Upstream's rule: the values of the ``key`` arguments that were passed (in key order; a key argument
left at its default is skipped), then ``str(dtype)`` of every argument that has a dtype,
positional then keyword (not only key arguments); ``ignore_dtypes`` leaves the dtypes out.

A :class:`KeyPlan` computes, from one call:

- :meth:`KeyPlan.lookup`: the in-memory lookup tuple, with dtype *objects* (no string formatting on
  the hot path); equal calls give equal tuples (a NaN, equal to no other, is made the one
  :data:`NAN` by a miss, which then finds the call's launch; the key's values likewise);
- :meth:`KeyPlan.key`: the :class:`TuningKey`, upstream's tuple (dtype strings, what ``.cache`` is
  keyed by and what ``fallback_heuristic`` receives) with its stored form (:attr:`TuningKey.id`).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..codec import EncodingError, key_id

#: Types that never carry a dtype: skipped without an attribute lookup on the hot path.
NO_DTYPE = frozenset({int, float, bool, str, type(None)})
Tensor = torch.Tensor
#: The one NaN of the keys a miss files: a NaN equals no other (a fresh NaN per call would miss every
#: table and add an entry each time), so every NaN key value is filed as this one object.
NAN = float("nan")


def _is_nan(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, int) and value != value


def same_nan(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """``values`` with every NaN replaced by :data:`NAN` (the tuple itself when it holds none)."""
    if not any(_is_nan(v) for v in values):
        return values
    return tuple(NAN if _is_nan(v) else v for v in values)


@dataclass(frozen=True)
class TuningKey:
    """One tuning key: upstream's tuple, and the string it is stored under (None: not storable)."""

    values: tuple[Any, ...]
    id: str | None = field(compare=False)
    #: Why the key cannot be stored, when :attr:`id` is None.
    problem: str | None = field(default=None, compare=False)

    @classmethod
    def of(cls, values: tuple[Any, ...]) -> TuningKey:
        try:
            return cls(values, key_id(values))
        except (EncodingError, ValueError) as exc:  # ValueError: e.g. an int too long to print
            return cls(values, None, str(exc))


class KeyPlan:
    """How to read the tuning key from a call's arguments."""

    def __init__(self, arg_names: Sequence[str], key: Sequence[str], *, ignore_dtypes: bool) -> None:
        self.arg_names = tuple(arg_names)
        self.names = tuple(key)
        self.arg_set = frozenset(arg_names)
        self.n_args = len(arg_names)
        self.plan = tuple((name, self.arg_names.index(name)) for name in key)
        self.positions = tuple(pos for _, pos in self.plan)
        self.last_position = max(self.positions, default=-1)
        self.with_dtypes = not ignore_dtypes

    def _values(self, args: tuple[Any, ...], kwargs: dict[str, Any], dtype_strings: bool) -> tuple[Any, ...]:
        n = len(args)
        key = []
        for name, pos in self.plan:
            if pos < n:
                key.append(args[pos])
            elif name in kwargs:
                key.append(kwargs[name])
        if self.with_dtypes:
            named = [*args[: self.n_args], *(v for k, v in kwargs.items() if k in self.arg_set)]
            for arg in named:
                if type(arg) not in NO_DTYPE and hasattr(arg, "dtype"):
                    key.append(str(arg.dtype) if dtype_strings else arg.dtype)
        return tuple(key)

    def misfit(self, key: tuple[Any, ...]) -> str | None:
        """Why ``key`` (read from elsewhere) cannot be a key this plan builds, or None when it can be:
        at most one value per key argument (those passed), then only dtype strings, one per argument
        at most (none with ``ignore_dtypes``)."""
        dtypes = key[len(self.names) :]
        most = self.n_args if self.with_dtypes else 0
        if len(dtypes) <= most and all(isinstance(d, str) for d in dtypes):
            return None
        expected = f"the values of {', '.join(self.names) or 'no argument'}"
        if self.with_dtypes:
            expected += ", then the dtypes of its tensor arguments"
        return f"the key does not fit this kernel's ({expected})"

    def lookup(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The in-memory lookup tuple (dtype objects)."""
        return self._values(args, kwargs, dtype_strings=False)

    def key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TuningKey:
        """The tuning key as upstream builds it, with its stored form."""
        return TuningKey.of(same_nan(self._values(args, kwargs, dtype_strings=True)))

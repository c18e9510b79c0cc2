"""Search strategies over a tuning space: exhaustive, random, and Bayesian optimisation (SMAC)."""

from __future__ import annotations

import importlib.util
import sys

from .base import (
    DEFAULT_TIME_CAP_S,
    BatchSearch,
    Budget,
    Strategy,
    exhaustive_is_cheaper,
)
from .drivers import SearchRun, drive, drive_batched
from .exhaustive import Exhaustive
from .random_search import RandomSearch
from .space import SearchSpace

BO_EXTRA_HINT = "pip install 'triton_dejavu_like[bo]'"


class MissingExtraError(ImportError):
    """An optional dependency needed for the requested feature is not installed."""


def require_smac(*, load: bool = True) -> None:
    """Raise :class:`MissingExtraError` naming the ``bo`` extra when SMAC is not installed.

    ``load=False`` only looks for the package (the decorator: a process that restores every key
    never pays SMAC's import, seconds); ``load=True`` imports it, leaving logging and warnings
    configuration as it was (see ``_global_state``)."""
    from ._global_state import isolated

    try:
        if not load:
            if sys.modules.get("smac", False) is None or importlib.util.find_spec("smac") is None:
                raise ImportError("No module named 'smac'")
            return
        with isolated():
            import smac  # noqa: F401
    except (ImportError, ValueError) as exc:
        raise MissingExtraError(
            f"use_bo=True needs SMAC, which is not installed ({exc}). Install the extra: {BO_EXTRA_HINT}"
        ) from exc


def make_strategy(name: str, label: str = "") -> Strategy:
    """The strategy called ``name``; ``label`` (the kernel's name) is what its warnings name."""
    if name == "exhaustive":
        return Exhaustive()
    if name == "random":
        return RandomSearch()
    if name == "bayesian":
        require_smac(load=False)  # the strategy imports SMAC in the background when it starts
        from .bayesian import BayesianOptimization

        return BayesianOptimization(label=label)
    raise ValueError(f"unknown search strategy {name!r}")


__all__ = [
    "BO_EXTRA_HINT",
    "DEFAULT_TIME_CAP_S",
    "BatchSearch",
    "Budget",
    "Exhaustive",
    "MissingExtraError",
    "RandomSearch",
    "SearchRun",
    "SearchSpace",
    "Strategy",
    "drive",
    "drive_batched",
    "exhaustive_is_cheaper",
    "make_strategy",
    "require_smac",
]

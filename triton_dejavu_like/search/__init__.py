"""Search strategies over a tuning space: exhaustive, random, and Bayesian optimisation (SMAC)."""

from __future__ import annotations

from .base import (
    DEFAULT_TIME_CAP_S,
    BatchSearch,
    Budget,
    BudgetExhausted,
    SearchRun,
    SearchSpace,
    Strategy,
    drive,
    drive_batched,
    exhaustive_is_cheaper,
)
from .exhaustive import Exhaustive
from .random_search import RandomSearch

BO_EXTRA_HINT = "pip install 'triton_dejavu_like[bo]'"


class MissingExtraError(ImportError):
    """An optional dependency needed for the requested feature is not installed."""


def require_smac() -> None:
    """Raise :class:`MissingExtraError` naming the ``bo`` extra when SMAC cannot be imported.

    The import leaves logging and warnings configuration as it was (see ``_global_state``)."""
    from ._global_state import isolated

    try:
        with isolated():
            import smac  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(
            f"use_bo=True needs SMAC, which is not installed ({exc}). Install the extra: {BO_EXTRA_HINT}"
        ) from exc


def make_strategy(name: str) -> Strategy:
    if name == "exhaustive":
        return Exhaustive()
    if name == "random":
        return RandomSearch()
    if name == "bayesian":
        require_smac()
        from .bayesian import BayesianOptimization

        return BayesianOptimization()
    raise ValueError(f"unknown search strategy {name!r}")


__all__ = [
    "BO_EXTRA_HINT",
    "DEFAULT_TIME_CAP_S",
    "BatchSearch",
    "Budget",
    "BudgetExhausted",
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

"""The one place that decides how a tuning run's candidates are measured: in this process or in an
isolated worker, with or without the numerical check."""

from __future__ import annotations

from .evaluate import Evaluator, InProcessEvaluator
from .isolation.parent import IsolatedEvaluator
from .launch import LaunchContext
from .recipe import KernelRecipe


def open_evaluator(recipe: KernelRecipe, ctx: LaunchContext) -> Evaluator:
    """An evaluator for the call in ``ctx`` (use it as a context manager: it may hold a worker)."""
    if recipe.isolation.active():
        return IsolatedEvaluator(ctx, recipe=recipe)
    return recipe.checked(InProcessEvaluator(ctx))

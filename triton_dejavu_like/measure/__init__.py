"""Measuring candidates: benchmarkers, evaluators (in process, isolated, checked), compiling ahead."""

from __future__ import annotations

from .bench import QUANTILES, Benchmarker, TimingPolicy, make_benchmarker
from .evaluate import Evaluator, InProcessEvaluator
from .factory import open_evaluator
from .launch import Failure, LaunchContext, TuningStopped, make_kernel_call, one_line_reason
from .recipe import KernelRecipe, TimingSettings

__all__ = [
    "QUANTILES",
    "Benchmarker",
    "Evaluator",
    "Failure",
    "InProcessEvaluator",
    "KernelRecipe",
    "LaunchContext",
    "TimingPolicy",
    "TimingSettings",
    "TuningStopped",
    "make_benchmarker",
    "make_kernel_call",
    "one_line_reason",
    "open_evaluator",
]

"""Telling the user and tools what a miss decided: ``TRITON_PRINT_AUTOTUNING``, debug logging, and
Triton's autotuning listener (3.8+)."""

from __future__ import annotations

import sys
from typing import Any

from .. import _compat
from .._log import log
from ..codec import describe_config
from .tuning import Outcome


def report(
    kernel_name: str, fn: Any, key: tuple[Any, ...], outcome: Outcome, *, strategy: str, where: str
) -> None:
    """One summary line per decision when ``TRITON_PRINT_AUTOTUNING=1`` (as upstream prints it),
    a debug log record, and the listener call for tuned and restored keys."""
    if outcome.source == "single":
        return
    if _compat.print_autotuning():
        how = {
            "tuned": f"tuned ({strategy}, {len(outcome.configs_timings)} configs benchmarked)",
            "restored": f"restored from {where}",
            "heuristic": "fallback heuristic, no tuning",
            "nearest": "config of the nearest tuned key, no tuning",
            "default": "first config, no tuning",
        }[outcome.source]
        sys.stdout.write(
            f"Triton autotuning for function {kernel_name}, with key as {key}, finished after "
            f"{outcome.duration_s:.2f}s, {how}, best config selected: {describe_config(outcome.config)};\n"
        )
        sys.stdout.flush()
    log.debug("%s: key %r -> %s (%s)", kernel_name, key, describe_config(outcome.config), outcome.source)
    listener = _compat.autotuning_listener()
    if listener is not None and outcome.source in ("tuned", "restored"):
        listener(
            fn=_compat.jit_function(fn) or fn,
            key=key,
            best_config=outcome.config,
            configs_timings=outcome.configs_timings,
            duration=outcome.duration_s if outcome.source == "tuned" else None,
            cache_hit=outcome.source == "restored",
        )

"""Telling the user and tools what a miss decided: ``TRITON_PRINT_AUTOTUNING``, debug logging,
Triton's autotuning listener (3.8+), and decision observers (:func:`observe_decisions`, for tools
such as ``tune`` that need to know whether a call tuned or restored)."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import _compat
from .._log import log
from ..codec import describe_config
from .trial import Outcome


@dataclass(frozen=True)
class Decision:
    """What one miss decided: the kernel, its tuning key, and where the config came from.

    ``source``: "tuned", "restored", "heuristic", "nearest" or "default" (tuning off), or "single"
    (pruning left one config);
    ``where``: the store that holds the kernel's results (a cache file path, or "memory").
    """

    kernel: str
    key: tuple[Any, ...]
    source: str
    config: Any
    duration_s: float
    where: str


_observers: list[Callable[[Decision], None]] = []
_observers_lock = threading.Lock()


@contextlib.contextmanager
def observe_decisions() -> Iterator[list[Decision]]:
    """Within the block, every decision of every autotuner in this process (any thread) is appended
    to the yielded list. Hits of the in-memory cache decide nothing and are not reported."""
    seen: list[Decision] = []
    collect = seen.append  # one bound method per block: removed by identity, however many blocks nest
    with _observers_lock:
        _observers.append(collect)
    try:
        yield seen
    finally:
        with _observers_lock:
            _observers.remove(collect)


def _notify(decision: Decision) -> None:
    with _observers_lock:
        observers = list(_observers)
    for observer in observers:
        observer(decision)


def _measured(outcome: Outcome) -> str:
    """How many candidates a tuning benchmarked, and how many it ruled out (a compile or launch
    error, a bad time): counted apart, so that a run where most candidates fail says so."""
    ruled_out = sum(1 for config in outcome.configs_timings if config in outcome.failures)
    timed = len(outcome.configs_timings) - ruled_out
    benchmarked = f"{timed} config{'' if timed == 1 else 's'} benchmarked"
    return f"{benchmarked}, {ruled_out} ruled out" if ruled_out else benchmarked


def report(
    kernel_name: str,
    fn: Any,
    key: tuple[Any, ...],
    outcome: Outcome,
    *,
    strategy: str,
    where: str,
    answered: dict[Any, Any],
) -> None:
    """One summary line per decision when ``TRITON_PRINT_AUTOTUNING=1`` (as upstream prints it),
    a debug log record, the listener call for tuned and restored keys, and the decision observers.
    ``answered``: the outcome's timings as the timing function answered them (upstream's
    ``configs_timings``, which its listener gets)."""
    if _observers:
        _notify(Decision(kernel_name, key, outcome.source, outcome.config, outcome.duration_s, where))
    if outcome.source == "single":
        return
    if _compat.print_autotuning():
        how = {
            "tuned": f"tuned ({strategy}, {_measured(outcome)})",
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
            configs_timings=answered,
            duration=outcome.duration_s if outcome.source == "tuned" else None,
            cache_hit=outcome.source == "restored",
        )

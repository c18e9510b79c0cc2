"""What a group of ranks tuning one key says when it cannot agree as planned: a rank tunes alone, a
member's share is missing, the leader's decision came too late, the members chose without it. Each
is a :class:`~triton_dejavu_like.DejavuTuningWarning`, once per kernel."""

from __future__ import annotations

from typing import Any

from .._compat import Config
from .._log import DejavuTuningWarning, warn_once


def _warn(kernel_name: str, message: str, *args: Any) -> None:
    warn_once(DejavuTuningWarning, f"{kernel_name}:ranks", message, kernel_name, *args)


def tuning_alone(kernel_name: str, key_values: Any, why: str) -> None:
    _warn(
        kernel_name,
        "%s: %s for key %s; tuning it on this rank alone (ranks may use different configs for it)",
        why,
        key_values,
    )


def shares_missing(
    kernel_name: str, key_values: Any, named: list[str], members: int, timeout_s: float
) -> None:
    """``named``: the members whose share is missing, as the warning names them."""
    _warn(
        kernel_name,
        "%s: %s of the %d ranks tuning key %s together gave no timings within %g s (it failed, "
        "ended, or its heartbeat stopped); the leading rank measures its candidates itself",
        ", ".join(named),
        members,
        key_values,
        timeout_s,
    )


def overtaken(kernel_name: str, key_values: Any, waited_s: float, winner: Config, final: Any) -> None:
    """The leader's ``winner`` came after the members' wait of ``waited_s``; ``final``: their choice."""
    _warn(
        kernel_name,
        "%s: the other ranks tuning key %s chose without this rank's decision (it came after their "
        "wait of %g s for it ran out); this rank uses their choice (member %s chose it from %s shares) "
        "instead of its own (%s), and stores neither",
        key_values,
        waited_s,
        final.get("by") if isinstance(final, dict) else "?",
        final.get("shares") if isinstance(final, dict) else "?",
        winner,
    )


def without_leader(
    kernel_name: str, key_values: Any, why: str, chooser: int, shares: Any, members: int
) -> None:
    _warn(
        kernel_name,
        "%s: the leading rank gave no decision for key %s (%s); member %s of the group chose the "
        "best of the timings of %s of its %d members' shares for all members; not stored (the next run "
        "tunes the key again)",
        key_values,
        why,
        chooser,
        shares,
        members,
    )

"""Warnings the user must see, and the package logger.

A problem the user has to act on (storage that cannot be used, a file set aside, an argument or a
variable ignored, misses in read-only mode) is reported with :func:`warn_once`: one
``warnings.warn`` with a package warning class per cause and place, so it shows with Python's
default settings and can be filtered or turned into an error with the usual ``warnings`` filters
(``warnings.simplefilter("error", DejavuStorageWarning)``; on the command line ``-W error::UserWarning``
works, while ``-W ...::triton_dejavu_like.DejavuStorageWarning`` is ignored by Python because the
category is looked up before site-packages are importable; pytest's ``-W`` and ``filterwarnings``
take the package classes). A warning names the user's line that caused it (the decoration, the
launch), the first frame outside this package and Triton. The same text goes to the package logger
for programs that collect logs. Diagnostics that need no action only go to the logger.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

log = logging.getLogger("triton_dejavu_like")


class DejavuWarning(UserWarning):
    """Base class of every warning this package issues."""


class DejavuStorageWarning(DejavuWarning):
    """Stored results cannot be read or written as they should: a file moved aside, entries rejected,
    a storage root or lock that cannot be used (results then stay in memory)."""


class DejavuConfigWarning(DejavuWarning):
    """A setting is ignored or replaced: an environment variable with a bad value, an argument that
    has no effect here, a Config field this Triton lacks."""


class DejavuTuningWarning(DejavuWarning):
    """Tuning did not go as asked: the model-based search fell back to random proposals, a stored
    config no longer matches the candidates, a miss answered without tuning in read-only mode."""


_seen: set[tuple[type[Warning], str, str]] = set()
_seen_lock = threading.Lock()
#: Where :func:`warn_once` hands its warnings instead of issuing them (see :func:`relay_warnings`).
_relay: Callable[[type[DejavuWarning], str, str, tuple[Any, ...]], None] | None = None


def warn_once(category: type[DejavuWarning], subject: str, message: str, *args: Any) -> bool:
    """Warn once per process for ``(category, message, subject)``; True if this call warned.

    ``message`` is a ``%``-format string filled with ``args`` (as for logging); ``subject`` names
    the place (a path, a kernel) so that the same problem at two places is reported twice.
    """
    text = message % args if args else message  # before the marker: arguments that do not fit raise,
    marker = (category, message, subject)  # and do not silence a later, valid call
    with _seen_lock:
        if marker in _seen:
            return False
        _seen.add(marker)
    if _relay is not None:
        _relay(category, subject, message, args)
        return True
    log.warning("%s", text)
    warnings.warn(text, category, stacklevel=_outside_stacklevel())
    return True


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _outside_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside this package and Triton (a launch goes through
    Triton's ``KernelInterface.__getitem__``, a decoration through its ``jit``), as counted from
    :func:`warn_once`'s call of ``warnings.warn``: a warning names the user's line (the launch, the
    decoration), so that filters by module (``-W error::UserWarning:mymodule``) apply."""
    inside = [_PACKAGE_DIR]
    triton_file = getattr(sys.modules.get("triton"), "__file__", None)
    if triton_file is not None:
        inside.append(os.path.dirname(triton_file) + os.sep)
    prefixes = tuple(inside)
    frame, level = sys._getframe(1), 1  # warn_once's frame is level 1
    while frame is not None and frame.f_code.co_filename.startswith(prefixes):
        frame, level = frame.f_back, level + 1
    return level


def relay_warnings(send: Callable[[type[DejavuWarning], str, str, tuple[Any, ...]], None]) -> None:
    """From now on, hand each warning of :func:`warn_once` to ``send(category, subject, message, args)``
    instead of issuing it: a worker process sends its warnings to the process the user runs, which
    issues them with :func:`warn_once` (a worker's own ``warnings`` filters, capture and output are
    not the user's, and only that process knows what it has already reported)."""
    global _relay
    _relay = send


def warning_class(name: str) -> type[DejavuWarning]:
    """The package's warning class called ``name`` (:class:`DejavuWarning` for any other name): the
    class of a warning that a worker process sent by name."""
    classes: list[type[DejavuWarning]] = [DejavuWarning]
    for cls in classes:  # grows while it is walked: every subclass, at any depth
        classes.extend(cls.__subclasses__())
    return next((cls for cls in classes if cls.__name__ == name), DejavuWarning)


def encode_warning(
    category: type[DejavuWarning], subject: str, message: str, args: tuple[Any, ...]
) -> dict[str, Any]:
    """A warning handed to a :func:`relay_warnings` sender, as JSON values (its arguments as text, or
    the whole message formatted here, if they cannot travel): what a `tune` worker sends to the
    process the user runs, which issues it with :func:`reissue_warning`."""
    plain = [a if a is None or isinstance(a, (str, int, float)) else str(a) for a in args]
    try:
        if plain:
            message % tuple(plain)
    except (TypeError, ValueError):
        message, plain = message % args, []
    return {"category": category.__name__, "subject": subject, "message": message, "args": plain}


def reissue_warning(data: Any) -> bool:
    """Issue a warning that :func:`encode_warning` encoded in a worker with :func:`warn_once`, here
    where the user sees it: once for every worker that sent it (each would show its own copy of a
    problem they share, such as a setting or a kernel's argument). False if ``data`` is not such a
    warning (extra keys are ignored)."""
    if not isinstance(data, dict):
        return False
    category, subject, text, args = (data.get(k) for k in ("category", "subject", "message", "args"))
    if not (
        isinstance(category, str)
        and isinstance(subject, str)
        and isinstance(text, str)
        and isinstance(args, list)
    ):
        return False
    try:
        warn_once(warning_class(category), subject, text, *args)
    except (TypeError, ValueError):  # arguments that do not fit the message
        return False
    return True


def forget_warnings() -> None:
    """Warn again about problems already reported (for tests and long-lived tools)."""
    with _seen_lock:
        _seen.clear()


def remove_warning_filters(filters: list[Any]) -> None:
    """Take these very entries out of the ``warnings`` filter list in force: an equal one of the user's
    stays, and so do those that other threads add meanwhile (``catch_warnings`` would put back the
    whole list as it was). No version bump is needed: the registries never note a warning that an
    "ignore" or "always" filter matched."""
    current = warnings.filters
    for item in filters:
        while (i := next((i for i, f in enumerate(current) if f is item), None)) is not None:
            del current[i]

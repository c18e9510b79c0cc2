"""The error of a tuning run that produced no config, and how it is made to be caught as upstream's.

Upstream's autotuner lets a candidate's own error through (it skips some classes while it benchmarks,
then launches the first config, which raises its error again). So that an ``except`` clause written
for it still catches ours, the :class:`AutotuningError` raised when no candidate ran is also an
instance of that error's class (``AutotuningError[OutOfResources]``, made once per class). It is also
a ``RuntimeError``, as triton-dejavu's "All autotune examples failed" is, so that code written for
either project catches it.
"""

from __future__ import annotations

import builtins
import functools
from typing import Any

from .. import _compat
from .._compat import AutotunerErrorBase
from ..measure import Failure

__all__ = ["AutotuningError", "candidates_failed", "failed_as", "upstream_precedence"]


class AutotuningError(AutotunerErrorBase, RuntimeError):  # type: ignore[misc]  # a RuntimeError before 3.6
    """Tuning could not produce a config (every candidate failed, an error that does not depend on
    the candidate ended it, or a bad heuristic). Also a ``RuntimeError``, which triton-dejavu raises
    when every candidate failed.

    When every candidate failed, or tuning stopped, the error raised is also an instance of the class
    of the error that upstream's autotuner would have raised (see :func:`candidates_failed`)."""

    #: What ended tuning at once (``pre_hook``, ``post_hook``, ``grid``, ``do_bench``, ``reference_fn``:
    #: an error of the tuner's hooks or of a user's function, the launch's grid function among them,
    #: which does not depend on the candidate); None when the candidates failed.
    stopped_by: str | None = None


def candidates_failed(message: str, failure: Failure | None) -> AutotuningError:
    """The error that says no candidate could run: an :class:`AutotuningError` with ``message`` that
    is also an instance of ``failure``'s class, so that an ``except`` clause written for upstream's
    autotuner (which lets the candidate's own error through) still catches it.

    ``failure`` is the candidate's exception (raised here, or in a worker process and rebuilt
    here), which becomes the cause (its attributes, such as ``OutOfResources.required``, are
    copied; ``error_message`` and ``str()`` are the summary), or the reason of a worker whose
    exception could not be rebuilt, whose ``Type`` names the class (one of Triton's errors or a
    built-in one). A class Python cannot combine with ours (or none known) gives a plain
    :class:`AutotuningError`."""
    error = failed_as(None if failure is None else _error_class(failure), message)
    if isinstance(failure, BaseException):
        if type(error) is not AutotuningError:
            for name, value in vars(failure).items():
                if name != "error_message":
                    setattr(error, name, value)
        error.__cause__ = failure  # as ``raise error from failure``
        error.__suppress_context__ = True
    return error


def _error_class(failure: Failure) -> type[Exception] | None:
    """The class of a candidate's failure: its exception's, or the one a worker's ``Type: message``
    names; None when it is not an ``Exception`` class known here."""
    found: Any = type(failure)
    if isinstance(failure, str):
        name = failure.split(":", 1)[0]
        found = name.isidentifier() and (_compat.triton_error_class(name) or getattr(builtins, name, None))
    return found if isinstance(found, type) and issubclass(found, Exception) else None


def upstream_precedence(failure: Failure) -> int:
    """Which failure upstream's autotuner would raise, lowest first: 0, one it lets through at once
    (a known class, not one of :data:`_compat.UPSTREAM_SKIPPED_ERRORS`); 1, one it skips (and raises
    again when it launches the first config after all were skipped); 2, a reason naming no class
    (a crashed worker, a time that is no time)."""
    known = _error_class(failure)
    if known is None:
        return 2
    return 1 if issubclass(known, _compat.UPSTREAM_SKIPPED_ERRORS) else 0


@functools.cache
def _failing_as(cls: type[Exception]) -> type[AutotuningError] | None:
    """``AutotuningError[cls]``, a subclass of both (one per class); ``cls`` itself when it is one
    already; None when Python cannot combine them (two exception layouts, a final class)."""
    if issubclass(cls, AutotuningError):
        return cls
    try:
        combined = type(
            f"AutotuningError[{cls.__name__}]",
            (AutotuningError, cls),
            {"__module__": __name__, "__reduce__": _reduce_failed, "_candidate_class": cls},
        )
        _failed_error(combined, "")  # an instance can be made
    except Exception:  # a layout conflict, a class that refuses subclasses or instances made so
        return None
    return combined


def _failed_error(cls: type[AutotuningError], message: str) -> AutotuningError:
    """An instance of ``cls`` saying ``message``, made without the other class's constructor."""
    error = cls.__new__(cls, message)
    error.args = (message,)
    error.error_message = message
    return error


def failed_as(cls: type[Exception] | None, message: str) -> AutotuningError:
    """An ``AutotuningError[cls]`` saying ``message`` (a plain one where Python cannot combine the
    two classes, or ``cls`` is None)."""
    combined = None if cls is None else _failing_as(cls)
    return AutotuningError(message) if combined is None else _failed_error(combined, message)


def _reduce_failed(self: AutotuningError) -> tuple[Any, ...]:
    """Pickling an ``AutotuningError[cls]``: made again from ``cls`` (the combined class itself is
    made at run time), with the attributes."""
    return failed_as, (type(self)._candidate_class, self.error_message), dict(vars(self))

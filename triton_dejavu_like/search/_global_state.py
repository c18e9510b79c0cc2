"""Keep third-party code from changing process-wide logging and warnings configuration.

Importing SMAC pulls in dask.distributed, scipy and scikit-learn: they add warnings filters and
give some loggers their own handlers; SMAC's facade would even reconfigure the root logger. The
tuner runs inside the user's program, so whatever such code changes is put back as it was.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import importlib
import logging
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .._log import DejavuWarning, remove_warning_filters

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _LoggerState:
    level: int
    handlers: tuple[logging.Handler, ...]
    filters: tuple[object, ...]
    propagate: bool
    disabled: bool

    @classmethod
    def of(cls, logger: logging.Logger) -> _LoggerState:
        return cls(
            logger.level, tuple(logger.handlers), tuple(logger.filters), logger.propagate, logger.disabled
        )

    def apply(self, logger: logging.Logger) -> bool:
        """Put ``logger`` back in this state; True if anything had changed."""
        if _LoggerState.of(logger) == self:
            return False
        logger.setLevel(self.level)
        logger.handlers[:] = self.handlers
        logger.filters[:] = self.filters
        logger.propagate = self.propagate
        logger.disabled = self.disabled
        return True


_PRISTINE = _LoggerState(logging.NOTSET, (), (), True, False)


def _loggers() -> dict[str, logging.Logger]:
    return {
        name: logger
        for name, logger in list(logging.Logger.manager.loggerDict.items())
        if isinstance(logger, logging.Logger)
    }


@contextlib.contextmanager
def preserved_logging() -> Iterator[None]:
    """Restore the root logger, every existing logger and ``logging.disable`` on exit.

    Loggers created inside the block are left in their default state (no handlers, no level,
    propagating), so records of libraries imported here reach the user's handlers as usual.
    """
    root = _LoggerState.of(logging.root)
    before = {name: _LoggerState.of(logger) for name, logger in _loggers().items()}
    disabled = logging.root.manager.disable
    try:
        yield
    finally:
        changed = [n for n, lg in _loggers().items() if before.get(n, _PRISTINE).apply(lg)]
        if root.apply(logging.root):
            changed.append("root")
        if logging.root.manager.disable != disabled:
            logging.disable(disabled)
            changed.append("logging.disable")
        if changed:
            log.debug("restored the logging configuration of %s", ", ".join(sorted(changed)[:20]))


class _NotOurs(type):
    """Metaclass of :class:`_ThirdPartyWarning`: in a thread inside a guarded block, every category but
    this package's is "of" it; in any other thread, none is."""

    def __subclasscheck__(cls, category: type) -> bool:
        if threading.get_ident() not in _depth or issubclass(category, DejavuWarning):
            return False
        caller = sys._getframe(1)  # the code that called warnings.warn (a C function, no frame)
        where = f"{caller.f_code.co_filename}:{caller.f_lineno}"
        log.debug("suppressed a %s raised at %s", category.__name__, where)
        return True


class _ThirdPartyWarning(Warning, metaclass=_NotOurs):
    """The category of :data:`_QUIET`."""


#: The filter put first while a block runs: it ignores what the guarded threads raise and matches
#: nothing else (a copy that a ``catch_warnings`` of another thread brings back after the block is inert).
_QUIET = ("ignore", None, _ThirdPartyWarning, None, 0)
_ADDERS = ("filterwarnings", "simplefilter")


def _recording(add: Callable[..., None]) -> Callable[..., None]:
    """``warnings.filterwarnings`` or ``simplefilter``, noting the filters a guarded thread adds."""

    @functools.wraps(add)
    def recorded(*args: Any, **kwargs: Any) -> None:
        added = _added.get(threading.get_ident())
        if added is None:
            return add(*args, **kwargs)
        before = list(warnings.filters)
        add(*args, **kwargs)
        added.extend(f for f in warnings.filters if f not in before)  # one in force before only moved
        return None

    return recorded


def _start_quieting() -> None:
    remove_warning_filters([_QUIET])
    warnings.filters.insert(0, _QUIET)
    for name in _ADDERS:
        original = getattr(warnings, name)
        _originals[name] = original
        setattr(warnings, name, _recording(original))


def _stop_quieting() -> None:
    remove_warning_filters([_QUIET])
    for name, original in _originals.items():
        if getattr(getattr(warnings, name), "__wrapped__", None) is original:
            setattr(warnings, name, original)
    _originals.clear()


@contextlib.contextmanager
def quiet_third_party() -> Iterator[None]:
    """Run library code without letting it add warnings filters or show warnings.

    While the block runs, a filter put first in ``warnings.filters`` ignores every warning that this
    thread raises (and only this thread: those of the user's other threads go through the user's
    filters, ``catch_warnings`` and display as they would without the block); the ignored ones go to
    this package's debug log. The filters that this thread's code adds with ``filterwarnings`` or
    ``simplefilter`` are taken out on exit, with the block's own; filters that other threads add
    meanwhile stay. A warning of this package (a :class:`DejavuWarning`) is never ignored.
    """
    ident = threading.get_ident()
    with _quiet_lock:
        if not _depth:
            _start_quieting()
        _added.setdefault(ident, [])
        _depth[ident] = _depth.get(ident, 0) + 1
    try:
        yield
    finally:
        with _quiet_lock:
            _depth[ident] -= 1
            if not _depth[ident]:
                del _depth[ident]
                remove_warning_filters(_added.pop(ident))
            if not _depth:
                _stop_quieting()


#: :func:`quiet_third_party`'s blocks in progress: each thread inside one and how deep it is nested,
#: the filters its code added, and the functions that record those while any block runs. Threads
#: share the filter list: the first block in puts the quieting filter first, the last out takes it out.
_quiet_lock = threading.Lock()
_depth: dict[int, int] = {}
_added: dict[int, list[Any]] = {}
_originals: dict[str, Callable[..., None]] = {}


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Both guards: for imports and set-up, where logging may be reconfigured."""
    with preserved_logging(), quiet_third_party():
        yield


def import_in_background(name: str) -> cf.Future[ModuleType]:
    """Import module ``name`` (a heavy third-party stack) in a thread, under :func:`isolated`; the
    future holds the module or the import's exception.

    Only the import's own warnings are kept quiet: those that the program's other threads raise
    meanwhile go through its filters as usual (see :func:`quiet_third_party`).
    """
    future: cf.Future[ModuleType] = cf.Future()

    def run() -> None:
        try:
            with isolated():
                module = importlib.import_module(name)
        except BaseException as exc:  # handed to whoever waits for the model
            future.set_exception(exc)
        else:
            future.set_result(module)

    threading.Thread(target=run, name=f"import-{name.rsplit('.', 1)[-1]}", daemon=True).start()
    return future

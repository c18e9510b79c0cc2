"""Keep third-party code from changing process-wide logging and warnings configuration.

Importing SMAC pulls in dask.distributed, scipy and scikit-learn: they add warnings filters and
give some loggers their own handlers; SMAC's facade would even reconfigure the root logger. The
tuner runs inside the user's program, so whatever such code changes is put back as it was.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import importlib
import logging
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .._log import DejavuWarning

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


@contextlib.contextmanager
def quiet_third_party() -> Iterator[None]:
    """Run library code without letting it add warnings filters or show warnings.

    Warnings raised inside go to this package's debug log instead of the user's terminal; the
    filters in force before the block are restored on exit. The warnings configuration is global:
    a warning of this package's own (a :class:`DejavuWarning`, e.g. from another thread meanwhile)
    is shown after the block instead of being logged.
    """
    global _quiet_depth, _quiet_state
    with _quiet_lock:  # one catch_warnings for every thread inside: the first enters it, the last leaves
        if _quiet_depth == 0:
            context = warnings.catch_warnings(record=True)
            _quiet_state = (context, context.__enter__())
            warnings.simplefilter("always")
        _quiet_depth += 1
    try:
        yield
    finally:
        caught: list[warnings.WarningMessage] = []
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0 and _quiet_state is not None:
                context, records = _quiet_state
                _quiet_state = None
                context.__exit__(None, None, None)
                caught = list(records or ())
        for item in caught:
            if issubclass(item.category, DejavuWarning):
                warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)
            else:
                log.debug("suppressed %s: %s", item.category.__name__, item.message)


#: :func:`quiet_third_party`'s blocks in progress (in any thread), and the one ``catch_warnings`` they
#: share: overlapping blocks of two threads, each with its own, restored each other's filters on exit
#: (two BO runs at once left the process recording every warning and showing none).
_quiet_lock = threading.Lock()
_quiet_depth = 0
_quiet_state: tuple[Any, list[warnings.WarningMessage] | None] | None = None


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Both guards: for imports and set-up, where logging may be reconfigured."""
    with preserved_logging(), quiet_third_party():
        yield


def import_in_background(name: str) -> cf.Future[ModuleType]:
    """Import module ``name`` (a heavy third-party stack) in a thread, under :func:`isolated`; the
    future holds the module or the import's exception.

    The warnings configuration is process-wide: other threads' :func:`quiet_third_party` blocks share
    its ``catch_warnings`` (the last to leave restores the filters); a warning of this package
    raised meanwhile by another thread is shown when the last block ends.
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

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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for item in caught:
        if issubclass(item.category, DejavuWarning):
            warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)
        else:
            log.debug("suppressed %s: %s", item.category.__name__, item.message)


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Both guards: for imports and set-up, where logging may be reconfigured."""
    with preserved_logging(), quiet_third_party():
        yield


def import_in_background(name: str) -> cf.Future[ModuleType]:
    """Import module ``name`` (a heavy third-party stack) in a thread, under :func:`isolated`; the
    future holds the module or the import's exception.

    The warnings configuration is process-wide: until the future is done, no other thread may enter
    ``warnings.catch_warnings`` (their exits would restore each other's filters); a warning of this
    package raised meanwhile by another thread is shown when the import ends.
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

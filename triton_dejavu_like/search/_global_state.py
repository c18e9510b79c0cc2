"""Keep third-party code from changing process-wide logging and warnings configuration.

Importing SMAC pulls in dask.distributed, scipy and scikit-learn: they add warnings filters and
give some loggers their own handlers; SMAC's facade would even reconfigure the root logger. The
tuner runs inside the user's program, so whatever such code changes is put back as it was.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

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
    filters in force before the block are restored on exit.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for item in caught:
        log.debug("suppressed %s: %s", item.category.__name__, item.message)


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Both guards: for imports and set-up, where logging may be reconfigured."""
    with preserved_logging(), quiet_third_party():
        yield

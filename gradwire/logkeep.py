"""Log records kept while a block runs, to be logged again elsewhere or later: those a pool
worker logs come back with its result and are logged by the process that started it, in item
order (gradwire/procpool.py); the warnings logged while a profile was built are kept with it
in the cache and logged again on each later load (replay/profilecache.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

__all__ = ["kept_records", "log_again"]

ROOT = "gradwire"  # every module logs under gradwire.<module>


class _Keep(logging.Handler):
    """A handler that appends a picklable copy of each record to ``into``."""

    def __init__(self, level: int, into: list[logging.LogRecord]) -> None:
        super().__init__(level)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.into.append(_plain(record))
        except Exception:  # a malformed call (bad %-arguments): logging's own report
            self.handleError(record)


def _plain(record: logging.LogRecord) -> logging.LogRecord:
    """A copy of ``record`` that pickles whatever its arguments: the message formatted, no
    exception attached."""
    copy = logging.makeLogRecord(record.__dict__)
    copy.msg, copy.args = record.getMessage(), None
    copy.exc_info = copy.exc_text = copy.stack_info = None
    return copy


@contextmanager
def kept_records(level: int = logging.NOTSET, hold: bool = False
                 ) -> Iterator[list[logging.LogRecord]]:
    """The records of ``level`` and above that gradwire's loggers log while the block runs,
    as a list filled in as they come. ``hold``: they are kept only, not also printed (until
    ``log_again``)."""
    logger = logging.getLogger(ROOT)
    kept: list[logging.LogRecord] = []
    handler = _Keep(level, kept)
    logger.addHandler(handler)
    propagate = logger.propagate
    if hold:
        logger.propagate = False
    try:
        yield kept
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def log_again(records: Sequence[logging.LogRecord]) -> None:
    """Log ``records`` here, each by the logger that first logged it (its level as then)."""
    for record in records:
        logger = logging.getLogger(record.name)
        if logger.isEnabledFor(record.levelno):
            logger.handle(record)

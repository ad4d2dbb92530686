"""Structured log lines (a message and a dict of fields) without a ``LogRecord`` where
the process's logging set-up allows it.

The access log writes a line per request. Through ``Logger.info`` each line costs a
``LogRecord``, the logger hierarchy's and the handler's checks and locks, and a write of
its own: about a sixth of the gateway's CPU per request (``loadtests/bench_ab.py``). When
the one handler that would receive the line can take the fields directly (a
``FieldsHandler``: ``skyroute.logs.JsonLinesHandler``), ``log_fields`` hands them over
and skips the rest. Under any other set-up (text logs, pytest's capture, an application
embedding the gateway with its own handlers or filters) it is ``logger.log`` with
``extra={"fields": ...}``, exactly as before.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

__all__ = ["FieldsHandler", "log_fields"]


class FieldsHandler(logging.Handler):
    """A handler that can write a line from fields, with no ``LogRecord``."""

    def emit_fields(self, name: str, level: int, msg: str, fields: Mapping[str, object]) -> None:
        """Write what ``emit`` would for a record of logger ``name`` at ``level`` with
        message ``msg`` and ``record.fields = fields``. Must not raise."""
        raise NotImplementedError


def _sole_handler(logger: logging.Logger) -> FieldsHandler | None:
    """The FieldsHandler that alone would receive ``logger``'s records, if there is one:
    no filter on the way, no other handler, propagation up to the root."""
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        if current.handlers:
            handlers = current.handlers
            if current is logging.root and len(handlers) == 1:
                handler = handlers[0]
                if isinstance(handler, FieldsHandler) and not handler.filters:
                    return handler
            return None
        if not current.propagate:
            return None
        current = current.parent
    return None


def log_fields(logger: logging.Logger, level: int, msg: str, fields: Mapping[str, object]) -> None:
    """Log ``msg`` with structured ``fields`` at ``level``: the same line as
    ``logger.log(level, msg, extra={"fields": fields})``. Never raises for a logging
    failure (as ``logging`` does not)."""
    if not logger.isEnabledFor(level):
        return
    handler = _sole_handler(logger)
    if handler is not None and level >= handler.level:
        handler.emit_fields(logger.name, level, msg, fields)
    else:
        logger.log(level, msg, extra={"fields": fields}, stacklevel=2)

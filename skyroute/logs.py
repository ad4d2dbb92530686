"""Logging set-up for the entry points: one JSON object a line, or plain text.

Secrets are never passed to loggers; as a second line of defence, anything that looks
like a bearer token or an ``sk-`` key is masked before a line is written.
"""

from __future__ import annotations

import logging
import re
import sys

import orjson

_SECRET = re.compile(r"(sk-[A-Za-z0-9_\-]{8,}|bearer\s+[A-Za-z0-9_\-.=+/~]{8,})", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with key-like substrings replaced by ``[REDACTED]``."""
    return _SECRET.sub("[REDACTED]", text)


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object: ts, level, logger, msg (+ exc)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            # Structured fields can carry client-sent values (a request id): mask them too.
            out.update({k: redact(v) if isinstance(v, str) else v for k, v in fields.items()})
        if record.exc_info:
            out["exc"] = redact(self.formatException(record.exc_info))
        return orjson.dumps(out).decode()


class _RedactingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def configure(level: str = "INFO", json: bool = True) -> None:
    """Configure the root logger once, in an entry point."""
    handler = logging.StreamHandler(sys.stderr)
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    handler.setFormatter(JsonFormatter() if json else _RedactingFormatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

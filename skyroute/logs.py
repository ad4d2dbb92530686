"""Logging set-up for the entry points: one JSON object a line, or plain text.

Secrets are never passed to loggers; as a second line of defence, anything that looks
like a bearer token or an ``sk-`` key is masked before a line is written.

JSON lines go through ``JsonLinesHandler``, which also takes the access log's lines as
fields (``base.log_fields``) and writes them in batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sys
import time
from collections.abc import Mapping
from typing import TextIO

import orjson

from base.log_fields import FieldsHandler

# Shapes of secrets that must never reach a log line, whichever field carries them.
_SECRETS = (
    r"sk-[A-Za-z0-9_\-]{8,}",  # OpenAI-style and skyroute API keys
    r"bearer\s+[A-Za-z0-9_\-.=+/~]{8,}",  # Authorization: Bearer ...
    r"\b(?:AKIA|ASIA|AIDA|AROA|ANPA)[A-Z0-9]{16}\b",  # AWS access key ids
    r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",  # JWTs
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",  # GitHub tokens
    r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",  # Slack tokens
    r"(?<=api[-_]key)(?:[\"']?\s*[:=]\s*[\"']?)[^\s\"',;&]{8,}",  # api-key: / api_key=
)
_SECRET = re.compile("|".join(f"(?:{p})" for p in _SECRETS), re.IGNORECASE)


# Strings already found to hold nothing secret-shaped. Most values of a log line repeat
# (pool ids, regions, statuses, tenants): the pattern costs ~2 us a string, a look-up
# ~0.05 us, and the access line has nine of them. Only clean strings are kept, so no
# secret is ever held here; cleared when full, as unique values (request ids) fill it.
_CLEAN: dict[str, None] = {}
_CLEAN_MAX = 4096
_CLEAN_MAX_LEN = 256
# No shape above can be spelt with these alone: each needs a letter past f (sk-, bearer,
# AKIA, eyJ, gh_, xox, api-key). Request ids (hex, UUIDs) are such strings, one new per
# line, so the look-up above never has them; this test costs ~0.1 us, the pattern ~2 us.
_HEX = "0123456789abcdefABCDEF-"


def redact(text: str) -> str:
    """``text`` with secret-shaped substrings (API keys, bearer tokens, AWS key ids,
    JWTs, GitHub and Slack tokens, ``api-key`` values) replaced by ``[REDACTED]``.
    Thread-safe."""
    if text in _CLEAN or not text.strip(_HEX):
        return text
    out = _SECRET.sub("[REDACTED]", text)
    if out == text and len(text) <= _CLEAN_MAX_LEN:
        if len(_CLEAN) >= _CLEAN_MAX:
            _CLEAN.clear()
        _CLEAN[text] = None
    return out


def _json_line(
    created: float, level: str, name: str, msg: str, fields: object, exc: str | None = None
) -> str:
    out: dict[str, object] = {"ts": round(created, 3), "level": level, "logger": name,
                              "msg": redact(msg)}  # fmt: skip
    if type(fields) is dict or isinstance(fields, Mapping):
        # Structured fields can carry client-sent values (a request id): mask them too.
        # An access line has a dozen fields, most of them numbers or strings seen
        # before: those are taken as they are without a call to ``redact`` each.
        clean = _CLEAN
        for k, v in fields.items():
            if type(v) is str:
                out[k] = v if v in clean else redact(v)
            else:
                out[k] = redact(v) if isinstance(v, str) else v
    if exc is not None:
        out["exc"] = redact(exc)
    return orjson.dumps(out, default=str).decode()


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object: ts, level, logger, msg, the record's
    ``fields`` (+ exc)."""

    def format(self, record: logging.LogRecord) -> str:
        exc = self.formatException(record.exc_info) if record.exc_info else None
        fields = getattr(record, "fields", None)
        return _json_line(record.created, record.levelname, record.name,
                          record.getMessage(), fields, exc)  # fmt: skip


class JsonLinesHandler(logging.StreamHandler[TextIO], FieldsHandler):
    """JSON lines on ``stream``: records one by one as they come, as ``StreamHandler``
    writes them; lines given as fields (``emit_fields``: the access log) held and written
    together, once ``max_lines`` are held or the first has waited ``max_delay_s`` (nginx's
    ``access_log ... buffer= flush=``). A record written meanwhile writes the held lines
    first, so the stream keeps the order of the calls; ``flush()``, which
    ``logging.shutdown`` calls at exit, writes them too. A process killed outright loses
    at most the lines held: ``max_lines``, ``max_delay_s`` old.

    The delay is timed on the running event loop of the thread that holds the first
    line; a thread with no event loop writes its lines at once.
    """

    def __init__(self, stream: TextIO, max_lines: int = 64, max_delay_s: float = 0.25) -> None:
        super().__init__(stream)
        self.setFormatter(JsonFormatter())
        self.max_lines = max_lines
        self.max_delay_s = max_delay_s
        self._held: list[str] = []
        self._timer: asyncio.TimerHandle | None = None

    def emit_fields(self, name: str, level: int, msg: str, fields: Mapping[str, object]) -> None:
        line = _json_line(time.time(), logging.getLevelName(level), name, msg, fields)
        with self.lock:  # type: ignore[union-attr]
            self._held.append(line)
            if len(self._held) >= self.max_lines:
                self._write_held()
            elif self._timer is None:
                try:
                    loop = asyncio.get_running_loop()
                except RuntimeError:
                    self._write_held()
                    return
                self._timer = loop.call_later(self.max_delay_s, self._on_timer)

    def emit(self, record: logging.LogRecord) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._write_held()
        super().emit(record)

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._write_held()
        super().flush()

    def _on_timer(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._timer = None
            self._write_held()

    def _write_held(self) -> None:
        if not self._held:
            return
        text = "\n".join(self._held) + "\n"
        self._held.clear()
        # A closed or broken stream loses these lines, as it would lose a record's.
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(text)
            self.stream.flush()


class TextFormatter(logging.Formatter):
    """Plain text for people: the message, then the record's structured fields (the access
    log's pool, status, latencies…) as ``key=value``, all of it redacted."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            line += " " + " ".join(f"{k}={_text(v)}" for k, v in fields.items())
        return redact(line)


def _text(value: object) -> str:
    text = str(value)
    return orjson.dumps(text).decode() if (not text or " " in text or '"' in text) else text


def configure(level: str = "INFO", json: bool = True) -> None:
    """Configure the root logger once, in an entry point: JSON lines on stderr
    (``JsonLinesHandler``), or text. Lines held by a handler it replaces are written."""
    handler: logging.Handler
    if json:
        handler = JsonLinesHandler(sys.stderr)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in root.handlers:
        old.flush()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

"""Logging set-up for the entry points: one JSON object a line, or plain text.

Secrets are never passed to loggers; as a second line of defence, anything that looks
like a bearer token or an ``sk-`` key is masked before a line is written.
"""

from __future__ import annotations

import logging
import re
import sys

import orjson

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


def redact(text: str) -> str:
    """``text`` with secret-shaped substrings (API keys, bearer tokens, AWS key ids,
    JWTs, GitHub and Slack tokens, ``api-key`` values) replaced by ``[REDACTED]``.
    Thread-safe."""
    if text in _CLEAN:
        return text
    out = _SECRET.sub("[REDACTED]", text)
    if out == text and len(text) <= _CLEAN_MAX_LEN:
        if len(_CLEAN) >= _CLEAN_MAX:
            _CLEAN.clear()
        _CLEAN[text] = None
    return out


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
    """Configure the root logger once, in an entry point."""
    handler = logging.StreamHandler(sys.stderr)
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    handler.setFormatter(JsonFormatter() if json else TextFormatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

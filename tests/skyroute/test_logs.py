"""Log redaction and the JSON formatter. No handlers are installed: records are
formatted directly, so the process's logging set-up is left alone."""

from __future__ import annotations

import logging
import sys
from types import MappingProxyType

import orjson
import pytest

from skyroute import logs
from skyroute.logs import JsonFormatter, redact

KEY = "sk-proj-Ab12Cd34Ef56Gh78"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"


def _record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError(f"upstream rejected {KEY}")
        except RuntimeError:
            exc_info = sys.exc_info()
    return logging.LogRecord(
        "skyroute.test", logging.WARNING, __file__, 1, msg, args, exc_info=exc_info
    )


# -- redact ---------------------------------------------------------------------------


def test_redact_masks_an_sk_key() -> None:
    assert redact(f"calling with {KEY} now") == "calling with [REDACTED] now"


def test_redact_masks_a_bearer_token() -> None:
    assert redact(f"Authorization: Bearer {TOKEN}") == "Authorization: [REDACTED]"


def test_redact_masks_every_secret_in_a_line() -> None:
    text = redact(f"a={KEY} b=Bearer {TOKEN} c=sk-second0123456")
    assert text == "a=[REDACTED] b=[REDACTED] c=[REDACTED]"


@pytest.mark.parametrize(
    "text",
    ["nothing secret here", "task-sk-1 finished", "sk-short", "Bearer abc", "a bearer of news"],
)
def test_redact_leaves_text_without_keys_alone(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    "text", ["7f3a9c0e5b2d41f8a6c3e9b0d4f7a2c1", "123e4567-E89B-12d3-a456-426614174000", ""]
)
def test_redact_passes_hex_ids_through_without_remembering_them(text: str) -> None:
    assert redact(text) == text
    assert text not in logs._CLEAN


@pytest.mark.parametrize(
    "secret", ["sk-abcdef0123456789", "Bearer abcdef0123456789", "AKIA0123456789ABCDEF"]
)
def test_a_secret_among_hex_characters_is_still_masked(secret: str) -> None:
    masked = redact(f"deadbeef-{secret}-cafe")
    assert secret not in masked
    assert "[REDACTED]" in masked


@pytest.mark.parametrize("token_text", ["bearer Zm9vYmFyYmF6cXV4", "Bearer ab+cdEFghIJklMN/op=="])
def test_redact_masks_bearer_tokens_in_other_spellings(token_text: str) -> None:
    secret = token_text.split(" ", 1)[1]
    assert secret not in redact(f"Authorization: {token_text}")


# -- JsonFormatter --------------------------------------------------------------------


def test_json_formatter_writes_one_json_object_on_one_line() -> None:
    line = JsonFormatter().format(_record("hello %s", "world"))
    assert ("\n" not in line, isinstance(orjson.loads(line), dict)) == (True, True)


def test_json_formatter_writes_ts_level_logger_and_msg() -> None:
    record = _record("hello %s", "world")
    out = orjson.loads(JsonFormatter().format(record))
    assert out == {
        "ts": round(record.created, 3),
        "level": "WARNING",
        "logger": "skyroute.test",
        "msg": "hello world",
    }


def test_json_formatter_masks_a_key_passed_as_an_argument() -> None:
    line = JsonFormatter().format(_record("using key %s", KEY))
    assert (KEY in line, orjson.loads(line)["msg"]) == (False, "using key [REDACTED]")


def test_json_formatter_masks_a_key_in_the_exception() -> None:
    line = JsonFormatter().format(_record("failed", exc=True))
    out = orjson.loads(line)
    assert (KEY in line, "RuntimeError" in out["exc"]) == (False, True)


def test_json_formatter_writes_no_exc_without_an_exception() -> None:
    assert "exc" not in orjson.loads(JsonFormatter().format(_record("fine")))


# -- structured fields ----------------------------------------------------------------


class _Text(str):
    """A str subclass (as an Enum with a str mixin is): not the exact type the clean
    cache's fast path takes."""


def _fields_line(fields: object) -> dict[str, object]:
    record = _record("request")
    record.fields = fields
    out: dict[str, object] = orjson.loads(JsonFormatter().format(record))
    return out


def test_fields_mask_a_secret_each_time_it_comes_even_after_clean_values() -> None:
    clean = {"pool": "aws:us-east-1:h100", "status": "ok", "attempts": 1}
    _fields_line(clean)  # its strings are now known to be clean
    out = _fields_line({**clean, "request_id": KEY, "note": _Text(f"key {KEY}")})
    assert out["request_id"] == "[REDACTED]"
    assert out["note"] == "key [REDACTED]"
    assert (out["pool"], out["status"], out["attempts"]) == ("aws:us-east-1:h100", "ok", 1)


def test_fields_from_any_mapping_are_written_and_masked() -> None:
    out = _fields_line(MappingProxyType({"request_id": KEY, "n": 2}))
    assert (out["request_id"], out["n"]) == ("[REDACTED]", 2)

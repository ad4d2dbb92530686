"""The plain-text log format carries the structured fields too (the access log's)."""

from __future__ import annotations

import logging

from skyroute.logs import TextFormatter


def _record(msg: str, fields: dict[str, object] | None = None) -> logging.LogRecord:
    record = logging.LogRecord("skyroute.access", logging.INFO, __file__, 1, msg, None, None)
    if fields is not None:
        record.fields = fields
    return record


def test_text_lines_end_with_the_records_fields_as_key_value() -> None:
    line = TextFormatter("%(levelname)s %(message)s").format(
        _record("request", {"pool": "aws:us-east-1:h100", "status": 200, "ttft_ms": 41.5})
    )
    assert line == "INFO request pool=aws:us-east-1:h100 status=200 ttft_ms=41.5"


def test_values_with_spaces_are_quoted_and_keys_in_fields_are_masked() -> None:
    line = TextFormatter("%(message)s").format(
        _record("request", {"error": "no pool", "request_id": "sk-0123456789abcdef"})
    )
    assert line == 'request error="no pool" request_id=[REDACTED]'


def test_a_record_without_fields_is_the_plain_message() -> None:
    assert TextFormatter("%(message)s").format(_record("hello")) == "hello"

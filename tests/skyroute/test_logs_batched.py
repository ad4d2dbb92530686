"""``JsonLinesHandler``: access lines given as fields are the JSON formatter's lines,
held and written together, never out of order with records and never left unwritten
by a flush. The handler writes to a StringIO; the process's logging is left alone."""

from __future__ import annotations

import asyncio
import io
import logging

import orjson

from skyroute.logs import JsonFormatter, JsonLinesHandler
from tests.aio import run_async

KEY = "sk-proj-Ab12Cd34Ef56Gh78"
FIELDS: dict[str, object] = {"request_id": "r-1", "status": "ok", "latency_ms": 1.5, "pool": None}


class _Watched(io.StringIO):
    """A stream that says when something was written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.written = asyncio.Event()

    def write(self, text: str) -> int:
        self.written.set()
        return super().write(text)


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_from_fields_is_the_formatters_line_for_the_same_record() -> None:
    stream = io.StringIO()
    JsonLinesHandler(stream).emit_fields("skyroute.access", logging.INFO, "request", FIELDS)
    record = logging.LogRecord("skyroute.access", logging.INFO, __file__, 1, "request", None,
                               None)  # fmt: skip
    record.fields = FIELDS
    (fast,) = _lines(stream)
    slow = orjson.loads(JsonFormatter().format(record))
    assert fast.pop("ts") and slow.pop("ts")
    assert fast == slow == {"level": "INFO", "logger": "skyroute.access", "msg": "request",
                            **FIELDS}  # fmt: skip


def test_secrets_in_fields_are_masked() -> None:
    stream = io.StringIO()
    handler = JsonLinesHandler(stream)
    handler.emit_fields("skyroute.access", logging.INFO, "request", {"request_id": KEY})
    assert KEY not in stream.getvalue() and "[REDACTED]" in stream.getvalue()


@run_async
async def test_on_an_event_loop_lines_wait_for_the_batch_or_the_delay() -> None:
    stream = io.StringIO()
    handler = JsonLinesHandler(stream, max_lines=3, max_delay_s=3600.0)
    for n in range(2):
        handler.emit_fields("a", logging.INFO, "request", {"n": n})
    assert stream.getvalue() == ""  # held
    handler.emit_fields("a", logging.INFO, "request", {"n": 2})
    assert [line["n"] for line in _lines(stream)] == [0, 1, 2]  # the batch is full

    watched = _Watched()
    soon = JsonLinesHandler(watched, max_lines=100, max_delay_s=0.0)
    soon.emit_fields("a", logging.INFO, "request", {"n": 3})
    assert watched.getvalue() == ""  # held until the timer fires on the loop
    await watched.written.wait()
    assert [line["n"] for line in _lines(watched)] == [3]


@run_async
async def test_a_record_or_a_flush_writes_the_held_lines_first() -> None:
    stream = io.StringIO()
    handler = JsonLinesHandler(stream, max_lines=100, max_delay_s=3600.0)
    handler.emit_fields("skyroute.access", logging.INFO, "request", {"n": 0})
    record = logging.LogRecord("skyroute.x", logging.WARNING, __file__, 1, "slow", None, None)
    handler.handle(record)
    assert [line["msg"] for line in _lines(stream)] == ["request", "slow"]
    handler.emit_fields("skyroute.access", logging.INFO, "request", {"n": 1})
    handler.flush()  # what logging.shutdown does at exit
    assert [line.get("n") for line in _lines(stream)] == [0, None, 1]


def test_without_an_event_loop_each_line_is_written_at_once() -> None:
    stream = io.StringIO()
    handler = JsonLinesHandler(stream, max_lines=100, max_delay_s=3600.0)
    handler.emit_fields("a", logging.INFO, "request", {"n": 0})
    assert len(_lines(stream)) == 1

"""``log_fields`` hands fields straight to a sole FieldsHandler, and is plain
``logger.log`` with ``extra={"fields": ...}`` under any other logging set-up."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

import pytest

from base.log_fields import FieldsHandler, log_fields


class Taking(FieldsHandler):
    """Keeps what it is given: fields, or records."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[tuple[str, int, str, dict[str, object]]] = []
        self.records: list[logging.LogRecord] = []

    def emit_fields(self, name: str, level: int, msg: str, fields: Mapping[str, object]) -> None:
        self.fields.append((name, level, msg, dict(fields)))

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Keeping(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def root() -> Iterator[logging.Logger]:
    """The root logger, restored afterwards. Tests empty its handlers themselves: pytest
    adds its capture handlers after fixtures are set up."""
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    root.setLevel(logging.INFO)
    try:
        yield root
    finally:
        root.handlers[:] = saved
        root.setLevel(level)


def test_a_sole_fields_handler_gets_the_fields_and_no_record(root: logging.Logger) -> None:
    taking = Taking()
    root.handlers[:] = [taking]
    log_fields(logging.getLogger("t.fields.a"), logging.INFO, "request", {"status": "ok"})
    assert taking.fields == [("t.fields.a", logging.INFO, "request", {"status": "ok"})]
    assert taking.records == []


def test_levels_of_the_logger_and_the_handler_are_kept(root: logging.Logger) -> None:
    taking = Taking()
    root.handlers[:] = [taking]
    quiet = logging.getLogger("t.fields.quiet")
    quiet.setLevel(logging.WARNING)
    log_fields(quiet, logging.INFO, "request", {})
    taking.setLevel(logging.ERROR)
    log_fields(logging.getLogger("t.fields.b"), logging.WARNING, "request", {})
    assert taking.fields == [] and taking.records == []


def test_another_handler_anywhere_gets_a_record_with_the_fields(root: logging.Logger) -> None:
    taking, keeping = Taking(), Keeping()
    root.handlers[:] = [taking, keeping]  # pytest's capture is such a second handler
    log_fields(logging.getLogger("t.fields.c"), logging.INFO, "request", {"n": 1})
    (record,) = keeping.records
    assert record.getMessage() == "request" and record.fields == {"n": 1}  # type: ignore[attr-defined]
    assert taking.fields == [] and len(taking.records) == 1

    root.removeHandler(keeping)
    own = logging.getLogger("t.fields.own")
    own.addHandler(keeping)
    try:
        log_fields(own, logging.INFO, "request", {"n": 2})
    finally:
        own.removeHandler(keeping)
    assert keeping.records[-1].fields == {"n": 2}  # type: ignore[attr-defined]
    assert taking.fields == []


def test_a_filter_or_no_propagation_is_respected(root: logging.Logger) -> None:
    taking = Taking()
    root.handlers[:] = [taking]
    filtered = logging.getLogger("t.fields.filtered")
    filtered.addFilter(lambda record: False)
    log_fields(filtered, logging.INFO, "request", {})
    alone = logging.getLogger("t.fields.alone")
    alone.propagate = False
    log_fields(alone, logging.INFO, "request", {})
    assert taking.fields == [] and taking.records == []

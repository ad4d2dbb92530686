"""The usage stream layout: one entry per flush, older one-record entries still read."""

from __future__ import annotations

import pytest

from live import usage_codec
from live.access_table import UsageRecord


def record(n: int, request_id: str = "") -> UsageRecord:
    return UsageRecord(
        ts_s=1_764_000_000.25 + n, request_id=request_id or f"req-{n}", tenant="acme",
        model="llama", pool="aws:us-east-1:h100", provider="aws", region="us-east-1",
        prompt_tokens=10 + n, completion_tokens=n, cost_nusd=1_000 * n, status="ok",
        est_tokens=99, uid=f"e.{n:x}",
    )  # fmt: skip


def test_a_flush_round_trips_every_field_in_order() -> None:
    fields = usage_codec.encode([record(1), record(2, request_id='quote"and,comma')])
    assert usage_codec.is_batch(fields)
    decoded = usage_codec.decode(fields)
    assert [d["id"] for d in decoded] == ["req-1", 'quote"and,comma']
    assert decoded[0] == {
        "ts": "1764000001.250", "id": "req-1", "tenant": "acme", "model": "llama",
        "pool": "aws:us-east-1:h100", "provider": "aws", "region": "us-east-1",
        "prompt_tokens": "11", "completion_tokens": "1", "cost_nusd": "1000", "status": "ok",
        "uid": "e.1",
    }  # fmt: skip


def test_an_entry_of_the_older_layout_is_one_record() -> None:
    old = {"ts": "1.0", "id": "r", "tenant": "t"}
    assert not usage_codec.is_batch(old)
    assert usage_codec.decode(old) == [old]


@pytest.mark.parametrize("blob", ["[1, 2", '{"a": 1}', "[[1], 2]", "null"])
def test_a_batch_that_is_not_an_array_of_arrays_is_refused(blob: str) -> None:
    with pytest.raises(ValueError, match="usage batch"):
        usage_codec.decode({usage_codec.RECORDS_FIELD: blob})


def test_a_short_record_decodes_without_its_missing_names() -> None:
    [short] = usage_codec.decode({usage_codec.RECORDS_FIELD: '[["1.0", "r"]]'})
    assert short == {"ts": "1.0", "id": "r"}

"""Pure: stream entries to ledger rows, and rows to spend per budget period."""

from __future__ import annotations

import orjson

from live import usage_codec
from live.usage_rollups import period_ids
from store.records import LedgerRow
from store.usage_rows import idempotency_id, spend_deltas, to_batch

FIELDS = {
    "ts": "1764000000.250", "id": "req-1", "tenant": "acme", "model": "llama",
    "pool": "aws:p", "provider": "aws", "region": "us-east-1", "prompt_tokens": "10",
    "completion_tokens": "5", "cost_nusd": "1500", "status": "ok",
}  # fmt: skip


def test_an_entry_becomes_one_row_in_ms_and_nano_usd() -> None:
    [row] = to_batch([("1-0", FIELDS)]).rows
    assert row.idempotency_id == idempotency_id("1-0", "req-1") == "1-0/req-1"
    assert (row.ts_ms, row.cost_nusd, row.prompt_tokens) == (1_764_000_000_250, 1500, 10)


def test_a_repeated_entry_is_one_row_but_acknowledged_twice() -> None:
    batch = to_batch([("1-0", FIELDS), ("1-0", FIELDS), ("2-0", FIELDS)])
    assert [r.idempotency_id for r in batch.rows] == ["1-0/req-1", "2-0/req-1"]
    assert batch.entry_ids == ["1-0", "1-0", "2-0"]


def test_a_record_with_a_uid_has_one_idempotency_id_whatever_entry_holds_it() -> None:
    # A gateway replaying its journal writes a record again in a new entry.
    first = to_batch([("1-0", {**FIELDS, "uid": "e1.7"})]).rows
    again = to_batch([("9-0", {**FIELDS, "uid": "e1.7"})]).rows
    other = to_batch([("9-0", {**FIELDS, "uid": "e1.8"})]).rows
    assert [r.idempotency_id for r in first] == [r.idempotency_id for r in again] == ["u/e1.7"]
    assert [r.idempotency_id for r in other] == ["u/e1.8"]


def test_malformed_entries_are_set_apart() -> None:
    bad = [
        ("1-0", {**FIELDS, "cost_nusd": "-1"}),
        ("2-0", {k: v for k, v in FIELDS.items() if k != "tenant"}),
        ("3-0", {**FIELDS, "ts": "nan"}),
        ("4-0", {}),
    ]
    batch = to_batch([*bad, ("5-0", FIELDS)])
    assert batch.malformed == ["1-0", "2-0", "3-0", "4-0"]
    assert [r.idempotency_id for r in batch.rows] == ["5-0/req-1"]


def test_spend_counts_each_row_in_its_hour_day_and_month() -> None:
    rows = to_batch([("1-0", FIELDS), ("2-0", FIELDS), ("3-0", {**FIELDS, "tenant": "b"})]).rows
    hour, day, month = period_ids(1_764_000_000.25)
    deltas = spend_deltas(rows)
    assert deltas[("acme", hour)] == deltas[("acme", day)] == deltas[("acme", month)] == (3000, 2)
    assert deltas[("b", month)] == (1500, 1)
    assert len(deltas) == 6


def test_a_batch_entry_keeps_each_record_apart_and_sets_malformed_ones_aside() -> None:
    # As a gateway flush encodes them (usage_codec.encode): numbers as JSON numbers.
    good = ["1764000000.250", "req-1", "acme", "llama", "aws:p", "aws", "us-east-1",
            10, 5, 1500, "ok", "e1.1"]  # fmt: skip
    as_text = [*good[:7], "10", "5", "1500", "ok", "e1.2"]
    older = good[:11]  # written before records had a uid
    bad = [
        [*good[:9], 1.5, "ok", "e1.3"],  # a cost that is not a whole number
        [*good[:9], True, "ok", "e1.4"],
        [good[0], "req-1", None, *good[3:11], "e1.5"],  # no tenant
        [*good[:7], -1, 5, 1500, "ok", "e1.6"],
        good[:9],  # too short to have a cost
        [float("inf"), *good[1:11], "e1.7"],
    ]
    fields = {usage_codec.RECORDS_FIELD: orjson.dumps([good, as_text, older, *bad]).decode()}
    batch = to_batch([("7-0", fields)])
    assert [r.idempotency_id for r in batch.rows] == ["u/e1.1", "u/e1.2", "7-0/2/req-1"]
    assert batch.rows[0] == batch.rows[1]._replace(idempotency_id="u/e1.1")
    assert batch.rows[0] == LedgerRow(
        "u/e1.1", "req-1", "acme", "llama", "aws:p", "aws", "us-east-1",
        10, 5, 1500, "ok", 1_764_000_000_250,
    )  # fmt: skip
    assert batch.malformed == [f"7-0#{place}" for place in range(3, 9)]

"""Pure: usage stream entries -> ledger rows, and ledger rows -> spend per budget period.

No I/O here, so the consumer's accounting can be tested without Redis or a database.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from live import usage_codec
from live.usage_rollups import period_ids
from store.records import LedgerRow


@dataclass(frozen=True)
class Batch:
    """A batch of stream entries as the store will take them.

    ``rows``: one per well-formed entry, each idempotency id once. ``malformed``: the ids of
    entries (or ``<entry id>#<place>`` of records) that cannot be a ledger row (acknowledged
    and logged, never retried: they would block the stream forever). ``entry_ids``: every
    entry id of the batch, all of which are acknowledged once the rows are committed."""

    rows: list[LedgerRow] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)
    entry_ids: list[str] = field(default_factory=list)


def idempotency_id(entry_id: str, request_id: str, index: int | None = None, uid: str = "") -> str:
    """The ledger's unique id of one record.

    With a ``uid`` (the gateway's usage journal stamps every record with one, unique
    across processes and restarts): ``u/{uid}``, whatever entry holds the record, so a
    record a restarted gateway wrote again (it died after its flush reached Redis and
    before its journal said so) is stored once.

    Without (records of older gateways): the stream entry id, which one XADD makes
    unique, then the record's place in the entry (``index``; None for an entry of the
    older one-record layout), joined with the request id, because a Redis that restarted
    empty (or failed over to a replica with a slower clock) may hand out an entry id
    again. The place keeps two records apart when clients sent the same request id."""
    if uid:
        return f"u/{uid}"
    if index is None:
        return f"{entry_id}/{request_id}"
    return f"{entry_id}/{index}/{request_id}"


# Positions in a record (``usage_codec.FIELDS``) of the values after the first ten.
_STATUS, _UID = 10, 11
# Longest text kept of each text column, as the ledger's schema sizes them.
_ID_MAX, _TENANT_MAX, _NAME_MAX, _PROVIDER_MAX, _STATUS_MAX = 128, 128, 256, 64, 32


def _text(value: Any, limit: int) -> str:
    if value is None:
        return ""
    return (value if type(value) is str else str(value))[:limit]


def _count(value: Any) -> int:
    # An int, or the text of one; 1.5, "1.5", true and null are malformed, as they were
    # when every value went through str() first.
    number = value if type(value) is int else int(str(value))
    if number < 0:
        raise ValueError("negative count")
    return number


def _row(entry_id: str, index: int | None, values: Sequence[Any]) -> LedgerRow:
    # Raises KeyError, ValueError or TypeError on a malformed record. Runs once per
    # served request in the consumer: values are unpacked once, no dict is built.
    if len(values) < _STATUS:
        raise KeyError("a required value is missing")
    ts, request_id, tenant, model, pool, provider, region, prompt, completion, cost = values[:10]
    if tenant is None or ts is None:
        raise KeyError("no tenant or no time")
    ts_s = float(ts) if type(ts) in (int, float) else float(str(ts))
    if not math.isfinite(ts_s) or ts_s < 0:
        raise ValueError("negative or non-finite time")
    request_id = _text(request_id, _ID_MAX)
    size = len(values)
    uid = _text(values[_UID], _ID_MAX) if size > _UID else ""
    return LedgerRow(
        idempotency_id(entry_id, request_id, index, uid),
        request_id,
        _text(tenant, _TENANT_MAX),
        _text(model, _NAME_MAX),
        _text(pool, _NAME_MAX),
        _text(provider, _PROVIDER_MAX),
        _text(region, _ID_MAX),
        _count(prompt),
        _count(completion),
        _count(cost),
        _text(values[_STATUS], _STATUS_MAX) if size > _STATUS else "",
        round(ts_s * 1000),
    )


def to_batch(entries: Iterable[tuple[str, Mapping[str, str]]]) -> Batch:
    """Turn ``(entry id, fields)`` pairs from the usage stream (as ``live.usage_codec``
    lays them out) into ledger rows, dropping repeated records. A malformed entry is
    named by its id, a malformed record inside a batch entry by ``<entry id>#<place>``."""
    batch = Batch()
    seen: set[str] = set()
    for entry_id, fields in entries:
        batch.entry_ids.append(entry_id)
        try:
            records = usage_codec.batch_rows(fields)
        except ValueError:
            batch.malformed.append(entry_id)
            continue
        if records is None:  # the older layout: the entry is one record, by field name
            records = [[fields.get(name) for name in usage_codec.FIELDS]]
            places: Iterable[int | None] = (None,)
        else:
            places = range(len(records))
        for place, record in zip(places, records, strict=True):
            try:
                row = _row(entry_id, place, record)
            except (KeyError, ValueError, TypeError):
                batch.malformed.append(entry_id if place is None else f"{entry_id}#{place}")
                continue
            if row.idempotency_id not in seen:
                seen.add(row.idempotency_id)
                batch.rows.append(row)
    return batch


def spend_deltas(rows: Iterable[LedgerRow]) -> dict[tuple[str, str], tuple[int, int]]:
    """(tenant, period id) -> (nano-USD, requests) that ``rows`` add to each budget
    period (hour, day and month of each row's time, as admission counts them)."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for row in rows:
        for period in period_ids(row.ts_ms / 1000):
            cost, requests = out.get((row.tenant, period), (0, 0))
            out[(row.tenant, period)] = (cost + row.cost_nusd, requests + 1)
    return out

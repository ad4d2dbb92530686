"""Pure: usage stream entries -> ledger rows, and ledger rows -> spend per budget period.

No I/O here, so the consumer's accounting can be tested without Redis or a database.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from live import usage_codec
from live.access_table import period_ids
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


def _row(entry_id: str, index: int | None, fields: Mapping[str, str]) -> LedgerRow:
    # Raises KeyError or ValueError on a malformed entry.
    ts_s = float(fields["ts"])
    prompt, completion = int(fields["prompt_tokens"]), int(fields["completion_tokens"])
    cost = int(fields["cost_nusd"])
    if not math.isfinite(ts_s) or ts_s < 0 or min(prompt, completion, cost) < 0:
        raise ValueError("negative or non-finite number")
    request_id = fields.get("id", "")[:128]
    return LedgerRow(
        idempotency_id=idempotency_id(entry_id, request_id, index, fields.get("uid", "")[:128]),
        request_id=request_id,
        tenant=fields["tenant"][:128],
        model=fields.get("model", "")[:256],
        pool=fields.get("pool", "")[:256],
        provider=fields.get("provider", "")[:64],
        region=fields.get("region", "")[:128],
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost_nusd=cost,
        status=fields.get("status", "")[:32],
        ts_ms=round(ts_s * 1000),
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
            records = usage_codec.decode(fields)
        except ValueError:
            batch.malformed.append(entry_id)
            continue
        single = not usage_codec.is_batch(fields)
        for index, record in enumerate(records):
            try:
                row = _row(entry_id, None if single else index, record)
            except (KeyError, ValueError):
                batch.malformed.append(entry_id if single else f"{entry_id}#{index}")
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

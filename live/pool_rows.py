"""One pool's live row (``router.snapshot.PoolRow``) from what the live tables hold: the
folded observations (``live.observations``) and the pool's announced hashes (replicas,
health, price, ejections). Pure: ``live.tables`` and ``live.table_reader`` do the I/O."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from live.observations import ObservationFold, PoolEstimates
from live.replica_health import parse_ejections
from router.health import HealthRecord
from router.snapshot import PoolRow

__all__ = ["DRAINED", "SlowRows", "build_rows", "decode_hash", "entries", "text"]

# A pool's hashes in reply order: replicas, health, price, ejections.
SlowRows = dict[str, tuple[dict[str, str], dict[str, str], dict[str, str], dict[str, str]]]

# Field prefix in pool:{id}:replicas: one ``drain:<base URL>`` field per drained replica,
# so draining and uncordoning are single HSET/HDEL calls, atomic without a script.
DRAINED = "drain:"


def _f(raw: Mapping[str, str], key: str, default: float = float("nan")) -> float:
    value = raw.get(key)
    if value is None:
        return default
    try:
        out = float(value)
    except ValueError:
        return default
    return out if math.isfinite(out) else default


def _endpoints(raw: str | None) -> tuple[str, ...]:
    """Published replica URLs; a malformed value counts as none published."""
    if not raw:
        return ()
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return ()
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str) and v.startswith(("http://", "https://")))


def _percentiles(samples: Iterable[float]) -> tuple[float, float]:
    values = np.fromiter(samples, dtype=np.float64)
    if not values.size:
        return float("nan"), float("nan")
    p50, p99 = np.percentile(values, [50, 99])
    return float(p50), float(p99)


def entries(reply: Any) -> list[tuple[str, bytes]]:
    """``(id, value)`` of the observation entries in an XRANGE reply."""
    out = []
    for entry_id, fields in reply or ():
        value = fields.get(b"b") if isinstance(fields, dict) else None
        if value is not None:
            out.append((text(entry_id), value))
    return out


def build_rows(
    ids: Sequence[str],
    fold: ObservationFold,
    slow: SlowRows,
    now_ms: int,
    replica_ttl_ms: int,
    exclude_replica: str = "",
    *,
    with_samples: bool,
) -> dict[str, PoolRow]:
    """Rows for ``ids`` from the folded observations and the pools' hashes."""
    inflight = fold.inflight(now_ms, replica_ttl_ms, exclude_replica)
    empty: dict[str, str] = {}
    rows: dict[str, PoolRow] = {}
    for pid in ids:
        replicas, health, price, ejections = slow.get(pid, (empty, empty, empty, empty))
        est = fold.pools.get(pid)
        if est is None:
            est = PoolEstimates()
        nan = float("nan")
        ttft_p50, ttft_p99 = _percentiles(est.ttft_recent) if with_samples else (nan, nan)
        tpot_p50, tpot_p99 = _percentiles(est.tpot_recent) if with_samples else (nan, nan)
        rows[pid] = PoolRow(
            ttft_ewma_ms=est.ttft_ms,
            tpot_ewma_ms=est.tpot_ms,
            ttft_at_s=est.ttft_at_ms / 1000.0,
            tpot_at_s=est.tpot_at_ms / 1000.0,
            ttft_p50_ms=ttft_p50,
            ttft_p99_ms=ttft_p99,
            tpot_p50_ms=tpot_p50,
            tpot_p99_ms=tpot_p99,
            samples=est.samples,
            rtt_ms=est.rtt_ms,
            errors=est.errors,
            inflight=max(inflight.get(pid, 0.0), 0.0),
            ready_replicas=_f(replicas, "ready"),
            target_replicas=_f(replicas, "target"),
            endpoints=_endpoints(replicas.get("endpoints")),
            drained=frozenset(k[len(DRAINED) :] for k in replicas if k.startswith(DRAINED)),
            ejected=parse_ejections(ejections),
            health=HealthRecord.from_fields(health),
            usd_per_gpu_hour=_f(price, "usd_per_gpu_hour"),
            price_source=price.get("source", ""),
            price_fetched_at_s=_f(price, "fetched_at_s", 0.0),
            price_stale=price.get("stale") == "1",
        )
    return rows


def text(value: bytes | str) -> str:
    """A Redis reply value as text."""
    return value.decode() if isinstance(value, bytes) else value


def decode_hash(value: Any) -> dict[str, str]:
    """An HGETALL reply as a dict of text."""
    return {text(k): text(v) for k, v in (value or {}).items()}

"""What gateways measure about pools, as one Redis stream that every reader folds itself.

Each gateway replica appends one entry per flush to the observations stream: its
absolute in-flight counts (its heartbeat too) and, per pool, the latency observations
and outcomes since its last flush. The health probe appends round-trip times the same
way. Readers fold the entries in stream order into the latency EWMAs, recent-sample
percentiles, outcome counters and the in-flight sum over live replicas.

Why a stream: a flush is then one XADD and a refresh one XREAD, whatever the number of
pools and gateway replicas. Per-pool EWMA scripts, sample lists and an in-flight sum
cost a gateway about 90 Redis commands per flush and 34 per refresh, so at a fixed total
load Redis work grew with the number of gateway replicas (5x from 1 to 16 replicas).

Folding is deterministic: readers that start from the same state and read the same
entries hold the same estimates. A reader that starts late takes a checkpoint (a fold
state some reader wrote with the stream id it is current to) and folds the entries after
it. Estimates are statistics: entries lost to trimming or to a Redis restart make them
staler, never wrong in kind. Nothing here does I/O (``live.tables`` does).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from router.snapshot import EWMA_ALPHA

# Recent samples kept per pool and kind, for the p50/p99 that operators read.
SAMPLES_KEPT = 256


@dataclass
class PoolObservations:
    """Observations of one pool gathered in-process between two flushes (ms)."""

    ttft_ms: list[float] = field(default_factory=list)
    tpot_ms: list[float] = field(default_factory=list)
    ok: int = 0
    errors: int = 0


def encode_flush(
    replica_id: str,
    now_ms: int,
    inflight: Mapping[str, int],
    observations: Mapping[str, PoolObservations],
) -> bytes:
    """One flush as a stream entry value: ``inflight`` is absolute (requests) and is the
    replica's heartbeat at ``now_ms`` (unix ms); observations are additive."""
    obs = {
        pool: [o.ok, o.errors, [round(x, 2) for x in o.ttft_ms], [round(x, 2) for x in o.tpot_ms]]
        for pool, o in observations.items()
    }
    return orjson.dumps({"r": replica_id, "t": now_ms, "i": dict(inflight), "o": obs})


def encode_release(replica_id: str, now_ms: int) -> bytes:
    """The entry that takes ``replica_id``'s in-flight share out at once (shutdown)."""
    return orjson.dumps({"r": replica_id, "t": now_ms, "x": 1})


def encode_rtt(now_ms: int, rtt_ms: Mapping[str, float]) -> bytes:
    """Measured gateway-to-pool round-trip times (ms), one EWMA sample per pool."""
    return orjson.dumps({"t": now_ms, "rtt": dict(rtt_ms)})


def encode_clear(now_ms: int, pool_ids: Sequence[str]) -> bytes:
    """The entry after which ``pool_ids`` have no estimates (a pool removed or reset)."""
    return orjson.dumps({"t": now_ms, "c": list(pool_ids)})


@dataclass
class PoolEstimates:
    """One pool's folded estimates. NaN means not measured; ``*_at_ms`` is when the
    estimate was last fed (unix ms, 0 = never)."""

    ttft_ms: float = math.nan
    ttft_at_ms: int = 0
    tpot_ms: float = math.nan
    tpot_at_ms: int = 0
    rtt_ms: float = math.nan
    samples: int = 0
    errors: int = 0
    ttft_recent: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))
    tpot_recent: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))


def _ewma(current: float, values: Sequence[float]) -> float:
    """EWMA after ``len(values)`` updates with their mean: the same as that many single
    updates with an equal value, so flush batching keeps the estimate's time constant."""
    mean = sum(values) / len(values)
    if math.isnan(current):
        return mean
    return current + (1 - (1 - EWMA_ALPHA) ** len(values)) * (mean - current)


class ObservationFold:
    """The fold of the observations stream up to ``last_id``. Not thread-safe."""

    def __init__(self) -> None:
        self.last_id = "0-0"
        self.pools: dict[str, PoolEstimates] = {}
        # Gateway replica id -> (last heartbeat, unix ms; its in-flight counts).
        self.shares: dict[str, tuple[int, dict[str, int]]] = {}

    def _pool(self, pool_id: str) -> PoolEstimates:
        est = self.pools.get(pool_id)
        if est is None:
            est = self.pools[pool_id] = PoolEstimates()
        return est

    def apply(self, entries: Iterable[tuple[str, bytes]]) -> int:
        """Fold ``(stream id, value)`` entries in stream order; returns how many were
        new. Entries at or before ``last_id`` are skipped (idempotent), and a value
        that does not decode is skipped too (a foreign writer must not stop the fold)."""
        n = 0
        for entry_id, raw in entries:
            if not _after(entry_id, self.last_id):
                continue
            self.last_id = entry_id
            try:
                value = orjson.loads(raw)
                self._apply(value)
            except (orjson.JSONDecodeError, TypeError, ValueError, KeyError, IndexError):
                continue
            n += 1
        return n

    def _apply(self, value: dict[str, Any]) -> None:
        at_ms = int(value["t"])
        if "c" in value:
            for pool_id in value["c"]:
                self.pools.pop(pool_id, None)
        if "rtt" in value:
            for pool_id, ms in value["rtt"].items():
                est = self._pool(pool_id)
                cur = est.rtt_ms
                x = float(ms)
                est.rtt_ms = x if math.isnan(cur) else cur + EWMA_ALPHA * (x - cur)
        replica = value.get("r")
        if replica is None:
            return
        if value.get("x"):
            self.shares.pop(replica, None)
            return
        self.shares[replica] = (at_ms, {str(k): int(v) for k, v in value["i"].items()})
        for pool_id, (ok, errors, ttft, tpot) in value["o"].items():
            est = self._pool(pool_id)
            est.samples += int(ok)
            est.errors += int(errors)
            if ttft:
                est.ttft_ms, est.ttft_at_ms = _ewma(est.ttft_ms, ttft), at_ms
                est.ttft_recent.extend(ttft)
            if tpot:
                est.tpot_ms, est.tpot_at_ms = _ewma(est.tpot_ms, tpot), at_ms
                est.tpot_recent.extend(tpot)

    def inflight(self, now_ms: int, ttl_ms: int, exclude_replica: str = "") -> dict[str, float]:
        """Requests in flight per pool, summed over replicas whose last heartbeat is
        within ``ttl_ms`` of ``now_ms``, leaving out ``exclude_replica``. Shares of
        replicas silent for longer are dropped: a dead replica's share expires."""
        cutoff = now_ms - ttl_ms
        out: dict[str, float] = {}
        for replica, (at_ms, counts) in list(self.shares.items()):
            if at_ms < cutoff:
                del self.shares[replica]
                continue
            if replica == exclude_replica:
                continue
            for pool_id, n in counts.items():
                out[pool_id] = out.get(pool_id, 0.0) + n
        return out

    def to_checkpoint(self) -> bytes:
        """The fold as a value for the checkpoint key (``from_checkpoint`` reads it)."""
        pools = {pid: _pool_row(e) for pid, e in self.pools.items()}
        shares = {r: [at, counts] for r, (at, counts) in self.shares.items()}
        return orjson.dumps({"id": self.last_id, "pools": pools, "shares": shares})

    @classmethod
    def from_checkpoint(cls, raw: bytes | str | None) -> ObservationFold:
        """A fold restored from a checkpoint value; an empty fold if there is none or
        it does not decode (the stream's retained entries then rebuild it)."""
        fold = cls()
        if not raw:
            return fold
        try:
            value = orjson.loads(raw)
            for pid, p in value["pools"].items():
                est = fold._pool(pid)
                est.ttft_ms, est.ttft_at_ms = _nan(p[0]), int(p[1])
                est.tpot_ms, est.tpot_at_ms = _nan(p[2]), int(p[3])
                est.rtt_ms, est.samples, est.errors = _nan(p[4]), int(p[5]), int(p[6])
                est.ttft_recent.extend(float(x) for x in p[7])
                est.tpot_recent.extend(float(x) for x in p[8])
            for replica, (at_ms, counts) in value["shares"].items():
                fold.shares[replica] = (int(at_ms), {str(k): int(v) for k, v in counts.items()})
            fold.last_id = str(value["id"])
        except (orjson.JSONDecodeError, TypeError, ValueError, KeyError, IndexError):
            return cls()
        return fold


def _after(entry_id: str, last_id: str) -> bool:
    ms, _, seq = entry_id.partition("-")
    lms, _, lseq = last_id.partition("-")
    return (int(ms), int(seq or 0)) > (int(lms), int(lseq or 0))


def stream_went_back(written_id: str, last_id: str) -> bool:
    """Whether an id Redis just gave a new entry is not after ``last_id``: the stream
    was recreated (Redis restarted empty on a host whose clock is behind), so a reader
    must start again from its beginning or it would skip every new entry."""
    return not _after(written_id, last_id)


def _pool_row(e: PoolEstimates) -> list[Any]:
    return [
        _num(e.ttft_ms), e.ttft_at_ms, _num(e.tpot_ms), e.tpot_at_ms, _num(e.rtt_ms),
        e.samples, e.errors, list(e.ttft_recent), list(e.tpot_recent),
    ]  # fmt: skip


def _num(x: float) -> float | None:
    return None if math.isnan(x) else x


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)
